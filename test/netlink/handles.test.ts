/**
 * Handles derived from a few echoed ones (src/netlink/handles.ts): which ops are echoed, what a
 * run counts, and that an echo which does not prove the count derives nothing.
 */
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import type { Family } from '../../src/netlink/expr.js';
import { SET_F } from '../../src/netlink/objects.js';
import { deriveHandles, echoPoints } from '../../src/netlink/handles.js';
import { compileRule } from '../../src/rules/index.js';

const T = { family: 'ip' as Family, table: 't' };
const U = { family: 'ip' as Family, table: 'u' };
const exprs = compileRule('counter', { family: 'ip', table: 't', chain: 'c' }).exprs;

describe('derived handles', () => {
  it('echoes each run\'s first and last new rule; a chain, a named set or a table op ends a run, an anonymous set does not', () => {
    const b = new Batch().add('table', { family: 'ip', name: 't' }).add('chain', { ...T, name: 'c' })
      .add('rule', { ...T, chain: 'c', exprs })                                             // 2
      .add('set', { ...T, name: '__set%d', id: 1, keyType: 7, keyLen: 4, flags: SET_F.ANONYMOUS | SET_F.CONSTANT })
      .add('rule', { ...T, chain: 'c', exprs })                                             // 4
      .add('rule', { ...U, chain: 'x', exprs })                                             // 5: u's own run
      .add('rule', { ...T, chain: 'c', exprs })                                             // 6
      .add('chain', { ...T, name: 'd' })                                                    // ends t's run
      .add('rule', { ...T, chain: 'd', exprs })                                             // 8
      .replace('rule', { ...T, chain: 'c', handle: 40, exprs })                             // 9: takes none
      .delete('rule', { ...T, chain: 'c', handle: 41 })                                     // 10: takes none
      .add('rule', { ...T, chain: 'd', exprs });                                            // 11
    expect(echoPoints(b.ops)).toEqual([2, 5, 6, 8, 11]);
    // t: 2 → 10, the anonymous set 11, 4 → 12, 6 → 13; then 8 → 15 (the chain took 14), 11 → 16.
    const echoed = new Map([[2, 10], [6, 13], [5, 3], [8, 15], [11, 16]]);
    expect([...deriveHandles(b.ops, echoed)!].sort((x, y) => x[0] - y[0])).toEqual([[2, 10], [4, 12], [5, 3], [6, 13], [8, 15], [9, 40], [11, 16]]);
    // One handle more between a run's ends than its ops take: nothing derived.
    expect(deriveHandles(b.ops, new Map([...echoed, [6, 14]]))).toBeUndefined();
    // An end not echoed: nothing derived.
    const cut = new Map(echoed);
    cut.delete(11);
    expect(deriveHandles(b.ops, cut)).toBeUndefined();
  });

  it('a batch without new rules echoes nothing and derives only its replaced rules', () => {
    const b = new Batch().replace('rule', { ...T, chain: 'c', handle: 7, exprs }).delete('rule', { ...T, chain: 'c', handle: 8 });
    expect(echoPoints(b.ops)).toEqual([]);
    expect([...deriveHandles(b.ops, new Map())!]).toEqual([[0, 7]]);
  });
});
