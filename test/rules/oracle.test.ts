/**
 * For every corpus rule, nft and nfkeeper must leave the kernel holding the
 * same thing: identical decoded expressions (up to set names and counter
 * values), identical anonymous sets (flags, key type/length, size, userdata,
 * elements), equal rule keys, and the same `nft list` line. Our rendering of
 * what the kernel holds must be the canonical text.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledSetResolver, renderRule, ruleKey } from '../../src/rules/index.js';
import { CORPUS, type CorpusFamily, type CorpusRule } from './corpus.js';
import { CHAIN_NAME, INTERFACES, comparable, runOracle, setShape, type OracleResult } from './oracle.js';

const results = new Map<CorpusRule, OracleResult>();

beforeAll(async () => {
  for (const family of ['ip', 'ip6', 'inet'] as CorpusFamily[]) {
    const rules = CORPUS.filter((c) => c.family === family);
    const out = await runOracle(family, rules.map((c) => ({ text: c.text, chain: CHAIN_NAME[c.chain]! })));
    rules.forEach((c, i) => results.set(c, out[i]!));
  }
}, 120_000);

afterAll(() => results.clear());

describe('corpus against nft 1.0.6', () => {
  it('has at least 150 rules', () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(150);
  });

  it.each(CORPUS.map((c) => [`${c.family} ${c.chain}: ${c.text}`, c] as const))('%s', (_name, c) => {
    const r = results.get(c)!;
    const canonical = c.canonical ?? c.text;
    const own = compiledSetResolver(r.compiled);
    // the kernel holds the same expressions either way, and the compiler predicted them
    expect(comparable(r.nfk.rule.exprs, r.nfk.sets)).toEqual(comparable(r.nft.rule.exprs, r.nft.sets));
    expect(comparable(r.compiled.exprs, own)).toEqual(comparable(r.nfk.rule.exprs, r.nfk.sets));
    expect(r.nfk.rule.userdata).toEqual(r.nft.rule.userdata);
    expect(r.compiled.userdata).toEqual(r.nft.rule.userdata);
    // the same anonymous sets, down to nft's userdata
    expect(r.nfk.used.map(setShape)).toEqual(r.nft.used.map(setShape));
    expect(r.compiled.sets.map((s) => setShape({ set: s, elements: s.elements ?? [] })))
      .toEqual(r.nft.used.map(setShape));
    // structural keys agree
    const key = ruleKey(r.compiled);
    expect(ruleKey(r.nft.rule, r.nft.sets)).toBe(key);
    expect(ruleKey(r.nfk.rule, r.nfk.sets)).toBe(key);
    // nft prints the same line for both
    expect(r.nfk.line).toBe(r.nft.line);
    expect(r.nft.line).toBe(c.nft ?? canonical);
    // our rendering of the kernel's rule is the canonical text
    expect(r.compiled.text).toBe(canonical);
    expect(renderRule(r.nft.rule, c.family, r.nft.sets, { interfaces: INTERFACES })).toBe(canonical);
    expect(renderRule(r.nfk.rule, c.family, r.nfk.sets, { interfaces: INTERFACES })).toBe(canonical);
  });
});
