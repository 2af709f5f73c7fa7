/**
 * The kernel view's currency (src/keeper/view.ts) against the fake kernel: what makes it exact at a
 * generation (an observation, the echo of our own commit, a followed event, a commit elsewhere) and
 * what makes it unknown (an overflow, a gap, a truncated batch, an event it cannot follow). The
 * same paths on the kernel, through the keeper, are in follow-kernel.test.ts and
 * known-sets.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { KeeperMetrics } from '../../src/base/metrics.js';
import { Batch } from '../../src/netlink/batch.js';
import type { MonitorBatch, MonitorEvent } from '../../src/netlink/events.js';
import { Reconciler, type PassInput } from '../../src/keeper/reconciler.js';
import { KernelView } from '../../src/keeper/view.js';
import { observeTable } from '../../src/keeper/observe.js';
import { FakeKernel, type FakeConn, type FakeWatch } from '../helpers/fake-kernel.js';
import { planConfig, readPlanChain, rng, ruleText } from './plan-fixtures.js';
import { parseConfig } from '../../src/config/config.js';
import type { TableConfig } from '../../src/model/desired.js';
import { TABLE_F, type Rule } from '../../src/netlink/objects.js';
import type { OwnedTable } from '../../src/keeper/owned-table.js';

const OWNED = [{ family: 'ip' as const, name: 't' }];
const C = { family: 'ip' as const, table: 't', chain: 'c' };

/** Turns of the event loop until `ok` holds (the fake's watchers read on immediates). */
async function turns(ok: () => boolean): Promise<void> {
  for (let i = 0; !ok(); i++) {
    if (i > 10_000) throw new Error('timed out');
    await new Promise((r) => setImmediate(r));
  }
}

interface World {
  kernel: FakeKernel;
  conn: FakeConn;
  other: FakeConn;
  watch: FakeWatch;
  view: KernelView;
  reconciler: Reconciler;
  /** Reads the view's proofs and the observations made (the dumps metric). */
  reads: { n: number };
  /** While `held` is set, the batches the monitor delivers wait there instead of reaching the view (a view trailing the monitor). */
  gate: { held?: MonitorBatch[] };
  /** The monitor has read up to the kernel's generation and handed everything over. */
  settled(): Promise<void>;
  pass(ks: readonly number[]): ReturnType<Reconciler['once']>;
}

/** A keeper's parts around one view: a connection, a watcher feeding the view, a reconciler planning from it. */
function world(owned: { family: 'ip'; name: string }[] = OWNED): World {
  const kernel = new FakeKernel();
  const conn = kernel.connect();
  const other = kernel.connect();
  const view = new KernelView();
  const gate: World['gate'] = {};
  const watch = kernel.watch({ tables: owned, ignorePorts: [conn.portId], ownCommits: true,
    onBatch: (b) => gate.held ? gate.held.push(b) : view.follow(b, conn.portId) });
  view.setOwned(owned);
  view.followEvents({ progress: () => watch.progress() }, () => false);
  watch.anchor(conn.generation(), 0);
  const reads = { n: 0 };
  const metrics = { dumps: { inc: () => reads.n++ }, generationRetries: { inc: () => undefined } } as unknown as KeeperMetrics;
  const reconciler = new Reconciler(conn, { attempts: 5, metrics, view });
  const input = (ks: readonly number[]): PassInput => ({ tables: planConfig(ks).tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
  return {
    kernel, conn, other, watch, view, reconciler, reads, gate,
    settled: () => turns(() => watch.progress().lastGeneration >= kernel.generation),
    pass: (ks) => reconciler.once(input(ks)),
  };
}

/** Installed by another writer, read by a pass, the followed part seeded from that observation: exact at the returned generation. */
async function installed(w: World, ks = [0, 1, 2]): Promise<number> {
  await new Reconciler(w.other, { attempts: 5 }).once({ tables: planConfig(ks).tables });
  await w.settled();
  const r = await w.pass(ks);
  expect(r).toMatchObject({ status: 'in-sync', ops: 0 });
  expect(w.view.seed(planConfig(ks).tables, r.first.observed, r.generation)).toBe('seeded');
  return r.generation;
}

const handles = async (w: World) => (await w.conn.listRules(C)).map((r) => r.handle!);

/** Installed by another writer as `tables` (the same objects the view is then seeded for), read by a pass planned from the view, the followed part seeded from it. */
async function seededWith(w: World, tables: TableConfig[]): ReturnType<Reconciler['once']> {
  await new Reconciler(w.other, { attempts: 5 }).once({ tables });
  await w.settled();
  const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
  expect(r).toMatchObject({ status: 'in-sync' });
  expect(w.view.seed(tables, r.first.observed, r.generation)).toBe('seeded');
  return r;
}

/** The event repair of what the view followed at `g`, committed with its echo, which the view follows: its plan. */
async function repairFromEvents(w: World, g: number): Promise<NonNullable<Exclude<ReturnType<KernelView['plan']>, 'clean'>>> {
  const plan = w.view.plan();
  if (!plan || plan === 'clean') throw new Error('no plan');
  w.view.expect(g + 1, plan.expected);
  const echoed = await w.conn.commit(plan.batch, { expectGeneration: g, echo: true });
  expect(w.view.followEcho(g + 1, echoed!.handles!)).toBe(true);
  return plan;
}

/** A foreign deletion of chain c's second rule at `g`, repaired from the events (reading nothing), and the kernel as desired. */
async function deletionRepairedFromEvents(w: World, tables: Parameters<Reconciler['once']>[0]['tables'], g: number): Promise<void> {
  const [, second] = await handles(w);
  await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
  await w.settled();
  await repairFromEvents(w, g + 1);
  expect(w.view.handlesOf('ip', 't', 'c')).toEqual(await handles(w));
  expect(await new Reconciler(w.other, { attempts: 1 }).once({ tables, readOnly: true })).toMatchObject({ status: 'in-sync' });
}

/** The followed part's array of chain `chain` of table ip t (the view's own; read here to see it is one array with the rules'). */
const followedRules = (v: KernelView, chain: string): readonly Rule[] =>
  (v as unknown as { find(f: string, n: string): OwnedTable | undefined }).find('ip', 't')!.followed!.chains.get(chain)!.rules;

describe('the kernel view', () => {
  it('an observation makes it exact at the generation it read: the rules and the followed handles alike', async () => {
    const w = world();
    const g = await installed(w);
    expect(w.kernel.generation).toBe(g);
    expect(w.view.rulesExactAt(g, planConfig([0, 1, 2]).tables)).toBe(true);
    expect(w.view.currency()).toEqual({ exact: true, generation: g });
    expect(w.view.exactAt(g)).toBe(true);
    expect(w.view.handlesOf('ip', 't', 'c')).toEqual(await handles(w));
    // At that generation an observation plans from it, reading nothing.
    const before = w.reads.n;
    expect(await w.view.heldAt(w.conn, g, planConfig([0, 1, 2]).tables, false, () => w.reads.n++)).toMatchObject({ read: false });
    expect(w.reads.n).toBe(before);
  });

  it('the echo of our full pass\'s commit makes the rules exact at its generation and seeds the tables it let go from them, in their arrays: its own events are in the seed', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const g = (await seededWith(w, tables)).generation;
    // A foreign change the events cannot follow (a chain added): the table is let go, and a full pass repairs it.
    await w.other.commit(new Batch().add('chain', { family: 'ip', table: 't', name: 'x' }));
    await w.settled();
    expect(w.view.followsTable('ip', 't')).toBe(false);
    const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
    expect(r).toMatchObject({ status: 'repaired', trusted: true, generation: g + 2 });
    expect(w.view.rulesExactAt(g + 2, tables)).toBe(true);
    expect(w.view.currency()).toEqual({ exact: true, generation: g + 2 });
    expect(followedRules(w.view, 'c')).toBe(w.view.rulesOf(tables[0]!)!.observed.rules.get('c'));
    await w.settled();
    expect(w.view.exactAt(g + 2)).toBe(true);
    await deletionRepairedFromEvents(w, tables, g + 2);
  });

  it('the echo of a full pass\'s commit seeds the tables it let go while the events trail its observation: the commits up to it are in their seed', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const g = (await seededWith(w, tables)).generation;
    // A foreign chain the view has not been handed yet: the pass reads and repairs it, the events still at g.
    w.gate.held = [];
    await w.other.commit(new Batch().add('chain', { family: 'ip', table: 't', name: 'x' }));
    await turns(() => w.gate.held!.length === 1);
    const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
    expect(r).toMatchObject({ status: 'repaired', trusted: true, generation: g + 2 });
    expect(w.view.rulesExactAt(g + 2, tables)).toBe(true);
    // Seeded at g + 2 from the rules, in their array; the events, at g, trail that seed.
    expect(w.view.followsTable('ip', 't')).toBe(true);
    expect(followedRules(w.view, 'c')).toBe(w.view.rulesOf(tables[0]!)!.observed.rules.get('c'));
    expect(w.view.currency()).toEqual({ exact: false, generation: g, reason: `the events trail a table seeded at ${g + 2}` });
    expect(w.view.exactAt(g + 2)).toBe(false);
    // Handed over late, the foreign commit (a chain event, which the events cannot follow) and then our own are in the seed.
    const held = w.gate.held;
    w.gate.held = undefined;
    for (const b of held) expect(w.view.follow(b, w.conn.portId)).toBe('changed');
    await w.settled();
    expect(w.view.currency()).toEqual({ exact: true, generation: g + 2 });
    expect(w.view.exactAt(g + 2)).toBe(true);
    await deletionRepairedFromEvents(w, tables, g + 2);
  });

  it('the echo of a full pass\'s commit seeds nothing while a repair of ours is awaited: the tables it changed stay let go', async () => {
    const v = world();
    const h = await installed(v);
    v.view.expect(h + 5, []);
    expect(await v.pass([0, 1, 2, 3])).toMatchObject({ status: 'repaired', trusted: true, generation: h + 1 });
    expect(v.view.currency()).toMatchObject({ exact: false, reason: 'a full pass committed' });
  });

  it('our commit\'s new rules: their handles derived from two echoed ones, nothing read', async () => {
    const tables = planConfig(Array.from({ length: 1100 }, (_, i) => i)).tables;
    for (const defer of [true, false]) {
      const w = world();
      const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true, deferUnechoedRead: defer });
      expect(r).toMatchObject({ status: 'repaired', trusted: true, generation: w.kernel.generation });
      expect(w.reads.n).toBe(1);  // the observation it planned from (of an empty kernel), nothing after the commit
      expect(w.view.rulesExactAt(r.generation, tables)).toBe(true);
      expect(w.view.rulesOf(tables[0]!)!.observed.rules.get('c')!.map((x) => x.handle)).toEqual(await handles(w));
    }
  });

  it('a reload that changes only a table\'s flags (dormant) lets the followed table go: a full pass puts it to sleep or wakes it, in place', async () => {
    const w = world();
    const awake = planConfig([0, 1, 2]).tables;
    const pass = (tables: TableConfig[]) => w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
    // A start from empty: our install's echo seeds the followed part, nothing read after it.
    expect(await pass(awake)).toMatchObject({ status: 'repaired' });
    await w.settled();
    expect(w.view.followsTable('ip', 't')).toBe(true);
    const rules = await handles(w);
    const asleep = awake.map((t) => ({ ...t, dormant: true }));
    for (const [tables, dormant] of [[asleep, true], [awake, false]] as const) {
      w.view.desiredChanged(tables);
      // Not an element move: the table is let go, so the event repair has nothing to plan from
      // (the keeper's follow pass would otherwise find it 'clean') and a full pass makes the flags.
      expect(w.view.followsTable('ip', 't')).toBe(false);
      expect(w.view.plan()).toBeUndefined();
      expect(await pass(tables)).toMatchObject({ status: 'repaired', ops: 1 });
      await w.settled();
      expect(!!((await w.conn.getTable('ip', 't'))!.flags & TABLE_F.DORMANT)).toBe(dormant);
      expect(await handles(w)).toEqual(rules);
      // Followed again from a clean observation, for the next reload.
      const r = await pass(tables);
      expect(r).toMatchObject({ status: 'in-sync' });
      expect(w.view.seed(tables, r.first.observed, r.generation)).toBe('seeded');
    }
  });

  it('our commit whose echoed handles do not fit the derived ones: the chains it added rules to are read, at once or by the next observation at its generation', async () => {
    const tables = planConfig(Array.from({ length: 1100 }, (_, i) => i)).tables;
    const rulesOf = (k: KernelView) => k.rulesOf(tables[0]!)!.observed.rules.get('c')!.map((x) => x.handle);
    for (const defer of [true, false]) {
      const w = world();
      // A kernel that took a handle the batch does not account for, in the middle of the chain's run.
      w.kernel.skipHandles = (_port, index) => (index === 600 ? 1 : 0);
      const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true, deferUnechoedRead: defer });
      expect(r).toMatchObject({ status: 'repaired', trusted: true, generation: w.kernel.generation });
      const reads = w.reads.n;
      if (defer) {
        expect(w.view.rulesOf(tables[0]!)).toBeUndefined();
        const held = await w.view.heldAt(w.conn, r.generation, tables, false, () => w.reads.n++);
        expect(held).toMatchObject({ read: true });
        expect(w.reads.n).toBe(reads + 1);
      }
      expect(w.view.rulesExactAt(r.generation, tables)).toBe(true);
      expect(rulesOf(w.view)).toEqual(await handles(w));
    }
  });

  it('a foreign deletion in an owned table is followed (exact at its generation); our repair\'s echo makes it exact at the next', async () => {
    const w = world();
    const g = await installed(w);
    const [, second] = await handles(w);
    await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
    await w.settled();
    expect(w.view.currency()).toEqual({ exact: true, generation: g + 1 });
    expect(w.view.exactAt(g + 1)).toBe(true);
    const plan = w.view.plan();
    if (!plan || plan === 'clean') throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', chain: 'c' }]);
    w.view.expect(g + 2, plan.expected);
    const echoed = await w.conn.commit(plan.batch, { expectGeneration: g + 1, echo: true });
    expect(w.view.followEcho(g + 2, echoed!.handles!)).toBe(true);
    expect(w.view.currency()).toEqual({ exact: true, generation: g + 2 });
    expect(w.view.plan()).toBe('clean');
    expect(w.view.handlesOf('ip', 't', 'c')).toEqual(await handles(w));
    // The commit's own events come after, and change nothing.
    await w.settled();
    expect(w.view.exactAt(g + 2)).toBe(true);
    // The rules take what the events followed: the re-added rule under its new handle, no read.
    expect(w.view.unchanged(g, g + 2, w.watch.progress())).toBe(false);
    const reads = w.reads.n;
    const held = await w.view.heldAt(w.conn, g + 2, planConfig([0, 1, 2]).tables, false, () => w.reads.n++);
    expect(held).toMatchObject({ read: false });
    expect(w.view.rulesAtOf(OWNED[0]!)).toBe(g + 2);
    expect(w.reads.n).toBe(reads);
    expect(w.view.rulesOf(planConfig([0, 1, 2]).tables[0]!)!.observed.rules.get('c')!.map((x) => x.handle)).toEqual(await handles(w));
    // The safety net's read-back confirms them by digests: the re-added rule's chain decoded (its digest is not known yet).
    const back = await w.view.heldAt(w.conn, g + 2, planConfig([0, 1, 2]).tables, true, () => w.reads.n++);
    expect(back).toMatchObject({ read: true });
    expect(w.view.rulesAtOf(OWNED[0]!)).toBe(g + 2);
  });

  it('one array of handles per chain: the followed part is seeded in the rules\' array, our repair from the events moves it, the rules take it as it is', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const r = await seededWith(w, tables);
    const g = r.generation;
    const array = w.view.rulesOf(tables[0]!)!.observed.rules.get('c')!;
    expect(followedRules(w.view, 'c')).toBe(array);
    const [, second] = await handles(w);
    await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
    await w.settled();
    await repairFromEvents(w, g + 1);
    // The re-added rule is a known rule at its new handle in that one array.
    expect(followedRules(w.view, 'c')).toBe(array);
    expect(array.map((x) => x.handle)).toEqual(await handles(w));
    expect(array[1]!.exprs).toBe(tables[0]!.chains[0]!.rules[1]!.compiled.exprs);
    // The rules take what the events followed without a copy, and read nothing.
    await w.settled();
    const reads = w.reads.n;
    expect(await w.view.heldAt(w.conn, g + 2, tables, false, () => w.reads.n++)).toMatchObject({ read: false });
    expect(w.reads.n).toBe(reads);
    expect(w.view.rulesOf(tables[0]!)!.observed.rules.get('c')).toBe(array);
  });

  it('one generation per table: a followed table\'s rules are exact at its followed generation, a chain the events left otherwise owing its kernel-order list until asked', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const t = tables[0]!;
    const g = (await seededWith(w, tables)).generation;
    const rec = (w.view as unknown as { find(f: string, n: string): OwnedTable }).find('ip', 't');
    const array = rec.rules!.observed.rules.get('c')!;
    const [, second] = await handles(w);
    await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
    await w.settled();
    // Followed, not yet asked for: no list was made for the event (the rules still hold the one array).
    expect(rec.rules!.observed.rules.get('c')).toBe(array);
    expect(w.view.currency(t)).toEqual({ exact: true, generation: g + 1 });
    // Asked for: exact at the followed generation, the chain in the kernel's order with the difference the events followed.
    expect(w.view.tableCurrency(t, g + 1)).toEqual({ exact: true, generation: g + 1 });
    const kt = w.view.rulesOf(t)!;
    expect(kt.observed.rules.get('c')!.map((x) => x.handle)).toEqual(await handles(w));
    expect([...kt.held!.keys()]).toEqual(['c']);
    // Our repair from the events: the rules are exact at its generation, in the one array again, with no observation.
    await repairFromEvents(w, g + 1);
    expect(w.view.rulesAtOf(t)).toBe(g + 2);
    expect(w.view.tableCurrency(t, g + 2)).toEqual({ exact: true, generation: g + 2 });
    expect(w.view.rulesOf(t)!.observed.rules.get('c')).toBe(followedRules(w.view, 'c'));
    expect(w.view.rulesOf(t)!.held).toBeUndefined();
    expect(followedRules(w.view, 'c').map((x) => x.handle)).toEqual(await handles(w));
  });

  it('after a reload of the same rules (other objects) the rules and the followed part hold a chain in two arrays; the rules take it back as one, of the new desired rules', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const r = await seededWith(w, tables);
    const g = r.generation;
    // The same config parsed again: the followed part is retargeted, the next observation confirms the chain anew.
    const again = planConfig([0, 1, 2]).tables;
    w.view.desiredChanged(again);
    expect(w.view.following).toBe(true);
    expect(await w.reconciler.once({ tables: again, useKnown: true, keepKnown: true, trustSoleCommit: true })).toMatchObject({ status: 'in-sync', fromKnown: true });
    const confirmed = w.view.rulesOf(again[0]!)!.observed.rules.get('c')!;
    expect(followedRules(w.view, 'c')).not.toBe(confirmed);
    const [, second] = await handles(w);
    await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
    await w.settled();
    await repairFromEvents(w, g + 1);
    await w.settled();
    expect(await w.view.heldAt(w.conn, g + 2, again, false, () => w.reads.n++)).toMatchObject({ read: false });
    const rules = w.view.rulesOf(again[0]!)!.observed.rules.get('c')!;
    expect(followedRules(w.view, 'c')).toBe(rules);
    expect(rules.map((x) => x.handle)).toEqual(await handles(w));
    rules.forEach((x, j) => expect(x.exprs).toBe(again[0]!.chains[0]!.rules[j]!.compiled.exprs));
    // Where the two arrays hold the same handles, the rules' own (with the digests a read gave it) is the one kept.
    const w2 = world();
    const r2 = await seededWith(w2, tables);
    w2.view.desiredChanged(again);
    await w2.reconciler.once({ tables: again, useKnown: true, keepKnown: true, trustSoleCommit: true });
    const kept = w2.view.rulesOf(again[0]!)!.observed.rules.get('c')!;
    // A foreign rule added and deleted again: the table touched, the chain as desired at the same handles.
    const [first] = await handles(w2);
    await w2.other.commit(new Batch().add('rule', { ...C, position: first, exprs: planConfig([9]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs }));
    await w2.settled();
    await w2.other.commit(new Batch().delete('rule', { ...C, handle: (await handles(w2))[1]! }));
    await w2.settled();
    expect(await w2.view.heldAt(w2.conn, r2.generation + 2, again, false, () => w2.reads.n++)).toMatchObject({ read: false });
    expect(w2.view.rulesOf(again[0]!)!.observed.rules.get('c')).toBe(kept);
    expect(followedRules(w2.view, 'c')).toBe(kept);
  });

  it('a table whose rules the view does not hold (an anonymous set) is followed in known rules of its own, made from the observation\'s', async () => {
    const w = world();
    const texts = ['ip saddr { 10.0.0.1, 10.0.0.2 } accept', ruleText(1), ruleText(2)].map((x) => JSON.stringify(x)).join(', ');
    const tables = parseConfig(`tables: [{ family: ip, name: t, chains: [{ name: c, type: filter, hook: input, priority: filter, rules: [${texts}] }] }]`).tables;
    await new Reconciler(w.other, { attempts: 5 }).once({ tables });
    await w.settled();
    const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
    expect(r).toMatchObject({ status: 'in-sync' });
    expect(w.view.rulesOf(tables[0]!)).toBeUndefined();
    expect(w.view.seed(tables, r.first.observed, r.generation)).toBe('seeded');
    const rules = followedRules(w.view, 'c');
    expect(rules).not.toBe(r.first.observed[0]!.rules.get('c'));
    rules.forEach((x, j) => expect(x.exprs).toBe(tables[0]!.chains[0]!.rules[j]!.compiled.exprs));
    expect(rules.map((x) => x.handle)).toEqual(await handles(w));
    // Repaired from the events like any other.
    const [, second] = await handles(w);
    await w.other.commit(new Batch().delete('rule', { ...C, handle: second }));
    await w.settled();
    await repairFromEvents(w, r.generation + 1);
    expect(w.view.handlesOf('ip', 't', 'c')).toEqual(await handles(w));
    expect(await new Reconciler(w.other, { attempts: 1 }).once({ tables, readOnly: true })).toMatchObject({ status: 'in-sync' });
  });

  it('random foreign changes (deletions, replaces in place, foreign rules anywhere) are planned from the match the events hold: the fewest ops, the kernel as desired, every other handle kept', async () => {
    for (let seed = 1; seed <= 40; seed++) {
      const rand = rng(seed);
      const ks = Array.from({ length: 3 + Math.floor(rand() * 10) }, (_, i) => i);
      const w = world();
      const g = await installed(w, ks);
      const before = await handles(w);
      const exprs = (k: number) => planConfig([k]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs;
      const change = new Batch();
      const gone = new Set<number>();
      const deleted = new Set<number>();
      let replaced = 0;
      let foreign = 0;
      for (const [j, h] of before.entries()) {
        const x = rand();
        if (x < 0.2) {
          change.delete('rule', { ...C, handle: h });
          gone.add(h);
          deleted.add(h);
        } else if (x < 0.35) {
          change.replace('rule', { ...C, handle: h, exprs: exprs(500 + j) });
          gone.add(h);
          replaced++;
        } else if (x < 0.45) {
          change.add('rule', { ...C, position: h, exprs: exprs(700 + j) });
          foreign++;
        }
      }
      if (change.length === 0) continue;
      await w.other.commit(change);
      await w.settled();
      expect(w.view.exactAt(g + 1)).toBe(true);
      const plan = await repairFromEvents(w, g + 1);
      // One op per foreign rule and per missing rule, a missing rule and the foreign rule in its place one replace.
      expect(plan.batch.length).toBe(gone.size + foreign);
      const now = await readPlanChain(w.conn, ks);
      expect(now.ok, `seed ${seed}`).toBe(true);
      // A replaced rule is replaced back at its handle; a deleted one comes back under a new one.
      expect(now.handles.filter((h) => before.includes(h))).toEqual(before.filter((h) => !deleted.has(h)));
      expect(w.view.handlesOf('ip', 't', 'c')).toEqual(now.handles);
      await w.settled();
      expect(w.view.exactAt(g + 2)).toBe(true);
      expect(w.view.plan()).toBe('clean');
      expect(replaced + foreign + gone.size).toBeGreaterThan(0);
    }
  });

  it('a foreign change the events left otherwise than desired (a foreign rule left in place) is planned from the difference the view holds: no read', async () => {
    const foreign = planConfig([9]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs;
    // A foreign rule after the first (its place unknown to the view), at the head with a desired rule
    // deleted, and in a desired rule's place (a replace): each left in place, the event repair held back.
    const changes: ((h: number[]) => Batch)[] = [
      (h) => new Batch().add('rule', { ...C, position: h[0]!, exprs: foreign }),
      (h) => new Batch().delete('rule', { ...C, handle: h[2]! }).insert('rule', { ...C, exprs: foreign }),
      (h) => new Batch().replace('rule', { ...C, handle: h[1]!, exprs: foreign }).delete('rule', { ...C, handle: h[0]! }),
    ];
    for (const change of changes) {
      const w = world();
      // One desired state throughout, as the daemon's: the difference was found against its chains.
      const tables = planConfig([0, 1, 2, 3]).tables;
      await new Reconciler(w.other, { attempts: 5 }).once({ tables });
      await w.settled();
      const r = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
      expect(w.view.seed(tables, r.first.observed, r.generation)).toBe('seeded');
      await w.other.commit(change(await handles(w)));
      await w.settled();
      const g = w.kernel.generation;
      expect(w.view.exactAt(g)).toBe(true);
      const held = await w.view.heldAt(w.conn, g, tables, false, () => w.reads.n++);
      expect(held).toMatchObject({ read: false });
      expect(w.view.rulesOf(tables[0]!)!.held?.has('c')).toBe(true);
      // The full pass plans from that difference, reading nothing, and follows its own commit.
      const reads = w.reads.n;
      const pass = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
      expect(pass).toMatchObject({ status: 'repaired', trusted: true, generation: g + 1 });
      expect(pass.found.map((d) => d.kind)).toEqual(['rules-differ']);
      expect(w.reads.n).toBe(reads);
      const now = await w.conn.listRules(C);
      expect(now.map((x) => x.handle)).toEqual(w.view.rulesOf(tables[0]!)!.observed.rules.get('c')!.map((x) => x.handle));
      // The kernel holds the desired rules, in order: a read of it finds nothing to do.
      const check = await new Reconciler(w.other, { attempts: 1 }).once({ tables, readOnly: true });
      expect(check).toMatchObject({ status: 'in-sync' });
      // And the safety net's read-back confirms what the view followed.
      expect(await w.view.heldAt(w.conn, g + 1, tables, true, () => w.reads.n++)).toMatchObject({ read: true });
      expect(w.view.rulesExactAt(g + 1, tables)).toBe(true);
    }
  });

  it('a set the events left otherwise than desired (an element gone, a foreign one) is planned from the elements they followed: no read', async () => {
    const w = world();
    const tables = parseConfig(`
tables:
  - family: ip
    name: t
    sets:
      - name: s
        type: ipv4_addr
        elements: [192.0.2.1, 192.0.2.2, 192.0.2.3]
    chains:
      - name: c
        rules:
          - ip saddr @s accept
          - ${ruleText(1)}
`).tables;
    const r = await seededWith(w, tables);
    const set = { family: 'ip' as const, table: 't', set: 's' };
    await w.other.commit(new Batch().delete('element', { ...set, elements: [{ key: 'c0000202' }] }).add('element', { ...set, elements: [{ key: 'c6336401' }] }));
    await w.settled();
    const g = w.kernel.generation;
    expect(w.view.elementsDiffering('ip', 't', 's')).toBe(2);
    const reads = w.reads.n;
    const pass = await w.reconciler.once({ tables, useKnown: true, keepKnown: true, trustSoleCommit: true });
    expect(pass).toMatchObject({ status: 'repaired', trusted: true, generation: g + 1 });
    expect(pass.found.map((d) => d.kind)).toEqual(['elements-differ']);
    expect(w.reads.n).toBe(reads);
    expect((await w.conn.listElements(set)).map((e) => e.key).sort()).toEqual(['c0000201', 'c0000202', 'c0000203']);
    expect(await new Reconciler(w.other, { attempts: 1 }).once({ tables, readOnly: true })).toMatchObject({ status: 'in-sync' });
  });

  it('a difference the events followed, against a desired chain that changed since: the observation reads that table', async () => {
    const w = world();
    const tables = planConfig([0, 1, 2]).tables;
    const r = await seededWith(w, tables);
    const [first] = await handles(w);
    await w.other.commit(new Batch().add('rule', { ...C, position: first, exprs: planConfig([9]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs }));
    await w.settled();
    const other = planConfig([0, 1, 2, 3]).tables;
    w.view.desiredChanged(other);
    const held = await w.view.heldAt(w.conn, w.kernel.generation, other, false, () => w.reads.n++);
    expect(held).toEqual({ read: false });
    expect(w.view.rulesOf(other[0]!)).toBeUndefined();
    const pass = await w.reconciler.once({ tables: other, useKnown: true, keepKnown: true, trustSoleCommit: true });
    expect(pass).toMatchObject({ status: 'repaired' });
    expect(await new Reconciler(w.other, { attempts: 1 }).once({ tables: other, readOnly: true })).toMatchObject({ status: 'in-sync' });
  });

  it('a commit elsewhere leaves it exact, with no read: the events prove the owned tables untouched', async () => {
    const w = world();
    const g = await installed(w);
    await w.other.commit(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
    await w.other.commit(new Batch().add('table', { family: 'inet', name: 'elsewhere' }));
    await w.settled();
    expect(w.kernel.generation).toBe(g + 2);
    expect(w.view.exactAt(g + 2)).toBe(true);
    expect(w.view.unchanged(g, g + 2, w.watch.progress())).toBe(true);
    const reads = w.reads.n;
    const held = await w.view.heldAt(w.conn, g + 2, planConfig([0, 1, 2]).tables, false, () => w.reads.n++);
    expect(w.view.rulesAtOf(OWNED[0]!)).toBe(g + 2);
    expect(held.read).toBe(false);
    expect(w.reads.n).toBe(reads);
  });

  it('a read-back a commit elsewhere overlapped still counts: a batch handed over while the events are waited for is counted with them', async () => {
    const w = world();
    await w.other.commit(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
    const g = await installed(w);
    const tables = planConfig([0, 1, 2]).tables;
    // While the read-back dumps the digests, another writer deletes a table of its own (every table
    // deletion is handed over): the watcher reads it, and its record waits at the gate until the
    // view next asks for the events' progress, which heldAt does once the read is done.
    const list = w.conn.listRuleDigests.bind(w.conn);
    w.conn.listRuleDigests = async (x) => {
      const r = await list(x);
      if (w.kernel.generation === g) {
        w.gate.held = [];
        await w.other.commit(new Batch().delete('table', { family: 'ip', name: 'elsewhere' }));
        await turns(() => w.gate.held!.length > 0);
      }
      return r;
    };
    w.view.followEvents({ progress: () => {
      const held = w.gate.held;
      w.gate.held = undefined;
      for (const b of held ?? []) w.view.follow(b, w.conn.portId);
      return w.watch.progress();
    } }, () => false);
    const held = await w.view.heldAt(w.conn, g, tables, true, () => w.reads.n++);
    expect(w.kernel.generation).toBe(g + 1);
    expect(held).toMatchObject({ read: true });
    expect(held.known?.get(tables[0]!)).toBeDefined();
  });

  it('the safety net\'s read-back does not take the generation\'s word: it confirms by digests', async () => {
    const w = world();
    const g = await installed(w);
    const held = await w.view.heldAt(w.conn, g, planConfig([0, 1, 2]).tables, true, () => w.reads.n++);
    expect(held).toMatchObject({ read: true });
    expect(w.view.rulesAtOf(OWNED[0]!)).toBe(g);
  });

  describe('what makes it unknown', () => {
    it('an overflow (ENOBUFS): commits were lost', async () => {
      const w = world();
      const g = await installed(w);
      w.kernel.overflow();
      await turns(() => !w.view.valid);
      expect(w.view.currency()).toEqual({ exact: false, generation: g, reason: 'the event socket overflowed (ENOBUFS)' });
      expect(w.view.exactAt(g)).toBe(false);
      expect(w.view.unchanged(g, g, w.watch.progress())).toBe(false);
    });

    it('a gap in the run of whole commits, or a commit with more events than a batch keeps', () => {
      const w = world();
      const fake = (extra: Partial<MonitorBatch>): MonitorBatch =>
        ({ overflow: false, truncated: false, foreign: true, generation: 0, since: 1, events: [], ...extra });
      return installed(w).then((g) => {
        w.view.follow(fake({ generation: g + 3, since: g + 3 }), w.conn.portId);
        expect(w.view.currency()).toMatchObject({ exact: false, reason: `the monitor did not see every commit between ${g} and ${g + 3}` });
        const v = world();
        return installed(v).then((h) => {
          v.view.follow(fake({ generation: h + 1, truncated: true }), v.conn.portId);
          expect(v.view.currency()).toMatchObject({ exact: false, reason: `commit ${h + 1} had more events than a batch keeps` });
          // A truncated batch also counts as a touch: the rules need a read.
          expect(v.view.unchanged(h, h + 1, { lastGeneration: h + 1, runStart: 1, delivered: v.watch.progress().delivered + 1 })).toBe(false);
        });
      });
    });

    it('an event it cannot follow: a chain added to an owned table, or a handle it does not know', async () => {
      const w = world();
      const g = await installed(w);
      await w.other.commit(new Batch().add('chain', { family: 'ip', table: 't', name: 'x' }));
      await w.settled();
      // The table is unknown; the events go on following the others (none here) at the next generation.
      expect(w.view.currency()).toEqual({ exact: false, generation: g + 1, reason: 'newchain ip t x (the full pass plans that)' });
      expect(w.view.following).toBe(true);
      expect(w.view.plan()).toBeUndefined();
      const v = world();
      await installed(v);
      const ev: MonitorEvent = { type: 'delrule', family: 'ip', table: 't', name: 'c', handle: 9999, portId: 1 };
      v.view.follow({ overflow: false, truncated: false, foreign: true, generation: v.kernel.generation + 1, since: 1, events: [ev] }, v.conn.portId);
      expect(v.view.currency()).toMatchObject({ exact: false, reason: 'rule handle 9999 deleted from c is not one the view knows' });
    });

    it('a new desired state other than elements; a full pass\'s commit', async () => {
      const w = world();
      await installed(w);
      w.view.desiredChanged(planConfig([0, 1]).tables);
      expect(w.view.currency()).toMatchObject({ exact: false, reason: 'the desired state changed' });
      // Rules stay: an observation compares them with the new desired state.
      expect(w.view.rulesOf({ family: 'ip', name: 't' })).toBeDefined();
      w.view.committed(new Batch().add('table', { family: 'ip', name: 't' }));
      expect(w.view.rulesOf({ family: 'ip', name: 't' })).toBeUndefined();
    });
  });
});

/** Two owned tables, ip a and ip b, each with chain c holding the rules `ks` names (b: `kb`). */
function twoTables(ks: readonly number[], kb: readonly number[] = ks): TableConfig[] {
  const table = (name: string, rs: readonly number[]) => `
  - family: ip
    name: ${name}
    chains:
      - name: c
        rules:
${rs.map((k) => `          - ${ruleText(k)}`).join('\n')}`;
  return parseConfig(`tables:${table('a', ks)}${table('b', kb)}`).tables;
}
const TWO = [{ family: 'ip' as const, name: 'a' }, { family: 'ip' as const, name: 'b' }];
const A = { family: 'ip' as const, table: 'a', chain: 'c' };

/** Counts the rule dumps (decoded or digests) a connection makes, per table. */
function countDumps(conn: FakeConn): Map<string, number> {
  const n = new Map<string, number>();
  const count = (f: { table: string }) => n.set(f.table, (n.get(f.table) ?? 0) + 1);
  const { listRules, listRuleDigests } = conn;
  conn.listRules = (f) => (count(f), listRules.call(conn, f));
  conn.listRuleDigests = (f) => (count(f), listRuleDigests.call(conn, f));
  return n;
}

describe('the kernel view, per owned table', () => {
  async function two(): Promise<{ w: World; g: number; dumps: Map<string, number>; pass: (tables?: TableConfig[]) => ReturnType<Reconciler['once']> }> {
    const w = world(TWO);
    const tables = twoTables([0, 1, 2]);
    await new Reconciler(w.other, { attempts: 5 }).once({ tables });
    await w.settled();
    const pass = (t = tables) => w.reconciler.once({ tables: t, useKnown: true, keepKnown: true, trustSoleCommit: true });
    const r = await pass();
    expect(r).toMatchObject({ status: 'in-sync', ops: 0 });
    expect(w.view.seed(tables, r.first.observed, r.generation)).toBe('seeded');
    return { w, g: r.generation, dumps: countDumps(w.conn), pass };
  }

  it('an observation makes every table exact at its generation', async () => {
    const { w, g } = await two();
    for (const t of twoTables([0, 1, 2])) expect(w.view.tableCurrency(t, g)).toEqual({ exact: true, generation: g });
  });

  it('an event it cannot follow in one table makes only that table unknown: the next pass reads it, and plans the other from the view', async () => {
    const { w, g, dumps, pass } = await two();
    const [ta, tb] = twoTables([0, 1, 2]);
    await w.other.commit(new Batch().add('chain', { family: 'ip', table: 'a', name: 'x' }));
    await w.settled();
    // The events cannot follow a chain event: table a is unknown, table b still followed.
    expect(w.view.valid).toBe(false);
    expect(w.view.following).toBe(true);
    expect(w.view.followsTable('ip', 'a')).toBe(false);
    expect(w.view.followsTable('ip', 'b')).toBe(true);
    expect(w.view.exactAt(g + 1)).toBe(true);
    // Table a's rules went with its followed part (the commit changed it); b's are exact at the events' generation.
    expect(w.view.tableCurrency(ta!, g + 1)).toEqual({ exact: false, generation: g, reason: 'no rules held' });
    expect(w.view.tableCurrency(tb!, g + 1)).toEqual({ exact: true, generation: g + 1 });
    expect(w.view.currency(ta!)).toMatchObject({ exact: false, reason: 'newchain ip a x (the full pass plans that)' });
    expect(w.view.currency(tb!)).toEqual({ exact: true, generation: g + 1 });
    // A foreign deletion in table b meanwhile is followed and planned from the events, table b alone.
    const B = { family: 'ip' as const, table: 'b', chain: 'c' };
    const [, second] = (await w.other.listRules(B)).map((x) => x.handle!);
    await w.other.commit(new Batch().delete('rule', { ...B, handle: second }));
    await w.settled();
    expect(w.view.exactAt(g + 2)).toBe(true);
    const plan = w.view.plan();
    if (!plan || plan === 'clean') throw new Error('no plan');
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', table: 'b', chain: 'c' }]);
    w.view.expect(g + 3, plan.expected);
    const echoed = await w.conn.commit(plan.batch, { expectGeneration: g + 2, echo: true });
    expect(w.view.followEcho(g + 3, echoed!.handles!)).toBe(true);
    expect(w.view.handlesOf('ip', 'b', 'c')).toEqual((await w.other.listRules(B)).map((x) => x.handle));
    // With nothing left to repair in b, the events plan nothing: table a needs a full pass.
    expect(w.view.plan()).toBeUndefined();
    await w.settled();
    const r = await pass();
    expect(r).toMatchObject({ status: 'repaired', trusted: true });
    expect((await w.conn.listChains({ family: 'ip', table: 'a' })).map((c) => c.name)).toEqual(['c']);
    // Table a: a dump (the events lost it, so its rules went, no digest dump first). Table b: nothing
    // (its rules took the handles the events followed, its repair's included).
    expect(dumps.get('a')).toBe(1);
    expect(dumps.get('b')).toBeUndefined();
    // The full pass's commit touched table a only: table b is still followed, and table a again, from the rules its echo left.
    expect(w.view.followsTable('ip', 'b')).toBe(true);
    expect(w.view.followsTable('ip', 'a')).toBe(true);
    // The pass's commit is followed: both tables exact at its generation.
    for (const t of [ta!, tb!]) expect(w.view.tableCurrency(t, g + 4)).toEqual({ exact: true, generation: g + 4 });
  });

  it('a foreign change in one table and our repair of it touch only that table: the other is planned from the view', async () => {
    const { w, g, dumps, pass } = await two();
    const [ta, tb] = twoTables([0, 1, 2]);
    const [, second] = (await w.conn.listRules(A)).map((r) => r.handle!);
    await w.other.commit(new Batch().delete('rule', { ...A, handle: second }));
    await w.settled();
    const plan = w.view.plan();
    if (!plan || plan === 'clean') throw new Error('no plan');
    w.view.expect(g + 2, plan.expected);
    const echoed = await w.conn.commit(plan.batch, { expectGeneration: g + 1, echo: true });
    expect(w.view.followEcho(g + 2, echoed!.handles!)).toBe(true);
    await w.settled();
    expect(w.view.tableCurrency(tb!, g + 2)).toEqual({ exact: true, generation: g + 2 });
    dumps.clear();
    // A new desired state of table b only: planned from the view, neither table read (a's rules
    // take the handles the events followed).
    const tables = [ta!, twoTables([0, 1, 2], [0, 1, 2, 3])[1]!];
    w.view.desiredChanged(tables);
    const r = await pass(tables);
    expect(r).toMatchObject({ status: 'repaired', ops: 1, trusted: true });
    expect([...dumps]).toEqual([]);
    expect(w.view.rulesOf(ta!)!.observed.rules.get('c')!.map((x) => x.handle)).toEqual((await w.conn.listRules(A)).map((x) => x.handle));
  });

  it('a full pass\'s commit lets go only the rules of the tables it changed: the other keeps its own generation, and the events move it on with no read', async () => {
    const { w, g, dumps } = await two();
    const [ta, tb] = twoTables([0, 1, 2]);
    // Another writer adds a chain to table a: the events lose a, b stays followed.
    await w.other.commit(new Batch().add('chain', { family: 'ip', table: 'a', name: 'x' }));
    await w.settled();
    dumps.clear();
    // Not trusting its sole commit, the pass observes again after it: a is read twice (the events
    // lost it; then the commit is read back), b never (held at g + 1, then at g + 2 by the events:
    // our commit changed a alone).
    const r = await w.reconciler.once({ tables: [ta!, tb!], useKnown: true, keepKnown: true, trustSoleCommit: false });
    expect(r).toMatchObject({ status: 'repaired', generation: g + 2 });
    expect(r.trusted).toBeUndefined();
    expect(dumps.get('a')).toBe(2);
    expect(dumps.get('b')).toBeUndefined();
    expect([w.view.rulesAtOf(ta!), w.view.rulesAtOf(tb!)]).toEqual([g + 2, g + 2]);
    expect((await w.conn.listChains({ family: 'ip', table: 'a' })).map((c) => c.name)).toEqual(['c']);
  });

  it('each table\'s rules have their own generation: the commit lets a\'s go, b\'s stay at theirs until an observation or the events move them', async () => {
    const { w, g } = await two();
    const [ta, tb] = twoTables([0, 1, 2]);
    const [, second] = (await w.conn.listRules(A)).map((x) => x.handle!);
    const batch = new Batch().delete('rule', { ...A, handle: second });
    await w.conn.commit(batch, { expectGeneration: g });
    w.view.committed(batch);
    expect([w.view.rulesAtOf(ta!), w.view.rulesAtOf(tb!)]).toEqual([undefined, g]);
    expect(w.view.tableCurrency(tb!, g + 1)).toMatchObject({ exact: false, reason: 'the events do not cover the commits after ' + g });
    await w.settled();
    // The commit's events changed a alone: b is exact at g + 1 by them, and taken there by the next observation.
    expect(w.view.tableCurrency(tb!, g + 1)).toEqual({ exact: true, generation: g + 1 });
    const held = await w.view.heldAt(w.conn, g + 1, [ta!, tb!], false, () => undefined);
    expect([...held.known!.keys()]).toEqual([tb!]);
    expect([w.view.rulesAtOf(ta!), w.view.rulesAtOf(tb!)]).toEqual([undefined, g + 1]);
  });

  it('a table with stateful objects loses only itself at our full pass\'s commit: the other table\'s rules and followed part come from the echo', async () => {
    const { w, g } = await two();
    const [ta, tb] = twoTables([0, 1, 2]);
    // Table a as a config with a stateful object gives it (the fake kernel models none: the pass is driven by hand below).
    const objects = parseConfig('tables:\n  - family: ip\n    name: a\n    objects:\n      - name: hits\n        type: counter\n').tables[0]!.objects;
    const tables = [{ ...ta!, objects }, tb!];
    // Another writer adds a chain to each table: the events lose both.
    const x = (table: string) => ({ family: 'ip' as const, table, name: 'x' });
    await w.other.commit(new Batch().add('chain', x('a')).add('chain', x('b')));
    await w.settled();
    expect([w.view.followsTable('ip', 'a'), w.view.followsTable('ip', 'b')]).toEqual([false, false]);
    // The full pass: both tables read, the foreign chains deleted in one commit, its echo followed.
    const observed = await Promise.all(tables.map((t) => observeTable(w.conn, t.family, t.name, t.chains.map((c) => c.name))));
    const batch = new Batch().delete('chain', x('a')).delete('chain', x('b'));
    const echoed = await w.conn.commit(batch, { expectGeneration: g + 1, echo: true });
    w.view.committed(batch);
    await w.view.followCommit(w.conn, g + 2, tables, observed, batch, echoed ?? undefined, undefined, false, () => undefined);
    expect([w.view.rulesAtOf(tables[0]!), w.view.rulesAtOf(tb!)]).toEqual([undefined, g + 2]);
    expect([w.view.followsTable('ip', 'a'), w.view.followsTable('ip', 'b')]).toEqual([false, true]);
    // Table b is followed as the kernel holds it: a foreign deletion there is repaired from the events, table b alone.
    await w.settled();
    const B = { family: 'ip' as const, table: 'b', chain: 'c' };
    const [, second] = (await w.other.listRules(B)).map((r) => r.handle!);
    await w.other.commit(new Batch().delete('rule', { ...B, handle: second }));
    await w.settled();
    const plan = await repairFromEvents(w, g + 3);
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', table: 'b', chain: 'c' }]);
    expect(w.view.handlesOf('ip', 'b', 'c')).toEqual((await w.other.listRules(B)).map((r) => r.handle));
    expect(await new Reconciler(w.other, { attempts: 1 }).once({ tables: [tb!], readOnly: true })).toMatchObject({ status: 'in-sync' });
  });

  it('a desired change other than of elements in one table (a registration) makes that table alone unknown: the other stays exact and repaired from the events, and across the full pass\'s commit', async () => {
    const { w, g, dumps, pass } = await two();
    const [ta] = twoTables([0, 1, 2]);
    const tables = [ta!, twoTables([0, 1, 2], [0, 1, 2, 3])[1]!];
    w.view.desiredChanged(tables);
    expect([w.view.followsTable('ip', 'a'), w.view.followsTable('ip', 'b')]).toEqual([true, false]);
    expect(w.view.currency()).toMatchObject({ exact: false, reason: 'the desired state changed' });
    expect(w.view.exactAt(g)).toBe(true);
    // A foreign deletion in table a meanwhile is followed and repaired from the events.
    const [, second] = (await w.other.listRules(A)).map((r) => r.handle!);
    await w.other.commit(new Batch().delete('rule', { ...A, handle: second }));
    await w.settled();
    const plan = await repairFromEvents(w, g + 1);
    expect(plan.batch.ops).toMatchObject([{ verb: 'add', object: 'rule', table: 'a', chain: 'c' }]);
    await w.settled();
    // The pass for the change: table b planned from its rules, neither table read. Its echo does not
    // seed b (registrations come in runs); a stays followed, exact at the commit.
    const r = await pass(tables);
    expect(r).toMatchObject({ status: 'repaired', ops: 1, trusted: true, generation: g + 3 });
    expect([...dumps]).toEqual([]);
    expect([w.view.followsTable('ip', 'a'), w.view.followsTable('ip', 'b')]).toEqual([true, false]);
    expect(w.view.currency(ta!)).toEqual({ exact: true, generation: g + 3 });
    expect(w.view.currency(tables[1]!)).toMatchObject({ exact: false, reason: 'the desired state changed' });
    // The next clean observation (planned from the rules, no read) seeds both.
    await w.settled();
    const again = await pass(tables);
    expect(again).toMatchObject({ status: 'in-sync', ops: 0 });
    expect(w.view.seed(tables, again.first.observed, again.generation)).toBe('seeded');
    expect([...dumps]).toEqual([]);
    expect(w.view.currency()).toEqual({ exact: true, generation: g + 3 });
    expect(w.view.handlesOf('ip', 'b', 'c')).toEqual((await w.other.listRules({ family: 'ip', table: 'b', chain: 'c' })).map((x) => x.handle));
  });

  it('an overflow or a truncated batch cannot be attributed: every table is unknown and read', async () => {
    for (const lose of ['overflow', 'truncated'] as const) {
      const { w, g, dumps, pass } = await two();
      const tables = twoTables([0, 1, 2]);
      if (lose === 'overflow') {
        await w.other.commit(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
        w.kernel.overflow();
        await turns(() => !w.view.valid);
      } else {
        w.view.follow({ overflow: false, truncated: true, foreign: true, generation: g + 1, since: g + 1, events: [] }, w.conn.portId);
        await w.other.commit(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
      }
      for (const t of tables) expect(w.view.tableCurrency(t, g + 1, w.watch.progress()).exact).toBe(false);
      const r = await pass();
      expect(r).toMatchObject({ status: 'in-sync' });
      // Both confirmed by their digests (they hold), neither decoded.
      expect([dumps.get('a'), dumps.get('b')]).toEqual([1, 1]);
    }
  });
});
