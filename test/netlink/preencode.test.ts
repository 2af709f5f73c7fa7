/**
 * A big batch encodes an expression object it holds more than once once (native encode.cc,
 * Hints): every rule the kernel then holds must be the one its expressions say,
 * whether its expressions are its predecessor's objects, equal copies, or the same objects at
 * other places, across the encoder's handle scopes, and an error still names the op and the
 * expression.
 *
 * A commit hands the encoder what it need not read again (socket.ts, encodeHints): per op, that it
 * is a rule added where the rule before it went, and an id per expression object of the batch: the
 * kernel must hold the same rules, with the same digests of what was sent, as from the same ops
 * without hints, across tables and chains of the same name, ops in between, rules placed by id,
 * and the encoder's handle scopes; hints that do not fit the ops are not taken.
 *
 * A small commit takes a frozen rule's expressions encoded once (socket.ts, encodeExprs): the rule
 * the kernel then holds must be the one the expressions say, the first time (encoded and cached)
 * and every time after (from the cache), at any position; a rule whose expressions are not frozen
 * is encoded afresh every time, so changing them between commits changes the rule.
 */
import { describe, expect, it } from 'vitest';
import { Batch, open } from '../../src/index.js';
import { loadAddon } from '../../src/netlink/addon.js';
import { EncodedRuleOp, type Op } from '../../src/netlink/ops.js';
import { AT_SAME_PLACE, encodeHints } from '../../src/netlink/socket.js';
import type { Expr } from '../../src/netlink/expr.js';
import { compileRule, ruleKey } from '../../src/rules/index.js';
import { withNetns } from '../helpers/netns.js';

const at = { family: 'ip' as const, table: 't', chain: 'c' };
const exprsOf = (t: string) => compileRule(t, at).exprs;
const frozen = (x: readonly Expr[]): Expr[] => Object.freeze(x.map((e) => Object.freeze({ ...e }))) as Expr[];

describe('pre-encoded rule expressions', () => {
  it('re-add the same frozen rule, first encoded then from the cache, at its position; unfrozen ones are read afresh', async () => {
    await withNetns(async (ns) => {
      ns.nft(`add table ip t
add chain ip t c
add rule ip t c ip saddr 10.0.0.1 return
add rule ip t c ip saddr 10.0.0.3 return`);
      const s = open({ netns: ns.path });
      try {
        const mid = frozen(exprsOf('ip saddr 10.0.0.2 ip daddr 192.0.2.1 counter return'));
        const key = ruleKey({ exprs: mid });
        for (let k = 0; k < 3; k++) {
          const [first] = await s.listRules(at);
          await s.commit(new Batch().add('rule', { ...at, exprs: mid, userdata: '0102', position: first!.handle! }));
          const rules = await s.listRules(at);
          expect(rules.map((r) => ruleKey({ exprs: r.exprs }))).toEqual([ruleKey({ exprs: exprsOf('ip saddr 10.0.0.1 return') }), key,
            ruleKey({ exprs: exprsOf('ip saddr 10.0.0.3 return') })]);
          expect(rules[1]!.userdata).toBe('0102');
          await s.commit(new Batch().delete('rule', { ...at, handle: rules[1]!.handle! }));
        }
        // Not frozen: the same array changed in place must give the changed rule.
        const loose = exprsOf('ip saddr 10.0.0.9 return');
        await s.commit(new Batch().add('rule', { ...at, exprs: loose }));
        loose.splice(0, loose.length, ...exprsOf('ip saddr 10.0.0.8 return'));
        await s.commit(new Batch().add('rule', { ...at, exprs: loose }));
        const tail = (await s.listRules(at)).slice(-2).map((r) => ruleKey({ exprs: r.exprs }));
        expect(tail).toEqual([ruleKey({ exprs: exprsOf('ip saddr 10.0.0.9 return') }), ruleKey({ exprs: exprsOf('ip saddr 10.0.0.8 return') })]);
      } finally {
        s.close();
      }
    }, 'preenc');
  });

  it('a big batch of rules sharing expression objects installs each rule as its expressions say', async () => {
    await withNetns(async (ns) => {
      ns.nft('add table ip t\nadd chain ip t c');
      const s = open({ netns: ns.path });
      try {
        // Shared objects, as the keeper's compacted rules have them, in places that change from rule to rule.
        const load = exprsOf('ip saddr 10.0.0.1 return')[0]!;
        const counter = Object.freeze({ kind: 'counter' }) as Expr;
        const verdicts = ['return', 'accept', 'drop'].map((v) => exprsOf(`ip saddr 10.0.0.1 ${v}`).at(-1)!);
        const texts: string[] = [];
        const lists: Expr[][] = [];
        for (let i = 0; i < 700; i++) {
          const addr = `10.1.${i >> 8}.${i & 255}`;
          const text = i % 7 === 3 ? `ip saddr ${addr} ${['return', 'accept', 'drop'][i % 3]}`
            : i % 11 === 5 ? `counter ip saddr ${addr} ${['return', 'accept', 'drop'][i % 3]}`
              : `ip saddr ${addr} counter ${['return', 'accept', 'drop'][i % 3]}`;
          texts.push(text);
          // The compiled rule with its shared parts swapped for the shared objects (some rules keep their own copies).
          lists.push(exprsOf(text).map((e) => (i % 13 === 0 ? e : e.kind === 'counter' ? counter
            : JSON.stringify(e) === JSON.stringify(load) ? load
              : verdicts.find((v) => JSON.stringify(v) === JSON.stringify(e)) ?? e)));
        }
        const batch = new Batch();
        for (const exprs of lists) batch.add('rule', { ...at, exprs });
        await s.commit(batch);
        const got = (await s.listRules(at)).map((r) => ruleKey({ exprs: r.exprs }));
        expect(got).toEqual(texts.map((t) => ruleKey({ exprs: exprsOf(t) })));
        // The encoder's error for a bad expression where the previous rule had a good object still
        // names it (straight to the addon: the batch's validation would refuse it first).
        const bad = Array.from({ length: 300 }, (_, i) => ({ verb: 'add', object: 'rule', ...at, exprs: i === 299 ? [load, { kind: 'nosuch' }] : [load, counter] }));
        await expect(Promise.resolve().then(() => s.nativeSocket.commit(bad as never, undefined, false, undefined, false))).rejects.toThrow(/operation 299: exprs\[1\]: unknown kind 'nosuch'/);
        expect(await s.listRules(at)).toHaveLength(700);
      } finally {
        s.close();
      }
    }, 'shared');
  });

  it('rules added encoded (EncodedRuleOp) install as the same ops with their expressions, in a big batch and a small one, without reading them', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      try {
        const setup: Op[] = [{ verb: 'add', object: 'table', family: 'ip', name: 't' }, { verb: 'add', object: 'chain', family: 'ip', table: 't', name: 'c' }];
        const lists = Array.from({ length: 300 }, (_, i) => frozen(exprsOf(`ip saddr 10.3.${i >> 8}.${i & 255} tcp dport ${1 + i} ${i % 3 === 0 ? 'counter ' : ''}accept`)));
        let read = 0;
        const exprsAt = (j: number) => {
          read++;
          return lists[j]!;
        };
        for (const n of [300, 5]) {
          const plainOps: Op[] = [...setup], encodedOps: Op[] = [...setup];
          for (let i = 0; i < n; i++) {
            const userdata = i % 7 === 0 ? '0102' : undefined;
            plainOps.push({ verb: 'add', object: 'rule', ...at, exprs: lists[i]!, ...(userdata ? { userdata } : {}) });
            // Every other rule encoded: the encoder's place hints run across both kinds.
            encodedOps.push(i % 2 === 0 ? new EncodedRuleOp('ip', 't', 'c', loadAddon().encodeExprs(lists[i]!), userdata, exprsAt, i)
              : plainOps[plainOps.length - 1]!);
          }
          const installed = async () => (await s.listRules(at)).map((r) => `${ruleKey({ exprs: r.exprs })} ${r.userdata ?? ''}`);
          ns.nft('flush ruleset');
          const want = await s.commit(plainOps, { digests: true });
          const rules = await installed();
          ns.nft('flush ruleset');
          const got = await s.commit(new Batch().push(encodedOps[0]!).push(encodedOps[1]!), {});
          expect(got).toBeUndefined();
          const batch = new Batch();
          for (const op of encodedOps.slice(2)) batch.push(op);
          const r = await s.commit(batch, { digests: true });
          expect(await installed()).toEqual(rules);
          expect(rules).toHaveLength(n);
          expect(r && r.digests).toEqual(want && want.digests!.slice(2));
          expect(read).toBe(0);
        }
        // Bytes that are not one NFTA_RULE_EXPRESSIONS attribute: refused when queued, naming the op.
        const good = loadAddon().encodeExprs(lists[0]!);
        const cut = good.subarray(0, good.length - 4);
        const other = Buffer.from(good);
        other.writeUInt16LE(0x8000 | 3, 2);
        for (const bytes of [cut, other, Buffer.alloc(0)]) {
          expect(() => new Batch().push(setup[0]!).push(new EncodedRuleOp('ip', 't', 'c', bytes, undefined, exprsAt, 0)))
            .toThrow(/operation 1: encoded: must be one NFTA_RULE_EXPRESSIONS attribute/);
        }
        // Its expressions, read, are the list's.
        expect(new EncodedRuleOp('ip', 't', 'c', good, undefined, exprsAt, 0).exprs).toBe(lists[0]);
      } finally {
        s.close();
      }
    }, 'encoded');
  });

  it('hinted ops install the same rules, with the same digests of what was sent, as the same ops read in full', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      try {
        const counter = Object.freeze({ kind: 'counter' }) as Expr;
        const shared = exprsOf('ip saddr 10.0.0.1 tcp dport 1 accept');
        const ops: Op[] = [{ verb: 'add', object: 'table', family: 'ip', name: 't1' }, { verb: 'add', object: 'table', family: 'ip', name: 't2' }];
        for (const [table, name] of [['t1', 'c'], ['t1', 'd'], ['t2', 'c']] as const) ops.push({ verb: 'add', object: 'chain', family: 'ip', table, name });
        const places = [['t1', 'c'], ['t2', 'c'], ['t1', 'd']] as const;
        for (let i = 0; i < 700; i++) {
          // Runs of rules at the end of one chain, then a chain of the same name in another table, then another chain.
          const [table, chain] = places[Math.floor(i / 90) % 3]!;
          const own = exprsOf(`ip saddr 10.2.${i >> 8}.${i & 255} tcp dport ${1 + (i % 50)} ${i % 4 === 0 ? 'counter ' : ''}accept`);
          // Shared objects where the compiled rule has an equal one (the keeper's compacted rules), not in every rule.
          const exprs = i % 17 === 0 ? own : own.map((e) => (e.kind === 'counter' ? counter : shared.find((x) => JSON.stringify(x) === JSON.stringify(e)) ?? e));
          const op: Op = { verb: 'add', object: 'rule', family: 'ip', table, chain, exprs, ...(i % 5 === 0 ? { userdata: '0102' } : {}) };
          if (i % 31 === 7) Object.assign(op, { id: 1000 + i });
          // After a rule some way back in its chain (not at the end, where a rule without it would go too).
          if (i % 31 === 8 || (i % 31 === 20 && Math.floor((i - 13) / 90) === Math.floor(i / 90))) Object.assign(op, { positionId: 1000 + i - (i % 31 === 8 ? 1 : 13) });
          if (i % 43 === 11) op.verb = 'insert';
          ops.push(op);
          // Something else between two rules now and then.
          // (also where the next rule goes to another chain than this one).
          if (i % 97 === 50 || i % 90 === 89) ops.push({ verb: 'add', object: 'set', family: 'ip', table, name: `s${i}`, keyType: 7, keyLen: 4, flags: 0 });
        }
        const hints = encodeHints(ops);
        // The hints this test is about are there: most rules go where the one before went, and
        // expression objects come again further on (the shared verdict and loads across the chains).
        const words = hints.subarray(0, ops.length), named = hints.subarray(ops.length);
        expect(words.filter((h) => (h & 0x8000_0000) !== 0).length).toBeGreaterThan(500);
        // and most of the others have no field but their chain (placed by id, or inserted, not).
        expect(words.filter((h) => (h & 0xc000_0000) === 0x4000_0000).length).toBeGreaterThan(20);
        expect(words.filter((h, k) => (h & 0x4000_0000) === 0 && ops[k]!.object === 'rule').length).toBeGreaterThan(20);
        expect(named.length - new Set(named).size).toBeGreaterThan(2000);
        expect(named.includes(0)).toBe(false);
        const installed = async () => {
          const out: string[] = [];
          for (const [table, chain] of places) {
            for (const r of await s.listRules({ family: 'ip', table, chain })) out.push(`${table} ${chain} ${ruleKey({ exprs: r.exprs })} ${r.userdata ?? ''}`);
          }
          return out;
        };
        const hinted = await s.nativeSocket.commit(ops, undefined, false, undefined, true, hints);
        const withHints = await installed();
        ns.nft('flush ruleset');
        const plain = await s.nativeSocket.commit(ops, undefined, false, undefined, true);
        expect(await installed()).toEqual(withHints);
        expect(withHints).toHaveLength(700);
        // (a rule placed after one some way back went there: its place was read)
        const line = (text: string) => withHints.findIndex((l) => l.startsWith(`t1 c ${ruleKey({ exprs: exprsOf(text) })} `));
        expect(line('ip saddr 10.2.0.7 tcp dport 8 accept')).toBeGreaterThanOrEqual(0);
        expect(line('ip saddr 10.2.0.20 tcp dport 21 counter accept')).toBe(line('ip saddr 10.2.0.7 tcp dport 8 accept') + 1);
        expect(hinted && hinted.digests).toEqual(plain && plain.digests);
        expect((plain && plain.digests)!.filter((d) => d !== '').length).toBe(700);
        // Hints that do not fit these ops are not taken: fewer words than ops; a rule's place where the
        // op before was not a rule (the first op, a chain after a table, a rule after a set), ids
        // starting past the array's end or inside its words, ids past any the array can name.
        const junk: Uint32Array[] = [new Uint32Array(ops.length - 1).fill(0xffff_ffff)];
        junk.push(hints.map((x, k) => (k < ops.length && (k === 0 || ops[k - 1]!.object !== 'rule') ? x | 0x8000_0000 : x)));
        expect(junk[1]!.filter((h, k) => h !== hints[k]).length).toBeGreaterThan(5);
        junk.push(hints.map((x, k) => (k < ops.length && (x & 0x3fff_ffff) !== 0 ? (x & 0xc000_0000) | hints.length : x)));
        junk.push(hints.map((x, k) => (k < ops.length && (x & 0x3fff_ffff) !== 0 ? (x & 0xc000_0000) | 1 : x)));
        junk.push(hints.map((x, k) => (k < ops.length ? x : x + hints.length)));
        // (ids starting inside the words, where the words of the ops before the first rule look like ids)
        const first = ops.findIndex((op) => op.object === 'rule');
        junk.push(hints.map((x, k) => (k >= ops.length ? x : k < first ? 5 : ops[k]!.object === 'rule' ? (x & 0xc000_0000) | 1 : x)));
        for (const j of junk) {
          ns.nft('flush ruleset');
          expect(await s.nativeSocket.commit(ops, undefined, false, undefined, true, j)).toEqual(plain);
          expect(await installed()).toEqual(withHints);
        }
      } finally {
        s.close();
      }
    }, 'hints');
  });

  it('encodeHints: a rule added where the rule op before it went, and an id per expression object of the batch', () => {
    const a = exprsOf('ip saddr 10.0.0.1 accept'), b = exprsOf('ip saddr 10.0.0.1 accept');
    const rule = (o: Partial<Op> & object): Op => ({ verb: 'add', object: 'rule', ...at, exprs: a, ...o }) as Op;
    const samePlace = (prev: Op, op: Op) => (encodeHints([prev, op])[1]! & 0x8000_0000) !== 0;
    const plain = (prev: Op, op: Op) => (encodeHints([prev, op])[1]! & 0x4000_0000) !== 0;
    // The ids of each op's expressions, [] for an op without.
    const idsOf = (ops: Op[]) => {
      const h = encodeHints(ops);
      return ops.map((op, k) => {
        const from = h[k]! & 0x3fff_ffff, n = op.object === 'rule' && Array.isArray(op.exprs) ? op.exprs.length : 0;
        return from === 0 ? [] : [...h.subarray(from, from + n)];
      });
    };
    expect(samePlace(rule({}), rule({}))).toBe(true);
    expect(samePlace(rule({}), rule({ exprs: b, userdata: '01', digest: 'x' } as Partial<Op>))).toBe(true);
    expect(plain(rule({}), rule({}))).toBe(true);
    // Another chain, or inserted: plain all the same; placed otherwise, not.
    for (const o of [{ table: 'u' }, { chain: 'd' }, { family: 'inet' }, { verb: 'insert' }] as Partial<Op>[]) expect(plain(rule({}), rule(o))).toBe(true);
    for (const o of [{ handle: 5 }, { position: 5 }, { id: 1 }, { positionId: 1 }, { compat: { proto: 6 } }, { verb: 'replace', handle: 5 }] as Partial<Op>[]) {
      expect(plain(rule({}), rule(o))).toBe(false);
    }
    // Elsewhere, or placed, or not an add, or across a delete or another object.
    for (const o of [{ table: 'u' }, { chain: 'd' }, { family: 'inet' }, { handle: 5 }, { position: 5 }, { id: 1 }, { positionId: 1 },
      { compat: { proto: 6 } }, { verb: 'insert' }, { verb: 'replace', handle: 5 }] as Partial<Op>[]) {
      expect(samePlace(rule({}), rule(o))).toBe(false);
    }
    expect(samePlace(rule({ chain: undefined, chainId: 3 } as never), rule({ chain: undefined, chainId: 3 } as never))).toBe(false);
    expect(samePlace(rule({ verb: 'delete', handle: 5 }), rule({}))).toBe(false);
    expect(samePlace({ verb: 'add', object: 'table', family: 'ip', name: 't' }, rule({}))).toBe(false);
    expect(encodeHints([rule({})])[0]).toBe((0x4000_0000 | 1) >>> 0);
    expect(plain(rule({}), rule({ verb: 'delete', handle: 5 }))).toBe(false);
    // The same object, the same id, next to the op before or further on; an equal copy, its own.
    const [x, y, z] = a, [, y2] = b;
    expect(idsOf([rule({}), rule({ exprs: b }), rule({ exprs: [x!, y2!, z!] }), rule({ verb: 'delete', handle: 5 }),
      { verb: 'add', object: 'table', family: 'ip', name: 't' }, rule({ exprs: [z!, x!] })]))
      .toEqual([[1, 2, 3], [4, 5, 6], [1, 5, 3], [], [], [3, 1]]);
  });

  it('a rule at the same place may hold only the fields the encoder then reads, and every field of a rule op is judged', () => {
    // Per field, a value other than the rule before's, whether a rule holding it may take that rule's
    // place, and whether it is still plain (its other fields not read): typed over every field, so
    // that a new field of a rule op must be judged here too.
    const other: Record<keyof typeof AT_SAME_PLACE, [unknown, boolean, boolean]> = {
      verb: ['insert', false, true], object: ['chain', false, false], family: ['inet', false, true], table: ['u', false, true], chain: ['d', false, true],
      exprs: [exprsOf('ip saddr 10.0.0.2 drop'), true, true], userdata: ['0102', true, true], digest: ['ab', true, true],
      handle: [5, false, false], position: [5, false, false], id: [1, false, false], positionId: [1, false, false], chainId: [3, false, false],
      compat: [{ proto: 6 }, false, false],
    };
    const base: Op = { verb: 'add', object: 'rule', ...at, exprs: exprsOf('ip saddr 10.0.0.1 accept') };
    for (const [field, [value, may, bare]] of Object.entries(other)) {
      const word = encodeHints([base, { ...base, [field]: value } as Op])[1]!;
      expect([field, (word & 0x8000_0000) !== 0, (word & 0x4000_0000) !== 0]).toEqual([field, may, bare]);
    }
  });

  it('encodeExprs gives the same bytes for equal expressions and refuses what the encoder refuses', () => {
    const { encodeExprs } = loadAddon();
    const a = encodeExprs(exprsOf('ip saddr 10.0.0.2 return'));
    expect(a.length).toBeGreaterThan(4);
    // NFTA_RULE_EXPRESSIONS (4) with NLA_F_NESTED (0x8000), its length the buffer's.
    expect(a.readUInt16LE(2)).toBe(0x8004);
    expect(a.readUInt16LE(0)).toBe(a.length);
    expect(encodeExprs(exprsOf('ip saddr 10.0.0.2 return')).equals(a)).toBe(true);
    expect(encodeExprs(exprsOf('ip saddr 10.0.0.3 return')).equals(a)).toBe(false);
    expect(() => encodeExprs([{ kind: 'nosuch' }])).toThrow(/unknown kind 'nosuch'/);
  });
});
