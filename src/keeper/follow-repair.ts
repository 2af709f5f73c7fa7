/**
 * The two repair paths planned from the kernel view's events (view.ts), without a dump: the event
 * repair, run synchronously inside the monitor's callback (or taken over from the monitor's armed
 * repair, which committed before any JavaScript ran), and the follow pass, the scheduler's first
 * try. Both prove the view is the kernel's state by the generation guard of their commit.
 */
import type { CommitResult } from '../netlink/conn.js';
import type { MonitorBatch } from '../netlink/events.js';
import type { Op } from '../netlink/ops.js';
import { elementId, sameContent } from '../model/elements.js';
import { GenerationMismatchError } from '../base/errors.js';
import { sendGuarded } from '../netlink/guard.js';
import { FOLLOW_MAX_ELEMENTS, FOLLOW_MAX_OPS, type FollowPlan } from './plan.js';
import { sameOps, type Arming } from './arming.js';
import type { Reporter } from './report.js';
import type { Scheduler } from './scheduler.js';
import type { KeeperState } from './state.js';
import { deliberate, type Cause, type DoneRepair, type Outcome, type RepairPath, type RepairRequest } from './outcome.js';
import { EVENTS_WAIT_MS } from './view.js';

const ERESTART = 85;

/** What both follow paths do around their commit. */
class FollowCommit {
  constructor(protected readonly k: KeeperState, protected readonly reporter: Reporter, protected readonly arming: Arming,
    protected readonly scheduler: Scheduler) {}

  /**
   * A repair planned from the followed part was refused: true when by the guard (a commit the monitor had
   * not delivered yet came first; the next attempt reads the generation), else the followed part is off.
   */
  protected refused(e: unknown, generation: number, counted = false): boolean {
    const k = this.k;
    k.view.forget(generation + 1);
    if (e instanceof GenerationMismatchError) {
      if (!counted) k.metrics.generationRetries.inc();
      k.refusedAt = generation;
      return true;
    }
    k.view.invalidate(`the kernel refused a repair planned from the followed part: ${(e as Error).message}`);
    k.log.warn({ err: (e as Error).message }, 'a repair planned from the events was refused; reading the kernel instead');
    return false;
  }

  /** The followed part could not plan this pass: the full pass will (said once per pass, for logs and the bench). */
  protected fallback(reason: string | undefined): undefined {
    this.k.log.debug({ reason }, 'repairing from a full read instead of the followed part');
    this.k.events.emit('follow-fallback', reason);
    return undefined;
  }

  /** After the commit of a repair planned from the followed part, guarded at `generation`. */
  protected committed(plan: FollowPlan, generation: number, echoed: void | CommitResult, cause: Cause,
    detectedAt: number, committedNs?: number): Outcome {
    const k = this.k;
    k.options.trace?.('committed', committedNs);
    const isDeliberate = deliberate(cause);
    const ops = plan.batch.length;
    const committedAt = performance.now();
    // The guard held at `generation`, where the followed part was the kernel: our commit made generation + 1,
    // the desired state. The handles of the rules it added came back with its acknowledgements:
    // the followed part takes them now, and the commit's own events need not wake this thread again
    // (else, as from a kernel that does not echo, they bring the handles).
    if (echoed?.handles && k.view.followEcho(generation + 1, echoed.handles)) k.monitor!.skipOwn?.(generation + 1);
    // What the next pass decides by is set now: the fight's clock and the verified generation.
    if (!isDeliberate && k.fight.repaired(committedAt)) this.reporter.fightRaised(plan.drift);
    this.reporter.drifting = new Set();
    this.reporter.verified(generation + 1, 'commit', false);
    // What only reports the repair (metrics, the log line, the 'repaired' event) waits until the
    // keeper has given the CPU up once: on a busy node the process that the broken rule held up
    // runs first (see Reporter.later). A deliberate change's caller reads them as soon as it returns.
    const done: DoneRepair = { drift: plan.drift, ops, generation: generation + 1, cause, detectedAt, committedAt, event: false, batch: plan.batch };
    if (isDeliberate) this.reporter.reportFollowRepair(done);
    else this.reporter.later(done);
    // A table the events lost is left to a full pass, which reads it alone: this repair answered the others.
    if (!k.view.valid) this.scheduler.schedule(cause, detectedAt);
    return { status: 'repaired', drift: plan.drift, ops, attempts: 1, generation: generation + 1 };
  }
}

/**
 * A pass from the followed part, without a dump: when the events prove the followed part is the kernel's state
 * now, its difference from the desired state is repaired in one batch guarded by that generation.
 * Undefined: no proof (or a refusal, a race), the full pass decides.
 */
export class FollowPass extends FollowCommit implements RepairPath<Promise<Outcome | undefined>> {
  async attempt({ cause, detectedAt }: RepairRequest): Promise<Outcome | undefined> {
    const k = this.k;
    const view = k.view;
    const monitor = k.monitor;
    const isDeliberate = deliberate(cause);
    // A deliberate change other than of elements left the tables it changed unknown (Keeper.install: desiredChanged): the full pass's.
    if (!view.following || (isDeliberate && !view.valid) || !monitor?.progress || cause === 'startup' || k.retired.length > 0) return undefined;
    const sock = k.sock!;
    const trace = k.options.trace;
    trace?.('pass');
    // First without reading the kernel: the generation the monitor saw last is the one to guard the
    // repair with, and the kernel refuses the commit unless that is still its generation, which
    // proves what a read would. Only if the monitor trails (a batch not delivered yet, or the guard
    // refused because a commit it has not seen came in between) is the generation read, and the
    // monitor waited for, as long as that is cheaper than a full read.
    for (let careful = false; ; careful = true) {
      let generation: number;
      if (!careful) {
        // What the monitor's socket holds is read first: the generation is the kernel's now, or nearly.
        const p = view.current()!;
        generation = p.lastGeneration;
        // The guard refused a repair at this generation already (the event repair): the monitor trails.
        if (generation === k.refusedAt || !view.exactAt(generation, p)) continue;
      } else {
        // The kernel's generation, and the monitor read until it has reached it: a commit can move the
        // generation before its notifications are queued, and inside the monitor's callback (a refused
        // event repair) nothing is read until the callback returns.
        generation = sock.generation();
        await view.settledAt(generation);
        if (k.stopped) return undefined;
        // Under a neighbour's commits the monitor may be past the generation read by now: the followed
        // part is proved at the monitor's (the guard refuses the repair if the kernel moved on since).
        const p = monitor.progress();
        if (p.lastGeneration > generation) generation = p.lastGeneration;
        if (!view.exactAt(generation, p)) return this.fallback(view.following ? 'no proof that the followed part is the kernel\'s state now' : view.reason);
      }
      trace?.('proved');
      const plan = view.plan();
      trace?.('planned');
      if (plan === undefined) return this.fallback(view.valid ? `more than ${FOLLOW_MAX_OPS} rule ops or ${FOLLOW_MAX_ELEMENTS} elements` : view.reason);
      if (plan === 'clean') {
        // Nothing to commit, so no guard to prove the generation: say in sync at one read from the kernel.
        if (!careful) continue;
        this.reporter.drifting = new Set();
        // Where the events prove that no commit named an owned table since a read last found them as
        // desired, that read verifies this generation too: the safety net owes no read-back for it
        // (a neighbour's commits elsewhere would otherwise arm one every trustOwnCommitMs).
        const readAt = k.readAt;
        const read = readAt !== undefined && readAt <= generation && k.desired.every((t) => view.untouched(t, readAt, generation));
        this.reporter.verified(generation, read ? 'keep' : 'followed');
        return { status: 'in-sync', drift: [], ops: 0, attempts: 1, generation };
      }
      const waitMs = isDeliberate ? 0 : k.fight.waitFrom(performance.now());
      if (waitMs > 0) {
        this.reporter.drifting = new Set(plan.drift.map((d) => `${d.family} ${d.table}`));
        for (const d of plan.drift) k.metrics.drift.inc({ kind: d.kind });
        this.reporter.unverified();
        this.scheduler.after(waitMs, cause, detectedAt);
        return { status: 'deferred', drift: plan.drift, ops: 0, attempts: 1 };
      }
      view.expect(generation + 1, plan.expected);
      // Refused by a commit the monitor had not delivered yet: where the events prove it named none of
      // the followed tables, the plan stands and goes again as encoded (the full pass's resend, sendGuarded).
      let guardAt = generation;
      let sent;
      try {
        sent = await sendGuarded(sock, plan.batch, generation, {
          echo: true,
          onMismatch: () => k.metrics.generationRetries.inc(),
          stillHolds: async (planned, batch) => {
            const at = k.stopped ? undefined : await view.unchangedSince(planned, [...k.desired, ...batch.tables]);
            if (at !== undefined && at > guardAt) {
              view.forget(guardAt + 1);
              view.expect(at + 1, plan.expected);
              guardAt = at;
            }
            return at;
          },
        });
      } catch (e) {
        this.refused(e, guardAt);
        return this.fallback(view.reason);
      }
      if (sent.at === undefined) {
        this.refused(sent.refused ?? new GenerationMismatchError(guardAt), guardAt, true);
        if (!careful) continue;
        return this.fallback('another commit came first (the guard refused the repair)');
      }
      return this.committed(plan, guardAt, sent.echoed, cause, detectedAt);
    }
  }
}

/** The foreign commit the monitor has just handed over (Keeper.onEvents). */
export interface EventRequest extends RepairRequest {
  batch: MonitorBatch;
}

/**
 * The repair of the foreign commit the monitor has just handed over, at once, inside the event's
 * callback: taken over from the monitor's armed repair when it answered the batch, else the followed part
 * pass's first attempt run synchronously. Undefined: nothing was committed (or the guard refused
 * it), and the caller requests a pass, which decides as before.
 */
export class EventRepair extends FollowCommit implements RepairPath<Outcome | undefined, EventRequest> {
  attempt(req: EventRequest): Outcome | undefined {
    const native = req.batch.reacted;
    return native !== undefined ? this.takeOver(req.batch, native, req.detectedAt) : this.repairNow(req.detectedAt);
  }

  /**
   * The follow pass's first attempt (guarded by the monitor's last generation, no read), without the
   * request queue's promises and microtask hops, when nothing stands in its way: no pass running
   * or queued, the followed part exact at that generation, a small plan, no fight delay, and a connection
   * that commits inline.
   */
  private repairNow(detectedAt: number): Outcome | undefined {
    const k = this.k;
    const view = k.view;
    const monitor = k.monitor;
    const sock = k.sock!;
    if (this.scheduler.committing() || !view.following || !monitor?.progress || k.retired.length > 0 || sock.commitNow === undefined) return undefined;
    const p = monitor.progress();
    const generation = p.lastGeneration;
    if (generation === k.refusedAt || !view.exactAt(generation, p)) return undefined;
    const trace = k.options.trace;
    trace?.('pass');
    trace?.('proved');
    let plan;
    try {
      plan = view.plan();
    } catch {
      // Thrown inside the monitor's callback it would end the process: the pass requested instead
      // plans again, and reports what fails (Reporter.fail).
      return undefined;
    }
    trace?.('planned');
    if (plan === undefined || plan === 'clean' || k.fight.waitFrom(performance.now()) > 0) return undefined;
    view.expect(generation + 1, plan.expected);
    let echoed;
    try {
      echoed = sock.commitNow(plan.batch, { expectGeneration: generation, echo: true });
    } catch (e) {
      // A pass follows (the caller's request): after a refusal by the guard it reads the generation first.
      if (!this.refused(e, generation)) this.fallback(view.reason);
      return undefined;
    }
    if (echoed === false) {
      view.forget(generation + 1);
      return undefined;
    }
    const outcome = this.committed(plan, generation, echoed, 'event', detectedAt);
    // The event is counted with the repair's report, after the wait.
    this.reporter.lastAnsweredEvent();
    // Armed again from the echo, as after a reaction: an arm left to the wait after the event
    // would find the monitor not yet past our commit, and then wait for the tick.
    if (echoed) this.arming.rearm(generation + 1);
    return outcome;
  }

  /**
   * The monitor's armed reaction (Arming) answered batch `b`, a foreign deletion of one owned rule,
   * before this thread ran: it committed the batch the planner made for that deletion when arming,
   * guarded by the batch's generation, or the kernel refused it. The followed part has just applied `b`;
   * the plan it makes now must be what was committed (else it no longer knows the kernel's state).
   * The bookkeeping is repairNow's, after the commit; then the monitor is armed again for the next
   * deletion. Undefined (the caller requests a pass): refused, or not what the followed part plans now.
   */
  private takeOver(b: MonitorBatch, native: NonNullable<MonitorBatch['reacted']>, detectedAt: number): Outcome | undefined {
    const k = this.k;
    const view = k.view;
    const generation = b.generation;
    this.arming.armed = false;  // the batch ended the monitor's arm
    if ('errno' in native) {
      const refused = native.errno === ERESTART ? new GenerationMismatchError(generation)
        : new Error(`the kernel refused the armed repair (errno ${native.errno})`);
      if (view.follows && !this.refused(refused, generation)) this.fallback(view.reason);
      return undefined;
    }
    let plan;
    try {
      plan = view.following && view.generation === generation ? view.plan() : undefined;
    } catch {
      plan = undefined;
    }
    const reaction = this.arming.reaction(native.reaction);
    const same = !!reaction && typeof plan === 'object' && (reaction.undo ? addsBack(plan.batch.ops, b) : sameOps(plan.batch.ops, reaction.ops));
    if (!view.follows || !plan || plan === 'clean' || !same) {
      // Committed, but not what the followed part plans now: it no longer knows the kernel's state.
      this.arming.disarm();
      view.invalidate('the monitor\'s armed repair differs from the plan');
      this.fallback(view.reason);
      return undefined;
    }
    view.expect(generation + 1, plan.expected);
    const echoed = native.handles.length > 0 ? { handles: new Map(native.handles) } : undefined;
    const outcome = this.committed(plan, generation, echoed, 'event', detectedAt, native.committedNs);
    this.reporter.lastAnsweredEvent();
    // With the handles echoed the followed part is exact at the repair's generation: the next deletion's
    // reactions are planned from it now. Else (elements: an undo) the commit's events bring them,
    // and the monitor is armed once the followed part has followed them (Keeper.armSoon).
    this.arming.rearm(generation + 1);
    return outcome;
  }
}

/**
 * Whether `ops` (the planner's, after batch `b`) add back exactly the elements that `b`, deletions
 * from one set, removed: what an undo reaction committed (the deletions' elements, sent back).
 */
function addsBack(ops: readonly Op[], b: MonitorBatch): boolean {
  const op = ops[0];
  if (ops.length !== 1 || op?.object !== 'element' || op.verb !== 'add') return false;
  let deleted = 0;
  const want = new Map(op.elements.map((x) => [elementId(x), x]));
  for (const e of b.events) {
    if (e.type !== 'delsetelem' || e.family !== op.family || e.table !== op.table || e.name !== op.set || !e.elements?.length) return false;
    for (const x of e.elements) {
      const w = want.get(elementId(x));
      if (w === undefined || !sameContent(w, x)) return false;
      deleted++;
    }
  }
  return deleted === op.elements.length;
}
