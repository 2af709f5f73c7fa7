/**
 * Timed elements in the element diff (pure logic; the same on the real kernel, through a reload, is
 * in test/keeper/follow-elements.test.ts): a timed element that is gone counts as expired only when
 * it was seen installed (the daemon's record of timed elements seen), or always without a record (one-shot callers).
 */
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import { diffElements } from '../../src/model/elements.js';
import { noteTimedAdded, noteTimedSeen, type TimedSeen } from '../../src/keeper/timed-elements.js';
import { Batch } from '../../src/netlink/batch.js';
import type { ObservedTable } from '../../src/netlink/objects.js';

const tables = (els: string) => parseNftConfig(`table ip t {\n\tset ts {\n\t\ttype ipv4_addr\n\t\tflags timeout\n\t\telements = { ${els} }\n\t}\n}\n`, 't.nft').tables;

describe('timed elements in the element diff', () => {
  const [t] = tables('10.0.0.1 timeout 1h, 10.0.0.2 timeout 1h, 10.0.0.3');
  const s = t!.sets![0]!;
  const have = [{ key: '0a000001', flags: 0, timeout: 3_600_000, expiration: 1000 }];

  it('without a record every missing timed element is expired; the untimed one is added', () => {
    const d = diffElements(s.elements, have, s.set);
    expect(d.expired).toBe(1);
    expect(d.add.map((e) => e.key)).toEqual(['0a000003']);
  });

  it('with a record, a timed element never seen installed is added, one seen is expired', () => {
    expect(diffElements(s.elements, have, s.set, new Set()).add.map((e) => e.key)).toEqual(['0a000002', '0a000003']);
    const d = diffElements(s.elements, have, s.set, new Set(['0a000002']));
    expect(d.add.map((e) => e.key)).toEqual(['0a000003']);
    expect(d.expired).toBe(1);
  });

  it('noteTimedSeen notes what an observation found and forgets what is no longer desired; noteTimedAdded notes what a batch added', () => {
    const timedSeen: TimedSeen = new Map();
    const observed = (keys: string[]): ObservedTable[] => [{ family: 'ip', name: 't', chains: new Map(), rules: new Map(),
      sets: new Map([['ts', { set: s.set, elements: keys.map((key) => ({ key, flags: 0 })) }]]) }];
    noteTimedSeen(timedSeen, [t!], observed(['0a000001']));
    expect([...timedSeen.get('ip t ts')!]).toEqual(['0a000001']);
    noteTimedAdded(timedSeen, new Batch().add('element', { family: 'ip', table: 't', set: 'ts', elements: [s.elements[1]!, s.elements[2]!] }));
    expect([...timedSeen.get('ip t ts')!].sort()).toEqual(['0a000001', '0a000002']);  // the untimed one is not noted
    // 10.0.0.2 dropped from the config: forgotten, so given again it is installed again.
    noteTimedSeen(timedSeen, tables('10.0.0.1 timeout 1h'), observed([]));
    expect([...timedSeen.get('ip t ts')!]).toEqual(['0a000001']);
    noteTimedSeen(timedSeen, tables('10.0.0.3'), observed([]));
    expect(timedSeen.has('ip t ts')).toBe(false);
  });
});
