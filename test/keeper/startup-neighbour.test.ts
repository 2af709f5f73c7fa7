/**
 * A start from empty while a neighbour commits to a table of its own (Keeper.start, FullPass): the
 * install is not the only commit since its plan, so it is read back once (by digest) to be
 * verified. The monitor joins at the install's commit, before that read: the read's generation is
 * one the events follow on from, so the followed part is seeded from it although the neighbour
 * moved the generation meanwhile (FollowedView.untouchedSince), and ready needs no second read of
 * the rules, nor passes that wait for the generation to hold still to seed it.
 */
import { describe, expect, it, vi } from 'vitest';
import { parseNftConfig, type Config } from '../../src/config/config.js';
import { Reconciler } from '../../src/keeper/reconciler.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { ip } from '../helpers/big-chain.js';
import { keeperPerTest, observedHost } from '../helpers/keeper.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';

const N = 3_000;

function config(n: number): Config {
  const rules = Array.from({ length: n }, (_, i) => `\t\tip saddr ${ip(i)} accept`);
  return parseNftConfig(['table ip own {', '\tchain c {', ...rules, '\t}', '}', ''].join('\n'), 'own.nft');
}

describe('a start from empty under a neighbour', { timeout: 120_000 }, () => {
  const { ns, sock } = socketPerTest('startup-neighbour');
  const start = keeperPerTest(ns);

  it('reads the install back once, and is ready with the followed part seeded from that read', async () => {
    const reads: string[] = [];
    const host: NftHost = observedHost(ns, ['listRules', 'listRuleDigests'], (m) => { reads.push(m); });
    const neigh = await start.neighbour('max');
    const gen = sock.generation();
    await until('the neighbour committing', () => sock.generation() > gen + 100, 10_000);
    const passes = vi.spyOn(Reconciler.prototype, 'once');
    const keeper = await start.keeper({ config: config(N), host });
    // Ready (start() resolved): the install's one read-back, nothing more; the start-up's pass alone
    // (the tick after it proved in sync by the followed part).
    expect(reads, 'rule reads up to ready').toEqual(['listRuleDigests']);
    expect(passes.mock.calls.length, 'full passes up to ready').toBe(1);
    passes.mockRestore();
    expect(keeper.followState(), 'the followed part at ready').toMatchObject({ exact: true });
    const { commits } = await neigh.stop();
    expect(commits).toBeGreaterThan(100);
    // A deletion now is repaired from the events, with no read.
    const [first] = await sock.listRules({ family: 'ip', table: 'own', chain: 'c' });
    let repaired = false;
    keeper.once('repaired', () => { repaired = true; });
    await sock.commit([{ verb: 'delete', object: 'rule', family: 'ip', table: 'own', chain: 'c', handle: first!.handle! }]);
    await until('the deletion repaired', () => repaired, 20_000);
    expect(reads).toEqual(['listRuleDigests']);
    expect((await sock.listRules({ family: 'ip', table: 'own', chain: 'c' })).length).toBe(N);
  });
});
