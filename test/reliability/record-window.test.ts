/**
 * kill -9 between ready and the verified restart record. A start from empty installs the rules by
 * its own commit, trusted, not read: it writes its record right after ready marked not verified
 * (src/keeper/record.ts), the safety net reads the install back trustOwnCommitMs (10 s) later, and
 * the next tick rewrites the record as verified. A daemon killed anywhere in between leaves no
 * record (killed before the first write's rename), one not verified, or one verified. The next
 * start must be ready, leave the kernel as the install left it with nothing written, keep every
 * owner, and: with none, read the tables and write a verified record at once; with one not
 * verified, adopt it (no read before ready) and still read the tables back trustOwnCommitMs later,
 * then rewrite it as verified; with a verified one, adopt it.
 *
 * The kill points: each file call of the two writes (test/reliability/kill-at-point.mjs, counted
 * from ready, from a census of a clean start), and times spread over the window (a SIGKILL from the
 * test). Each start from empty: the ruleset flushed, the record removed, the compile cache kept (as
 * the first start stored it: after-ready.test.ts sweeps its store).
 *   NFK_RECORD_WINDOW_KILLS=all npx vitest run test/reliability/record-window.test.ts   (every file call and every second)
 * By default: the first write's rename (no record yet), the middle of the window (not verified), the
 * second write's rename (read back, the record not yet verified) and its last call (verified).
 *
 * Then, after a kill that left the record not verified, a rule replaced by `nft` (same handle) before
 * the next start: the generation moved, so the record is not adopted, and the rule is put back.
 * And the same with the record made to claim the generation after the change (what a kernel holding
 * a rule otherwise than it was sent looks like): adopted, and the read-back finds the rule and puts
 * it back.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { writeRecord, type RestartRecord } from '../../src/keeper/record.js';
import { call } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { generationOf } from '../helpers/netns-hooks.js';
import { sleep } from '../helpers/wait.js';
import { OWNERS, dump, ownersSetUp, pointsOf, recordOnDisk, records, sweepDaemon, temps } from './crash-loop.js';
import { logged, stop, waitSaid, type Child } from './owners-child.js';

const ALL = process.env.NFK_RECORD_WINDOW_KILLS === 'all';
const BIG = 5000;

const written = (d: Child) => logged(d).filter((l) => l.msg === 'restart record written');

/** The ruleset without handles: as desired, wherever a repair put a rule back. */
const listing = (ns: Netns) => ns.exec('nft', ['list', 'ruleset']);
/** A start from empty: the tables gone, no record (the compile cache stays). */
const empty = (ns: Netns) => {
  ns.exec('nft', ['flush', 'ruleset']);
  for (const f of records(ns)) rmSync(join(ns.record, f));
};

type Kill = { fs: number; what: string } | { ms: number };
const named = (k: Kill) => 'fs' in k ? `point fs ${k.fs} (${k.what})` : `${k.ms} ms after ready`;

describe('kill -9 between ready and the verified restart record', { timeout: 900_000 }, () => {
  it('a start from empty killed anywhere there: the next start adopts what is on disk or reads, is right, writes nothing, and still reads back', async () => {
    await withNetns(async (ns) => {
      const { dir, config, sock } = ownersSetUp('record-window', BIG);
      const run = sweepDaemon(config, ns, ['--log-level', 'debug', '--cache-dir', join(dir, 'cache')]);
      // The compile cache stored (a first start), then the clean start from empty, timed, its file calls counted.
      const first = run();
      try {
        await waitSaid(first, /^compiled config stored in the compile cache$/);
      } finally {
        await stop(first);
      }
      empty(ns);
      const clean = run('census');
      let window: number;
      let atReady: number;
      try {
        const ready = await waitSaid(clean, /^nfkeeper running$/);
        atReady = await waitSaid(clean, /^restart record written$/) - ready;
        window = await waitSaid(clean, /^restart record written$/, 60_000, 2) - ready;
      } finally {
        await stop(clean);
      }
      // First at ready, not verified; then, once the read-back verified the install, verified.
      expect(written(clean).map((l) => l.verified)).toEqual([false, true]);
      expect(atReady).toBeLessThan(2000);
      expect(window).toBeGreaterThan(9000);
      const want = dump(ns);
      const wantListing = listing(ns);
      expect(want).toMatch(/nfkeeper-owner=alloc-3/);
      // The file calls of the two writes, as counted from ready (up to the second write's last; the
      // stop's own calls after it are not in the window).
      const calls = pointsOf(clean).filter((p) => p.kind === 'fs').map((p) => ({ fs: p.n, what: p.what }));
      const renames = calls.filter((p) => /^renameSync \.restart-/.test(p.what));
      expect(renames.length, calls.map((p) => p.what).join(', ')).toBeGreaterThanOrEqual(2);
      const inWindow = calls.filter((p) => p.fs <= renames[1]!.fs + 3);
      const writes = [inWindow.filter((p) => p.fs <= renames[0]!.fs + 3), inWindow.filter((p) => p.fs > renames[0]!.fs + 3)];
      const kills: Kill[] = ALL
        ? [...inWindow, ...Array.from({ length: Math.floor(window / 1000) }, (_, i) => ({ ms: 500 + i * 1000 }))]
        : [writes[0]!.find((p) => /^renameSync/.test(p.what))!, { ms: Math.round(window / 2) }, writes[1]!.find((p) => /^renameSync/.test(p.what))!, writes[1]!.at(-1)!];
      const where: string[] = [];
      let leftUnverified = false;
      for (const k of kills) {
        const what = named(k);
        empty(ns);
        const d = run('fs' in k ? `fs:${k.fs}` : undefined);
        const ready = await waitSaid(d, /^nfkeeper running$/);
        if ('fs' in k) {
          const late = sleep(40_000).then(() => 'late' as const);
          if (await Promise.race([d.exited.then(() => 'exited' as const), late]) === 'late') throw new Error(`${what}: not reached in 40 s`);
          expect(d.child.signalCode, d.logs.join('').slice(-2000)).toBe('SIGKILL');
          // (a temp file's name ends in the writer's pid)
          expect(d.logs.join(''), what).toContain(`killed at point fs ${k.fs} ${k.what.replace(/\d+$/, '')}`);
        } else {
          await sleep(Math.max(0, ready + k.ms - performance.now()));
          d.child.kill('SIGKILL');
          await d.exited;
        }
        const left = recordOnDisk(ns);
        const state = !left ? 'none' : left.record.verified ? 'verified' : 'not verified';
        if (state === 'not verified') leftUnverified = true;
        const generation = generationOf(ns);
        expect(dump(ns) === want, `${what}: the install whole`).toBe(true);
        // The next start: ready, nothing written, the owners kept; with a record not verified, its
        // read-back trustOwnCommitMs after ready and the record verified after it.
        const again = run();
        try {
          const readyAgain = await waitSaid(again, /^nfkeeper running$/);
          const rec = logged(again).find((l) => /^restart record (matches|not used)/.test(l.msg))!;
          if (state === 'none') expect(`${rec.msg}: ${rec.why}`, what).toMatch(/^restart record not used.*there is none/);
          else {
            expect(rec.msg, what).toMatch(/^restart record matches the kernel/);
            expect(rec.verified, what).toBe(state === 'verified');
          }
          const listed = await call(sock, 'GET', '/v1/owners');
          expect((listed.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), what).toEqual(OWNERS);
          let verifiedAt: number | undefined;
          if (state !== 'verified') {
            verifiedAt = await waitSaid(again, /^restart record written$/, 40_000) - readyAgain;
            expect(written(again).map((l) => l.verified), what).toEqual([true]);
            // Read at its start (no record): at once. Adopted not verified: read back trustOwnCommitMs later.
            if (state === 'none') expect(verifiedAt, `${what}: the record right after ready`).toBeLessThan(3000);
            else expect(verifiedAt, `${what}: the read-back trustOwnCommitMs after ready`).toBeGreaterThan(8000);
          } else {
            await sleep(1500);
            expect(written(again), what).toEqual([]);
          }
          expect(recordOnDisk(ns)?.record.verified, what).toBe(true);
          expect(generationOf(ns), `${what}: nothing written`).toBe(generation);
          expect(dump(ns) === want, `${what}: the kernel as installed`).toBe(true);
          where.push(`${what}: ${state}${verifiedAt !== undefined ? `, verified ${Math.round(verifiedAt)} ms after the next ready` : ''}`);
        } finally {
          await stop(again);
        }
        expect(again.child.exitCode).toBe(0);
        expect(temps(ns), what).toEqual([]);
      }
      expect(leftUnverified, where.join('; ')).toBe(true);
      console.log(`window ready -> verified record ${Math.round(window)} ms (the first record ${Math.round(atReady)} ms); ${where.join('; ')}`);

      // A start from empty killed with its record not verified, then a rule replaced in place by nft.
      const killedUnverified = async (): Promise<{ file: string; record: RestartRecord }> => {
        empty(ns);
        const d = run();
        await waitSaid(d, /^restart record written$/);
        d.child.kill('SIGKILL');
        await d.exited;
        const left = recordOnDisk(ns)!;
        expect(left.record.verified).toBe(false);
        const h = /ip saddr 10\.\S+ tcp dport 22 accept # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', 'input']))?.[1];
        expect(h).toBeDefined();
        ns.nft(`replace rule ip big input handle ${h} ip saddr 203.0.113.77 tcp dport 22 accept\n`);
        expect(listing(ns)).not.toBe(wantListing);
        return left;
      };
      // The generation moved: not adopted; read, and put back.
      await killedUnverified();
      let d = run();
      try {
        await waitSaid(d, /^nfkeeper running$/);
        const rec = logged(d).find((l) => /^restart record (matches|not used)/.test(l.msg))!;
        expect(`${rec.msg}: ${rec.why}`).toMatch(/^restart record not used.*generation moved/);
        for (const end = Date.now() + 20_000; listing(ns) !== wantListing && Date.now() < end;) await sleep(100);
        expect(listing(ns) === wantListing, 'put back at the start').toBe(true);
      } finally {
        await stop(d);
      }
      // The record made to claim the generation after the change: adopted, and the read-back puts the rule back.
      const left = await killedUnverified();
      writeRecord(left.file, ns.record, { ...left.record, generation: generationOf(ns) });
      d = run();
      try {
        const ready = await waitSaid(d, /^nfkeeper running$/);
        const rec = logged(d).find((l) => /^restart record (matches|not used)/.test(l.msg))!;
        expect(rec.msg).toMatch(/^restart record matches the kernel/);
        expect(rec.verified).toBe(false);
        expect(listing(ns) === wantListing, 'adopted as recorded: nothing put back before the read-back').toBe(false);
        await waitSaid(d, /^repaired$/, 40_000);
        const repairedAt = performance.now() - ready;
        expect(repairedAt, 'by the read-back, trustOwnCommitMs after ready').toBeGreaterThan(8000);
        expect(listing(ns) === wantListing, 'put back by the read-back').toBe(true);
        console.log(`a rule held otherwise than the record says: put back ${Math.round(repairedAt)} ms after ready`);
      } finally {
        await stop(d);
      }
    }, 'record-window');
  });
});
