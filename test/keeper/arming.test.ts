/**
 * The keeper's arming decisions (arming.ts, and the take-over of an answered commit in
 * follow-repair.ts) against the fake kernel, whose watcher answers armed reactions as the addon's
 * monitor does (held to it by the shared suite's armCases): what it arms with, when it arms, takes
 * an arm up again, or does not, and what follows an answer the kernel took, refused by the guard,
 * refused otherwise, or that differs from what the followed part plans. armed-repair.test.ts runs the
 * keeper's use of it on the kernel.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import type { Arming } from '../../src/keeper/arming.js';
import { Keeper, type KeeperOptions } from '../../src/keeper/keeper.js';
import type { KeeperState } from '../../src/keeper/state.js';
import { Batch } from '../../src/netlink/batch.js';
import type { NftWatch } from '../../src/netlink/conn.js';
import type { MonitorBatch, Reaction } from '../../src/netlink/events.js';
import type { Family } from '../../src/netlink/expr.js';
import { compileRule, renderRule } from '../../src/rules/index.js';
import { FakeKernel, type FakeConn } from '../helpers/fake-kernel.js';
import { FLANNEL_RULES, FLANNEL_YAML, flannelConfig, nextRepair, postroutingYaml } from './helpers.js';

const OWNED = { family: 'ip' as Family, table: 'nfkeeper', chain: 'postrouting' };
const rule = (text: string) => ({ exprs: compileRule(text, { family: 'ip', table: 't', chain: 'c' }).exprs });

/** Turns of the event loop until `ok` holds (no timer). */
async function turns(what: string, ok: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

interface World {
  kernel: FakeKernel;
  k: Keeper;
  /** A foreign writer. */
  other: FakeConn;
  /** Every arm() the keeper asked of its watcher: the generation, the reactions, and what it answered. */
  arms: { generation: number; reactions: readonly Reaction[]; armed: boolean }[];
  /** resume() calls and their answers. */
  resumes: boolean[];
  /** Records the watcher handed over. */
  batches: MonitorBatch[];
  /** Commits by the keeper's JavaScript (its connection's commit and commitNow). */
  jsCommits: () => number;
  dumps: () => Promise<number>;
  handles: () => Promise<number[]>;
  lines: () => Promise<number>;
  /** The owned chain's rules as text. */
  text: () => Promise<string[]>;
}

const keepers: Keeper[] = [];
afterEach(async () => {
  for (const k of keepers.splice(0)) await k.stop();
});

/**
 * A keeper on a fresh fake kernel, its watcher and connection watched. `armWith` stands between the
 * keeper and its watcher's arm() (to hand the watcher other reactions, or refuse).
 */
async function start(options: Partial<KeeperOptions> = {},
  armWith?: (arm: NftWatch['arm'] & {}, ...a: Parameters<NftWatch['arm'] & {}>) => boolean): Promise<World> {
  const kernel = new FakeKernel();
  const arms: World['arms'] = [];
  const resumes: boolean[] = [];
  const batches: MonitorBatch[] = [];
  let js = 0;
  const k = new Keeper({
    config: flannelConfig(), intervalMs: 3_600_000, ...options,
    host: {
      connect: () => {
        const c = kernel.connect();
        const commit = c.commit.bind(c);
        const commitNow = c.commitNow.bind(c);
        c.commit = (...a) => { js++; return commit(...a); };
        c.commitNow = (...a) => { js++; return commitNow(...a); };
        return c;
      },
      watch: (o) => {
        const w = kernel.watch({ ...o, onBatch: (b) => { batches.push(b); o.onBatch(b); } });
        const arm = w.arm.bind(w);
        const resume = w.resume.bind(w);
        w.arm = (conn, generation, reactions) => {
          const armed = armWith ? armWith(arm, conn, generation, reactions) : arm(conn, generation, reactions);
          arms.push({ generation, reactions, armed });
          return armed;
        };
        w.resume = () => {
          const r = resume();
          resumes.push(r);
          return r;
        };
        return w;
      },
    },
  });
  k.on('error', () => undefined);
  keepers.push(k);
  await k.start();
  const other = kernel.connect();
  const w: World = {
    kernel, k, other, arms, resumes, batches,
    jsCommits: () => js,
    dumps: async () => (await k.metrics.dumps.get()).values[0]?.value ?? 0,
    handles: async () => (await other.listRules(OWNED)).map((r) => r.handle!),
    lines: async () => (await other.listRules(OWNED)).length,
    text: async () => (await other.listRules(OWNED)).map((r) => renderRule(r, 'ip')),
  };
  return w;
}

/** The keeper's monitor holds a current arm (it arms after the keeper has waited once). */
const armed = (w: World) => turns('the keeper to arm its watcher', () => w.k.armed);

/** Commits `batch` as another writer and waits until the keeper gives its followed part up: the generation it made, the reasons given. */
async function commitUntilGivenUp(w: World, batch: Batch): Promise<{ at: number; fallbacks: unknown[] }> {
  const fallbacks: unknown[] = [];
  w.k.on('follow-fallback', (why) => fallbacks.push(why));
  await w.other.commit(batch);
  const at = w.kernel.generation;
  await turns('the followed part to be given up', () => fallbacks.length > 0);
  await w.k.idle();
  return { at, fallbacks };
}

/** Deletes owned rule `index` as another writer and waits for its repair. */
async function deleteOne(w: World, index: number) {
  const handles = await w.handles();
  const repaired = nextRepair(w.k);
  await w.other.commit(new Batch().delete('rule', { ...OWNED, handle: handles[index]! }));
  const deletedAt = w.kernel.generation;
  const r = await repaired;
  await w.k.idle();
  return { r, before: handles, deletedAt };
}

describe('what the keeper arms its watcher with', () => {
  it('per owned rule, its deletion alone and the planner\'s re-add of it where it stood, at the generation the followed part is exact at', async () => {
    const w = await start();
    await armed(w);
    const h = await w.handles();
    expect(w.arms).toHaveLength(1);
    const { generation, reactions } = w.arms[0]!;
    expect(generation).toBe(w.kernel.generation);
    expect(generation).toBe(w.k.state.view.generation);
    expect(reactions.map((r) => r.on)).toEqual(h.map((handle) => [{ type: 'delrule', ...{ family: 'ip', table: 'nfkeeper' }, name: 'postrouting', handle }]));
    // The last rule's re-add is appended at the chain's end, the others placed after the rule before them.
    expect(reactions.map((r) => r.ops!.map((o) => [o.verb, (o as { position?: number }).position]))).toEqual(h.map((_, j) => [[j === 0 ? 'insert' : 'add', j === 0 || j === h.length - 1 ? undefined : h[j - 1]]]));
    // Planned on the followed part without moving it.
    expect(w.k.followState()).toEqual({ exact: true, generation });
  });

  it('no reaction for a rule that brings an anonymous set (its deletion shows the set\'s too, by a name the followed part does not keep)', async () => {
    const rules = [...FLANNEL_RULES.slice(0, 2), 'ip saddr { 10.9.0.1, 10.9.0.2 } masquerade', ...FLANNEL_RULES.slice(2)];
    const w = await start({ config: parseConfig(`\n${postroutingYaml('nfkeeper', rules, 'postrouting')}`) });
    await armed(w);
    const h = await w.handles();
    expect(w.arms.at(-1)!.reactions.map((r) => r.on[0]!.handle)).toEqual(h.filter((_, j) => j !== 2));
  });

  it('nothing over 256 owned rules: the events are JavaScript\'s to answer', async () => {
    const many = Array.from({ length: 257 }, (_, i) => `ip saddr 10.1.${i >> 8}.${i & 255} return`);
    const w = await start({ config: parseConfig(`\n${postroutingYaml('nfkeeper', many, 'postrouting')}`) });
    await w.k.request('manual', performance.now());
    await w.k.idle();
    await turns('the followed part to be exact', () => w.k.followState()?.exact === true);
    await w.k.request('manual', performance.now());
    expect(w.k.armed).toBe(false);
    expect(w.arms).toHaveLength(0);
    const { r } = await deleteOne(w, 100);
    expect(r.cause).toBe('event');
    expect(w.batches.at(-1)?.reacted).toBeUndefined();
    expect(await w.lines()).toBe(257);
  });
});

describe('an answered deletion', () => {
  it('is taken over: nothing committed or read by JavaScript, reported as the event\'s repair, and armed again at once at the repair\'s generation', async () => {
    const w = await start();
    await armed(w);
    const js = w.jsCommits();
    const reads = await w.dumps();
    const { r, before, deletedAt } = await deleteOne(w, 2);
    expect([r.cause, r.ops, r.generation]).toEqual(['event', 1, deletedAt + 1]);
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ reaction: 2 });
    expect(w.jsCommits()).toBe(js);
    expect(await w.dumps()).toBe(reads);
    const after = await w.handles();
    expect(after.filter((_, j) => j !== 2)).toEqual(before.filter((_, j) => j !== 2));
    expect(w.k.state.view.handlesOf('ip', 'nfkeeper', 'postrouting')).toEqual(after);
    // Armed again from the followed part at the repair's generation (rearm), without waiting for the watcher to read it.
    expect(w.arms.at(-1)).toMatchObject({ generation: deletedAt + 1, armed: true });
    expect(w.arms.at(-1)!.reactions.map((x) => x.on[0]!.handle)).toEqual(after);
    expect(w.k.armed).toBe(true);
    // And the next deletion, of the rule re-added after the new handle, is answered the same way.
    const again = await deleteOne(w, 3);
    expect(w.batches.find((b) => b.generation === again.deletedAt)?.reacted).toMatchObject({ reaction: 3 });
    expect(w.jsCommits()).toBe(js);
  });

  it('refused by the guard (a commit came first): counted as a generation retry, and the pass that follows repairs it', async () => {
    const w = await start();
    await armed(w);
    const h = await w.handles();
    const retries = async () => (await w.k.metrics.generationRetries.get()).values[0]?.value ?? 0;
    const r0 = await retries();
    const repaired = nextRepair(w.k);
    w.other.commitNow(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
    const deletedAt = w.kernel.generation;
    w.other.commitNow(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
    const r = await repaired;
    await w.k.idle();
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ errno: 85, reaction: 1 });
    expect(await retries()).toBe(r0 + 1);
    expect(r.cause).toBe('event');
    expect(await w.lines()).toBe(4);
    expect(w.k.state.refusedAt).toBe(deletedAt);
  });

  it('refused otherwise: the followed part no longer knows the kernel, and a full pass repairs', async () => {
    const w = await start();
    await armed(w);
    const reads = await w.dumps();
    // The keeper's own port: the reaction's commit, which the watcher sends on the keeper's connection.
    w.kernel.refuse({ errno: 'EBUSY', portId: w.k.socket!.portId, op: (op) => op.object === 'rule' });
    const fallbacks: unknown[] = [];
    w.k.on('follow-fallback', (why) => fallbacks.push(why));
    const { r, deletedAt } = await deleteOne(w, 0);
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ errno: 16, reaction: 0 });
    expect(fallbacks[0]).toMatch(/the kernel refused a repair planned from the followed part/);
    expect(r.cause).toBe('event');
    expect(await w.dumps()).toBeGreaterThan(reads);
    expect(await w.lines()).toBe(4);
  });

  it('that is not what the followed part plans now: the followed part is off, and a read looks at what was committed', async () => {
    // The watcher holds the reactions in reverse order: the index it answers with names another of the keeper's reactions.
    const w = await start({}, (arm, conn, generation, reactions) => arm(conn, generation, [...reactions].reverse()));
    await armed(w);
    const reads = await w.dumps();
    const h = await w.handles();
    const { at: deletedAt, fallbacks } = await commitUntilGivenUp(w, new Batch().delete('rule', { ...OWNED, handle: h[2]! }));
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ reaction: 1 });
    expect(fallbacks[0]).toMatch(/armed repair differs from the plan/);
    // The watcher committed the re-add of rule 2 (its reaction 1): the pass that follows reads it, and finds nothing to do.
    expect(await w.dumps()).toBeGreaterThan(reads);
    expect(await w.text()).toEqual(FLANNEL_RULES);
    expect(w.kernel.generation).toBe(deletedAt + 1);
    // Seeded again from that read, the keeper arms again.
    await armed(w);
    expect(w.arms.at(-1)!.generation).toBe(deletedAt + 1);
  });
});

describe('when the keeper arms, and when not', () => {
  it('a pass pauses the arm; one that committed nothing takes it up again (resume), one that committed arms anew', async () => {
    const w = await start();
    await armed(w);
    const arms = w.arms.length;
    const done = w.k.request('manual', performance.now());
    expect(w.k.armed).toBe(false);
    expect((await done).ops).toBe(0);
    await w.k.idle();
    expect(w.resumes.at(-1)).toBe(true);
    expect(w.k.armed).toBe(true);
    expect(w.arms).toHaveLength(arms);
    // A commit of ours to the owned table (a reload): the arm does not hold; it is made anew from the new plan.
    await w.k.setConfig(parseConfig(`${FLANNEL_YAML}          - ip saddr 10.99.0.0/16 masquerade\n`, 'reload.yaml'));
    await armed(w);
    expect(w.arms.length).toBeGreaterThan(arms);
    expect(w.arms.at(-1)!.reactions).toHaveLength(5);
  });

  it('another writer\'s commit that no reaction answers ends the arm; armed again once the followed part is clean', async () => {
    const w = await start();
    await armed(w);
    const arms = w.arms.length;
    const h = await w.handles();
    const repaired = nextRepair(w.k);
    await w.other.commit(new Batch().insert('rule', { ...OWNED, position: h[1]!, ...rule('ip saddr 192.0.2.1 accept') }));
    const foreignAt = w.kernel.generation;
    const r = await repaired;
    expect(w.batches.find((b) => b.generation === foreignAt)?.reacted).toBeUndefined();
    expect([r.cause, r.ops]).toEqual(['event', 1]);
    await armed(w);
    expect(w.arms.length).toBe(arms + 1);
    expect(w.arms.at(-1)!.generation).toBeGreaterThan(foreignAt);
  });

  it('not while the fight holds repairs back: the held-back deletion is left to JavaScript', async () => {
    // Each repair raises the level: the next waits a minute.
    const w = await start({ fight: { threshold: 1, windowMs: 3_600_000, baseMs: 60_000, capMs: 60_000, quietMs: 3_600_000 } });
    await armed(w);
    await deleteOne(w, 1);
    expect(w.k.status().fightLevel).toBe(1);
    expect(w.k.armed).toBe(false);
    await w.k.request('manual', performance.now()).catch(() => undefined);
    await w.k.idle();
    expect(w.k.armed).toBe(false);
    const arms = w.arms.length;
    const h = await w.handles();
    await w.other.commit(new Batch().delete('rule', { ...OWNED, handle: h[0]! }));
    await turns('the watcher to hand it over', () => w.batches.at(-1)?.generation === w.kernel.generation);
    await w.k.idle();
    expect(w.batches.at(-1)?.reacted).toBeUndefined();
    expect(w.arms).toHaveLength(arms);
    expect(await w.lines()).toBe(3);
    expect(w.k.status().tables[0]).toMatchObject({ state: 'drifting' });
  });

  it('stop clears the timer that would arm after the fight\'s back-off', async () => {
    const w = await start({ fight: { threshold: 1, windowMs: 3_600_000, baseMs: 60_000, capMs: 60_000, quietMs: 3_600_000 } });
    await armed(w);
    const set = vi.spyOn(globalThis, 'setTimeout');
    const cleared = vi.spyOn(globalThis, 'clearTimeout');
    try {
      await deleteOne(w, 1);
      await w.k.request('manual', performance.now()).catch(() => undefined);
      await w.k.idle();
      // The arming's timer: the only one as long as the back-off (the fight's wait, a minute less what passed).
      const timers = set.mock.calls.map((c, i) => ({ ms: c[1] ?? 0, timer: set.mock.results[i]!.value as NodeJS.Timeout }))
        .filter((t) => t.ms > 50_000 && t.ms <= 60_000);
      expect(timers).toHaveLength(1);
      expect(cleared.mock.calls.some((c) => c[0] === timers[0]!.timer)).toBe(false);
      await w.k.stop();
      expect(cleared.mock.calls.some((c) => c[0] === timers[0]!.timer)).toBe(true);
      expect(w.k.armed).toBe(false);
    } finally {
      set.mockRestore();
      cleared.mockRestore();
    }
  });

  it('not again at a generation where the watcher would not arm; again once the generation moved', async () => {
    let refuse = true;
    const w = await start({}, (arm, ...a) => (refuse ? false : arm(...a)));
    await turns('the keeper to ask', () => w.arms.length > 0);
    const at = w.arms[0]!.generation;
    for (let i = 0; i < 3; i++) await w.k.request('manual', performance.now());
    await w.k.idle();
    expect(w.arms).toHaveLength(1);
    expect(w.k.armed).toBe(false);
    refuse = false;
    w.other.commitNow(new Batch().add('table', { family: 'ip', name: 'elsewhere' }));
    await turns('the watcher to read it', () => w.k.state.monitor!.progress!().lastGeneration === at + 1);
    await w.k.request('manual', performance.now());
    await w.k.idle();
    expect(w.arms.map((a) => [a.generation, a.armed])).toEqual([[at, false], [at + 1, true]]);
    expect(w.k.armed).toBe(true);
  });

  it('a reload disarms it (the armed repairs re-add the old rules), and so does stop', async () => {
    const w = await start();
    await armed(w);
    const monitor = w.k.state.monitor!;
    let disarms = 0;
    const disarm = monitor.disarm!.bind(monitor);
    monitor.disarm = () => { disarms++; disarm(); };
    const h = await w.handles();
    // Held in the queue behind a pass, so the reload's install runs while the arm would still answer.
    const reload = w.k.setConfig(parseConfig(`${FLANNEL_YAML}          - ip saddr 10.99.0.0/16 masquerade\n`, 'reload.yaml'));
    expect(disarms).toBe(1);
    await reload;
    expect(await w.lines()).toBe(5);
    expect(h).toHaveLength(4);
    await w.k.stop();
    expect(disarms).toBeGreaterThan(1);
    expect(w.k.armed).toBe(false);
  });
});

describe('a tick due before the watcher reads a deletion (timers run before the loop polls)', () => {
  // The tick reads the watcher first (FollowedView.current), as the proofs do: the deletion's
  // record is handed over, and answered, before the tick reads the generation. Run in the
  // deletion's own turn, before the watcher's read.
  const tickNow = (w: World) => (w.k as unknown as { tick(): void }).tick();

  async function deleteThenTick(w: World) {
    const h = await w.handles();
    const js = w.jsCommits();
    const repaired = nextRepair(w.k);
    await w.other.commit(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
    const deletedAt = w.kernel.generation;
    tickNow(w);
    const r = await repaired;
    await w.k.idle();
    expect(await w.lines()).toBe(4);
    return { r, deletedAt, js: w.jsCommits() - js };
  }

  it('armed: the watcher\'s reaction is the repair, no pass paused it', async () => {
    const w = await start();
    await armed(w);
    const { r, deletedAt, js } = await deleteThenTick(w);
    expect([r.cause, r.generation]).toEqual(['event', deletedAt + 1]);
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ reaction: 1 });
    expect(js).toBe(0);
  });

  it('not armed: the event repair answers it inside the tick, not a pass', async () => {
    const w = await start({}, () => false);
    await turns('the keeper to ask', () => w.arms.length > 0);
    await w.k.idle();
    const { r, deletedAt, js } = await deleteThenTick(w);
    expect([r.cause, r.generation]).toEqual(['event', deletedAt + 1]);
    expect(js).toBe(1);
  });
});

describe('each condition of Arming.arm, one at a time (the keeper\'s Arming, asked directly)', () => {
  /** A keeper armed once, then disarmed: the next arm() decides by the one condition a case changes. */
  async function disarmed() {
    const w = await start();
    await armed(w);
    const arming = (w.k as unknown as { arming: Arming }).arming;
    arming.disarm();
    const state = w.k.state as KeeperState;
    const arms = w.arms.length;
    /** Arms if it may; whether it asked the watcher. */
    const tried = () => {
      const before = w.arms.length + w.resumes.length;
      arming.arm();
      return w.arms.length + w.resumes.length > before;
    };
    return { w, arming, state, arms, tried };
  }

  it('as it is: asks the watcher and is armed', async () => {
    const { w, tried } = await disarmed();
    expect(tried()).toBe(true);
    expect(w.k.armed).toBe(true);
  });

  it('not with a table being retired (the armed repairs know only the desired tables)', async () => {
    const { w, state, tried } = await disarmed();
    state.retired.push({ family: 'ip', name: 'old' });
    expect(tried()).toBe(false);
    state.retired.length = 0;
    expect(tried()).toBe(true);
    expect(w.k.armed).toBe(true);
  });

  it('not at the generation where the guard refused a repair (the watcher trails the kernel)', async () => {
    const { w, state, tried } = await disarmed();
    state.refusedAt = w.kernel.generation;
    expect(tried()).toBe(false);
    state.refusedAt = -1;
    expect(tried()).toBe(true);
  });

  it('not with the view\'s events off (it holds no proof of what the kernel holds)', async () => {
    const { w, state, tried } = await disarmed();
    state.view.invalidate('a test');
    expect(tried()).toBe(false);
    expect(w.k.armed).toBe(false);
  });

  it('not when the followed part is not exact at the watcher\'s last generation (a record handed over it has not applied)', async () => {
    const { w, state, tried } = await disarmed();
    const monitor = state.monitor!;
    const progress = monitor.progress!.bind(monitor);
    monitor.progress = () => ({ ...progress(), delivered: progress().delivered + 1 });
    expect(tried()).toBe(false);
    monitor.progress = progress;
    expect(tried()).toBe(true);
    expect(w.k.armed).toBe(true);
  });

  it('not once stopped', async () => {
    const { w, state, tried } = await disarmed();
    state.stopped = true;
    expect(tried()).toBe(false);
    state.stopped = false;
    expect(tried()).toBe(true);
    expect(w.k.armed).toBe(true);
  });

  it('a plan the view cannot follow (not one rule re-added) turns its events off and arms nothing', async () => {
    const { w, state, arms, arming } = await disarmed();
    // The view (view.ts) plans the repair after each deletion.
    state.view.plan = () => 'clean';
    arming.arm();
    expect(w.arms).toHaveLength(arms);
    expect(w.k.armed).toBe(false);
    expect(w.k.followState()).toMatchObject({ exact: false, reason: expect.stringMatching(/^arming the monitor: after a deletion of rule handle \d+ in nfkeeper postrouting, the plan is not one rule re-added/) });
  });
});

describe('undo reactions for owned sets', () => {
  const SETS = `
tables:
  - family: ip
    name: e
    sets:
      - { name: plain, type: ipv4_addr, elements: [10.0.0.1, 10.0.0.2, 10.0.0.3] }
      - { name: counted, type: ipv4_addr, statements: counter, elements: [10.0.1.1, 10.0.1.2] }
      - { name: ranges, type: ipv4_addr, flags: [interval], elements: [10.0.2.0/24] }
    chains:
      - name: c
        type: filter
        hook: forward
        priority: filter
        rules:
          - ip saddr @plain accept
`;
  const PLAIN = { family: 'ip' as Family, table: 'e', set: 'plain' };
  const keys = async (w: World) => (await w.other.listElements(PLAIN)).map((e) => e.key).sort();

  it('one per set followed and held as desired, without statements: not a set with statements or one not followed', async () => {
    const w = await start({ config: parseConfig(SETS) });
    await armed(w);
    const undos = w.arms.at(-1)!.reactions.filter((r) => r.undo);
    expect(undos.map((r) => r.on)).toEqual([[{ type: 'delsetelem', family: 'ip', table: 'e', name: 'plain' }]]);
  });

  it('an answered deletion is taken over (nothing committed or read by JavaScript) and the keeper arms again once the followed part took the repair', async () => {
    const w = await start({ config: parseConfig(SETS) });
    await armed(w);
    const want = await keys(w);
    const [j0, d0, a0] = [w.jsCommits(), await w.dumps(), w.arms.length];
    const repaired = nextRepair(w.k);
    await w.other.commit(new Batch().delete('element', { ...PLAIN, elements: [{ key: want[1]! }] }));
    const r = await repaired;
    await w.k.idle();
    expect(r.cause).toBe('event');
    expect(await keys(w)).toEqual(want);
    expect([w.jsCommits(), await w.dumps()]).toEqual([j0, d0]);
    expect(w.batches.some((b) => b.reacted !== undefined && 'handles' in b.reacted)).toBe(true);
    await armed(w);
    expect(w.arms.length).toBeGreaterThan(a0);
    expect(w.k.followState()?.exact).toBe(true);
  });

  it('an answer the keeper takes for an undo that did not add elements back: the followed part is off, and a read looks at what was committed', async () => {
    // The watcher holds the reactions in reverse order: its answer to the rule's deletion (its
    // reaction 1, the rule's re-add) is the keeper's reaction 1, the undo of set plain.
    const w = await start({ config: parseConfig(SETS) }, (arm, conn, generation, reactions) => arm(conn, generation, [...reactions].reverse()));
    await armed(w);
    expect(w.arms.at(-1)!.reactions.map((r) => r.undo === true)).toEqual([false, true]);
    const reads = await w.dumps();
    const [rule] = await w.other.listRules({ family: 'ip', table: 'e', chain: 'c' });
    const { at: deletedAt, fallbacks } = await commitUntilGivenUp(w, new Batch().delete('rule', { family: 'ip', table: 'e', chain: 'c', handle: rule!.handle! }));
    expect(w.batches.find((b) => b.generation === deletedAt)?.reacted).toMatchObject({ reaction: 1 });
    expect(fallbacks[0]).toMatch(/armed repair differs from the plan/);
    expect(await w.dumps()).toBeGreaterThan(reads);
    expect(await w.other.listRules({ family: 'ip', table: 'e', chain: 'c' })).toHaveLength(1);
    expect(w.kernel.generation).toBe(deletedAt + 1);
  });

  it('several elements deleted in one commit are added back by the undo', async () => {
    const w = await start({ config: parseConfig(SETS) });
    await armed(w);
    const want = await keys(w);
    const j0 = w.jsCommits();
    const repaired = nextRepair(w.k);
    await w.other.commit(new Batch().delete('element', { ...PLAIN, elements: [{ key: want[0]! }, { key: want[2]! }] }));
    await repaired;
    await w.k.idle();
    expect(await keys(w)).toEqual(want);
    expect(w.jsCommits()).toBe(j0);
    expect(w.k.followState()?.exact).toBe(true);
  });
});
