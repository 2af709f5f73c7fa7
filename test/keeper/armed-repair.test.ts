/**
 * The monitor's armed reactions (Monitor.arm, native/monitor.cc React; Arming in the keeper) on the
 * real kernel: the keeper plans the repair of a foreign deletion of each owned rule while its mirror
 * is clean (Mirror.plan, the same planner as every event repair) and hands the monitor each batch
 * keyed by the event that deletion shows; the monitor commits it before any JavaScript runs. A
 * deleted rule comes back in its place (also when the neighbour it is re-added after was itself
 * re-added by the monitor before), nothing is read, the keeper's own commit path is not used, and
 * the mirror holds the kernel's handles. The generation guard holds: a commit that lands between
 * the deletion and the monitor's repair makes the kernel refuse it (nothing changed), and a commit
 * that touched the owned table since the monitor was armed leaves the next deletion to JavaScript.
 * On its own, the monitor answers exactly what it was armed with and nothing else: several events,
 * any ops, or no answer where no reaction names the events.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Keeper, RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import { Monitor } from '../../src/netlink/monitor.js';
import type { EventKey, MonitorBatch, Reaction } from '../../src/netlink/events.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { sleep, until } from '../helpers/wait.js';
import { nextRepair, startKeeper } from './helpers.js';
import { planConfig, readPlanChain } from './plan-fixtures.js';

const WANT = [1, 2, 3, 4, 5];
const where = { family: 'ip', table: 't', chain: 'c' } as const;
const wantRules = planConfig(WANT).tables[0]!.chains[0]!.rules;
const chain = (sock: NftSocket) => readPlanChain(sock, WANT);

describe('the keeper arms the monitor with the repair of each owned rule', () => {
  let ns: Netns;
  let sock: NftSocket;
  let keeper: Keeper;
  let jsCommits = 0;
  beforeAll(async () => {
    ns = createNetns('armed');
    sock = open({ netns: ns.path });
    keeper = await startKeeper(ns, { config: planConfig(WANT), fight: { threshold: 1e9 } });
    await until('the mirror to be seeded', () => keeper.mirrorState()?.exact === true);
    await keeper.idle();
    // Every commit of the keeper's own JavaScript goes through these: the monitor's does not.
    const conn = keeper.socket!;
    const commitNow = conn.commitNow!.bind(conn);
    const commit = conn.commit.bind(conn);
    conn.commitNow = (...a) => { jsCommits++; return commitNow(...a); };
    conn.commit = (...a) => { jsCommits++; return commit(...a); };
  }, 60_000);
  afterAll(async () => {
    await keeper?.stop();
    sock?.close();
    ns?.remove();
  });

  const dumps = async () => (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;

  async function deleteAndWait(index: number): Promise<{ r: RepairReport; before: number[]; after: number[] }> {
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    const before = (await chain(sock)).handles;
    const d0 = await dumps();
    const j0 = jsCommits;
    const repaired = nextRepair(keeper, 10_000);
    await sock.commit(new Batch().delete('rule', { ...where, handle: before[index]! }));
    const r = await repaired;
    await keeper.idle();
    const after = await chain(sock);
    expect(after.ok).toBe(true);
    expect(jsCommits).toBe(j0);  // committed by the monitor, not by the keeper's JavaScript
    expect(await dumps()).toBe(d0);  // nothing read
    expect(r.ops).toBe(1);
    expect(keeper.mirrorState()?.exact).toBe(true);
    expect(keeper.state.mirror!.handlesOf('ip', 't', 'c')).toEqual(after.handles);
    return { r, before, after: after.handles };
  }

  it('a rule deleted in the middle comes back after the rule before it; the other handles stay', async () => {
    const { r, before, after } = await deleteAndWait(2);
    expect(r.cause).toBe('event');
    expect(r.drift[0]!.detail).toMatch(/rule 3 \(.*\) is missing; repair from events/);
    expect(after.filter((_, i) => i !== 2)).toEqual(before.filter((_, i) => i !== 2));
    expect(after[2]).not.toBe(before[2]);
  });

  it('the rule after a re-added one is re-added after the new handle (armed again from the plan after each repair)', async () => {
    for (const i of [3, 2, 3, 4, 0, 1, 0]) {
      const { before, after } = await deleteAndWait(i);
      expect(after.filter((_, k) => k !== i)).toEqual(before.filter((_, k) => k !== i));
    }
  });

  it('is armed again from the planner after each repair, and gives way to a pass', async () => {
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    // A pass (the tick's read-back, a reload) pauses it; it is armed again once the mirror is clean,
    // and a pass that committed nothing takes up the same arm (resume) instead of arming anew.
    const monitor = keeper.state.monitor as Monitor;
    const arm = monitor.arm.bind(monitor);
    let arms = 0;
    const armed: Parameters<Monitor['arm']>[] = [];
    monitor.arm = (...a) => { arms++; armed.push(a); return arm(...a); };
    try {
      const done = keeper.request('manual', performance.now());
      expect(keeper.armed).toBe(false);
      const outcome = await done;
      expect(outcome.ops).toBe(0);
      await until('the monitor to be armed again', () => keeper.armed === true, 10_000);
      expect(arms).toBe(0);
      const { after } = await deleteAndWait(1);
      expect(arms).toBe(1);  // the monitor's reaction ended its arm; the keeper planned the next one
      // What the keeper armed: per owned rule, its deletion alone and the planner's re-add of it
      // where it stands, planned on the mirror without moving it (its generation is the repair's).
      const [, generation, reactions] = armed[0]!;
      expect(generation).toBe(keeper.state.mirror!.generation);
      expect(reactions.map((r) => r.on)).toEqual(after.map((handle) => [{ type: 'delrule', family: 'ip', table: 't', name: 'c', handle }]));
      expect(reactions.map((r) => r.ops.map((o) => [o.verb, (o as { position?: number }).position]))).toEqual(after.map((_, j) => [[j === 0 ? 'insert' : 'add', j === 0 ? undefined : after[j - 1]]]));
    } finally {
      monitor.arm = arm;
    }
  });

  it('the guard refuses the monitor\'s repair when a commit came after the deletion; the pass that follows repairs it', async () => {
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    sock.commitNow!(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
    await until('the monitor to be armed at the new generation', async () => {
      await sleep(5);
      return keeper.armed === true && keeper.state.monitor!.progress!().lastGeneration === sock.generation();
    }, 10_000);
    const before = (await chain(sock)).handles;
    const r0 = (await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0;
    const repaired = nextRepair(keeper, 10_000);
    // One turn of this thread: the monitor reads the deletion after the second commit is in.
    sock.commitNow!(new Batch().delete('rule', { ...where, handle: before[4]! }));
    sock.commitNow!(new Batch().delete('table', { family: 'ip', name: 'elsewhere' }));
    await repaired;
    await keeper.idle();
    expect((await chain(sock)).ok).toBe(true);
    expect((await keeper.metrics.generationRetries.get()).values[0]?.value ?? 0).toBe(r0 + 1);
  });

  it('a foreign commit that touches the owned table leaves the next deletion to JavaScript, which repairs both', async () => {
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    const before = (await chain(sock)).handles;
    const j0 = jsCommits;
    // One turn of this thread: both commits are in before the keeper's monitor reads either.
    const repaired = new Promise<void>((resolve) => {
      keeper.on('repaired', function on() {
        void chain(sock).then((c) => {
          if (!c.ok) return;
          keeper.off('repaired', on);
          resolve();
        });
      });
    });
    sock.commitNow!(new Batch().add('rule', { ...where, exprs: planConfig([99]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs }));
    sock.commitNow!(new Batch().delete('rule', { ...where, handle: before[1]! }));
    await repaired;
    await keeper.idle();
    expect((await chain(sock)).ok).toBe(true);
    expect(jsCommits).toBeGreaterThan(j0);
  });
});

describe('Monitor.arm on its own: the monitor matches events and sends what it was given, deciding nothing', () => {
  let ns: Netns;
  let sock: NftSocket;
  let foreign: NftSocket;
  let monitor: Monitor;
  const batches: MonitorBatch[] = [];
  const other = { family: 'ip', table: 'other', chain: 'c' } as const;
  beforeAll(async () => {
    ns = createNetns('arm');
    sock = open({ netns: ns.path });
    foreign = open({ netns: ns.path });
    const b = new Batch().add('table', { family: 'ip', name: 't' }).add('table', { family: 'ip', name: 'other' })
      .add('chain', { family: 'ip', table: 't', name: 'c' }).add('chain', { family: 'ip', table: 'other', name: 'c' });
    for (const r of wantRules) b.add('rule', { ...where, exprs: r.compiled.exprs });
    await foreign.commit(b);
    monitor = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 't' }], ignorePorts: [sock.portId], ownCommits: true,
      onBatch: (x) => {
        batches.push(x);
        // As the keeper does: the reaction's commit, whose handles came back, need not be handed over.
        if (x.reacted && 'handles' in x.reacted && x.reacted.handles.length > 0) monitor.skipOwn(x.generation + 1);
      } });
    monitor.anchor(sock.generation(), 0);  // read after the subscription: every later commit is seen whole
  });
  afterAll(() => {
    monitor?.close();
    sock?.close();
    foreign?.close();
    ns?.remove();
  });

  const deleted = (handle: number): EventKey => ({ type: 'delrule', family: 'ip', table: 't', name: 'c', handle });
  /** The keeper's re-add of rule j of the chain as it stands: at the head for j = 0, else after rule j - 1. */
  const reAdd = (handles: readonly number[], j: number): Op => (j === 0
    ? { verb: 'insert', object: 'rule', ...where, exprs: wantRules[j]!.compiled.exprs, id: 1 }
    : { verb: 'add', object: 'rule', ...where, exprs: wantRules[j]!.compiled.exprs, id: 1, position: handles[j - 1]! }) as Op;

  /** Arms `reactions(handles)` at the generation the monitor has read up to. */
  async function arm(reactions: (handles: number[]) => Reaction[] = (h) => h.map((x, j) => ({ on: [deleted(x)], ops: [reAdd(h, j)] }))) {
    const handles = (await chain(sock)).handles;
    const generation = sock.generation();
    await until('the monitor to have read every commit', () => monitor.progress().lastGeneration === generation);
    expect(monitor.arm(sock, generation, reactions(handles))).toBe(true);
    return { handles, generation };
  }

  async function nextBatch(commit: () => Promise<unknown> | unknown): Promise<MonitorBatch> {
    batches.length = 0;
    await commit();
    await until('the commit to be handed over', () => batches.length > 0);
    return batches[0]!;
  }

  /** The chain as the tests start from: the desired rules, nothing in table other. */
  async function restore(): Promise<void> {
    const b = new Batch().flush('chain', { family: 'ip', table: 't', name: 'c' }).flush('chain', { family: 'ip', table: 'other', name: 'c' });
    for (const r of wantRules) b.add('rule', { ...where, exprs: r.compiled.exprs });
    await foreign.commit(b);
  }

  it('answers a foreign deletion after commits elsewhere, guarded by its generation, and the arm ends with it', async () => {
    const { handles, generation } = await arm();
    await foreign.commit(new Batch().add('rule', { ...other, exprs: wantRules[0]!.compiled.exprs }));
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[2]! })));
    expect(b.generation).toBe(generation + 2);
    expect(b.reacted).toMatchObject({ reaction: 2 });
    const echoed = (b.reacted as { handles: [number, number][] }).handles;
    expect(echoed).toHaveLength(1);
    const [op, h] = echoed[0]!;
    expect(op).toBe(0);
    const after = await chain(sock);
    expect(after.ok).toBe(true);
    expect(after.handles).toEqual([handles[0], handles[1], h, handles[3], handles[4]]);
    // Its own commit was skipped (the caller said so), not handed over.
    await until('the repair to be read', () => monitor.progress().lastGeneration === generation + 3);
    await sleep(20);
    expect(batches).toHaveLength(1);
    // One batch, one answer: the next deletion is the caller's, even of a rule it had a reaction for.
    const next = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[4]! })));
    expect(next.reacted).toBeUndefined();
    await restore();
  });

  it('the kernel refuses it when another commit came first (nothing changed), and the arm is then off', async () => {
    const { handles } = await arm();
    // Both commits in one turn: the monitor reads the deletion after the second is in.
    const b = await nextBatch(() => {
      foreign.commitNow!(new Batch().delete('rule', { ...where, handle: handles[3]! }));
      foreign.commitNow!(new Batch().add('rule', { ...other, exprs: wantRules[1]!.compiled.exprs }));
    });
    expect(b.reacted).toMatchObject({ errno: 85, reaction: 3 });  // ERESTART: the guard
    const rules = await sock.listRules(where);
    expect(rules.map((r) => r.handle)).toEqual([handles[0], handles[1], handles[2], handles[4]]);
    const next = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[0]! })));
    expect(next.reacted).toBeUndefined();
    await restore();
  });

  it('a commit that touched the watched table since it was armed leaves the next deletion unanswered', async () => {
    const { handles } = await arm();
    await foreign.commit(new Batch().add('rule', { ...where, exprs: wantRules[0]!.compiled.exprs }));  // an extra at the end
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[1]! })));
    expect(b.reacted).toBeUndefined();
    expect((await sock.listRules(where)).length).toBe(wantRules.length);  // 5 - 1 + the extra: nothing re-added
    await restore();
  });

  it('paused, it answers nothing; resume takes the arm up after commits elsewhere, not after one that touched the table', async () => {
    const { handles } = await arm();
    monitor.pause();
    await foreign.commit(new Batch().add('rule', { ...other, exprs: wantRules[2]!.compiled.exprs }));
    await until('the monitor to read it', () => monitor.progress().lastGeneration === sock.generation());
    expect(monitor.resume()).toBe(true);
    monitor.pause();
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[4]! })));
    expect(b.reacted).toBeUndefined();  // paused
    expect(monitor.resume()).toBe(false);  // that deletion touched the table
    await restore();
  });

  // What the monitor did on its own before, and no longer decides: it answered one deletion of one
  // owned rule with that rule's re-add, and nothing else.
  it('answers a commit of several events when one reaction names exactly those, in order', async () => {
    const { handles } = await arm((h) => [
      { on: [deleted(h[1]!), deleted(h[3]!)], ops: [reAdd(h, 1), reAdd(h, 3)] },
      { on: [deleted(h[1]!)], ops: [reAdd(h, 1)] },
    ]);
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[1]! }).delete('rule', { ...where, handle: handles[3]! })));
    expect(b.events).toHaveLength(2);
    expect(b.reacted).toMatchObject({ reaction: 0 });
    expect((b.reacted as { handles: [number, number][] }).handles.map(([op]) => op)).toEqual([0, 1]);
    const after = await chain(sock);
    expect(after.ok).toBe(true);
    await restore();
  });

  it('commits whatever the reaction holds, not the deleted rule\'s re-add', async () => {
    const { handles } = await arm((h) => [{ on: [deleted(h[0]!)], ops: [{ verb: 'add', object: 'rule', ...other, exprs: wantRules[4]!.compiled.exprs }] }]);
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[0]! })));
    expect(b.reacted).toMatchObject({ reaction: 0 });
    expect((await sock.listRules(where)).map((r) => r.handle)).toEqual(handles.slice(1));  // not re-added
    expect(await sock.listRules(other)).toHaveLength(1);
    await restore();
  });

  it('leaves a deletion of an owned rule alone when no reaction names it (the caller chose not to answer)', async () => {
    const { handles } = await arm((h) => [{ on: [deleted(h[1]!)], ops: [reAdd(h, 1)] }]);
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[2]! })));
    expect(b.reacted).toBeUndefined();
    expect((await sock.listRules(where)).map((r) => r.handle)).toEqual(handles.filter((_, j) => j !== 2));
    await restore();
  });

  it('leaves a reaction\'s events alone when they come in another order or with more beside them', async () => {
    const { handles } = await arm((h) => [{ on: [deleted(h[3]!), deleted(h[1]!)], ops: [reAdd(h, 1)] }]);
    const b = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: handles[1]! }).delete('rule', { ...where, handle: handles[3]! })));
    expect(b.reacted).toBeUndefined();
    await restore();
    const again = await arm((h) => [{ on: [deleted(h[1]!)], ops: [reAdd(h, 1)] }]);
    const c = await nextBatch(() => foreign.commit(new Batch().delete('rule', { ...where, handle: again.handles[1]! }).delete('rule', { ...where, handle: again.handles[2]! })));
    expect(c.reacted).toBeUndefined();
    await restore();
  });

  it('refuses reactions it cannot read, and a socket that is not the addon\'s', async () => {
    const { handles, generation } = await arm();
    const one = { on: [deleted(handles[0]!)], ops: [reAdd(handles, 0)] };
    expect(() => monitor.arm(sock, generation, [{ on: [], ops: one.ops }])).toThrow(/needs events \(on\) and ops/);
    expect(() => monitor.arm(sock, generation, [{ on: one.on, ops: [] }])).toThrow(/needs events \(on\) and ops/);
    expect(() => monitor.arm(sock, generation, [{ on: [{ ...one.on[0]!, family: 'nope' as 'ip' }], ops: one.ops }])).toThrow(/reaction 0: event 0 needs a type, a family and a table/);
    expect(() => monitor.arm(sock, generation, [one, one])).toThrow(/reaction 1: the same events as an earlier one/);
    expect(() => monitor.arm(sock, generation, [one, { on: [deleted(handles[1]!)], ops: [{ verb: 'add', object: 'rule' } as Op] }])).toThrow();
    expect(monitor.arm(sock, generation, [])).toBe(false);
    expect(monitor.arm({} as NftSocket, generation, [one])).toBe(false);
  });
});

describe('in a fight, the keeper arms the monitor again once the back-off since its last repair is over', () => {
  it('a deletion after the back-off is answered by the monitor, one during it by the keeper after the wait', async () => {
    const ns = createNetns('armfight');
    const sock = open({ netns: ns.path });
    // Two repairs within a minute raise the level: from then on 300 ms between repairs, for the whole test.
    const keeper = await startKeeper(ns, { config: planConfig(WANT), fight: { threshold: 2, windowMs: 60_000, baseMs: 300, quietMs: 60_000 } });
    try {
      await until('the mirror to be seeded', () => keeper.mirrorState()?.exact === true);
      await keeper.idle();
      let jsCommits = 0;
      const conn = keeper.socket!;
      const commitNow = conn.commitNow!.bind(conn);
      const commit = conn.commit.bind(conn);
      conn.commitNow = (...a) => { jsCommits++; return commitNow(...a); };
      conn.commit = (...a) => { jsCommits++; return commit(...a); };
      const deleteAt = async (i: number) => {
        const before = (await chain(sock)).handles;
        const repaired = nextRepair(keeper, 10_000);
        await sock.commit(new Batch().delete('rule', { ...where, handle: before[i]! }));
        const r = await repaired;
        await keeper.idle();
        expect((await chain(sock)).ok).toBe(true);
        return r;
      };
      for (const i of [1, 2, 3]) {
        await until('the monitor to be armed', () => keeper.armed === true, 10_000);
        const j0 = jsCommits;
        await deleteAt(i);
        expect(jsCommits).toBe(j0);  // the monitor's commit
      }
      expect(keeper.status().fightLevel).toBeGreaterThan(0);
      // Right after a repair the back-off holds: not armed, and a deletion now waits for the keeper.
      expect(keeper.armed).toBe(false);
      const j1 = jsCommits;
      await deleteAt(0);
      expect(jsCommits).toBe(j1 + 1);
      // Once it is over, armed again: the monitor answers.
      await until('the monitor to be armed after the back-off', () => keeper.armed === true, 10_000);
      const j2 = jsCommits;
      await deleteAt(4);
      expect(jsCommits).toBe(j2);
      expect(keeper.status().fightLevel).toBeGreaterThan(0);
    } finally {
      await keeper.stop();
      sock.close();
      ns.remove();
    }
  }, 60_000);
});
