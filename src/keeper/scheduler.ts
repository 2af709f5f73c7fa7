/**
 * When passes run: requests coalesce (at most one pass runs and one more waits; a request made
 * while one waits joins it), a pass the fight back-off holds back is run later, and the tick's
 * timer. What a pass does is the runner's (Keeper: the follow pass, else the full pass).
 */
import { TableOwnedError } from './table.js';
import { deliberate, type Cause, type Outcome, type PassOutcome, type RepairRequest } from './outcome.js';

interface Pending extends RepairRequest {
  waiters: { resolve: (o: PassOutcome) => void; reject: (e: unknown) => void }[];
}

export interface SchedulerHooks {
  /** Runs one pass. */
  run(req: RepairRequest): Promise<Outcome>;
  /** A pass failed and no caller handles it (Reporter.fail). */
  fail(e: unknown): void;
  /**
   * A pass that may commit is running or queued (the monitor's arm is paused), and the last pass
   * has ended (armed again). A background read alone (it commits nothing) begins nothing.
   */
  passesBegin(): void;
  passesEnd(): void;
}

export class Scheduler {
  private running?: Promise<void>;
  /** A loop of passes (runPasses) is alive and will look at `queued` again. */
  private active = false;
  private queued?: Pending;
  /** The pass running is a background read (it commits nothing). */
  private reading = false;
  private delayed?: NodeJS.Timeout;
  private timer?: NodeJS.Timeout;
  private stopped = false;

  constructor(private readonly hooks: SchedulerHooks) {}

  /** A pass is running or queued. */
  busy(): boolean {
    return this.active;
  }

  /**
   * A pass that may commit is running or queued: not a background read alone, which only reads and
   * concludes about the generation it read (FullPass: readOnly), so the event repairs and the
   * monitor's armed repair may answer a deletion meanwhile instead of waiting for the read to end.
   */
  committing(): boolean {
    return this.active && (!this.reading || (this.queued !== undefined && !this.queued.background));
  }

  /** Calls `tick` every `intervalMs`. */
  every(intervalMs: number, tick: () => void): void {
    this.timer = setInterval(tick, intervalMs);
  }

  /**
   * Runs a pass now, or after the running one; coalesces bursts into one:
   * at most one pass runs and one more waits, and a request made while one
   * waits joins it. Resolves with the outcome of the pass that served this
   * request, or rejects with its refusal.
   */
  request(cause: Cause, detectedAt: number, background = false): Promise<PassOutcome> {
    if (this.stopped) return Promise.resolve({ cause, status: 'stopped', drift: [], ops: 0, attempts: 0 });
    return new Promise<PassOutcome>((resolve, reject) => {
      const waiter = { resolve, reject };
      if (this.active) {
        const wasCommitting = this.committing();
        if (!this.queued) this.queued = { cause, detectedAt, waiters: [waiter], background };
        else if (this.queued.background) {
          this.queued.waiters.push(waiter);
          Object.assign(this.queued, { cause, detectedAt, background: false });
        } else {
          this.queued.waiters.push(waiter);
          // A deliberate change is not held back by a fight, even when it joins a queued tick.
          if (deliberate(cause) && !deliberate(this.queued.cause)) this.queued.cause = cause;
          this.queued.detectedAt = Math.min(this.queued.detectedAt, detectedAt);
        }
        if (!wasCommitting && this.committing()) this.hooks.passesBegin();
        return;
      }
      this.active = true;
      this.reading = background;
      if (!background) this.hooks.passesBegin();
      const running: Promise<void> = this.runPasses({ cause, detectedAt, waiters: [waiter], background }).finally(() => {
        if (this.running === running) this.running = undefined;
      });
      this.running = running;
    });
  }

  /** A request nobody awaits: a refused pass was already reported (fail). */
  schedule(cause: Cause, detectedAt: number): void {
    this.request(cause, detectedAt).catch(() => undefined);
  }

  /** A pass after `ms` (the fight back-off), unless one is already scheduled. */
  after(ms: number, cause: Cause, detectedAt: number): void {
    if (this.delayed) return;
    this.delayed = setTimeout(() => {
      this.delayed = undefined;
      this.schedule(cause, detectedAt);
    }, ms);
  }

  /** Waits until no pass is running or queued. */
  async idle(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
  }

  /** No more passes: the queued one's waiters are told it stopped; waits for the running one. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.delayed);
    const queued = this.queued;
    this.queued = undefined;
    if (queued) resolveWaiters(queued, { status: 'stopped', drift: [], ops: 0, attempts: 0 });
    await this.running?.catch(() => undefined);
  }

  private async runPasses(first: Pending): Promise<void> {
    try {
      for (let next: Pending | undefined = first; next; next = this.queued) {
        this.queued = undefined;
        this.reading = next.background === true;
        if (this.stopped) {
          resolveWaiters(next, { status: 'stopped', drift: [], ops: 0, attempts: 0 });
          continue;
        }
        try {
          resolveWaiters(next, await this.hooks.run(next));
        } catch (e) {
          // Refusals of start-up (another owner), reloads and owners changes are their caller's to handle.
          const callers = (next.cause === 'startup' && e instanceof TableOwnedError) || deliberate(next.cause);
          if (!callers) this.hooks.fail(e);
          for (const w of next.waiters) w.reject(e);
        }
      }
    } finally {
      // In the same tick as the last look at `queued`: a request made after it starts a new loop
      // instead of queueing behind one that has ended.
      this.active = false;
      this.reading = false;
      this.hooks.passesEnd();
    }
  }
}

function resolveWaiters(p: Pending, o: Outcome): void {
  for (const w of p.waiters) w.resolve({ cause: p.cause, ...o });
}
