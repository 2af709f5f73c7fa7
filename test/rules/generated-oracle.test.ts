/**
 * Random rules (fast-check, fixed seed) through nft and nfkeeper: whatever
 * the compiler accepts, nft must accept too and the kernel must end up with
 * the same expressions and sets; rendering the kernel's rule gives our
 * canonical text, and compiling that text gives the same IR again.
 */
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { RuleSyntaxError, compileRule, renderRule, ruleKey } from '../../src/rules/index.js';
import { ruleArb, type GenRule } from './generate.js';
import { CHAIN_NAME, INTERFACES, comparable, runOracle, setShape, type OracleResult } from './oracle.js';

const SEED = 20261202;
const accepted: GenRule[] = [];
let refused = 0;
for (const g of fc.sample(ruleArb(), { numRuns: 400, seed: SEED })) {
  try {
    compileRule(g.text, { family: g.family, table: 't', chain: 'c', interfaces: INTERFACES });
    accepted.push(g);
  } catch (e) {
    if (!(e instanceof RuleSyntaxError)) throw e;
    refused++;
  }
}
const results: [GenRule, OracleResult][] = [];

beforeAll(async () => {
  for (const family of ['ip', 'ip6', 'inet'] as const) {
    const rules = accepted.filter((g) => g.family === family);
    const out = await runOracle(family, rules.map((g) => ({ text: g.text, chain: CHAIN_NAME[g.chain]! })));
    rules.forEach((g, i) => results.push([g, out[i]!]));
  }
}, 120_000);

describe(`generated rules against nft 1.0.6 (seed ${SEED})`, () => {
  it('generates mostly acceptable rules', () => {
    expect(accepted.length).toBeGreaterThan(300);
    expect(refused).toBeLessThan(100);
  });

  it('nft and nfkeeper leave identical rules and sets in the kernel', () => {
    expect(results.length).toBe(accepted.length);
    for (const [g, r] of results) {
      const ctx = `${g.family}: ${g.text}`;
      expect(comparable(r.nfk.rule.exprs, r.nfk.sets), ctx).toEqual(comparable(r.nft.rule.exprs, r.nft.sets));
      expect(r.nfk.rule.userdata, ctx).toEqual(r.nft.rule.userdata);
      expect(r.nfk.used.map(setShape), ctx).toEqual(r.nft.used.map(setShape));
      expect(ruleKey(r.nft.rule, r.nft.sets), ctx).toBe(ruleKey(r.compiled));
      expect(r.nfk.line, ctx).toBe(r.nft.line);
    }
  });

  it('renders what the kernel holds as the canonical text, which compiles back to the same IR', () => {
    for (const [g, r] of results) {
      const ctx = `${g.family}: ${g.text}`;
      const text = renderRule(r.nft.rule, g.family, r.nft.sets, { interfaces: INTERFACES });
      expect(text, ctx).toBe(r.compiled.text);
      const again = compileRule(text, { family: g.family, table: 't', chain: 'c', interfaces: INTERFACES });
      expect(ruleKey(again), ctx).toBe(ruleKey(r.nft.rule, r.nft.sets));
      expect(again.text, ctx).toBe(text);
    }
  });
});
