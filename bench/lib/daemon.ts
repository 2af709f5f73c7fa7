/**
 * `nfkeeper run` as the A/B benchmarks start it, one build at a time (follow-ab, readback-ab, S8): as
 * installed (the build's bin/nfkeeper.js with the Node flags of its #! line), in a namespace given
 * by path, its metrics on a port of the run's; its log read a line at a time, its CPU from /proc.
 * And a run's cells: each a namespace of its own, with the daemons and neighbours started in it,
 * all removed when the cell ends or the run is interrupted; the builds alternating round by round.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startNeighbour, type Neighbour } from '../../test/helpers/neighbour.js';
import { metricOf } from './metrics.js';
import { daemonNodeFlags } from './node-flags.js';

/** The load averages (1, 5, 15 minutes), as /proc/loadavg gives them. */
export const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** User + system CPU seconds of a process so far, all its threads (/proc/PID/stat, USER_HZ 100). */
export function cpuSecondsOf(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / 100;
}

export interface DaemonOptions {
  /** The namespace file (--netns). */
  netns: string;
  config: string;
  /** --metrics 127.0.0.1:PORT. */
  port: number;
  /** After run's --config, --netns and --metrics. */
  args?: readonly string[];
  /** Added to this process's environment. */
  env?: Record<string, string>;
  /** Its log: read a line at a time (onLine, running), or not read at all (a benchmark that asks /readyz). */
  log?: 'lines' | 'ignore';
}

export interface Daemon {
  child: ChildProcess;
  port: number;
  /** Resolves when the process has exited; then `exit` says how where that was not exit 0 (with its last stderr line). */
  exited: Promise<void>;
  exit?: string;
  /** `f` is given each line of its log from now on. */
  onLine(f: (line: string) => void): void;
  /** Its `nfkeeper running` line (true), or its exit or `ms` first (false). */
  running(ms: number): Promise<boolean>;
  /** A metric it serves (metricOf). */
  metric(name: string): Promise<number | undefined>;
  /** Its CPU seconds so far. */
  cpuS(): number;
  /** SIGTERM, then its exit: undefined where it exited 0, else how. */
  stop(): Promise<string | undefined>;
}

export function startDaemon(root: string, o: DaemonOptions): Daemon {
  const lines = o.log !== 'ignore';
  const child = spawn('node', [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', o.config, '--netns', o.netns,
    '--metrics', `127.0.0.1:${o.port}`, ...(o.args ?? [])],
  { stdio: ['ignore', lines ? 'pipe' : 'ignore', lines ? 'pipe' : 'inherit'], ...(o.env ? { env: { ...process.env, ...o.env } } : {}) });
  let stderr = '';
  child.stderr?.on('data', (d) => { stderr += String(d); });
  const listeners: ((line: string) => void)[] = [];
  if (child.stdout) createInterface({ input: child.stdout }).on('line', (l) => { for (const f of listeners) f(l); });
  const d: Daemon = {
    child,
    port: o.port,
    exited: new Promise<void>((r) => child.on('exit', (code, sig) => {
      if (code !== 0) d.exit = `exit ${code ?? sig}: ${stderr.trim().split('\n').at(-1)}`;
      r();
    })),
    onLine: (f) => { listeners.push(f); },
    running: (ms) => new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      d.onLine((l) => { if (l.includes('"nfkeeper running"')) { clearTimeout(timer); resolve(true); } });
      void d.exited.then(() => { clearTimeout(timer); resolve(false); });
    }),
    metric: (name) => metricOf(o.port, name),
    cpuS: () => cpuSecondsOf(child.pid!),
    stop: async () => {
      child.kill('SIGTERM');
      await d.exited;
      return d.exit;
    },
  };
  return d;
}

/** One cell: a namespace of its own, and what runs in it. */
export interface Cell {
  /** Its number in the run (from 1). */
  seq: number;
  name: string;
  /** The namespace file. */
  path: string;
  /** A daemon in the cell's namespace (DaemonOptions without `netns`), stopped with the cell if still running. */
  daemon(root: string, o: Omit<DaemonOptions, 'netns'>): Daemon;
  /** test/helpers/neighbour.ts in the cell's namespace, killed with the cell. */
  neighbour(rate: number | 'max', table?: string): Promise<Neighbour>;
}

/**
 * A run's cells, each in a namespace PREFIX-PID-SEQ made for it; `dir`, a temp directory of the
 * run's (records, caches, configs), removed at exit. Whatever a cell leaves running or made is
 * killed and removed when it ends, and at the run's exit or SIGINT/SIGTERM.
 */
export class Cells {
  readonly dir: string;
  private seq = 0;
  private readonly live = new Set<string>();
  private readonly children = new Set<ChildProcess>();
  private readonly neighbours = new Set<Neighbour>();

  constructor(private readonly prefix: string, tag: string) {
    this.dir = mkdtempSync(join(tmpdir(), `nfk-${tag}-`));
    process.on('exit', () => {
      for (const c of this.children) c.kill('SIGKILL');
      for (const n of this.neighbours) n.kill();
      for (const ns of this.live) spawnSync('ip', ['netns', 'del', ns]);
      rmSync(this.dir, { recursive: true, force: true });
    });
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(130));
  }

  async cell<T>(fn: (c: Cell) => Promise<T>): Promise<T> {
    const seq = ++this.seq;
    const name = `${this.prefix}-${process.pid}-${seq}`;
    execFileSync('ip', ['netns', 'add', name]);
    this.live.add(name);
    const path = `/run/netns/${name}`;
    const children: ChildProcess[] = [];
    const neighbours: Neighbour[] = [];
    try {
      return await fn({
        seq, name, path,
        daemon: (root, o) => {
          const d = startDaemon(root, { ...o, netns: path });
          children.push(d.child);
          this.children.add(d.child);
          void d.exited.then(() => this.children.delete(d.child));
          return d;
        },
        neighbour: async (rate, table) => {
          const n = await startNeighbour(path, rate, table);
          neighbours.push(n);
          this.neighbours.add(n);
          return n;
        },
      });
    } finally {
      for (const n of neighbours) { n.kill(); this.neighbours.delete(n); }
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      spawnSync('ip', ['netns', 'del', name]);
      this.live.delete(name);
    }
  }
}

/**
 * Builds a (0) and b (1) in turn, `rounds` times, the order swapped every round (a b, b a, …), so
 * that a drift in the machine's speed falls on both alike: each build's results in order.
 */
export async function alternating<T>(rounds: number, run: (b: 0 | 1, round: number) => Promise<T>): Promise<[T[], T[]]> {
  const out: [T[], T[]] = [[], []];
  for (let r = 0; r < rounds; r++) {
    for (const b of r % 2 ? [1, 0] as const : [0, 1] as const) out[b].push(await run(b, r));
  }
  return out;
}
