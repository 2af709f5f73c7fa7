/**
 * kill -9 of the daemon in the replacement of its socket after an interrupted dump (native/socket.cc:
 * Reopen, which puts a new socket on the old one's descriptor and binds it to the old port; in
 * protect mode the dump-only socket's opening and its close in EndDump), then a start: ready, the
 * owned tables as the clean install left them and in sync, the protected table owned again, every
 * owner registered before kept, nothing else left in the kernel or in the record's directory.
 *
 * The points are reached by the addon's test seam NFKEEPER_TEST_KILL_AT (read once when the addon is
 * loaded; the addon kills itself there), the dumps interrupted by a socket of the test's that adds
 * and deletes a table of its own in a loop while the daemon starts and reads its tables (no record:
 * removed) and, in protect mode, its dumps over the dump-only socket after the claim.
 *   NFK_REOPEN_KILLS=all npx vitest run test/reliability/reopen-kill.test.ts   (every point, both modes)
 * By default one point of each mode: the old socket released and the new one not yet bound; the
 * dump-only socket about to be closed.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import { open } from '../../src/netlink/socket.js';
import { call } from '../../src/owners/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { sleep } from '../helpers/wait.js';
import { OWNERS, ownersSetUp } from './crash-loop.js';
import { daemon, said, stop, waitSaid, type Child } from './owners-child.js';

const ALL = process.env.NFK_REOPEN_KILLS === 'all';
/** Rules in the long chain: its dump is many datagrams, each a chance to be flagged interrupted. */
const BIG = 5000;

/** A protected table beside the owners fixture's (protect mode: the dumps over the dump-only socket). */
const GUARD = `  - family: ip
    name: guard
    protect: true
    chains:
      - name: g
        rules:
          - ip daddr 192.0.2.9 return
`;

const text = (d: Child) => d.logs.join('');

/**
 * Another writer's commits in bursts (as fast as they go for BURST_MS, then none for QUIET_MS) until
 * stopped: a dump the daemon makes in a burst is flagged interrupted, one in a quiet spell is not.
 * Without the quiet spells a fast machine's noise interrupts every try of every read (CI: 16,000
 * commits a second, "interrupted on all 32 attempts"), and the daemon never gets as far as claiming
 * the protected table, whose socket's dumps are the points swept.
 */
const BURST_MS = 25;
const QUIET_MS = 50;
function noise(ns: Netns): { stop: () => Promise<number> } {
  const s = open({ netns: ns.path });
  let running = true;
  let n = 0;
  // A chain in the daemon's (unprotected) table `big`, whose rules it dumps: a commit to another
  // table would not spoil a dump of it (native/dump.cc, Confirm), and no dump would be ended. The
  // daemon deletes the chain when it finds it: either commit may then be refused, which is noise too.
  const c = { family: 'ip' as const, table: 'big', name: 'noise' };
  const tryCommit = (b: Batch) => s.commit(b).then(() => { n++; }, () => undefined);
  const done = (async () => {
    while (running) {
      const until = Date.now() + BURST_MS;
      while (running && Date.now() < until) {
        await tryCommit(new Batch().add('chain', c));
        await tryCommit(new Batch().delete('chain', c));
        // A small commit is answered at once: without a turn given, this loop would hold the test's own loop.
        await new Promise((r) => setImmediate(r));
      }
      await sleep(QUIET_MS);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      s.close();
      return n;
    },
  };
}

const tables = (ns: Netns) => ns.exec('nft', ['list', 'tables']).trim().split('\n').sort();
const dumpOf = (ns: Netns, table: string) => ns.exec('nft', ['--debug=netlink', 'list', 'table', 'ip', table]);
/** A table's dump without who owns it (the killed daemon's flag is gone; the next start's is its own). */
const unowned = (dump: string) => dump.replace(/ # progname .*$/m, '').replace(/^\s*flags .*\n/m, '');
const leftovers = (ns: Netns) => existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.includes('.tmp-')) : [];

describe('kill -9 in the replacement of the daemon\'s socket after an interrupted dump', { timeout: 600_000 }, () => {
  const modes = [
    { protect: false, points: ALL ? ['reopen-opened', 'reopen-replaced', 'reopen-bound'] : ['reopen-replaced'] },
    { protect: true, points: ALL ? ['reopen-replaced', 'dump-socket-opened', 'dump-socket-closing', 'dump-socket-closed'] : ['dump-socket-closing'] },
  ];
  for (const mode of modes) {
    it(`${mode.protect ? 'protect mode' : 'no protected table'}: killed at ${mode.points.join(', ')}; the next start is ready, the tables as installed, owners kept`, async () => {
      await withNetns(async (ns) => {
        const { config, sock } = ownersSetUp('reopen-kill', BIG, { extraTables: mode.protect ? GUARD : '' });
        const first = daemon(config, ns, { args: ['--log-level', 'debug'] });
        try {
          await waitSaid(first, /^nfkeeper running$/, 90_000);
        } finally {
          await stop(first);
        }
        const owned = ['big', 'nfkeeper', ...(mode.protect ? ['guard'] : [])];
        const want = { tables: tables(ns), dumps: owned.map((t) => dumpOf(ns, t)) };
        expect(want.dumps[1]).toMatch(/nfkeeper-owner=alloc-3/);
        const where: string[] = [];
        for (const point of mode.points) {
          // No record: the start reads its tables, dumps the noise interrupts.
          if (existsSync(ns.record)) for (const f of readdirSync(ns.record)) if (f.startsWith('restart-')) rmSync(join(ns.record, f));
          const n = noise(ns);
          const d = daemon(config, ns, { args: ['--log-level', 'debug'], env: { NFKEEPER_TEST_KILL_AT: point } });
          const late = sleep(60_000).then(() => 'late' as const);
          const how = await Promise.race([d.exited.then(() => 'exited' as const), late]);
          const commits = await n.stop();
          if (how === 'late') d.child.kill('SIGKILL');
          await d.exited;
          expect(how, `${point} not reached in 60 s (${commits} commits of noise): ${text(d).slice(-3000)}`).toBe('exited');
          expect(d.child.signalCode, text(d).slice(-3000)).toBe('SIGKILL');
          expect(text(d)).toContain(`nfkeeper: killed at ${point}`);
          const readyBefore = said(d, /^nfkeeper running$/);
          // The next start, nothing else running.
          const again = daemon(config, ns, { args: ['--log-level', 'debug'] });
          try {
            await waitSaid(again, /^nfkeeper running$/);
            const listed = await call(sock, 'GET', '/v1/owners');
            expect((listed.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), point).toEqual(OWNERS);
            // In sync: a check from outside finds nothing to do.
            const check = await cli('check', '--config', config, '--netns', ns.path);
            expect(check.code, `${point}: ${check.out} ${check.err}`).toBe(0);
            expect(tables(ns), point).toEqual(want.tables);
            for (const [i, t] of owned.entries()) {
              const now = dumpOf(ns, t);
              // The protected table owned again (by the new daemon: the owner's name is nft's comment).
              if (t === 'guard') expect(now, point).toMatch(/^\s*flags owner/m);
              expect(unowned(now) === unowned(want.dumps[i]!), `${point}: table ${t} as installed`).toBe(true);
            }
          } finally {
            await stop(again);
          }
          expect(again.child.exitCode, text(again).slice(-2000)).toBe(0);
          expect(leftovers(ns), point).toEqual([]);
          where.push(`${point} (${readyBefore ? 'after' : 'before'} ready, ${commits} commits of noise)`);
        }
        console.log(`${mode.protect ? 'protect' : 'plain'}: killed at ${where.join(', ')}`);
      }, 'reopen-kill');
    });
  }
});
