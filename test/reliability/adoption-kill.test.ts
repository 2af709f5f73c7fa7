/**
 * The adoption count of a restart record not verified (src/keeper/record.ts: a start that adopts such
 * a record first rewrites it with `adoptions` one higher, before its start-up pass; from
 * MAX_UNVERIFIED_ADOPTIONS on the record is not used and the start reads its tables). kill -9 at each
 * file call of that write (test/reliability/kill-at-point.mjs, armed at the record's temp file),
 * from a count of 0 and of MAX - 1; then starts killed after ready (before their read-back), as a
 * crash loop does, until one reads. Each time: the record on disk is whole (the old count or the new,
 * never torn), no more starts adopt it than the limit leaves, the start that reads writes a verified
 * record, the kernel holds the install (nothing written at any start), the owners are kept, no temp
 * file stays. And the record cut at each byte offset or one bit changed, in-process: never read as a
 * record (the sealed file's check).
 *   NFK_ADOPTION_KILLS=all npx vitest run test/reliability/adoption-kill.test.ts   (every call, both counts)
 * By default: every call from MAX - 1 (the write that reaches the limit), the rename from 0.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_UNVERIFIED_ADOPTIONS, readRecord, writeRecord, type RestartRecord } from '../../src/keeper/record.js';
import { call } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { generationOf } from '../helpers/netns-hooks.js';
import { sleep } from '../helpers/wait.js';
import { OWNERS, dump, ownersSetUp, pointsOf, recordOnDisk, records, sweepDaemon, temps } from './crash-loop.js';
import { logged, stop, waitSaid, type Child } from './owners-child.js';

const ALL = process.env.NFK_ADOPTION_KILLS === 'all';
const RULES = 200;

function onDisk(ns: Netns): RestartRecord {
  const r = recordOnDisk(ns);
  expect(r).toBeDefined();
  return r!.record;
}

describe('kill -9 in the write of a restart record\'s adoption count', { timeout: 900_000 }, () => {
  it('the count is whole after each kill, no more starts adopt than the limit, the start that reads verifies, the kernel as installed', async () => {
    await withNetns(async (ns) => {
      const { dir, config, sock } = ownersSetUp('adoption-kill', RULES);
      const daemonAt = sweepDaemon(config, ns, ['--log-level', 'debug', '--cache-dir', join(dir, 'cache')]);
      const run = (killAt?: string) => daemonAt(killAt, '\\.restart-.*\\.tmp-');
      const started = async (d: Child) => {
        await waitSaid(d, /^nfkeeper running$/);
        return logged(d).find((l) => /^restart record (matches|not used)/.test(l.msg))!;
      };

      // A start from empty, killed after its record (not verified) and before its read-back.
      const first = run();
      await waitSaid(first, /^restart record written$/);
      first.child.kill('SIGKILL');
      await first.exited;
      const [name] = records(ns);
      const file = join(ns.record, name!);
      const r0 = onDisk(ns);
      expect(r0.verified).toBe(false);
      expect(r0.adoptions ?? 0).toBe(0);
      const want = dump(ns);
      const generation = generationOf(ns);
      const withCount = (n: number) => writeRecord(file, ns.record, { ...r0, adoptions: n });

      // The census: the adopting start's file calls from the count's temp file on.
      withCount(MAX_UNVERIFIED_ADOPTIONS - 1);
      const census = run('census');
      await started(census);
      census.child.kill('SIGKILL');
      await census.exited;
      expect(onDisk(ns).adoptions).toBe(MAX_UNVERIFIED_ADOPTIONS);
      const calls = pointsOf(census).filter((p) => p.kind === 'fs').map((p) => ({ fs: p.n, what: p.what }));
      const rename = calls.find((p) => /^renameSync \.restart-/.test(p.what));
      expect(rename, calls.map((p) => p.what).join(', ')).toBeDefined();
      // The write: its temp's calls, the rename, the directory's open, fsync and close.
      const write = calls.filter((p) => p.fs <= rename!.fs + 3);

      const kills = [
        ...write.map((p) => ({ before: MAX_UNVERIFIED_ADOPTIONS - 1, ...p })),
        ...(ALL ? write : [rename!]).map((p) => ({ before: 0, ...p })),
      ];
      const where: string[] = [];
      for (const k of kills) {
        const what = `count ${k.before}, point fs ${k.fs} (${k.what.replace(/\d+$/, 'PID')})`;
        withCount(k.before);
        const d = run(`fs:${k.fs}`);
        const late = sleep(40_000).then(() => 'late' as const);
        if (await Promise.race([d.exited.then(() => 'exited' as const), late]) === 'late') throw new Error(`${what}: not reached in 40 s`);
        expect(d.child.signalCode, d.logs.join('').slice(-2000)).toBe('SIGKILL');
        expect(d.logs.join(''), what).toContain(`killed at point fs ${k.fs} ${k.what.replace(/\d+$/, '')}`);
        // Whole: the old count or the new one.
        const left = onDisk(ns).adoptions ?? 0;
        expect([k.before, k.before + 1], what).toContain(left);
        expect(dump(ns) === want, `${what}: the install whole`).toBe(true);
        // A crash loop: each start killed after ready, before its read-back, until one reads.
        let adopted = 0;
        for (;;) {
          const s = run();
          const rec = await started(s);
          const listed = await call(sock, 'GET', '/v1/owners');
          expect((listed.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), what).toEqual(OWNERS);
          if (/^restart record matches/.test(rec.msg)) {
            expect(rec.verified, what).toBe(false);
            adopted++;
            expect(left + adopted, `${what}: adopted more than the limit`).toBeLessThanOrEqual(MAX_UNVERIFIED_ADOPTIONS);
            s.child.kill('SIGKILL');
            await s.exited;
            continue;
          }
          expect(`${rec.msg}: ${rec.why}`, what).toMatch(/starts adopted it and none read it back/);
          await waitSaid(s, /^restart record written$/);
          await stop(s);
          expect(s.child.exitCode, what).toBe(0);
          break;
        }
        expect(left + adopted, what).toBe(MAX_UNVERIFIED_ADOPTIONS);
        const after = onDisk(ns);
        expect(after.verified, what).toBe(true);
        expect(after.adoptions, what).toBeUndefined();
        expect(generationOf(ns), `${what}: nothing written`).toBe(generation);
        expect(dump(ns) === want, `${what}: the kernel as installed`).toBe(true);
        expect(temps(ns), what).toEqual([]);
        where.push(`${what}: ${left} on disk, ${adopted} more adopted`);
      }
      console.log(where.join('; '));

      // Torn or changed: never read as a record.
      withCount(1);
      const bytes = readFileSync(file);
      let refused = 0;
      for (let off = 0; off < bytes.length; off++) {
        writeFileSync(file, bytes.subarray(0, off));
        if (!('why' in readRecord(file, ns.record))) throw new Error(`cut at ${off} of ${bytes.length}: read as a record`);
        const flipped = Buffer.from(bytes);
        flipped[off] = flipped[off]! ^ (1 << (off % 8));
        writeFileSync(file, flipped);
        const got = readRecord(file, ns.record);
        if (!('why' in got)) throw new Error(`bit ${off % 8} of byte ${off} changed: read as a record (adoptions ${got.record.adoptions})`);
        refused += 2;
      }
      console.log(`the record with its count (${bytes.length} bytes): ${refused} cut or changed variants, none read`);
      rmSync(file);
    }, 'adoption-kill');
  });
});
