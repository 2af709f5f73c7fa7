/**
 * Reporting: what the keeper says about its repairs and its state (status, metrics, log lines and
 * the Keeper's events), as an observer of what the repair paths did. It decides nothing a repair
 * depends on, apart from when the followed part's repairs are reported: after the keeper has waited once.
 */
import { describeOp } from '../netlink/ops.js';
import { who, type ForeignChange } from './attribution.js';
import type { Observation } from './reconciler.js';
import type { Protection } from './table.js';
import type { Drift } from '../model/drift.js';
import { deliberate, undoneByOthers, type Cause, type DoneRepair, type KeeperStatus, type RepairReport } from './outcome.js';
import type { KeeperState } from './state.js';

/** What runs once the keeper has waited (the report timer): the monitor's arming. */
export interface AfterWait {
  /** Whether a repair's report should also bring it (nothing armed yet, an arm-capable monitor). */
  wanted(): boolean;
  run(): void;
}

export class Reporter {
  lastRepair?: KeeperStatus['lastRepair'];
  lastError?: string;
  /** The owned tables ("family name") the last observation found drifting. */
  drifting = new Set<string>();
  protection = new Map<string, Protection>();
  /** A pass has verified the desired state since start. */
  ready = false;
  /** Since when the desired state has not been verified (drift found and not repaired, or a failed pass); undefined while it is. */
  private unverifiedSince?: number;
  /** The failure that left it unverified, if a pass failed. */
  private unverifiedError?: string;
  /** Repairs planned from the followed part and committed, reported once the event loop has waited (later()). */
  private reports: DoneRepair[] = [];
  private reportTimer?: NodeJS.Timeout;
  /** The next run of the report timer runs afterWait. */
  private afterWaitDue = false;

  constructor(private readonly k: KeeperState, private readonly afterWait: AfterWait) {}

  /**
   * `trusted`: verified without a read, by our own commit (the read-back waits until
   * trustOwnCommitMs after the last one, when the repairs have stopped) or by the followed part finding
   * nothing to do (after the first one, so that commits elsewhere moving the generation every tick
   * do not put it off for ever). 'keep': planned from the known state without a read, which leaves
   * the pending read-back as it was.
   */
  verified(gen: number, trusted: false | 'commit' | 'followed' | 'keep' = false, metric = true): void {
    const k = this.k;
    k.lastVerified = gen;
    this.unverifiedSince = undefined;
    this.unverifiedError = undefined;
    const now = performance.now();
    if (trusted !== 'keep') k.trustedSince = trusted === 'commit' ? now : trusted === 'followed' ? k.trustedSince ?? now : undefined;
    if (trusted === false) k.readAt = gen;
    else if (trusted === 'commit') k.readAt = undefined;
    if (metric) k.metrics.generation.set(gen);
    if (!this.ready) {
      this.ready = true;
      k.events.emit('ready');
    }
    k.metrics.ready.set(1);
    this.endFightIfQuiet();
  }

  /** Marks the desired state as not verified (from now, unless it already was). */
  unverified(): void {
    this.unverifiedSince ??= performance.now();
  }

  /** Why the keeper is not ready, in words for /readyz; undefined when ready. See Keeper.isReady. */
  notReadyReason(now: number, intervalMs: number): string | undefined {
    const k = this.k;
    if (k.stopped) return 'stopped';
    if (!this.ready) return 'the desired ruleset is not verified yet';
    if (this.unverifiedSince === undefined) return undefined;
    const forMs = now - this.unverifiedSince;
    if (forMs <= k.fight.options.capMs + intervalMs) return undefined;
    const why = this.unverifiedError ?? (this.drifting.size > 0 ? `drift in ${[...this.drifting].sort().join(', ')}` : 'no pass has verified it');
    return `the desired ruleset has not been verified for ${(forMs / 1000).toFixed(1)} s: ${why}`;
  }

  /** A pass failed (the caller did not ask to handle it). */
  fail(e: unknown): void {
    const k = this.k;
    this.unverified();
    this.unverifiedError = (e as Error).message;
    k.metrics.errors.inc();
    this.lastError = (e as Error).message;
    // One line: the message is what an operator acts on (a stack, every tick, is noise).
    k.log.error({ err: (e as Error).message ?? String(e) }, 'reconcile failed');
    k.events.emit('error', e);
  }

  /** What an observation showed of a table's protection. */
  tableProtection(table: string, p: Protection): void {
    this.protection.set(table, p);
    this.k.metrics.protection.set({ table }, p === 'protected' ? 1 : 0);
  }

  endFightIfQuiet(): void {
    const k = this.k;
    if (k.fight.quiet(performance.now())) {
      k.metrics.fightLevel.set(0);
      k.log.info('the fight is over; repairing at once again');
      k.events.emit('fight', 0);
    }
  }

  /** The repair just recorded raised the fight level: said at once (it changes what the next repairs do). */
  fightRaised(undone: readonly Drift[]): void {
    const k = this.k;
    k.metrics.fightLevel.set(k.fight.level);
    const fighting = k.attribution.committers();
    k.attribution.fightRaised(fighting);
    k.log.warn({ fightLevel: k.fight.level, delayMs: k.fight.delay(), undone: undone.map((d) => d.detail), fighting: fighting.map(who) },
      'something keeps undoing nfkeeper\'s rules; backing off');
    k.events.emit('fight', k.fight.level);
  }

  /** Bookkeeping after each batch a full pass committed. */
  committed(cause: Cause, detectedAt: number, observation: Pick<Observation, 'flat' | 'garbage'>, ops: number): void {
    const k = this.k;
    const garbage = observation.garbage;
    if (garbage && garbage.chains.length + garbage.rules.length > 0) {
      k.metrics.ownedGcCollected.inc({ kind: 'chain' }, garbage.chains.length);
      k.metrics.ownedGcCollected.inc({ kind: 'rule' }, garbage.rules.length);
      k.log.info({ ids: [...new Set([...garbage.chains, ...garbage.rules].map((g) => g.id))].sort().slice(0, 100),
        chains: garbage.chains.length, rules: garbage.rules.length, ops }, 'owned garbage collected');
      k.events.emit('owned-gc', garbage);
    }
    k.metrics.repairs.inc({ cause });
    k.metrics.latency.observe((performance.now() - detectedAt) / 1000);
    if (undoneByOthers(cause) && k.fight.repaired(performance.now())) this.fightRaised(observation.flat);
  }

  /**
   * Reports `done` after the event loop has next waited for something (a timer of 0 ms): a
   * repair's own reporting (metrics, log, event) comes after the keeper has given the CPU up once.
   * When the keeper and the process whose change it undid share a CPU (they do on a busy node: the
   * kernel's notification wakes the keeper on the CPU that committed), everything the keeper runs
   * before it waits again delays that process. One timer, made once and re-armed (a new one per
   * repair cost time before the wait); idle() and stop() report what is pending.
   */
  later(done: DoneRepair): void {
    this.reports.push(done);
    if (this.reports.length > 1) return;
    if (this.afterWait.wanted()) this.afterWaitDue = true;
    this.kickReportTimer();
  }

  /** The repair just handed to later() answered an event, which is counted with it. */
  lastAnsweredEvent(): void {
    this.reports[this.reports.length - 1]!.event = true;
  }

  /** Runs afterWait once the keeper has waited (the report timer), off the way to a commit. */
  runAfterWait(): void {
    this.afterWaitDue = true;
    this.kickReportTimer();
  }

  private kickReportTimer(): void {
    if (this.reportTimer === undefined) this.reportTimer = setTimeout(() => this.flush(), 0).unref();
    else this.reportTimer.refresh();
  }

  /** Reports what is pending now (idle(), stop(), the timer). */
  flush(): void {
    const reports = this.reports;
    this.reports = [];
    for (const r of reports) this.reportFollowRepair(r);
    if (this.afterWaitDue) {
      this.afterWaitDue = false;
      this.afterWait.run();
    }
  }

  stop(): void {
    clearTimeout(this.reportTimer);
    this.flush();
  }

  /** What a repair planned from the followed part reports once it is committed. */
  reportFollowRepair(r: DoneRepair): void {
    const k = this.k;
    if (r.event) k.metrics.events.inc();
    if (!deliberate(r.cause)) for (const d of r.drift) k.metrics.drift.inc({ kind: d.kind });
    k.metrics.repairs.inc({ cause: r.cause });
    k.metrics.latency.observe((r.committedAt - r.detectedAt) / 1000);
    if (k.lastVerified !== undefined) k.metrics.generation.set(k.lastVerified);
    this.reportRepair({ cause: r.cause, drift: r.drift, ops: r.ops, latencyMs: r.committedAt - r.detectedAt, generation: r.generation, attempts: 1,
      opsText: r.batch.ops.map(describeOp) });
    k.options.trace?.('reported');
  }

  reportRepair(r: RepairReport): void {
    const k = this.k;
    this.lastRepair = { at: new Date().toISOString(), cause: r.cause, drift: r.drift.map((d) => d.detail), latencyMs: r.latencyMs };
    // The foreign changes this repair answered: who made them and what they did (a deliberate change or start-up answers none).
    const answered = !undoneByOthers(r.cause) ? [] : k.attribution.answered({
      generation: r.generation, cause: r.cause, latencyMs: Number(r.latencyMs.toFixed(3)),
      ops: r.opsText ?? r.drift.map((d) => `${d.family} ${d.table}: ${d.detail}`),
    });
    k.log.info({
      cause: r.cause, drift: r.drift.map((d) => `${d.family} ${d.table}: ${d.detail}`), ops: r.ops,
      latencyMs: Number(r.latencyMs.toFixed(3)), generation: r.generation, attempts: r.attempts,
      ...(answered.length > 0 ? { by: byOf(answered), did: answered.flatMap((c) => c.what).slice(0, 20) } : {}),
    }, r.cause === 'startup' ? 'installed desired ruleset' : r.cause === 'owners' ? 'owners applied' : 'repaired');
    k.events.emit('repaired', r);
  }

  /** Whether repairs are planned from the events (exact) or need a read, and why. */
  followState(): { exact: boolean; generation: number; reason?: string } | undefined {
    return this.k.view.currency();
  }

  /** The followed part changed state (off, or seeded): said as the 'followed' event. */
  followChanged(): void {
    this.k.events.emit('followed', this.followState());
  }
}

/** The distinct committers of `changes` for a log line: one if they were one process, else a list. */
function byOf(changes: readonly ForeignChange[]): unknown {
  const seen = new Map<string, Record<string, unknown>>();
  for (const c of changes) seen.set(`${c.by.pid}/${c.by.comm ?? ''}`, who(c.by));
  const list = [...seen.values()];
  return list.length === 1 ? list[0] : list;
}
