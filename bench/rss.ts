/**
 * The daemon's memory (the RSS targets: BENCHMARKS.md), apart from S7's full run: `nfkeeper run` (this
 * checkout's bin/, so dist/: run `npm run build` first; with the Node flags its first line gives) with examples/flannel.yaml or one owned
 * chain of N rules, 15 s after it is ready (start-up settled, the read-back of its own commit done,
 * some ticks). Prints VmRSS and VmHWM, the anonymous and file-backed parts of the RSS, and the
 * JavaScript heap from the daemon's own metrics, per size, medians of --runs runs. With --cpu-s,
 * the daemon's CPU time (all threads, ns: schedstat) over that many seconds after the first sample (idle CPU);
 * with --settled-s, the RSS again that long after ready.
 *
 *   sudo npx tsx bench/rss.ts [--sizes 0,10000,100000] [--runs 3] [--idle-s 15] [--cpu-s 30] [--settled-s 60]
 *     [--node-options "…"] [--node-flags "…"] [--root DIR] [--restart]
 *
 * N = 0 is examples/flannel.yaml (4 rules). --root runs another checkout's bin/ and dist/ (its
 * build), to compare two versions back to back with the same measure. With --restart, a first
 * daemon installs the ruleset and stops (its rules stay), and the one measured starts onto it (an
 * upgrade's restart: adopting, not installing). "CPU to ready" is the daemon's CPU time (all its
 * threads, /proc/PID/task/TID/schedstat) from its start to its first ready answer.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { withBenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { recordArgs } from './lib/record.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--sizes': 1, '--runs': 1, '--idle-s': 1, '--node-options': 1, '--node-flags': 1, '--cpu-s': 1, '--settled-s': 1, '--root': 1, '--restart': 0 });
const arg = cli.value;
const SIZES = arg('--sizes', '0,10000,100000').split(',').map(Number);
const RUNS = Number(arg('--runs', '3'));
const IDLE_S = Number(arg('--idle-s', '15'));
const NODE_OPTIONS = arg('--node-options', '');
// --node-flags "…": flags before bin/nfkeeper.js (V8 flags NODE_OPTIONS does not take).
const NODE_FLAGS = arg('--node-flags', '').split(' ').filter(Boolean);
const CPU_S = Number(arg('--cpu-s', '0'));
const SETTLED_S = Number(arg('--settled-s', '0'));
const ROOT = arg('--root', PROJECT_ROOT);
const RESTART = cli.has('--restart');

const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const config = (n: number) => (n === 0 ? readFileSync(join(ROOT, 'examples', 'flannel.yaml'), 'utf8')
  : 'tables:\n  - family: ip\n    name: nfk-rss\n    chains:\n      - name: owned\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n' +
    Array.from({ length: n }, (_, i) => `          - ip saddr ${addr(i)} ip daddr 192.0.2.1 return`).join('\n') + '\n');

const status = (pid: number) => readFileSync(`/proc/${pid}/status`, 'utf8');
const kib = (s: string, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(s)?.[1] ?? NaN);
const metric = (text: string, name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;


// Every thread's time on a CPU so far, in ms (ns resolution, unlike utime + stime's 10 ms ticks).
const cpuAllThreadsMs = (pid: number) => readdirSync(`/proc/${pid}/task`).reduce((a, tid) => {
  try {
    return a + Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  } catch {
    return a;  // the thread ended meanwhile (its time is lost: start-up's workers stay)
  }
}, 0);

interface Sample { rss: number; hwm: number; anon: number; file: number; heapUsed: number; heapTotal: number; external: number; readyS: number;
  cpuMs: number; settled: number; readyCpuMs: number }

async function once(n: number, dir: string, port: number): Promise<Sample> {
  const file = join(dir, `rss-${n}.yaml`);
  writeFileSync(file, config(n));
  return withBenchNetns(`rss-${n}`, async (ns) => {
    const env = { ...process.env, NODE_OPTIONS };
    const daemon = () => spawn(process.execPath, [...daemonNodeFlags(ROOT), ...NODE_FLAGS, join(ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', file,
      '--netns', ns.path, ...recordArgs(ROOT, ns), '--interval', '1s', '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'], env });
    const untilReady = async (c: ReturnType<typeof daemon>, pollMs: number) => {
      for (let i = 0; ; i++) {
        if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) return;
        if (c.exitCode !== null) throw new Error('nfkeeper run exited before it was ready');
        if (i * pollMs > 300_000) throw new Error('not ready in 300 s');
        await sleep(pollMs);
      }
    };
    if (RESTART) {
      // The earlier daemon: installs, stops; its rules stay for the measured one to adopt.
      const first = daemon();
      const gone = new Promise((r) => first.on('exit', r));
      try {
        await untilReady(first, 100);
      } finally {
        first.kill('SIGTERM');
        await gone;
      }
    }
    const t0 = Date.now();
    const child = daemon();
    const exited = new Promise((r) => child.on('exit', r));
    try {
      await untilReady(child, 50);
      const readyS = (Date.now() - t0) / 1000;
      const readyCpuMs = cpuAllThreadsMs(child.pid!);
      await sleep(IDLE_S * 1000);
      const s = status(child.pid!);
      const m = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
      let cpuMs = NaN;
      if (CPU_S > 0) {
        const t = cpuAllThreadsMs(child.pid!);
        await sleep(CPU_S * 1000);
        cpuMs = cpuAllThreadsMs(child.pid!) - t;
      }
      let settled = NaN;
      if (SETTLED_S > 0) {
        await sleep(Math.max(0, readyS * 1000 + SETTLED_S * 1000 - (Date.now() - t0)));
        settled = kib(status(child.pid!), 'VmRSS') / 1024;
      }
      return {
        rss: kib(s, 'VmRSS') / 1024, hwm: kib(s, 'VmHWM') / 1024, anon: kib(s, 'RssAnon') / 1024, file: kib(s, 'RssFile') / 1024,
        heapUsed: metric(m, 'nfkeeper_nodejs_heap_size_used_bytes') / 2 ** 20, heapTotal: metric(m, 'nfkeeper_nodejs_heap_size_total_bytes') / 2 ** 20,
        external: metric(m, 'nfkeeper_nodejs_external_memory_bytes') / 2 ** 20, readyS, cpuMs, settled, readyCpuMs,
      };
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-rss-'));
  const port = 19950 + (process.pid % 40);
  process.stdout.write(`load average ${loadavg()}${NODE_OPTIONS ? `; NODE_OPTIONS=${NODE_OPTIONS}` : ''}${NODE_FLAGS.length ? `; node ${NODE_FLAGS.join(' ')}` : ''}` +
    `${ROOT !== PROJECT_ROOT ? `; bin of ${ROOT}` : ''}${RESTART ? '; restarted onto the ruleset a first daemon installed' : ''}\n`);
  process.stdout.write(`config                 RSS MiB  peak MiB  anon MiB  file MiB  heap used/total MiB  external MiB  ready s  CPU to ready ms` +
    `${CPU_S ? `  CPU ms/${CPU_S}s` : ''}${SETTLED_S ? `  RSS at ${SETTLED_S}s` : ''}\n`);
  try {
    for (const n of SIZES) {
      const runs: Sample[] = [];
      for (let r = 0; r < RUNS; r++) runs.push(await once(n, dir, port));
      const f = (k: keyof Sample, w = 9) => median(runs.map((x) => x[k])).toFixed(1).padStart(w);
      process.stdout.write(`${(n === 0 ? 'flannel.yaml' : `${n.toLocaleString('en-US')} rules`).padEnd(20)}${f('rss')}${f('hwm', 10)}${f('anon', 10)}${f('file', 10)}` +
        `${f('heapUsed', 12)} /${f('heapTotal', 6)}${f('external', 14)}${f('readyS')}${f('readyCpuMs', 17)}${CPU_S ? f('cpuMs', 11) : ''}${SETTLED_S ? f('settled', 11) : ''}` +
        `   (RSS of each run: ${runs.map((x) => x.rss.toFixed(1)).join(', ')}; ready s: ${runs.map((x) => x.readyS.toFixed(2)).join(', ')}` +
        `; CPU to ready ms: ${runs.map((x) => x.readyCpuMs.toFixed(0)).join(', ')}; peak MiB: ${runs.map((x) => x.hwm.toFixed(1)).join(', ')}${CPU_S ? `; CPU ms: ${runs.map((x) => x.cpuMs.toFixed(1)).join(', ')}` : ''}` +
        `${SETTLED_S ? `; at ${SETTLED_S}s: ${runs.map((x) => x.settled.toFixed(1)).join(', ')}` : ''})\n`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(`load average ${loadavg()}\n`);
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exitCode = 1;
});
