/**
 * Property tests: generated rules round-trip through render and compile;
 * arbitrary and mutated texts either compile or are refused with a
 * RuleSyntaxError pointing into the text (never another exception, never a
 * partial rule); rendering never fails on arbitrary expressions.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Expr } from '../../src/index.js';
import { RuleSyntaxError, compileRule, compiledSetResolver, renderRule, ruleKey } from '../../src/rules/index.js';
import { applyEdits } from '../helpers/mutate.js';
import { CORPUS } from './corpus.js';
import { ruleArb } from './generate.js';
import { INTERFACES } from './oracle.js';

const noCounts = (exprs: Expr[]) => exprs.map((e) => (e.kind === 'counter' ? { kind: 'counter' } : e));

/** Compiles, or checks the refusal is a well-formed RuleSyntaxError. Returns whether it compiled. */
function compileOrRefuse(text: string, family: 'ip' | 'ip6' | 'inet'): boolean {
  try {
    const r = compileRule(text, { family, table: 't', chain: 'c', interfaces: INTERFACES });
    // anything accepted is self-consistent
    expect(typeof r.text).toBe('string');
    expect(r.exprs.length).toBeGreaterThan(0);
    const again = compileRule(r.text, { family, table: 't', chain: 'c', interfaces: INTERFACES });
    expect(ruleKey(again)).toBe(ruleKey(r));
    expect(again.text).toBe(r.text);
    return true;
  } catch (e) {
    if (!(e instanceof RuleSyntaxError)) throw e;
    expect(e.text).toBe(text);
    expect(e.column).toBeGreaterThanOrEqual(1);
    expect(e.column).toBeLessThanOrEqual(text.length + 1);
    if (e.token === '') expect(e.column).toBe(text.length + 1);
    else if (e.token === '\\n') expect(text[e.column - 1]).toMatch(/[\n\r]/);
    else expect(text.slice(e.column - 1).startsWith(e.token)).toBe(true);
    expect(e.expected.length).toBeGreaterThan(0);
    return false;
  }
}

describe('generated rules', () => {
  it('round-trip: compile(render(compile(text))) is the same rule with the same text', () => {
    let compiled = 0;
    fc.assert(fc.property(ruleArb(), (g) => {
      let a;
      try {
        a = compileRule(g.text, { family: g.family, table: 't', chain: 'c', interfaces: INTERFACES });
      } catch (e) {
        if (e instanceof RuleSyntaxError) return; // e.g. overlapping set elements
        throw e;
      }
      compiled++;
      const text = renderRule(a, g.family, compiledSetResolver(a), { interfaces: INTERFACES });
      expect(text).toBe(a.text);
      const b = compileRule(text, { family: g.family, table: 't', chain: 'c', interfaces: INTERFACES });
      expect(b.text).toBe(text);
      expect(ruleKey(b)).toBe(ruleKey(a));
      expect(noCounts(b.exprs)).toEqual(noCounts(a.exprs));
      expect(b.userdata).toEqual(a.userdata);
    }), { numRuns: 1000, seed: 42 });
    expect(compiled).toBeGreaterThan(800);
  });
});

const WORDS = [
  'ip', 'ip6', 'saddr', 'daddr', 'protocol', 'nexthdr', 'tcp', 'udp', 'sport', 'dport', 'meta', 'iifname', 'oifname',
  'iif', 'oif', 'l4proto', 'nfproto', 'mark', 'ct', 'state', 'status', 'fib', 'type', 'local', 'counter', 'accept',
  'drop', 'return', 'jump', 'goto', 'masquerade', 'snat', 'dnat', 'redirect', 'to', 'set', 'comment', 'random',
  'fully-random', 'persistent', 'established', 'related', 'new', 'dnat', 'ipv4', 'ipv6', 'or', 'and', 'xor',
  '10.0.0.0/8', '1.2.3.4', '1.2.3.4-1.2.3.9', 'fd00::1', 'fd00::/64', '::1-::5', '80', '1000-2000', ':8080',
  '10.0.0.1:80', '0x4000', '"eth0"', '"veth*"', '"a comment"', 'KUBE-SVC-X', '{', '}', ',', '==', '!=', '&', '|',
  '^', '[', ']', '-', '@set', '"', ';', '$', '/', ':',
];

describe('arbitrary input', () => {
  it('random unicode strings compile or throw RuleSyntaxError', () => {
    fc.assert(fc.property(fc.string({ maxLength: 80, unit: 'binary' }), fc.constantFrom('ip', 'ip6', 'inet' as const),
      (s, fam) => { compileOrRefuse(s, fam); }), { numRuns: 3000, seed: 1 });
  });

  it('random token sequences compile or throw RuleSyntaxError', () => {
    let ok = 0;
    fc.assert(fc.property(fc.array(fc.constantFrom(...WORDS), { minLength: 0, maxLength: 12 }),
      fc.constantFrom(' ', '  ', '\t'), fc.constantFrom('ip', 'ip6', 'inet' as const),
      (ws, sep, fam) => { if (compileOrRefuse(ws.join(sep), fam)) ok++; }), { numRuns: 5000, seed: 2 });
    expect(ok).toBeGreaterThan(0);
  });

  it('mutated corpus rules compile or throw RuleSyntaxError', () => {
    const edit = fc.tuple(fc.constantFrom('insert', 'delete', 'replace', 'swap-word', 'drop-word'),
      fc.nat(), fc.string({ minLength: 1, maxLength: 3 }), fc.constantFrom(...WORDS));
    fc.assert(fc.property(fc.constantFrom(...CORPUS), fc.array(edit, { minLength: 1, maxLength: 3 }), (c, edits) => {
      const t = applyEdits(c.text, edits);
      compileOrRefuse(t, c.family);
    }), { numRuns: 5000, seed: 3 });
  });
});

const hexOf = (n: number) => fc.uint8Array({ minLength: n, maxLength: n }).map((b) => Buffer.from(b).toString('hex'));
const hexAny = fc.integer({ min: 0, max: 17 }).chain(hexOf);
const reg = fc.constantFrom(0, 1, 2, 3, 8, 9);
const exprArb: fc.Arbitrary<Expr> = fc.oneof(
  fc.record({ kind: fc.constant('payload' as const), base: fc.constantFrom('network' as const, 'transport' as const, 'll' as const),
    offset: fc.integer({ min: 0, max: 40 }), len: fc.integer({ min: 1, max: 16 }), dreg: reg }),
  fc.record({ kind: fc.constant('cmp' as const), sreg: reg, op: fc.constantFrom('eq' as const, 'neq' as const, 'lt' as const, 'gte' as const, 'lte' as const), data: hexAny }),
  fc.record({ kind: fc.constant('bitwise' as const), sreg: reg, dreg: reg, len: fc.integer({ min: 1, max: 16 }), mask: hexAny, xor: hexAny }),
  fc.record({ kind: fc.constant('meta' as const), key: fc.constantFrom('mark' as const, 'iifname' as const, 'l4proto' as const, 'nfproto' as const, 'iif' as const, 'skuid' as const), dreg: reg }),
  fc.record({ kind: fc.constant('meta' as const), key: fc.constantFrom('mark' as const), sreg: reg }),
  fc.record({ kind: fc.constant('ct' as const), key: fc.constantFrom('state' as const, 'status' as const, 'mark' as const), dreg: reg }),
  fc.record({ kind: fc.constant('immediate' as const), dreg: reg, data: hexAny }),
  fc.record({ kind: fc.constant('immediate' as const), dreg: fc.constant(0), verdict: fc.constantFrom('accept' as const, 'jump' as const, 'queue' as const), chain: fc.option(fc.constant('x'), { nil: undefined }) }),
  fc.record({ kind: fc.constant('lookup' as const), sreg: reg, set: fc.constantFrom('__set0', 'named'), flags: fc.constantFrom(0, 1) }),
  fc.record({ kind: fc.constant('range' as const), sreg: reg, op: fc.constantFrom('eq' as const, 'neq' as const), from: hexAny, to: hexAny }),
  fc.record({ kind: fc.constant('nat' as const), type: fc.constantFrom('snat' as const, 'dnat' as const), family: fc.constantFrom('ip' as const, 'ip6' as const, 'inet' as const),
    regAddrMin: fc.option(reg, { nil: undefined }), regAddrMax: fc.option(reg, { nil: undefined }), regProtoMin: fc.option(reg, { nil: undefined }), flags: fc.option(fc.nat(127), { nil: undefined }) }),
  fc.record({ kind: fc.constantFrom('masq' as const, 'redir' as const), flags: fc.option(fc.nat(127), { nil: undefined }), regProtoMin: fc.option(reg, { nil: undefined }) }),
  fc.record({ kind: fc.constant('counter' as const), packets: fc.nat(), bytes: fc.nat() }),
  fc.record({ kind: fc.constant('fib' as const), result: fc.constantFrom('type' as const, 'oif' as const), flags: fc.nat(63), dreg: reg }),
  fc.record({ kind: fc.constant('match' as const), name: fc.constantFrom('comment', 'addrtype'), rev: fc.nat(2), info: hexAny }),
  fc.record({ kind: fc.constant('target' as const), name: fc.constant('MASQUERADE'), rev: fc.nat(2), info: hexAny }),
  fc.record({ kind: fc.constant('unknown' as const), name: fc.constant('tproxy'), data: hexAny }),
);

describe('rendering arbitrary kernel rules', () => {
  it('returns text for any expression list and never throws', () => {
    fc.assert(fc.property(fc.array(exprArb, { maxLength: 10 }), fc.constantFrom('ip', 'ip6', 'inet' as const),
      fc.option(hexAny, { nil: undefined }), (exprs, fam, userdata) => {
        const text = renderRule({ exprs, userdata }, fam, () => undefined, { interfaces: INTERFACES });
        expect(typeof text).toBe('string');
        expect(typeof ruleKey({ exprs, userdata })).toBe('string');
      }), { numRuns: 3000, seed: 4 });
  });
});
