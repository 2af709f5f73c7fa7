/**
 * The follow pass and the safety net under a neighbour committing to a table of its own, on the real
 * kernel (src/keeper/follow-repair.ts).
 *
 * A deleted rule is repaired from the events; a neighbour's commit the monitor has not delivered yet
 * refuses that repair by the generation. Where the events then prove that commit named none of our
 * tables, the follow pass sends the same batch again, as encoded, guarded by the later generation
 * (sendGuarded, the full pass's resend): no full read. And the safety net's read-back is owed only
 * for what may have changed our tables since a read found them as desired: the neighbour's commits
 * elsewhere arm none, a foreign commit to our table still does.
 */
import { describe, expect, it } from 'vitest';
import { parseNftConfig, type Config } from '../../src/config/config.js';
import { ip } from '../helpers/big-chain.js';
import { countingHost, keeperPerTest } from '../helpers/keeper.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { sleep, until } from '../helpers/wait.js';

const N = 2_000;

/** table ip own: a followed set of two elements and a chain of n rules. */
function config(n: number): Config {
  const rules = Array.from({ length: n }, (_, i) => `\t\tip saddr ${ip(i)} accept`);
  return parseNftConfig(['table ip own {', '\tset s {', '\t\ttype ipv4_addr', '\t\telements = { 192.0.2.1, 192.0.2.2 }', '\t}',
    '\tchain c {', ...rules, '\t}', '}', ''].join('\n'), 'own.nft');
}

describe('the follow pass and the safety net under a neighbour', { timeout: 120_000 }, () => {
  const { ns, sock } = socketPerTest('follow-neighbour');
  const start = keeperPerTest(ns);

  const handles = async () => (await sock.listRules({ family: 'ip', table: 'own', chain: 'c' })).map((r) => r.handle!);

  it('deleted rules under a neighbour committing as fast as it can: each repaired from the events, no full read', async () => {
    const host = countingHost(ns);
    const keeper = await start.keeper({ config: config(N), host });
    await keeper.idle();
    const fallbacks: unknown[] = [];
    keeper.state.events.on('follow-fallback', (why: unknown) => fallbacks.push(why));
    const hs = await handles();
    const neigh = await start.neighbour('max');
    const gen = sock.generation();
    await until('the neighbour committing', () => sock.generation() > gen + 100, 10_000);
    const reads = host.ruleReads;
    const retries0 = (await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0;
    const DELETIONS = 10;
    const each: string[] = [];
    for (let i = 0; i < DELETIONS; i++) {
      const victim = hs[(i + 1) * 150]!;
      let repaired: { latencyMs: number } | undefined;
      const on = (r: { latencyMs: number }) => { repaired = r; };
      keeper.once('repaired', on);
      const before = (await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0;
      await sock.commit([{ verb: 'delete', object: 'rule', family: 'ip', table: 'own', chain: 'c', handle: victim }]);
      await until(`deletion ${i} repaired`, () => repaired !== undefined, 20_000);
      const after = (await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0;
      each.push(`${repaired!.latencyMs.toFixed(1)} ms/${after - before}`);
    }
    console.log(`each repair (latency/refusals): ${each.join(' ')}`);
    const retries = ((await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0) - retries0;
    const { commits, failed } = await neigh.stop();
    console.log(`${DELETIONS} deletions under ${commits} neighbour commits: ${retries} refusals, fallbacks ${JSON.stringify(fallbacks)}`);
    expect(fallbacks, 'a repair left to the full pass').toEqual([]);
    expect(host.ruleReads - reads, 'rule reads').toBe(0);
    expect(failed).toBe(0);
    await keeper.idle();
    expect((await handles()).length).toBe(N);
  });

  it('the safety net: no read-back for a neighbour\'s commits elsewhere; one after a foreign commit to our table', async () => {
    const host = countingHost(ns);
    const keeper = await start.keeper({ config: config(200), host, intervalMs: 100, trustOwnCommitMs: 800 });
    // The install is our own commit: its read-back comes trustOwnCommitMs after it.
    const st = keeper.state as { readAt?: number };
    await until('the install read back', () => st.readAt !== undefined, 10_000);
    const neigh = await start.neighbour(200);
    const gen = sock.generation();
    await until('the neighbour committing', () => sock.generation() > gen + 20, 10_000);
    const reads = host.ruleReads;
    // Several trustOwnCommitMs of ticks, each finding the generation moved by the neighbour.
    await sleep(4_000);
    expect(host.ruleReads - reads, 'rule reads while only the neighbour committed').toBe(0);
    expect(keeper.isReady()).toBe(true);
    // A foreign commit naming our table that leaves it as desired (an element added and deleted in one
    // batch): the events say clean, but only a read says the events followed it right.
    const before = host.ruleReads;
    ns.nft('add element ip own s { 192.0.2.9 }\ndelete element ip own s { 192.0.2.9 }\n');
    await until('read back after the foreign commit to our table', () => host.ruleReads > before, 10_000);
    await neigh.stop();
  });
});
