/**
 * `cleanup`'s guard (src/keeper/oneshot.ts: its tables read and deleted through commitGuarded, the
 * resend proof opened at the first refusal) swept on the real kernel: one of its two tables taken
 * over (deleted and created again by another socket, which owns it: protect mode's owner flag)
 * at each step a harness can stop cleanup at: before each table read, before each commit, at each
 * refusal (before the guard asks its proof), before each resend; quiet (one plan, one commit) and
 * with another socket committing to a table of its own before cleanup's first two commits
 * (refused, planned again, refused, proved, sent again). After each: `TableOwnedError` naming the
 * table taken over, both tables still there, the other one as it was: nothing deleted. And with no
 * takeover, in both runs, both tables deleted.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { cleanup, tablesProof } from '../../src/keeper/oneshot.js';
import { TableOwnedError } from '../../src/keeper/table.js';
import { kernelHost } from '../../src/netlink/host.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { withNetns } from '../helpers/netns.js';

type Step = 'read' | 'commit' | 'refused' | 'recommit';
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['read', 1], ['read', 2], ['commit', 1]] },
  { busy: true, points: [['read', 1], ['read', 2], ['commit', 1], ['refused', 1], ['read', 3], ['read', 4], ['commit', 2], ['refused', 2], ['recommit', 1]] },
];
const config = parseConfig('tables:\n'
  + '  - { family: ip, name: a, chains: [{ name: post, type: nat, hook: postrouting, priority: srcnat, rules: [masquerade] }] }\n'
  + '  - { family: inet, name: b, chains: [{ name: c, rules: ["tcp dport 22 accept"] }] }\n');
const TABLES = [{ family: 'ip', name: 'a' }, { family: 'inet', name: 'b' }] as const;
const SEED = 'table ip a {\n chain post {\n  type nat hook postrouting priority srcnat;\n  masquerade\n }\n}\n'
  + 'table inet b {\n chain c {\n  tcp dport 22 accept\n }\n}\n';

/** Wraps cleanup's socket: `reached` runs before step `at`; with `busy`, `other` commits to a table of its own before the first two commits. */
function steps(sock: NftSocket, other: NftSocket, busy: boolean, at: [Step, number], reached: () => void) {
  const n: Record<Step, number> = { read: 0, commit: 0, refused: 0, recommit: 0 };
  const sent: string[] = [];
  let hit = false;
  const step = (s: Step) => {
    if (++n[s] === at[1] && s === at[0]) {
      hit = true;
      reached();
    }
  };
  let neighbour = 0;
  const noise = () => {
    if (busy && neighbour < 2) other.commitNow([{ verb: neighbour++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
  };
  const getTable = sock.getTable.bind(sock);
  const commit = sock.commit.bind(sock);
  const recommit = sock.recommit.bind(sock);
  sock.getTable = (...args) => {
    step('read');
    return getTable(...args);
  };
  sock.commit = async (batch, options = {}) => {
    step('commit');
    noise();
    sent.push('commit');
    try {
      return await commit(batch, options);
    } catch (e) {
      sent.push('refused');
      step('refused');
      throw e;
    }
  };
  sock.recommit = async (batch, generation) => {
    step('recommit');
    sent.push('recommit');
    const r = await recommit(batch, generation).catch((e: unknown) => {
      sent.push('refused');
      step('refused');
      throw e;
    });
    if (r === false) sent.push('refused');
    return r;
  };
  return { sent, hit: () => hit };
}

describe('cleanup and a table taken over between its read and its commit', () => {
  it('at each step, either table: TableOwnedError, nothing deleted; with none, both deleted', { timeout: 120_000 }, async () => {
    await withNetns(async (ns) => {
      const seen: string[] = [];
      const listing = (t: (typeof TABLES)[number]) => ns.exec('nft', ['list', 'table', t.family, t.name]);
      for (const run of RUNS) {
        // No takeover: the sequence of sends each point below is taken from.
        {
          ns.nft(`flush ruleset\n${SEED}`);
          const sock = open({ netns: ns.path });
          const other = open({ netns: ns.path });
          try {
            const t = steps(sock, other, run.busy, ['read', 0], () => undefined);
            expect(await cleanup(sock, config, { proof: tablesProof(kernelHost(ns.path).watch) })).toEqual(['ip a', 'inet b']);
            expect(t.sent).toEqual(run.busy ? ['commit', 'refused', 'commit', 'refused', 'recommit'] : ['commit']);
            expect(ns.exec('nft', ['list', 'tables']).split('\n').filter((l) => l && !l.includes('neighbour'))).toEqual([]);
          } finally {
            other.close();
            sock.close();
          }
        }
        for (const point of run.points) {
          for (const taken of TABLES) {
            const what = `${run.busy ? 'busy' : 'quiet'}, ${taken.family} ${taken.name} taken over at ${point[0]} ${point[1]}`;
            ns.nft(`flush ruleset\n${SEED}`);
            const kept = TABLES.find((x) => x !== taken)!;
            const keptBefore = listing(kept);
            const sock = open({ netns: ns.path });
            const other = open({ netns: ns.path });
            try {
              // Deleted and created again by `other`, which owns it now (it goes when `other` closes).
              const t = steps(sock, other, run.busy, point, () => other.commitNow([{ verb: 'delete', object: 'table', family: taken.family, name: taken.name },
                { verb: 'add', object: 'table', family: taken.family, name: taken.name, flags: 0x2 }]));
              const e = await cleanup(sock, config, { proof: tablesProof(kernelHost(ns.path).watch) }).then((x) => x, (x: unknown) => x);
              expect(t.hit(), `${what}: not reached (${t.sent.join(', ')})`).toBe(true);
              expect(e, `${what} (${t.sent.join(', ')})`).toBeInstanceOf(TableOwnedError);
              expect((e as Error).message, what).toContain(`${taken.family} ${taken.name}`);
              expect(listing(taken), what).toMatch(/flags owner/);
              expect(listing(kept), what).toBe(keptBefore);
              seen.push(`${what}: ${t.sent.join(' ')}`);
            } finally {
              other.close();
              sock.close();
            }
          }
        }
      }
      console.log(`cleanup takeovers: ${seen.join('; ')}`);
    }, 'cleanup-takeover');
  });
});
