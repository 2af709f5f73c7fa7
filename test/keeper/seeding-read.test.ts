/**
 * A rule deleted while the followed part's seeding read runs, after a start from empty whose echo
 * does not prove the handles derived from it (here the echo of the chain's last rule is not asked,
 * as a kernel that allocated otherwise would leave them unproved; src/netlink/handles.ts), so the
 * daemon reads its chain back by digest to learn them: the
 * seeding read ends when the generation moves under it, and the deletion's pass recognises the
 * chain's other rules by digest (the desired ones in order, one left out), so the rule is put back
 * in one op without decoding the chain. On the real kernel, the deletion made at the seeding read's
 * own digest dump (so it is always during it).
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

const N = 1500;
const rule = seedRule;
const config = (): Config => seedConfig(N);

describe('a rule deleted during the seeding read after a start from empty', () => {
  const { ns, sock } = socketPerTest('seedread');
  let keeper: Keeper | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  it('is put back in one op, the chain never decoded after the deletion', async () => {
    const mid = N >> 1;
    let started = false;
    let deleted = false;
    const decodedAfter: (string | undefined)[] = [];
    let chainReads = 0;
    let digestDumps = 0;
    const host: NftHost = observedHost(ns as Netns, ['listRules', 'listRuleDigests', 'getChain', 'listChains', 'commit'], (method, args) => {
      // The install's echo without its last point: the derived handles unproved.
      const options = args[1] as { echo?: unknown } | undefined;
      if (method === 'commit' && Array.isArray(options?.echo)) args[1] = { ...options, echo: options.echo.slice(0, 1) };
      if (method === 'listRules' && deleted) decodedAfter.push((args[0] as { chain?: string }).chain);
      if ((method === 'getChain' || method === 'listChains') && deleted) chainReads++;
      if (method === 'listRuleDigests' && deleted) digestDumps++;
      // The seeding read's digest dump: the middle rule goes just before the kernel walks the chain.
      if (method === 'listRuleDigests' && started && !deleted) {
        deleted = true;
        ns.nft(`delete rule ip seed post handle ${handles(ns, 'ip', 'seed', 'post')[mid]!}`);
      }
    });
    const repairs: RepairReport[] = [];
    const k = keeper = new Keeper({ config: config(), host, intervalMs: 3_600_000, netns: ns.path });
    k.on('error', () => undefined);
    // The install (from empty) is reported too: only the repairs after the deletion count.
    let chainReadsAtRepair = 0;
    let digestDumpsAtRepair = 0;
    k.on('repaired', (r: RepairReport) => {
      if (deleted && repairs.push(r) === 1) {
        chainReadsAtRepair = chainReads;
        digestDumpsAtRepair = digestDumps;
      }
    });
    let seeded = false;
    k.on('followed', (f?: { exact: boolean }) => { seeded = f?.exact === true; });
    await k.start();
    started = true;
    await until('the deletion during the seeding read', () => deleted, 10_000);
    await until('the repair', () => repairs.length > 0, 10_000);
    expect(repairs[0]!.ops).toBe(1);
    expect(decodedAfter).toEqual([]);
    // The seeding read's dump found the generation moved and ended the read: only the deletion's
    // pass read the table (a seeding read that went on would have read it as well).
    expect(chainReadsAtRepair).toBe(1);
    // That pass read the chain once, by digest.
    expect(digestDumpsAtRepair).toBe(1);
    const lines = chainLines(ns, 'ip', 'seed', 'post');
    expect(lines).toHaveLength(N);
    expect(lines[mid]).toBe(rule(mid));
    // The followed part is seeded after it: a second deletion is an event repair.
    await until('the followed part seeded', () => seeded, 10_000);
    const gen = sock.generation();
    ns.nft(`delete rule ip seed post handle ${handles(ns, 'ip', 'seed', 'post')[0]!}`);
    await until('the second repair', () => repairs.length > 1, 10_000);
    expect(sock.generation()).toBeGreaterThan(gen);
    expect(chainLines(ns, 'ip', 'seed', 'post')[0]).toBe(rule(0));
  });
});
