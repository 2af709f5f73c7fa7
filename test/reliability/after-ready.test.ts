/**
 * kill -9 through the daemon's work after it said it is ready: the compile cache's store (its
 * slices, the temp file's writes, fsync, rename, the directory's fsync), the restart record's write,
 * and after a restart from the cache the making of the desired rules a slice per turn
 * (src/run.ts, `later`). test/reliability/kill-at-point.mjs, loaded into `nfkeeper run` (the
 * built bundle), counts the points once the daemon logged "nfkeeper running" (each turn a
 * setImmediate gives, each call that opens, writes, syncs, renames or removes a file) and kills at
 * the k-th; a first run with no kill counts them (the census). After each kill the daemon is
 * started again on the same directories and must: be ready at its first start, hold the kernel
 * byte for byte as the clean install left it (`nft --debug=netlink list ruleset`) with nothing
 * written (the generation unchanged), keep every owner registered before the kill, use the compile
 * cache whole or say why not, and leave no temp file of a killed write behind.
 * Also: the cache's and the record's directory on a full or read-only tmpfs under a running daemon
 * (it keeps the rules, says so once, and the next start is right), and the two files cut or changed
 * in each of their lines and their digest (the next start says why, compiles or reads, writes nothing).
 *   NFK_AFTER_READY_KILLS=all npx vitest run test/reliability/after-ready.test.ts   (every point and variant)
 * By default the renames and a turn (NFK_AFTER_READY_KILLS=N: N more of each kind, spread), two
 * disk levels, and the record's body cut.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { call } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { generationOf } from '../helpers/netns-hooks.js';
import { sleep } from '../helpers/wait.js';
import { OWNERS, dump, ownersSetUp, pointsOf, sweepDaemon, type Point } from './crash-loop.js';
import { daemon, logged, stop, tmpfsIn, waitSaid, type Child } from './owners-child.js';

const KILLS = process.env.NFK_AFTER_READY_KILLS ?? '';
/** Rules in the big chain: more than one slice of the store and of the making (SLICE in compile-cache.ts). */
const BIG = 5000;

/**
 * Where the daemon keeps its compile cache for a namespace's runs, and the arguments that say so:
 * a directory inside the record's, so that the full disk below is under both.
 */
const cacheDirOf = (ns: Netns): string => join(ns.record, 'cache');
const cacheArgs = (ns: Netns): string[] => ['--cache-dir', cacheDirOf(ns)];

const lines = (d: Child): string[] => d.logs.join('').split('\n');

const run = (config: string, ns: Netns, killAt?: string): Child => sweepDaemon(config, ns, ['--log-level', 'debug', ...cacheArgs(ns)])(killAt);

const dirsOf = (ns: Netns): string[] => [...new Set([ns.record, cacheDirOf(ns)])].filter((d) => existsSync(d));
const leftovers = (ns: Netns): string[] => dirsOf(ns).flatMap((d) => readdirSync(d).filter((f) => f.includes('.tmp-')));
const removeKept = (ns: Netns) => {
  for (const d of dirsOf(ns)) for (const f of readdirSync(d)) if (/^(compiled|restart)-/.test(f)) rmSync(join(d, f));
};

/** Two starts, each stopped once it stored or used the compile cache and wrote or adopted its restart record: both kept. */
async function kept(config: string, ns: Netns): Promise<void> {
  for (let i = 0; i < 2; i++) {
    const d = run(config, ns);
    try {
      await waitSaid(d, /^compile(d config stored| cache matches)/);
      await waitSaid(d, /^restart record (written|matches)/);
    } finally {
      await stop(d);
    }
  }
}

/** The points a run's after-ready work reaches, from a run that kills at none. */
async function census(config: string, ns: Netns, done: (d: Child) => Promise<void>): Promise<Point[]> {
  const d = run(config, ns, 'census');
  try {
    await waitSaid(d, /^nfkeeper running$/);
    await done(d);
    await sleep(1000);
  } catch (e) {
    d.child.kill('SIGKILL');
    throw e;
  }
  const points = pointsOf(d);
  await stop(d);
  return points;
}

/**
 * The points to kill at: all (NFK_AFTER_READY_KILLS=all), or N of them (=N), or by default the
 * renames of the cache and the record and the middle turn: the kinds of file call and the turns
 * are spread over.
 */
function chosen(points: Point[]): string[] {
  const spec = (p: Point) => `${p.kind}:${p.n}`;
  if (KILLS === 'all') return points.map(spec);
  const fs = points.filter((p) => p.kind === 'fs');
  const turns = points.filter((p) => p.kind === 'turn');
  const picked = new Set(fs.filter((p) => /^renameSync \.(compiled|restart)-/.test(p.what)).map(spec));
  if (turns.length) picked.add(spec(turns[turns.length >> 1]!));
  if (KILLS !== '') {
    // N more, spread over where the kind of file call changes, and over the turns.
    const starts = fs.filter((p, i) => i === 0 || fs[i - 1]!.what !== p.what);
    const want = Number(KILLS);
    for (let i = 0; i < want; i++) {
      picked.add(spec(starts[Math.floor((i * starts.length) / want)]!));
      if (turns.length) picked.add(spec(turns[Math.floor((i * turns.length) / want)]!));
    }
  }
  return [...picked];
}

/** A start killed at a point: it became ready, then died there (or the point was past its work: stopped). */
async function killedAt(config: string, ns: Netns, at: string): Promise<string> {
  const d = run(config, ns, at);
  await waitSaid(d, /^nfkeeper running$/);
  const late = sleep(15_000).then(() => 'late' as const);
  if (await Promise.race([d.exited.then(() => 'exited' as const), late]) === 'late') {
    await stop(d);
    return 'not reached';
  }
  expect(d.child.signalCode, d.logs.join('').slice(-2000)).toBe('SIGKILL');
  return /killed at point \S+ \d+ (.*)/.exec(lines(d).find((l) => l.startsWith('killed at point')) ?? '')?.[1] ?? '?';
}

/**
 * The next start after a kill: ready at once, the kernel as it was with nothing written, the owners
 * all there, the cache used or refused with its reason, its after-ready work done, no temp file left.
 */
async function restartsRight(config: string, ns: Netns, o: { dump: string; generation: number; owners?: string[]; sock?: string; cacheUsed?: boolean }, k: string): Promise<void> {
  const d = run(config, ns);
  try {
    await waitSaid(d, /^nfkeeper running$/);
    await waitSaid(d, /^compile cache (matches|not used)/);
    const cache = logged(d).find((l) => /^compile cache (matches|not used)/.test(l.msg))!;
    if (o.cacheUsed) expect(cache.msg, k).toMatch(/^compile cache matches every input/);
    else if (!/matches/.test(cache.msg)) {
      expect(cache.why, k).toMatch(/there is none|cut short or corrupt/);
      await waitSaid(d, /^compiled config stored in the compile cache$/);
    }
    if (o.sock) {
      const listed = await call(o.sock, 'GET', '/v1/owners');
      expect((listed.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), k).toEqual(o.owners);
    }
    // The after-ready work has its turns: the making of the rules, the record's first write, which
    // removes a killed write's temp file. By turns of a few ms, so on a loaded machine it may come
    // seconds after the line: waited for, up to a bound.
    await sleep(500);
    for (const until = performance.now() + 20_000; leftovers(ns).length > 0 && performance.now() < until;) await sleep(100);
    expect(generationOf(ns), `${k}: nothing written`).toBe(o.generation);
    expect(dump(ns) === o.dump, `${k}: the kernel as the clean install left it`).toBe(true);
    expect(leftovers(ns), `${k}: a killed write's temp file`).toEqual([]);
  } finally {
    await stop(d);
  }
  expect(d.child.exitCode, d.logs.join('').slice(-2000)).toBe(0);
}

describe('faults in the work after ready and in the files it keeps', { timeout: 900_000 }, () => {
  it('the compile cache\'s store and the restart record\'s write, with owners registered: the next start is ready, nothing lost, nothing written', async () => {
    await withNetns(async (ns) => {
      // Owners registered in an earlier life of the daemon: in the state file.
      const { config, sock } = ownersSetUp('after-ready', BIG);
      // The clean install.
      const first = run(config, ns);
      try {
        await waitSaid(first, /^compiled config stored in the compile cache$/);
        await waitSaid(first, /^restart record written$/);
      } finally {
        await stop(first);
      }
      const want = { dump: dump(ns), generation: generationOf(ns), owners: OWNERS, sock };
      expect(want.dump).toMatch(/nfkeeper-owner=alloc-3/);
      // Each start below finds no cache and no record: its work after ready is the store and the record's write.
      removeKept(ns);
      const points = await census(config, ns, async (d) => {
        await waitSaid(d, /^compiled config stored in the compile cache$/);
        await waitSaid(d, /^restart record written$/);
      });
      const kinds = new Set(points.map((p) => p.what.replace(/ .*/, '')));
      expect([...kinds].sort()).toEqual(expect.arrayContaining(['fsyncSync', 'renameSync', 'turn', 'writeSync']));
      expect(points.some((p) => /^renameSync \.compiled-/.test(p.what)) && points.some((p) => /^renameSync \.restart-/.test(p.what))).toBe(true);
      const ks = chosen(points);
      const where: string[] = [];
      for (const k of ks) {
        removeKept(ns);
        where.push(`${k} ${await killedAt(config, ns, k)}`);
        await restartsRight(config, ns, want, `killed at point ${k}`);
      }
      console.log(`store and record: ${points.length} points after ready (${points.filter((p) => p.kind === 'fs').length} file calls), killed at ${ks.length}: ${where.join(', ')}`);
    }, 'after-ready-store');
  });

  it('the making of the desired rules after a restart from the cache: the next start uses the cache whole, nothing written', async () => {
    await withNetns(async (ns) => {
      // No owners section: the restart makes its rules after ready, not before.
      const { config } = ownersSetUp('after-ready', BIG, { owners: false });
      // The restart below adopts from a record: the start from empty writes it at ready (not
      // verified: its handles derived, nothing read before).
      await kept(config, ns);
      const want = { dump: dump(ns), generation: generationOf(ns), cacheUsed: true };
      const points = await census(config, ns, async (d) => {
        await waitSaid(d, /^restart record matches the kernel/);
        await sleep(2000);
      });
      // More than one slice of the making: a turn between slices.
      expect(points.filter((p) => p.kind === 'turn').length).toBeGreaterThanOrEqual(2);
      const ks = chosen(points);
      const where: string[] = [];
      for (const k of ks) {
        where.push(`${k} ${await killedAt(config, ns, k)}`);
        await restartsRight(config, ns, want, `killed at point ${k}`);
      }
      console.log(`making after a restart: ${points.length} points after ready, killed at ${ks.length}: ${where.join(', ')}`);
    }, 'after-ready-make');
  });

  it('a full or read-only disk under the cache and the record: the daemon runs and keeps the rules, says so once each, and the next start is right', async () => {
    await withNetns(async (ns) => {
      const { config } = ownersSetUp('after-ready', 300, { owners: false });
      mkdirSync(ns.record, { recursive: true, mode: 0o700 });
      // Neither the cache nor a verified record fits in 8 KiB (the record written at ready, not
      // verified, has no digests and does: its rewrite as verified after the read-back is refused,
      // said once). (With room for one record, not two, the record is written once
      // and its rewrite refused: the next start reads the tables; as every sweep, NFK_AFTER_READY_KILLS=all.)
      const levels = [{ kib: 8, options: '', error: /ENOSPC/, record: false }, { kib: 4096, options: ',ro', error: /EROFS/, record: false },
        ...(KILLS === 'all' ? [{ kib: 24, options: '', error: /ENOSPC/, record: true }] : [])];
      let want = '';
      for (const level of levels) {
        const fs = tmpfsIn(ns.record, level.kib, `mode=0700${level.options}`);
        try {
          const files = () => fs.run('find', ns.record, '-name', '*.tmp-*').split('\n').filter(Boolean);
          const d = daemon(config, ns, { args: ['--log-level', 'debug', ...cacheArgs(ns)], prefix: fs.prefix });
          try {
            await waitSaid(d, /^nfkeeper running$/);
            await waitSaid(d, /^compiled config not stored in the compile cache/);
            const notStored = logged(d).filter((l) => /^compiled config not stored/.test(l.msg));
            expect(notStored.length).toBe(1);
            expect(notStored[0]!.why).toMatch(level.error);
            await waitSaid(d, level.record ? /^restart record written$/ : /^could not write the restart record/);
            // Still keeping: a rule deleted is put back.
            const handle = /ip saddr 10\.0\.7\.1 tcp dport 22 accept # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', 'input']))![1]!;
            ns.exec('nft', ['delete', 'rule', 'ip', 'big', 'input', 'handle', handle]);
            for (const end = Date.now() + 30_000; !/ip saddr 10\.0\.7\.1 tcp dport 22 accept/.test(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'input']));) {
              if (Date.now() > end) throw new Error('the deleted rule was not put back');
              await sleep(50);
            }
            await sleep(1500);
            expect(d.child.exitCode).toBeNull();
            // (the rule put back has a new handle: what the next start must leave is this)
            want = dump(ns);
            // Said once each (the record is tried again at most every few minutes, and at stop).
            expect(logged(d).filter((l) => /^compiled config not stored/.test(l.msg)).length).toBe(1);
            expect(logged(d).filter((l) => /^could not write the restart record/.test(l.msg)).length, JSON.stringify(logged(d).filter((l) => /restart record/.test(l.msg)))).toBe(level.record ? 0 : 1);
            expect(files()).toEqual([]);
          } finally {
            await stop(d);
          }
          expect(d.child.exitCode, d.logs.join('').slice(-2000)).toBe(0);
          // The next start, the disk as it was: ready, nothing written, the rules as installed.
          const before = generationOf(ns);
          const again = daemon(config, ns, { args: ['--log-level', 'debug', ...cacheArgs(ns)], prefix: fs.prefix });
          try {
            await waitSaid(again, /^nfkeeper running$/);
            await waitSaid(again, /^compile(d config| cache matches)/);
            await waitSaid(again, /^restart record/);
            // (a record written once may not be replaced on a disk that holds one: the next start reads the tables then)
            if (!level.record) expect(logged(again).find((l) => /^restart record/.test(l.msg))!.msg).toMatch(/^restart record not used/);
          } finally {
            await stop(again);
          }
          expect(again.child.exitCode).toBe(0);
          expect(generationOf(ns)).toBe(before);
          expect(dump(ns) === want, 'the kernel as the daemon left it').toBe(true);
          expect(files()).toEqual([]);
          // Room again: the next start stores the cache, and the one after uses it and the record.
          fs.run('mount', '-o', `remount,rw,size=8m`, ns.record);
          for (const use of level === levels[levels.length - 1] ? [false, true] : []) {
            const d2 = daemon(config, ns, { args: ['--log-level', 'debug', ...cacheArgs(ns)], prefix: fs.prefix });
            try {
              await waitSaid(d2, use ? /^compile cache matches every input/ : /^compiled config stored in the compile cache$/);
              if (use) {
                await waitSaid(d2, /^restart record/);
                expect(logged(d2).find((l) => /^restart record/.test(l.msg))!.msg).toMatch(/^restart record matches the kernel/);
              }
            } finally {
              await stop(d2);
            }
          }
          expect(generationOf(ns)).toBe(before);
        } finally {
          fs.close();
        }
        console.log(`${level.kib} KiB${level.options}: the store said ${level.error.source} once, the daemon kept the rules; the next starts right`);
      }
    }, 'after-ready-full');
  });

  it('the cache and the record cut or changed in each of their lines and in their digest: the next start says why, compiles or reads, and writes nothing', async () => {
    await withNetns(async (ns) => {
      const { config } = ownersSetUp('after-ready', 300, { owners: false });
      await kept(config, ns);
      const cacheFile = join(cacheDirOf(ns), readdirSync(cacheDirOf(ns)).find((f) => f.startsWith('compiled-') && f.endsWith('.json'))!);
      const recordFile = join(ns.record, readdirSync(ns.record).find((f) => f.startsWith('restart-'))!);
      const whole = { cache: readFileSync(cacheFile), record: readFileSync(recordFile) };
      const want = { dump: dump(ns), generation: generationOf(ns) };
      // Each line of a file (its body's lines, then its digest's), cut in its middle or a byte of it changed.
      const variants: { file: 'cache' | 'record'; what: string; bytes: Buffer }[] = [];
      for (const file of ['cache', 'record'] as const) {
        const b = whole[file];
        const ends = [...b.keys()].filter((i) => b[i] === 0x0a);
        ends.forEach((end, li) => {
          const start = li === 0 ? 0 : ends[li - 1]! + 1;
          const mid = start + ((end - start) >> 1);
          const flipped = Buffer.from(b);
          flipped[mid] = flipped[mid] === 0x30 ? 0x31 : 0x30;
          const line = li === ends.length - 1 ? 'the digest' : `line ${li + 1}`;
          variants.push({ file, what: `cut in ${line}`, bytes: b.subarray(0, mid) }, { file, what: `a byte of ${line} changed`, bytes: flipped });
        });
      }
      // By default the record's body cut (test/cli/compile-cache.test.ts starts the daemon on four damaged caches).
      const picked = KILLS === 'all' ? variants : variants.filter((v) => v.file === 'record' && v.what === 'cut in line 1');
      for (const v of picked) {
        const what = `${v.file} ${v.what}`;
        writeFileSync(cacheFile, v.file === 'cache' ? v.bytes : whole.cache, { mode: 0o600 });
        writeFileSync(recordFile, v.file === 'record' ? v.bytes : whole.record, { mode: 0o600 });
        const d = run(config, ns);
        try {
          await waitSaid(d, /^nfkeeper running$/);
          await waitSaid(d, /^restart record/);
          const cache = logged(d).find((l) => /^compile cache/.test(l.msg))!;
          const record = logged(d).find((l) => /^restart record/.test(l.msg))!;
          if (v.file === 'cache') {
            expect(`${cache.msg}: ${cache.why}`, what).toMatch(/^compile cache not used; the config was compiled: .* is cut short or corrupt/);
            expect(record.msg, what).toMatch(/^restart record matches the kernel/);
            await waitSaid(d, /^compiled config stored in the compile cache$/);
          } else {
            expect(`${record.msg}: ${record.why}`, what).toMatch(/^restart record not used; .*: .* is cut short or corrupt/);
            expect(cache.msg, what).toMatch(/^compile cache matches every input/);
          }
          await sleep(500);
          expect(generationOf(ns), `${what}: nothing written`).toBe(want.generation);
          expect(dump(ns) === want.dump, `${what}: the kernel as it was`).toBe(true);
        } finally {
          await stop(d);
        }
        expect(d.child.exitCode, what).toBe(0);
      }
      console.log(`damaged: ${picked.length} of ${variants.length} variants (${variants.filter((x) => x.file === 'cache').length / 2} lines of the cache and ${variants.filter((x) => x.file === 'record').length / 2} of the record, each cut and changed)`);
    }, 'after-ready-damaged');
  });
});
