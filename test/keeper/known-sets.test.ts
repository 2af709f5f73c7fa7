/**
 * The known state (src/keeper/known.ts) for tables with named sets and maps, on the real kernel:
 * after our own commit, or commits elsewhere only, a pass reads nothing (no rule, digest or element
 * dump), the followed part is seeded from what was committed rather than from a read, and the
 * safety net's read-back decodes no rule. And the fallbacks that must read still read: a foreign
 * element change, a set flushed by nft, the table deleted, between our commit and the pass, are
 * all found and repaired; a set with timeouts (which the kernel changes without a commit) is read at
 * every pass, alone.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig, type Config } from '../../src/config/config.js';
import type { Keeper } from '../../src/keeper/keeper.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { observedHost } from '../helpers/keeper.js';
import { type Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { sleep, until } from '../helpers/wait.js';
import { startKeeper } from './helpers.js';

const N = 2_000;
const CHAINS = 4;
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const elem = (i: number) => `${ip(i)} . tcp . ${80 + (i % 3)} : goto svc-${i % CHAINS}`;

/** A kube-proxy-like table: a verdict map of N elements, a plain set, and the rules that use them. */
function kpConfig(opts: { marker?: string; timeoutSet?: boolean; blockedComment?: string } = {}): Config {
  const text = ['table ip kp {',
    ...Array.from({ length: CHAINS }, (_, c) => `\tchain svc-${c} {\n\t\tcounter\n\t}`),
    '\tmap service-ips {', '\t\ttype ipv4_addr . inet_proto . inet_service : verdict',
    `\t\telements = { ${Array.from({ length: N }, (_, i) => elem(i)).join(',\n\t\t\t')} }`, '\t}',
    '\tset blocked {', '\t\ttype ipv4_addr', ...(opts.blockedComment ? [`\t\tcomment "${opts.blockedComment}"`] : []),
    '\t\telements = { 192.0.2.1, 192.0.2.2 }', '\t}',
    ...(opts.timeoutSet ? ['\tset seen {', '\t\ttype ipv4_addr', '\t\tflags timeout', '\t\ttimeout 1h', '\t}'] : []),
    '\tchain services {', '\t\ttype nat hook prerouting priority dstnat; policy accept;',
    '\t\tip saddr @blocked drop',
    '\t\tip daddr . meta l4proto . th dport vmap @service-ips',
    ...(opts.marker ? [`\t\tmeta mark ${opts.marker} counter`] : []), '\t}', '}'].join('\n');
  return parseNftConfig(`${text}\n`, 'kp.nft');
}

/** The keeper's own connection, counting every read of rules, digests and elements. */
function countingHost(ns: Netns): NftHost & { reads: Record<string, number>; total: () => number } {
  const reads: Record<string, number> = { listRules: 0, listRuleDigests: 0, listElements: 0 };
  return Object.assign(observedHost(ns, ['listRules', 'listRuleDigests', 'listElements'], (method) => { reads[method]!++; }), {
    reads,
    total: () => Object.values(reads).reduce((a, n) => a + n, 0),
  });
}

const dumps = async (k: Keeper) => (await k.metrics.dumps.get()).values[0]?.value ?? 0;
const map = { family: 'ip', table: 'kp', set: 'service-ips' } as const;

describe('the known state of a table with named sets and maps', () => {
  const { ns, sock } = socketPerTest('knownsets');
  let keeper: Keeper | undefined;
  let host: ReturnType<typeof countingHost>;

  beforeEach(() => {
    host = countingHost(ns);
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  /** A keeper on kpConfig: no tick (an hour), no safety net unless asked, no fight. */
  async function start(config = kpConfig(), trustOwnCommitMs?: number, follow = true): Promise<Keeper> {
    // The safety net is read back by the tick: a fast one when it is wanted, else none (an hour).
    keeper = await startKeeper(ns, { config, host, fight: { threshold: 1e9 }, follow,
      ...(trustOwnCommitMs !== undefined ? { trustOwnCommitMs, intervalMs: 50 } : {}) });
    if (follow) await until('the followed part to be seeded', () => keeper!.followState()?.exact === true);
    await keeper.idle();
    return keeper;
  }

  /**
   * A reload that changes a rule: the followed part cannot follow it, the full pass plans it from the known
   * state. Returns with the followed part off (the pass seeds it again from what it committed, right after).
   */
  async function reloadRule(k: Keeper, marker: string): Promise<void> {
    await k.setConfig(kpConfig({ marker }));
    expect(sock.generation()).toBe(k.status().generation);
    // Seeded again after the reload (from the reload's own commit, or by the pass its end requests), then turned off.
    if (k.followState()) {
      await until('the followed part to be seeded again', () => k.followState()?.exact === true && k.followState()!.generation === sock.generation());
      await k.idle();
      k.state.view.invalidate('the test turns it off');
    }
  }

  it('installs, seeds the followed part from its own commit and plans a rule change from what it knows: no read at all', async () => {
    const k = await start();
    // The start-up observed an empty namespace (no table: nothing to dump) and installed; the followed part
    // was seeded from that commit, not from a read of the 2,000 elements or the rules.
    expect(host.reads).toEqual({ listRules: 0, listRuleDigests: 0, listElements: 0 });
    expect(k.state.view.elementsDiffering('ip', 'kp', 'service-ips')).toBe(0);
    expect((await sock.listElements(map)).length).toBe(N);
    // A reload that changes a rule turns the followed part off; its pass plans from the known state.
    const d0 = await dumps(k);
    await reloadRule(k, '0x10');
    expect(ns.nft('list chain ip kp services')).toContain('meta mark 0x00000010 counter');
    expect(host.total()).toBe(0);
    expect(await dumps(k)).toBe(d0);
  });

  it('commits only elsewhere after its own commit: the pass proves it by the events and reads nothing', async () => {
    const k = await start();
    await reloadRule(k, '0x11');  // the followed part is off now, the known state holds
    expect(k.followState()?.exact).toBe(false);
    const reads0 = host.total();
    const d0 = await dumps(k);
    ns.nft('add table ip elsewhere');
    ns.nft('add chain ip elsewhere c');
    const gen = sock.generation();
    await k.request('manual', performance.now());
    await k.idle();
    expect(k.status().generation).toBe(gen);
    expect(host.total()).toBe(reads0);
    expect(await dumps(k)).toBe(d0);
  });

  it('a foreign element deletion between its own commit and the pass is read and repaired', async () => {
    const k = await start();
    await reloadRule(k, '0x12');
    const reads0 = host.reads.listElements!;
    ns.nft(`delete element ip kp service-ips { ${ip(1234)} . tcp . ${80 + (1234 % 3)} }`);
    await until('the element to come back', async () => (await sock.listElements(map)).length === N, 20_000);
    await k.idle();
    // It had to read the map to know, once: the elements the digest revalidation read are the ones it diffed.
    expect(host.reads.listElements).toBe(reads0 + 2);
    expect(ns.nft(`get element ip kp service-ips { ${ip(1234)} . tcp . ${80 + (1234 % 3)} }`)).toContain('goto svc-2');
  });

  it('a set flushed by nft is found and filled again, with the followed part on or off', async () => {
    const k = await start();
    // Following: the flush's 2,000 element events are more than a batch keeps, the followed part gives up, the full pass reads.
    ns.nft('flush map ip kp service-ips');
    await until('the map to be filled again', async () => (await sock.listElements(map)).length === N, 20_000);
    await k.idle();
    // Not following (after a rule change), the known state standing: the flush touched the table, so it is read.
    await reloadRule(k, '0x13');
    ns.nft('flush set ip kp blocked');
    await until('the set to be filled again', async () => (await sock.listElements({ ...map, set: 'blocked' })).length === 2, 20_000);
    await until('the map to be whole', async () => (await sock.listElements(map)).length === N, 20_000);
  });

  it('the table deleted after its own commit is installed again whole', async () => {
    const k = await start();
    await reloadRule(k, '0x14');
    ns.nft('delete table ip kp');
    await until('the table to come back', async () => (await sock.getTable('ip', 'kp')) !== undefined
      && (await sock.listElements(map)).length === N, 20_000);
    await k.idle();
    expect(ns.nft('list chain ip kp services')).toContain('meta mark 0x00000014 counter');
    expect((await sock.listElements({ ...map, set: 'blocked' })).length).toBe(2);
  });

  it('the safety net reads back its own commit by digests, decoding only the chains it wrote, and no element while the followed part vouches for them', async () => {
    const k = await start(kpConfig(), 300);
    // The start-up's trusted install is read back trustOwnCommitMs later.
    const d0 = await dumps(k);
    await until('the read-back', async () => await dumps(k) > d0, 20_000);
    await k.idle();
    // One digest dump of the table; the install's known rules have no digests (their handles were
    // derived from its echo), and the dump's digests are their desired rules': nothing decoded, and no
    // element read, the exact followed part vouching for the elements.
    expect(host.reads.listRuleDigests).toBe(1);
    expect(host.reads.listRules).toBe(0);
    expect(host.reads.listElements).toBe(0);
    expect(k.followState()?.exact).toBe(true);
    // Verified by that read: no more read-backs.
    const d1 = await dumps(k);
    await sleep(800);
    expect(await dumps(k)).toBe(d1);
  });

  it('the safety net reads the elements the followed part cannot vouch for (not following)', async () => {
    const k = await start(kpConfig(), 300, false);
    const d0 = await dumps(k);
    await until('the start-up read-back', async () => await dumps(k) > d0, 20_000);
    await k.idle();
    expect(host.reads.listRules).toBe(0);  // proved by the desired rules' digests (as above)
    expect(host.reads.listElements).toBe(2);  // both named sets, once
    const d1 = await dumps(k);
    await k.setConfig(kpConfig({ marker: '0x15' }));
    await until('the reload\'s read-back', async () => await dumps(k) > d1, 20_000);
    await k.idle();
    expect(host.reads.listRules).toBe(0);  // the chain the reload wrote to, proved by its desired digests too
    expect(host.reads.listElements).toBe(4);
  });

  it('a set with timeouts is read at each pass from the known state, alone', async () => {
    const k = await start(kpConfig({ timeoutSet: true }), undefined, false);
    await k.setConfig(kpConfig({ timeoutSet: true, marker: '0x17' }));
    await k.idle();
    // The known state is at the kernel's generation: a pass plans from it and reads the timeout set only.
    const reads0 = { ...host.reads };
    await k.request('manual', performance.now());
    await k.idle();
    expect(host.reads).toEqual({ ...reads0, listElements: reads0.listElements! + 1 });
    // A reload that adds or drops a timeout set is planned from the known state too (the set is created, deleted).
    await k.setConfig(kpConfig({ marker: '0x17' }));
    expect(ns.nft('list table ip kp')).not.toContain('set seen');
    await k.setConfig(kpConfig({ timeoutSet: true, marker: '0x17' }));
    expect(ns.nft('list table ip kp')).toContain('set seen');
    // What the pass reads there is what it enforces: an element nobody desired goes.
    ns.nft('add element ip kp seen { 198.51.100.7 }');
    await until('the foreign element to go', async () => (await sock.listElements({ ...map, set: 'seen' })).length === 0, 20_000);
  });

  it('an install of 1,100 rules is read back by nothing right after it; the safety net\'s read-back is one digest dump, nothing decoded', async () => {
    // More rules than a batch once echoed whole: two of them are echoed now, the others' handles derived.
    const rules = Array.from({ length: 1100 }, (_, i) => `          - ip saddr ${ip(i)} ip daddr 192.0.2.1 return`).join('\n');
    const config = parseConfig(`tables:\n  - family: ip\n    name: big\n    chains:\n      - name: c\n        type: nat\n` +
      `        hook: postrouting\n        priority: srcnat\n        rules:\n${rules}\n`, 'big.yaml');
    const k = await start(config, 300);
    // The followed part is seeded from the install's derived handles: no read.
    expect(host.reads).toEqual({ listRules: 0, listRuleDigests: 0, listElements: 0 });
    await sleep(1200);  // four times trustOwnCommitMs, with a 50 ms tick
    // The read-back, once: the chain's digests, which are its desired rules'.
    expect(host.reads).toEqual({ listRules: 0, listRuleDigests: 1, listElements: 0 });
    // What it learnt is the kernel's state: a rule deleted by hand is repaired (from the followed part, by handle).
    const h = (await sock.listRules({ family: 'ip', table: 'big', chain: 'c' }))[70]!.handle!;
    ns.nft(`delete rule ip big c handle ${h}`);
    await until('the rule to come back', async () => (await sock.listRules({ family: 'ip', table: 'big', chain: 'c' })).length === 1100, 20_000);
  });

  it('a reload that defines a set anew (deleted and created again, the rule using it rewritten) is followed, and a full read agrees', async () => {
    const k = await start(kpConfig(), undefined, false);
    await k.setConfig(kpConfig({ blockedComment: 'v2' }));
    expect(ns.nft('list set ip kp blocked')).toContain('comment "v2"');
    const reads0 = host.total();
    await k.request('manual', performance.now());
    await k.idle();
    expect(host.total()).toBe(reads0);  // planned from the known state: nothing to do, nothing read
    // The safety net's read (digests, set definitions, elements) finds it as known.
    expect(await k.readBack('manual', performance.now())).toMatchObject({ status: 'in-sync', ops: 0 });
    expect(host.total()).toBeGreaterThan(reads0);
    expect((await sock.listElements({ ...map, set: 'blocked' })).length).toBe(2);
  });

  it('a reload seeds the followed part again from what it committed, without a read', async () => {
    const k = await start();
    await k.setConfig(kpConfig({ marker: '0x18' }));
    await until('the followed part to be seeded again', () => k.followState()?.exact === true && k.followState()!.generation === sock.generation());
    await k.idle();
    expect(host.total()).toBe(0);
    // And it is the kernel's state: a foreign element deletion is repaired from it, with no read.
    ns.nft(`delete element ip kp service-ips { ${ip(77)} . tcp . ${80 + (77 % 3)} }`);
    await until('the element to come back', async () => (await sock.listElements(map)).length === N, 20_000);
    await k.idle();
    expect(host.reads.listElements).toBe(0);
  });
});
