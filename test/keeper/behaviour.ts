/**
 * One behaviour suite, run against the real kernel in a fresh namespace
 * (behaviour-kernel.test.ts) and against the fake kernel
 * (behaviour-fake.test.ts): what nfkeeper relies on from nf_tables, and the
 * keeper and GC on top of it; the event-stream cases are in behaviour-events.ts.
 * A difference between the two runs is a bug in the fake
 * (test/helpers/fake-kernel.ts).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { GenerationMismatchError, NetlinkError } from '../../src/base/errors.js';
import { GraceTracker, collect } from '../../src/gc/collect.js';
import { Keeper, checkOnce, type KeeperOptions } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import { deriveHandles, echoPoints } from '../../src/netlink/handles.js';
import type { NftConn, NftHost } from '../../src/netlink/conn.js';
import type { Family } from '../../src/netlink/expr.js';
import { compileRule, renderRule, setResolver } from '../../src/rules/index.js';
import { FLANNEL_RULES, FLANNEL_YAML, flannelConfig, nextRepair } from './helpers.js';
import { sleep, until } from '../helpers/wait.js';
import { armCases, eventCases } from './behaviour-events.js';

export interface World {
  host: NftHost;
  /** Removes everything the world made. */
  close(): Promise<void> | void;
}

const IP = { family: 'ip' as Family };
const T = { family: 'ip' as Family, table: 't' };
const CHAIN = { family: 'ip' as Family, table: 'nfkeeper', chain: 'postrouting' };
const rule = (text: string) => compileRule(text, { family: 'ip', table: 't', chain: 'c' });
const PROTECTED_YAML = FLANNEL_YAML.replace('    name: nfkeeper\n', '    name: nfkeeper\n    protect: true\n');

async function refusal(p: Promise<unknown>): Promise<NetlinkError> {
  const e = await p.then(() => undefined, (x: unknown) => x);
  expect(e).toBeInstanceOf(NetlinkError);
  return e as NetlinkError;
}

/** The chain's rules as nft-style text (our renderer), in kernel order. */
async function lines(conn: NftConn, c = CHAIN): Promise<string[]> {
  const sets = await conn.listSets(c);
  const resolve = setResolver(await Promise.all(sets.map(async (set) => ({ set, elements: await conn.listElements({ ...c, set: set.name }) }))));
  return (await conn.listRules(c)).map((r) => renderRule(r, c.family, resolve));
}

async function handles(conn: NftConn, c = CHAIN): Promise<number[]> {
  return (await conn.listRules(c)).map((r) => r.handle!);
}


export function behaviourSuite(kind: string, makeWorld: () => World): void {
  describe(`nf_tables as nfkeeper uses it (${kind})`, () => {
    let world: World;
    let conn: NftConn;
    let other: NftConn;
    const keepers: Keeper[] = [];

    beforeEach(() => {
      world = makeWorld();
      conn = world.host.connect();
      other = world.host.connect();
    });
    afterEach(async () => {
      for (const k of keepers.splice(0)) await k.stop();
      if (!conn.closed) conn.close();
      if (!other.closed) other.close();
      await world.close();
    });

    async function keeper(options: Partial<KeeperOptions> = {}): Promise<Keeper> {
      const k = new Keeper({ config: flannelConfig(), host: world.host, intervalMs: 3_600_000, ...options });
      k.on('error', () => undefined);
      keepers.push(k);
      await k.start();
      return k;
    }

    it('a batch is all or nothing; the first refused op is the error\'s opIndex, every one is in refusals', async () => {
      const gen = conn.generation();
      const e = await refusal(conn.commit(new Batch().add('table', { ...IP, name: 'a' }).add('chain', { ...IP, table: 'a', name: 'c' })
        .delete('chain', { ...IP, table: 'a', name: 'zz' }).delete('rule', { ...IP, table: 'a', chain: 'c', handle: 999 })));
      expect(e.errnoName).toBe('ENOENT');
      expect(e.opIndex).toBe(2);
      expect(e.description).toBe('delete chain ip a zz');
      expect(e.refusals?.map((r) => [r.opIndex, r.errnoName])).toEqual([[2, 'ENOENT'], [3, 'ENOENT']]);
      expect(await conn.getTable('ip', 'a')).toBeUndefined();
      expect(conn.generation()).toBe(gen);
      await conn.commit(new Batch().add('table', { ...IP, name: 'a' }));
      const exists = await refusal(conn.commit(new Batch().add('chain', { ...IP, table: 'a', name: 'c' }).create('table', { ...IP, name: 'a' })));
      expect([exists.errnoName, exists.opIndex]).toEqual(['EEXIST', 1]);
      expect(await conn.listChains({ ...IP, table: 'a' })).toEqual([]);
      await conn.commit(new Batch().add('chain', { ...IP, table: 'a', name: 'c2' }).add('table', { ...IP, name: 'b' }));
      // The refused batches used up table handle 1 (the first `a`) and chain handle 1 in the second.
      expect((await conn.getChain('ip', 'a', 'c2'))?.handle).toBe(2);
      expect((await conn.getTable('ip', 'b'))?.handle).toBe(3);
    });

    it('a stale expectGeneration is refused as a whole and changes nothing', async () => {
      const gen = conn.generation();
      await other.commit(new Batch().add('table', { ...IP, name: 'moved' }));
      const e = await conn.commit(new Batch().add('table', { ...IP, name: 'x' }), { expectGeneration: gen }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(GenerationMismatchError);
      expect((e as GenerationMismatchError).opIndex).toBe(-1);
      expect(await conn.getTable('ip', 'x')).toBeUndefined();
      expect(conn.generation()).toBe(gen + 1);
    });

    it('the generation moves once per batch that changed something', async () => {
      const g = conn.generation();
      await conn.commit(new Batch().add('table', { ...IP, name: 't' }).add('chain', { ...T, name: 'a' }).add('chain', { ...T, name: 'b' }));
      expect(conn.generation()).toBe(g + 1);
      await conn.commit(new Batch().add('table', { ...IP, name: 't' }));  // unchanged: no transaction
      expect(conn.generation()).toBe(g + 1);
      await conn.commit(new Batch().add('chain', { ...T, name: 'a' }));  // a chain update is one, even unchanged
      expect(conn.generation()).toBe(g + 2);
    });

    it('handles, use counts, and anonymous sets living with their rule', async () => {
      const s = rule('ip saddr { 10.0.0.1, 10.0.0.2 } masquerade');
      const b = new Batch().add('table', { ...IP, name: 't' }).add('chain', { ...T, name: 'a' })
        .add('chain', { ...T, name: 'b', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' })
        .add('rule', { ...T, chain: 'b', exprs: rule('jump a').exprs });
      for (const x of s.sets) b.add('set', { ...x, ...T });
      b.add('rule', { ...T, chain: 'b', exprs: s.exprs }).add('rule', { ...T, chain: 'a', exprs: rule('counter').exprs })
        .add('set', { ...T, name: 'named', keyType: 7, keyLen: 4, flags: 0 });
      await conn.commit(b);
      expect(await conn.getTable('ip', 't')).toMatchObject({ flags: 0, use: 3 });  // two chains and the named set
      const chains = await conn.listChains(T);
      expect(chains.map((c) => [c.name, c.handle, c.use])).toEqual([['a', 1, 2], ['b', 2, 2]]);
      expect(chains[1]).toMatchObject({ type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' });
      expect((await conn.listRules(T)).map((r) => [r.chain, r.handle])).toEqual([['a', 6], ['b', 3], ['b', 5]]);
      const sets = await conn.listSets(T);
      expect(sets.map((x) => [x.name, x.handle, x.flags])).toEqual([['__set0', 4, 3], ['named', 7, 0]]);
      expect((await conn.listElements({ ...T, set: '__set0' })).map((e) => e.key).sort()).toEqual(['0a000001', '0a000002']);
      expect((await conn.listRules({ ...T, chain: 'b' }))[1]!.exprs[1]).toEqual({ kind: 'lookup', sreg: 1, set: '__set0', flags: 0 });
      expect(await lines(conn, { ...T, chain: 'b' })).toEqual(['jump a', 'ip saddr { 10.0.0.1, 10.0.0.2 } masquerade']);

      const busy = await refusal(conn.commit(new Batch().flush('chain', { ...T, name: 'a' }).delete('chain', { ...T, name: 'a' })));
      expect([busy.errnoName, busy.opIndex]).toEqual(['EBUSY', 1]);  // still jumped to
      await conn.commit(new Batch().flush('chain', { ...T, name: 'b' }));
      expect((await conn.listSets(T)).map((x) => x.name)).toEqual(['named']);
      expect((await conn.getChain('ip', 't', 'a'))?.use).toBe(1);
      await conn.commit(new Batch().flush('chain', { ...T, name: 'a' }).delete('chain', { ...T, name: 'a' }));
      expect(await conn.getTable('ip', 't')).toMatchObject({ use: 2 });
      expect((await refusal(conn.commit(new Batch().add('rule', { ...T, chain: 'b', exprs: rule('jump b2').exprs })))).errnoName).toBe('ENOENT');
      expect((await refusal(conn.commit(new Batch().add('rule', { ...T, chain: 'b', exprs: rule('jump b').exprs })))).errnoName).toBe('EOPNOTSUPP');
      const masq = await refusal(conn.commit(new Batch().add('chain', { ...T, name: 'pre', type: 'nat', hook: 'prerouting', priority: -100, policy: 'accept' })
        .add('rule', { ...T, chain: 'pre', exprs: rule('masquerade').exprs })));
      expect([masq.errnoName, masq.opIndex]).toEqual(['EOPNOTSUPP', 1]);
    });

    it('handles: one counter per table for chains, sets and rules, in the batch\'s order; derived from a run\'s echoed ends', async () => {
      const U = { family: 'ip' as Family, table: 'u' };
      const s = rule('ip saddr { 10.0.0.1, 10.0.0.2 } accept');
      const b = new Batch().add('table', { ...IP, name: 't' }).add('table', { ...IP, name: 'u' }).add('chain', { ...T, name: 'a' })
        .add('set', { ...T, name: 'named', keyType: 7, keyLen: 4, flags: 0 }).add('chain', { ...U, name: 'x' }).add('chain', { ...T, name: 'c' });
      for (let i = 0; i < 4; i++) b.add('rule', { ...T, chain: 'c', exprs: rule('counter').exprs }).add('rule', { ...U, chain: 'x', exprs: rule('counter').exprs });
      for (const x of s.sets) b.add('set', { ...x, ...T });
      b.add('rule', { ...T, chain: 'c', exprs: s.exprs });
      const echo = echoPoints(b.ops);
      const first = await conn.commit(b, { echo });
      expect((await conn.listChains(T)).map((c) => [c.name, c.handle])).toEqual([['a', 1], ['c', 3]]);
      expect((await conn.listSets(T)).map((x) => [x.name, x.handle])).toEqual([['named', 2], ['__set0', 8]]);
      expect((await conn.listRules(T)).map((r) => r.handle)).toEqual([4, 5, 6, 7, 9]);
      expect((await conn.listChains(U)).map((c) => c.handle)).toEqual([1]);
      expect((await conn.listRules(U)).map((r) => r.handle)).toEqual([2, 3, 4, 5]);
      // The anonymous set is counted within t's run; u's rules are a run of their own.
      const derived = first && first.handles && deriveHandles(b.ops, first.handles);
      expect(derived && [...derived.values()].sort((x, y) => x - y)).toEqual([2, 3, 4, 4, 5, 5, 6, 7, 9]);
      // A later batch: rule, rule, a new chain, rule; re-adding an existing chain, a replace and a delete take none.
      const [h4, h5] = await handles(conn, { ...T, chain: 'c' });
      const later = new Batch().add('rule', { ...T, chain: 'c', exprs: rule('return').exprs }).add('rule', { ...T, chain: 'a', exprs: rule('return').exprs })
        .add('chain', { ...T, name: 'd' }).add('chain', { ...T, name: 'c' }).replace('rule', { ...T, chain: 'c', handle: h4!, exprs: rule('accept').exprs })
        .delete('rule', { ...T, chain: 'c', handle: h5! }).add('rule', { ...T, chain: 'd', exprs: rule('return').exprs });
      const r = await conn.commit(later, { echo: echoPoints(later.ops) });
      expect((await conn.listChains(T)).map((c) => [c.name, c.handle])).toEqual([['a', 1], ['c', 3], ['d', 12]]);
      expect((await handles(conn, { ...T, chain: 'c' }))).toEqual([4, 6, 7, 9, 10]);
      expect((await handles(conn, { ...T, chain: 'a' }))).toEqual([11]);
      expect((await handles(conn, { ...T, chain: 'd' }))).toEqual([13]);
      const d = r && r.handles && deriveHandles(later.ops, r.handles);
      expect(d && [...d.entries()].sort((x, y) => x[0] - y[0])).toEqual([[0, 10], [1, 11], [4, 4], [6, 13]]);
    });

    it('rule positions: add after, insert before, replace in place keeps the handle, delete by handle', async () => {
      await conn.commit(new Batch().add('table', { ...IP, name: 't' }).add('chain', { ...T, name: 'c' })
        .add('rule', { ...T, chain: 'c', exprs: rule('counter').exprs }).add('rule', { ...T, chain: 'c', exprs: rule('return').exprs }));
      const [h1, h2] = await handles(conn, { ...T, chain: 'c' });
      await conn.commit(new Batch().insert('rule', { ...T, chain: 'c', exprs: rule('accept').exprs })
        .add('rule', { ...T, chain: 'c', position: h1, exprs: rule('drop').exprs })
        .insert('rule', { ...T, chain: 'c', position: h2, exprs: rule('ip saddr 10.0.0.1 accept').exprs }));
      expect(await lines(conn, { ...T, chain: 'c' })).toEqual(['accept', 'counter', 'drop', 'ip saddr 10.0.0.1 accept', 'return']);
      const before = await handles(conn, { ...T, chain: 'c' });
      await conn.commit(new Batch().replace('rule', { ...T, chain: 'c', handle: h1!, exprs: rule('ip daddr 10.0.0.2 accept').exprs })
        .delete('rule', { ...T, chain: 'c', handle: h2! }));
      expect(await handles(conn, { ...T, chain: 'c' })).toEqual(before.filter((h) => h !== h2));
      expect(await lines(conn, { ...T, chain: 'c' })).toEqual(['accept', 'ip daddr 10.0.0.2 accept', 'drop', 'ip saddr 10.0.0.1 accept']);
      const gone = await refusal(conn.commit(new Batch().delete('rule', { ...T, chain: 'c', handle: h2! })));
      expect([gone.errnoName, gone.opIndex]).toEqual(['ENOENT', 0]);
    });

    it('owned tables: EPERM to others, no flag changes, an orphan when the owner closes, claimed with owner|persist', async () => {
      await conn.commit(new Batch().add('table', { ...IP, name: 'o', flags: 6 }).add('chain', { ...IP, table: 'o', name: 'c' })
        .add('table', { ...IP, name: 'gone', flags: 2 }).add('table', { ...IP, name: 'plain' }));
      expect(await conn.getTable('ip', 'o')).toMatchObject({ flags: 6, owner: conn.portId });
      for (const b of [new Batch().add('chain', { ...IP, table: 'o', name: 'd' }), new Batch().flush('chain', { ...IP, table: 'o', name: 'c' }),
        new Batch().delete('table', { ...IP, name: 'o' }), new Batch().add('table', { ...IP, name: 'o', flags: 6 })]) {
        expect((await refusal(other.commit(b))).errnoName).toBe('EPERM');
      }
      expect((await refusal(conn.commit(new Batch().add('table', { ...IP, name: 'plain', flags: 6 })))).errnoName).toBe('EOPNOTSUPP');
      const gen = conn.generation();
      await conn.commit(new Batch().add('table', { ...IP, name: 'o' }));  // no flags: nothing to change
      expect(conn.generation()).toBe(gen);
      conn.close();
      await until('the orphan', async () => (await other.getTable('ip', 'o'))?.flags === 4);
      expect(await other.getTable('ip', 'o')).not.toHaveProperty('owner');
      expect(await other.getTable('ip', 'gone')).toBeUndefined();
      expect(other.generation()).toBe(gen);
      expect((await refusal(other.commit(new Batch().add('table', { ...IP, name: 'o', flags: 2 })))).errnoName).toBe('EOPNOTSUPP');
      await other.commit(new Batch().add('table', { ...IP, name: 'o', flags: 6 }));
      expect(await other.getTable('ip', 'o')).toMatchObject({ flags: 6, owner: other.portId });
      expect(other.generation()).toBe(gen + 1);
    });

    it('events: a watcher wakes for others\' commits on its tables and any table deletion, not for ignored ports', async () => {
      await conn.commit(new Batch().add('table', { ...IP, name: 't' }).add('table', { ...IP, name: 'u' }));
      const got: { generation: number; ports: number[]; types: string[] }[] = [];
      const w = world.host.watch({ tables: [{ ...IP, name: 't' }], ignorePorts: [conn.portId], onBatch: (b) => {
        got.push({ generation: b.generation, ports: b.events.map((e) => e.portId), types: b.events.map((e) => e.type) });
      } });
      try {
        await conn.commit(new Batch().add('chain', { ...T, name: 'mine' }));
        await other.commit(new Batch().add('chain', { ...IP, table: 'u', name: 'elsewhere' }));
        await other.commit(new Batch().add('chain', { ...T, name: 'theirs' }).add('rule', { ...T, chain: 'theirs', exprs: rule('counter').exprs }));
        const gen = other.generation();
        await until('the event', () => got.length > 0);
        await other.commit(new Batch().delete('table', { ...IP, name: 'u' }));
        await until('the deletion', () => got.length > 1);
        expect(got[0]).toEqual({ generation: gen, ports: [other.portId, other.portId], types: ['newchain', 'newrule'] });
        expect(got[1]!.types.at(-1)).toBe('deltable');
        expect(got[1]!.generation).toBe(gen + 1);
      } finally {
        w.close();
      }
    });

    it('keeper: installs at start-up, then adopts a correct ruleset without writing', async () => {
      const k = await keeper();
      expect(await lines(conn)).toEqual(FLANNEL_RULES);
      expect(k.isReady()).toBe(true);
      const h = await handles(conn);
      await k.stop();
      const gen = conn.generation();
      const again = await keeper();
      expect(conn.generation()).toBe(gen);
      expect(await handles(conn)).toEqual(h);
      // Every cause is exported at 0 from the start (src/base/metrics.ts); adopting adds to none of them.
      expect((await again.metrics.repairs.get()).values.filter((v) => v.value !== 0)).toEqual([]);
    });

    const tamperings: [string, (h: number[]) => Batch][] = [
      ['a deleted rule', (h) => new Batch().delete('rule', { ...CHAIN, handle: h[1]! })],
      ['a foreign rule inserted first', () => new Batch().insert('rule', { ...CHAIN, exprs: rule('ip saddr 192.0.2.1 accept').exprs })],
      ['a flushed chain', () => new Batch().flush('chain', { ...IP, table: 'nfkeeper', name: 'postrouting' })],
      ['an extra chain', () => new Batch().add('chain', { ...IP, table: 'nfkeeper', name: 'intruder' })],
      ['a deleted table', () => new Batch().delete('table', { ...IP, name: 'nfkeeper' })],
    ];
    for (const [what, tamper] of tamperings) {
      it(`keeper: repairs ${what} through the event path`, async () => {
        const k = await keeper();
        const repaired = nextRepair(k);
        await other.commit(tamper(await handles(conn)));
        const r = await repaired;
        await k.idle();
        expect(r.cause).toBe('event');
        expect(await lines(conn)).toEqual(FLANNEL_RULES);
        expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
      });
    }

    it('keeper: retries from a fresh read when the ruleset moves between read and commit', async () => {
      // The full pass's retry: without the followed part, whose repair is guarded by the generation it saw (behaviour-events.ts).
      const k = await keeper({ follow: false });
      const s = k.socket!;
      const real = s.commit.bind(s);
      let interfered = false;
      s.commit = async (batch, options) => {
        if (!interfered) {
          interfered = true;
          await other.commit(new Batch().add('table', { ...IP, name: 'bystander' }));
        }
        return real(batch, options);
      };
      const repaired = nextRepair(k);
      await other.commit(new Batch().delete('rule', { ...CHAIN, handle: (await handles(conn))[3]! }));
      const r = await repaired;
      expect(r.attempts).toBeGreaterThan(1);
      expect(await lines(conn)).toEqual(FLANNEL_RULES);
      expect(await conn.getTable('ip', 'bystander')).toBeDefined();
    });

    it('keeper: a reload that drops a chain and a table goes in one batch; a refused one leaves the old state', async () => {
      const k = await keeper({ config: parseConfig(`${FLANNEL_YAML}      - name: extra\n        rules: ["return"]\n  - family: ip6\n    name: nfkeeper6\n    chains: []\n`) });
      expect(await conn.getTable('ip6', 'nfkeeper6')).toBeDefined();
      const gen = conn.generation();
      await k.setConfig(flannelConfig());
      expect(conn.generation()).toBe(gen + 1);
      expect(await conn.getTable('ip6', 'nfkeeper6')).toBeUndefined();
      expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
      const h = await handles(conn);
      // More elements than the set's size: only the commit can tell (ENFILE).
      const refused = parseConfig(`${FLANNEL_YAML}      - { name: out, type: filter, hook: output, priority: 0, rules: ["ip daddr @few drop"] }
    sets:
      - { name: few, type: ipv4_addr, size: 2, elements: [10.0.0.1, 10.0.0.2, 10.0.0.3] }
`);
      await expect(k.setConfig(refused)).rejects.toThrow(/ENFILE|Too many open files/);
      expect((await k.metrics.reloadFailed.get()).values[0]!.value).toBe(1);
      expect(await handles(conn)).toEqual(h);
      expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
    });

    it('keeper: a reload that creates a chain, or a set, again while desired rules use it goes in one batch the kernel takes', async () => {
      // A chain given another comment, or a constant set given other elements, is deleted and created
      // again; the kernel deletes neither while a rule uses it (EBUSY), so the rules using it go first.
      const config = (els: string, comment: string) => parseNftConfig(`table ip nfkeeper {\n\tset allow {\n\t\ttype ipv4_addr\n\t\tflags constant\n` +
        `\t\telements = { ${els} }\n\t}\n\tchain x {\n\t\tcomment "${comment}"\n\t\tcounter accept\n\t}\n\tchain out {\n` +
        '\t\ttype filter hook output priority 0; policy accept;\n\t\tip daddr @allow accept\n\t\tip daddr 10.0.0.9 jump x\n\t}\n}\n', 'again.nft');
      const k = await keeper({ config: config('10.0.0.1', 'first') });
      const gen = conn.generation();
      await k.setConfig(config('10.0.0.1', 'second'));  // the chain alone
      expect(conn.generation()).toBe(gen + 1);
      await k.setConfig(config('10.0.0.2', 'second'));  // the set alone
      expect(conn.generation()).toBe(gen + 2);
      expect((await conn.listElements({ ...IP, table: 'nfkeeper', set: 'allow' })).map((e) => e.key)).toEqual(['0a000002']);
      expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name).sort()).toEqual(['out', 'x']);
      const out = { ...IP, table: 'nfkeeper', chain: 'out' };
      expect(await lines(conn, out)).toEqual(['ip daddr @allow accept', 'ip daddr 10.0.0.9 jump x']);
      expect((await checkOnce(conn, config('10.0.0.2', 'second'), false)).drift.flatMap((d) => d.drift)).toEqual([]);
    });

    it('keeper in protect mode: owns the table, leaves an orphan on stop, and a new keeper claims it without rewriting', async () => {
      await conn.commit(new Batch().add('table', { ...IP, name: 'nfkeeper' })
        .add('chain', { ...IP, table: 'nfkeeper', name: 'postrouting', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' }));
      const gen = conn.generation();
      const k = await keeper({ config: parseConfig(PROTECTED_YAML) });
      expect(conn.generation()).toBe(gen + 1);  // the unprotected table recreated owned, atomically
      expect(await conn.getTable('ip', 'nfkeeper')).toMatchObject({ flags: 6, owner: k.socket!.portId });
      expect((await refusal(other.commit(new Batch().delete('table', { ...IP, name: 'nfkeeper' })))).errnoName).toBe('EPERM');
      const h = await handles(conn);
      await k.stop();
      await until('the orphan', async () => (await conn.getTable('ip', 'nfkeeper'))?.flags === 4);
      const next = await keeper({ config: parseConfig(PROTECTED_YAML) });
      expect(await conn.getTable('ip', 'nfkeeper')).toMatchObject({ flags: 6, owner: next.socket!.portId });
      expect(await handles(conn)).toEqual(h);
      expect(next.status().tables[0]!.protection).toBe('protected');
    });

    it('apply (checkOnce) installs, then finds nothing to do', async () => {
      const first = await checkOnce(conn, flannelConfig(), true);
      expect(first.ops).toBeGreaterThan(0);
      expect(first.drift[0]!.drift.map((d) => d.kind)).toEqual(['table-missing']);
      const gen = conn.generation();
      const again = await checkOnce(conn, flannelConfig(), true);
      expect(again.ops).toBe(0);
      expect(conn.generation()).toBe(gen);
      expect(await lines(conn)).toEqual(FLANNEL_RULES);
    });

    eventCases({ world: () => world, conn: () => conn, other: () => other, keeper, lines });
    armCases({ world: () => world, conn: () => conn, other: () => other, keeper, lines });

    it('foreign GC: dead tags and the chains only they reach go in one batch, to a fixpoint; the rest stays', async () => {
      const tag = (id: string) => `comment "alloc=${id}"`;
      await other.commit(new Batch().add('table', { ...IP, name: 'nat' })
        .add('chain', { ...IP, table: 'nat', name: 'POSTROUTING', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' })
        .add('chain', { ...IP, table: 'nat', name: 'dead1' }).add('chain', { ...IP, table: 'nat', name: 'dead2' })
        .add('chain', { ...IP, table: 'nat', name: 'live1' })
        .add('rule', { ...IP, table: 'nat', chain: 'dead2', ...pick(rule('masquerade')) })
        .add('rule', { ...IP, table: 'nat', chain: 'dead1', ...pick(rule('ip daddr 10.0.0.0/8 jump dead2')) })
        .add('rule', { ...IP, table: 'nat', chain: 'live1', ...pick(rule('masquerade')) })
        .add('rule', { ...IP, table: 'nat', chain: 'POSTROUTING', ...pick(rule(`ip saddr 10.1.0.1 jump dead1 ${tag('dead')}`)) })
        .add('rule', { ...IP, table: 'nat', chain: 'POSTROUTING', ...pick(rule(`ip saddr 10.1.0.2 jump live1 ${tag('live')}`)) })
        .add('rule', { ...IP, table: 'nat', chain: 'POSTROUTING', ...pick(rule('ip saddr 10.1.0.3 masquerade')) }));
      const gen = conn.generation();
      const r = await collect(conn, { foreign: [{ family: 'ip', table: 'nat', tag: 'alloc=<id>' }], live: new Set(['live']), graceMs: 0,
        tracker: new GraceTracker() });
      expect(r.collected).toBe(true);
      expect(r.garbage.map((g) => [g.id, g.rules.length, g.chains.map((c) => c.name).sort()])).toEqual([['dead', 1, ['dead1', 'dead2']]]);
      expect(conn.generation()).toBe(gen + 1);
      expect((await conn.listChains({ ...IP, table: 'nat' })).map((c) => c.name)).toEqual(['POSTROUTING', 'live1']);
      expect(await lines(conn, { ...IP, table: 'nat', chain: 'POSTROUTING' }))
        .toEqual(['ip saddr 10.1.0.2 jump live1 comment "alloc=live"', 'ip saddr 10.1.0.3 masquerade']);
    });
  });
}

function pick(c: ReturnType<typeof rule>) {
  return { exprs: c.exprs, ...(c.userdata ? { userdata: c.userdata } : {}) };
}
