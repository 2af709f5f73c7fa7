/**
 * followCommit's replay of a run placed as plan.ts places it (its first after the rule before, the
 * rest after the first by its id, last to second): the rules added right after one rule are spliced
 * in at once, in the order the kernel's list has them.
 */
import { describe, expect, it } from 'vitest';
import { Replay } from '../../src/keeper/follow-commit.js';
import type { RuleOp } from '../../src/netlink/ops.js';

const rule = (verb: 'add' | 'insert' | 'delete', o: { position?: number; positionId?: number; id?: number; handle?: number }): RuleOp =>
  ({ verb, object: 'rule', family: 'ip', table: 't', chain: 'c', exprs: [], ...o });

describe('the replay of a run', () => {
  it('lands each rule added right after the same one where the kernel puts it (the last added first)', () => {
    const l = [1, 2, 3, 4];
    const byId = new Map<number, number>();
    const r = new Replay();
    byId.set(7, 10);
    expect(r.apply(l, rule('add', { position: 2, id: 7 }), 10, byId)).toBe(true);
    // The rest after 10 by its id, last to second: 13, 12, 11.
    for (const h of [13, 12, 11]) expect(r.apply(l, rule('add', { positionId: 7 }), h, byId)).toBe(true);
    // Another op on the list (a delete) comes after the run is in.
    expect(r.apply(l, rule('delete', { handle: 4 }), undefined, byId)).toBe(true);
    expect(r.apply(l, rule('insert', {}), 20, byId)).toBe(true);
    r.flush();
    expect(l).toEqual([20, 1, 2, 10, 11, 12, 13, 3]);
    // A place no rule of the list has is refused.
    expect(new Replay().apply([1], rule('add', { position: 9 }), 30, byId)).toBe(false);
  });
});
