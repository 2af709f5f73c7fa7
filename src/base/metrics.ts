/**
 * Prometheus metrics of one nfkeeper process, in a registry of its own: the
 * keeper loop's, owned GC's and foreign GC's counters. Below both because the
 * keeper and foreign GC both count into it and neither may import the other.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * The event-loop lag is sampled by a libuv timer due every LAG_SAMPLE_MS: how late it fires is
 * the lag. At prom-client's default 10 ms that timer alone woke an idle daemon 100 times a second,
 * most of its idle CPU; once a second is plenty for a 1 Hz loop.
 */
export const LAG_SAMPLE_MS = 1000;

/**
 * prom-client's default metrics this module replaces or leaves out. Its event-loop-lag statistics
 * are Node's histogram of the time between the sampling timer's firings, so they read the sampling
 * period itself plus the lag (an idle daemon's p99 read the period): replaced by the same names from
 * a sampler of our own that subtracts the period. Its `*_active_*_total` are gauges with a
 * counter's suffix, which `promtool check metrics` refuses; the unsuffixed `*_active_*` gauges
 * carry the same counts by type.
 */
const LAG_STATS = ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'] as const;
const LEFT_OUT = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];
/** prom-client's own lag sampler cannot be turned off: its timer is set so far out it never fires (libuv's longest timer is 2^31-1 ms, 24.8 days). */
const PROM_CLIENT_LAG_NEVER_MS = 2 ** 31 - 1;

export class KeeperMetrics {
  readonly registry = new Registry();
  readonly ticks = new Counter({ name: 'nfkeeper_ticks_total', help: 'Generation checks', registers: [this.registry] });
  readonly dumps = new Counter({ name: 'nfkeeper_dumps_total', help: 'Reconcile passes that dumped owned tables', registers: [this.registry] });
  readonly repairs = new Counter({
    name: 'nfkeeper_repairs_total', help: 'Batches committed to repair drift, by what detected it',
    labelNames: ['cause'], registers: [this.registry],
  });
  readonly drift = new Counter({
    name: 'nfkeeper_drift_total', help: 'Differences found, by kind', labelNames: ['kind'], registers: [this.registry],
  });
  readonly generationRetries = new Counter({
    name: 'nfkeeper_generation_retries_total', help: 'Commits refused because the ruleset moved on, then retried',
    registers: [this.registry],
  });
  readonly events = new Counter({
    name: 'nfkeeper_event_batches_total', help: 'Kernel commits touching owned tables that woke the keeper',
    registers: [this.registry],
  });
  readonly overflows = new Counter({ name: 'nfkeeper_event_overflows_total', help: 'ENOBUFS on the event socket', registers: [this.registry] });
  readonly latency = new Histogram({
    name: 'nfkeeper_repair_latency_seconds', help: 'From detection to the repair being committed',
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1, 5, 30],
    registers: [this.registry],
  });
  readonly generation = new Gauge({ name: 'nfkeeper_generation', help: 'Last verified ruleset generation', registers: [this.registry] });
  readonly fightLevel = new Gauge({ name: 'nfkeeper_fight_level', help: 'Back-off level (0: no fight)', registers: [this.registry] });
  readonly foreignChanges = new Counter({
    name: 'nfkeeper_foreign_changes_total', help: 'Foreign commits that changed an owned table, by table and committing process name (bounded; the rest: other)',
    labelNames: ['table', 'comm'], registers: [this.registry],
  });
  readonly fightRaises = new Counter({
    name: 'nfkeeper_fight_raises_total', help: 'Fight back-off levels raised, by the name of the process fought (the recent changes\' committers)',
    labelNames: ['comm'], registers: [this.registry],
  });
  readonly ready = new Gauge({ name: 'nfkeeper_ready', help: '1 once the desired ruleset is verified', registers: [this.registry] });
  readonly errors = new Counter({ name: 'nfkeeper_errors_total', help: 'Reconcile passes that failed', registers: [this.registry] });
  readonly protection = new Gauge({
    name: 'nfkeeper_table_protected', help: '1 when the table is owned by our socket (protect mode)',
    labelNames: ['table'], registers: [this.registry],
  });
  readonly owners = new Gauge({ name: 'nfkeeper_owners', help: 'Owners registered over the control API', registers: [this.registry] });
  readonly ownersRefused = new Gauge({ name: 'nfkeeper_owners_refused', help: 'Registered owners the kernel refuses now: left out and retried', registers: [this.registry] });
  readonly ownedGcFound = new Counter({
    name: 'nfkeeper_owned_gc_found_total', help: 'Owner chains and tagged rules in owned tables that no registered owner claims, by kind',
    labelNames: ['kind'], registers: [this.registry],
  });
  readonly ownedGcCollected = new Counter({
    name: 'nfkeeper_owned_gc_collected_total', help: 'Unclaimed owner chains and tagged rules removed, by kind',
    labelNames: ['kind'], registers: [this.registry],
  });
  readonly foreignGcFound = new Counter({
    name: 'nfkeeper_foreign_gc_found_total', help: 'Foreign GC: dead ids found with rules or chains to collect', registers: [this.registry],
  });
  readonly foreignGcCollected = new Counter({
    name: 'nfkeeper_foreign_gc_collected_total', help: 'Foreign GC: dead ids whose rules and chains were collected', registers: [this.registry],
  });
  readonly reloadFailed = new Gauge({ name: 'nfkeeper_last_reload_failed', help: '1 when the last config reload was rejected', registers: [this.registry] });
  readonly buildInfo = new Gauge({
    name: 'nfkeeper_build_info', help: 'Always 1; the labels say which nfkeeper and which Node run', labelNames: ['version', 'node'],
    registers: [this.registry],
  });

  /**
   * Exports every label value a counter can take at 0, so each series exists from the start: a
   * rate() or increase() over a series that appears only at its first event misses that event.
   * The keeper passes its causes and drift kinds (the vocabularies live where they are used).
   */
  zeroLabels(counter: 'repairs' | 'drift', values: Iterable<string>): void {
    for (const v of values) {
      if (counter === 'repairs') this.repairs.inc({ cause: v }, 0);
      else this.drift.inc({ kind: v }, 0);
    }
  }

  constructor(processMetrics = false, build?: { version: string }) {
    this.fightRaises.inc({ comm: 'other' }, 0);
    for (const kind of ['chain', 'rule']) {
      this.ownedGcFound.inc({ kind }, 0);
      this.ownedGcCollected.inc({ kind }, 0);
    }
    if (build) this.buildInfo.set({ version: build.version, node: process.version }, 1);
    if (processMetrics) {
      collectDefaultMetrics({ register: this.registry, prefix: 'nfkeeper_', eventLoopMonitoringPrecision: PROM_CLIENT_LAG_NEVER_MS });
      for (const name of [...LEFT_OUT, ...LAG_STATS.map((s) => `nodejs_eventloop_lag_${s}_seconds`)]) {
        this.registry.removeSingleMetric(`nfkeeper_${name}`);
      }
      this.eventLoopLag();
    }
  }

  /**
   * The lag statistics since the last scrape, in seconds: how late a timer due every
   * LAG_SAMPLE_MS fired (Node records the whole time between firings; the period is subtracted).
   * Millisecond precision: libuv's timers are due to the millisecond.
   */
  private eventLoopLag(): void {
    const h = monitorEventLoopDelay({ resolution: LAG_SAMPLE_MS });
    h.enable();
    const period = LAG_SAMPLE_MS * 1e6;
    const late = (ns: number) => h.count === 0 ? 0 : Math.max(0, ns - period) / 1e9;
    // One collect sets them all (the registry asks the metrics in the order they were registered: min first).
    const collect = () => {
      gauges.min.set(late(h.min));
      gauges.max.set(late(h.max));
      gauges.mean.set(late(h.mean));
      gauges.stddev.set(h.count === 0 ? 0 : h.stddev / 1e9);
      gauges.p50.set(late(h.percentile(50)));
      gauges.p90.set(late(h.percentile(90)));
      gauges.p99.set(late(h.percentile(99)));
      h.reset();
    };
    const gauges = Object.fromEntries(LAG_STATS.map((stat) => [stat, new Gauge({
      name: `nfkeeper_nodejs_eventloop_lag_${stat}_seconds`,
      help: `Event loop lag since the last scrape, ${stat === 'stddev' ? 'standard deviation' : stat}: how late a timer due every ${LAG_SAMPLE_MS} ms fired`,
      registers: [this.registry],
      ...(stat === 'min' ? { collect } : {}),
    })])) as Record<typeof LAG_STATS[number], Gauge>;
  }
}
