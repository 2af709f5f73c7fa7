/**
 * The desired rules as the daemon keeps them (src/model/compact.ts, and the compiled rule's lazy
 * text in src/rules/compile.ts): shared frozen expressions, and a text that still renders when
 * first read, reads as an ordinary property, and can be assigned.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { compactAsCompiled, compactRules, ExprPool, knownRule as knownCompact, sameExpr } from '../../src/model/compact.js';
import { diffTable } from '../../src/keeper/table.js';
import { knownRule } from '../../src/keeper/rule-key.js';
import type { TableConfig } from '../../src/model/desired.js';
import type { ObservedTable } from '../../src/netlink/objects.js';
import type { Expr } from '../../src/netlink/expr.js';
import { compileRule, interfaceTable } from '../../src/rules/index.js';
import { CORPUS } from '../rules/corpus.js';
import { ruleArb } from '../rules/generate.js';

const INTERFACES = interfaceTable({ lo: 1 });

const yaml = (rules: string[]) => `tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        type: nat\n        hook: postrouting\n` +
  `        priority: srcnat\n        rules:\n${rules.map((r) => `          - ${r}`).join('\n')}\n`;

describe('compactRules', () => {
  it('shares identical expressions between rules in frozen exact-size lists, once per compiled rule', () => {
    const config = parseConfig(yaml(['ip saddr 10.0.0.1 ip daddr 192.0.2.1 return', 'ip saddr 10.0.0.2 ip daddr 192.0.2.1 return']));
    const [a, b] = config.tables[0]!.chains[0]!.rules.map((r) => r.compiled);
    const before = structuredClone(a!.exprs);
    compactRules(config.tables);
    expect(Object.isFrozen(a!.exprs)).toBe(true);
    expect(a!.exprs).toEqual(before);
    expect(a!.exprs.length).toBe(before.length);
    // saddr's compare differs; the daddr load and compare and the verdict are one object each.
    const shared = a!.exprs.filter((e, i) => e === b!.exprs[i]);
    expect(shared.length).toBe(a!.exprs.length - 1);
    for (const e of a!.exprs) expect(Object.isFrozen(e)).toBe(true);
    // A second pass (a reload keeping the rule) leaves a compacted rule as it is.
    const list = a!.exprs;
    compactRules(config.tables);
    expect(a!.exprs).toBe(list);
  });

  it('shares through a load of 10,000 rules with an address each: one object per distinct expression', () => {
    const rules = Array.from({ length: 10_000 }, (_, i) => `ip saddr 10.0.${i >> 8}.${i & 255} ip daddr 192.0.2.1 return`);
    const config = parseConfig(yaml(rules), 'c.yaml', { compiled: compactAsCompiled() });
    const objects = new Set(config.tables[0]!.chains[0]!.rules.flatMap((r) => r.compiled.exprs));
    expect(objects.size).toBe(10_000 + 4);
  });

  it('an expression met again after more than 4,096 others that were met once is shared from its third time', () => {
    const pool = new ExprPool();
    const e = () => ({ kind: 'immediate', dreg: 0, verdict: 'return' }) as const;
    const first = pool.intern(e());
    for (let i = 0; i < 5000; i++) pool.intern({ kind: 'immediate', dreg: 0, verdict: 'jump', chain: `c${i}` });
    const second = pool.intern(e());
    expect(second).not.toBe(first);
    const third = pool.intern(e());
    expect(third).toBe(second);
    expect(pool.intern(e())).toBe(second);
    expect(Object.isFrozen(first) && Object.isFrozen(second)).toBe(true);
  });

  it('a rule\'s expressions equal to its predecessor\'s shared ones at the same place are those, with the sharing intern alone gives', () => {
    // Rules whose first expressions repeat the rule before them (shared, or only met once: a
    // candidate), runs broken by other rules, and more than 4,096 candidates between two sightings.
    const texts: string[] = [];
    for (let i = 0; i < 6000; i++) {
      const run = Math.floor(i / 3);
      texts.push(i % 500 < 2 ? 'ip daddr 192.0.2.7 return' : `ip saddr 10.${run >> 16}.${(run >> 8) & 255}.${run & 255} ip daddr 192.0.2.${i % 7} tcp dport ${i} return`);
    }
    const compiled = () => texts.map((t) => compileRule(t, { family: 'ip', table: 't', chain: 'c' }));
    // knownRule, by the rule before.
    const pool = new ExprPool();
    const fast = compiled();
    for (const c of fast) {
      const before = c.exprs.length;
      knownCompact(c, pool);
      expect(c.exprs.length).toBe(before);
    }
    // intern alone, expression by expression.
    const plain = new ExprPool();
    const slow = compiled().map((c) => c.exprs.map((e) => plain.intern(e)));
    // The same objects in the same places: each position names the first place its object was met.
    const pattern = (lists: readonly (readonly Expr[])[]) => {
      const first = new Map<Expr, number>();
      let n = 0;
      return lists.map((l) => l.map((e) => { if (!first.has(e)) first.set(e, n); n++; return first.get(e)!; }));
    };
    expect(pattern(fast.map((c) => c.exprs))).toEqual(pattern(slow));
    // It did take the rule before's objects: most rules share their daddr load and verdict with it.
    expect(fast.filter((c, i) => i > 0 && c.exprs.at(-1) === fast[i - 1]!.exprs.at(-1)).length).toBeGreaterThan(5000);
  });

  it('shares two expressions exactly when their JSON is the same: every pair of the oracle corpus\'s expressions', () => {
    // Each corpus rule compiled twice: the second compile's expressions are other objects with the same JSON.
    const compile = () => CORPUS.flatMap((c) => {
      try {
        return compileRule(c.text, { family: c.family, table: 't', chain: 'c', interfaces: INTERFACES }).exprs;
      } catch {
        return [];  // a rule the oracle checks nft refuses too
      }
    });
    const exprs = [...compile(), ...compile()];
    const json = exprs.map((e) => JSON.stringify(e));
    expect(new Set(json).size).toBeGreaterThan(200);
    // Pairwise: structurally the same exactly when the JSON key (the pool's former key) is.
    for (let i = 0; i < exprs.length; i++) {
      for (let j = i + 1; j < exprs.length; j++) {
        if (sameExpr(exprs[i], exprs[j]) !== (json[i] === json[j])) expect.fail(`${json[i]} and ${json[j]}`);
      }
    }
    // Interned: one object per JSON key, each frozen, and each the expression it stands for.
    const pool = new ExprPool();
    const byKey = new Map<string, Expr>();
    for (let pass = 0; pass < 3; pass++) {
      exprs.forEach((e, i) => {
        const got = pool.intern(e);
        expect(JSON.stringify(got)).toBe(json[i]);
        if (pass === 2) {
          if (!byKey.has(json[i]!)) byKey.set(json[i]!, got);
          expect(got).toBe(byKey.get(json[i]!));
        }
      });
    }
  });

  it('shares generated rules\' expressions by their JSON, never two that differ', () => {
    fc.assert(fc.property(fc.array(ruleArb(), { minLength: 2, maxLength: 8 }), (gens) => {
      const pool = new ExprPool();
      const seen = new Map<Expr, string>();
      for (let pass = 0; pass < 2; pass++) {
        for (const g of gens) {
          let exprs: Expr[];
          try {
            exprs = compileRule(g.text, { family: g.family, table: 't', chain: 'c', interfaces: INTERFACES }).exprs;
          } catch {
            continue;
          }
          for (const e of exprs) {
            const key = JSON.stringify(e);
            const got = pool.intern(e);
            const was = seen.get(got);
            if (was !== undefined && was !== key) return false;
            seen.set(got, key);
          }
        }
      }
      // The second pass found every expression of the first: one object per key.
      return new Set(seen.values()).size === seen.size;
    }), { numRuns: 200 });
  });

  it('tells apart expressions whose hashes collide, and shares each of them', () => {
    // Two different expressions with the same structural hash, found by trying: the pool compares
    // field by field within a hash.
    const pool = new ExprPool();
    const byHash = new Map<number, Expr>();
    const mk = (i: number): Expr => ({ kind: 'cmp', sreg: 1, op: 'eq', data: i.toString(16).padStart(8, '0') });
    let pair: [Expr, Expr] | undefined;
    for (let i = 0; !pair && i < 1_000_000; i++) {
      const e = mk(i);
      const h = ExprPool.hashOf(e);
      const other = byHash.get(h);
      if (other) pair = [other, e];
      else byHash.set(h, e);
    }
    expect(pair).toBeDefined();
    const [a, b] = pair!.map((e) => JSON.parse(JSON.stringify(e)) as Expr);
    const a1 = pool.intern(a!);
    const b1 = pool.intern(b!);
    expect(b1).not.toBe(a1);
    // Second sightings (candidates become shared), then third (shared), each its own.
    for (let k = 0; k < 2; k++) {
      expect(pool.intern(JSON.parse(JSON.stringify(a)))).toBe(a1);
      expect(pool.intern(JSON.parse(JSON.stringify(b)))).toBe(b1);
    }
  });

  it('shares by field order and kind of value as JSON does: other order, a string for a number, undefined fields', () => {
    expect(sameExpr({ kind: 'meta', key: 'mark', dreg: 1 }, { kind: 'meta', key: 'mark', dreg: 1 })).toBe(true);
    expect(sameExpr({ kind: 'meta', key: 'mark', dreg: 1 }, { kind: 'meta', dreg: 1, key: 'mark' })).toBe(false);
    expect(sameExpr({ kind: 'meta', key: 'mark', dreg: 1 }, { kind: 'meta', key: 'mark', dreg: '1' })).toBe(false);
    expect(sameExpr({ kind: 'meta', key: 'mark' }, { kind: 'meta', key: 'mark', dreg: undefined })).toBe(false);
    expect(sameExpr({ kind: 'dynset', exprs: [{ kind: 'counter' }] }, { kind: 'dynset', exprs: [{ kind: 'counter' }] })).toBe(true);
    expect(sameExpr({ kind: 'dynset', exprs: [{ kind: 'counter' }] }, { kind: 'dynset', exprs: [{ kind: 'counter' }, { kind: 'counter' }] })).toBe(false);
    expect(sameExpr({ kind: 'dynset', exprs: [] }, { kind: 'dynset', exprs: {} })).toBe(false);
  });

  it('compares nested objects by their own keys, as JSON does, after a comparison that failed inside one', () => {
    // sameExpr keeps the outer object's keys while it compares an inner one: each level must see
    // its own keys, and a comparison that fails deep inside must leave none behind for the next
    const key = (x: unknown) => JSON.stringify(x);
    const values: unknown[] = [
      { kind: 'dynset', exprs: [{ kind: 'limit', rate: 1, unit: 2 }], set: 's' },
      { kind: 'dynset', exprs: [{ kind: 'limit', unit: 2, rate: 1 }], set: 's' },
      { kind: 'dynset', exprs: [{ kind: 'limit', rate: 1, unit: 2 }], set: 't' },
      { kind: 'dynset', exprs: [{ kind: 'limit', rate: 1 }], set: 's' },
      { kind: 'dynset', exprs: [{ kind: 'limit', rate: 1, unit: 2, burst: 0 }], set: 's' },
      { kind: 'dynset', exprs: [{ kind: 'limit', rate: 1, unit: 2 }] },
      { kind: 'dynset', set: 's', exprs: [{ kind: 'limit', rate: 1, unit: 2 }] },
      { kind: 'x', a: { b: { c: 1 } }, d: 2 },
      { kind: 'x', a: { b: { c: 1 } }, e: 2 },
      { kind: 'x', a: { b: { c: 2 } }, d: 2 },
      { kind: 'x', a: { b: {} }, d: 2 },
    ];
    for (let round = 0; round < 2; round++) {
      for (const a of values) {
        for (const b of values) expect(sameExpr(a, b)).toBe(key(a) === key(b));
      }
    }
  });

  it('keeps the text lazy, readable, enumerable and assignable, and spreads carry no hidden slots', () => {
    const config = parseConfig(yaml(['ip saddr 10.0.0.1   ip daddr 192.0.2.1 counter return']));
    const c = config.tables[0]!.chains[0]!.rules[0]!.compiled;
    compactRules(config.tables);
    expect(c.text).toBe('ip saddr 10.0.0.1 ip daddr 192.0.2.1 counter return');
    expect(Object.keys(c)).toEqual(['exprs', 'sets', 'text']);
    expect(JSON.parse(JSON.stringify(c))).toMatchObject({ text: c.text });
    const copy = { ...c };
    expect(Object.getOwnPropertySymbols(copy)).toEqual([]);
    expect(Object.getOwnPropertyDescriptor(copy, 'text')).toMatchObject({ value: c.text, enumerable: true });
    expect(copy).toEqual({ exprs: c.exprs, sets: c.sets, text: c.text });
    c.text = 'replaced';
    expect(c.text).toBe('replaced');
  });

  it('renders each rule with its own family and interfaces, the context shared or not', () => {
    const names = new Map([[7, 'eth7']]);
    const interfaces = { indexOf: (n: string) => (n === 'eth7' ? 7 : undefined), nameOf: (i: number) => names.get(i) };
    const a = compileRule('iif "eth7" accept', { family: 'ip', table: 't', chain: 'c', interfaces });
    const b = compileRule('ip6 saddr ::1 accept', { family: 'ip6', table: 't', chain: 'c' });
    const c = compileRule('iif "eth7" accept', { family: 'ip', table: 't', chain: 'c', interfaces });
    names.set(7, 'renamed');  // read at first render, as before
    expect(b.text).toBe('ip6 saddr ::1 accept');
    expect(a.text).toBe('iif "renamed" accept');
    names.set(7, 'eth7');
    expect(a.text).toBe('iif "renamed" accept');  // kept once made
    expect(c.text).toBe('iif "eth7" accept');
  });
});

describe('diffTable over compact rules (the start-up adoption by digests)', () => {
  const rules = ['ip saddr 10.0.0.1 ip daddr 192.0.2.1 return', 'ip saddr 10.0.0.2 ip daddr 192.0.2.1 return', 'ip saddr 10.0.0.3 ip daddr 192.0.2.1 return'];
  const observed = (t: TableConfig, order: number[], handles = order.map((_, i) => i + 10)): ObservedTable => {
    const c = t.chains[0]!;
    return {
      family: t.family, name: t.name, table: { family: t.family, name: t.name, flags: 0, use: 1 },
      chains: new Map([[c.name, { family: t.family, table: t.name, name: c.name, ...c.base! }]]),
      rules: new Map([[c.name, order.map((j, i) => knownRule(t, c, c.rules[j]!, handles[i]!))]]),
      sets: new Map(),
    };
  };

  it('finds a chain of its own desired rules equal, and still finds one out of order, short, or of another config\'s rules', () => {
    const t = parseConfig(yaml(rules)).tables[0]!;
    compactRules([t]);
    expect(diffTable(t, observed(t, [0, 1, 2])).drift).toEqual([]);
    const swapped = diffTable(t, observed(t, [0, 2, 1])).drift;
    expect(swapped.map((d) => d.kind)).toEqual(['rules-differ']);
    expect(swapped[0]!.detail).toMatch(/^rule order differs at 2/);
    expect(diffTable(t, observed(t, [0, 1])).drift.map((d) => d.kind)).toEqual(['rules-differ']);
    // The same text compiled again (a reload): other objects with the same keys, equal by key.
    const again = parseConfig(yaml(rules)).tables[0]!;
    expect(diffTable(again, observed(t, [0, 1, 2])).drift).toEqual([]);
    const other = parseConfig(yaml([rules[0]!, rules[1]!, 'ip saddr 10.0.0.9 ip daddr 192.0.2.1 return'])).tables[0]!;
    expect(diffTable(other, observed(t, [0, 1, 2])).drift[0]!.detail).toMatch(/^rule 3 differs/);
  });
});
