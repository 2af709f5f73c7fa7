/**
 * apply's proof that the kernel holds what it sent, kept beside the compile cache entry
 * (src/keeper/held-proof.ts): a full echo that proved every rule of the entry held as sent on this
 * kernel code (vmlinux's and the netfilter modules' build-ids, src/netlink/kernel-code.ts) is
 * written down, and a later apply of the same entry on the same code, in this boot or another, asks
 * only the echoes its handles derive from, follows its commit from them and reads nothing back.
 * Other kernel code (before the commit, or a module the commit loaded), another entry, a commit that
 * did not add every rule, or no code to name (the in-memory kernel): the full echo, or the read-back,
 * as without a proof. A cold apply's proof is kept for the token its store gives the entry.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { checkOnce } from '../../src/keeper/oneshot.js';
import type { CommitResult } from '../../src/netlink/conn.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { buildId, fakeKernel, notesWithBuildId } from '../helpers/kernel-code.js';
import type { KernelCode } from '../../src/netlink/kernel-code.js';
import { open } from '../../src/netlink/socket.js';
import { watchedSocket } from '../helpers/watched-socket.js';

const N = 1500;
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

/** Chain c of n rules, one of them looking up an anonymous set (kube-proxy's kind). */
function yaml(n: number, anonymous = true): string {
  const rules = [...Array.from({ length: n }, (_, i) => `ip saddr ${ip(i)} tcp dport ${1 + i} counter accept`),
    ...(anonymous ? ['ip daddr { 192.0.2.1, 192.0.2.7 } tcp dport { 80, 443 } accept'] : [])];
  return ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c', '        type: filter', '        hook: forward',
    '        priority: filter', '        policy: accept', '        rules:', ...rules.map((r) => `          - ${JSON.stringify(r)}`), ''].join('\n');
}
const config = (n = N, anonymous = true): Config => parseConfig(yaml(n, anonymous), 'big.yaml');

/** The ruleset as the kernel holds it, handles and bytecode, its lines sorted (a hash set lists its elements in its seed's order). */
const heldRuleset = (ns: Netns) => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']).split('\n').sort().join('\n');
const chainRules = (ns: Netns) => ns.exec('nft', ['list', 'chain', 'ip', 'big', 'c']).split('\n').filter((l) => /accept|drop/.test(l) && !l.includes('policy'));

describe("apply's held-as-sent proof", { timeout: 120_000 }, () => {
  const ns = netnsPerTest('heldproof');

  /** An apply into a flushed namespace with the proof at `path` for entry `token`. */
  async function applyFlushed(path: string, token: string | undefined, kernel?: KernelCode | null, n = N,
    afterCommit?: () => void, anonymous = true) {
    ns.exec('nft', ['flush', 'ruleset']);
    const w = watchedSocket(ns, { kernel, ...(afterCommit ? { afterCommit: (r) => { afterCommit(); return r; } } : {}) });
    try {
      const r = await checkOnce(w.conn, config(n, anonymous), true, [], { proof: { path, ...(token !== undefined ? { token } : {}) } });
      expect(w.seen.commits).toHaveLength(1);
      return { r, commit: w.seen.commits[0]!, reads: w.seen.ruleReads };
    } finally {
      w.close();
    }
  }

  it('a first apply proves by the full echo and keeps it; a second of the same entry asks only the echo points, reads nothing, installs the same', async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    const first = await applyFlushed(path, 'entry-1');
    expect(first.commit.options.echo).toBe(true);
    expect(first.commit.options.digests).toBe(true);
    expect(first.r.held).toBe('proved');
    expect(existsSync(path)).toBe(true);
    const dumpFirst = heldRuleset(ns);

    const second = await applyFlushed(path, 'entry-1');
    expect(second.r.held).toBe('by-proof');
    // The table and chain ops come first; the chain's one run of new rules: its first and last.
    expect(second.commit.options.echo).toEqual([2, N + 2 + 2]);
    expect(second.commit.options.digests).toBeFalsy();
    expect((second.commit.result as CommitResult).handles?.size).toBe(2);
    // Followed from the derived handles (the anonymous set's rule too): nothing read after the commit.
    expect(second.reads).toBe(0);
    expect(second.r.ops).toBe(first.r.ops);
    expect(chainRules(ns)).toHaveLength(N + 1);
    expect(heldRuleset(ns)).toBe(dumpFirst);
    const check = await checkOnce(open({ netns: ns.path }), config(), false);
    expect(check.drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('another vmlinux, or another entry: the full echo, and the proof is taken anew', async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    const k = fakeKernel({ vmlinux: buildId('a') });
    await applyFlushed(path, 'entry-1', k.code());
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({ entry: 'entry-1', kernel: { release: 'test-release', vmlinux: buildId('a'), modules: {} } });
    k.setVmlinux(notesWithBuildId(buildId('b')));
    const otherKernel = await applyFlushed(path, 'entry-1', k.code());
    expect(otherKernel.commit.options.echo).toBe(true);
    expect(otherKernel.r.held).toBe('proved');
    const otherEntry = await applyFlushed(path, 'entry-2', k.code());
    expect(otherEntry.commit.options.echo).toBe(true);
    expect(otherEntry.r.held).toBe('proved');
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({ entry: 'entry-2', kernel: { release: 'test-release', vmlinux: buildId('b'), modules: {} } });
    expect((await applyFlushed(path, 'entry-2', k.code())).commit.options.echo).toEqual([2, N + 4]);
  });

  it("another boot of the same code uses the proof (this machine's vmlinux build-id); where vmlinux names none, the boot's key: the full echo", async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    const real = fakeKernel({ vmlinux: 'real' });
    expect((await applyFlushed(path, 'entry-1', real.code())).r.held).toBe('proved');
    const dump = heldRuleset(ns);
    real.setBoot('22222222-2222-2222-2222-222222222222');
    const afterBoot = await applyFlushed(path, 'entry-1', real.code());
    expect(afterBoot.r.held).toBe('by-proof');
    expect(afterBoot.commit.options.echo).toEqual([2, N + 4]);
    expect(afterBoot.reads).toBe(0);
    expect(heldRuleset(ns)).toBe(dump);

    // No vmlinux notes to read (or a truncated file): the key is the boot's, proved in boot 1 only.
    const none = fakeKernel({ vmlinux: buildId('a') });
    none.setVmlinux(notesWithBuildId(buildId('a')).subarray(0, 30));
    expect((await applyFlushed(path, 'entry-1', none.code())).r.held).toBe('proved');
    expect(JSON.parse(readFileSync(path, 'utf8')).kernel).toMatchObject({ boot: '11111111-1111-1111-1111-111111111111' });
    expect((await applyFlushed(path, 'entry-1', none.code())).r.held).toBe('by-proof');
    none.setBoot('22222222-2222-2222-2222-222222222222');
    const otherBoot = await applyFlushed(path, 'entry-1', none.code());
    expect(otherBoot.commit.options.echo).toBe(true);
    expect(otherBoot.r.held).toBe('proved');
    expect(heldRuleset(ns)).toBe(dump);
  });

  it('a recorded module loaded now with another build-id: the full echo; one the commit loads with another: read back, not held by proof', async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    const k = fakeKernel({ vmlinux: buildId('a') });
    k.setModule('nf_tables', buildId('1'));
    k.setModule('nft_counter', buildId('2'));
    await applyFlushed(path, 'entry-1', k.code());
    expect(JSON.parse(readFileSync(path, 'utf8')).kernel.modules).toEqual({ nf_tables: buildId('1'), nft_counter: buildId('2') });

    k.setModule('nft_counter', buildId('3'));
    const loadedOther = await applyFlushed(path, 'entry-1', k.code());
    expect(loadedOther.commit.options.echo).toBe(true);
    expect(loadedOther.r.held).toBe('proved');
    expect(JSON.parse(readFileSync(path, 'utf8')).kernel.modules).toEqual({ nf_tables: buildId('1'), nft_counter: buildId('3') });

    // Not loaded before the commit (a boot's first apply): the proof holds until the commit loads
    // the module, with another build-id; the rules are read back (by digest) and hold as desired.
    // (No anonymous set: the read-back is the module's, not that of a set not taken as held.)
    expect((await applyFlushed(path, 'entry-plain', k.code(), N, undefined, false)).r.held).toBe('proved');
    const dumpPlain = heldRuleset(ns);
    k.setModule('nft_counter', undefined);
    const byCommit = await applyFlushed(path, 'entry-plain', k.code(), N, () => k.setModule('nft_counter', buildId('4')), false);
    expect(byCommit.commit.options.echo).toEqual([2, N + 1]);
    expect(byCommit.r.held).toBeUndefined();
    expect(byCommit.reads).toBeGreaterThan(0);
    expect(heldRuleset(ns)).toBe(dumpPlain);
    const check = await checkOnce(open({ netns: ns.path }), config(N, false), false);
    expect(check.drift.flatMap((d) => d.drift)).toEqual([]);
    // Loaded with its own build-id by the commit: held by the proof, nothing read.
    k.setModule('nft_counter', undefined);
    const sameByCommit = await applyFlushed(path, 'entry-plain', k.code(), N, () => k.setModule('nft_counter', buildId('3')), false);
    expect(sameByCommit.r.held).toBe('by-proof');
    expect(sameByCommit.reads).toBe(0);
  });

  it("a cold apply (no token yet) proves for the token its store then gives: the next apply uses the proof", async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    const k = fakeKernel({ vmlinux: buildId('a') });
    const cold = await applyFlushed(path, undefined, k.code());
    expect(cold.commit.options.echo).toBe(true);
    expect(cold.r.held).toBe('proved');
    expect(existsSync(path)).toBe(false);
    expect(cold.r.keepProof!('entry-1')).toBe(true);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({ entry: 'entry-1', kernel: { release: 'test-release', vmlinux: buildId('a'), modules: {} } });
    const next = await applyFlushed(path, 'entry-1', k.code());
    expect(next.r.held).toBe('by-proof');
    expect(next.r.keepProof).toBeUndefined();
  });

  it('a commit that added only some of the rules proves nothing for the others: no proof kept', async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    ns.exec('nft', ['flush', 'ruleset']);
    // Chain c there already (an earlier config's install); this one adds chain d, followed from its full echo.
    // (No anonymous set: with one already in the table this commit was read back, which would pass without the check.)
    const withD = parseConfig(`${yaml(N, false)}      - name: d\n        rules:\n          - "tcp dport 22 accept"\n          - "tcp dport 23 drop"\n`, 'big.yaml');
    const w = watchedSocket(ns, { kernel: fakeKernel().code() });
    try {
      await checkOnce(w.conn, config(N, false), true);
      const r = await checkOnce(w.conn, withD, true, [], { proof: { path, token: 'entry-1' } });
      expect(w.seen.commits[1]!.options.echo).toBe(true);
      expect(r.ops).toBe(3);
      expect(w.seen.ruleReads).toBe(w.seen.commits[1]!.readsBefore);  // nothing read after it: followed from its echo
      expect(r.held).toBeUndefined();
    } finally {
      w.close();
    }
    expect(existsSync(path)).toBe(false);
    expect(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'd'])).toMatch('tcp dport 23 drop');
  });

  it('a connection without kernel code to name (an in-memory kernel names none): the full echo, no proof kept or read', async () => {
    const path = join(tempDir('heldproof'), 'compiled-x.held');
    writeFileSync(path, `${JSON.stringify({ entry: 'entry-1', kernel: 'undefined' })}\n`);
    const r = await applyFlushed(path, 'entry-1', null);
    expect(r.commit.options.echo).toBe(true);
    expect(r.r.held).toBeUndefined();
    expect(JSON.parse(readFileSync(path, 'utf8'))).toEqual({ entry: 'entry-1', kernel: 'undefined' });
  });

  it('the command: the cold apply proves, the next uses the proof; a changed config (a new entry) proves at its cold apply; a store that fails keeps none', async () => {
    const dir = tempDir('heldproof');
    const file = join(dir, 'big.yaml');
    const cache = join(dir, 'cache');
    writeFileSync(file, yaml(N));
    const apply = async () => {
      ns.exec('nft', ['flush', 'ruleset']);
      const a = await cli('apply', '--config', file, '--netns', ns.path, '--cache-dir', cache, '--progress');
      expect(a.code).toBe(0);
      expect(a.out).toMatch(`applied ${N + 3 + 2} operations in one batch`);
      return a.err;
    };
    // Compiled, committed with the full echo, stored: the proof kept for the stored entry's token.
    expect(await apply()).toMatch("the commit's full echo proved every rule held as sent");
    const held = readdirSync(cache).filter((f) => f.endsWith('.held'));
    expect(held).toHaveLength(1);
    const token = readFileSync(join(cache, held[0]!.replace(/\.held$/, '.encoded')), 'latin1').slice(0, 36);
    expect(JSON.parse(readFileSync(join(cache, held[0]!), 'utf8')).entry).toBe(token);
    const dump = heldRuleset(ns);
    expect(await apply()).toMatch("the commit's rules are held as sent by");
    expect(heldRuleset(ns)).toBe(dump);
    writeFileSync(file, yaml(N).replace('tcp dport 1 ', 'tcp dport 9 '));
    expect(await apply()).toMatch("the commit's full echo proved every rule held as sent");  // compiled, stored anew (a new token)
    expect(await apply()).toMatch("the commit's rules are held as sent by");

    // The entry cannot be stored (its name is a directory's): the commit's echo proves, nothing is kept.
    const failing = join(dir, 'failing');
    writeFileSync(file, yaml(N).replace('tcp dport 1 ', 'tcp dport 8 '));
    ns.exec('nft', ['flush', 'ruleset']);
    await cli('apply', '--config', file, '--netns', ns.path, '--cache-dir', failing);
    const entry = readdirSync(failing).find((f) => f.endsWith('.json'))!;
    rmSync(join(failing, entry));
    rmSync(join(failing, entry.replace(/\.json$/, '.held')), { force: true });
    mkdirSync(join(failing, entry, 'x'), { recursive: true });
    ns.exec('nft', ['flush', 'ruleset']);
    const a = await cli('apply', '--config', file, '--netns', ns.path, '--cache-dir', failing, '--progress');
    expect(a.code).toBe(0);
    expect(a.err).toMatch('was not stored in the compile cache');
    expect(a.err).not.toMatch('held as sent');
    expect(existsSync(join(failing, entry.replace(/\.json$/, '.held')))).toBe(false);
  });
});
