/**
 * Prometheus metrics of one nfkeeper process, in a registry of its own: the
 * keeper loop's, owned GC's and foreign GC's counters. Top level because the
 * keeper and foreign GC both count into it and neither may import the other.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

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
    // The event-loop-lag metric samples with a libuv timer; at its default 10 ms it alone woke an
    // idle daemon 100 times a second (1.3 % of a core). Once a second is plenty for a 1 Hz loop.
    if (processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'nfkeeper_', eventLoopMonitoringPrecision: 1000 });
  }
}
