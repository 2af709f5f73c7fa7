/**
 * The keeper loop. Every interval it reads the generation id (a few µs); if
 * that equals the generation it last verified, the tick is over. Otherwise,
 * and whenever the monitor reports a foreign commit touching an owned table,
 * it runs a reconcile pass: dump the owned tables (kernel-filtered), compare,
 * and if anything differs commit one batch guarded by the generation it read,
 * retrying from a fresh read if the kernel says the ruleset moved on.
 * Requests coalesce: at most one pass runs, and at most one more is queued.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import pino, { type Logger } from 'pino';
import type { Config, TableConfig } from '../config/config.js';
import { GenerationMismatchError } from '../errors.js';
import { Batch } from '../netlink/batch.js';
import { Monitor, type MonitorBatch } from '../netlink/monitor.js';
import { NftSocket } from '../netlink/socket.js';
import { DEFAULT_FIGHT, Fight, type FightOptions } from './fight.js';
import { KeeperMetrics } from './metrics.js';
import { NetlinkError } from '../errors.js';
import { PROTECT_FLAGS, TableOwnedError, diffTable, observeTable, planTable, protectionOf, type Drift,
  type Protection } from './reconcile.js';
import { mergeOwners, ownedGarbage } from '../owners/merge.js';
import type { Owner } from '../owners/spec.js';

export type Cause = 'startup' | 'event' | 'tick' | 'overflow' | 'reload' | 'owners' | 'manual';

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
  /** Registered owners (config.owners says where they go); enforced from the start-up pass on. */
  owners?: readonly Owner[];
}

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
  private sock?: NftSocket;
  private monitor?: Monitor;
  private timer?: NodeJS.Timeout;
  private delayed?: NodeJS.Timeout;
  private running?: Promise<void>;
  private queued?: { cause: Cause; detectedAt: number };
  private lastVerified?: number;
  private ready = false;
  private stopped = false;
  private lastRepair?: KeeperStatus['lastRepair'];
  private lastError?: string;
  private drifting = new Set<string>();
  private lastTickAt = 0;
  /** Tables a reload dropped from the config: deleted in the next repair batch. */
  private retired: { family: TableConfig['family']; name: string }[] = [];
  /** False once the kernel refused the protect flags: repair mode from then on. */
  private protectSupported = true;
  private startupError?: Error;
  private reloadError?: unknown;
  private protection = new Map<string, Protection>();
  private owners: readonly Owner[] = [];
  /** The config's tables with the owners merged in: what the passes enforce. */
  private desired: TableConfig[] = [];
  private changeError?: unknown;

  constructor(private readonly options: KeeperOptions) {
    super();
    this.config = options.config;
    this.intervalMs = options.intervalMs ?? 1000;
    this.useEvents = options.events ?? true;
    this.maxRetries = options.maxGenerationRetries ?? 20;
    this.log = options.logger ?? pino({ level: 'silent' });
    this.metrics = options.metrics ?? new KeeperMetrics();
    this.fight = new Fight({ ...DEFAULT_FIGHT, ...options.fight });
    this.owners = options.owners ?? [];
    this.desired = mergeOwners(this.config.tables, this.config.owners, this.owners);
    this.metrics.owners.set(this.owners.length);
  }

  /** The socket all writes go through; its port id marks our own events. */
  get socket(): NftSocket | undefined {
    return this.sock;
  }

  /** Opens the sockets, runs the start-up pass (adopting a correct ruleset without writing) and starts the loop. */
  async start(): Promise<void> {
    this.sock = new NftSocket({ netns: this.options.netns });
    if (this.useEvents) {
      this.monitor = new Monitor({
        netns: this.options.netns,
        tables: this.ownedTables(),
        ignorePorts: [this.sock.portId],
        onBatch: (b) => this.onEvents(b),
      });
    }
    await this.request('startup', performance.now());
    await this.idle();
    if (this.startupError) {
      const e = this.startupError;
      await this.stop();
      throw e;
    }
    this.timer = setInterval(() => this.tick(), this.intervalMs);
  }

  /** Stops the loop and closes the sockets. The rules stay in the kernel. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.delayed);
    this.queued = undefined;
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
    this.reloadError = undefined;
    await this.request('reload', performance.now());
    await this.idle();
    const refused = this.reloadError;
    if (refused) {
      this.retired = previous.retired;
      this.install(previous.config, this.owners);
      this.metrics.reloadFailed.set(1);
      this.log.error({ err: (refused as Error).message }, 'the kernel refused the new config; the old one stays in force');
      await this.request('reload', performance.now());
      await this.idle();
      throw refused;
    }
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
    this.changeError = undefined;
    await this.request('owners', performance.now());
    await this.idle();
    const refused = this.changeError;
    if (refused) {
      this.install(this.config, previous);
      this.log.error({ err: (refused as Error).message }, 'the kernel refused the owners change; the previous owners stay in force');
      await this.request('owners', performance.now());
      await this.idle();
      throw refused;
    }
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
    if (gen === this.lastVerified) {
      // Nothing changed anywhere: no dump, no log. A quiet namespace is also
      // how a fight ends, and no pass would run to notice it (bench/hostile.ts
      // found the level stuck at its peak after the neighbour stopped).
      this.endFightIfQuiet();
      return;
    }
    void this.request('tick', this.lastTickAt);
  }

  private onEvents(b: MonitorBatch): void {
    if (this.stopped) return;
    if (b.overflow) {
      this.metrics.overflows.inc();
      this.log.warn({ cause: 'overflow' }, 'event socket overflowed; resyncing');
      void this.request('overflow', performance.now());
      return;
    }
    if (b.generation === this.lastVerified) return;
    this.metrics.events.inc();
    void this.request('event', performance.now());
  }

  /** Runs a pass now, or after the running one; coalesces bursts into one. */
  request(cause: Cause, detectedAt: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      if (!this.queued) this.queued = { cause, detectedAt };
      return this.running;
    }
    const run = (async () => {
      let next: { cause: Cause; detectedAt: number } | undefined = { cause, detectedAt };
      while (next && !this.stopped) {
        this.queued = undefined;
        try {
          await this.pass(next.cause, next.detectedAt);
        } catch (e) {
          if (next.cause === 'startup' && e instanceof TableOwnedError) this.startupError = e;
          else if (next.cause === 'reload' && !this.reloadError) this.reloadError = e;
          else if (next.cause === 'owners' && !this.changeError) this.changeError = e;
          else this.fail(e);
        }
        next = this.queued;
      }
    })();
    this.running = run.finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private fail(e: unknown): void {
    this.metrics.errors.inc();
    this.lastError = (e as Error).message;
    this.log.error({ err: e }, 'reconcile failed');
    this.emit('error', e);
  }

  private async pass(cause: Cause, detectedAt: number): Promise<void> {
    const sock = this.sock!;
    const tables = this.desired;
    // A deliberate change (new config, owners) is not something undone by a neighbour: no fight.
    const deliberate = cause === 'reload' || cause === 'owners';
    const allDrift: Drift[] = [];
    let ops = 0;
    for (let attempt = 1; attempt <= this.maxRetries; attempt++) {
      const gen = sock.generation();
      const observed = await Promise.all(tables.map((t) => observeTable(sock, t.family, t.name, t.chains.map((c) => c.name))));
      this.metrics.dumps.inc();
      for (const [i, t] of tables.entries()) {
        const p = protectionOf(observed[i]!.table, sock.portId);
        this.protection.set(`${t.family} ${t.name}`, p);
        this.metrics.protection.set({ table: `${t.family} ${t.name}` }, p === 'protected' ? 1 : 0);
      }
      let drift: Drift[][];
      try {
        drift = tables.map((t, i) => diffTable(t, observed[i]!, { protect: this.protects(t), portId: sock.portId }));
      } catch (e) {
        if (e instanceof TableOwnedError) this.lastError = e.message;
        throw e;
      }
      const retired = await this.retiredPresent(sock);
      const flat = [...drift.flat(), ...retired.map((t): Drift => ({
        kind: 'table-retired', family: t.family, table: t.name, detail: `table ${t.family} ${t.name} is no longer in the config`,
      }))];
      this.drifting = new Set(flat.map((d) => `${d.family} ${d.table}`));
      if (flat.length === 0) {
        this.verified(gen);
        if (ops > 0) this.reportRepair({ cause, drift: allDrift, ops, latencyMs: performance.now() - detectedAt, generation: gen, attempts: attempt });
        return;
      }
      const garbage = this.config.owners ? ownedGarbage(tables, observed, new Set(this.owners.map((o) => o.id))) : undefined;
      if (ops === 0) {
        // Only the first look counts as what was undone; later ones are our own retries.
        allDrift.push(...flat);
        if (garbage) {
          this.metrics.ownedGcFound.inc({ kind: 'chain' }, garbage.chains.length);
          this.metrics.ownedGcFound.inc({ kind: 'rule' }, garbage.rules.length);
        }
        if (!deliberate) for (const d of flat) this.metrics.drift.inc({ kind: d.kind });
        const wait = deliberate ? 0 : this.fight.waitFrom(performance.now());
        if (wait > 0) {
          this.scheduleAfter(wait, cause, detectedAt);
          return;
        }
      }
      const batch = new Batch();
      // A reload's removals travel in the same transaction as the rest.
      for (const t of retired) batch.delete('table', t);
      tables.forEach((t, i) => planTable(batch, t, observed[i]!, drift[i]!, this.planOptions(t)));
      try {
        await sock.commit(batch, { expectGeneration: gen });
      } catch (e) {
        if (e instanceof GenerationMismatchError) {
          this.metrics.generationRetries.inc();
          continue;  // someone committed between our read and our write: look again
        }
        if (this.protectRefused(e, batch)) continue;
        throw e;
      }
      ops += batch.length;
      if (garbage && garbage.chains.length + garbage.rules.length > 0) {
        this.metrics.ownedGcCollected.inc({ kind: 'chain' }, garbage.chains.length);
        this.metrics.ownedGcCollected.inc({ kind: 'rule' }, garbage.rules.length);
        this.log.info({ ids: [...new Set([...garbage.chains, ...garbage.rules].map((g) => g.id))].sort().slice(0, 100),
          chains: garbage.chains.length, rules: garbage.rules.length, ops: batch.length }, 'owned garbage collected');
        this.emit('owned-gc', garbage);
      }
      this.metrics.repairs.inc({ cause });
      this.metrics.latency.observe((performance.now() - detectedAt) / 1000);
      if (!deliberate && this.fight.repaired(performance.now())) {
        this.metrics.fightLevel.set(this.fight.level);
        this.log.warn({ fightLevel: this.fight.level, delayMs: this.fight.delay(), undone: allDrift.map((d) => d.detail) },
          'something keeps undoing nfkeeper\'s rules; backing off');
        this.emit('fight', this.fight.level);
      }
    }
    throw new Error(`gave up after ${this.maxRetries} attempts: the ruleset kept changing between read and commit`);
  }

  private async retiredPresent(sock: NftSocket) {
    if (this.retired.length === 0) return [];
    const present = [];
    for (const t of this.retired) if (await sock.getTable(t.family, t.name)) present.push(t);
    if (present.length === 0) this.retired = [];
    return present;
  }

  private protects(t: TableConfig): boolean {
    return t.protect && this.protectSupported;
  }

  /** A kernel without NFT_TABLE_F_OWNER or persist refuses the flags: log once, keep repairing. */
  private protectRefused(e: unknown, batch: Batch): boolean {
    if (!(e instanceof NetlinkError) || e.errnoName !== 'EOPNOTSUPP' || !this.protectSupported) return false;
    const op = batch.ops[e.opIndex];
    if (op?.object !== 'table' || !('flags' in op) || !op.flags) return false;
    this.protectSupported = false;
    this.log.warn({ table: `${op.family} ${op.name}` },
      'this kernel does not support owned persistent tables (NFT_TABLE_F_OWNER | persist); protect mode is off, repair mode stays');
    return true;
  }

  protected planOptions(t: TableConfig) {
    return this.protects(t) ? { tableFlags: PROTECT_FLAGS } : {};
  }

  private scheduleAfter(ms: number, cause: Cause, detectedAt: number): void {
    if (this.delayed) return;
    this.delayed = setTimeout(() => {
      this.delayed = undefined;
      void this.request(cause, detectedAt);
    }, ms);
  }

  private verified(gen: number): void {
    this.lastVerified = gen;
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
export async function cleanup(sock: NftSocket, config: Config): Promise<string[]> {
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

/** One pass without a loop: the drift, and (with apply) the repair. */
export async function checkOnce(sock: NftSocket, config: Config, apply: boolean, owners: readonly Owner[] = []):
  Promise<{ drift: { table: TableConfig; drift: Drift[] }[]; ops: number }> {
  // Registered owners are part of the desired state here too, or apply would collect them.
  config = { ...config, tables: mergeOwners(config.tables, config.owners, owners) };
  for (let attempt = 0; attempt < 20; attempt++) {
    const gen = sock.generation();
    const observed = await Promise.all(config.tables.map((t) => observeTable(sock, t.family, t.name, t.chains.map((c) => c.name))));
    // Same protect handling as the daemon: a one-shot apply creates a protected table owned by
    // this short-lived socket, which leaves it an orphan for the next `run` to claim.
    const drift = config.tables.map((t, i) => ({
      table: t, drift: diffTable(t, observed[i]!, { protect: t.protect, portId: sock.portId, allowForeignOwner: !apply }),
    }));
    if (!apply || drift.every((d) => d.drift.length === 0)) return { drift, ops: 0 };
    const batch = new Batch();
    config.tables.forEach((t, i) => planTable(batch, t, observed[i]!, drift[i]!.drift,
      t.protect ? { tableFlags: PROTECT_FLAGS } : {}));
    try {
      await sock.commit(batch, { expectGeneration: gen });
      return { drift, ops: batch.length };
    } catch (e) {
      if (!(e instanceof GenerationMismatchError)) throw e;
    }
  }
  throw new Error('the ruleset kept changing between read and commit');
}
