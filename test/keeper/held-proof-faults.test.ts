/**
 * Faults swept over apply's held-as-sent proof (`compiled-<hash>.held`, src/keeper/held-proof.ts):
 * - the file cut at every byte offset and each of its bytes changed (a bit flipped; every bit with
 *   NFK_HELD_PROOF_SWEEP=all): the apply never takes it as a proof unless it still reads as the
 *   same proof (only the final newline cut), asks the full echo, proves and writes it anew, and
 *   leaves the kernel as a clean apply does (`nft --debug=netlink list ruleset`);
 * - ENOSPC and EIO at every call of its write (src/base/atomic-file.ts's `io` seam), once and from
 *   then on, over no proof and over another entry's: the apply ends as a clean one, the kernel the
 *   same, under the name the old file whole or the new one whole, no temp file; the next apply uses
 *   what is there or proves anew;
 * - kill -9 of the command (`nfkeeper apply`, the built bundle) at file calls of the proof's write
 *   (test/reliability/kill-at-point.mjs armed at the proof's temp file; by default the temp file's
 *   write, the rename, the directory's fsync; every one with NFK_HELD_PROOF_SWEEP=all): its commit was
 *   made, so the kernel holds it whole; the next apply is in sync and writes nothing; into a
 *   flushed namespace it uses the proof or proves anew, and leaves no temp file of the killed write.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { io } from '../../src/base/atomic-file.js';
import { parseConfig } from '../../src/config/config.js';
import { checkOnce } from '../../src/keeper/oneshot.js';
import { Batch } from '../../src/netlink/batch.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { netnsPerTest, generationOf } from '../helpers/netns-hooks.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { watchedSocket } from '../helpers/watched-socket.js';

const HOOK = fileURLToPath(new URL('../reliability/kill-at-point.mjs', import.meta.url));
const ALL = process.env.NFK_HELD_PROOF_SWEEP === 'all';

const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
function yaml(n: number): string {
  const rules = [...Array.from({ length: n }, (_, i) => `ip saddr ${ip(i)} tcp dport ${1 + i} counter accept`),
    'ip daddr { 192.0.2.1, 192.0.2.7 } tcp dport { 80, 443 } accept'];
  return ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c', '        type: filter', '        hook: forward',
    '        priority: filter', '        policy: accept', '        rules:', ...rules.map((r) => `          - ${JSON.stringify(r)}`), ''].join('\n');
}
/** Small: one apply per variant. */
const N = 60;
const config = parseConfig(yaml(N), 'big.yaml');

/** The ruleset as the kernel holds it, its lines sorted (a hash set lists its elements in its seed's order). */
const heldRuleset = (ns: Netns) => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']).split('\n').sort().join('\n');
const temps = (dir: string) => readdirSync(dir).filter((f) => f.includes('.tmp-'));

describe("apply's held-as-sent proof, damaged or its write failed or killed", { timeout: 300_000 }, () => {
  const ns = netnsPerTest('heldfault');
  const real = { ...io };
  afterEach(() => Object.assign(io, real));

  let flusher: NftSocket | undefined;
  afterEach(() => {
    flusher?.close();
    flusher = undefined;
  });
  /** An apply (in process, a new socket) into a namespace emptied (the table removed over a socket of the test's: faster than nft). */
  async function applyFlushed(path: string, token = 'entry-1') {
    flusher ??= open({ netns: ns.path });
    if ((await flusher.listTables()).length > 0) await flusher.commit(new Batch().delete('table', { family: 'ip', name: 'big' }));
    const w = watchedSocket(ns);
    try {
      const r = await checkOnce(w.conn, config, true, [], { proof: { path, token } });
      expect(w.seen.commits).toHaveLength(1);
      return { r, commit: w.seen.commits[0]! };
    } finally {
      w.close();
    }
  }

  it('the proof cut at every byte offset and each byte changed: taken only while it reads as the same proof; else the full echo, proved anew, the kernel as a clean apply leaves it', async () => {
    const dir = tempDir('heldfault');
    const path = join(dir, 'compiled-x.held');
    const clean = await applyFlushed(path);
    expect(clean.r.held).toBe('proved');
    const whole = readFileSync(path);
    const want = { dump: heldRuleset(ns), ops: clean.r.ops };
    const proof = JSON.parse(whole.toString('utf8')) as unknown;
    expect(whole.length).toBeGreaterThan(60);
    const variants: { what: string; bytes: Buffer }[] = [];
    for (let at = 0; at < whole.length; at++) variants.push({ what: `cut at ${at}`, bytes: whole.subarray(0, at) });
    for (let at = 0; at < whole.length; at++) {
      for (const bit of ALL ? [0, 1, 2, 3, 4, 5, 6, 7] : [at % 8]) {
        const b = Buffer.from(whole);
        b[at] = b[at]! ^ (1 << bit);
        variants.push({ what: `byte ${at} bit ${bit}`, bytes: b });
      }
    }
    let same = 0;
    for (const v of variants) {
      writeFileSync(path, v.bytes);
      // What the damaged file says, read as the reader reads it.
      let parsed: unknown;
      try {
        parsed = JSON.parse(v.bytes.toString('utf8'));
      } catch {
        parsed = undefined;
      }
      const still = JSON.stringify(parsed) === JSON.stringify(proof);
      const a = await applyFlushed(path);
      expect(a.r.ops, v.what).toBe(want.ops);
      if (still) {
        same++;
        expect(a.r.held, v.what).toBe('by-proof');
        expect(a.commit.options.echo, v.what).not.toBe(true);
      } else {
        expect(a.commit.options.echo, v.what).toBe(true);
        expect(a.commit.options.digests, v.what).toBe(true);
        expect(a.r.held, v.what).toBe('proved');
        expect(readFileSync(path).equals(whole), `${v.what}: proved anew`).toBe(true);
      }
      expect(heldRuleset(ns) === want.dump, `${v.what}: the kernel as a clean apply leaves it`).toBe(true);
    }
    // Only the final newline cut reads as the same proof.
    expect(same).toBe(1);
    expect(temps(dir)).toEqual([]);
    console.log(`proof of ${whole.length} bytes: ${variants.length} damaged variants applied, ${same} still the same proof`);
  });

  it('ENOSPC and EIO at every call of its write, once and from then on, over no proof and over another entry\'s: the apply ends as a clean one; the next uses the old or the new proof whole', async () => {
    const dir = tempDir('heldfault');
    const path = join(dir, 'compiled-x.held');
    // The census: the io calls of a proving apply's write.
    const calls: string[] = [];
    for (const [name, f] of Object.entries(real)) {
      (io as Record<string, unknown>)[name] = (...args: unknown[]) => {
        calls.push(name);
        return (f as (...a: unknown[]) => unknown)(...args);
      };
    }
    const clean = await applyFlushed(path);
    Object.assign(io, real);
    expect(clean.r.held).toBe('proved');
    expect(calls).toEqual(expect.arrayContaining(['openSync', 'writeSync', 'fsyncSync', 'renameSync', 'closeSync']));
    const want = { dump: heldRuleset(ns), ops: clean.r.ops, proof: readFileSync(path) };
    const older = Buffer.from(`${JSON.stringify({ entry: 'entry-0', kernel: JSON.parse(want.proof.toString()).kernel })}\n`);
    let runs = 0;
    for (const before of ['none', 'older'] as const) {
      for (const code of ['ENOSPC', 'EIO']) {
        for (const from of [false, true]) {
          for (let n = 1; n <= calls.length; n++) {
            const what = `${before}, ${code} at call ${n} (${calls[n - 1]})${from ? ' and after' : ''}`;
            rmSync(path, { force: true });
            if (before === 'older') writeFileSync(path, older);
            let k = 0;
            for (const [name, f] of Object.entries(real)) {
              (io as Record<string, unknown>)[name] = (...args: unknown[]) => {
                k++;
                if (k === n || (from && k > n)) throw Object.assign(new Error(`${code}: injected`), { code });
                return (f as (...a: unknown[]) => unknown)(...args);
              };
            }
            const a = await applyFlushed(path);
            Object.assign(io, real);
            runs++;
            expect(a.r.ops, what).toBe(want.ops);
            expect(a.commit.options.echo, what).toBe(true);
            expect(heldRuleset(ns) === want.dump, `${what}: the kernel as a clean apply leaves it`).toBe(true);
            // Under the name: the old file whole or the new one whole.
            const left = existsSync(path) ? readFileSync(path) : undefined;
            const wasNew = left?.equals(want.proof) === true;
            expect(wasNew || (before === 'none' ? left === undefined : left?.equals(older) === true), `${what}: ${left?.toString()}`).toBe(true);
            // Said kept only when it was.
            expect(a.r.held, what).toBe(wasNew ? 'proved' : undefined);
            if (!from) expect(temps(dir), what).toEqual([]);
            // The next apply: the proof when the new one is there, else the full echo that writes it.
            const next = await applyFlushed(path);
            expect(next.r.held, what).toBe(wasNew ? 'by-proof' : 'proved');
            expect(next.r.ops, what).toBe(want.ops);
            expect(readFileSync(path).equals(want.proof), what).toBe(true);
            expect(temps(dir), `${what}: a temp file after the next write`).toEqual([]);
          }
        }
      }
    }
    console.log(`proof's write: ${calls.length} calls (${calls.join(', ')}), ${runs} faults`);
  });

  it('kill -9 of `nfkeeper apply` in the proof\'s write (at each file call with NFK_HELD_PROOF_SWEEP=all): the commit held whole, the next apply in sync, then the proof used or proved anew, no temp file left', async () => {
    const dir = tempDir('heldfault');
    const file = join(dir, 'big.yaml');
    const cache = join(dir, 'cache');
    // apply stores an entry from 1,000 rules (APPLY_STORES_FROM_RULES).
    writeFileSync(file, yaml(1000));
    const apply = (flush: boolean, env: NodeJS.ProcessEnv = {}) => {
      if (flush) ns.exec('nft', ['flush', 'ruleset']);
      const child = spawn(process.execPath, [resolve('bin/nfkeeper.js'), 'apply', '--config', file, '--netns', ns.path, '--cache-dir', cache, '--progress'],
        { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
      let out = '';
      child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
      child.stderr.on('data', (d: Buffer) => { out += d.toString(); });
      return new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }>((res) => child.on('exit', (code, signal) => res({ code, signal, out })));
    };
    const killed = (at: string) => apply(true, { NODE_OPTIONS: `--import=${HOOK}`, KILL_AT_POINT: at, KILL_ARM_PATH: '\\.held\\.tmp-' });
    const held = () => readdirSync(cache).find((f) => f.endsWith('.held'));
    // Stored and proved by the cold apply (its proof kept for the token the store gave): the clean install and its proof.
    const proving = await apply(true);
    expect(proving.code).toBe(0);
    expect(proving.out).toMatch("the commit's full echo proved every rule held as sent");
    const want = { dump: heldRuleset(ns), proof: readFileSync(join(cache, held()!)) };
    // The census: the file calls from the proof's temp file on.
    rmSync(join(cache, held()!));
    const census = await killed('census');
    expect(census.code, census.out).toBe(0);
    const points = [...census.out.matchAll(/^point fs (\d+) (.*)$/gm)].map((m) => `${m[1]} ${m[2]}`);
    expect(points.some((p) => /renameSync \.compiled-[0-9a-f]+\.held\.tmp-/.test(p))).toBe(true);
    // By default: the temp file written, not renamed; the rename; the directory's fsync after it (every one with NFK_HELD_PROOF_SWEEP=all).
    const ks = ALL ? points.map((_, i) => i + 1) : [points.findIndex((p) => /writeSync/.test(p)), points.findIndex((p) => /renameSync/.test(p)),
      points.findLastIndex((p) => /fsyncSync/.test(p))].map((i) => i + 1);
    expect(ks.every((k) => k > 0)).toBe(true);
    const where: string[] = [];
    for (const k of ks) {
      const what = `killed at point ${points[k - 1]}`;
      for (const f of readdirSync(cache)) if (f.endsWith('.held')) rmSync(join(cache, f));
      const r = await killed(`fs:${k}`);
      expect(r.signal, `${what}: ${r.out}`).toBe('SIGKILL');
      // The commit came before the proof: the kernel holds it whole.
      expect(heldRuleset(ns) === want.dump, `${what}: the kernel holds the commit`).toBe(true);
      const left = held();
      if (left) expect(readFileSync(join(cache, left)).equals(want.proof), `${what}: the proof whole`).toBe(true);
      // The next apply: in sync, nothing written.
      const gen = generationOf(ns);
      const again = await apply(false);
      expect(again.code, again.out).toBe(0);
      expect(again.out, what).toMatch(/in sync/);
      expect(generationOf(ns), `${what}: nothing written`).toBe(gen);
      // Into a flushed namespace: the proof used if it was written, else proved anew.
      const flushed = await apply(true);
      expect(flushed.code, flushed.out).toBe(0);
      expect(flushed.out, what).toMatch(left ? "the commit's rules are held as sent by" : "the commit's full echo proved every rule held as sent");
      expect(heldRuleset(ns) === want.dump, what).toBe(true);
      expect(temps(cache), `${what}: the killed write's temp file`).toEqual([]);
      where.push(`${points[k - 1]}${left ? ' (proof there)' : ''}`);
    }
    console.log(`proof's write: ${points.length} file calls, killed at ${ks.length}: ${where.join(', ')}`);
  });
});
