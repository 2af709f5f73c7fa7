/**
 * The guard's resend (src/netlink/guard.ts: a batch refused by the generation, proved to still hold
 * by the events, sent again as encoded by the addon's recommit) under faults. The daemon owns a
 * 200-rule chain and an owners table; a neighbour process commits to a table of its own as fast as
 * it can, and the chain is flushed by nft (200 ops: the full pass, whose commit the neighbour's
 * commits refuse). kill -9 at each point of the resend (the addon's test seam NFKEEPER_TEST_KILL_AT):
 *   refused-kept     the refusal read, the batch kept for a resend (NFK_RESEND_KILLS=all for the first two)
 *   recommit-proved  the proof given, the batch's generation replaced, nothing sent
 *   recommit-sent    the resend sent (the kernel took or refused it inside sendmsg), its acks unread
 *   recommit-acked   the acks read, the outcome not yet back in JavaScript (nothing noted)
 * and a resend whose acknowledgements are lost (NFKEEPER_TEST_LOSE_RESEND_ACK: as ENOBUFS; its
 * outcome unknown to the daemon), any resend's or only a refused one's (`refused`): the next repair
 * the daemon reports is in the kernel when it is reported. After each: the next start (quiet) is ready,
 * lists every owner, `nfkeeper check` finds nothing to do, every table is as the clean install left
 * it (nothing lost, nothing twice), no temp file is left, and it stops cleanly.
 */
import { existsSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { call } from '../../src/owners/index.js';
import { cli } from '../helpers/cli.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { sleep } from '../helpers/wait.js';
import { OWNERS, ownersSetUp } from './crash-loop.js';
import { daemon, logged, stop, waitSaid, type Child } from './owners-child.js';

const RULES = 200;
const ALL = ['refused-kept', 'recommit-proved', 'recommit-sent', 'recommit-acked'];
// By default the two points after which the kernel holds the resend and the daemon never learnt
// it; every point with NFK_RESEND_KILLS=all, or those named (comma-separated; `none`: only the lost acks).
const PICK = process.env.NFK_RESEND_KILLS;
const POINTS = PICK === 'all' ? ALL : PICK === 'none' ? [] : PICK ? PICK.split(',') : ['recommit-sent', 'recommit-acked'];

const text = (d: Child) => d.logs.join('');
const alive = (d: Child) => d.child.exitCode === null && d.child.signalCode === null;
const tables = (ns: Netns) => ns.exec('nft', ['list', 'tables']).trim().split('\n').sort();
/** A table as nft lists it, without who owns it (the killed daemon's flag goes with its socket). */
const listed = (ns: Netns, t: string) => ns.exec('nft', ['list', 'table', 'ip', t]).replace(/ # progname .*$/m, '').replace(/^\s*flags .*\n/m, '');
const rulesIn = (ns: Netns) => ns.exec('nft', ['list', 'chain', 'ip', 'big', 'input']).split('\n').filter((l) => l.includes('dport 22 accept')).length;

/** Flushes the chain every 1.5 s while the daemon lives and `until()` is false, at most `ms`: each flush a full pass under the neighbour. */
async function flushUntil(ns: Netns, d: Child, until: () => boolean, ms: number): Promise<number> {
  let flushes = 0;
  for (const end = Date.now() + ms; alive(d) && !until() && Date.now() < end; flushes++) {
    ns.nft('flush chain ip big input\n');
    for (const next = Date.now() + 1500; alive(d) && !until() && Date.now() < next;) await sleep(30);
  }
  return flushes;
}

describe('faults in the guard\'s resend', { timeout: 600_000 }, () => {
  it(`kill -9 at ${POINTS.join(', ')}, and a resend's acks lost: the next start holds exactly the install, owners kept`, async () => {
    await withNetns(async (ns) => {
      const { config, sock } = ownersSetUp('resend-kill', RULES);
      const first = daemon(config, ns);
      try {
        await waitSaid(first, /^nfkeeper running$/, 90_000);
      } finally {
        await stop(first);
      }
      const want = { tables: tables(ns), big: listed(ns, 'big'), owners: listed(ns, 'nfkeeper') };
      expect(rulesIn(ns)).toBe(RULES);

      const cases = [...POINTS.map((p) => ({ name: p, env: { NFKEEPER_TEST_KILL_AT: p } })),
        { name: 'resend-ack-lost', env: { NFKEEPER_TEST_LOSE_RESEND_ACK: '1' } },
        { name: 'refused-resend-ack-lost', env: { NFKEEPER_TEST_LOSE_RESEND_ACK: 'refused' } }];
      const repairs = (d: Child) => logged(d).filter((l) => l.msg === 'repaired').length;
      const where: string[] = [];
      for (const k of cases) {
        const d = daemon(config, ns, { args: ['--log-level', 'debug'], env: k.env });
        await waitSaid(d, /^nfkeeper running$/, 60_000);
        const neighbour = await startNeighbour(ns.path, 'max');
        let flushes: number;
        try {
          const lost = () => text(d).includes('resend\'s acknowledgements lost');
          flushes = await flushUntil(ns, d, lost, 45_000);
          if (k.name.endsWith('ack-lost')) {
            expect(lost(), `no resend in 45 s: ${text(d).slice(-3000)}`).toBe(true);
            // Acknowledged = durable: the next repair the daemon reports is in the kernel when it says so
            // (a refusal whose ack was lost, taken as a commit, would be reported with the chain empty).
            const before = repairs(d);
            for (const end = Date.now() + 30_000; Date.now() < end && repairs(d) === before;) await sleep(5);
            expect(repairs(d), `${k.name}: no repair reported in 30 s`).toBeGreaterThan(before);
            expect(rulesIn(ns), `${k.name}: the chain when the daemon said repaired`).toBe(RULES);
            // The daemon, its outcome unknown, puts the chain back as desired (not twice) while the neighbour still runs.
            for (const end = Date.now() + 30_000; Date.now() < end && rulesIn(ns) !== RULES;) await sleep(100);
            expect(alive(d), text(d).slice(-3000)).toBe(true);
          }
        } finally {
          await neighbour.stop();
        }
        if (k.name.endsWith('ack-lost')) {
          expect(rulesIn(ns), k.name).toBe(RULES);
          await stop(d);
          expect(d.child.exitCode, text(d).slice(-2000)).toBe(0);
        } else {
          for (const end = Date.now() + 5000; alive(d) && Date.now() < end;) await sleep(30);
          if (alive(d)) await stop(d);
          expect(d.child.signalCode, `${k.name} not reached in ${flushes} flushes: ${text(d).slice(-3000)}`).toBe('SIGKILL');
          expect(text(d)).toContain(`nfkeeper: killed at ${k.name}`);
        }
        // The next start, quiet.
        const again = daemon(config, ns);
        try {
          await waitSaid(again, /^nfkeeper running$/);
          const got = await call(sock, 'GET', '/v1/owners');
          expect((got.body as { owners: { id: string }[] }).owners.map((x) => x.id).sort(), k.name).toEqual(OWNERS);
          const check = await cli('check', '--config', config, '--netns', ns.path);
          expect(check.code, `${k.name}: ${check.out} ${check.err}`).toBe(0);
          expect(tables(ns), k.name).toEqual(want.tables);
          expect(rulesIn(ns), k.name).toBe(RULES);
          expect(listed(ns, 'big'), k.name).toBe(want.big);
          expect(listed(ns, 'nfkeeper'), k.name).toBe(want.owners);
        } finally {
          await stop(again);
        }
        expect(again.child.exitCode, text(again).slice(-2000)).toBe(0);
        expect(existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.includes('.tmp-')) : [], k.name).toEqual([]);
        where.push(`${k.name} (${flushes} flushes)`);
      }
      console.log(`resend faults: ${where.join(', ')}`);
    }, 'resend-kill');
  });
});
