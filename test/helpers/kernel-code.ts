/**
 * Kernel code to name from files a test writes (src/netlink/kernel-code.ts's paths): vmlinux's
 * notes, the loaded modules' notes and list, the boot id. What a proof is made and checked against
 * without another kernel or a reboot.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { kernelCode, SYSTEM_PATHS, type KernelCode, type KernelPaths } from '../../src/netlink/kernel-code.js';
import { tempDir } from './tmp.js';

const LE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** One ELF note (4-byte aligned, this machine's byte order). */
export function note(type: number, name: string, desc: Buffer): Buffer {
  const n = Buffer.from(`${name}\0`, 'latin1');
  const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc((4 - (b.length % 4)) % 4)]);
  const head = Buffer.alloc(12);
  const w = (v: number, at: number) => (LE ? head.writeUInt32LE(v, at) : head.writeUInt32BE(v, at));
  w(n.length, 0);
  w(desc.length, 4);
  w(type, 8);
  return Buffer.concat([head, pad(n), pad(desc)]);
}

/** A notes file as vmlinux's looks: other notes around the GNU build-id (type 3). */
export function notesWithBuildId(id: string): Buffer {
  return Buffer.concat([note(6, 'Linux', Buffer.from([1, 1, 0, 0])), note(3, 'GNU', Buffer.from(id, 'hex')),
    note(0x100, 'Linux', Buffer.from('6.1.102-test\0', 'latin1')), note(19, 'Xen', Buffer.alloc(8, 0xff))]);
}

export const buildId = (c: string) => c.repeat(40).slice(0, 40);

export interface FakeKernel {
  paths: KernelPaths;
  /** A fresh KernelCode (what a new process reads). */
  code: () => KernelCode;
  setVmlinux: (notes: Buffer | undefined) => void;
  setBoot: (id: string) => void;
  /** A module loaded with this build-id (null: loaded without one), or not loaded (undefined). */
  setModule: (name: string, id: string | null | undefined) => void;
}

/**
 * A kernel in a temporary directory; `real` vmlinux: this machine's /sys/kernel/notes (what
 * a simulated boot keeps). Its modules are listed in its own /proc/modules.
 */
export function fakeKernel(options: { vmlinux?: string | 'real'; boot?: string; release?: string } = {}): FakeKernel {
  const root = tempDir('kernelcode');
  const paths: KernelPaths = {
    notes: options.vmlinux === 'real' ? SYSTEM_PATHS.notes : join(root, 'notes'),
    sysModule: join(root, 'module'),
    procModules: join(root, 'modules'),
    bootId: join(root, 'boot_id'),
  };
  mkdirSync(paths.sysModule);
  const loaded = new Set<string>();
  const writeList = () => writeFileSync(paths.procModules, [...loaded].map((m) => `${m} 16384 0 - Live 0x0000000000000000\n`).join(''));
  writeList();
  const fake: FakeKernel = {
    paths,
    code: () => kernelCode(paths, { release: options.release ?? 'test-release', version: '#1 SMP PREEMPT_DYNAMIC @0' }),
    setVmlinux: (notes) => {
      if (notes === undefined) rmSync(join(root, 'notes'), { force: true });
      else writeFileSync(join(root, 'notes'), notes);
    },
    setBoot: (id) => writeFileSync(paths.bootId, `${id}\n`),
    setModule: (name, id) => {
      const dir = join(paths.sysModule, name);
      rmSync(dir, { recursive: true, force: true });
      if (id === undefined) loaded.delete(name);
      else {
        loaded.add(name);
        mkdirSync(join(dir, 'notes'), { recursive: true });
        writeFileSync(join(dir, 'initstate'), 'live\n');
        if (id !== null) writeFileSync(join(dir, 'notes', '.note.gnu.build-id'), note(3, 'GNU', Buffer.from(id, 'hex')));
      }
      writeList();
    },
  };
  if (options.vmlinux !== 'real') fake.setVmlinux(notesWithBuildId(options.vmlinux ?? buildId('a')));
  fake.setBoot(options.boot ?? '11111111-1111-1111-1111-111111111111');
  return fake;
}
