/**
 * kill -9 between ready and the restart record's first write. A start from empty installs the rules
 * by its own commit, which is trusted, not read: the safety net reads it back trustOwnCommitMs (10 s)
 * later, and only a read verifies what the record says (src/keeper/record.ts, Recorder.write), so
 * the record is written on the first tick after that read-back: ~11 s after ready. A daemon killed
 * in that window leaves no record; the next start must be ready, read the tables (slower than
 * adopting a record, not wrong), leave the kernel as the install left it with nothing written, keep
 * every owner, and write the record once its read verified the tables (its first tick).
 *
 * The window is measured by a clean start (ready to `restart record written`), then the daemon is
 * killed at times spread over it, each start from empty (the ruleset flushed, the record removed;
 * the compile cache kept, as the first start stored it: after-ready.test.ts sweeps its store).
 *   NFK_RECORD_WINDOW_KILLS=all npx vitest run test/reliability/record-window.test.ts   (every second of the window)
 * By default two times: early, and 1.2 s before the record (about when the read-back starts).
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { call, compileOwner, saveOwners } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { generationOf } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownerSpec, ownersYamlWithBigChain } from '../owners/fixtures.js';
import { daemon, stop, type Child } from './owners-child.js';

const ALL = process.env.NFK_RECORD_WINDOW_KILLS === 'all';
const BIG = 5000;

function configYaml(dir: string): string {
  return ownersYamlWithBigChain(dir, BIG);
}

type Line = { msg: string; time?: number | string; why?: string };
const msgs = (d: Child): Line[] => d.logs.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
const said = (d: Child, re: RegExp) => msgs(d).some((l) => re.test(l.msg));

/** Waits for a line; returns when the test read it (performance.now). */
async function waitSaid(d: Child, re: RegExp, ms = 60_000): Promise<number> {
  for (const end = Date.now() + ms; !said(d, re);) {
    if (d.child.exitCode !== null || d.child.signalCode !== null) throw new Error(`the daemon exited (${d.child.exitCode ?? d.child.signalCode}) before it said ${re}: ${d.logs.join('').slice(-3000)}`);
    if (Date.now() > end) throw new Error(`the daemon did not say ${re} within ${ms} ms: ${d.logs.join('').slice(-3000)}`);
    await sleep(20);
  }
  return performance.now();
}

const dump = (ns: Netns) => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
const records = (ns: Netns) => existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.startsWith('restart-')) : [];
const temps = (ns: Netns) => existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.includes('.tmp-')) : [];
/** A start from empty: the tables gone, no record (the compile cache stays). */
const empty = (ns: Netns) => {
  ns.exec('nft', ['flush', 'ruleset']);
  for (const f of records(ns)) rmSync(join(ns.record, f));
};

describe('kill -9 between ready and the restart record\'s first write', { timeout: 600_000 }, () => {
  it('a start from empty killed anywhere in the window: the next start reads the tables, is right, and writes the record at its first tick', async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('record-window');
      const config = join(dir, 'config.yaml');
      writeFileSync(config, configYaml(dir));
      const c = parseConfig(readFileSync(config, 'utf8'), config);
      mkdirSync(join(dir, 'state'), { recursive: true });
      const owners = ['alloc-1', 'alloc-2', 'alloc-3'];
      saveOwners(c.owners!.state, owners.map((id, i) => compileOwner(id, ownerSpec(i + 1), c.owners!, c.tables[0]!)));
      const sock = join(dir, 'nfkeeper.sock');
      const run = () => daemon(config, ns, { args: ['--log-level', 'debug', '--cache-dir', join(dir, 'cache')] });
      // The compile cache stored (a first start), then the clean start from empty, timed.
      const first = run();
      try {
        await waitSaid(first, /^compiled config stored in the compile cache$/);
      } finally {
        await stop(first);
      }
      empty(ns);
      const clean = run();
      let window: number;
      try {
        const ready = await waitSaid(clean, /^nfkeeper running$/);
        window = await waitSaid(clean, /^restart record written$/) - ready;
      } finally {
        await stop(clean);
      }
      const want = dump(ns);
      expect(want).toMatch(/nfkeeper-owner=alloc-3/);
      // The read-back comes trustOwnCommitMs (10 s) after the install, the record at the next tick.
      expect(window).toBeGreaterThan(9000);
      const times = ALL ? Array.from({ length: Math.floor(window / 1000) + 1 }, (_, i) => i * 1000)
        : [200, Math.max(0, Math.round(window) - 1200)];
      const where: string[] = [];
      for (const t of times) {
        const what = `killed ${t} ms after ready`;
        empty(ns);
        const d = run();
        const ready = await waitSaid(d, /^nfkeeper running$/);
        await sleep(Math.max(0, ready + t - performance.now()));
        d.child.kill('SIGKILL');
        await d.exited;
        // The read-back comes at a tick (1 s apart) after the install's 10 s: a kill late in the
        // window may come after this start's record. That is a start with a record (after-ready.test.ts).
        if (said(d, /^restart record written$/)) {
          where.push(`${t} ms (past this start's record)`);
          continue;
        }
        expect(records(ns), what).toEqual([]);
        const generation = generationOf(ns);
        expect(dump(ns) === want, `${what}: the install whole`).toBe(true);
        // The next start: ready, reads the tables (no record), writes nothing, keeps the owners, and
        // writes the record at its first tick after ready (its read verified them).
        const again = run();
        try {
          const readyAgain = await waitSaid(again, /^nfkeeper running$/);
          const rec = msgs(again).find((l) => /^restart record/.test(l.msg))!;
          expect(`${rec.msg}: ${rec.why}`, what).toMatch(/^restart record not used.*there is none/);
          const listed = await call(sock, 'GET', '/v1/owners');
          expect((listed.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), what).toEqual(owners);
          const recordAt = await waitSaid(again, /^restart record written$/, 30_000) - readyAgain;
          expect(recordAt, `${what}: the record at the first ticks`).toBeLessThan(5000);
          expect(generationOf(ns), `${what}: nothing written`).toBe(generation);
          expect(dump(ns) === want, `${what}: the kernel as installed`).toBe(true);
          where.push(`${t} ms (the record ${Math.round(recordAt)} ms after the next ready)`);
        } finally {
          await stop(again);
        }
        expect(again.child.exitCode).toBe(0);
        expect(temps(ns), what).toEqual([]);
      }
      expect(where.filter((w) => w.includes('past')).length, where.join(', ')).toBeLessThan(Math.max(1, times.length / 2));
      console.log(`window ready -> record ${Math.round(window)} ms; killed at ${where.join(', ')}`);
    }, 'record-window');
  });
});
