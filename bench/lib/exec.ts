/**
 * Runs real binaries inside a benchmark namespace (`ip netns exec NS ...`)
 * and reads the CPU the process and its waited-for children have used.
 */
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import type { BenchNetns } from './netns.js';

export interface ExecResult {
  status: number;
  stdout: string;
  stderr: string;
}

/** `ip netns exec <ns> cmd args...`; never throws on a non-zero exit. */
export function run(ns: BenchNetns, cmd: string, args: readonly string[], input?: string): ExecResult {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, cmd, ...args], { input, encoding: 'utf8', maxBuffer: 1 << 30 });
  if (r.error) throw r.error;
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Like run, but throws with stderr unless the exit status is 0. */
export function runOk(ns: BenchNetns, cmd: string, args: readonly string[], input?: string): string {
  const r = run(ns, cmd, args, input);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed in ${ns.name} (${r.status}): ${r.stderr}`);
  return r.stdout;
}

let ticks: number | undefined;
function clockTicks(): number {
  if (ticks === undefined) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    ticks = r.status === 0 ? Number(r.stdout.trim()) || 100 : 100;
  }
  return ticks;
}

/**
 * CPU time in microseconds: this process (process.cpuUsage(), user + system,
 * µs resolution) and its terminated, waited-for children (cutime + cstime
 * from /proc/self/stat, in clock ticks of 1/CLK_TCK s, usually 10 ms).
 */
export function cpuNow(): { self: number; children: number } {
  const u = process.cpuUsage();
  const stat = readFileSync('/proc/self/stat', 'utf8');
  // Fields after the parenthesised command name; cutime and cstime are fields 16 and 17.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cutime = Number(rest[13]), cstime = Number(rest[14]);
  return { self: u.user + u.system, children: ((cutime + cstime) * 1e6) / clockTicks() };
}
