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
import type { Config, TableConfig } from '../config/config.js';
import { KeeperMetrics } from '../metrics.js';
import { Batch } from '../netlink/batch.js';
import type { NftConn, NftHost, NftWatch } from '../netlink/conn.js';
import { kernelHost } from '../netlink/host.js';
import type { MonitorBatch } from '../netlink/monitor.js';
import { DEFAULT_FIGHT, Fight, type FightOptions } from './fight.js';
import { DRIFT_KINDS, TableOwnedError, protectionOf, type Drift, type Protection } from './reconcile.js';
import { Reconciler, type Look } from './reconciler.js';
import { mergeOwners, type Owner } from '../owners/index.js';

export type Cause = 'startup' | 'event' | 'tick' | 'overflow' | 'reload' | 'owners' | 'manual';
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
}

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
  waiters: { resolve: (o: PassOutcome) => void; reject: (e: unknown) => void }[];
}

const deliberate = (c: Cause) => c === 'reload' || c === 'owners';

export interface RepairReport {
  cause: Cause;
  drift: Drift[];
  ops: number;
  /** From detection (event arrival or tick) to the committed repair. */
  latencyMs: number;
  generation: number;
  attempts: number;
}

export interface KeeperStatus {
  ready: boolean;
  generation: number | undefined;
  fightLevel: number;
  lastRepair?: { at: string; cause: Cause; drift: string[]; latencyMs: number };
  lastError?: string;
  tables: { family: string; name: string; state: 'verified' | 'drifting' | 'unknown'; protection: Protection | 'unknown' }[];
}

export class Keeper extends EventEmitter {
  readonly metrics: KeeperMetrics;
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
  /** The next pass reads the tables even if the generation says nothing moved: the trusted commit's read-back. */
  private readBackDue = false;

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
    this.owners = options.owners ?? [];
    this.desired = mergeOwners(this.config.tables, this.config.owners, this.owners);
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
    this.reconciler = new Reconciler(this.sock, { attempts: this.maxRetries, metrics: this.metrics, log: this.log });
    this.reconciler.retired = this.retiredEarly;
    if (this.useEvents) {
      this.monitor = this.host.watch({
        tables: this.ownedTables(),
        ignorePorts: [this.sock.portId],
        onBatch: (b) => this.onEvents(b),
      });
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
    clearInterval(this.timer);
    clearTimeout(this.delayed);
    const queued = this.queued;
    this.queued = undefined;
    if (queued) this.settle(queued, { status: 'stopped', drift: [], ops: 0, attempts: 0 });
    await this.running?.catch(() => undefined);
    this.monitor?.close();
    this.sock?.close();
  }

  /** Waits until no pass is running or queued. */
  async idle(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
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
    this.config = config;
    this.owners = owners;
    this.desired = mergeOwners(config.tables, config.owners, owners);
    this.metrics.owners.set(owners.length);
    this.monitor?.setFilter(this.ownedTables(), this.sock ? [this.sock.portId] : []);
    this.lastVerified = undefined;
  }

  status(): KeeperStatus {
    return {
      ready: this.ready,
      generation: this.lastVerified,
      fightLevel: this.fight.level,
      lastRepair: this.lastRepair,
      lastError: this.lastError,
      tables: this.config.tables.map((t) => {
        const key = `${t.family} ${t.name}`;
        const state = this.drifting.has(key) ? 'drifting' : this.ready ? 'verified' : 'unknown';
        return { family: t.family, name: t.name, state, protection: this.protection.get(key) ?? 'unknown' };
      }),
    };
  }

  /** True while the loop is alive: a tick ran within three intervals. */
  healthy(now = performance.now()): boolean {
    return !this.stopped && (this.lastTickAt === 0 || now - this.lastTickAt < 3 * this.intervalMs + 1000);
  }

  isReady(): boolean {
    return this.ready;
  }

  private ownedTables() {
    return this.config.tables.map((t) => ({ family: t.family, name: t.name }));
  }

  private tick(): void {
    if (this.stopped || !this.sock) return;
    this.lastTickAt = performance.now();
    this.metrics.ticks.inc();
    this.emit('tick');
    let gen: number;
    try {
      gen = this.sock.generation();
    } catch (e) {
      this.fail(e);
      return;
    }
    if (gen === this.lastVerified && this.trustedSince !== undefined && this.lastTickAt - this.trustedSince >= (this.options.trustOwnCommitMs ?? 10_000)) {
      // The last verification was our own commit, not a read: read it back once, off the repair path.
      this.readBackDue = true;
      void this.request('tick', this.lastTickAt);
      return;
    }
    if (gen === this.lastVerified) {
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
    if (b.overflow) {
      this.metrics.overflows.inc();
      this.log.warn({ cause: 'overflow' }, 'event socket overflowed; resyncing');
      this.poke('overflow', performance.now());
      return;
    }
    if (b.generation === this.lastVerified) return;
    this.metrics.events.inc();
    this.poke('event', performance.now());
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
  request(cause: Cause, detectedAt: number): Promise<PassOutcome> {
    if (this.stopped) return Promise.resolve({ cause, status: 'stopped', drift: [], ops: 0, attempts: 0 });
    return new Promise<PassOutcome>((resolve, reject) => {
      const waiter = { resolve, reject };
      if (this.draining) {
        if (!this.queued) this.queued = { cause, detectedAt, waiters: [waiter] };
        else {
          this.queued.waiters.push(waiter);
          // A deliberate change is not held back by a fight, even when it joins a queued tick.
          if (deliberate(cause) && !deliberate(this.queued.cause)) this.queued.cause = cause;
          this.queued.detectedAt = Math.min(this.queued.detectedAt, detectedAt);
        }
        return;
      }
      this.draining = true;
      const running: Promise<void> = this.drain({ cause, detectedAt, waiters: [waiter] }).finally(() => {
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
          this.settle(next, await this.pass(next.cause, next.detectedAt));
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
    }
  }

  private settle(p: Pending, o: Omit<PassOutcome, 'cause'>): void {
    for (const w of p.waiters) w.resolve({ cause: p.cause, ...o });
  }

  private fail(e: unknown): void {
    this.metrics.errors.inc();
    this.lastError = (e as Error).message;
    this.log.error({ err: e }, 'reconcile failed');
    this.emit('error', e);
  }

  private async pass(cause: Cause, detectedAt: number): Promise<Omit<PassOutcome, 'cause'>> {
    const sock = this.sock!;
    // A deliberate change (new config, owners) is not something undone by a neighbour: no fight.
    const isDeliberate = deliberate(cause);
    let r;
    const useKnown = !this.readBackDue;
    this.readBackDue = false;
    try {
      r = await this.reconciler!.once({
        useKnown,
        learn: true,
        tables: this.desired,
        ownerIds: this.config.owners ? new Set(this.owners.map((o) => o.id)) : undefined,
        onObserved: (observed) => {
          for (const o of observed) {
            const p = protectionOf(o.table, sock.portId);
            this.protection.set(`${o.family} ${o.name}`, p);
            this.metrics.protection.set({ table: `${o.family} ${o.name}` }, p === 'protected' ? 1 : 0);
          }
        },
        onLook: (look) => {
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
        onCommitted: (look, ops) => this.committed(cause, detectedAt, look, ops),
        trustSoleCommit: true,
      });
    } catch (e) {
      if (e instanceof TableOwnedError) this.lastError = e.message;
      throw e;
    }
    if (r.status === 'deferred') {
      this.scheduleAfter(r.waitMs!, cause, detectedAt);
      return { status: 'deferred', drift: r.found, ops: 0, attempts: r.attempts };
    }
    if (r.trusted) {
      // Verified by our own commit, not by a read (see Reconciler.once): tables the batch created or
      // claimed carry the flags it gave them; the tick reads everything back trustOwnCommitMs later.
      this.drifting = new Set();
      for (const [i, t] of this.desired.entries()) {
        if (!r.first.drift[i]?.some((d) => d.kind === 'table-missing' || d.kind === 'table-orphaned' || d.kind === 'table-unprotected')) continue;
        const p: Protection = this.reconciler!.protects(t) ? 'protected' : 'unprotected';
        this.protection.set(`${t.family} ${t.name}`, p);
        this.metrics.protection.set({ table: `${t.family} ${t.name}` }, p === 'protected' ? 1 : 0);
      }
    }
    // A pass planned from the known state read nothing: it leaves the pending read-back of a trusted commit pending.
    if (r.fromKnown && !r.trusted) this.verified(r.generation, this.trustedSince !== undefined, this.trustedSince);
    else this.verified(r.generation, r.trusted);
    if (r.ops > 0) {
      this.reportRepair({ cause, drift: r.found, ops: r.ops, latencyMs: performance.now() - detectedAt, generation: r.generation,
        attempts: r.attempts });
    }
    return { status: r.ops > 0 ? 'repaired' : 'in-sync', drift: r.found, ops: r.ops, attempts: r.attempts, generation: r.generation };
  }

  /** Bookkeeping after each batch a pass committed. */
  private committed(cause: Cause, detectedAt: number, look: Look, ops: number): void {
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
    if (!deliberate(cause) && this.fight.repaired(performance.now())) {
      this.metrics.fightLevel.set(this.fight.level);
      this.log.warn({ fightLevel: this.fight.level, delayMs: this.fight.delay(), undone: look.flat.map((d) => d.detail) },
        'something keeps undoing nfkeeper\'s rules; backing off');
      this.emit('fight', this.fight.level);
    }
  }

  private scheduleAfter(ms: number, cause: Cause, detectedAt: number): void {
    if (this.delayed) return;
    this.delayed = setTimeout(() => {
      this.delayed = undefined;
      this.poke(cause, detectedAt);
    }, ms);
  }

  private verified(gen: number, trusted = false, since = performance.now()): void {
    this.lastVerified = gen;
    this.trustedSince = trusted ? since : undefined;
    this.metrics.generation.set(gen);
    if (!this.ready) {
      this.ready = true;
      this.metrics.ready.set(1);
      this.emit('ready');
    }
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
    this.log.info({
      cause: r.cause, drift: r.drift.map((d) => `${d.family} ${d.table}: ${d.detail}`), ops: r.ops,
      latencyMs: Number(r.latencyMs.toFixed(3)), generation: r.generation, attempts: r.attempts,
    }, r.cause === 'startup' ? 'installed desired ruleset' : r.cause === 'owners' ? 'owners applied' : 'repaired');
    this.emit('repaired', r);
  }
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
