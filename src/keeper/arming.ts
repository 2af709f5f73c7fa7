/**
 * The monitor's armed reactions (NftWatch.arm): the keeper decides ahead of time how it would answer
 * another writer's deletion of each owned rule, and hands the monitor the batch its planner
 * (KernelView.plan) would commit, keyed by the event that deletion shows, and for each owned set
 * an undo of an element deletion; the monitor commits it on the event's wake-up, before any
 * JavaScript runs. The monitor only matches events and sends bytes: which commits get a reaction,
 * what it commits and when the arm ends are decided here. This keeps track of whether the monitor
 * holds a current arm.
 */
import type { EventKey, Reaction } from '../netlink/events.js';
import type { Op } from '../netlink/ops.js';
import type { SetConfig } from '../model/sets.js';
import type { KeeperState } from './state.js';

/** Owned rules up to which the monitor is armed with their repairs. */
const ARM_MAX_RULES = 256;

export class Arming {
  /** The monitor holds an armed repair that is still current, as far as this thread knows. */
  armed = false;
  /** The generation the monitor's arm holds the owned tables at. */
  armedAt = -1;
  /** The generation at which arming last failed. */
  private failedAt = -1;
  /** The reactions the monitor holds, by their index (MonitorBatch.reacted.reaction). */
  private reactions: readonly Reaction[] = [];
  /** Arms once a fight's back-off is over (allowed). */
  private afterFight?: NodeJS.Timeout;
  /** Whether a desired set has no statements (statementless), by its config object. */
  private readonly plainSets = new WeakMap<SetConfig, boolean>();

  /** `busy`: a pass that may commit is running or queued (Scheduler.committing), which plans and commits on its own. */
  constructor(private readonly k: KeeperState, private readonly busy: () => boolean) {}

  /**
   * Arms the monitor (Monitor.arm) with the repair of a foreign deletion of each owned rule, while
   * the view is exact and clean at the monitor's last generation and the event repair would
   * repair at once (no pass running, no fight delay, no retired table): the repair then costs the
   * event's wake-up and the commit, no JavaScript before it. Small rulesets only (ARM_MAX_RULES).
   */
  arm(): void {
    const { view, monitor } = this.k;
    if (!this.allowed() || !monitor?.progress) return;
    const p = monitor.progress();
    if (p.lastGeneration === this.k.refusedAt || !view.exactAt(p.lastGeneration, p)) return;
    // Not again at a generation where it could not (an addon without it, a socket it cannot use): the tick asks each second.
    if (p.lastGeneration === this.failedAt || !view.clean(ARM_MAX_RULES)) return;
    // Nothing touched the owned tables since the last arm (the pass in between committed nothing there): take it up.
    if (monitor.resume?.()) {
      this.armed = true;  // at the armedAt it had
      return;
    }
    this.armAt(p.lastGeneration);
  }

  /**
   * Arms the monitor again after a repair of ours that made `generation`, the view's own (it took
   * the commit's echoed handles): the monitor has not read that commit yet, and skips it.
   */
  rearm(generation: number): void {
    const view = this.k.view;
    if (!this.allowed() || view.generation !== generation || !view.clean(ARM_MAX_RULES)) {
      this.disarm();
      return;
    }
    this.armAt(generation);
  }

  /** The reaction the monitor committed (MonitorBatch.reacted.reaction). */
  reaction(index: number): Reaction | undefined {
    return this.reactions[index];
  }

  /** Arms the monitor unless it is armed. */
  ensure(): void {
    if (!this.armed) this.arm();
  }

  /** The keeper stops: the arm is forgotten and no timer arms it again. */
  stop(): void {
    clearTimeout(this.afterFight);
    this.afterFight = undefined;
    this.disarm();
  }

  /** The monitor's armed repair is forgotten: the next foreign change is this thread's to answer. */
  disarm(): void {
    this.armed = false;
    this.k.monitor?.disarm?.();
  }

  /**
   * A pass plans and commits on its own: the monitor must not repair meanwhile. Paused, not
   * forgotten: after a pass that committed nothing to the owned tables (a tick's, when only
   * commits elsewhere moved the generation) it takes up the same arm (arm()).
   */
  pause(): void {
    this.armed = false;
    this.k.monitor?.pause?.();
  }

  /** Whether arming after the keeper has waited once is worth asking for. */
  wanted(): boolean {
    return !this.armed && !!this.k.monitor?.arm;
  }

  /** Whether the next arm after a wait may be asked for at all (armSoon). */
  possible(): boolean {
    return !this.armed && !this.k.stopped && !!this.k.monitor?.arm;
  }

  /**
   * What arming needs whatever the generation: the event repair would repair at once. In a fight
   * that is once the back-off since the last repair is over (Fight.waitFrom): armed then, by a
   * timer, so that a deletion after it is answered as fast as one outside a fight.
   */
  private allowed(): boolean {
    const k = this.k;
    if (k.stopped || this.busy() || !k.view.valid || !k.monitor?.arm || !k.sock || k.retired.length > 0) return false;
    const wait = k.fight.waitFrom(performance.now());
    if (wait > 0 && this.afterFight === undefined) {
      this.afterFight = setTimeout(() => {
        this.afterFight = undefined;
        this.ensure();
      }, Math.ceil(wait)).unref();
    }
    return wait === 0;
  }

  /** Arms at `generation`, where the view is the kernel's state and clean. */
  private armAt(generation: number): void {
    const { monitor, sock } = this.k;
    this.armed = false;
    let reactions: Reaction[] | undefined;
    try {
      reactions = this.plan();
      if (reactions.length > 0) this.armed = monitor!.arm!(sock!, generation, reactions);
    } catch (e) {
      this.armed = false;
      this.k.log.debug({ err: (e as Error).message }, 'the monitor could not be armed');
    }
    if (this.armed) {
      this.armedAt = generation;
      this.reactions = reactions!;
    } else {
      this.failedAt = generation;
      this.reactions = [];
    }
  }

  /**
   * Per owned rule, the deletion of that rule alone by another writer and what the keeper's
   * planner commits after it (KernelView.planAfter: the view follows that commit, plans, and is put
   * back as it was). The view is clean here, so the plan re-adds that rule where it stood.
   * Per owned set whose elements the view follows, an undo of another writer's deletion of some of
   * its elements (a commit of element deletions from that set alone): the view holds every desired element and no other, so what the
   * planner commits after any such deletion is those elements added back (EventRepair.takeOver
   * checks it), whatever the set's size. Not for sets with statements per element (a counter's
   * value would come back with the element).
   */
  private plan(): Reaction[] {
    const { view, sock, desired } = this.k;
    const reactions: Reaction[] = [];
    for (const t of desired) {
      for (const c of t.chains) {
        const handles = view.handlesOf(t.family, t.name, c.name);
        if (!handles) throw new Error(`the view does not hold chain ${t.family} ${t.name} ${c.name}`);
        for (const handle of handles) {
          const on: EventKey = { type: 'delrule', family: t.family, table: t.name, name: c.name, handle };
          const plan = view.planAfter(on, sock!.portId);
          // A rule that brings anonymous sets takes them with it: its deletion's commit also shows
          // the sets' deletions, by names the view does not keep, so no reaction could match it.
          if (plan.batch.length === 1) reactions.push({ on: [on], ops: plan.batch.ops });
        }
      }
      for (const sc of t.sets ?? []) {
        if (view.elementsDiffering(t.family, t.name, sc.name) !== 0 || !this.statementless(sc)) continue;
        reactions.push({ on: [{ type: 'delsetelem', family: t.family, table: t.name, name: sc.name }], undo: true });
      }
    }
    return reactions;
  }

  /** No statements on the set or any of its elements (per desired set, looked at once). */
  private statementless(sc: SetConfig): boolean {
    let plain = this.plainSets.get(sc);
    if (plain === undefined) {
      plain = !sc.set.exprs?.length && sc.elements.every((e) => !e.exprs?.length);
      this.plainSets.set(sc, plain);
    }
    return plain;
  }
}

/** Whether `a` and `b` are the same ops, as the planner makes them (the same frozen expressions). */
export function sameOps(a: readonly Op[], b: readonly Op[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as unknown as Record<string, unknown>;
    const y = b[i] as unknown as Record<string, unknown>;
    const keys = Object.keys(x);
    if (keys.length !== Object.keys(y).length) return false;
    for (const k of keys) if (x[k] !== y[k] && JSON.stringify(x[k]) !== JSON.stringify(y[k])) return false;
  }
  return true;
}
