/**
 * Following the events (src/keeper/follow-events.ts, through the kernel view) on hand-made monitor
 * batches: what the view follows, what it plans, and every case in which it gives way to a full
 * observe, of one table or of all. The same behaviour on the real kernel is in follow-kernel.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { KernelView } from '../../src/keeper/view.js';
import type { MonitorBatch, MonitorEvent } from '../../src/netlink/events.js';
import type { ObservedTable, Rule, SetElement } from '../../src/netlink/objects.js';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { Batch } from '../../src/netlink/batch.js';
import { type ChainConfig, type TableConfig } from '../../src/model/desired.js';
import { chainDigestsSteps, knownChainDigests } from '../../src/model/desired-digest.js';
import { runNow } from '../../src/base/sliced.js';
import { sameChain } from '../../src/keeper/follow-seed.js';
import { planConfig, ruleText } from './plan-fixtures.js';

const OWN = 77;
const FOREIGN = 99;
const desired = planConfig([0, 1, 2, 3, 4]).tables;

/** Kernel handles 10, 11, 12, 13, 14 for desired rules 0..4, at generation 5. */
/** A view following events whose monitor says `p` (by default: it saw up to 5, from a run starting at 1, and delivered what was followed). */
function following(p?: { lastGeneration: number; runStart: number; delivered: number }): KernelView {
  const v = new KernelView();
  v.followEvents({ progress: () => p ?? { lastGeneration: v.generation, runStart: 1, delivered: 0 } }, () => false);
  return v;
}

function seeded(): KernelView {
  const rules: Rule[] = desired[0]!.chains[0]!.rules.map((r, i) => ({ family: 'ip', table: 't', chain: 'c', handle: 10 + i, exprs: r.compiled.exprs }));
  const observed: ObservedTable = {
    family: 'ip', name: 't', table: { family: 'ip', name: 't', flags: 0 },
    chains: new Map([['c', { family: 'ip', table: 't', name: 'c' }]]), rules: new Map([['c', rules]]), sets: new Map(),
  };
  const m = following();
  expect(m.seed(desired, [observed], 5)).toBe('seeded');
  return m;
}

const ev = (type: MonitorEvent['type'], handle: number, portId = FOREIGN, name = 'c'): MonitorEvent =>
  ({ type, family: 'ip', table: 't', name, handle, portId });
const batch = (generation: number, events: MonitorEvent[], extra: Partial<MonitorBatch> = {}): MonitorBatch =>
  ({ overflow: false, truncated: false, generation, since: 1, foreign: events.some((e) => e.portId !== OWN), events, ...extra });

describe('following the events', () => {
  it('re-adds a deleted rule after the rule before it, and learns the new handle from our own commit', () => {
    const m = seeded();
    expect(m.follow(batch(6, [ev('delrule', 12)]), OWN)).toBe('changed');
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', chain: 'c', position: 11 }]);
    expect(plan.drift[0]!.detail).toMatch(/rule 3 \(ip saddr 10\.0\.0\.2 accept\) is missing; .* 1 inserted, 0 replaced \(1 ops\)/);
    m.expect(7, plan.expected);
    expect(m.follow(batch(7, [ev('newrule', 15, OWN)]), OWN)).toBe('own');
    expect(m.plan()).toBe('clean');
    expect(m.handlesOf('ip', 't', 'c')).toEqual([10, 11, 15, 13, 14]);
  });

  it('deletes a foreign rule, replaces a rule replaced in place, re-adds neighbours by batch id and the first rule at the head', () => {
    const m = seeded();
    // A replace shows as DELRULE and NEWRULE of the same handle.
    m.follow(batch(6, [ev('newrule', 20), ev('delrule', 13), ev('newrule', 13), ev('delrule', 10), ev('delrule', 11)]), OWN);
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops.map((o) => ({ verb: o.verb, ...('handle' in o ? { handle: o.handle } : {}),
      ...('position' in o ? { position: o.position } : {}), ...('positionId' in o ? { positionId: o.positionId } : {}) }))).toEqual([
      { verb: 'delete', handle: 20 },
      { verb: 'insert' },  // rule 0 at the head
      { verb: 'replace', handle: 13 },  // rule 3 back in its place
      { verb: 'add', positionId: 1 },  // rule 1 after rule 0 (the rest of a run after its first: plan.ts placeEdit)
    ]);
    m.expect(7, plan.expected);
    expect(m.follow(batch(7, [ev('delrule', 20, OWN), ev('newrule', 21, OWN), ev('delrule', 13, OWN), ev('newrule', 13, OWN), ev('newrule', 22, OWN)]), OWN)).toBe('own');
    expect(m.handlesOf('ip', 't', 'c')).toEqual([21, 22, 12, 13, 14]);
  });

  it('learns our own commit from its echoed handles, by op index, and ignores the commit\'s events after that', () => {
    const m = seeded();
    // A replace, a foreign rule deleted, and two neighbours re-added (the second after the first, by batch id).
    m.follow(batch(6, [ev('newrule', 20), ev('delrule', 13), ev('newrule', 13), ev('delrule', 10), ev('delrule', 11)]), OWN);
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    m.expect(7, plan.expected);
    expect(m.exactAt(6, { lastGeneration: 6, runStart: 1, delivered: 1 })).toBe(false);  // our commit is pending
    // The ops: delete 20, insert rule 0, replace 13, add rule 1: the kernel echoed three new rules.
    expect(m.followEcho(7, new Map([[1, 21], [2, 13], [3, 22]]))).toBe(true);
    expect(m.generation).toBe(7);
    expect(m.handlesOf('ip', 't', 'c')).toEqual([21, 22, 12, 13, 14]);
    expect(m.plan()).toBe('clean');
    // The commit's own batch, if it is delivered after all, is known already.
    expect(m.follow(batch(7, [ev('delrule', 20, OWN), ev('newrule', 21, OWN), ev('delrule', 13, OWN), ev('newrule', 13, OWN), ev('newrule', 22, OWN)]), OWN)).toBe('ignored');
    expect(m.exactAt(7, { lastGeneration: 7, runStart: 1, delivered: 2 })).toBe(true);
    // A foreign deletion of a rule whose handle came from the echo is followed.
    expect(m.follow(batch(8, [ev('delrule', 22)]), OWN)).toBe('changed');
    const again = m.plan();
    if (again === 'clean' || !again) throw new Error('no plan');
    expect(again.batch.ops).toMatchObject([{ verb: 'add', position: 21 }]);
  });

  it('leaves our own commit to its events when the echo does not cover it, or the events came first', () => {
    const m = seeded();
    m.follow(batch(6, [ev('delrule', 12), ev('delrule', 13)]), OWN);
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    m.expect(7, plan.expected);
    // One of the two new rules was not echoed (a kernel that does not echo, lost acks): nothing changes.
    expect(m.followEcho(7, new Map([[0, 15]]))).toBe(false);
    expect(m.followEcho(7, new Map())).toBe(false);
    expect(m.generation).toBe(6);
    expect(m.follow(batch(7, [ev('newrule', 15, OWN), ev('newrule', 16, OWN)]), OWN)).toBe('own');
    expect(m.handlesOf('ip', 't', 'c')).toEqual([10, 11, 15, 16, 14]);
    // The events came first (a commit that ran on the worker thread): the echo is not taken again.
    expect(m.followEcho(7, new Map([[0, 15], [1, 16]]))).toBe(false);
    expect(m.valid).toBe(true);
    // A commit the followed part did not plan is not learnt.
    expect(m.followEcho(8, new Map([[0, 30]]))).toBe(false);
  });

  it('ignores batches the seed holds, other tables and anonymous sets', () => {
    const m = seeded();
    expect(m.follow(batch(5, [ev('delrule', 12)]), OWN)).toBe('ignored');
    expect(m.follow(batch(6, [{ type: 'deltable', family: 'ip', table: 'other', portId: FOREIGN }, { ...ev('newset', 0), name: '__set3' }, { ...ev('delsetelem', 0), name: '__map0' },
      ev('delrule', 12)]), OWN)).toBe('changed');
    expect(m.valid).toBe(true);
  });

  // What cannot be told to a table loses them all; an event the view cannot follow, its table alone.
  const giveWay: [string, () => MonitorBatch, 'all' | 'table'][] = [
    ['an overflow (ENOBUFS)', () => ({ overflow: true, truncated: false, generation: 0, events: [] }), 'all'],
    ['a truncated batch', () => batch(6, [ev('delrule', 12)], { truncated: true }), 'all'],
    ['a gap in the generations', () => batch(8, [ev('delrule', 12)], { since: 8 }), 'all'],
    ['a batch without a run', () => batch(6, [ev('delrule', 12)], { since: 0 }), 'all'],
    ['a chain event', () => batch(6, [{ type: 'delchain', family: 'ip', table: 't', name: 'c', portId: FOREIGN }]), 'table'],
    ['a table deleted', () => batch(6, [{ type: 'deltable', family: 'ip', table: 't', portId: FOREIGN }]), 'table'],
    ['a named set', () => batch(6, [{ ...ev('newset', 0), name: 'blocked' }]), 'table'],
    ['an element of a named map', () => batch(6, [{ ...ev('delsetelem', 0), name: 'svc__map1' }]), 'table'],
    ['an unknown handle', () => batch(6, [ev('delrule', 99)]), 'table'],
    ['a rule in a chain it does not hold', () => batch(6, [ev('newrule', 30, FOREIGN, 'other')]), 'table'],
    ['a commit of our own socket it did not plan (a full pass\'s)', () => batch(6, [ev('newrule', 30, OWN)]), 'table'],
  ];
  for (const [what, b, scope] of giveWay) {
    it(`gives way to a full observe of ${scope === 'all' ? 'every table' : 'the table'} on ${what}`, () => {
      const m = seeded();
      expect(m.follow(b(), OWN)).toBe(scope === 'all' ? 'invalid' : b().foreign === false ? 'own' : 'changed');
      expect(m.valid).toBe(false);
      expect(m.following).toBe(scope === 'table');
      expect(m.followsTable('ip', 't')).toBe(false);
      expect(m.plan()).toBeUndefined();  // nothing to plan from: the full pass reads
      expect(m.currency()).toMatchObject({ exact: false });
      if (scope === 'all') expect(m.exactAt(6, { lastGeneration: 6, runStart: 1, delivered: 1 })).toBe(false);
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
    m.follow(batch(6, Array.from({ length: 70 }, (_, i) => ev('newrule', 100 + i))), OWN);
    expect(m.valid).toBe(true);
    expect(m.plan()).toBeUndefined();
  });
});

describe('following the events of set elements', () => {
  const text = (vm: string[], extra = '') => `table ip t {
\tchain a {
\t}
\tmap vm {
\t\ttype ipv4_addr : verdict
\t\telements = { ${vm.join(', ')} }
\t}
\tset ts {
\t\ttype ipv4_addr
\t\tflags timeout
\t\telements = { 10.9.9.9 timeout 1h }
\t}
\tchain c {
\t\tip daddr vmap @vm${extra}
\t}
}
`;
  const config = (vm: string[], extra = '') => parseNftConfig(text(vm, extra), 't.nft').tables;
  const VM = ['10.0.0.1 : goto a', '10.0.0.2 : goto a', '10.0.0.3 : accept'];

  function seededSets(): { m: KernelView; desired: TableConfig[] } {
    const desired = config(VM);
    const t = desired[0]!;
    const observed: ObservedTable = {
      family: 'ip', name: 't', table: { family: 'ip', name: 't', flags: 0 },
      chains: new Map(t.chains.map((c) => [c.name, { family: 'ip', table: 't', name: c.name }])),
      rules: new Map(t.chains.map((c) => [c.name, c.rules.map((r, i) => ({ family: 'ip', table: 't', chain: c.name, handle: 10 + i, exprs: r.compiled.exprs }))])),
      sets: new Map(t.sets!.map((s) => [s.name, { set: s.set, elements: s.elements }])),
    };
    const m = following();
    expect(m.seed(desired, [observed], 5)).toBe('seeded');
    return { m, desired };
  }
  const el = (type: 'newsetelem' | 'delsetelem', elements: SetElement[], portId = FOREIGN, name = 'vm'): MonitorEvent =>
    ({ type, family: 'ip', table: 't', name, portId, elements });
  const elementOps = (p: ReturnType<KernelView['plan']>) => {
    if (p === 'clean' || !p) throw new Error(`no plan: ${p}`);
    return p.batch.ops.map((o) => o.object === 'element' ? `${o.verb} ${o.set} ${o.elements.map((e) => `${e.key}${e.verdict ? `:${e.verdict}${e.chain ? ` ${e.chain}` : ''}` : ''}`).join(',')}` : `${o.verb} ${o.object}`);
  };

  it('re-adds a deleted element, deletes a foreign one, puts back changed data, and learns its own commit', () => {
    const { m } = seededSets();
    expect(m.follow(batch(6, [
      el('delsetelem', [{ key: '0a000001', flags: 0, verdict: 'goto', chain: 'a' }]),
      el('newsetelem', [{ key: '0a0000ff', flags: 0, verdict: 'drop' }]),
      el('delsetelem', [{ key: '0a000003', flags: 0, verdict: 'accept' }]),
      el('newsetelem', [{ key: '0a000003', flags: 0, verdict: 'drop' }]),
    ]), OWN)).toBe('changed');
    expect(m.elementsDiffering('ip', 't', 'vm')).toBe(3);
    const plan = m.plan();
    expect(elementOps(plan)).toEqual(['delete vm 0a0000ff,0a000003', 'add vm 0a000001:goto a,0a000003:accept']);
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.drift[0]!.detail).toMatch(/map vm: 2 kernel elements to add, 2 to delete \(1 changed\); repair from events/);
    m.expect(7, plan.expected);
    expect(m.follow(batch(7, [
      el('delsetelem', [{ key: '0a0000ff', flags: 0, verdict: 'drop' }], OWN), el('delsetelem', [{ key: '0a000003', flags: 0, verdict: 'drop' }], OWN),
      el('newsetelem', [{ key: '0a000001', flags: 0, verdict: 'goto', chain: 'a' }], OWN), el('newsetelem', [{ key: '0a000003', flags: 0, verdict: 'accept' }], OWN),
    ]), OWN)).toBe('own');
    expect(m.plan()).toBe('clean');
  });

  const giveWay: [string, MonitorBatch][] = [
    ['a gap in the generations', batch(8, [el('delsetelem', [{ key: '0a000001', flags: 0, verdict: 'goto', chain: 'a' }])], { since: 8 })],
    ['an element it does not know deleted', batch(6, [el('delsetelem', [{ key: '0a0000aa', flags: 0, verdict: 'drop' }])])],
    ['an element it holds added again', batch(6, [el('newsetelem', [{ key: '0a000002', flags: 0, verdict: 'drop' }])])],
    ['an element event without its elements', batch(6, [{ ...el('delsetelem', []), elementsMalformed: true }])],
    ['an element of a set it does not follow (timeouts)', batch(6, [el('delsetelem', [{ key: '0a090909', flags: 0, timeout: 3_600_000 }], FOREIGN, 'ts')])],
    ['the map deleted', batch(6, [{ type: 'delset', family: 'ip', table: 't', name: 'vm', portId: FOREIGN }])],
  ];
  for (const [what, b] of giveWay) {
    it(`gives way to a full observe on ${what}`, () => {
      const { m } = seededSets();
      m.follow(b, OWN);
      expect(m.valid).toBe(false);
      expect(m.plan()).toBeUndefined();
    });
  }

  it('a desired change of elements only is retargeted: the kernel stays as it was, the plan is the element diff', () => {
    const { m } = seededSets();
    m.follow(batch(6, [el('delsetelem', [{ key: '0a000002', flags: 0, verdict: 'goto', chain: 'a' }])]), OWN);
    m.desiredChanged(config(['10.0.0.1 : goto a', '10.0.0.3 : drop', '10.0.0.4 : goto a']));
    expect(m.valid).toBe(true);
    // 10.0.0.2 is gone from the kernel and the config; 10.0.0.3 changes; 10.0.0.4 is new.
    expect(elementOps(m.plan())).toEqual(['delete vm 0a000003', 'add vm 0a000003:drop,0a000004:goto a']);
    expect(m.valid).toBe(true);
  });

  it('refuses to retarget anything but elements', () => {
    const retargeted = (desired: TableConfig[]) => {
      const { m } = seededSets();
      m.desiredChanged(desired);
      return m.valid;
    };
    expect(retargeted(config(VM, ' counter'))).toBe(false);  // a rule changed
    const timedChanged = parseNftConfig(text(VM).replace('10.9.9.9 timeout 1h', '10.9.9.8 timeout 1h'), 't.nft').tables;
    expect(retargeted(timedChanged)).toBe(false);  // a set it does not follow changed
    expect(retargeted(config(VM))).toBe(true);  // the same config, compiled again
  });
});

describe('following the events, per owned table', () => {
  const table = (name: string) => `
  - family: ip
    name: ${name}
    chains:
      - name: c
        rules:
${[0, 1, 2].map((k) => `          - ${ruleText(k)}`).join('\n')}`;
  const two = parseConfig(`tables:${table('a')}${table('b')}`).tables;
  /** Tables a and b, chain c holding handles 10, 11, 12 in each, at generation 5. */
  function seededTwo(): KernelView {
    const observed: ObservedTable[] = two.map((t) => ({
      family: 'ip', name: t.name, table: { family: 'ip', name: t.name, flags: 0 },
      chains: new Map([['c', { family: 'ip', table: t.name, name: 'c' }]]),
      rules: new Map([['c', t.chains[0]!.rules.map((r, i) => ({ family: 'ip', table: t.name, chain: 'c', handle: 10 + i, exprs: r.compiled.exprs }))]]),
      sets: new Map(),
    }));
    const m = following();
    expect(m.seed(two, observed, 5)).toBe('seeded');
    return m;
  }
  const on = (table: string, type: MonitorEvent['type'], handle: number, portId = FOREIGN): MonitorEvent => ({ type, family: 'ip', table, name: 'c', handle, portId });

  it('an event it cannot follow loses its table alone: the same commit\'s deletion in the other table is followed, planned and learnt', () => {
    const m = seededTwo();
    expect(m.follow(batch(6, [{ type: 'newchain', family: 'ip', table: 'a', name: 'x', portId: FOREIGN }, on('b', 'delrule', 11)]), OWN)).toBe('changed');
    expect(m.following).toBe(true);
    expect(m.valid).toBe(false);
    expect(m.followsTable('ip', 'a')).toBe(false);
    expect(m.followsTable('ip', 'b')).toBe(true);
    expect(m.currency()).toEqual({ exact: false, generation: 6, reason: 'newchain ip a x (the full pass plans that)' });
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', table: 'b', chain: 'c', position: 10 }]);
    m.expect(7, plan.expected);
    expect(m.follow(batch(7, [on('b', 'newrule', 20, OWN)]), OWN)).toBe('own');
    expect(m.handlesOf('ip', 'b', 'c')).toEqual([10, 20, 12]);
    // Table b as desired, table a unknown: nothing the events can plan, a full pass reads table a.
    expect(m.plan()).toBeUndefined();
    // Later events in table a find it let go; table b's are followed on.
    expect(m.follow(batch(8, [on('a', 'delrule', 10), on('b', 'delrule', 12)]), OWN)).toBe('changed');
    const again = m.plan();
    if (again === 'clean' || !again) throw new Error('no plan');
    // The chain's last rule: appended (plan.ts, emitEdit's tail), not placed after rule 20.
    expect(again.batch.ops.map((o) => [o.verb, (o as { table?: string }).table, (o as { position?: number }).position])).toEqual([['add', 'b', undefined]]);
    // Not every table followed: nothing for the monitor's armed repairs.
    expect(m.clean(1000)).toBe(false);
  });

  it('a full pass\'s commit lets go of the tables its batch touched, and its events of no other', () => {
    const m = seededTwo();
    m.committed(new Batch().delete('chain', { family: 'ip', table: 'a', name: 'x' }));
    expect(m.followsTable('ip', 'a')).toBe(false);
    expect(m.followsTable('ip', 'b')).toBe(true);
    expect(m.follow(batch(6, [{ type: 'delchain', family: 'ip', table: 'a', name: 'x', portId: OWN }]), OWN)).toBe('own');
    expect(m.generation).toBe(6);
    expect(m.follow(batch(7, [on('b', 'delrule', 10)]), OWN)).toBe('changed');
    const plan = m.plan();
    if (plan === 'clean' || !plan) throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'insert', table: 'b' }]);
  });

  it('what cannot be told to a table loses both', () => {
    for (const b of [batch(6, [on('b', 'delrule', 11)], { truncated: true }), batch(7, [on('b', 'delrule', 11)], { since: 7 })]) {
      const m = seededTwo();
      expect(m.follow(b, OWN)).toBe('invalid');
      expect(m.following).toBe(false);
      expect([m.followsTable('ip', 'a'), m.followsTable('ip', 'b')]).toEqual([false, false]);
    }
  });
});

describe('the same chain (sameChain, which the retarget of a reload asks)', () => {
  const chainOf = (ks: number[]) => planConfig(ks).tables[0]!.chains[0]!;
  /** `c` with every rule's compiled form unreadable: a comparison that keys a rule throws. */
  const unreadable = (c: ChainConfig): ChainConfig => ({
    ...c, rules: c.rules.map((r) => Object.defineProperty({ text: r.text }, 'compiled', { get: () => { throw new Error('a rule was keyed'); } }) as typeof r),
  });

  it('of two chains whose rule digests are known and equal (the compile cache gave them): true without keying a rule', () => {
    const a = chainOf([0, 1, 2, 3]);
    const digests = runNow(chainDigestsSteps([{ family: 'ip', name: 't', chains: [a] } as TableConfig]));
    const b = unreadable(chainOf([0, 1, 2, 3]));
    expect(() => sameChain(a, b)).toThrow('a rule was keyed');
    knownChainDigests([{ family: 'ip', name: 't', chains: [b] } as TableConfig], digests);
    expect(sameChain(a, b)).toBe(true);
  });

  it('digests known and different, or one not known: the rules keyed, as before', () => {
    const a = chainOf([0, 1, 2, 3]);
    const changed = chainOf([0, 1, 9, 3]);
    const same = chainOf([0, 1, 2, 3]);
    runNow(chainDigestsSteps([{ family: 'ip', name: 't', chains: [a, changed] } as TableConfig]));
    expect(sameChain(a, changed)).toBe(false);
    expect(sameChain(a, same)).toBe(true);
    const other = chainOf([0, 1, 2, 3]);
    knownChainDigests([{ family: 'ip', name: 't', chains: [other] } as TableConfig], [['not the digest']]);
    expect(sameChain(a, other)).toBe(true);
  });
});
