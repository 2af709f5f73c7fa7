/**
 * The keeper loop. Every interval it reads the generation id; if that equals the
 * generation it last verified, the tick is over. Otherwise, and whenever the monitor reports a
 * foreign commit touching an owned table, it repairs: the event repair (follow-repair.ts) answers
 * a foreign commit at once inside the monitor's callback when the kernel view (view.ts) proves
 * itself the kernel's state (or takes over the monitor's armed repair, arming.ts); otherwise a pass is
 * requested from the scheduler (scheduler.ts: at most one runs, at most one more is queued), which
 * tries the follow pass and then the full pass (full-pass.ts: Reconciler.once, one batch guarded by
 * the generation it read). What the repairs did is reported by report.ts. The one-shot commands
 * are in oneshot.ts.
 */
import { EventEmitter } from 'node:events';
import pino, { type Logger } from 'pino';
import type { Config } from '../config/config.js';
import { KeeperMetrics } from '../base/metrics.js';
import type { NftConn, NftHost } from '../netlink/conn.js';
import { kernelHost } from '../netlink/host.js';
import type { MonitorBatch } from '../netlink/events.js';
import { DEFAULT_FIGHT, Fight } from './fight.js';
import { compactRules } from '../model/compact.js';
import { TableOwnedError } from './table.js';
import { DRIFT_KINDS } from '../model/drift.js';
import { Reconciler } from './reconciler.js';
import { Attribution } from './attribution.js';
import { mergeOwners, type Owner } from '../owners/index.js';
import { Arming } from './arming.js';
import { FullPass } from './full-pass.js';
import { EventRepair, FollowPass } from './follow-repair.js';
import { CAUSES, type Cause, type KeeperStatus, type PassOutcome } from './outcome.js';
import { Reporter } from './report.js';
import { Scheduler } from './scheduler.js';
import { KeeperState, type KeeperOptions } from './state.js';
import { Recorder } from './record.js';

export { checkOnce, cleanup, type CheckResult } from './oneshot.js';
export type { Cause, KeeperStatus, PassOutcome, RepairReport, TraceMark } from './outcome.js';
export type { KeeperOptions } from './state.js';

/** The ports our socket left that the monitor still takes our commits from (each bounded by a generation): the newest few. */
const LEFT_PORTS = 4;

export class Keeper extends EventEmitter {
  readonly metrics: KeeperMetrics;
  /** Who made the foreign changes to the owned tables, and what answered them. */
  readonly attribution: Attribution;
  readonly log: Logger;
  private readonly intervalMs: number;
  private readonly useEvents: boolean;
  private readonly maxRetries: number;
  private readonly fight: Fight;
  private readonly host: NftHost;
  private readonly k: KeeperState;
  private readonly arming: Arming;
  private readonly reporter: Reporter;
  private readonly scheduler: Scheduler;
  private readonly eventRepair: EventRepair;
  private readonly followPass: FollowPass;
  private readonly fullPass: FullPass;
  /** The restart record (record.ts), when the options name its directory. */
  private readonly recorder?: Recorder;
  private lastTickAt = 0;
  /** Ports the socket left, each with the last generation a commit of ours on it can have. */
  private leftPorts: (readonly [port: number, upTo: number])[] = [];

  constructor(private readonly options: KeeperOptions) {
    super();
    this.intervalMs = options.intervalMs ?? 1000;
    this.useEvents = options.events ?? true;
    this.maxRetries = options.maxGenerationRetries ?? 20;
    this.log = options.logger ?? pino({ level: 'silent' });
    this.metrics = options.metrics ?? new KeeperMetrics();
    this.metrics.zeroLabels('repairs', Object.keys(CAUSES));
    this.metrics.zeroLabels('drift', Object.keys(DRIFT_KINDS));
    this.fight = new Fight({ ...DEFAULT_FIGHT, ...options.fight });
    this.attribution = new Attribution({ history: options.history, metrics: this.metrics });
    const k = this.k = new KeeperState(options, this.log, this.metrics, this.fight, this.attribution, this);
    // Each owned table's series exists from the start (see KeeperMetrics.zeroLabels): the names come as they commit.
    for (const t of k.config.tables) this.metrics.foreignChanges.inc({ table: `${t.family} ${t.name}`, comm: 'other' }, 0);
    k.owners = options.owners ?? [];
    k.desired = mergeOwners(k.config.tables, k.config.owners, k.owners);
    compactRules(k.desired);
    this.metrics.owners.set(k.owners.length);
    this.host = options.host ?? kernelHost(options.netns);
    this.arming = new Arming(k, () => this.scheduler.committing());
    this.reporter = new Reporter(k, { wanted: () => this.arming.wanted(), run: () => this.arming.ensure() });
    this.scheduler = new Scheduler({
      // A background pass is a read (seeding or checking the followed part); any other tries the followed part first.
      run: async (req) => (!req.background && await this.followPass.attempt(req)) || this.fullPass.attempt(req),
      fail: (e) => this.reporter.fail(e),
      passesBegin: () => this.arming.pause(),
      passesEnd: () => {
        // Armed again at once (the pass is done; usually a check in C++, resume), else after a wait
        // (its own commit's events still on their way to the followed part, as after start-up).
        this.arming.ensure();
        this.armSoon();
      },
    });
    this.eventRepair = new EventRepair(k, this.reporter, this.arming, this.scheduler);
    this.followPass = new FollowPass(k, this.reporter, this.arming, this.scheduler);
    this.fullPass = new FullPass(k, this.reporter, this.scheduler);
    if (options.record) this.recorder = new Recorder(k, options.record, () => this.scheduler.busy());
  }

  /** The socket all writes go through; its port id marks our own events. */
  get socket(): NftConn | undefined {
    return this.k.sock;
  }

  /**
   * What the keeper's parts share (src/keeper/state.ts): the monitor, the kernel view, the
   * reconciler, the desired tables. Tests and benches look in here; only the parts change it.
   */
  get state(): Readonly<KeeperState> {
    return this.k;
  }

  /** The monitor holds the repair of a foreign deletion, committed before any JavaScript runs (arming.ts). */
  get armed(): boolean {
    return this.arming.armed;
  }

  /** Opens the sockets, runs the start-up pass (adopting a correct ruleset without writing) and starts the loop. */
  async start(): Promise<void> {
    const k = this.k;
    const sock = k.sock = this.host.connect();
    const retired = k.retired;
    k.reconciler = new Reconciler(sock, { attempts: this.maxRetries, metrics: this.metrics, log: this.log, trackTimed: true, view: k.view });
    k.reconciler.retired = retired;
    if (this.useEvents) {
      k.noteOwned();
      const follow = this.options.follow ?? true;
      // Subscribed after the start-up pass (subscribe below): the kernel then builds no event of
      // the start-up's own install for it, which at a big ruleset is a share of that commit and can
      // overflow the socket (a resync before ready). A watcher without subscribe() is subscribed now.
      k.monitor = this.host.watch({
        tables: k.ownedTables(),
        ignorePorts: [sock.portId],
        ownCommits: follow,
        subscribeLater: true,
        onBatch: (b) => this.onEvents(b),
      });
      // Our own commits are told by the port id: a socket moved to another port (an interrupted
      // dump's replacement, its old port taken) has the filter follow it, and keep the old port for
      // the commits of ours on it still to be read.
      sock.onPortChange?.((_now, left) => {
        this.leftPorts = [...this.leftPorts, [left.port, left.upTo] as const].slice(-LEFT_PORTS);
        this.refilter();
      });
      const monitor = k.monitor;
      if (follow && monitor.progress && monitor.anchor) k.view.followEvents(monitor, () => k.stopped);
      if (!monitor.subscribe) this.anchor();
    }
    // A restart onto what the record says was verified at this very generation: the start-up pass
    // plans from it, reading no rule (record.ts).
    await this.recorder?.adopt();
    let refused: unknown;
    // The monitor joins at the start-up pass's first commit (FullPass), once it is in the kernel:
    // the install built no notification for it, and the read that verifies it, its generation read
    // after the join, is one the events follow on from (under a neighbour's commits, no second read).
    let joined: { anchored?: number } | undefined;
    if (k.monitor?.subscribe) k.joinEvents = () => { joined ??= { anchored: this.subscribe() }; };
    try {
      await this.request('startup', performance.now());
    } catch (e) {
      refused = e;
    }
    k.joinEvents = undefined;
    if (k.monitor?.subscribe && !k.stopped) {
      // The monitor saw no commit up to the anchor, its generation read after joining: the view
      // proves nothing by events before it (runCovers), and a commit after the start-up pass's
      // verified generation and before the join is found by that generation, read here.
      const gen = !joined ? this.subscribe() : joined.anchored !== undefined ? this.generation() : undefined;
      if (gen !== undefined && k.lastVerified !== undefined && gen !== k.lastVerified) this.scheduler.schedule('tick', performance.now());
    }
    // Another live process owns a table: refuse to start. Anything else was reported (fail) and the loop retries.
    if (refused instanceof TableOwnedError) {
      await this.idle();
      await this.stop();
      throw refused;
    }
    await this.idle();
    this.scheduler.every(this.intervalMs, () => this.tick());
    // The record of what the start-up left, right after ready (the turn after this one): an
    // install is marked not verified, and a restart that adopts it reads it back (record.ts).
    if (this.recorder) setImmediate(() => { if (!k.stopped) this.recorder!.write(); });
  }

  /** Joins the monitor (opened subscribeLater) to the notifications and anchors it: the generation anchored at. */
  private subscribe(): number | undefined {
    this.k.monitor!.subscribe!();
    return this.anchor();
  }

  /** The kernel's generation now (undefined: it could not be read, which is reported). */
  private generation(): number | undefined {
    try {
      return this.k.sock!.generation();
    } catch (e) {
      this.reporter.fail(e);
      return undefined;
    }
  }

  /**
   * Tells the monitor a generation read after it subscribed: every later commit reaches it whole.
   * Returns that generation (undefined where the view does not follow the events).
   */
  private anchor(): number | undefined {
    const monitor = this.k.monitor;
    if (!(this.options.follow ?? true) || !monitor?.progress || !monitor.anchor) return undefined;
    let gen: number;
    try {
      gen = this.k.sock!.generation();
    } catch (e) {
      // No anchor: the monitor proves no run of commits, and the passes read instead.
      this.reporter.fail(e);
      return undefined;
    }
    monitor.anchor(gen, this.k.view.overflows);
    return gen;
  }

  /** Stops the loop and closes the sockets. The rules stay in the kernel. */
  async stop(): Promise<void> {
    this.k.stopped = true;
    this.metrics.ready.set(0);
    this.arming.stop();
    await this.scheduler.stop();
    this.recorder?.write(true);
    this.reporter.stop();
    this.k.monitor?.close();
    this.k.sock?.close();
  }

  /** Waits until no pass is running or queued, and what they reported is out (metrics, log, events). */
  async idle(): Promise<void> {
    await this.scheduler.idle();
    this.reporter.flush();
  }

  /**
   * Replaces the desired state (the config, and the owners with it when given) and enforces it at
   * once. If the kernel refuses the new state, the old one (config and owners) is restored and
   * enforced, and the refusal is thrown: a reload is accepted or rejected as a whole.
   */
  async setConfig(config: Config, owners: readonly Owner[] = this.k.owners): Promise<void> {
    const k = this.k;
    const previous = { config: k.config, owners: k.owners, retired: [...k.retired] };
    const kept = new Set(config.tables.map((t) => `${t.family} ${t.name}`));
    for (const t of k.config.tables) {
      if (!kept.has(`${t.family} ${t.name}`)) k.retired.push({ family: t.family, name: t.name });
    }
    this.install(config, owners);
    await this.idle();
    try {
      await this.request('reload', performance.now());
    } catch (refused) {
      await this.idle();
      k.retired = previous.retired;
      this.install(previous.config, previous.owners);
      this.metrics.reloadFailed.set(1);
      await this.request('reload', performance.now()).catch((e) => this.reporter.fail(e));
      await this.idle();
      // Said by the caller, who has more to do first (the daemon writes its reload status file).
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
    const previous = this.k.owners;
    await this.idle();
    this.install(this.k.config, owners);
    try {
      await this.request('owners', performance.now());
    } catch (refused) {
      await this.idle();
      this.install(this.k.config, previous);
      this.log.error({ err: (refused as Error).message }, 'the kernel refused the owners change; the previous owners stay in force');
      await this.request('owners', performance.now()).catch((e) => this.reporter.fail(e));
      await this.idle();
      throw refused;
    }
    await this.idle();
  }

  /** The monitor's filter: the tables we own, our socket's port id as it is now, and the ports it left. */
  private refilter(): void {
    const k = this.k;
    k.monitor?.setFilter(k.ownedTables(), k.sock ? [k.sock.portId, ...this.leftPorts] : []);
  }

  private install(config: Config, owners: readonly Owner[]): void {
    const k = this.k;
    this.arming.disarm();  // the armed repairs re-add the old desired rules
    // Owners' rules are compacted when compiled (compileOwner): only a new config's rules are walked.
    if (config !== k.config) compactRules(config.tables);
    k.config = config;
    k.owners = owners;
    k.desired = mergeOwners(config.tables, config.owners, owners);
    this.metrics.owners.set(owners.length);
    this.refilter();
    k.noteOwned();
    // A change of set and map elements only keeps the view's events: the next pass commits just those element ops.
    k.view.desiredChanged(k.desired);
    k.lastVerified = undefined;
  }

  status(): KeeperStatus {
    const r = this.reporter;
    return {
      ready: this.isReady(),
      generation: this.k.lastVerified,
      fightLevel: this.fight.level,
      lastRepair: r.lastRepair,
      lastError: r.lastError,
      tables: this.k.config.tables.map((t) => {
        const key = `${t.family} ${t.name}`;
        const state = r.drifting.has(key) ? 'drifting' : r.ready ? 'verified' : 'unknown';
        return { family: t.family, name: t.name, state, protection: r.protection.get(key) ?? 'unknown' };
      }),
      foreignChanges: this.attribution.recent(10),
    };
  }

  /** True while the loop is alive: a tick ran within three intervals. */
  healthy(now = performance.now()): boolean {
    return !this.k.stopped && (this.lastTickAt === 0 || now - this.lastTickAt < 3 * this.intervalMs + 1000);
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
    return this.reporter.notReadyReason(now, this.intervalMs);
  }

  /** Whether repairs are planned from the events (exact) or need a read, and why. */
  followState(): { exact: boolean; generation: number; reason?: string } | undefined {
    return this.reporter.followState();
  }

  /**
   * Runs a pass now, or after the running one; coalesces bursts into one (Scheduler.request).
   * Resolves with the outcome of the pass that served this request, or rejects with its refusal.
   */
  request(cause: Cause, detectedAt: number, background = false): Promise<PassOutcome> {
    return this.scheduler.request(cause, detectedAt, background);
  }

  /**
   * A pass that reads the owned tables even when the generation says nothing moved (the read-back
   * the tick makes after a trusted commit, now), instead of planning from the known state.
   */
  readBack(cause: Cause, detectedAt: number, background = false): Promise<PassOutcome> {
    this.k.readBackDue = true;
    return this.request(cause, detectedAt, background);
  }

  private tick(): void {
    const k = this.k;
    if (k.stopped || !k.sock) return;
    this.lastTickAt = performance.now();
    this.metrics.ticks.inc();
    this.metrics.ready.set(this.isReady(this.lastTickAt) ? 1 : 0);
    this.emit('tick');
    // The events first, as every proof takes them (FollowedView.current): what the monitor's socket
    // holds now is handed over before the generation is read, each batch as the loop's poll would
    // (an armed reaction commits for a deletion among them, an event repair runs). A tick whose
    // timer was due between a commit and that poll (libuv runs timers first) then finds the
    // generation the repair verified, not a moved one to start a pass for (which would pause the arm).
    k.view.current();
    let gen: number | undefined;
    try {
      // Not while a dump or commit holds the socket (a long chain's dump holds it for seconds, and
      // the events would wait with this thread): that work ends in a pass that verifies, and the
      // next tick looks again.
      gen = k.sock.generationIfFree ? k.sock.generationIfFree() : k.sock.generation();
    } catch (e) {
      this.reporter.fail(e);
      return;
    }
    if (gen === undefined) return;
    if (k.trustedSince !== undefined && this.lastTickAt - k.trustedSince >= (this.options.trustOwnCommitMs ?? 10_000)) {
      // Verified by our own commit or by the followed part since then, not by a read: read back once, off
      // the repair path (also while foreign commits elsewhere keep moving the generation). With the
      // followed part seeded it is a read that only observes (and checks it), so it never commits unplanned.
      k.trustedSince = undefined;
      k.readBackDue = true;  // a read, not the known state
      if (k.view.follows) this.request('tick', this.lastTickAt, true).catch(() => undefined);
      else this.scheduler.schedule('tick', this.lastTickAt);
      return;
    }
    // Also when the generation moved: under a neighbour committing elsewhere it moves at every
    // tick, and the record is of the generation the events prove the view at (Recorder.write).
    this.recorder?.write();
    if (gen === k.lastVerified) {
      this.arming.ensure();
      // Nothing changed anywhere: no dump, no log. A quiet namespace is also
      // how a fight ends, and no pass would run to notice it (bench/hostile.ts
      // found the level stuck at its peak after the neighbour stopped).
      this.reporter.endFightIfQuiet();
      return;
    }
    this.scheduler.schedule('tick', this.lastTickAt);
  }

  private onEvents(b: MonitorBatch): void {
    const k = this.k;
    if (k.stopped) return;
    // A batch after the arm's generation ends the monitor's arm, answered or not: armed again once
    // the followed part is clean (at once, by the event repair, after a reaction that committed).
    if (this.arming.armed && (b.overflow || b.generation > this.arming.armedAt)) {
      this.arming.armed = false;
      this.armSoon();
    }
    if (b.foreign !== false && this.options.trace) {
      this.options.trace('received', b.receivedNs);
      this.options.trace('event');
    }
    const wasValid = k.view.valid;
    k.view.follow(b, k.sock!.portId);
    if (wasValid && !k.view.valid) {
      this.log.info({ reason: k.view.reason }, 'the followed part cannot follow this; the next pass reads the kernel');
      this.reporter.followChanged();
    }
    if (b.foreign === false && !b.overflow) {
      // Our own commit: only the view takes it in (its handles; the elements of a repair, which
      // no echo brings). Now exact at it again, the view can arm the monitor.
      this.armSoon();
      return;
    }
    if (b.overflow) {
      this.metrics.overflows.inc();
      this.log.warn({ cause: 'overflow' }, 'event socket overflowed; resyncing');
      this.scheduler.schedule('overflow', performance.now());
      return;
    }
    if (b.generation === k.lastVerified) {
      this.attribution.note(b, k.ownedKeys);
      return;
    }
    // The repair runs at once, up to its commit, here or in a pass (small commits are sent inline): count after it.
    // Who made the change is looked up after that (its /proc may be gone by then: said so, not guessed).
    const now = performance.now();
    this.attribution.arriving = b.by;
    if (!this.eventRepair.attempt({ cause: 'event', detectedAt: now, batch: b })) {
      this.scheduler.schedule('event', now);
      this.metrics.events.inc();
    }
    this.attribution.note(b, k.ownedKeys);
  }

  /** Arms the monitor after the keeper has waited once (the report timer), off the way to a commit. */
  private armSoon(): void {
    if (this.arming.possible()) this.reporter.runAfterWait();
  }
}
