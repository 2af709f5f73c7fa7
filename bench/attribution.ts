/**
 * The attribution's memory and cost, without a kernel: 100,000 foreign changes through the keeper's
 * Attribution (the ring of the last N, the unanswered list, the comm labels, the metric), each looked
 * up in /proc as the keeper does and answered by a repair, with a follower listening. The heap after
 * a full collection is printed every 10,000 changes: it must stay flat once the ring is full. Then
 * the cost of one look-up in /proc: of a live process (this one: comm, exe, cmdline, stat, the
 * parent's comm, cgroup, comm again), of a pid that is gone (one failed open), and of a committer
 * seen lately (its comm only).
 *
 *   npx tsx --expose-gc bench/attribution.ts [--changes 100000] [--history 256]
 */
import { performance } from 'node:perf_hooks';
import { loadavg } from 'node:os';
import { Attribution, resolveCommitter } from '../src/keeper/attribution.js';
import { KeeperMetrics } from '../src/base/metrics.js';
import type { MonitorBatch } from '../src/netlink/events.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--changes': 1, '--history': 1 });
const changes = Number(cli.value('--changes', '100000'));
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npx tsx --expose-gc bench/attribution.ts)');

const heapMiB = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 1048576;
};

const metrics = new KeeperMetrics();
const a = new Attribution({ history: Number(cli.value('--history', '256')), metrics, initialPidNamespace: true });
const owned = new Set(['ip nfkeeper']);
let heard = 0;
a.follow(() => heard++);
// Comms beyond the label bound: the series stay bounded too.
const comms = Array.from({ length: 50 }, (_, i) => `proc${i}`);
console.log(`load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}; ${changes} changes, history ${a.capacity}`);
console.log('changes\theap MiB\tseries');
const base = heapMiB();
console.log(`0\t${base.toFixed(2)}\t-`);
for (let g = 1; g <= changes; g++) {
  const b: MonitorBatch = {
    overflow: false, generation: 2 * g, truncated: false, foreign: true, since: 1, receivedNs: 0,
    // Every other one from this live process (a full /proc look-up), the rest from a pid that is gone.
    by: g % 2 === 0 ? { pid: process.pid, comm: 'node' } : { pid: 4_000_000 - (g % 1000), comm: comms[g % comms.length]! },
    events: [{ type: 'delrule', family: 'ip', table: 'nfkeeper', name: 'postrouting', handle: g, portId: 7, flags: 0 }],
  };
  a.note(b, owned);
  a.answered({ generation: 2 * g + 1, cause: 'event', ops: [`insert rule ip nfkeeper postrouting handle ${g + 1}`], latencyMs: 0.3 });
  if (g % 10_000 === 0) {
    const series = (await metrics.foreignChanges.get()).values.length;
    console.log(`${g}\t${heapMiB().toFixed(2)}\t${series}`);
  }
}
console.log(`followers heard ${heard} lines; ring holds ${a.length}`);

// One look-up's cost.
for (const [what, pid, comm] of [['live (this process)', process.pid, 'node'], ['gone', 4_000_001, 'nft']] as const) {
  const n = 20_000;
  for (let i = 0; i < 1000; i++) resolveCommitter(pid, comm, { initialPidNamespace: true });
  const t0 = performance.now();
  for (let i = 0; i < n; i++) resolveCommitter(pid, comm, { initialPidNamespace: true });
  console.log(`resolve ${what}: ${((performance.now() - t0) / n * 1000).toFixed(1)} µs each (mean of ${n})`);
}
{
  const n = 20_000;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) a.resolve(process.pid, 'node');
  console.log(`resolve a committer seen lately (its comm read again): ${((performance.now() - t0) / n * 1000).toFixed(1)} µs each (mean of ${n})`);
}
