/**
 * Where the time of a small repair goes (S6's 4-rule repair): the keeper runs as its own
 * process (bench/s6-keeper.ts --trace) over one chain of N rules, and a probe like bench/probe.ts
 * deletes the middle rule and waits on the nftables multicast group for the repair. Both sides
 * stamp the same monotonic clock (process.hrtime), so each sample splits into:
 *
 *   probe commit → keeper's JS sees the event → pass starts → followed part proven exact → plan built →
 *   repair committed (sendmsg returns: the kernel ran the transaction) → probe's JS sees it.
 *
 *   sudo npx tsx bench/repair-trace.ts [--n 4] [--count 300] [--gap-ms 20] [--node-flags "--max-semi-space-size=1"]
 *
 * Prints the median and p99 of each segment and of the whole, and the slowest samples' segments
 * (which step a tail sample spent its time in). After the keeper has exited, the kernel's floor on the
 * same chain (--floor K samples, default 20; 0 skips it): the probe's socket deletes the middle rule
 * and re-adds it at its position, two commits back to back, its monitor still listening (S6's floor,
 * in the same run and under the same load). Nothing here is asserted; it is a tool for finding
 * where time goes, beside bench/scenarios/s6.ts, which reports the figures.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { Batch } from '../src/netlink/batch.js';
import { Monitor } from '../src/netlink/monitor.js';
import type { MonitorBatch } from '../src/netlink/events.js';
import { open } from '../src/netlink/socket.js';
import { withBenchNetns } from './lib/netns.js';
import { s6Yaml } from './scenarios/s6.js';
import { quantile } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--n': 1, '--count': 1, '--gap-ms': 1, '--node-flags': 1, '--perf': 1, '--floor': 1 });
const arg = cli.value;
const N = Number(arg('--n', '4'));
const COUNT = Number(arg('--count', '300'));
const GAP_MS = Number(arg('--gap-ms', '20'));
const WARMUP = N >= 100_000 ? 2 : 10;
// A big chain's first repairs may be full passes (the followed part seeds by a read after start-up): seconds.
const TIMEOUT_MS = N >= 10_000 ? 120_000 : 10_000;
const NODE_FLAGS = arg('--node-flags', '').split(' ').filter(Boolean);
// --perf FILE: `perf record -g` of the keeper process while the samples run (with --node-flags --perf-basic-prof for JS names).
const PERF = arg('--perf', '');
const FLOOR = Number(arg('--floor', N >= 100_000 ? '10' : '20'));

const TABLE = 'nfk-trace';
const CHAIN = 'owned';
const yaml = s6Yaml(N, -1, TABLE);

const now = () => Number(process.hrtime.bigint());
/** CPU time (ns) the process has run, all its threads (schedstat's first field: ns resolution, unlike stat's ticks). */
const cpuNs = (pid: number) => readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
  try {
    return sum + Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return sum;  // a thread that just ended
  }
}, 0);
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

type Marks = Record<'received' | 'event' | 'pass' | 'proved' | 'planned' | 'committed' | 'reported', number>;
interface Sample { t0: number; acked: number; seen: number; keeper?: Marks }

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-trace-'));
  const config = join(dir, 'c.yaml');
  writeFileSync(config, yaml);
  const loadStart = loadavg();
  try {
    await withBenchNetns('trace', async (ns) => {
      const child = spawn(process.execPath, [...NODE_FLAGS, '--import', 'tsx', join(PROJECT_ROOT, 'bench', 's6-keeper.ts'),
        '--netns', ns.path, '--config', config, '--trace'], { stdio: ['ignore', 'pipe', 'inherit'], cwd: PROJECT_ROOT });
      const exited = new Promise((r) => child.on('exit', r));
      const traces: Marks[] = [];
      let ready!: () => void;
      let exact!: () => void;
      const isReady = new Promise<void>((r) => { ready = r; });
      // The followed part is seeded by a read after start-up (seconds at 100,000 rules): until then a repair
      // is a full pass, which is not what this traces.
      const isExact = new Promise<void>((r) => { exact = r; });
      createInterface({ input: child.stdout! }).on('line', (l) => {
        if (l === 'ready') ready();
        else if (l === 'followed exact') exact();
        else if (l.startsWith('trace ')) traces.push(JSON.parse(l.slice(6)) as Marks);
      });
      await isReady;
      await Promise.race([isExact, new Promise((r) => setTimeout(r, TIMEOUT_MS).unref())]);
      const perf = PERF ? spawn('perf', ['record', '-F', '4999', '-g', '-o', PERF, '-p', String(child.pid)], { stdio: 'inherit' }) : undefined;
      if (perf) await new Promise((r) => setTimeout(r, 500));
      const sock = open({ netns: ns.path });
      let waiter: ((b: MonitorBatch, at: number) => void) | undefined;
      const monitor = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: TABLE }], ignorePorts: [sock.portId],
        onBatch: (b) => waiter?.(b, now()) });
      const where = { family: 'ip' as const, table: TABLE, chain: CHAIN };
      const samples: Sample[] = [];
      let cpu0 = 0, cpu1 = 0;
      const floor: number[] = [];
      const floorAdd: number[] = [];
      try {
        try {
          for (let k = 0; k < WARMUP + COUNT; k++) {
            const rules = await sock.listRules(where);
            if (rules.length !== N) throw new Error(`the chain holds ${rules.length} rules, not ${N}`);
            const seen = new Promise<number>((resolve, reject) => {
              const timer = setTimeout(() => reject(new Error(`no repair within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
              waiter = (b, at) => {
                if (!b.events.some((e) => e.type === 'newrule')) return;
                clearTimeout(timer);
                waiter = undefined;
                resolve(at);
              };
            });
            const t0 = now();
            await sock.commit(new Batch().delete('rule', { ...where, handle: rules[N >> 1]!.handle! }));
            const acked = now();
            const s = { t0, acked, seen: await seen };
            if (k === WARMUP - 1) cpu0 = cpuNs(child.pid!);
            if (k >= WARMUP) samples.push(s);
            await new Promise((r) => setTimeout(r, GAP_MS));
          }
          cpu1 = cpuNs(child.pid!);
          // The keeper's trace lines of the last repairs may still be in its buffer (flushed every 250 ms) or the pipe.
          for (let i = 0; i < 100 && traces.length < WARMUP + COUNT; i++) await new Promise((r) => setTimeout(r, 10));
        } finally {
          if (perf) {
            perf.kill('SIGINT');
            await new Promise((r) => perf.on('exit', r));
          }
          child.kill('SIGTERM');
          await exited;
        }
        for (let k = 0; k < FLOOR; k++) {
          const rules = await sock.listRules(where);
          const i = N >> 1;
          const t0 = now();
          await sock.commit(new Batch().delete('rule', { ...where, handle: rules[i]!.handle! }));
          const t1 = now();
          await sock.commit(new Batch().add('rule', { ...where, exprs: rules[i]!.exprs, userdata: rules[i]!.userdata,
            ...(i > 0 ? { position: rules[i - 1]!.handle! } : {}) }));
          floor.push(now() - t0);
          floorAdd.push(now() - t1);
          await new Promise((r) => setTimeout(r, GAP_MS));
        }
      } finally {
        monitor.close();
        sock.close();
      }
      const keeperTraces = traces.slice(-COUNT);
      if (keeperTraces.length !== COUNT) process.stderr.write(`(${traces.length} keeper traces for ${WARMUP + COUNT} repairs: some repairs were not planned from the events)\n`);
      samples.forEach((s, i) => { s.keeper = keeperTraces[i]; });
      report(samples.filter((s) => s.keeper && s.keeper.event > s.t0 && s.keeper.reported < s.seen + 1e9));
      process.stdout.write(`keeper CPU per repair (all its threads, the gaps' idle ticks included): ${((cpu1 - cpu0) / COUNT / 1000).toFixed(1)} µs\n`);
      if (floor.length > 0) {
        const f = floor.sort((a, b) => a - b);
        process.stdout.write(`kernel floor (one socket: delete + re-add at its position, ${f.length} samples after the keeper exited): ` +
          `p50 ${(quantile(f, 0.5) / 1000).toFixed(1)} µs, p99 ${(quantile(f, 0.99) / 1000).toFixed(1)} µs ` +
          `(the re-add's commit alone: p50 ${(quantile(floorAdd.sort((a, b) => a - b), 0.5) / 1000).toFixed(1)} µs)\n`);
      }
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`load average at start / end: ${loadStart} / ${loadavg()}\n`);
}

const JS_SEGMENTS: [string, (s: Sample) => number][] = [
  ['probe commit → keeper\'s monitor has read it', (s) => s.keeper!.received - s.t0],
  ['monitor read → keeper JS (batch to objects)', (s) => s.keeper!.event - s.keeper!.received],
  ['event → pass starts', (s) => s.keeper!.pass - s.keeper!.event],
  ['pass → followed part proven exact', (s) => s.keeper!.proved - s.keeper!.pass],
  ['plan built', (s) => s.keeper!.planned - s.keeper!.proved],
  ['repair commit (encode + sendmsg + acks)', (s) => s.keeper!.committed - s.keeper!.planned],
  ['committed → probe JS sees the repair', (s) => s.seen - s.keeper!.committed],
  ['(probe: its own commit acked)', (s) => s.acked - s.t0],
  ['(keeper: bookkeeping after the commit)', (s) => s.keeper!.reported - s.keeper!.committed],
  ['total (probe t0 → probe sees the repair)', (s) => s.seen - s.t0],
];

/** Repairs the monitor committed before the keeper's JavaScript ran (Monitor.arm): no pass, proof or plan marks before the commit. */
const ARMED_SEGMENTS: [string, (s: Sample) => number][] = [
  ['probe commit → keeper\'s monitor has read it', (s) => s.keeper!.received - s.t0],
  ['monitor read → repair committed (armed, C++)', (s) => s.keeper!.committed - s.keeper!.received],
  ['committed → probe JS sees the repair', (s) => s.seen - s.keeper!.committed],
  ['(committed → keeper JS: yield, batch)', (s) => s.keeper!.event - s.keeper!.committed],
  ['(probe: its own commit acked)', (s) => s.acked - s.t0],
  ['(keeper: bookkeeping after the commit)', (s) => s.keeper!.reported - s.keeper!.committed],
  ['total (probe t0 → probe sees the repair)', (s) => s.seen - s.t0],
];

function report(all: Sample[]): void {
  // Armed repairs and repairs through JavaScript (the first ones, before the monitor is armed) apart.
  const armed = all.filter((s) => s.keeper!.pass === undefined);
  const samples = armed.length >= all.length / 2 ? armed : all.filter((s) => s.keeper!.pass !== undefined);
  const SEGMENTS = armed.length >= all.length / 2 ? ARMED_SEGMENTS : JS_SEGMENTS;
  if (samples.length !== all.length) process.stdout.write(`(${all.length - samples.length} samples of the other path left out)\n`);
  const us = (ns: number) => (ns / 1000).toFixed(1).padStart(8);
  process.stdout.write(`N = ${N}, ${samples.length} samples ${GAP_MS} ms apart${NODE_FLAGS.length ? `, keeper node flags ${NODE_FLAGS.join(' ')}` : ''}\n`);
  process.stdout.write(`${'segment'.padEnd(44)}  p50 µs   p90 µs   p99 µs\n`);
  for (const [name, f] of SEGMENTS) {
    const v = samples.map(f).sort((a, b) => a - b);
    process.stdout.write(`${name.padEnd(44)}${us(quantile(v, 0.5))} ${us(quantile(v, 0.9))} ${us(quantile(v, 0.99))}\n`);
  }
  // Every mark, as the p50 of its time after the keeper's 'received' (extra marks included).
  const names = new Set<string>();
  for (const s of samples) for (const k of Object.keys(s.keeper!)) names.add(k);
  const rel = [...names].map((k) => {
    const v = samples.filter((s) => (s.keeper as Record<string, number>)[k] !== undefined)
      .map((s) => (s.keeper as Record<string, number>)[k]! - s.keeper!.received).sort((a, b) => a - b);
    return [k, quantile(v, 0.5), v.length] as const;
  }).sort((a, b) => a[1] - b[1]);
  process.stdout.write(`marks after 'received', p50 µs: ${rel.map(([k, t, n]) => `${k} ${(t / 1000).toFixed(1)}${n !== samples.length ? ` (${n})` : ''}`).join(', ')}\n`);
  // The tail: in the samples over 2 ms from outside, which segments held 1 ms or more.
  const over = samples.filter((s) => s.seen - s.t0 > 2e6);
  if (over.length > 0) {
    const held = SEGMENTS.slice(0, -1).map(([name, f]) => [name, over.filter((s) => f(s) >= 1e6).length] as const).filter(([, n]) => n > 0);
    process.stdout.write(`${over.length} samples over 2 ms; segments of 1 ms or more in them: ${held.map(([name, n]) => `${name} ${n}`).join('; ') || 'none'}\n`);
  }
  const slow = [...samples].sort((a, b) => (b.seen - b.t0) - (a.seen - a.t0)).slice(0, 5);
  process.stdout.write('slowest samples (µs per segment, in the order above):\n');
  for (const s of slow) process.stdout.write(`  ${SEGMENTS.map(([, f]) => (f(s) / 1000).toFixed(0)).join(' / ')}\n`);
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exitCode = 1;
});
