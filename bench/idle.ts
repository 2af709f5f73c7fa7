/**
 * Idle CPU of `nfkeeper run`, finer than S4's 10 ms clock ticks: every thread's time on a CPU in
 * nanoseconds (/proc/PID/task/TID/schedstat) and its wake-ups (voluntary context switches, from
 * .../status), sampled once a second over a long window. Several checkouts (--roots) run side by
 * side, each in its own namespace, started together, so they share the machine's load; the start
 * order alternates between runs.
 *
 *   sudo npx tsx bench/idle.ts [--roots DIR,DIR] [--window-s 120] [--settle-s 20] [--runs 2] [--foreign N]
 *
 * Each root runs its own bin/ and dist/ (build it first). With --foreign N the namespace first gets
 * S4's layout (a) of about N foreign rules. Config: examples/flannel.yaml of this checkout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { createBenchNetns, type BenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { runOk } from './lib/exec.js';
import { foreignRestore } from './scenarios/foreign.js';
import { recordArgs } from './lib/record.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--roots': 1, '--window-s': 1, '--settle-s': 1, '--runs': 1, '--foreign': 1 });
const arg = cli.value;
const ROOTS = arg('--roots', PROJECT_ROOT).split(',');
const WINDOW_S = Number(arg('--window-s', '120'));
const SETTLE_S = Number(arg('--settle-s', '20'));
const RUNS = Number(arg('--runs', '2'));
const FOREIGN = Number(arg('--foreign', '0'));
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

interface ThreadSample { comm: string; ns: number; wakeups: number; involuntary: number }

/** Per thread: CPU ns, voluntary and involuntary context switches. Threads that exited are lost (none should, idle). */
function sampleThreads(pid: number): Map<number, ThreadSample> {
  const out = new Map<number, ThreadSample>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const base = `/proc/${pid}/task/${tid}`;
      const ns = Number(readFileSync(`${base}/schedstat`, 'utf8').split(' ')[0]);
      const st = readFileSync(`${base}/status`, 'utf8');
      out.set(Number(tid), {
        comm: readFileSync(`${base}/comm`, 'utf8').trim(), ns,
        wakeups: Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(st)![1]),
        involuntary: Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(st)![1]),
      });
    } catch {
      // the thread ended between readdir and read
    }
  }
  return out;
}

interface Daemon { root: string; ns: BenchNetns; child: ChildProcess; port: number; exited: Promise<unknown> }

async function startDaemon(root: string, i: number, config: string): Promise<Daemon> {
  const ns = createBenchNetns(`idle-${i}`);
  if (FOREIGN > 0) runOk(ns, 'iptables-nft-restore', ['--noflush'], foreignRestore('a', FOREIGN));
  const port = 19700 + ((process.pid + i * 7) % 200);
  const child = spawn(process.execPath, [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config,
    '--netns', ns.path, ...recordArgs(root, ns), '--interval', '1s', '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'] });
  return { root, ns, child, port, exited: new Promise((r) => child.on('exit', r)) };
}

async function ready(d: Daemon): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await fetch(`http://127.0.0.1:${d.port}/readyz`).then((r) => r.ok, () => false)) return;
    if (d.child.exitCode !== null) throw new Error(`${d.root}: nfkeeper run exited before it was ready`);
    await sleep(100);
  }
  throw new Error(`${d.root}: not ready in 60 s`);
}

interface Result { root: string; cpuMs: number; perSecondUs: number[]; wakeupsPerS: number; threads: { comm: string; cpuMs: number; wakeups: number }[] }

async function measure(daemons: Daemon[]): Promise<Result[]> {
  const first = daemons.map((d) => sampleThreads(d.child.pid!));
  const last = [...first];
  const perSecond: number[][] = daemons.map(() => []);
  const total = (m: Map<number, ThreadSample>) => [...m.values()].reduce((a, t) => a + t.ns, 0);
  for (let s = 0; s < WINDOW_S; s++) {
    await sleep(1000);
    for (const [i, d] of daemons.entries()) {
      const now = sampleThreads(d.child.pid!);
      perSecond[i]!.push((total(now) - total(last[i]!)) / 1000);
      last[i] = now;
    }
  }
  return daemons.map((d, i) => {
    const threads = new Map<string, { comm: string; cpuMs: number; wakeups: number }>();
    for (const [tid, t] of last[i]!) {
      const f = first[i]!.get(tid) ?? { ns: 0, wakeups: 0 };
      // The main thread (JavaScript, the event loop) apart; the others (V8's workers, libuv's pool,
      // all named after the process) summed.
      const k = tid === d.child.pid ? 'main thread' : 'other threads';
      const acc = threads.get(k) ?? { comm: k, cpuMs: 0, wakeups: 0 };
      acc.cpuMs += (t.ns - f.ns) / 1e6;
      acc.wakeups += t.wakeups - f.wakeups;
      threads.set(k, acc);
    }
    const th = [...threads.values()].sort((a, b) => b.cpuMs - a.cpuMs);
    return {
      root: d.root, cpuMs: th.reduce((a, t) => a + t.cpuMs, 0), perSecondUs: perSecond[i]!,
      wakeupsPerS: th.reduce((a, t) => a + t.wakeups, 0) / WINDOW_S, threads: th,
    };
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-idle-'));
  const config = join(dir, 'flannel.yaml');
  writeFileSync(config, readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml')));
  process.stdout.write(`idle window ${WINDOW_S} s after ${SETTLE_S} s settled, ${FOREIGN} foreign rules; load average ${loadavg()}\n`);
  try {
    for (let run = 0; run < RUNS; run++) {
      const order = run % 2 === 0 ? ROOTS : [...ROOTS].reverse();
      const daemons: Daemon[] = [];
      try {
        for (const [i, root] of order.entries()) daemons.push(await startDaemon(root, i, config));
        await Promise.all(daemons.map(ready));
        await sleep(SETTLE_S * 1000);
        const rs = await measure(daemons);
        process.stdout.write(`run ${run + 1} (load ${loadavg()}):\n`);
        for (const r of rs) {
          const sorted = [...r.perSecondUs].sort((a, b) => a - b);
          const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!.toFixed(0);
          process.stdout.write(`  ${r.root}\n    CPU ${r.cpuMs.toFixed(1)} ms in ${WINDOW_S} s = ${(r.cpuMs / WINDOW_S / 10).toFixed(3)} % of a core; ` +
            `per second µs p10 ${q(0.1)} p50 ${q(0.5)} p90 ${q(0.9)} max ${q(0.999)}; wake-ups ${r.wakeupsPerS.toFixed(2)}/s\n`);
          for (const t of r.threads.filter((x) => x.cpuMs > 0.05 || x.wakeups > 0)) {
            process.stdout.write(`      ${t.comm.padEnd(18)} ${t.cpuMs.toFixed(1).padStart(8)} ms ${(t.wakeups / WINDOW_S).toFixed(2).padStart(7)} wake-ups/s\n`);
          }
        }
      } finally {
        for (const d of daemons) {
          d.child.kill('SIGTERM');
          await d.exited;
          d.ns.remove();
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack : e);
  process.exitCode = 1;
});
