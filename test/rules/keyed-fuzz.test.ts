/**
 * Mutated set and map rules (fast-check, fixed seed, no kernel): every text either compiles to a
 * self-consistent rule (its canonical text compiles to the same rule and text) or is refused with
 * a RuleSyntaxError pointing into the text; nothing else is thrown.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { NftSet } from '../../src/index.js';
import { RuleSyntaxError, compileRule, compiledSetResolver, ruleKey } from '../../src/rules/index.js';
import { applyEdits } from '../helpers/mutate.js';

const S = (name: string, keyType: number, keyLen: number, extra: Partial<NftSet> = {}): [string, NftSet] =>
  [name, { family: 'ip', table: 't', name, flags: 0, keyType, keyLen, ...extra }];
const SETS = new Map<string, NftSet>([
  S('s4', 7, 4), S('svc', (7 * 64 + 12) * 64 + 13, 12),
  S('vm', (7 * 64 + 12) * 64 + 13, 12, { flags: 8, dataType: 0xffffff00, dataLen: 16 }),
  S('dm', 7, 4, { flags: 8, dataType: 7, dataLen: 4 }), S('dyn', 7, 4, { flags: 0x30 }),
  S('mm', 7, 4, { flags: 8, dataType: 19, dataLen: 4 }),
]);

const TEXTS = [
  'ip daddr @s4 accept',
  'ip daddr != @s4 drop',
  'ip daddr . meta l4proto . th dport @svc',
  'ip daddr . meta l4proto . th dport vmap @vm',
  'ip daddr . tcp dport { 10.0.0.1 . 80, 10.0.0.2 . 443 }',
  'ip saddr . ip daddr { 10.0.0.0/8 . 10.1.0.1, 192.168.0.0/16 . 10.2.0.0/16 }',
  'ip daddr . meta l4proto . th dport vmap { 10.0.0.1 . tcp . 80 : goto a, 10.0.0.2 . udp . 53 : jump b }',
  'ip saddr vmap { 10.0.0.0/8 : accept, 11.0.0.0-255.255.255.255 : drop }',
  'iifname vmap { "eth0" : accept, "veth*" : drop }',
  'dnat to ip daddr map @dm',
  'dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080 }',
  'dnat to numgen inc mod 10 map { 0-5 : 192.168.10.100, 6-9 : 192.168.20.200 }',
  'numgen random mod 2 vmap { 0 : goto a, 1 : goto b }',
  'jhash ip saddr . tcp dport mod 4 seed 0xdead offset 3 vmap { 3 : goto a, 4 : goto b }',
  'symhash mod 2 vmap { 0 : accept, 1 : drop }',
  'numgen inc mod 2 != 1 accept',
  'update @dyn { ip saddr timeout 1m30s } accept',
  'add @dyn { ip saddr }',
  'meta mark set ip saddr map @mm',
  'ct mark set jhash ip saddr mod 2',
  'meta mark . ip saddr { 0x00000001 . 10.0.0.0/8 }',
  'tcp dport vmap { 25:accept, 28 :drop }',
  'th sport 1000-2000 th dport 53',
];
const WORDS = ['.', ':', '@s4', '@vm', '@nope', 'vmap', 'map', '{', '}', ',', 'numgen', 'jhash', 'symhash', 'mod', 'offset',
  'seed', 'inc', 'random', 'th', 'dport', 'ip', 'daddr', 'add', 'update', 'timeout', '10s', 'goto', 'a', '0', '1', '0-5',
  'dnat', 'to', 'mark', 'set', 'meta', 'ct', 'accept', '==', '!=', '10.0.0.1', 'fd00::1', '"veth*"'];

function compileOrRefuse(text: string): void {
  try {
    const r = compileRule(text, { family: 'ip', table: 't', chain: 'c', sets: SETS });
    const again = compileRule(r.text, { family: 'ip', table: 't', chain: 'c', sets: SETS });
    const a = compiledSetResolver(r), b = compiledSetResolver(again);
    expect(ruleKey(again, b), `${text} -> ${r.text}`).toBe(ruleKey(r, a));
    expect(again.text).toBe(r.text);
  } catch (e) {
    if (!(e instanceof RuleSyntaxError)) throw new Error(`${text}: ${String((e as Error)?.stack ?? e)}`);
    expect(e.text).toBe(text);
    expect(e.column).toBeGreaterThanOrEqual(1);
    expect(e.column).toBeLessThanOrEqual(text.length + 1);
  }
}

describe('mutated set and map rules', () => {
  it('the texts themselves compile', () => {
    for (const t of TEXTS.filter((x) => !x.startsWith('th sport'))) expect(() => compileRule(t, { family: 'ip', table: 't', chain: 'c', sets: SETS })).not.toThrow();
  });

  it('compile consistently or throw RuleSyntaxError pointing into the text', () => {
    const edit = fc.tuple(fc.constantFrom('insert', 'delete', 'replace', 'swap-word', 'drop-word', 'add-word'),
      fc.nat(), fc.string({ minLength: 1, maxLength: 3 }), fc.constantFrom(...WORDS));
    fc.assert(fc.property(fc.constantFrom(...TEXTS), fc.array(edit, { minLength: 1, maxLength: 3 }), (t0, edits) => {
      const t = applyEdits(t0, edits);
      compileOrRefuse(t);
    }), { numRuns: 5000, seed: 13 });
  });
});
