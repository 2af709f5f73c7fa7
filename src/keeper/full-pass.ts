/**
 * The full pass: Reconciler.once over the owned tables (from the known state, by digests, or a
 * dump), the path every cause can take and the only one for start-up, reloads that change rules
 * and retired tables. An observation that found everything as desired seeds the view's events.
 */
import { countRules } from '../model/desired.js';
import { describeOp } from '../netlink/ops.js';
import { COLLECT_BEFORE_OPS, collectGarbage } from '../base/heap.js';
import { ownerIdsOf } from '../owners/index.js';
import { TableOwnedError, protectionOf, type Protection } from './table.js';
import type { Observation } from './reconciler.js';
import type { Reporter } from './report.js';
import type { Scheduler } from './scheduler.js';
import type { KeeperState } from './state.js';
import { deliberate, type Outcome, type RepairPath, type RepairRequest } from './outcome.js';

export class FullPass implements RepairPath<Promise<Outcome>> {
  constructor(private readonly k: KeeperState, private readonly reporter: Reporter, private readonly scheduler: Scheduler) {}

  async attempt({ cause, detectedAt, background = false }: RepairRequest): Promise<Outcome> {
    const k = this.k;
    const reporter = this.reporter;
    const sock = k.sock!;
    // A deliberate change (new config, owners) is not something undone by a neighbour: no fight.
    const isDeliberate = deliberate(cause);
    let lastObservation: Observation | undefined;
    /** What the pass committed, in nft words, for the foreign changes it answered (a few suffice). */
    let opsText: string[] | undefined;
    let r;
    // The desired state this pass enforces: a reload meanwhile must not seed the followed part from this observation.
    const desired = k.desired;
    // The safety net's read-back reads the kernel, but by digests from the known state, decoding nothing (Reconciler.observe).
    const readBack = k.readBackDue;
    k.readBackDue = false;
    const wasValid = k.view.valid;
    try {
      r = await k.reconciler!.once({
        useKnown: true,
        readBack,
        deferUnechoedRead: cause === 'startup',
        // Restarted onto what an earlier keeper wrote, or before the followed part is seeded (a start
        // from empty: the handles not known yet): rules are recognised by digest, not decoded.
        adopt: cause === 'startup' || (k.view.follows && !k.view.valid),
        keepKnown: true,
        tables: desired,
        ownerIds: k.config.owners ? ownerIdsOf(k.owners) : undefined,
        onObserved: (observed) => {
          for (const o of observed) reporter.tableProtection(`${o.family} ${o.name}`, protectionOf(o.table, sock.portId));
        },
        onObservation: (observation) => {
          lastObservation = observation;
          reporter.drifting = new Set(observation.flat.map((d) => `${d.family} ${d.table}`));
        },
        holdBack: (observation) => {
          if (observation.garbage) {
            k.metrics.ownedGcFound.inc({ kind: 'chain' }, observation.garbage.chains.length);
            k.metrics.ownedGcFound.inc({ kind: 'rule' }, observation.garbage.rules.length);
          }
          if (isDeliberate) return 0;
          for (const d of observation.flat) k.metrics.drift.inc({ kind: d.kind });
          return k.fight.waitFrom(performance.now());
        },
        // The start-up's install sent its rules' expressions encoded: the compile cache's store keeps them (run.ts).
        keepExprs: cause === 'startup' && k.options.startupExprs !== undefined,
        onCommitted: (observation, ops, batch, echoed) => {
          // The start-up's commit is in the kernel: the monitor joins now, before the commit is verified.
          if (cause === 'startup') k.joinEvents?.();
          if (cause === 'startup' && echoed?.exprs) k.options.startupExprs?.(echoed.exprs);
          if (!isDeliberate) opsText = [...(opsText ?? []), ...batch.ops.slice(0, 20).map(describeOp)];
          // The view's events cannot follow this commit (it did not plan it; Reconciler: view.committed): a read reseeds them.
          reporter.committed(cause, detectedAt, observation, ops);
        },
        trustSoleCommit: true,
        // The followed part's seeding read only reads: drift it finds is repaired by a pass of its own, under
        // the cause that brought it (the event that is on its way, or the tick).
        readOnly: background,
        endWhenMoved: background,
      });
    } catch (e) {
      if (e instanceof TableOwnedError) reporter.lastError = e.message;
      throw e;
    }
    // A background read concludes about the generation it read. The event repairs and the monitor's
    // armed repair go on while it reads (Scheduler.committing): one that verified a later generation
    // meanwhile (its own commit's, read back in turn trustOwnCommitMs later) stands.
    const superseded = background && k.lastVerified !== undefined && k.lastVerified > r.generation;
    if (superseded) {
      if (readBack) k.readBackDue = true;
      return { status: 'deferred', drift: [], ops: 0, attempts: r.attempts };
    }
    if (r.status === 'moved') {
      // Ended unread: the pass the commit brings reads it (and seeds the followed part after it);
      // a read-back due stays due for it, and the tick finds the generation unverified.
      if (readBack) k.readBackDue = true;
      k.lastVerified = undefined;
      reporter.unverified();
      return { status: 'deferred', drift: [], ops: 0, attempts: r.attempts };
    }
    if (r.status === 'drift') {
      // Not verified: the event that change raised (or, were it lost, the overflow or the tick
      // finding the generation moved) brings a repairing pass under its own cause. A followed part that
      // said clean over a kernel that was not (the read saw the same generation throughout) is off.
      if (sock.generation() === r.generation && (r.found.length ? r.found : r.first.flat).some((d) => k.view.followsTable(d.family, d.table))) {
        k.view.invalidate('a read found a difference the followed part did not hold');
        reporter.followChanged();
      }
      k.lastVerified = undefined;
      reporter.unverified();
      return { status: 'deferred', drift: r.found.length ? r.found : r.first.flat, ops: 0, attempts: r.attempts };
    }
    if (r.status === 'deferred') {
      reporter.unverified();
      this.scheduler.after(r.waitMs!, cause, detectedAt);
      return { status: 'deferred', drift: r.found, ops: 0, attempts: r.attempts };
    }
    if (r.trusted) {
      // Verified by our own commit, not by a read (see Reconciler.once): tables the batch created or
      // claimed carry the flags it gave them; the tick reads everything back trustOwnCommitMs later.
      reporter.drifting = new Set();
      for (const [i, t] of k.desired.entries()) {
        if (!r.first.drift[i]?.some((d) => d.kind === 'table-missing' || d.kind === 'table-orphaned' || d.kind === 'table-unprotected' || d.kind === 'table-changed')) continue;
        const p: Protection = k.reconciler!.protects(t) ? 'protected' : 'unprotected';
        reporter.tableProtection(`${t.family} ${t.name}`, p);
      }
    }
    // A pass planned from the known state read nothing: it leaves the pending read-back of a trusted commit pending.
    if (r.fromKnown && !r.trusted) reporter.verified(r.generation, 'keep');
    else reporter.verified(r.generation, r.trusted ? 'commit' : false);
    if (r.ops > 0) {
      reporter.reportRepair({ cause, drift: r.found, ops: r.ops, latencyMs: performance.now() - detectedAt, generation: r.generation,
        attempts: r.attempts, opsText });
    }
    // Owners changes come in runs (a registration each): the safety net seeds the followed part after them.
    // A reload is one: its known state seeds it at once, without a read where it covers the tables.
    this.seedFollowed(r.trusted || desired !== k.desired ? undefined : lastObservation, cause === 'owners', wasValid);
    return { status: r.ops > 0 ? 'repaired' : 'in-sync', drift: r.found, ops: r.ops, attempts: r.attempts, generation: r.generation };
  }

  /**
   * After a full pass: an observation that found everything as desired seeds the followed part (when the generation
   * has not moved since, the dumps saw exactly that generation). A pass that ended on its own commit
   * without a read has the tables it let go seeded from the rules its echo left, where the events
   * were at its observation (KernelView.seedFromEcho); else it leaves them unseeded (the commit's own
   * events are not planned by it), so the kernel is observed once more right away, off the repair
   * path, to seed it (from the known state, which follows our own commits, so without a read where
   * it covers the tables); after an owners change (they come in runs) the safety net's read-back
   * seeds it instead.
   */
  private seedFollowed(observation: Observation | undefined, inARun: boolean, wasValid: boolean): void {
    const k = this.k;
    const view = k.view;
    if (!view.follows || k.stopped) return;
    if (observation && observation.flat.length === 0 && observation.retired.length === 0) {
      // The kernel still at the observation's generation, or the events prove no commit since named
      // a desired table (a neighbour's commits elsewhere): the events follow on from it.
      if (k.sock!.generation() !== observation.generation && view.untouchedSince(observation.generation, k.desired) === undefined) return;
      // The observation's garbage goes before the view takes its per-rule index (src/base/heap.ts);
      // one not read (the known state, a restart record's) made none worth a full collection.
      if (!observation.unread && countRules(k.desired) >= COLLECT_BEFORE_OPS) collectGarbage();
      const seeded = view.seed(k.desired, observation.observed, observation.generation);
      if (!seeded) return;
      // After an overflow the monitor's run of whole commits restarts from here.
      k.monitor?.anchor?.(observation.generation, view.overflows);
      this.reporter.followChanged();
      // The safety net's read-back: the events it replaces should have said the same.
      if (seeded === 'diverged') {
        k.log.warn({ generation: observation.generation }, 'the followed part differed from the kernel read back; reseeded from the read');
        k.events.emit('followed-diverged');
      }
      return;
    }
    // Our commit's echo seeded the tables it let go again (KernelView.seedFromEcho).
    if (view.valid && !wasValid) this.reporter.followChanged();
    if (!view.valid && !inARun) {
      // After this pass is done (start() and the repair's caller do not wait for it).
      setImmediate(() => {
        if (k.stopped || view.valid) return;
        this.scheduler.request('tick', performance.now(), true).catch(() => undefined);
      });
    }
  }
}
