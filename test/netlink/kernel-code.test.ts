/**
 * The kernel code's key a held-as-sent proof records (src/netlink/kernel-code.ts): vmlinux's GNU
 * build-id parsed from its ELF notes, the loaded netfilter modules' build-ids, and the boot's key
 * where vmlinux names none. Files a test writes (test/helpers/kernel-code.ts), no kernel.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildIdOf, kernelCode, SYSTEM_PATHS } from '../../src/netlink/kernel-code.js';
import { buildId, fakeKernel, note, notesWithBuildId } from '../helpers/kernel-code.js';

const A = buildId('a'), B = buildId('b'), M1 = buildId('1'), M2 = buildId('2');

describe('buildIdOf', () => {
  it('finds the GNU build-id among other notes; none, two, or a build-id of another name: none', () => {
    expect(buildIdOf(notesWithBuildId(A))).toBe(A);
    expect(buildIdOf(note(3, 'GNU', Buffer.from(M1, 'hex')))).toBe(M1);
    expect(buildIdOf(Buffer.alloc(0))).toBeUndefined();
    expect(buildIdOf(note(6, 'Linux', Buffer.from([1, 1, 0, 0])))).toBeUndefined();
    expect(buildIdOf(Buffer.concat([notesWithBuildId(A), note(3, 'GNU', Buffer.from(B, 'hex'))]))).toBeUndefined();
    expect(buildIdOf(note(3, 'Xen', Buffer.from(A, 'hex')))).toBeUndefined();
    expect(buildIdOf(note(3, 'GNUX', Buffer.from(A, 'hex')))).toBeUndefined();
    // A build-id too short to name a build.
    expect(buildIdOf(note(3, 'GNU', Buffer.from('abcd', 'hex')))).toBeUndefined();
    // Sizes past the buffer (a u32 near 2^32 too): none, no throw.
    const huge = Buffer.from(notesWithBuildId(A));
    huge.writeUInt32LE(0xfffffffd, 0);
    expect(buildIdOf(huge)).toBeUndefined();
  });

  it.skipIf(!existsSync(SYSTEM_PATHS.notes))("this machine's /sys/kernel/notes", () => {
    expect(buildIdOf(readFileSync(SYSTEM_PATHS.notes))).toMatch(/^[0-9a-f]{16,128}$/);
  });

  it('a notes file cut at every byte offset, or padded: never another id, never a throw', () => {
    const files = [notesWithBuildId(A), ...(existsSync(SYSTEM_PATHS.notes) ? [readFileSync(SYSTEM_PATHS.notes)] : [])];
    for (const whole of files) {
      const id = buildIdOf(whole);
      expect(id).toBeDefined();
      for (let n = 0; n < whole.length; n++) {
        const cut = buildIdOf(whole.subarray(0, n));
        // Cut inside a note: nothing; cut at a note's end after the build-id: still that id.
        expect(cut === undefined || cut === id, `cut at ${n}`).toBe(true);
      }
      for (let pad = 1; pad < 12; pad++) expect(buildIdOf(Buffer.concat([whole, Buffer.alloc(pad)]))).toBeUndefined();
    }
  });
});

describe('kernelCode', () => {
  it('keys on vmlinux and the loaded netfilter modules; another boot of the same code matches', () => {
    const k = fakeKernel({ vmlinux: A });
    k.setModule('nf_tables', M1);
    k.setModule('nft_ct', M2);
    k.setModule('ext4', buildId('e'));  // not netfilter: not recorded
    const key = k.code().key();
    expect(key).toEqual({ release: 'test-release', vmlinux: A, modules: { nf_tables: M1, nft_ct: M2 } });
    k.setBoot('22222222-2222-2222-2222-222222222222');
    expect(k.code().matches(key)).toBe(true);
    // Recorded, not loaded now (the commit loads it from disk): matches; asked again after the commit.
    k.setModule('nft_ct', undefined);
    expect(k.code().matches(key)).toBe(true);
    k.setModule('nft_ct', buildId('3'));
    expect(k.code().matches(key)).toBe(false);
    k.setModule('nft_ct', null);  // loaded, without a build-id to read
    expect(k.code().matches(key)).toBe(false);
    k.setModule('nft_ct', M2);
    k.setModule('nf_tables', buildId('4'));
    expect(k.code().matches(key)).toBe(false);
    k.setModule('nf_tables', M1);
    expect(k.code().matches(key)).toBe(true);
    k.setVmlinux(notesWithBuildId(B));
    expect(k.code().matches(key)).toBe(false);
  });

  it('another release, or a recorded key of no known form: no match', () => {
    const k = fakeKernel({ vmlinux: A });
    const key = k.code().key();
    expect(fakeKernel({ vmlinux: A, release: 'other' }).code().matches(key)).toBe(false);
    for (const bad of [undefined, null, 'test-release', {}, { release: 'test-release' }, { release: 'test-release', vmlinux: A },
      { release: 'test-release', vmlinux: A, modules: { '../x': M1 } }, { release: 'test-release', vmlinux: A, modules: { nf_tables: 1 } },
      { release: 'test-release', version: '#1 SMP PREEMPT_DYNAMIC @0' }]) {
      expect(k.code().matches(bad), JSON.stringify(bad)).toBe(false);
    }
  });

  it('without a vmlinux build-id, or with a loaded netfilter module that has none: the boot key, matched in that boot only', () => {
    const k = fakeKernel({ vmlinux: A });
    k.setVmlinux(undefined);
    const boot = k.code().key();
    expect(boot).toEqual({ release: 'test-release', version: '#1 SMP PREEMPT_DYNAMIC @0', boot: '11111111-1111-1111-1111-111111111111' });
    expect(k.code().matches(boot)).toBe(true);
    k.setBoot('22222222-2222-2222-2222-222222222222');
    expect(k.code().matches(boot)).toBe(false);
    k.setVmlinux(notesWithBuildId(A));
    k.setModule('nf_tables', null);
    expect(k.code().key()).toMatchObject({ boot: '22222222-2222-2222-2222-222222222222' });
    // No boot id either: nothing to name.
    writeFileSync(k.paths.bootId, '');
    expect(k.code().key()).toBeUndefined();
  });

  it('a kernel without loadable modules (no /proc/modules): vmlinux alone', () => {
    const k = fakeKernel({ vmlinux: A });
    const code = kernelCode({ ...k.paths, procModules: `${k.paths.procModules}-none` }, { release: 'r', version: 'v' });
    expect(code.key()).toEqual({ release: 'r', vmlinux: A, modules: {} });
  });

  it("a vmlinux notes file cut at every byte offset: the boot's key, never vmlinux's, and the proof made on the whole file does not match", () => {
    const k = fakeKernel({ vmlinux: A });
    const whole = notesWithBuildId(A);
    const proof = k.code().key();
    const idEnd = whole.indexOf(Buffer.from(A, 'hex')) + 20;
    for (let n = 0; n < whole.length; n++) {
      k.setVmlinux(whole.subarray(0, n));
      const code = k.code();
      const key = code.key();
      // Cut after the build-id's note and at a note's end, it is still read (the same id).
      if (key && 'vmlinux' in key) {
        expect(n, `cut at ${n}`).toBeGreaterThanOrEqual(idEnd);
        expect(key.vmlinux).toBe(A);
        expect(code.matches(proof)).toBe(true);
      } else {
        expect(key, `cut at ${n}`).toMatchObject({ boot: '11111111-1111-1111-1111-111111111111' });
        expect(code.matches(proof), `cut at ${n}`).toBe(false);
      }
    }
  });
});
