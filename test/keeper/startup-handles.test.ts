/**
 * A start from empty: the install asks the echo of its chain's first and last new rule only, the
 * other rules' handles are derived from them (src/netlink/handles.ts), and the followed part is
 * seeded from the known rules that leaves, so no read of the installed chain follows "running". A
 * rule deleted right at ready is then put back in one op at its place, with no dump of the chain.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { observedHost } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { chainLines, handles, seedConfig, seedRule } from './helpers.js';

const N = 3000;
const rule = seedRule;
const config = (): Config => seedConfig(N);

describe('a start from empty', () => {
  const { ns, sock } = socketPerTest('starthandles');
  let keeper: Keeper | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  it('reads no rule of the installed chain back; a rule deleted at ready is put back in one op', async () => {
    const mid = N >> 1;
    let installed = false;
    const readsAfter: string[] = [];
    let echoed: unknown;
    const host: NftHost = observedHost(ns as Netns, ['listRules', 'listRuleDigests', 'commit'], (method, args) => {
      if (method === 'commit' && !installed) echoed = (args[1] as { echo?: unknown } | undefined)?.echo;
      if (method === 'commit') installed = true;
      else if (installed) readsAfter.push(`${method} ${(args[0] as { chain?: string } | undefined)?.chain ?? '(table)'}`);
    });
    const repairs: RepairReport[] = [];
    const k = keeper = new Keeper({ config: config(), host, intervalMs: 3_600_000, netns: ns.path });
    k.on('error', () => undefined);
    let seeded = false;
    k.on('followed', (f?: { exact: boolean }) => { seeded = f?.exact === true; });
    await k.start();
    expect(installed).toBe(true);
    // The install's echo: its first and last rule (after the table and the chain).
    expect(echoed).toEqual([2, N + 1]);
    expect(seeded).toBe(true);
    // The install is reported too: only the repairs after the deletion count.
    k.on('repaired', (r: RepairReport) => { repairs.push(r); });
    const gen = sock.generation();
    ns.nft(`delete rule ip seed post handle ${handles(ns, 'ip', 'seed', 'post')[mid]!}`);
    await until('the repair', () => repairs.length > 0, 10_000);
    expect(repairs[0]!.ops).toBe(1);
    expect(sock.generation()).toBeGreaterThan(gen);
    const lines = chainLines(ns, 'ip', 'seed', 'post');
    expect(lines).toHaveLength(N);
    expect(lines[mid]).toBe(rule(mid));
    // Nothing read a rule of the chain after the install: not a seeding read, not the repair.
    expect(readsAfter).toEqual([]);
  });
});
