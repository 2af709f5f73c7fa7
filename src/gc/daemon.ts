/**
 * Foreign GC in the daemon: every gc.interval, read the live set and scan
 * the foreign tables, with the grace clocks kept in memory. It only reports
 * (logs) what it would collect unless gc.enabled is true. A failing live
 * set or scan is logged and skipped: it never deletes on doubt.
 */
import type { Logger } from 'pino';
import type { GcConfig } from '../config/gc.js';
import type { NftConn, NftHost } from '../netlink/conn.js';
import type { OpenProof } from '../netlink/guard.js';
import { kernelHost } from '../netlink/host.js';
import { GraceTracker, collect, renderGarbage } from './collect.js';
import { collectLegacy, renderLegacyGarbage } from './legacy.js';
import { readLiveSet } from './live.js';
import type { KeeperMetrics } from '../base/metrics.js';

export interface GcLoopOptions {
  gc: GcConfig;
  netns?: string;
  logger: Logger;
  /** More live ids, read on every pass: the registered owners. With it, gc.live is optional. */
  liveIds?: () => Iterable<string>;
  /** Found/collected counters to export (nfkeeper_foreign_gc_*). */
  metrics?: Pick<KeeperMetrics, 'foreignGcFound' | 'foreignGcCollected'>;
  /** Where to connect; default the kernel of `netns`. */
  host?: NftHost;
  /** nftables: the resend proof, opened at a pass's first refusal (collect's `proof`). */
  proof?: OpenProof;
  /**
   * iptables-legacy: runs a pass's save, plan and restore where no owner is answered meanwhile (the
   * registry's turn, OwnerRegistry.exclusive). x_tables has no generation for a registration to move:
   * without it an owner answered between the pass's look at `liveIds` and its restore lost its id's rules.
   */
  exclusive?: <T>(fn: () => Promise<T>) => Promise<T>;
}

/** What one pass found and did, on either backend. */
export interface GcPass {
  garbage: { id: string }[];
  pending: { id: string; missingForMs: number }[];
  collected: boolean;
  ops: number;
  /** The report-only log's text of what would go. */
  wouldRemove(): string[];
}

export interface GcTotals {
  runs: number;
  found: number;
  collected: number;
  errors: number;
}

export class GcLoop {
  readonly tracker = new GraceTracker();
  readonly totals: GcTotals = { runs: 0, found: 0, collected: 0, errors: 0 };
  private gc: GcConfig | undefined;
  private readonly log: Logger;
  private readonly host: NftHost;
  private sock: NftConn | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<GcPass | undefined> | undefined;
  private readonly netns: string | undefined;
  private stopped = false;
  private lastReported = '';

  private readonly liveIds: GcLoopOptions['liveIds'];
  private readonly metrics: GcLoopOptions['metrics'];
  private readonly proof: GcLoopOptions['proof'];
  private readonly exclusive: NonNullable<GcLoopOptions['exclusive']>;

  constructor(o: GcLoopOptions) {
    this.exclusive = o.exclusive ?? ((fn) => fn());
    this.liveIds = o.liveIds;
    this.metrics = o.metrics;
    this.proof = o.proof;
    this.gc = o.gc;
    this.log = o.logger;
    this.host = o.host ?? kernelHost(o.netns);
    this.netns = o.netns;
  }

  /** A reloaded config; undefined (the gc section removed) stops collecting until the next one. */
  setConfig(gc: GcConfig | undefined): void {
    this.gc = gc;
  }

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
    this.sock?.close();
    this.sock = undefined;
  }

  /** One pass; resolves to undefined when it could not run (logged). */
  runOnce(now = Date.now()): Promise<GcPass | undefined> {
    const p = this.pass(now).finally(() => {
      if (this.running === p) this.running = undefined;
    });
    this.running = p;
    return p;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.runOnce().then(() => this.schedule(this.gc?.interval ?? 30_000));
    }, ms);
    this.timer.unref();
  }

  private async pass(now: number): Promise<GcPass | undefined> {
    const gc = this.gc;
    if (!gc || gc.foreign.length === 0 || (!gc.live && !this.liveIds)) return undefined;
    this.totals.runs++;
    try {
      const live = gc.live ? await readLiveSet(gc.live) : new Set<string>();
      for (const id of this.liveIds?.() ?? []) live.add(id);
      const scan = { foreign: gc.foreign, live, graceMs: gc.grace, tracker: this.tracker, now, dryRun: !gc.enabled,
        ...(this.liveIds ? { liveIds: this.liveIds } : {}) };
      let r: GcPass;
      if (gc.backend === 'iptables-legacy') {
        // Collecting, in the registry's turn (report-only passes change nothing and hold no one up).
        const pass = () => collectLegacy({ ...scan, netns: this.netns });
        const l = await (gc.enabled ? this.exclusive(pass) : pass());
        r = { ...l, wouldRemove: () => renderLegacyGarbage(l.garbage) };
      } else {
        this.sock ??= this.host.connect();
        const n = await collect(this.sock, { ...scan, ...(this.proof ? { proof: this.proof } : {}) });
        r = { ...n, wouldRemove: () => renderGarbage(n.garbage) };
      }
      this.totals.found += r.garbage.length;
      this.metrics?.foreignGcFound.inc(r.garbage.length);
      if (r.collected) {
        this.totals.collected += r.garbage.length;
        this.metrics?.foreignGcCollected.inc(r.garbage.length);
      }
      if (r.garbage.length > 0) {
        const ids = r.garbage.map((g) => g.id);
        if (r.collected) this.log.info({ ids, ops: r.ops }, 'foreign garbage collected');
        else {
          // Report-only: warn when the garbage changes, not on every pass.
          const key = ids.join(' ');
          const level = key === this.lastReported ? 'debug' : 'warn';
          this.lastReported = key;
          this.log[level]({ ids, wouldRemove: r.wouldRemove() }, 'foreign garbage found (report only: set gc.enabled: true to collect)');
        }
      } else this.lastReported = '';
      if (r.pending.length > 0) this.log.debug({ pending: r.pending }, 'not-live ids inside their grace period');
      return r;
    } catch (e) {
      this.totals.errors++;
      this.sock?.close();  // a fresh socket next time
      this.sock = undefined;
      this.log.error({ err: (e as Error).message }, 'foreign gc pass failed; nothing was collected');
      return undefined;
    }
  }
}
