/**
 * What the keeper's parts share: the options, the sockets, the desired state, what the kernel holds
 * (the view) and the generation last verified. The scheduler, the repair
 * paths and the reporter each hold this one object; the Keeper makes it and wires them up.
 */
import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Config } from '../config/config.js';
import type { TableConfig } from '../model/desired.js';
import type { KeeperMetrics } from '../base/metrics.js';
import type { NftConn, NftHost, NftWatch } from '../netlink/conn.js';
import type { SentRuleExprs } from '../netlink/sent-exprs.js';
import type { Owner } from '../owners/index.js';
import type { Attribution } from './attribution.js';
import type { Fight, FightOptions } from './fight.js';
import { KernelView } from './view.js';
import type { Reconciler } from './reconciler.js';
import type { TraceMark } from './outcome.js';
import type { RecordOptions } from './record.js';

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
   * Follow the owned chains and sets from the events and repair a foreign change from that, without
   * a dump (src/keeper/follow-events.ts). Default true; needs events and a watcher that reports progress.
   */
  follow?: boolean;
  /**
   * Bench-only: called at each step of the event→repair path (bench/repair-trace.ts times them from
   * outside); undefined in the daemon, where it costs one test per step.
   */
  trace?: (mark: TraceMark, atNs?: number) => void;
  /** Foreign changes remembered with who made them and the repair that answered them; default 256. */
  history?: number;
  /**
   * Keep a restart record in this directory (record.ts): written when a read verified the owned
   * tables, at most every few minutes and at stop; a restart that finds it matching the kernel
   * adopts the tables without reading their rules. None: every start reads them.
   */
  record?: RecordOptions;
  /**
   * Told the expressions the start-up pass's commits sent, as sent (SentRuleExprs): the compile
   * cache's store after a start that compiled takes them instead of encoding every rule again.
   * None: the commits do not keep them.
   */
  startupExprs?: (sent: SentRuleExprs) => void;
}

type TableRef = { family: TableConfig['family']; name: string };

export class KeeperState {
  sock?: NftConn;
  monitor?: NftWatch;
  reconciler?: Reconciler;
  /** What the kernel holds in the owned tables, from the observations, our commits and the events (view.ts). */
  readonly view = new KernelView();
  config: Config;
  owners: readonly Owner[] = [];
  /** The config's tables with the owners merged in: what the passes enforce. */
  desired: TableConfig[] = [];
  /** The owned tables as "family name", for the attribution. */
  ownedKeys: ReadonlySet<string> = new Set();
  lastVerified?: number;
  /** Set while lastVerified is our own commit's generation rather than a read-back (see FullPass). */
  trustedSince?: number;
  /**
   * The generation at which a read (a pass that read every owned table, or an adopted record a
   * read verified) last found the desired state; undefined from our own commit until the next such
   * read. The restart record is marked verified only for tables no commit changed since (record.ts).
   */
  readAt?: number;
  /** The next pass reads the tables even if the generation says nothing moved: the trusted commit's read-back. */
  readBackDue = false;
  /** The generation at which the guard last refused a repair planned from the view's events: the monitor trails it. */
  refusedAt = -1;
  stopped = false;
  /**
   * During the start-up pass: joins the monitor (opened subscribeLater) to the notifications, once.
   * FullPass calls it at the pass's first commit (Keeper.start).
   */
  joinEvents?: () => void;
  /** Retired tables noted before start() opened the reconciler. */
  private retiredEarly: TableRef[] = [];

  constructor(readonly options: KeeperOptions, readonly log: Logger, readonly metrics: KeeperMetrics, readonly fight: Fight,
    readonly attribution: Attribution, readonly events: EventEmitter) {
    this.config = options.config;
  }

  /** Tables a reload dropped from the config, until a pass finds them gone. */
  get retired(): TableRef[] {
    return this.reconciler?.retired ?? this.retiredEarly;
  }

  set retired(v: TableRef[]) {
    if (this.reconciler) this.reconciler.retired = v;
    else this.retiredEarly = v;
  }

  ownedTables(): TableRef[] {
    return this.config.tables.map((t) => ({ family: t.family, name: t.name }));
  }

  /** The config's tables are the owned ones: for the view's events and the attribution alike. */
  noteOwned(): void {
    const owned = this.ownedTables();
    this.view.setOwned(owned);
    this.ownedKeys = new Set(owned.map((t) => `${t.family} ${t.name}`));
  }
}
