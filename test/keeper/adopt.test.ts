/**
 * A keeper restarted onto the ruleset an earlier keeper left in place (an upgrade: the rules stay
 * when it stops) recognises its rules by digest instead of decoding them (observeTable's adopt,
 * src/keeper/table.ts), and finds exactly what a full read finds: the same drift, the same
 * repair. On the real kernel: the identical ruleset (no commit, the generation unchanged, no rule
 * decoded), one rule changed by nft in the middle (that chain decoded, exactly that rule
 * repaired), a rule with the same expressions and another comment, a set with other elements.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { Keeper, checkOnce, type RepairReport } from '../../src/keeper/keeper.js';
import { Reconciler } from '../../src/keeper/reconciler.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { open } from '../../src/netlink/socket.js';
import { observedHost } from '../helpers/keeper.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { chainLines, handles, startKeeper } from './helpers.js';
import { Batch } from '../../src/netlink/batch.js';
import { compileRule, queueRule } from '../../src/rules/index.js';
import { ruleDigester } from '../../src/netlink/socket.js';
import { loadAddon, type Addon } from '../../src/netlink/addon.js';
import { CORPUS } from '../rules/corpus.js';
import { BASE_CHAINS, CHAIN_NAME, INTERFACES, TABLE } from '../rules/oracle.js';

const N = 300;
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const RULES = [
  ...Array.from({ length: N }, (_, i) => `ip saddr ${ip(i)} ip daddr 192.0.2.1 return`),
  'ip saddr @blocked return',
  'ip daddr != 224.0.0.0/4 meta mark & 0x4000 == 0x4000 masquerade fully-random comment "masq"',
];
const YAML = `
tables:
  - family: ip
    name: adopt
    sets:
      - name: blocked
        type: ipv4_addr
        elements: [192.0.2.7, 192.0.2.8]
    chains:
      - name: post
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
${RULES.map((r) => `          - '${r.replace(/'/g, "''")}'`).join('\n')}
      - name: side
        rules:
          - ip daddr 198.51.100.1 return
          - tcp dport { 80, 443 } return
`;
const config = (): Config => parseConfig(YAML, 'adopt.yaml');

/** The keeper's connection, recording the chains of every decoding rule dump (undefined: the table's). */
function recordingHost(ns: Netns): NftHost & { decoded: (string | undefined)[]; digestDumps: number } {
  const seen = { decoded: [] as (string | undefined)[], digestDumps: 0 };
  return Object.assign(seen, observedHost(ns, ['listRules', 'listRuleDigests'], (method, args) => {
    if (method === 'listRules') seen.decoded.push((args[0] as { chain?: string }).chain);
    else seen.digestDumps++;
  }));
}

describe('restart onto an existing owned ruleset, adopted by digest', () => {
  const { ns, sock } = socketPerTest('adopt');
  let keeper: Keeper | undefined;

  beforeEach(async () => {
    // The earlier keeper: installs, stops, leaves its rules.
    const first = await startKeeper(ns, { config: config() });
    await first.stop();
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  /** What a full, decoding read finds now, and what the adopting read finds: they must agree. */
  async function sameObservationBothWays(): Promise<string[]> {
    const tables = config().tables;
    const full = await new Reconciler(sock, { attempts: 1 }).once({ tables, readOnly: true });
    const adopted = await new Reconciler(sock, { attempts: 1 }).once({ tables, readOnly: true, adopt: true });
    const words = (r: typeof full) => r.first.flat.map((d) => `${d.kind} ${d.chain ?? d.set ?? ''}: ${d.detail}`);
    expect(words(adopted)).toEqual(words(full));
    return words(full);
  }

  /** A keeper started on what is there (no followed part: its seeding read would be another dump), with its repairs. */
  async function restart(): Promise<{ k: Keeper; host: ReturnType<typeof recordingHost>; repairs: RepairReport[] }> {
    const host = recordingHost(ns);
    const repairs: RepairReport[] = [];
    const k = keeper = new Keeper({ config: config(), host, follow: false, intervalMs: 3_600_000, netns: ns.path });
    k.on('error', () => undefined);
    k.on('repaired', (r: RepairReport) => repairs.push(r));
    await k.start();
    await k.idle();
    return { k, host, repairs };
  }

  it('the identical ruleset: no commit, the generation unchanged, no rule decoded but the anonymous set\'s chain', async () => {
    expect(await sameObservationBothWays()).toEqual([]);
    const gen = sock.generation();
    const before = handles(ns, 'ip', 'adopt', 'post');
    const { k, host, repairs } = await restart();
    expect(repairs).toEqual([]);
    expect(sock.generation()).toBe(gen);
    expect(k.status().generation).toBe(gen);
    expect(handles(ns, 'ip', 'adopt', 'post')).toEqual(before);
    expect(host.digestDumps).toBe(1);
    // Only 'side' has a rule without a digest (an anonymous set: its key holds the set's elements).
    expect(host.decoded).toEqual(['side']);
    expect((await k.metrics.repairs.get()).values.filter((v) => v.value !== 0)).toEqual([]);
  });

  /**
   * The middle rule of 'post' changed by `edit` (nft, given its handle): both reads find the chain
   * differing, the restart decodes it and repairs exactly that rule in one op (not a rewrite of the
   * chain); every other rule keeps its handle.
   */
  async function oneRuleRepaired(edit: (handle: number) => string, decoded = ['post', 'side']): Promise<void> {
    const h = handles(ns, 'ip', 'adopt', 'post');
    const mid = N >> 1;
    ns.nft(edit(h[mid]!));
    const drift = await sameObservationBothWays();
    expect(drift).toHaveLength(1);
    expect(drift[0]).toMatch(/^rules-differ post: /);
    const gen = sock.generation();
    const { host, repairs: reported } = await restart();
    expect(host.decoded.sort()).toEqual(decoded);
    expect(reported).toHaveLength(1);
    expect(reported[0]!.ops).toBe(1);
    expect(sock.generation()).toBe(gen + 1);
    const after = handles(ns, 'ip', 'adopt', 'post');
    expect(after.filter((x, i) => i !== mid && x !== h[i])).toEqual([]);
    expect(after).toHaveLength(h.length);
    expect(chainLines(ns, 'ip', 'adopt', 'post')[mid]).toBe(`ip saddr ${ip(mid)} ip daddr 192.0.2.1 return`);
    expect(await sameObservationBothWays()).toEqual([]);
  }

  it('one rule changed by nft in the middle: its chain decoded, exactly that rule replaced in place', async () => {
    await oneRuleRepaired((handle) => `replace rule ip adopt post handle ${handle} ip saddr 10.99.0.1 ip daddr 192.0.2.1 return\n`);
  });

  it('one rule deleted by nft in the middle: its chain not decoded (the desired digests with one left out), exactly that rule added back', async () => {
    await oneRuleRepaired((handle) => `delete rule ip adopt post handle ${handle}\n`, ['side']);
  });

  it('a rule with the same expressions and another comment: not taken by its expressions, repaired', async () => {
    const h = handles(ns, 'ip', 'adopt', 'post');
    ns.nft(`replace rule ip adopt post handle ${h[3]} ${RULES[3]} comment "not ours"\n`);
    const drift = await sameObservationBothWays();
    expect(drift).toHaveLength(1);
    const { host, repairs } = await restart();
    expect(host.decoded.sort()).toEqual(['post', 'side']);
    expect(repairs.map((r) => r.ops)).toEqual([1]);
    expect(ns.exec('nft', ['list', 'chain', 'ip', 'adopt', 'post'])).not.toMatch(/not ours/);
    expect(chainLines(ns, 'ip', 'adopt', 'post')[3]).toBe(RULES[3]);
    expect(await sameObservationBothWays()).toEqual([]);
  });

  it('a set with other elements: the elements repaired, no rule decoded for it', async () => {
    ns.nft('add element ip adopt blocked { 203.0.113.9 }\ndelete element ip adopt blocked { 192.0.2.8 }\n');
    const drift = await sameObservationBothWays();
    expect(drift).toHaveLength(1);
    expect(drift[0]).toMatch(/^elements-differ blocked/);
    const gen = sock.generation();
    const { host } = await restart();
    expect(host.decoded).toEqual(['side']);
    expect(sock.generation()).toBe(gen + 1);
    const els = (await sock.listElements({ family: 'ip', table: 'adopt', set: 'blocked' })).map((e) => e.key).sort();
    expect(els).toEqual(['c0000207', 'c0000208']);
    expect(await sameObservationBothWays()).toEqual([]);
  });
});

describe('restart onto many chains, adopted by digest', () => {
  const CHAINS = 12;
  const yaml = (chains: number) => `
tables:
  - family: ip
    name: many
    chains:
${Array.from({ length: chains }, (_, c) => `      - name: c${c}
        rules:
${[0, 1, 2].map((i) => `          - ip saddr 10.1.${c}.${i} ip daddr 192.0.2.${i} return`).join('\n')}`).join('\n')}
`;
  const cfg = () => parseConfig(yaml(CHAINS), 'many.yaml');

  it('more chains than are fetched one by one: one digest dump of the table, nothing decoded, nothing written', async () => {
    const ns = createNetns('adoptmany');
    const sock = open({ netns: ns.path });
    let k: Keeper | undefined;
    try {
      await (await startKeeper(ns, { config: cfg() })).stop();
      const gen = sock.generation();
      const host = recordingHost(ns);
      k = new Keeper({ config: cfg(), host, follow: false, intervalMs: 3_600_000, netns: ns.path });
      k.on('error', () => undefined);
      await k.start();
      expect(sock.generation()).toBe(gen);
      expect(host.digestDumps).toBe(1);
      expect(host.decoded).toEqual([]);
    } finally {
      await k?.stop();
      sock.close();
      ns.remove();
    }
  });

  it('a table of mostly chains not desired: the desired ones by digest one dump each, the others deleted unread', async () => {
    const ns = createNetns('adoptextra');
    const sock = open({ netns: ns.path });
    let k: Keeper | undefined;
    try {
      // An earlier config had 120 chains; this one keeps 12 of them.
      await (await startKeeper(ns, { config: parseConfig(yaml(120), 'many.yaml') })).stop();
      const tables = cfg().tables;
      const full = await new Reconciler(sock, { attempts: 1 }).once({ tables, readOnly: true });
      const adopted = await new Reconciler(sock, { attempts: 1 }).once({ tables, readOnly: true, adopt: true });
      expect(adopted.first.flat.map((d) => d.detail)).toEqual(full.first.flat.map((d) => d.detail));
      expect(full.first.flat.filter((d) => d.kind === 'chain-extra')).toHaveLength(108);
      const host = recordingHost(ns);
      k = new Keeper({ config: cfg(), host, follow: false, intervalMs: 3_600_000, netns: ns.path });
      k.on('error', () => undefined);
      await k.start();
      expect(host.decoded).toEqual([]);
      expect(host.digestDumps).toBe(CHAINS);
      expect(ns.exec('nft', ['list', 'table', 'ip', 'many']).match(/chain c\d+/g)).toHaveLength(CHAINS);
    } finally {
      await k?.stop();
      sock.close();
      ns.remove();
    }
  });
});

describe('the one-shot check and apply read by digest', () => {
  const { ns, sock } = socketPerTest('oneshot');

  it('apply into an empty namespace: verified from its commit\'s echo, the anonymous set\'s chain too, nothing read back and no desired rule encoded again', async () => {
    const host = recordingHost(ns);
    const conn = host.connect();
    const encoded = vi.spyOn(loadAddon() as Required<Addon>, 'ruleDigests');
    try {
      const r = await checkOnce(conn, config(), true);
      // No desired rule encoded again for its digest: the commit gave every one.
      expect(encoded).not.toHaveBeenCalled();
      expect(r.ops).toBeGreaterThan(N);
      expect(r.drift.map((d) => d.drift.map((x) => x.kind))).toEqual([['table-missing']]);
      // One observation before the commit (the table missing: nothing to dump); the echo proves the rest.
      expect(host.digestDumps).toBe(0);
      expect(host.decoded).toEqual([]);
    } finally {
      encoded.mockRestore();
      conn.close();
    }
    expect(chainLines(ns, 'ip', 'adopt', 'post')).toHaveLength(RULES.length);
    const again = await checkOnce(sock, config(), false);
    expect(again.drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('check of a rule changed by nft: the same drift and the same kernel rules shown as a decoding read', async () => {
    await checkOnce(sock, config(), true);
    const h = handles(ns, 'ip', 'adopt', 'post');
    ns.nft(`replace rule ip adopt post handle ${h[7]} ip saddr 10.99.0.7 ip daddr 192.0.2.1 return\n`);
    const full = await new Reconciler(sock, { attempts: 1 }).once({ tables: config().tables, readOnly: true });
    const host = recordingHost(ns);
    const conn = host.connect();
    try {
      const r = await checkOnce(conn, config(), false);
      const drift = r.drift.flatMap((d) => d.drift);
      expect(drift.map((d) => d.detail)).toEqual(full.first.flat.map((d) => d.detail));
      expect(drift[0]!.detail).toMatch(/^rule 8 differs: have 'ip saddr 10\.99\.0\.7 /);
      expect(drift[0]!.actual).toEqual(full.first.flat[0]!.actual);
      expect(host.decoded.sort()).toEqual(['post', 'side']);
    } finally {
      conn.close();
    }
  });
});

describe('the digest of what a commit writes is the dump\'s digest of what the kernel holds', () => {
  it('for every rule of the corpus that has one (anonymous sets have none, on all three sides: encoded, committed, dumped)', async () => {
    const ruleDigests = ruleDigester()!;
    let compared = 0;
    for (const family of ['ip', 'ip6', 'inet'] as const) {
      const rules = CORPUS.filter((c) => c.family === family);
      const ns = createNetns('digests');
      const sock = open({ netns: ns.path });
      try {
        let setIdBase = 1;
        const compiled = rules.map((r) => {
          const c = compileRule(r.text, { family, table: TABLE, chain: CHAIN_NAME[r.chain]!, setIdBase, interfaces: INTERFACES });
          setIdBase += c.sets.length;
          return c;
        });
        const batch = new Batch().add('table', { family, name: TABLE });
        for (const [name, c] of Object.entries(BASE_CHAINS)) batch.add('chain', { family, table: TABLE, name, ...c });
        const targets = new Set(compiled.flatMap((c) => c.exprs.flatMap((e) => (e.kind === 'immediate' && e.chain ? [e.chain] : []))));
        for (const t of targets) batch.add('chain', { family, table: TABLE, name: t });
        // Each rule's op in the batch (its anonymous sets' ops come before it).
        const ruleOp = rules.map((r, k) => {
          queueRule(batch, compiled[k]!, { family, table: TABLE, chain: CHAIN_NAME[r.chain]! });
          return batch.ops.findLastIndex((op) => op.object === 'rule');
        });
        const committed = await sock.commit(batch, { digests: true });
        const dumped = new Map((await sock.listRuleDigests({ family, table: TABLE })).map((d) => [d.chain, d.digests]));
        // Each rule's expressions as its own (the keeper shares identical ones; sharing is the index).
        const exprs = compiled.flatMap((c) => c.exprs);
        const flat: number[] = [];
        let next = 0;
        for (const c of compiled) flat.push(c.exprs.length, ...c.exprs.map(() => next++));
        const mine = ruleDigests(exprs, Uint32Array.from(flat), compiled.map((c) => c.userdata));
        const seen = new Map<string, number>();
        rules.forEach((r, k) => {
          const chain = CHAIN_NAME[r.chain]!;
          const at = seen.get(chain) ?? 0;
          seen.set(chain, at + 1);
          expect({ rule: r.text, digest: mine[k] }).toEqual({ rule: r.text, digest: dumped.get(chain)![at] });
          // The commit's own digest of the bytes it sent for the rule: the same.
          expect({ rule: r.text, digest: committed?.digests?.[ruleOp[k]!] }).toEqual({ rule: r.text, digest: mine[k] });
          if (mine[k]) compared++;
        });
      } finally {
        sock.close();
        ns.remove();
      }
    }
    expect(compared).toBeGreaterThan(300);
  });
});

describe('adoption of a chain longer than one call of desired digests (observe.ts desiredChainDigests, 4096 a call)', () => {
  const M = 4096 + 300;
  const YAML_BIG = 'tables:\n  - family: ip\n    name: big\n    protect: false\n    chains:\n      - name: post\n        type: nat\n        hook: postrouting\n' +
    '        priority: srcnat\n        rules:\n' + Array.from({ length: M }, (_, i) => `          - ip saddr ${ip(i)} ip daddr 192.0.2.1 return`).join('\n') + '\n';

  it('takes every slice by digest when all match, decodes the chain when a rule of its second slice differs', async () => {
    const ns = createNetns('adoptbig');
    const sock = open({ netns: ns.path });
    const host = recordingHost(ns);
    const conn = host.connect();
    try {
      const tables = parseConfig(YAML_BIG, 'big.yaml').tables;
      await new Reconciler(sock, { attempts: 3 }).once({ tables });
      const observe = async () => (await new Reconciler(conn, { attempts: 1 }).once({ tables, readOnly: true, adopt: true })).first.flat;
      expect(await observe()).toEqual([]);
      expect(host.digestDumps).toBe(1);
      expect(host.decoded).toEqual([]);
      const at = 4096 + 150;
      ns.nft(`replace rule ip big post handle ${handles(ns, 'ip', 'big', 'post')[at]} ip saddr 10.250.0.1 ip daddr 192.0.2.1 return\n`);
      const drift = await observe();
      expect(drift.map((d) => d.kind)).toEqual(['rules-differ']);
      expect(drift[0]!.detail).toMatch(new RegExp(`^rule ${at + 1} differs`));
      expect(host.decoded).toEqual(['post']);
    } finally {
      conn.close();
      sock.close();
      ns.remove();
    }
  });
});
