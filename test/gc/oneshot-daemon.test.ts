/**
 * The one-shot `nfkeeper gc` (the command line, in this process) beside `nfkeeper run` (a real
 * child process) whose registered owners are gc's live ids, through the same owners state file:
 * the sweep of test/gc/daemon-sweep.ts (its cases and checks), stopped at each step of gc a harness
 * can stop it at: the k-th scan (before its reads), the k-th commit (planned, about to be sent),
 * the k-th refusal, the k-th resend (after the proof and gc's check of it); quiet (one scan, one
 * commit), and with another socket committing to a table of its own before gc's first two commits
 * (refused, scanned again, refused, proved, sent again). An owner with a chain registers by a
 * commit of the daemon's, which moves the generation gc's batch is guarded by; one of no rules is
 * acknowledged without any commit.
 */
import { describe, expect, it, vi } from 'vitest';
import { NftSocket, open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { restoreNomad } from './fixtures.js';
import { sweepBesideDaemon } from './daemon-sweep.js';

type Step = 'scan' | 'commit' | 'refused' | 'recommit';
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['scan', 1], ['commit', 1]] },
  { busy: true, points: [['scan', 1], ['commit', 1], ['refused', 1], ['scan', 2], ['commit', 2], ['refused', 2], ['recommit', 1]] },
];

/** The nat table as iptables-nft-save prints it, counters and comments aside. */
const nat = (ns: Netns) => ns.exec('iptables-nft-save', ['-t', 'nat']).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');

/**
 * Hooks gc's socket (NftSocket.prototype: the daemon is another process): before the step `at`,
 * `reached()` runs and is waited for; with `busy`, `other` commits to a table of its own before
 * gc's first two commits.
 */
function hook(other: NftSocket, busy: boolean, at: [Step, number] | undefined, reached: () => Promise<void>) {
  const n: Record<Step, number> = { scan: 0, commit: 0, refused: 0, recommit: 0 };
  const sent: { how: 'commit' | 'recommit'; refused?: boolean }[] = [];
  let hit = false;
  const step = async (s: Step) => {
    if (++n[s] === at?.[1] && s === at[0]) {
      hit = true;
      await reached();
    }
  };
  let neighbour = 0;
  const proto = NftSocket.prototype;
  const { getTable, commit, recommit } = proto;
  vi.spyOn(proto, 'getTable').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof getTable>) {
    await step('scan');
    return getTable.apply(this, args);
  });
  vi.spyOn(proto, 'commit').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof commit>) {
    await step('commit');
    if (busy && neighbour < 2) other.commitNow([{ verb: neighbour++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    const s: (typeof sent)[number] = { how: 'commit' };
    sent.push(s);
    try {
      return await commit.apply(this, args);
    } catch (e) {
      s.refused = true;
      await step('refused');
      throw e;
    }
  });
  vi.spyOn(proto, 'recommit').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof recommit>) {
    await step('recommit');
    const s: (typeof sent)[number] = { how: 'recommit' };
    sent.push(s);
    const r = await recommit.apply(this, args).catch(async (e: unknown) => {
      s.refused = true;
      await step('refused');
      throw e;
    });
    if (r === false) s.refused = true;
    return r;
  });
  return { n, sent, hit: () => hit };
}

describe('one-shot gc beside a daemon registering owners', () => {
  it('an owner the daemon answered before gc\'s commit never has its id\'s rules collected; gc refuses beside it', { timeout: 600_000 }, async () => {
    await withNetns(async (ns) => {
      const other = open({ netns: ns.path });
      try {
        const { seen, failures } = await sweepBesideDaemon<Step>(ns, {
          name: 'gc-daemon',
          runs: RUNS,
          seed: () => {
            restoreNomad(ns);
            ns.nft('add table ip neighbour\ndelete table ip neighbour\n');
          },
          read: () => nat(ns),
          gc: async (c, gcConfig, register) => {
            const t = hook(other, c.busy, c.at, register);
            try {
              const r = await cli('gc', '--config', gcConfig, '--netns', ns.path);
              return { r, hit: t.hit(), said: `${t.n.scan} scans, sent ${JSON.stringify(t.sent)}`, touched: t.n.scan > 0, failures: [] };
            } finally {
              vi.restoreAllMocks();
            }
          },
        });
        console.log(`one-shot gc beside a daemon (${seen.length} cases): ${seen.join('; ')}`);
        expect(failures).toEqual([]);
      } finally {
        other.close();
      }
    }, 'gc-daemon');
  });
});
