/**
 * Dumps filtered in the kernel request: exactly the asked chain's rules while
 * 10,000 foreign rules sit in other tables and chains; chain dumps filtered
 * by table (the kernel ignores that filter, so the addon applies it); and two
 * namespaces that never see each other.
 */
import { describe, expect, it } from 'vitest';
import { open, type Expr, type Op } from '../../src/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import {
  kubeProxyNftRuleCount, kubeProxyRuleCount, loadIptablesForeign, loadNftForeign, matchAddr, OWNED,
  ownedRules, ownedSetup, scaled, withSocket,
} from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;
const FOREIGN = scaled(10_000);

/** ownedRules() as the kernel reports them back (counters with their counts). */
function ownedAsDumped(tag = 'a'): Expr[][] {
  return ownedRules(tag).map((exprs) =>
    exprs.map((e) => (e.kind === 'counter' ? { kind: 'counter', packets: 0, bytes: 0 } : e)));
}

const loaders: [string, (ns: Netns) => { table: string; rules: number }][] = [
  ['nft -f', (ns) => {
    loadNftForeign(ns, FOREIGN, 'kube');
    return { table: 'kube', rules: kubeProxyNftRuleCount(FOREIGN) };
  }],
  ['iptables-nft-restore', (ns) => {
    loadIptablesForeign(ns, FOREIGN);
    return { table: 'nat', rules: kubeProxyRuleCount(FOREIGN) };
  }],
];

describe('filtered dumps', () => {
  it.each(loaders)('return exactly the owned chain with %s foreign rules around it', async (_how, load) => {
    await withSocket(async (s, ns) => {
      // Foreign neighbours: other tables (loaded by the tool), a chain in our
      // own table, and a same-named table and chain in another family.
      await s.commit([
        ...ownedSetup(),
        { verb: 'add', object: 'chain', family: F, table: T, name: 'neighbour' },
        ...Array.from({ length: 100 }, (_, i): Op => ({ verb: 'add', object: 'rule', family: F, table: T, chain: 'neighbour',
          exprs: matchAddr('saddr', `10.3.0.${i}`) })),
        { verb: 'add', object: 'table', family: 'inet', name: T },
        { verb: 'add', object: 'chain', family: 'inet', table: T, name: C },
        { verb: 'add', object: 'rule', family: 'inet', table: T, chain: C, exprs: [{ kind: 'counter' }] },
      ]);
      const foreign = load(ns);

      const rules = await s.listRules({ family: F, table: T, chain: C });
      expect(rules.map((r) => r.exprs)).toEqual(ownedAsDumped());
      for (const r of rules) expect(r).toMatchObject({ family: F, table: T, chain: C });
      expect(new Set(rules.map((r) => r.handle)).size).toBe(4);

      // Table filter only: the owned table's 104 rules, nothing of the foreign ones.
      const table = await s.listRules({ family: F, table: T });
      expect(table).toHaveLength(104);
      expect(new Set(table.map((r) => r.chain))).toEqual(new Set([C, 'neighbour']));

      // The foreign rules are really there.
      expect(await s.listRules({ family: F, table: foreign.table })).toHaveLength(foreign.rules);

      // A filter that matches nothing is an empty dump on 6.18 (no ENOENT).
      expect(await s.listRules({ family: F, table: T, chain: 'nope' })).toEqual([]);
      expect(await s.listRules({ family: F, table: 'nope', chain: C })).toEqual([]);
      expect(await s.listRules({ family: 'ip6', table: T, chain: C })).toEqual([]);
    }, 'dump');
  });

  it('chain dumps are filtered by table even though the kernel ignores that filter', async () => {
    await withSocket(async (s, ns) => {
      await s.commit([...ownedSetup(),
        { verb: 'add', object: 'chain', family: F, table: T, name: 'post', type: 'nat', hook: 'postrouting', priority: 100,
          policy: 'accept' }]);
      loadIptablesForeign(ns, FOREIGN);
      const chains = await s.listChains({ family: F, table: T });
      expect(chains.map((c) => c.name).sort()).toEqual([C, 'post']);
      expect(chains.find((c) => c.name === 'post')).toMatchObject({
        family: F, table: T, type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept',
      });
      // On 6.x a chain's use count is its rules plus the jumps to it.
      expect(chains.find((c) => c.name === C)?.use).toBe(4);
      const natChains = await s.listChains({ family: F, table: 'nat' });
      expect(natChains.length).toBe(7 + 2 * (FOREIGN / 4));
      expect(natChains.every((c) => c.table === 'nat')).toBe(true);

      expect(await s.getChain(F, T, 'post')).toMatchObject({ name: 'post', hook: 'postrouting' });
      expect(await s.getChain(F, T, 'absent')).toBeUndefined();
      expect(await s.getTable(F, T)).toMatchObject({ family: F, name: T, flags: 0 });
      expect(await s.getTable(F, 'absent')).toBeUndefined();
      expect((await s.listTables()).map((t) => `${t.family} ${t.name}`).sort()).toEqual(['ip nat', 'ip nfkeeper']);
      expect((await s.listTables({ family: 'inet' }))).toEqual([]);
    }, 'dump');
  });
});

describe('one socket, many requests', () => {
  it('keeps concurrent dumps, commits and generation reads apart', async () => {
    await withSocket(async (s) => {
      const big: Op[] = Array.from({ length: 3000 }, (_, i): Op => ({
        verb: 'add', object: 'rule', family: F, table: T, chain: 'big', exprs: matchAddr('saddr', `10.4.${i >> 8}.${i & 255}`),
      }));
      await s.commit([...ownedSetup(), { verb: 'add', object: 'chain', family: F, table: T, name: 'big' }, ...big]);
      const g = s.generation();
      const results = await Promise.all([
        s.listRules({ family: F, table: T, chain: 'big' }),   // starts inline, finished by a worker
        s.listRules({ family: F, table: T, chain: C }),        // inline, or queued behind the big one
        s.listChains({ family: F, table: T }),
        s.commit([{ verb: 'add', object: 'chain', family: F, table: T, name: 'new' }]),
        s.getTable(F, T),
        s.listRules({ family: F, table: T }),
        s.listRules({ family: F, table: T, chain: C }),
      ]);
      expect((results[0] as unknown[]).length).toBe(3000);
      expect((results[1] as unknown[]).length).toBe(4);
      expect((results[2] as { name: string }[]).map((c) => c.name).sort()).toEqual(expect.arrayContaining(['big', C]));
      expect(results[4]).toMatchObject({ name: T });
      expect((results[5] as unknown[]).length).toBe(3004);
      expect((results[6] as unknown[]).length).toBe(4);
      expect(s.generation()).toBe(g + 1);
      // A generation read right behind a big dump waits for the socket, then answers.
      const pending = s.listRules({ family: F, table: T, chain: 'big' });
      expect(s.generation()).toBe(g + 1);
      expect(await pending).toHaveLength(3000);
    }, 'many');
  });
});

describe('stateful objects of one table', () => {
  it('are read inline when few (no worker), by a worker past the inline datagrams, and never another table\'s', async () => {
    await withSocket(async (s) => {
      const counters = (table: string, n: number): Op[] => Array.from({ length: n }, (_, i): Op => ({
        verb: 'add', object: 'obj', family: F, table, name: `c${i}`, type: 'counter', data: { packets: 0, bytes: 0 },
      }));
      // Not scaled under the sanitizers: fewer would fit in the inline datagrams.
      const many = 2000;
      await s.commit([...ownedSetup(), ...counters(T, 3), { verb: 'add', object: 'table', family: F, name: 'other' }, ...counters('other', many)]);
      // Settled before the event loop turns: read on this thread (a worker's result comes in a later turn).
      let small: unknown[] | undefined;
      void s.listObjs({ family: F, table: T }).then((o) => { small = o; });
      for (let i = 0; i < 5; i++) await Promise.resolve();
      expect(small?.length).toBe(3);
      let big: unknown[] | undefined;
      const pending = s.listObjs({ family: F, table: 'other' }).then((o) => { big = o; });
      for (let i = 0; i < 5; i++) await Promise.resolve();
      expect(big).toBeUndefined();
      await pending;
      expect(big!.length).toBe(many);
      expect((big as { table: string }[]).every((o) => o.table === 'other')).toBe(true);
      expect((await s.listObjs({ family: F, table: T })).map((o) => o.name).sort()).toEqual(['c0', 'c1', 'c2']);
    }, 'objs');
  });
});

describe('namespace isolation', () => {
  it('two sockets in two namespaces never see each other', async () => {
    await withNetns(async (a) => {
      await withNetns(async (b) => {
        const sa = open({ netns: a.path });
        const sb = open({ netns: b.path });
        try {
          await sa.commit([...ownedSetup('a'), { verb: 'add', object: 'table', family: F, name: 'only-a' }]);
          const gb = sb.generation();
          await sb.commit(ownedSetup('b'));
          expect(sb.generation()).toBe(gb + 1);

          expect((await sa.listRules({ family: F, table: T, chain: C })).map((r) => r.exprs)).toEqual(ownedAsDumped('a'));
          expect((await sb.listRules({ family: F, table: T, chain: C })).map((r) => r.exprs)).toEqual(ownedAsDumped('b'));
          expect((await sa.listTables()).map((t) => t.name).sort()).toEqual(['nfkeeper', 'only-a']);
          expect((await sb.listTables()).map((t) => t.name)).toEqual(['nfkeeper']);

          // A change in one namespace moves only that namespace's generation.
          const ga = sa.generation();
          const gb2 = sb.generation();
          a.nft('add table ip more-a');
          await sa.commit([{ verb: 'delete', object: 'table', family: F, name: 'only-a' }]);
          expect(sa.generation()).toBe(ga + 2);
          expect(sb.generation()).toBe(gb2);
          expect(b.exec('nft', ['list', 'tables'])).toBe('table ip nfkeeper\n');
        } finally {
          sa.close();
          sb.close();
        }
      }, 'iso-b');
    }, 'iso-a');
  });
});

describe('rule decoding', () => {
  it('rules of nft, iptables-nft and ours decode; a chain\'s dump is the table dump\'s rules of that chain', async () => {
    await withNetns(async (ns) => {
      // A spread of what the kernel sends back: nft's own rules (sets, maps,
      // a dynset with its statement, comments as userdata, verdict maps, nat), an
      // iptables-nft table (xt matches and targets with binary info), and ours.
      loadNftForeign(ns, 200, 'kube');
      loadIptablesForeign(ns, 200);
      ns.nft([
        'add table inet odd',
        'add counter inet odd c1',
        'add chain inet odd c { type filter hook input priority 0; policy drop; }',
        'add rule inet odd c meta mark set jhash ip saddr mod 2 seed 0xdead',
        'add rule inet odd c ip saddr 1.2.3.4 counter comment "héllo, wörld"',
        'add rule inet odd c tcp option maxseg size 1400 ct count over 3 counter name "c1"',
        'add rule inet odd c ip6 saddr ::1 tcp dport { 22, 80 } ct state established,related accept',
        'add rule inet odd c iifname "eth*" meta l4proto udp udp dport 53 limit rate 10/second log prefix "dns: " drop',
        'add rule inet odd c ip daddr 10.0.0.0/8 ip dscp cs1 reject with icmp type host-unreachable',
        // A set update carrying its own statement, decoded with it.
        'add set inet odd seen { type ipv4_addr; flags dynamic,timeout; timeout 1m; }',
        'add rule inet odd c update @seen { ip saddr limit rate 10/second } accept',
      ].join('\n'));
      const s = open({ netns: ns.path });
      try {
        await s.commit(ownedSetup());
        const native = (s as unknown as { native: import('../../src/netlink/addon.js').NativeSocket }).native;
        let total = 0;
        let odd: unknown[] = [];
        for (const [family, table] of [['ip', 'kube'], ['ip', 'nat'], ['inet', 'odd'], [F, T]] as const) {
          const rules = await native.dump('rule', family, table, undefined, false) as { family: string; table: string }[];
          expect(rules.length).toBeGreaterThan(0);
          expect(rules.every((r) => r.family === family && r.table === table)).toBe(true);
          if (table === 'odd') odd = rules;
          total += rules.length;
        }
        expect(total).toBeGreaterThan(400);
        // A chain-filtered dump of the same table agrees with the table dump, key order included.
        const chainOnly = await native.dump('rule', 'inet', 'odd', 'c', false);
        expect(chainOnly).toHaveLength(7);
        expect(JSON.stringify(chainOnly)).toBe(JSON.stringify((odd as { chain: string }[]).filter((r) => r.chain === 'c')));
        expect((chainOnly as { exprs: Expr[] }[]).flatMap((r) => r.exprs).filter((e) => e.kind === 'dynset').map((e) => e.kind === 'dynset' && e.exprs))
          .toEqual([[{ kind: 'limit', rate: 10, unit: 1, burst: 5, type: 0, flags: 0 }]]);
      } finally {
        s.close();
      }
    }, 'decode');
  });
});

describe('set expressions', () => {
  it("a set's, its elements' and a two-expression set's statements decode as the kernel holds them, counts included", async () => {
    await withSocket(async (s) => {
      await s.commit([
        ...ownedSetup(),
        { verb: 'add', object: 'set', family: F, table: T, name: 'c', flags: 0, keyType: 7, keyLen: 4, exprs: [{ kind: 'counter' }],
          elements: [{ key: '0a000001', exprs: [{ kind: 'counter', packets: 5, bytes: 100 }] }, { key: '0a000002' }] },
        { verb: 'add', object: 'set', family: F, table: T, name: 'q', flags: 0x120, keyType: 7, keyLen: 4,
          exprs: [{ kind: 'counter' }, { kind: 'quota', bytes: 1 << 20, flags: 1, consumed: 0 }],
          elements: [{ key: '0a000003' }] },
        { verb: 'add', object: 'set', family: F, table: T, name: 'l', flags: 0x20, keyType: 7, keyLen: 4,
          exprs: [{ kind: 'limit', rate: 10, unit: 1, burst: 5, type: 0, flags: 0 }] },
      ]);
      const sets = new Map((await s.listSets({ family: F, table: T })).map((x) => [x.name, x]));
      expect(sets.get('c')!.exprs).toEqual([{ kind: 'counter', packets: 0, bytes: 0 }]);
      expect(sets.get('q')!.exprs).toEqual([{ kind: 'counter', packets: 0, bytes: 0 }, { kind: 'quota', bytes: 1 << 20, flags: 1, consumed: 0 }]);
      expect(sets.get('l')!.exprs).toEqual([{ kind: 'limit', rate: 10, unit: 1, burst: 5, type: 0, flags: 0 }]);
      const byKey = async (set: string) => new Map((await s.listElements({ family: F, table: T, set })).map((e) => [e.key, e.exprs]));
      const c = await byKey('c');
      // the element given none gets the set's
      expect(c.get('0a000001')).toEqual([{ kind: 'counter', packets: 5, bytes: 100 }]);
      expect(c.get('0a000002')).toEqual([{ kind: 'counter', packets: 0, bytes: 0 }]);
      expect((await byKey('q')).get('0a000003')).toEqual([{ kind: 'counter', packets: 0, bytes: 0 }, { kind: 'quota', bytes: 1 << 20, flags: 1, consumed: 0 }]);
    });
  });

  it('refuses a set statement that is no stateful expression, or more than two, before anything is sent', async () => {
    await withSocket(async (s) => {
      const set = (exprs: unknown) => ({ verb: 'add', object: 'set', family: F, table: T, name: 'x', flags: 0, keyType: 7, keyLen: 4, exprs } as Op);
      await expect(s.commit([...ownedSetup(), set([{ kind: 'immediate', dreg: 0, verdict: 'accept' }])])).rejects.toThrow(/exprs\[0\]\.kind/);
      await expect(s.commit([...ownedSetup(), set([{ kind: 'counter' }, { kind: 'counter' }, { kind: 'counter' }])])).rejects.toThrow(/1 to 2 expressions/);
      await expect(s.commit([...ownedSetup(), set([{ kind: 'limit', rate: 'x' }])])).rejects.toThrow(/exprs\[0\]/);
      expect(await s.listTables()).toEqual([]);
    });
  });
});

