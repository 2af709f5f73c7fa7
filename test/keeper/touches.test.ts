/**
 * OwnedTouches (src/keeper/touches.ts): the events' proof that no commit since a generation touched
 * an owned table. Pure logic; the kernel test beside it is test/owners/registration.test.ts (a
 * commit elsewhere costs no read, one in the owned table is read and repaired).
 */
import { describe, expect, it } from 'vitest';
import { OwnedTouches } from '../../src/keeper/touches.js';
import type { MonitorBatch, MonitorEvent } from '../../src/netlink/events.js';

const ev = (table: string, type: MonitorEvent['type'] = 'newrule'): MonitorEvent => ({ type, family: 'ip', table, portId: 7 });
const batch = (generation: number, events: MonitorEvent[], extra: Partial<MonitorBatch> = {}): MonitorBatch =>
  ({ overflow: false, truncated: false, generation, since: 1, events, ...extra });

describe('OwnedTouches', () => {
  const fresh = () => {
    const t = new OwnedTouches();
    t.setOwned([{ family: 'ip', name: 'owned' }]);
    return t;
  };

  it('a commit that deleted another table is no touch; one in an owned table is', () => {
    const t = fresh();
    t.note(batch(5, [ev('elsewhere', 'deltable')]));
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 2, delivered: 1 })).toBe(true);
    t.note(batch(7, [ev('elsewhere'), ev('owned')]));
    expect(t.untouched(4, 7, { lastGeneration: 7, runStart: 2, delivered: 2 })).toBe(false);
    // From the touching commit on (the known state learnt it), the proof holds again.
    expect(t.untouched(7, 9, { lastGeneration: 9, runStart: 2, delivered: 2 })).toBe(true);
  });

  it('no proof while the monitor trails the kernel, after a gap in its run, or for a truncated batch', () => {
    const t = fresh();
    expect(t.untouched(4, 6, { lastGeneration: 5, runStart: 2, delivered: 0 })).toBe(false);
    expect(t.lagging(6, { lastGeneration: 5, runStart: 2, delivered: 0 })).toBe(true);
    // A batch handed over but not noted yet.
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 2, delivered: 1 })).toBe(false);
    expect(t.lagging(6, { lastGeneration: 6, runStart: 2, delivered: 1 })).toBe(true);
    // The run of whole commits starts after the known generation (an overflow re-anchored it), or not at all.
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 6, delivered: 0 })).toBe(false);
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 0, delivered: 0 })).toBe(false);
    t.note(batch(8, [ev('elsewhere')], { truncated: true }));
    expect(t.untouched(4, 8, { lastGeneration: 8, runStart: 2, delivered: 1 })).toBe(false);
  });

  it('an overflow report is counted but proves nothing by itself (the run restarts)', () => {
    const t = fresh();
    t.note({ overflow: true, truncated: false, generation: 0, events: [] });
    expect(t.noted).toBe(1);
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 0, delivered: 1 })).toBe(false);
  });

  it('the owned tables follow the config', () => {
    const t = fresh();
    t.setOwned([{ family: 'ip', name: 'other' }]);
    t.note(batch(5, [ev('owned')]));
    expect(t.untouched(4, 5, { lastGeneration: 5, runStart: 2, delivered: 1 })).toBe(true);
    t.note(batch(6, [ev('other')]));
    expect(t.untouched(4, 6, { lastGeneration: 6, runStart: 2, delivered: 2 })).toBe(false);
  });
});
