/**
 * The keeper loop. Every interval it reads the generation id (a few µs); if
 * that equals the generation it last verified, the tick is over. Otherwise,
 * and whenever the monitor reports a foreign commit touching an owned table,
 * it runs a reconcile pass (Reconciler.once: dump the owned tables, compare,
 * and if anything differs commit one batch guarded by the generation it read,
 * retrying from a fresh read if the kernel says the ruleset moved on). The
 * keeper adds what a loop needs: fight back-off, metrics, events, reloads.
 * Requests coalesce: at most one pass runs, and at most one more is queued.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import pino, { type Logger } from 'pino';
import { countRules, type Config, type TableConfig } from '../config/config.js';
import { KeeperMetrics } from '../base/metrics.js';
import { Batch } from '../netlink/batch.js';
import { describeOp } from '../netlink/ops.js';
import type { CommitResult, NftConn, NftHost, NftWatch } from '../netlink/conn.js';
import { kernelHost } from '../netlink/host.js';
import type { MonitorBatch } from '../netlink/events.js';
import { GenerationMismatchError } from '../base/errors.js';
import { DEFAULT_FIGHT, Fight, type FightOptions } from './fight.js';
import { compactRules } from '../model/compact.js';
import { COLLECT_BEFORE_OPS, collectGarbage } from '../base/heap.js';
import { MIRROR_MAX_ELEMENTS, MIRROR_MAX_OPS, Mirror, type MirrorPlan } from './mirror.js';
import { TableOwnedError, protectionOf, type Protection } from './table.js';
import { DRIFT_KINDS, type Drift } from '../model/drift.js';
import { Reconciler, type Look } from './reconciler.js';
import { OwnedTouches } from './known.js';
import { Attribution, who, type ForeignChange } from './attribution.js';
import { mergeOwners, ownerIdsOf, type Owner } from '../owners/index.js';

export type Cause = 'startup' | 'event' | 'tick' | 'overflow' | 'reload' | 'owners' | 'manual';
/** Owned rules up to which the monitor is armed with their repairs (armRepairs). */
const ARM_MAX_RULES = 256;
const ERESTART = 85;
/** Every cause, for the metrics' zero series; a Record so a new Cause not listed fails the typecheck. */
const CAUSES: Record<Cause, true> = { startup: true, event: true, tick: true, overflow: true, reload: true, owners: true, manual: true };

export interface KeeperOptions {
  config: Config;
  netns?: string;
  /** Generation check period; default 1000 ms. */
  intervalMs?: number;
  /** Subscribe to change notifications; default true. */
  events?: boolean;
  logger?: Logger;
  metrics?: KeeperMetrics;
  fight?: Partial<FightOptions>;
  /** Attempts per pass when commits keep meeting a moved-on generation. */
  maxGenerationRetries?: number;
  /**
   * After a repair whose commit was provably the only one (the generation moved by exactly one),
   * the kernel is not read back at once; the tick reads it back this long after. Default 10 s.
   */
  trustOwnCommitMs?: number;
  /** Registered owners (config.owners says where they go); enforced from the start-up pass on. */
  owners?: readonly Owner[];
  /** Where to connect and watch; default the kernel of `netns`. */
  host?: NftHost;
  /**
   * Keep a mirror of the owned chains from the events and repair a foreign change from it, without
   * a dump (src/keeper/mirror.ts). Default true; needs events and a watcher that reports progress.
   */
  mirror?: boolean;
  /**
   * Bench-only: called at each step of the event→repair path (bench/repair-trace.ts times them from
   * outside); undefined in the daemon, where it costs one test per step.
   */
  trace?: (mark: TraceMark, atNs?: number) => void;
  /** Foreign changes remembered with who made them and the repair that answered them; default 256. */
  history?: number;
}

/** The steps of the event→repair path, in order (KeeperOptions.trace). */
export type TraceMark = 'received' | 'event' | 'pass' | 'proved' | 'planned' | 'committed' | 'reported';

/** What one requested pass did; a refused pass rejects its request() instead. */
export interface PassOutcome {
  /** The cause the pass ran under (a deliberate request joining a queued one lends it its cause). */
  cause: Cause;
  /**
   * in-sync: nothing to do; repaired: committed and verified; deferred: the
   * fight back-off holds the repair back (a pass is scheduled); stopped: the
   * keeper stopped before the pass ran.
   */
  status: 'in-sync' | 'repaired' | 'deferred' | 'stopped';
  drift: Drift[];
  ops: number;
  attempts: number;
  generation?: number;
}

interface Pending {
  cause: Cause;
  detectedAt: number;
  /** A read nobody asked for (the mirror's seeding): a request joining it lends it its cause and clock. */
  background?: boolean;
  waiters: { resolve: (o: PassOutcome) => void; reject: (e: unknown) => void }[];
}

/**
 * How long a pass waits for the monitor to catch up with the kernel (it reads its socket when the
 * event loop polls) before it reads the kernel instead. A turn of the loop on a quiet machine; a
 * loaded one deschedules the process for milliseconds, and a full read costs far more than waiting.
 */
const MIRROR_WAIT_MS = 100;

const deliberate = (c: Cause) => c === 'reload' || c === 'owners';

/** A repair planned from the mirror and committed, waiting to be reported (Keeper.later). */
interface DoneRepair {
  drift: Drift[];
  ops: number;
  generation: number;
  cause: Cause;
  detectedAt: number;
  committedAt: number;
  /** It answered an event, which is counted with it. */
  event: boolean;
  /** What it committed (described when reported, off the repair path). */
  batch: Batch;
}

export interface RepairReport {
  cause: Cause;
  drift: Drift[];
  ops: number;
  /** From detection (event arrival or tick) to the committed repair. */
  latencyMs: number;
  generation: number;
  attempts: number;
  /** What it committed, in nft words (a full pass: the drift it repaired). */
  opsText?: string[];
}

export interface KeeperStatus {
  ready: boolean;
  generation: number | undefined;
  fightLevel: number;
  lastRepair?: { at: string; cause: Cause; drift: string[]; latencyMs: number };
  lastError?: string;
  tables: { family: string; name: string; state: 'verified' | 'drifting' | 'unknown'; protection: Protection | 'unknown' }[];
  /** The last foreign changes to owned tables, newest first (Keeper.attribution has them all). */
  foreignChanges?: ForeignChange[];
}

export class Keeper extends EventEmitter {
  readonly metrics: KeeperMetrics;
  /** Who made the foreign changes to the owned tables, and what answered them. */
  readonly attribution: Attribution;
  /** The owned tables as "family name", for the attribution. */
  private ownedKeys = new Set<string>();
  readonly log: Logger;
  private config: Config;
  private readonly intervalMs: number;
  private readonly useEvents: boolean;
  private readonly maxRetries: number;
  private readonly fight: Fight;
  private readonly host: NftHost;
  private sock?: NftConn;
  private reconciler?: Reconciler;
  /** Retired tables noted before start() opened the reconciler. */
  private retiredEarly: { family: TableConfig['family']; name: string }[] = [];
  private monitor?: NftWatch;
  private timer?: NodeJS.Timeout;
  private delayed?: NodeJS.Timeout;
  private running?: Promise<void>;
  /** A drain loop is alive and will look at `queued` again. */
  private draining = false;
  private queued?: Pending;
  private lastVerified?: number;
  private ready = false;
  /** Since when the desired state has not been verified (drift found and not repaired, or a failed pass); undefined while it is. */
  private unverifiedSince?: number;
  /** The failure that left it unverified, if a pass failed. */
  private unverifiedError?: string;
  private stopped = false;
  private lastRepair?: KeeperStatus['lastRepair'];
  private lastError?: string;
  private drifting = new Set<string>();
  private lastTickAt = 0;
  private protection = new Map<string, Protection>();
  private owners: readonly Owner[] = [];
  /** The config's tables with the owners merged in: what the passes enforce. */
  private desired: TableConfig[] = [];
  /** Set while lastVerified is our own commit's generation rather than a read-back (see pass()). */
  private trustedSince?: number;
  /** The owned chains as the events say the kernel holds them (undefined: events or the option off). */
  private mirror?: Mirror;
  /** Which commits touched the owned tables: lets a pass keep the known state when only the generation moved. */
  private readonly touches = new OwnedTouches();
  /** The next pass reads the tables even if the generation says nothing moved: the trusted commit's read-back. */
  private readBackDue = false;
  /** The generation at which the guard last refused a repair planned from the mirror: the monitor trails it. */
  private refusedAt = -1;
  /** Repairs planned from the mirror and committed, reported once the event loop has waited (later()). */
  private reports: DoneRepair[] = [];
  private reportTimer?: NodeJS.Timeout;
  /** The monitor holds an armed repair (armRepairs) that is still current, as far as this thread knows. */
  private armed = false;
  /** The next run of the report timer arms the monitor (later(), armSoon()). */
  private armDue = false;
  /** The generation the monitor's arm holds the owned tables at (armRepairs, and each armed repair's). */
  private armedAt = -1;
  /** The generation at which arming last failed (armRepairs). */
  private armFailedAt = -1;

  constructor(private readonly options: KeeperOptions) {
    super();
    this.config = options.config;
    this.intervalMs = options.intervalMs ?? 1000;
    this.useEvents = options.events ?? true;
    this.maxRetries = options.maxGenerationRetries ?? 20;
    this.log = options.logger ?? pino({ level: 'silent' });
    this.metrics = options.metrics ?? new KeeperMetrics();
    this.metrics.zeroLabels('repairs', Object.keys(CAUSES));
    this.metrics.zeroLabels('drift', Object.keys(DRIFT_KINDS));
    this.fight = new Fight({ ...DEFAULT_FIGHT, ...options.fight });
    this.attribution = new Attribution({ history: options.history, metrics: this.metrics });
    // Each owned table's series exists from the start (see KeeperMetrics.zeroLabels): the names come as they commit.
    for (const t of this.config.tables) this.metrics.foreignChanges.inc({ table: `${t.family} ${t.name}`, comm: 'other' }, 0);
    this.owners = options.owners ?? [];
    this.desired = mergeOwners(this.config.tables, this.config.owners, this.owners);
    compactRules(this.desired);
    this.metrics.owners.set(this.owners.length);
    this.host = options.host ?? kernelHost(options.netns);
  }

  /** The socket all writes go through; its port id marks our own events. */
  get socket(): NftConn | undefined {
    return this.sock;
  }

  /** Tables a reload dropped from the config, until a pass finds them gone. */
  private get retired() {
    return this.reconciler?.retired ?? this.retiredEarly;
  }

  private set retired(v: { family: TableConfig['family']; name: string }[]) {
    if (this.reconciler) this.reconciler.retired = v;
    else this.retiredEarly = v;
  }

  /** Opens the sockets, runs the start-up pass (adopting a correct ruleset without writing) and starts the loop. */
  async start(): Promise<void> {
    this.sock = this.host.connect();
    this.reconciler = new Reconciler(this.sock, { attempts: this.maxRetries, metrics: this.metrics, log: this.log, armTimed: true });
    this.reconciler.retired = this.retiredEarly;
    if (this.useEvents) {
      this.touches.setOwned(this.ownedTables());
      this.ownedKeys = new Set(this.ownedTables().map((t) => `${t.family} ${t.name}`));
      const useMirror = this.options.mirror ?? true;
      this.monitor = this.host.watch({
        tables: this.ownedTables(),
        ignorePorts: [this.sock.portId],
        ownCommits: useMirror,
        onBatch: (b) => this.onEvents(b),
      });
      if (useMirror && this.monitor.progress && this.monitor.anchor) {
        this.mirror = new Mirror();
        // Read after the subscription: every later commit reaches the monitor whole.
        this.monitor.anchor(this.sock.generation(), 0);
      }
    }
    try {
      await this.request('startup', performance.now());
    } catch (e) {
      // Another live process owns a table: refuse to start. Anything else was reported (fail) and the loop retries.
      if (e instanceof TableOwnedError) {
        await this.idle();
        await this.stop();
        throw e;
      }
    }
    await this.idle();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
  }

  /** Stops the loop and closes the sockets. The rules stay in the kernel. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.metrics.ready.set(0);
    this.disarm();
    clearInterval(this.timer);
    clearTimeout(this.delayed);
    const queued = this.queued;
    this.queued = undefined;
    if (queued) this.settle(queued, { status: 'stopped', drift: [], ops: 0, attempts: 0 });
    await this.running?.catch(() => undefined);
    clearTimeout(this.reportTimer);
    this.flushReports();
    this.monitor?.close();
    this.sock?.close();
  }

  /** Waits until no pass is running or queued, and what they reported is out (metrics, log, events). */
  async idle(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
    this.flushReports();
  }

  /**
   * Replaces the desired state and enforces it at once. If the kernel refuses
   * the new state, the old one is restored and enforced, and the refusal is
   * thrown: a reload is accepted or rejected as a whole.
   */
  async setConfig(config: Config): Promise<void> {
    const previous = { config: this.config, retired: [...this.retired] };
    const kept = new Set(config.tables.map((t) => `${t.family} ${t.name}`));
    for (const t of this.config.tables) {
      if (!kept.has(`${t.family} ${t.name}`)) this.retired.push({ family: t.family, name: t.name });
    }
    this.install(config, this.owners);
    await this.idle();
    try {
      await this.request('reload', performance.now());
    } catch (refused) {
      await this.idle();
      this.retired = previous.retired;
      this.install(previous.config, this.owners);
      this.metrics.reloadFailed.set(1);
      this.log.error({ err: (refused as Error).message }, 'the kernel refused the new config; the old one stays in force');
      await this.request('reload', performance.now()).catch((e) => this.fail(e));
      await this.idle();
      throw refused;
    }
    await this.idle();
    this.metrics.reloadFailed.set(0);
  }

  /**
   * Replaces the registered owners and enforces them at once, in one guarded
   * batch that also collects what the old set had and the new one lacks. If
   * the kernel refuses, the previous owners are restored and enforced, and the
   * refusal is thrown. Callers serialise their calls (OwnerRegistry does).
   */
  async setOwners(owners: readonly Owner[]): Promise<void> {
    const previous = this.owners;
    await this.idle();
    this.install(this.config, owners);
    try {
      await this.request('owners', performance.now());
    } catch (refused) {
      await this.idle();
      this.install(this.config, previous);
      this.log.error({ err: (refused as Error).message }, 'the kernel refused the owners change; the previous owners stay in force');
      await this.request('owners', performance.now()).catch((e) => this.fail(e));
      await this.idle();
      throw refused;
    }
    await this.idle();
  }

  private install(config: Config, owners: readonly Owner[]): void {
    this.disarm();  // the armed repairs re-add the old desired rules
    // Owners' rules are compacted when compiled (compileOwner): only a new config's rules are walked.
    if (config !== this.config) compactRules(config.tables);
    this.config = config;
    this.owners = owners;
    this.desired = mergeOwners(config.tables, config.owners, owners);
    this.metrics.owners.set(owners.length);
    this.monitor?.setFilter(this.ownedTables(), this.sock ? [this.sock.portId] : []);
    this.touches.setOwned(this.ownedTables());
    this.ownedKeys = new Set(this.ownedTables().map((t) => `${t.family} ${t.name}`));
    // A change of set and map elements only keeps the mirror: the next pass commits just those element ops.
    if (this.mirror && !this.mirror.retarget(this.desired)) this.mirror.invalidate('the desired state changed');
    this.lastVerified = undefined;
  }

  status(): KeeperStatus {
    return {
      ready: this.isReady(),
      generation: this.lastVerified,
      fightLevel: this.fight.level,
      lastRepair: this.lastRepair,
      lastError: this.lastError,
      tables: this.config.tables.map((t) => {
        const key = `${t.family} ${t.name}`;
        const state = this.drifting.has(key) ? 'drifting' : this.ready ? 'verified' : 'unknown';
        return { family: t.family, name: t.name, state, protection: this.protection.get(key) ?? 'unknown' };
      }),
      foreignChanges: this.attribution.recent(10),
    };
  }

  /** True while the loop is alive: a tick ran within three intervals. */
  healthy(now = performance.now()): boolean {
    return !this.stopped && (this.lastTickAt === 0 || now - this.lastTickAt < 3 * this.intervalMs + 1000);
  }

  /**
   * Ready: the desired state is verified. False until the start-up pass verified it, after stop(),
   * and while it has gone unverified (drift found and not repaired, or passes failing: the kernel
   * refuses, the namespace cannot be used) for longer than the longest back-off (the fight's cap)
   * plus one check interval, which a repair, even one held back by a fight, takes at most.
   */
  isReady(now = performance.now()): boolean {
    return this.notReadyReason(now) === undefined;
  }

  /** Why isReady() is false, in words for /readyz; undefined when ready. */
  notReadyReason(now = performance.now()): string | undefined {
    if (this.stopped) return 'stopped';
    if (!this.ready) return 'the desired ruleset is not verified yet';
    if (this.unverifiedSince === undefined) return undefined;
    const forMs = now - this.unverifiedSince;
    if (forMs <= this.fight.options.capMs + this.intervalMs) return undefined;
    const why = this.unverifiedError ?? (this.drifting.size > 0 ? `drift in ${[...this.drifting].sort().join(', ')}` : 'no pass has verified it');
    return `the desired ruleset has not been verified for ${(forMs / 1000).toFixed(1)} s: ${why}`;
  }

  /** Marks the desired state as not verified (from now, unless it already was). */
  private unverified(): void {
    this.unverifiedSince ??= performance.now();
  }

  private ownedTables() {
    return this.config.tables.map((t) => ({ family: t.family, name: t.name }));
  }

  private tick(): void {
    if (this.stopped || !this.sock) return;
    this.lastTickAt = performance.now();
    this.metrics.ticks.inc();
    this.metrics.ready.set(this.isReady(this.lastTickAt) ? 1 : 0);
    this.emit('tick');
    let gen: number;
    try {
      gen = this.sock.generation();
    } catch (e) {
      this.fail(e);
      return;
    }
    if (this.trustedSince !== undefined && this.lastTickAt - this.trustedSince >= (this.options.trustOwnCommitMs ?? 10_000)) {
      // Verified by our own commit or by the mirror since then, not by a read: read back once, off
      // the repair path (also while foreign commits elsewhere keep moving the generation). With the
      // mirror it is a read that only looks (and checks the mirror), so it never commits unplanned.
      this.trustedSince = undefined;
      this.readBackDue = true;  // a read, not the known state
      if (this.mirror) this.request('tick', this.lastTickAt, true).catch(() => undefined);
      else this.poke('tick', this.lastTickAt);
      return;
    }
    if (gen === this.lastVerified) {
      if (!this.armed) this.armRepairs();
      // Nothing changed anywhere: no dump, no log. A quiet namespace is also
      // how a fight ends, and no pass would run to notice it (bench/hostile.ts
      // found the level stuck at its peak after the neighbour stopped).
      this.endFightIfQuiet();
      return;
    }
    this.poke('tick', this.lastTickAt);
  }

  private onEvents(b: MonitorBatch): void {
    if (this.stopped) return;
    // A batch after the arm's generation that the armed repair did not answer with a success leaves
    // it stale (the monitor will not answer the next one): armed again once the mirror is clean.
    const native = b.repaired;
    if (this.armed && (b.overflow || (b.generation > this.armedAt && !(native !== undefined && 'handle' in native && native.handle > 0)))) {
      this.armed = false;
      this.armSoon();
    }
    if (b.foreign !== false && this.options.trace) {
      this.options.trace('received', b.receivedNs);
      this.options.trace('event');
    }
    this.touches.note(b);
    if (this.mirror) {
      const wasValid = this.mirror.valid;
      this.mirror.apply(b, this.sock!.portId);
      if (wasValid && !this.mirror.valid) {
        this.log.info({ reason: this.mirror.invalidReason }, 'the event mirror cannot follow this; the next pass reads the kernel');
        this.emit('mirror', this.mirrorState());
      }
    }
    if (b.foreign === false && !b.overflow) return;  // our own commit: only the mirror learns from it (its handles)
    if (b.overflow) {
      this.metrics.overflows.inc();
      this.log.warn({ cause: 'overflow' }, 'event socket overflowed; resyncing');
      this.poke('overflow', performance.now());
      return;
    }
    if (b.generation === this.lastVerified) {
      this.attribution.note(b, this.ownedKeys);
      return;
    }
    // The repair runs at once, up to its commit, here or in a pass (small commits are sent inline): count after it.
    // Who made the change is looked up after that (its /proc may be gone by then: said so, not guessed).
    const now = performance.now();
    this.attribution.arriving = b.by;
    if (!(native !== undefined ? this.repairedByMonitor(b, native, now) : this.repairNow(now))) {
      this.poke('event', now);
      this.metrics.events.inc();
    }
    this.attribution.note(b, this.ownedKeys);
  }

  /** A request nobody awaits: a refused pass was already reported (fail). */
  private poke(cause: Cause, detectedAt: number): void {
    this.request(cause, detectedAt).catch(() => undefined);
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
      if (this.draining) {
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
        return;
      }
      this.draining = true;
      // A pass plans and commits on its own: the monitor must not repair meanwhile. Paused, not
      // forgotten: after a pass that committed nothing to the owned tables (a tick's, when only
      // commits elsewhere moved the generation) it takes up the same arm (armRepairs).
      this.armed = false;
      this.monitor?.pause?.();
      const running: Promise<void> = this.drain({ cause, detectedAt, waiters: [waiter], background }).finally(() => {
        if (this.running === running) this.running = undefined;
      });
      this.running = running;
    });
  }

  private async drain(first: Pending): Promise<void> {
    try {
      for (let next: Pending | undefined = first; next; next = this.queued) {
        this.queued = undefined;
        if (this.stopped) {
          this.settle(next, { status: 'stopped', drift: [], ops: 0, attempts: 0 });
          continue;
        }
        try {
          this.settle(next, await this.pass(next.cause, next.detectedAt, next.background));
        } catch (e) {
          // Refusals of start-up (another owner), reloads and owners changes are their caller's to handle.
          const callers = (next.cause === 'startup' && e instanceof TableOwnedError) || deliberate(next.cause);
          if (!callers) this.fail(e);
          for (const w of next.waiters) w.reject(e);
        }
      }
    } finally {
      // In the same tick as the last look at `queued`: a request made after it starts a new drain
      // instead of queueing behind one that has ended.
      this.draining = false;
      // Armed again at once (the pass is done; usually a check in C++, resume), else after a wait
      // (its own commit's events still on their way to the mirror, as after start-up).
      if (!this.armed) this.armRepairs();
      if (!this.armed) this.armSoon();
    }
  }

  private settle(p: Pending, o: Omit<PassOutcome, 'cause'>): void {
    for (const w of p.waiters) w.resolve({ cause: p.cause, ...o });
  }

  private fail(e: unknown): void {
    this.unverified();
    this.unverifiedError = (e as Error).message;
    this.metrics.errors.inc();
    this.lastError = (e as Error).message;
    // One line: the message is what an operator acts on (a stack, every tick, is noise).
    this.log.error({ err: (e as Error).message ?? String(e) }, 'reconcile failed');
    this.emit('error', e);
  }

  private async pass(cause: Cause, detectedAt: number, background = false): Promise<Omit<PassOutcome, 'cause'>> {
    const sock = this.sock!;
    // A deliberate change (new config, owners) is not something undone by a neighbour: no fight.
    const isDeliberate = deliberate(cause);
    // A background pass is a read (seeding or checking the mirror); any other tries the mirror first.
    if (!background) {
      const fast = await this.mirrorPass(cause, detectedAt);
      if (fast) return fast;
    }
    let lastLook: Look | undefined;
    /** What the pass committed, in nft words, for the foreign changes it answered (a few suffice). */
    let opsText: string[] | undefined;
    let r;
    // The desired state this pass enforces: a reload meanwhile must not seed the mirror from this look.
    const desired = this.desired;
    // The safety net's read-back reads the kernel, but by digests from the known state, decoding nothing (Reconciler.look).
    const readBack = this.readBackDue;
    this.readBackDue = false;
    const mirror = this.mirror;
    const monitor = this.monitor;
    try {
      r = await this.reconciler!.once({
        useKnown: true,
        readBack,
        deferUnechoedRead: cause === 'startup',
        // Restarted onto what an earlier keeper wrote: its rules are recognised by digest, not decoded.
        adopt: cause === 'startup',
        untouchedSince: mirror ? (from, to) => this.untouchedSince(from, to) : undefined,
        // The event mirror follows plain sets per element: exact now and clean for a set, it vouches for its elements.
        elementsHeld: mirror && monitor?.progress
          ? (family, table, set, generation) => mirror.exactAt(generation, monitor.progress!()) && mirror.elementsDiffering(family, table, set) === 0
          : undefined,
        learn: true,
        tables: desired,
        ownerIds: this.config.owners ? ownerIdsOf(this.owners) : undefined,
        onObserved: (observed) => {
          for (const o of observed) {
            const p = protectionOf(o.table, sock.portId);
            this.protection.set(`${o.family} ${o.name}`, p);
            this.metrics.protection.set({ table: `${o.family} ${o.name}` }, p === 'protected' ? 1 : 0);
          }
        },
        onLook: (look) => {
          lastLook = look;
          this.drifting = new Set(look.flat.map((d) => `${d.family} ${d.table}`));
        },
        holdBack: (look) => {
          if (look.garbage) {
            this.metrics.ownedGcFound.inc({ kind: 'chain' }, look.garbage.chains.length);
            this.metrics.ownedGcFound.inc({ kind: 'rule' }, look.garbage.rules.length);
          }
          if (isDeliberate) return 0;
          for (const d of look.flat) this.metrics.drift.inc({ kind: d.kind });
          return this.fight.waitFrom(performance.now());
        },
        onCommitted: (look, ops, batch) => {
          if (!isDeliberate) opsText = [...(opsText ?? []), ...batch.ops.slice(0, 20).map(describeOp)];
          // The mirror cannot follow this commit's events (it did not plan them): a read reseeds it.
          this.mirror?.invalidate('a full pass committed');
          this.committed(cause, detectedAt, look, ops);
        },
        trustSoleCommit: true,
        // The mirror's seeding read only looks: drift it finds is repaired by a pass of its own, under
        // the cause that brought it (the event that is on its way, or the tick).
        readOnly: background,
      });
    } catch (e) {
      if (e instanceof TableOwnedError) this.lastError = e.message;
      throw e;
    }
    if (r.status === 'drift') {
      // Not verified: the event that change raised (or, were it lost, the overflow or the tick
      // finding the generation moved) brings a repairing pass under its own cause. A mirror that
      // said clean over a kernel that was not (the read saw the same generation throughout) is off.
      if (this.mirror?.valid && sock.generation() === r.generation) {
        this.mirror.invalidate('a read found a difference the mirror did not hold');
        this.emit('mirror', this.mirrorState());
      }
      this.lastVerified = undefined;
      this.unverified();
      return { status: 'deferred', drift: r.found.length ? r.found : r.first.flat, ops: 0, attempts: r.attempts };
    }
    if (r.status === 'deferred') {
      this.unverified();
      this.scheduleAfter(r.waitMs!, cause, detectedAt);
      return { status: 'deferred', drift: r.found, ops: 0, attempts: r.attempts };
    }
    if (r.trusted) {
      // Verified by our own commit, not by a read (see Reconciler.once): tables the batch created or
      // claimed carry the flags it gave them; the tick reads everything back trustOwnCommitMs later.
      this.drifting = new Set();
      for (const [i, t] of this.desired.entries()) {
        if (!r.first.drift[i]?.some((d) => d.kind === 'table-missing' || d.kind === 'table-orphaned' || d.kind === 'table-unprotected' || d.kind === 'table-changed')) continue;
        const p: Protection = this.reconciler!.protects(t) ? 'protected' : 'unprotected';
        this.protection.set(`${t.family} ${t.name}`, p);
        this.metrics.protection.set({ table: `${t.family} ${t.name}` }, p === 'protected' ? 1 : 0);
      }
    }
    // A pass planned from the known state read nothing: it leaves the pending read-back of a trusted commit pending.
    if (r.fromKnown && !r.trusted) this.verified(r.generation, 'keep');
    else this.verified(r.generation, r.trusted ? 'commit' : false);
    if (r.ops > 0) {
      this.reportRepair({ cause, drift: r.found, ops: r.ops, latencyMs: performance.now() - detectedAt, generation: r.generation,
        attempts: r.attempts, opsText });
    }
    // Owners changes come in runs (a registration each): the safety net seeds the mirror after them.
    // A reload is one: its known state seeds it at once, without a read where it covers the tables.
    this.learn(r.trusted || desired !== this.desired ? undefined : lastLook, cause === 'owners');
    return { status: r.ops > 0 ? 'repaired' : 'in-sync', drift: r.found, ops: r.ops, attempts: r.attempts, generation: r.generation };
  }

  /**
   * After a full pass: a look that found everything as desired seeds the mirror (when the generation
   * has not moved since, the dumps saw exactly that generation). A pass that ended on its own commit
   * without a read leaves the mirror unseeded (the commit's own events are not planned by it), so
   * the kernel is looked at once more right away, off the repair path, to seed it (from the known
   * state, which follows our own commits, so without a read where it covers the tables); after an
   * owners change (they come in runs) the safety net's read-back seeds it instead.
   */
  private learn(look: Look | undefined, inARun: boolean): void {
    const mirror = this.mirror;
    if (!mirror || this.stopped) return;
    if (look && look.flat.length === 0 && look.retired.length === 0) {
      if (this.sock!.generation() !== look.generation) return;
      const before = mirror.valid && mirror.generation === look.generation
        ? mirrorView(mirror, this.desired) : undefined;
      // The look's garbage goes before the mirror takes its per-rule index (src/base/heap.ts).
      if (countRules(this.desired) >= COLLECT_BEFORE_OPS) collectGarbage();
      if (!mirror.seed(this.desired, look.observed, look.generation)) return;
      // After an overflow the monitor's run of whole commits restarts from here.
      this.monitor?.anchor?.(look.generation, mirror.overflows);
      this.emit('mirror', this.mirrorState());
      // The safety net's read-back: the mirror it replaces should have said the same.
      const now = before && mirrorView(mirror, this.desired);
      if (before && JSON.stringify(before) !== JSON.stringify(now)) {
        this.log.warn({ generation: look.generation }, 'the event mirror differed from the kernel read back; reseeded from the read');
        this.emit('mirror-diverged');
      }
      return;
    }
    if (!mirror.valid && !inARun) {
      // After this pass has settled (start() and the repair's caller do not wait for it).
      setImmediate(() => {
        if (this.stopped || mirror.valid) return;
        this.request('tick', performance.now(), true).catch(() => undefined);
      });
    }
  }

  /** Whether repairs are planned from the events (exact) or need a read, and why. */
  mirrorState(): { exact: boolean; generation: number; reason?: string } | undefined {
    const m = this.mirror;
    if (!m) return undefined;
    return m.valid ? { exact: true, generation: m.generation } : { exact: false, generation: m.generation, reason: m.invalidReason };
  }

  /**
   * A pass from the mirror, without a dump: when the events prove the mirror is the kernel's state
   * now, its difference from the desired state is repaired in one batch guarded by that generation.
   * Undefined: no proof (or a refusal, a race), the full pass decides.
   */
  private async mirrorPass(cause: Cause, detectedAt: number): Promise<Omit<PassOutcome, 'cause'> | undefined> {
    const mirror = this.mirror;
    const monitor = this.monitor;
    // A deliberate change reaches here with the mirror valid only when it changed elements alone (install: retarget).
    if (!mirror?.valid || !monitor?.progress || cause === 'startup' || this.retired.length > 0) return undefined;
    const isDeliberate = deliberate(cause);
    const sock = this.sock!;
    const trace = this.options.trace;
    trace?.('pass');
    // First without reading the kernel: the generation the monitor saw last is the one to guard the
    // repair with, and the kernel refuses the commit unless that is still its generation, which
    // proves what a read would. Only if the monitor trails (a batch not delivered yet, or the guard
    // refused because a commit it has not seen came in between) is the generation read, and the
    // monitor waited for, as long as that is cheaper than a full read.
    for (let careful = false; ; careful = true) {
      let generation: number;
      if (!careful) {
        const p = monitor.progress();
        generation = p.lastGeneration;
        // The guard refused a repair at this generation already (repairNow): the monitor trails.
        if (generation === this.refusedAt || !mirror.exactAt(generation, p)) continue;
      } else {
        // The monitor reads its socket when this thread's event loop polls: it trails the kernel by a turn of the loop.
        generation = sock.generation();
        const waitUntil = performance.now() + MIRROR_WAIT_MS;
        while (mirror.lagging(generation, monitor.progress()) && performance.now() < waitUntil) {
          await new Promise((r) => setImmediate(r));
          if (this.stopped) return undefined;
          generation = sock.generation();
        }
        if (!mirror.exactAt(generation, monitor.progress())) return this.mirrorFallback(mirror.valid ? 'no proof that the mirror is the kernel\'s state now' : mirror.invalidReason);
      }
      trace?.('proved');
      const plan = mirror.plan();
      trace?.('planned');
      if (plan === undefined) return this.mirrorFallback(`more than ${MIRROR_MAX_OPS} rule ops or ${MIRROR_MAX_ELEMENTS} elements`);
      if (plan === 'clean') {
        // Nothing to commit, so no guard to prove the generation: say in sync at one read from the kernel.
        if (!careful) continue;
        this.drifting = new Set();
        this.verified(generation, 'mirror');
        return { status: 'in-sync', drift: [], ops: 0, attempts: 1, generation };
      }
      const waitMs = isDeliberate ? 0 : this.fight.waitFrom(performance.now());
      if (waitMs > 0) {
        this.drifting = new Set(plan.drift.map((d) => `${d.family} ${d.table}`));
        for (const d of plan.drift) this.metrics.drift.inc({ kind: d.kind });
        this.unverified();
        this.scheduleAfter(waitMs, cause, detectedAt);
        return { status: 'deferred', drift: plan.drift, ops: 0, attempts: 1 };
      }
      mirror.expect(generation + 1, plan.expected);
      let echoed;
      try {
        echoed = await sock.commit(plan.batch, { expectGeneration: generation, echo: true });
      } catch (e) {
        if (this.mirrorRefused(e, generation) && !careful) continue;
        return this.mirrorFallback(e instanceof GenerationMismatchError ? 'another commit came first (the guard refused the repair)' : mirror.invalidReason);
      }
      return this.mirrorCommitted(plan, generation, echoed, cause, detectedAt);
    }
  }

  /**
   * The repair of the foreign commit the monitor has just handed over, at once: mirrorPass's first
   * attempt (guarded by the monitor's last generation, no read), run synchronously inside the
   * event's callback, without the request queue's promises and microtask hops, when nothing stands
   * in its way: no pass running or queued, the mirror exact at that generation, a small plan, no
   * fight delay, and a connection that commits inline. False: nothing was committed (or the guard
   * refused it), and the caller requests a pass, which decides as before.
   */
  private repairNow(detectedAt: number): boolean {
    const mirror = this.mirror;
    const monitor = this.monitor;
    const sock = this.sock!;
    if (this.draining || !mirror?.valid || !monitor?.progress || this.retired.length > 0 || sock.commitNow === undefined) return false;
    const p = monitor.progress();
    const generation = p.lastGeneration;
    if (generation === this.refusedAt || !mirror.exactAt(generation, p)) return false;
    const trace = this.options.trace;
    trace?.('pass');
    trace?.('proved');
    let plan;
    try {
      plan = mirror.plan();
    } catch {
      // Thrown inside the monitor's callback it would end the process: the pass requested instead
      // plans again, and reports what fails (fail()).
      return false;
    }
    trace?.('planned');
    if (plan === undefined || plan === 'clean' || this.fight.waitFrom(performance.now()) > 0) return false;
    mirror.expect(generation + 1, plan.expected);
    let echoed;
    try {
      echoed = sock.commitNow(plan.batch, { expectGeneration: generation, echo: true });
    } catch (e) {
      // A pass follows (the caller's request): after a refusal by the guard it reads the generation first.
      if (!this.mirrorRefused(e, generation)) this.mirrorFallback(mirror.invalidReason);
      return false;
    }
    if (echoed === false) {
      mirror.forget(generation + 1);
      return false;
    }
    this.mirrorCommitted(plan, generation, echoed, 'event', detectedAt);
    // The event is counted with the repair's report, after the wait.
    this.reports[this.reports.length - 1]!.event = true;
    return true;
  }

  /**
   * The monitor's armed repair (armRepairs) answered batch `b`, a foreign deletion of one owned
   * rule, before this thread ran: it committed the op the mirror would plan now, guarded by the
   * batch's generation (the mirror, armed exact and clean, has just applied `b`: that rule is the
   * only difference), or the kernel refused it. The bookkeeping is repairNow's, after the commit.
   * False (the caller requests a pass): refused, or the plan made now is not what was committed (the
   * mirror is then off: the pass reads the kernel).
   */
  private repairedByMonitor(b: MonitorBatch, native: NonNullable<MonitorBatch['repaired']>, detectedAt: number): boolean {
    const mirror = this.mirror;
    const generation = b.generation;
    if ('errno' in native) {
      this.armed = false;
      const refused = native.errno === ERESTART ? new GenerationMismatchError(generation)
        : new Error(`the kernel refused the armed repair (errno ${native.errno})`);
      if (mirror && !this.mirrorRefused(refused, generation)) this.mirrorFallback(mirror.invalidReason);
      return false;
    }
    let plan;
    try {
      plan = mirror?.valid ? mirror.plan() : undefined;
    } catch {
      plan = undefined;
    }
    const op = plan !== undefined && plan !== 'clean' && plan.batch.length === 1 ? plan.batch.ops[0] : undefined;
    const e = b.events[0]!;
    if (!mirror || !plan || plan === 'clean' || !op || op.object !== 'rule' || op.chain !== e.name || op.table !== e.table || op.family !== e.family
      || (op.verb === 'insert' ? native.position !== 0 : op.verb !== 'add' || op.position !== native.position)) {
      // Committed, but not what the mirror plans now: it no longer knows the kernel's state.
      this.disarm();
      mirror?.invalidate('the monitor\'s armed repair differs from the plan');
      this.mirrorFallback(mirror?.invalidReason);
      return false;
    }
    mirror.expect(generation + 1, plan.expected);
    // The monitor skipped our commit's events itself when the echo gave the handle; else they bring it.
    this.mirrorCommitted(plan, generation, native.handle > 0 ? { handles: new Map([[0, native.handle]]) } : undefined, 'event', detectedAt,
      native.committedNs);
    this.reports[this.reports.length - 1]!.event = true;
    // The monitor skips the events of a commit whose handle it had: the mirror must have taken it.
    if (native.handle > 0 && mirror.valid && mirror.generation !== generation + 1) {
      mirror.invalidate(`the mirror could not take the handle of the monitor's repair (generation ${generation + 1})`);
      this.disarm();
      this.poke('event', detectedAt);
    }
    if (this.fight.delay() > 0) this.disarm();
    else this.armedAt = generation + 1;  // the monitor moved its arm to the repair's generation
    return true;
  }

  /**
   * Arms the monitor (Monitor.arm) with the repair of a foreign deletion of each owned rule, while
   * the mirror is exact and clean at the monitor's last generation and repairNow would repair at
   * once (no pass running, no fight delay, no retired table): the repair then costs the event's
   * wake-up and the commit, no JavaScript before it. Small rulesets only (ARM_MAX_RULES).
   */
  private armRepairs(): void {
    const { mirror, monitor, sock } = this;
    if (this.stopped || this.draining || !mirror?.valid || !monitor?.arm || !monitor.progress || !sock || this.retired.length > 0
      || this.fight.delay() > 0) return;
    const p = monitor.progress();
    if (p.lastGeneration === this.refusedAt || !mirror.exactAt(p.lastGeneration, p)) return;
    // Not again at a generation where it could not (an addon without it, a socket it cannot use): the tick asks each second.
    if (p.lastGeneration === this.armFailedAt || !mirror.clean(ARM_MAX_RULES)) return;
    // Nothing touched the owned tables since the last arm (the pass in between committed nothing there): take it up.
    if (monitor.resume?.()) {
      this.armed = true;  // at the armedAt it had
      return;
    }
    const a = mirror.armable(ARM_MAX_RULES);
    if (!a) return;
    try {
      this.armed = monitor.arm(sock, p.lastGeneration, a.ops, a.handles);
      this.armedAt = p.lastGeneration;
    } catch (e) {
      this.armed = false;
      this.log.debug({ err: (e as Error).message }, 'the monitor could not be armed');
    }
    if (!this.armed) this.armFailedAt = p.lastGeneration;
  }

  /** The monitor's armed repair is forgotten: the next foreign change is this thread's to answer. */
  private disarm(): void {
    this.armed = false;
    this.monitor?.disarm?.();
  }


  /**
   * A repair planned from the mirror was refused: true when by the guard (a commit the monitor had
   * not delivered yet came first; the next attempt reads the generation), else the mirror is off.
   */
  private mirrorRefused(e: unknown, generation: number): boolean {
    this.mirror!.forget(generation + 1);
    if (e instanceof GenerationMismatchError) {
      this.metrics.generationRetries.inc();
      this.refusedAt = generation;
      return true;
    }
    this.mirror!.invalidate(`the kernel refused a repair planned from the mirror: ${(e as Error).message}`);
    this.log.warn({ err: (e as Error).message }, 'a repair planned from the events was refused; reading the kernel instead');
    return false;
  }

  /** After the commit of a repair planned from the mirror, guarded at `generation`. */
  private mirrorCommitted(plan: MirrorPlan, generation: number, echoed: void | CommitResult, cause: Cause,
    detectedAt: number, committedNs?: number): Omit<PassOutcome, 'cause'> {
    const trace = this.options.trace;
    trace?.('committed', committedNs);
    const isDeliberate = deliberate(cause);
    const ops = plan.batch.length;
    const committedAt = performance.now();
    // The guard held at `generation`, where the mirror was the kernel: our commit made generation + 1,
    // the desired state. The handles of the rules it added came back with its acknowledgements:
    // the mirror takes them now, and the commit's own events need not wake this thread again
    // (else, as from a kernel that does not echo, they bring the handles).
    if (echoed && this.mirror!.learnCommit(generation + 1, echoed.handles)) {
      this.touches.touched(generation + 1);
      this.monitor!.skipOwn?.(generation + 1);
    }
    // What the next pass decides by is set now: the fight's clock and the verified generation.
    if (!isDeliberate && this.fight.repaired(committedAt)) this.fightRaised(plan.drift);
    this.drifting = new Set();
    this.verified(generation + 1, 'commit', false);
    // What only reports the repair (metrics, the log line, the 'repaired' event) waits until the
    // keeper has given the CPU up once: on a busy node the process that the broken rule held up
    // runs first (see later()). A deliberate change's caller reads them as soon as it returns.
    const done: DoneRepair = { drift: plan.drift, ops, generation: generation + 1, cause, detectedAt, committedAt, event: false, batch: plan.batch };
    if (isDeliberate) this.reportMirrorRepair(done);
    else this.later(done);
    return { status: 'repaired', drift: plan.drift, ops, attempts: 1, generation: generation + 1 };
  }

  /**
   * Whether the events prove that no commit after generation `from` up to `to` touched an owned
   * table. Needs the monitor's anchored run (started with the mirror), and waits for its thread as
   * mirrorPass does.
   */
  private async untouchedSince(from: number, to: number): Promise<boolean> {
    const monitor = this.monitor;
    if (!monitor?.progress) return false;
    const waitUntil = performance.now() + MIRROR_WAIT_MS;
    while (this.touches.lagging(to, monitor.progress()) && performance.now() < waitUntil && !this.stopped) {
      await new Promise((r) => setImmediate(r));
    }
    return this.touches.untouched(from, to, monitor.progress());
  }

  /** The mirror could not plan this pass: the full pass will (said once per pass, for logs and the bench). */
  private mirrorFallback(reason: string | undefined): undefined {
    this.log.debug({ reason }, 'repairing from a full read instead of the event mirror');
    this.emit('mirror-fallback', reason);
    return undefined;
  }

  /** Bookkeeping after each batch a pass committed. */
  private committed(cause: Cause, detectedAt: number, look: Pick<Look, 'flat' | 'garbage'>, ops: number): void {
    const garbage = look.garbage;
    if (garbage && garbage.chains.length + garbage.rules.length > 0) {
      this.metrics.ownedGcCollected.inc({ kind: 'chain' }, garbage.chains.length);
      this.metrics.ownedGcCollected.inc({ kind: 'rule' }, garbage.rules.length);
      this.log.info({ ids: [...new Set([...garbage.chains, ...garbage.rules].map((g) => g.id))].sort().slice(0, 100),
        chains: garbage.chains.length, rules: garbage.rules.length, ops }, 'owned garbage collected');
      this.emit('owned-gc', garbage);
    }
    this.metrics.repairs.inc({ cause });
    this.metrics.latency.observe((performance.now() - detectedAt) / 1000);
    if (!deliberate(cause) && this.fight.repaired(performance.now())) this.fightRaised(look.flat);
  }

  /** The repair just recorded raised the fight level: said at once (it changes what the next repairs do). */
  private fightRaised(undone: readonly Drift[]): void {
    this.metrics.fightLevel.set(this.fight.level);
    const fighting = this.attribution.committers();
    this.attribution.fightRaised(fighting);
    this.log.warn({ fightLevel: this.fight.level, delayMs: this.fight.delay(), undone: undone.map((d) => d.detail), fighting: fighting.map(who) },
      'something keeps undoing nfkeeper\'s rules; backing off');
    this.emit('fight', this.fight.level);
  }

  /**
   * Reports `done` after the event loop has next waited for something (a timer of 0 ms): a
   * repair's own reporting (metrics, log, event) comes after the keeper has given the CPU up once.
   * When the keeper and the process whose change it undid share a CPU (they do on a busy node: the
   * kernel's notification wakes the keeper on the CPU that committed), everything the keeper runs
   * before it waits again delays that process. One timer, made once and re-armed (a new one per
   * repair cost tens of µs before the wait); idle() and stop() report what is pending.
   */
  private later(done: DoneRepair): void {
    this.reports.push(done);
    if (this.reports.length > 1) return;
    if (!this.armed && this.monitor?.arm) this.armDue = true;
    this.kickReportTimer();
  }

  /** Arms the monitor after the keeper has waited once (the report timer), off the way to a commit. */
  private armSoon(): void {
    if (this.armed || this.stopped || !this.monitor?.arm) return;
    this.armDue = true;
    this.kickReportTimer();
  }

  private kickReportTimer(): void {
    if (this.reportTimer === undefined) this.reportTimer = setTimeout(() => this.flushReports(), 0).unref();
    else this.reportTimer.refresh();
  }

  private flushReports(): void {
    const reports = this.reports;
    this.reports = [];
    for (const r of reports) this.reportMirrorRepair(r);
    if (this.armDue) {
      this.armDue = false;
      if (!this.armed) this.armRepairs();
    }
  }

  /** What a repair planned from the mirror reports once it is committed. */
  private reportMirrorRepair(r: DoneRepair): void {
    if (r.event) this.metrics.events.inc();
    if (!deliberate(r.cause)) for (const d of r.drift) this.metrics.drift.inc({ kind: d.kind });
    this.metrics.repairs.inc({ cause: r.cause });
    this.metrics.latency.observe((r.committedAt - r.detectedAt) / 1000);
    if (this.lastVerified !== undefined) this.metrics.generation.set(this.lastVerified);
    this.reportRepair({ cause: r.cause, drift: r.drift, ops: r.ops, latencyMs: r.committedAt - r.detectedAt, generation: r.generation, attempts: 1,
      opsText: r.batch.ops.map(describeOp) });
    this.options.trace?.('reported');
  }

  private scheduleAfter(ms: number, cause: Cause, detectedAt: number): void {
    if (this.delayed) return;
    this.delayed = setTimeout(() => {
      this.delayed = undefined;
      this.poke(cause, detectedAt);
    }, ms);
  }

  /**
   * `trusted`: verified without a read, by our own commit (the read-back waits until
   * trustOwnCommitMs after the last one, when the repairs have stopped) or by the mirror finding
   * nothing to do (after the first one, so that commits elsewhere moving the generation every tick
   * do not put it off for ever). 'keep': planned from the known state without a read, which leaves
   * the pending read-back as it was.
   */
  private verified(gen: number, trusted: false | 'commit' | 'mirror' | 'keep' = false, metric = true): void {
    this.lastVerified = gen;
    this.unverifiedSince = undefined;
    this.unverifiedError = undefined;
    const now = performance.now();
    if (trusted !== 'keep') this.trustedSince = trusted === 'commit' ? now : trusted === 'mirror' ? this.trustedSince ?? now : undefined;
    if (metric) this.metrics.generation.set(gen);
    if (!this.ready) {
      this.ready = true;
      this.emit('ready');
    }
    this.metrics.ready.set(1);
    this.endFightIfQuiet();
  }

  private endFightIfQuiet(): void {
    if (this.fight.quiet(performance.now())) {
      this.metrics.fightLevel.set(0);
      this.log.info('the fight is over; repairing at once again');
      this.emit('fight', 0);
    }
  }

  private reportRepair(r: RepairReport): void {
    this.lastRepair = { at: new Date().toISOString(), cause: r.cause, drift: r.drift.map((d) => d.detail), latencyMs: r.latencyMs };
    // The foreign changes this repair answered: who made them and what they did (a deliberate change answers none).
    const answered = deliberate(r.cause) || r.cause === 'startup' ? [] : this.attribution.answered({
      generation: r.generation, cause: r.cause, latencyMs: Number(r.latencyMs.toFixed(3)),
      ops: r.opsText ?? r.drift.map((d) => `${d.family} ${d.table}: ${d.detail}`),
    });
    this.log.info({
      cause: r.cause, drift: r.drift.map((d) => `${d.family} ${d.table}: ${d.detail}`), ops: r.ops,
      latencyMs: Number(r.latencyMs.toFixed(3)), generation: r.generation, attempts: r.attempts,
      ...(answered.length > 0 ? { by: byOf(answered), did: answered.flatMap((c) => c.what).slice(0, 20) } : {}),
    }, r.cause === 'startup' ? 'installed desired ruleset' : r.cause === 'owners' ? 'owners applied' : 'repaired');
    this.emit('repaired', r);
  }
}

/** The distinct committers of `changes` for a log line: one if they were one process, else a list. */
function byOf(changes: readonly ForeignChange[]): unknown {
  const seen = new Map<string, Record<string, unknown>>();
  for (const c of changes) seen.set(`${c.by.pid}/${c.by.comm ?? ''}`, who(c.by));
  const list = [...seen.values()];
  return list.length === 1 ? list[0] : list;
}

/** What the mirror holds, to compare before and after a read-back: handles per chain, differing elements per set. */
function mirrorView(mirror: Mirror, desired: readonly TableConfig[]): unknown[] {
  return desired.flatMap((t) => [...t.chains.map((c) => mirror.handlesOf(t.family, t.name, c.name)),
    ...(t.sets ?? []).map((x) => mirror.elementsDiffering(t.family, t.name, x.name))]);
}

/** Removes every table the config owns, in one batch. Returns what was removed. */
export async function cleanup(sock: NftConn, config: Config): Promise<string[]> {
  const batch = new Batch();
  const removed: string[] = [];
  for (const t of config.tables) {
    const table = await sock.getTable(t.family, t.name);
    if (table && protectionOf(table, sock.portId) === 'foreign-owner') {
      throw new TableOwnedError(t.family, t.name, table.owner ?? 0);
    }
    if (table) {
      batch.delete('table', { family: t.family, name: t.name });
      removed.push(`${t.family} ${t.name}`);
    }
  }
  await sock.commit(batch);
  return removed;
}

export interface CheckResult {
  /** What the first look found, per desired table (owners merged in). */
  drift: { table: TableConfig; drift: Drift[] }[];
  /** Operations applied (0 for check). */
  ops: number;
  /** The kernel refused the protect flags: the tables were applied in repair mode. */
  protectUnsupported: boolean;
}

/**
 * One pass without a loop: the drift, and (with apply) the repair, through the
 * same Reconciler as the daemon's passes (guard, retired tables, protect
 * fallback). A one-shot apply creates a protected table owned by its
 * short-lived socket, which leaves it an orphan for the next `run` to claim.
 */
export async function checkOnce(sock: NftConn, config: Config, apply: boolean, owners: readonly Owner[] = [],
  options: { retired?: { family: TableConfig['family']; name: string }[]; logger?: Logger } = {}): Promise<CheckResult> {
  // Registered owners are part of the desired state here too, or apply would collect them.
  const tables = mergeOwners(config.tables, config.owners, owners);
  const reconciler = new Reconciler(sock, { attempts: 20, log: options.logger });
  if (apply) reconciler.retired = [...(options.retired ?? [])];
  const r = await reconciler.once({ tables, readOnly: !apply, allowForeignOwner: !apply });
  return {
    drift: tables.map((t, i) => ({ table: t, drift: r.first.drift[i]! })),
    ops: r.ops,
    protectUnsupported: !reconciler.protectSupported,
  };
}
