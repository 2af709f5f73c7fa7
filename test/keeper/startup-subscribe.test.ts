/**
 * The keeper's monitor joins the nftables group only after the start-up pass (Keeper.start): the
 * start-up's own install reaches it as no event, and a commit that lands between that pass and the
 * join, which no event can tell, is found by the generation and repaired at once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Keeper } from '../../src/keeper/keeper.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { kernelHost } from '../../src/netlink/host.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { parseConfig } from '../../src/config/config.js';
import { FLANNEL_RULES, chainLines, handles, postroutingYaml, startKeeper } from './helpers.js';

const CHAIN = ['ip', 'nfkeeper', 'postrouting'] as const;

describe('the monitor subscribed after the start-up pass', () => {
  const { ns, sock } = socketPerTest('startup-subscribe');
  let keeper: Keeper | undefined;

  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  // More rules than a commit echoes: our own install's events would be handed over (no echo to skip them by).
  const BIG = Array.from({ length: 2000 }, (_, i) => `ip saddr 10.1.${i >> 8}.${i & 255} return`);

  it('the start-up install is handed over as no event; a later foreign deletion is', async () => {
    const handed: number[] = [];
    const host: NftHost = {
      connect: kernelHost(ns.path).connect,
      watch: (o) => new Monitor({ ...o, netns: ns.path, onBatch: (b) => { handed.push(b.generation); o.onBatch(b); } }),
    };
    const before = sock.generation();
    keeper = await startKeeper(ns, { host, config: parseConfig(postroutingYaml('nfkeeper', BIG, 'postrouting'), 'big.yaml') });
    const installed = sock.generation();
    expect(installed).toBeGreaterThan(before);
    expect(chainLines(ns, ...CHAIN)).toEqual(BIG);
    expect(handed.filter((g) => g <= installed)).toEqual([]);
    // Subscribed now: a foreign deletion arrives as its batch and is put back.
    ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, ...CHAIN)[1]}`);
    await until('the deleted rule put back', () => chainLines(ns, ...CHAIN).length === BIG.length);
    expect(chainLines(ns, ...CHAIN)).toEqual(BIG);
    expect(handed.some((g) => g > installed)).toBe(true);
  });

  /** A host whose monitor, when the keeper subscribes it, first has a rule deleted (after the start-up pass, before the join). */
  function deletingBeforeJoin(deleted: { generation: number }): NftHost {
    return {
      connect: kernelHost(ns.path).connect,
      watch: (o) => {
        const m = new Monitor({ ...o, netns: ns.path });
        const subscribe = m.subscribe.bind(m);
        m.subscribe = () => {
          // No event of it can reach the monitor.
          ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, ...CHAIN)[1]}`);
          deleted.generation = sock.generation();
          subscribe();
        };
        return m;
      },
    };
  }

  it('a foreign commit between the start-up pass and the join is found by the generation and repaired before start() returns', async () => {
    const deleted = { generation: 0 };
    // The test's tick is an hour: only the pass start() schedules can repair it.
    keeper = await startKeeper(ns, { host: deletingBeforeJoin(deleted) });
    expect(deleted.generation).toBeGreaterThan(0);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    expect(sock.generation()).toBeGreaterThan(deleted.generation);
    expect(keeper.isReady()).toBe(true);
  });

  it('the same onto an installed ruleset: the start-up pass seeds the followed part before the join, which proves no run of events by it', async () => {
    ns.nft(`add table ip nfkeeper
add chain ip nfkeeper postrouting { type nat hook postrouting priority srcnat; policy accept; }
${FLANNEL_RULES.map((r) => `add rule ip nfkeeper postrouting ${r}`).join('\n')}
`);
    const deleted = { generation: 0 };
    keeper = await startKeeper(ns, { host: deletingBeforeJoin(deleted) });
    expect(deleted.generation).toBeGreaterThan(0);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
    expect(sock.generation()).toBeGreaterThan(deleted.generation);
  });
});
