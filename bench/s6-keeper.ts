/**
 * The keeper as its own process for S6 (and for bench/probe.ts): src/keeper
 * with events on, a 1 s tick and the fight back-off off (the probe deletes a
 * rule every few milliseconds on purpose; `nfkeeper run` would back off, as
 * deployed). Prints "ready" once the start-up pass has verified the table,
 * and "followed exact" whenever the followed part (re)gains its proof.
 *
 * With --alt-config FILE (compiled at start, like --config), each line
 * "swap" on stdin applies the other of the two configs (setConfig) and prints
 * "changed MS OPS COMMIT_MS": the setConfig call's wall time, the ops of the
 * commit, and the repair's own latency (from the request to the commit done).
 * A FILE ending in .nft is read as nft's syntax.
 *
 *   sudo npx tsx bench/s6-keeper.ts --netns /run/netns/NAME --config FILE [--alt-config FILE] [--trace]
 *
 * --trace: after each repair planned from the events, one line `trace {"event": ns, …}` on stdout,
 * the monotonic clock (process.hrtime) at each step of the path (KeeperOptions.trace), for
 * bench/repair-trace.ts to set beside its probe's own clock.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { parseConfig, parseNftConfig, type Config } from '../src/config/config.js';
import { Keeper, type RepairReport, type TraceMark } from '../src/keeper/keeper.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--netns': 1, '--config': 1, '--alt-config': 1, '--trace': 0 });
const arg = cli.value;
const load = (f: string): Config => (f.endsWith('.nft') ? parseNftConfig : parseConfig)(readFileSync(f, 'utf8'), f);
const file = arg('--config');
if (!file) throw new Error('usage: s6-keeper.ts --netns PATH --config FILE [--alt-config FILE]');
const configs = [load(file)];
const alt = arg('--alt-config');
if (alt) configs.push(load(alt));
let marks: Partial<Record<TraceMark, number>> = {};
// Trace lines are written in bunches, off the repair path: a write to the pipe per repair costs the
// keeper CPU right after its commit, which the probe (waiting for a CPU under load) would pay.
let traceLines: string[] = [];
const flushTrace = () => {
  if (traceLines.length === 0) return;
  process.stdout.write(traceLines.join(''));
  traceLines = [];
};
const trace = cli.has('--trace')
  ? (m: TraceMark, atNs?: number) => {
    marks[m] = atNs ?? Number(process.hrtime.bigint());
    if (m === 'reported') {
      traceLines.push(`trace ${JSON.stringify(marks)}\n`);
      marks = {};
    }
  }
  : undefined;
if (trace) setInterval(flushTrace, 250).unref();
const keeper = new Keeper({ config: configs[0]!, netns: arg('--netns'), fight: { threshold: 1e9 }, trace });
keeper.on('error', (e: Error) => process.stderr.write(`keeper: ${e.message}\n`));
// A repair that could not be planned from the events (the full observe ran instead) says why.
keeper.on('followed', (m: { exact: boolean; reason?: string }) => {
  if (!m.exact) process.stderr.write(`keeper: followed part off until the next read: ${m.reason}\n`);
  else process.stdout.write('followed exact\n');
});
keeper.on('follow-fallback', (reason?: string) => process.stderr.write(`keeper: a pass read the kernel: ${reason ?? '?'}\n`));
await keeper.start();
process.stdout.write('ready\n');
if (configs.length > 1) {
  let at = 0;
  let last: RepairReport | undefined;
  keeper.on('repaired', (r: RepairReport) => { if (r.cause === 'reload') last = r; });
  createInterface({ input: process.stdin }).on('line', (l) => {
    if (l.trim() !== 'swap') return;
    at = 1 - at;
    last = undefined;
    const t0 = performance.now();
    keeper.setConfig(configs[at]!).then(() => {
      process.stdout.write(`changed ${(performance.now() - t0).toFixed(3)} ${last?.ops ?? 0} ${last ? last.latencyMs.toFixed(3) : 'NaN'}\n`);
    }, (e: Error) => process.stdout.write(`refused ${e.message}\n`));
  });
}
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    void keeper.stop().then(() => {
      flushTrace();
      process.exit(0);
    });
  });
}
