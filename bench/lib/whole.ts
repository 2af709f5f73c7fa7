/**
 * Times a command as a whole process, from outside: wall time from fork to reap, and the user +
 * system time and peak RSS the kernel accounted to it and its waited-for children (wait4's
 * rusage). A small python3 parent does the fork and the wait4, so that nothing of this Node
 * process (its own heap, its event loop) is counted, and the command's output goes to a file or
 * /dev/null, never through a pipe a slow reader could stall.
 */
import { spawnSync } from 'node:child_process';
import type { BenchNetns } from './netns.js';
import { summarize, type Summary } from './stats.js';

const WAIT4 = `
import json, os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
src = os.open(sys.argv[2], os.O_RDONLY)
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.dup2(src, 0); os.dup2(out, 1)
    os.execvp(sys.argv[3], sys.argv[3:])
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
print(json.dumps({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "sys": ru.ru_stime, "rssKiB": ru.ru_maxrss, "status": os.waitstatus_to_exitcode(status)}))
`;

export interface ProcessRun {
  wallUs: number;
  cpuUs: number;
  /** Of cpuUs, the system time: the kernel's work for the process (its commit, its dumps). */
  sysUs?: number;
  rssKiB: number;
  status: number;
}

export interface WholeOptions {
  /** Run inside this namespace (`ip netns exec`, which execs: no extra process is counted). */
  ns?: BenchNetns;
  /** A file given as standard input (default /dev/null). */
  stdin?: string;
  /** Where standard output goes (default /dev/null). */
  stdout?: string;
  /** Exit codes that count as success (default 0 only). */
  ok?: number[];
  /** Variables added to this process's environment for the command. */
  env?: Record<string, string>;
}

export function runWhole(cmd: string, args: readonly string[], o: WholeOptions = {}): ProcessRun {
  const argv = o.ns ? ['ip', 'netns', 'exec', o.ns.name, cmd, ...args] : [cmd, ...args];
  const r = spawnSync('python3', ['-c', WAIT4, o.stdout ?? '/dev/null', o.stdin ?? '/dev/null', ...argv], { encoding: 'utf8',
    ...(o.env ? { env: { ...process.env, ...o.env } } : {}) });
  if (r.status !== 0) throw new Error(`timing ${argv.join(' ')} failed: ${r.stderr}`);
  const j = JSON.parse(r.stdout) as { wall: number; cpu: number; sys: number; rssKiB: number; status: number };
  if (!(o.ok ?? [0]).includes(j.status)) throw new Error(`${argv.join(' ')} exited ${j.status}: ${r.stderr}`);
  return { wallUs: j.wall * 1e6, cpuUs: j.cpu * 1e6, sysUs: j.sys * 1e6, rssKiB: j.rssKiB, status: j.status };
}

export interface WholeSummary {
  wall: Summary;
  cpu: Summary;
  /** KiB, the largest of the runs. */
  rssKiB: number;
}

export function summarizeRuns(runs: ProcessRun[]): WholeSummary {
  return {
    wall: summarize(runs.map((r) => r.wallUs)),
    cpu: summarize(runs.map((r) => r.cpuUs)),
    rssKiB: Math.max(...runs.map((r) => r.rssKiB)),
  };
}

/**
 * Two commands in turn, A B A B …, each run preceded by `reset` (untimed), so that a drift in the
 * machine's speed falls on both alike; the ratio is of the medians. With `before` (A as another
 * build runs it, for a before/after), each round runs A, before, B.
 */
export function alternate(reps: number, reset: () => void, a: () => ProcessRun, b: () => ProcessRun, before?: () => ProcessRun):
  { a: WholeSummary; b: WholeSummary; ratio: number; before?: WholeSummary } {
  const ra: ProcessRun[] = [];
  const rb: ProcessRun[] = [];
  const rbefore: ProcessRun[] = [];
  for (let i = 0; i < reps; i++) {
    reset();
    ra.push(a());
    if (before) {
      reset();
      rbefore.push(before());
    }
    reset();
    rb.push(b());
  }
  const sa = summarizeRuns(ra), sb = summarizeRuns(rb);
  return { a: sa, b: sb, ratio: sa.wall.median / sb.wall.median, ...(before ? { before: summarizeRuns(rbefore) } : {}) };
}
