/**
 * The desired rules as the daemon keeps them (src/model/compact.ts, and the compiled rule's lazy
 * text in src/rules/compile.ts): shared frozen expressions, and a text that still renders when
 * first read, reads as an ordinary property, and can be assigned.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { compactAsCompiled, compactRules, ExprPool } from '../../src/model/compact.js';
import { diffTable } from '../../src/keeper/table.js';
import { knownRule } from '../../src/keeper/rule-key.js';
import type { TableConfig } from '../../src/model/desired.js';
import type { ObservedTable } from '../../src/netlink/objects.js';
import { compileRule } from '../../src/rules/index.js';

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
