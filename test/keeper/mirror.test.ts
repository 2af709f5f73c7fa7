/**
 * The event mirror's logic (src/keeper/mirror.ts) on hand-made monitor batches: what it follows,
 * what it plans, and every case in which it gives way to a full observe. The same behaviour on the
 * real kernel is in mirror-kernel.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { Mirror } from '../../src/keeper/mirror.js';
import type { MonitorBatch, MonitorEvent } from '../../src/netlink/monitor.js';
import type { ObservedTable, Rule } from '../../src/netlink/objects.js';
import { planConfig } from './plan-fixtures.js';

const OWN = 77;
const FOREIGN = 99;
const desired = planConfig([0, 1, 2, 3, 4]).tables;

/** Kernel handles 10, 11, 12, 13, 14 for desired rules 0..4, at generation 5. */
function seeded(): Mirror {
  const rules: Rule[] = desired[0]!.chains[0]!.rules.map((r, i) => ({ family: 'ip', table: 't', chain: 'c', handle: 10 + i, exprs: r.compiled.exprs }));
  const observed: ObservedTable = {
    family: 'ip', name: 't', table: { family: 'ip', name: 't', flags: 0 },
    chains: new Map([['c', { family: 'ip', table: 't', name: 'c' }]]), rules: new Map([['c', rules]]), sets: new Map(),
  };
  const m = new Mirror();
  expect(m.seed(desired, [observed], 5)).toBe(true);
  return m;
}

const ev = (type: MonitorEvent['type'], handle: number, portId = FOREIGN, name = 'c'): MonitorEvent =>
  ({ type, family: 'ip', table: 't', name, handle, portId });
const batch = (generation: number, events: MonitorEvent[], extra: Partial<MonitorBatch> = {}): MonitorBatch =>
  ({ overflow: false, truncated: false, generation, since: 1, foreign: events.some((e) => e.portId !== OWN), events, ...extra });

describe('the event mirror', () => {
  it('re-adds a deleted rule after the rule before it, and learns the new handle from our own commit', () => {
    const m = seeded();
    expect(m.apply(batch(6, [ev('delrule', 12)]), OWN)).toBe('changed');
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', chain: 'c', position: 11 }]);
    expect(plan.drift[0]!.detail).toMatch(/rule 3 \(ip saddr 10\.0\.0\.2 accept\) is missing; .* 1 inserted, 0 replaced \(1 ops\)/);
    m.expect(7, plan.expected);
    expect(m.apply(batch(7, [ev('newrule', 15, OWN)]), OWN)).toBe('own');
    expect(m.plan()).toBe('clean');
    expect(m.handlesOf('ip', 't', 'c')).toEqual([10, 11, 15, 13, 14]);
  });

  it('deletes a foreign rule, replaces a rule replaced in place, re-adds neighbours by batch id and the first rule at the head', () => {
    const m = seeded();
    // A replace shows as DELRULE and NEWRULE of the same handle.
    m.apply(batch(6, [ev('newrule', 20), ev('delrule', 13), ev('newrule', 13), ev('delrule', 10), ev('delrule', 11)]), OWN);
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops.map((o) => ({ verb: o.verb, ...('handle' in o ? { handle: o.handle } : {}),
      ...('position' in o ? { position: o.position } : {}), ...('positionId' in o ? { positionId: o.positionId } : {}) }))).toEqual([
      { verb: 'delete', handle: 20 },
      { verb: 'insert' },  // rule 0 at the head
      { verb: 'add', positionId: 1 },  // rule 1 after rule 0, added just before
      { verb: 'replace', handle: 13 },  // rule 3 back in its place
    ]);
    m.expect(7, plan.expected);
    expect(m.apply(batch(7, [ev('delrule', 20, OWN), ev('newrule', 21, OWN), ev('newrule', 22, OWN), ev('delrule', 13, OWN), ev('newrule', 13, OWN)]), OWN)).toBe('own');
    expect(m.handlesOf('ip', 't', 'c')).toEqual([21, 22, 12, 13, 14]);
  });

  it('ignores batches the seed holds, other tables and anonymous sets', () => {
    const m = seeded();
    expect(m.apply(batch(5, [ev('delrule', 12)]), OWN)).toBe('ignored');
    expect(m.apply(batch(6, [{ type: 'deltable', family: 'ip', table: 'other', portId: FOREIGN }, { ...ev('newset', 0), name: '__set3' }, { ...ev('delsetelem', 0), name: '__map0' },
      ev('delrule', 12)]), OWN)).toBe('changed');
    expect(m.valid).toBe(true);
  });

  const giveWay: [string, (m: Mirror) => MonitorBatch][] = [
    ['an overflow (ENOBUFS)', () => ({ overflow: true, truncated: false, generation: 0, events: [] })],
    ['a truncated batch', () => batch(6, [ev('delrule', 12)], { truncated: true })],
    ['a gap in the generations', () => batch(8, [ev('delrule', 12)], { since: 8 })],
    ['a batch without a run', () => batch(6, [ev('delrule', 12)], { since: 0 })],
    ['a chain event', () => batch(6, [{ type: 'delchain', family: 'ip', table: 't', name: 'c', portId: FOREIGN }])],
    ['a table deleted', () => batch(6, [{ type: 'deltable', family: 'ip', table: 't', portId: FOREIGN }])],
    ['a named set', () => batch(6, [{ ...ev('newset', 0), name: 'blocked' }])],
    ['an element of a named map', () => batch(6, [{ ...ev('delsetelem', 0), name: 'svc__map1' }])],
    ['an unknown handle', () => batch(6, [ev('delrule', 99)])],
    ['a rule in a chain it does not hold', () => batch(6, [ev('newrule', 30, FOREIGN, 'other')])],
    ['a commit of our own socket it did not plan', () => batch(6, [ev('newrule', 30, OWN)])],
  ];
  for (const [what, b] of giveWay) {
    it(`gives way to a full observe on ${what}`, () => {
      const m = seeded();
      expect(m.apply(b(m), OWN)).toBe('invalid');
      expect(m.valid).toBe(false);
      expect(m.plan()).toBe('clean');  // nothing held: a caller checks valid/exactAt first
      expect(m.exactAt(6, { lastGeneration: 6, runStart: 1, delivered: m.applied })).toBe(false);
    });
  }

  it('is exact only when the monitor has seen the generation, every batch was applied and the run covers the seed', () => {
    const m = seeded();
    expect(m.exactAt(5, { lastGeneration: 5, runStart: 3, delivered: 0 })).toBe(true);
    expect(m.exactAt(6, { lastGeneration: 5, runStart: 3, delivered: 0 })).toBe(false);  // monitor behind the kernel
    expect(m.exactAt(5, { lastGeneration: 5, runStart: 3, delivered: 1 })).toBe(false);  // a batch not applied yet
    expect(m.exactAt(9, { lastGeneration: 9, runStart: 7, delivered: 0 })).toBe(false);  // commits 6 unseen
    expect(m.exactAt(9, { lastGeneration: 9, runStart: 6, delivered: 0 })).toBe(true);  // 6..9 seen, none ours
  });

  it('leaves a big repair to the full pass', () => {
    const m = seeded();
    m.apply(batch(6, Array.from({ length: 70 }, (_, i) => ev('newrule', 100 + i))), OWN);
    expect(m.valid).toBe(true);
    expect(m.plan()).toBeUndefined();
  });
});
