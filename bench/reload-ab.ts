/**
 * A config reload of an unchanged config (a compile cache hit), two builds alternating, timed from
 * outside: `nfkeeper run --cache-dir D --reload-status F` on a namespace holding S8's chain of N
 * rules, then SIGHUP, from the signal to the daemon's `config reloaded` log line (written after the
 * status file); CPU is the process's user + system time from /proc/PID/stat across the same span
 * (10 ms ticks). Each build has its own cache and record directories in this run's; its first
 * daemon (a warm-up, left out) compiles and stores the entry. Each round starts a daemon of each
 * build in turn (the order alternating), which reloads --reloads times, --gap-ms apart, then stops.
 * The ruleset generation is compared across each reload (an unchanged config writes nothing).
 *
 * --prof DIR: the measured daemons run with --cpu-prof into DIR/a, DIR/b (one profile a daemon).
 *
 *   sudo npx tsx bench/reload-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--rounds 3] [--reloads 3] [--gap-ms 1000] [--prof DIR]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { open } from '../src/netlink/socket.js';
import { withBenchNetns, type BenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { chainYaml } from './scenarios/s8.js';
import { parseArgs } from './lib/args.js';
import { cpuSecondsOf, loadavg } from './lib/daemon.js';
import { medianOf } from './lib/stats.js';

const USAGE = 'reload-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--rounds 3] [--reloads 3] [--gap-ms 1000] [--prof DIR]';
const arg = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rounds': 1, '--reloads': 1, '--gap-ms': 1, '--prof': 1 }, { usage: USAGE }).value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '100000'));
const ROUNDS = Number(arg('--rounds', '3'));
const RELOADS = Number(arg('--reloads', '3'));
const GAP_MS = Number(arg('--gap-ms', '1000'));
const PROF = arg('--prof');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Reload { wallMs: number; cpuS: number; wrote: boolean; ok: boolean }

async function daemon(ns: BenchNetns, root: string, config: string, dir: string, i: number, warmUp: boolean): Promise<Reload[]> {
  const prof = PROF && !warmUp ? ['--cpu-prof', '--cpu-prof-dir', join(PROF, i === 0 ? 'a' : 'b')] : [];
  const child = spawn('node', [...daemonNodeFlags(root), ...prof, join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path,
    '--no-metrics', '--record-dir', join(dir, `record-${i}`), '--cache-dir', join(dir, `cache-${i}`), '--reload-status', join(dir, `status-${i}.json`)],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => child.on('exit', r));
  const waiting: { re: RegExp; done: (l: string) => void }[] = [];
  const seen: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (l) => {
    seen.push(l);
    const k = waiting.findIndex((w) => w.re.test(l));
    if (k >= 0) waiting.splice(k, 1)[0]!.done(l);
  });
  const next = (re: RegExp) => new Promise<string>((resolve, reject) => {
    waiting.push({ re, done: resolve });
    child.once('exit', () => reject(new Error(`nfkeeper run exited before ${re}: ${seen.slice(-5).join('\n')}`)));
  });
  const sock = open({ netns: ns.path });
  try {
    const running = next(/"nfkeeper running"/);
    const stored = next(/"compiled config (not )?stored/);
    stored.catch(() => undefined);
    await running;
    if (seen.some((l) => l.includes('"compile cache not used'))) await stored;
    await sleep(GAP_MS);
    const out: Reload[] = [];
    for (let k = 0; k < (warmUp ? 1 : RELOADS); k++) {
      const before = sock.generation();
      const line = next(/"config reload(ed| rejected)"|the kernel refused/);
      const cpu0 = cpuSecondsOf(child.pid!);
      const t0 = performance.now();
      child.kill('SIGHUP');
      const l = await line;
      const wallMs = performance.now() - t0;
      out.push({ wallMs, cpuS: cpuSecondsOf(child.pid!) - cpu0, wrote: sock.generation() !== before, ok: l.includes('"config reloaded"') });
      await sleep(GAP_MS);
    }
    return out;
  } finally {
    sock.close();
    child.kill('SIGTERM');
    await exited;
  }
}

const dir = mkdtempSync(join(tmpdir(), 'nfk-reload-ab-'));
try {
  const config = join(dir, 'c.yaml');
  writeFileSync(config, chainYaml(N));
  if (PROF) for (const s of ['a', 'b']) mkdirSync(join(PROF, s), { recursive: true });
  await withBenchNetns('reload', async (ns) => {
    const apply = spawnSync('node', [join(roots[0]!, 'bin', 'nfkeeper.js'), 'apply', '--no-cache-dir', '--config', config, '--netns', ns.path], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (apply.status !== 0) throw new Error('the install failed');
    for (const i of [0, 1]) await daemon(ns, roots[i]!, config, dir, i, true);
    const runs: Reload[][] = [[], []];
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of [0, 1]) {
        const i = (round + k) % 2;
        const rs = await daemon(ns, roots[i]!, config, dir, i, false);
        runs[i]!.push(...rs);
        console.log(`round ${round + 1} ${i === 0 ? 'a' : 'b'}: reloads ${rs.map((r) => `${r.wallMs.toFixed(0)} ms (CPU ${r.cpuS.toFixed(2)} s${r.ok ? '' : ', NOT OK'}${r.wrote ? ', wrote' : ''})`).join(', ')}; load ${loadavg()}`);
      }
    }
    const med = (xs: number[]) => medianOf(xs)!;
    for (const [i, rs] of runs.entries()) {
      const w = rs.map((r) => r.wallMs);
      console.log(`${i === 0 ? 'a' : 'b'} ${roots[i]}: ${rs.length} reloads at ${N} rules, median ${med(w).toFixed(0)} ms (${Math.min(...w).toFixed(0)}-${Math.max(...w).toFixed(0)}), ` +
        `CPU median ${med(rs.map((r) => r.cpuS)).toFixed(2)} s, ${rs.filter((r) => r.wrote).length} wrote, ${rs.filter((r) => !r.ok).length} not ok`);
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
