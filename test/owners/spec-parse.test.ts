/**
 * plainOwnerSpec against OWNER_SPEC (pure logic): the plain check accepts a body only where the
 * zod schema accepts it, with the same output, key order included; everything else goes to zod,
 * so compileOwner's refusals keep zod's message and path. Bodies are random JSON shaped like
 * owner specs with mistakes mixed in (wrong types, unknown keys, empty, over-long or too many
 * rules, bad chain names, missing fields, '__proto__' keys, sparse arrays), and near the limits.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LIMITS, OWNER_SPEC, OwnerSpecError, compileOwner, plainOwnerSpec } from '../../src/owners/spec.js';
import { parseConfig } from '../../src/config/config.js';
import { ownersYaml } from './fixtures.js';

const junk = fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.constant(''), fc.string({ maxLength: 4 }), fc.constant([]), fc.constant({}));
const ruleText = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('masquerade', 'ip daddr 10.0.0.1 return', 'jump c', 'counter') },
  { weight: 1, arbitrary: fc.constant('') },
  { weight: 1, arbitrary: fc.constantFrom('x'.repeat(LIMITS.ruleText), 'x'.repeat(LIMITS.ruleText + 1)) },
  { weight: 1, arbitrary: junk },
);
const rules = fc.oneof(
  { weight: 8, arbitrary: fc.array(ruleText, { maxLength: 4 }) },
  { weight: 1, arbitrary: fc.constantFrom(LIMITS.rulesPerChain, LIMITS.rulesPerChain + 1).map((n) => Array.from({ length: n }, () => 'counter')) },
  { weight: 1, arbitrary: fc.constant(Object.assign(new Array(2), { 1: 'counter' })) },  // a hole
  { weight: 1, arbitrary: junk },
);
const chainName = fc.oneof(fc.constantFrom('c', 'masq', 'a.b-c_d', 'x'.repeat(64)), fc.constantFrom('', '-c', 'a/b', 'x'.repeat(65), 'a b'), junk);
const withExtra = <T extends object>(o: fc.Arbitrary<T>) => fc.tuple(o, fc.option(fc.constantFrom('type', 'hook', 'extra', 'name', 'rules'), { nil: undefined }), junk)
  .map(([v, k, x]) => (k === undefined ? v : { ...v, [k]: x }));
const chain = fc.oneof({ weight: 8, arbitrary: withExtra(fc.record({ name: chainName, rules }, { requiredKeys: ['name'] })) }, { weight: 1, arbitrary: junk });
const jumps = fc.oneof(
  { weight: 8, arbitrary: fc.dictionary(fc.constantFrom('postrouting', 'prerouting', 'output', '0', '__proto__', 'constructor'), rules, { maxKeys: 3 }) },
  { weight: 1, arbitrary: fc.constant(JSON.parse('{"__proto__": ["counter"]}')) },
  { weight: 1, arbitrary: junk },
);
const body = fc.oneof(
  { weight: 10, arbitrary: withExtra(fc.record({ chains: fc.oneof(fc.array(chain, { maxLength: 3 }), junk), jumps }, { requiredKeys: [] })) },
  { weight: 1, arbitrary: fc.constant({ chains: Array.from({ length: LIMITS.chains + 1 }, (_, i) => ({ name: `c${i}` })) }) },
  { weight: 1, arbitrary: fc.constant({ chains: Array.from({ length: LIMITS.chains }, (_, i) => ({ name: `c${i}` })) }) },
  { weight: 1, arbitrary: junk },
);

describe('the owner spec checked without zod', () => {
  it('accepts only what OWNER_SPEC accepts, giving its output; leaves the rest to it', () => {
    let plain = 0;
    let refused = 0;
    fc.assert(fc.property(body, (b) => {
      // Through JSON as a request body comes, and as built (holes and all), both.
      for (const x of [b, JSON.parse(JSON.stringify(b) ?? 'null')]) {
        const z = OWNER_SPEC.safeParse(x);
        const p = plainOwnerSpec(x);
        if (p !== undefined) {
          plain++;
          expect(z.success).toBe(true);
          expect(JSON.stringify(p)).toBe(JSON.stringify(z.data));
          expect(p).toEqual(z.data);
        } else if (!z.success) {
          refused++;
        }
      }
    }), { numRuns: 3000, seed: 14 });
    // Both sides were exercised.
    expect(plain).toBeGreaterThan(500);
    expect(refused).toBeGreaterThan(500);
  });

  it('compileOwner refuses as before: zod\'s message at zod\'s path', () => {
    const config = parseConfig(ownersYaml('/tmp/nfk-spec'), '/tmp/nfk-spec/config.yaml');
    const refusal = (b: unknown) => {
      try {
        compileOwner('a', b, config.owners!, config.tables[0]!);
      } catch (e) {
        if (e instanceof OwnerSpecError) return `${e.path}: ${e.reason}`;
        throw e;
      }
      return 'accepted';
    };
    expect(refusal({ chains: [{ name: 'c', rules: [''] }] })).toBe('chains[0].rules[0]: a rule cannot be empty');
    expect(refusal({ chains: [{ name: 'c', type: 'nat' }] })).toMatch(/^chains\[0\]: .*type/);
    expect(refusal({ chains: [{ name: 'a/b' }] })).toMatch(/^chains\[0\]\.name: a chain name is 1-64 characters/);
    expect(refusal({ jumps: { postrouting: 'jump c' } })).toMatch(/^jumps\.postrouting: /);
    expect(refusal({ jumps: [] })).toBe('jumps: Invalid input: expected record, received array');
    expect(refusal([])).toMatch(/^body: /);
    expect(refusal({ chains: [{ name: 'c', rules: ['counter'] }], jumps: { postrouting: ['jump c'] } })).toBe('accepted');
  });
});
