/**
 * The monitor's armed repair (Monitor.arm, native/monitor.cc TryRepair; Keeper.armRepairs) on the
 * real kernel: the keeper decides the repair of a foreign deletion of each owned rule while its
 * mirror is clean, and the monitor commits it before any JavaScript runs. A deleted rule comes back
 * in its place (also when the neighbour it is re-added after was itself re-added by the monitor
 * before), nothing is read, the keeper's own commit path is not used, and the mirror holds the
 * kernel's handles. The generation guard holds: a commit that lands between the deletion and the
 * monitor's repair makes the kernel refuse it (nothing changed), and a commit that touched the
 * owned table since the monitor was armed leaves the next deletion to JavaScript.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Keeper, RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import { Monitor } from '../../src/netlink/monitor.js';
import type { MonitorBatch } from '../../src/netlink/events.js';
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

  it('the rule after a re-added one is re-added after the new handle (the monitor moved its position itself)', async () => {
    for (const i of [3, 2, 3, 4, 0, 1, 0]) {
      const { before, after } = await deleteAndWait(i);
      expect(after.filter((_, k) => k !== i)).toEqual(before.filter((_, k) => k !== i));
    }
  });

  it('stays armed across repairs without JavaScript arming it again, and gives way to a pass', async () => {
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    // A pass (the tick's read-back, a reload) pauses it; it is armed again once the mirror is clean,
    // and a pass that committed nothing takes up the same arm (resume) instead of arming anew.
    const monitor = keeper.state.monitor as Monitor;
    const arm = monitor.arm.bind(monitor);
    let arms = 0;
    monitor.arm = (...a) => { arms++; return arm(...a); };
    try {
      const done = keeper.request('manual', performance.now());
      expect(keeper.armed).toBe(false);
      const outcome = await done;
      expect(outcome.ops).toBe(0);
      await until('the monitor to be armed again', () => keeper.armed === true, 10_000);
      expect(arms).toBe(0);
      await deleteAndWait(1);
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

describe('Monitor.arm on its own', () => {
  let ns: Netns;
  let sock: NftSocket;
  let foreign: NftSocket;
  let monitor: Monitor;
  const batches: MonitorBatch[] = [];
  beforeAll(async () => {
    ns = createNetns('arm');
    sock = open({ netns: ns.path });
    foreign = open({ netns: ns.path });
    const b = new Batch().add('table', { family: 'ip', name: 't' }).add('table', { family: 'ip', name: 'other' })
      .add('chain', { family: 'ip', table: 't', name: 'c' }).add('chain', { family: 'ip', table: 'other', name: 'c' });
    for (const r of wantRules) b.add('rule', { ...where, exprs: r.compiled.exprs });
    await foreign.commit(b);
    monitor = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 't' }], ignorePorts: [sock.portId], ownCommits: true,
      onBatch: (x) => batches.push(x) });
    monitor.anchor(sock.generation(), 0);  // read after the subscription: every later commit is seen whole
  });
  afterAll(() => {
    monitor?.close();
    sock?.close();
    foreign?.close();
    ns?.remove();
  });

  /** The keeper's arm of the chain as it stands: re-add rule j after rule j - 1 (at the head for j = 0). */
  async function arm(): Promise<{ handles: number[]; generation: number }> {
    const handles = (await chain(sock)).handles;
    const ops: Op[] = wantRules.map((r, j) => (j === 0
      ? { verb: 'insert', object: 'rule', ...where, exprs: r.compiled.exprs, id: 1 }
      : { verb: 'add', object: 'rule', ...where, exprs: r.compiled.exprs, id: 1, position: handles[j - 1]! }) as Op);
    const generation = sock.generation();
    await until('the monitor to have read every commit', () => monitor.progress().lastGeneration === generation);
    expect(monitor.arm(sock, generation, ops, handles)).toBe(true);
    return { handles, generation };
  }

  it('answers a foreign deletion after commits elsewhere, guarded by its generation', async () => {
    const { handles, generation } = await arm();
    await foreign.commit(new Batch().add('rule', { family: 'ip', table: 'other', chain: 'c', exprs: wantRules[0]!.compiled.exprs }));
    batches.length = 0;
    await foreign.commit(new Batch().delete('rule', { ...where, handle: handles[2]! }));
    await until('the deletion to be handed over', () => batches.length > 0);
    const b = batches[0]!;
    expect(b.generation).toBe(generation + 2);
    expect(b.repaired).toMatchObject({ position: handles[1] });
    const h = (b.repaired as { handle: number }).handle;
    expect(h).toBeGreaterThan(0);
    const after = await chain(sock);
    expect(after.ok).toBe(true);
    expect(after.handles).toEqual([handles[0], handles[1], h, handles[3], handles[4]]);
    // Its own commit was skipped, not handed over.
    await until('the repair to be read', () => monitor.progress().lastGeneration === generation + 3);
    await sleep(20);
    expect(batches).toHaveLength(1);
  });

  it('the kernel refuses it when another commit came first (nothing changed), and the arm is then off', async () => {
    const { handles } = await arm();
    batches.length = 0;
    // Both commits in one turn: the monitor reads the deletion after the second is in.
    foreign.commitNow!(new Batch().delete('rule', { ...where, handle: handles[3]! }));
    foreign.commitNow!(new Batch().add('rule', { family: 'ip', table: 'other', chain: 'c', exprs: wantRules[1]!.compiled.exprs }));
    await until('the deletion to be handed over', () => batches.length > 0);
    expect(batches[0]!.repaired).toMatchObject({ errno: 85, position: handles[2] });  // ERESTART: the guard
    const rules = await sock.listRules(where);
    expect(rules.map((r) => r.handle)).toEqual([handles[0], handles[1], handles[2], handles[4]]);
    // Disarmed: the next deletion is not answered.
    batches.length = 0;
    await foreign.commit(new Batch().delete('rule', { ...where, handle: handles[0]! }));
    await until('the deletion to be handed over', () => batches.length > 0);
    expect(batches[0]!.repaired).toBeUndefined();
    // Put the chain back as it was for the next case.
    await foreign.commit(new Batch().flush('chain', { family: 'ip', table: 't', name: 'c' }));
    const b = new Batch();
    for (const r of wantRules) b.add('rule', { ...where, exprs: r.compiled.exprs });
    await foreign.commit(b);
  });

  it('a commit that touched the watched table since it was armed leaves the next deletion unanswered', async () => {
    const { handles } = await arm();
    await foreign.commit(new Batch().add('rule', { ...where, exprs: wantRules[0]!.compiled.exprs }));  // an extra at the end
    batches.length = 0;
    await foreign.commit(new Batch().delete('rule', { ...where, handle: handles[1]! }));
    await until('the deletion to be handed over', () => batches.length > 0);
    expect(batches[0]!.repaired).toBeUndefined();
    expect((await sock.listRules(where)).length).toBe(wantRules.length);  // 5 - 1 + the extra: nothing re-added
  });

  it('paused, it answers nothing; resume takes the arm up after commits elsewhere, not after one that touched the table', async () => {
    const { handles } = await arm();
    monitor.pause();
    await foreign.commit(new Batch().add('rule', { family: 'ip', table: 'other', chain: 'c', exprs: wantRules[2]!.compiled.exprs }));
    await until('the monitor to read it', () => monitor.progress().lastGeneration === sock.generation());
    expect(monitor.resume()).toBe(true);
    monitor.pause();
    batches.length = 0;
    await foreign.commit(new Batch().delete('rule', { ...where, handle: handles[4]! }));
    await until('the deletion to be handed over', () => batches.length > 0);
    expect(batches[0]!.repaired).toBeUndefined();  // paused
    expect(monitor.resume()).toBe(false);  // that deletion touched the table
    await foreign.commit(new Batch().add('rule', { ...where, exprs: wantRules[4]!.compiled.exprs }));
  });

  it('refuses anything but a rule op per handle, and a socket that is not the addon\'s', async () => {
    const { handles, generation } = await arm();
    expect(() => monitor.arm(sock, generation, [{ verb: 'delete', object: 'rule', ...where, handle: handles[0]! }], [handles[0]!])).toThrow(/not one rule added/);
    expect(() => monitor.arm(sock, generation, [], [1])).toThrow(/one handle per op/);
    expect(monitor.arm({} as NftSocket, generation, [], [])).toBe(false);
  });
});
