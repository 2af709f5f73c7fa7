/**
 * One deleted rule's repair and the safety net's reads under a neighbour committing to a table of its
 * own, two builds alternating cell by cell, from outside: per cell a fresh namespace, `nfkeeper run`
 * from the build's dist/ (defaults, `--log-level debug`, metrics on a port of the run) owning S8's
 * chain of N rules; once ready, test/helpers/neighbour.ts starts at RATE commits a second; 3 s later
 * one rule is deleted by `nft` (by handle, read before the neighbour started); then WINDOW seconds
 * from the neighbour's start are watched: the `repaired` line (its latencyMs, and the wall time from
 * nft's exit), full passes ('repairing from a full read'), `nfkeeper_dumps_total` and
 * `nfkeeper_generation_retries_total` over the window, the daemon's CPU over it (/proc utime+stime).
 * `--deletions K`: K rules deleted one after another, each 2.6 s after the last is repaired (below the
 * fight's threshold); `--flush`: then
 * the chain flushed (the full pass's repair of N rules). Each repair's latencyMs and its refusals by
 * the generation (the retries metric from its damage to its `repaired` line), medians per build.
 * RATE `max`: the neighbour as fast as it can.
 *
 *   sudo npx tsx bench/follow-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 10,100,1000,max] [--rounds 1] [--window-s 60]
 *     [--deletions 1] [--flush] [--prefix P]
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startNeighbour, type Neighbour } from '../test/helpers/neighbour.js';
import { chainYaml } from '../test/helpers/big-chain.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { parseArgs } from './lib/args.js';
import { medianOf } from './lib/stats.js';
import { metricOf } from './lib/metrics.js';

const USAGE = 'follow-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 10,100,1000,max] [--rounds 1] [--window-s 60] [--deletions 1] [--flush] [--prefix P]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rates': 1, '--rounds': 1, '--window-s': 1, '--deletions': 1, '--flush': 0, '--prefix': 1 },
  { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '10000'));
const RATES = arg('--rates', '10,100,1000')!.split(',').map((r) => (r === 'max' ? 'max' as const : Number(r)));
const DELETIONS = Number(arg('--deletions', '1'));
const FLUSH = cli.has('--flush');
const ROUNDS = Number(arg('--rounds', '1'));
const WINDOW_S = Number(arg('--window-s', '60'));
const PREFIX = arg('--prefix', 'nfk-bench')!;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const dir = mkdtempSync(join(tmpdir(), 'nfk-follow-ab-'));
const live = new Set<string>();
const children = new Set<ChildProcess>();
const neighbours = new Set<Neighbour>();
const cleanup = () => {
  for (const c of children) c.kill('SIGKILL');
  for (const n of neighbours) n.kill();
  for (const ns of live) spawnSync('ip', ['netns', 'del', ns]);
  rmSync(dir, { recursive: true, force: true });
};
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(130));

interface Repair { latencyMs: number; refusals?: number }
interface Run {
  latencyMs?: number; wallMs?: number; attempts?: number; full: number; dumps?: number; retries?: number; cpuS?: number; failed: number; neighbour?: string; exit?: string;
  /** Every deletion's repair (--deletions), and the flush's (--flush). */
  deletions: Repair[]; flush?: Repair;
}

const ticks = 100;  // USER_HZ
function cpuOf(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / ticks;
}

let seq = 0;
async function cell(root: string, rate: number | 'max', config: string): Promise<Run> {
  const ns = `${PREFIX}-${++seq}`;
  execFileSync('ip', ['netns', 'add', ns]);
  live.add(ns);
  const path = `/run/netns/${ns}`;
  const port = 19900 + (seq % 90);
  let neighbour: Neighbour | undefined;
  const run: Run = { full: 0, failed: 0, deletions: [] };
  try {
    const child = spawn('node', [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', path,
      '--metrics', `127.0.0.1:${port}`, '--log-level', 'debug', '--record-dir', join(dir, `record-${seq}`), '--cache-dir', join(dir, `cache-${seq}`)],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let stderr = '';
    child.stderr!.on('data', (d) => { stderr += String(d); });
    const exited = new Promise<void>((r) => child.on('exit', (code, sig) => { run.exit ??= `exit ${code ?? sig}: ${stderr.trim().split('\n').at(-1)}`; r(); }));
    let deletedAt: number | undefined;
    let onRepaired: ((latencyMs: number) => void) | undefined;
    let onReady!: () => void;
    const ready = new Promise<void>((r) => { onReady = r; });
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (l.includes('"nfkeeper running"')) onReady();
      if (deletedAt === undefined) return;
      if (l.includes('"repaired"')) {
        const j = JSON.parse(l) as { latencyMs: number; attempts: number };
        if (run.latencyMs === undefined) {
          run.wallMs = performance.now() - deletedAt;
          run.latencyMs = j.latencyMs;
          run.attempts = j.attempts;
        }
        onRepaired?.(j.latencyMs);
      }
      if (l.includes('repairing from a full read')) run.full++;
      if (l.includes('reconcile failed')) run.failed++;
    });
    await Promise.race([ready, exited, new Promise((r) => setTimeout(r, 120_000))]);
    const listing = execFileSync('ip', ['netns', 'exec', ns, 'nft', '-a', 'list', 'chain', 'ip', 'big', 'c'], { encoding: 'utf8', maxBuffer: 1 << 30 });
    const handles = [...listing.matchAll(/# handle (\d+)/g)].map((m) => m[1]!);
    const victims = Array.from({ length: DELETIONS }, (_, i) => handles[Math.floor(((i + 1) * handles.length) / (DELETIONS + 1))]!);
    // Past the install's own read-back (trustOwnCommitMs after it): the window then sees the steady state.
    await new Promise((r) => setTimeout(r, 12_000));
    const dumps0 = await metricOf(port, 'nfkeeper_dumps_total');
    const retries0 = await metricOf(port, 'nfkeeper_generation_retries_total');
    const cpu0 = cpuOf(child.pid!);
    const t0 = performance.now();
    if (rate === 'max' || rate > 0) {
      neighbour = await startNeighbour(path, rate, 'neigh2');
      neighbours.add(neighbour);
    }
    await new Promise((r) => setTimeout(r, 3000));
    // One damage and its repair: the `repaired` line that follows, and the refusals meanwhile.
    const damage = async (args: string[]): Promise<Repair | undefined> => {
      const before = await metricOf(port, 'nfkeeper_generation_retries_total');
      const repaired = new Promise<number>((r) => { onRepaired = r; });
      execFileSync('ip', ['netns', 'exec', ns, 'nft', ...args]);
      deletedAt ??= performance.now();
      const latencyMs = await Promise.race([repaired, new Promise<undefined>((r) => setTimeout(() => r(undefined), 30_000))]);
      onRepaired = undefined;
      const after = await metricOf(port, 'nfkeeper_generation_retries_total');
      return latencyMs === undefined ? undefined : { latencyMs, ...(before !== undefined && after !== undefined ? { refusals: after - before } : {}) };
    };
    for (const [i, victim] of victims.entries()) {
      // 2.6 s apart: four repairs in the fight's 10 s window, below its threshold (no back-off in the figures).
      if (i > 0) await new Promise((r) => setTimeout(r, 2600));
      const r = await damage(['delete', 'rule', 'ip', 'big', 'c', 'handle', victim]);
      if (r) run.deletions.push(r);
    }
    if (FLUSH) run.flush = await damage(['flush', 'chain', 'ip', 'big', 'c']);
    await new Promise((r) => setTimeout(r, Math.max(0, WINDOW_S * 1000 - (performance.now() - t0))));
    run.cpuS = cpuOf(child.pid!) - cpu0;
    const dumps1 = await metricOf(port, 'nfkeeper_dumps_total');
    const retries1 = await metricOf(port, 'nfkeeper_generation_retries_total');
    if (dumps0 !== undefined && dumps1 !== undefined) run.dumps = dumps1 - dumps0;
    if (retries0 !== undefined && retries1 !== undefined) run.retries = retries1 - retries0;
    if (neighbour) {
      const c = await neighbour.stop();
      run.neighbour = `${c.commits}/${c.failed}`;
    }
    child.kill('SIGTERM');
    await exited;
    if (run.exit?.startsWith('exit 0')) delete run.exit;
    children.delete(child);
    return run;
  } finally {
    if (neighbour) { neighbour.kill(); neighbours.delete(neighbour); }
    spawnSync('ip', ['netns', 'del', ns]);
    live.delete(ns);
  }
}

const med = medianOf;
const fmt = (x: number | undefined, d = 2) => (x === undefined ? '-' : x.toFixed(d));

const config = join(dir, 'c.yaml');
writeFileSync(config, chainYaml(N));
console.log(`N=${N} rates=${RATES.join(',')} rounds=${ROUNDS} window=${WINDOW_S}s load ${loadavg()}`);
for (const rate of RATES) {
  const runs: Run[][] = [[], []];
  for (let r = 0; r < ROUNDS; r++) {
    for (const b of r % 2 ? [1, 0] : [0, 1]) {
      const x = await cell(roots[b]!, rate, config);
      runs[b]!.push(x);
      console.log(`  rate ${rate}/s ${b ? 'b' : 'a'}: repaired latencyMs ${fmt(x.latencyMs, 1)} (wall ${fmt(x.wallMs, 0)} ms, attempts ${x.attempts ?? '-'}), `
        + `full passes ${x.full}, dumps ${x.dumps ?? '-'}, retries ${x.retries ?? '-'}, cpu ${fmt(x.cpuS)} s/${WINDOW_S} s, failed ${x.failed}, `
        + `neighbour ${x.neighbour ?? '-'}${x.exit ? `, ${x.exit}` : ''}; load ${loadavg()}`);
      if (DELETIONS > 1 || FLUSH) {
        console.log(`    deletions (latencyMs/refusals): ${x.deletions.map((d) => `${fmt(d.latencyMs, 1)}/${d.refusals ?? '-'}`).join(' ')} (${x.deletions.length} of ${DELETIONS})`
          + (FLUSH ? `; flush ${x.flush ? `${fmt(x.flush.latencyMs, 0)} ms/${x.flush.refusals ?? '-'}` : 'not repaired in 30 s'}` : ''));
      }
    }
  }
  for (const b of [0, 1]) {
    const rs = runs[b]!;
    console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: median latencyMs ${fmt(med(rs.map((x) => x.latencyMs)), 1)}, wall ${fmt(med(rs.map((x) => x.wallMs)), 0)} ms, `
      + `dumps ${med(rs.map((x) => x.dumps)) ?? '-'}, retries ${med(rs.map((x) => x.retries)) ?? '-'}, cpu ${fmt(med(rs.map((x) => x.cpuS)))} s`);
    if (DELETIONS > 1 || FLUSH) {
      const ds = rs.flatMap((x) => x.deletions);
      const fs = rs.flatMap((x) => (x.flush ? [x.flush] : []));
      console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: ${ds.length} deletions: median latencyMs ${fmt(med(ds.map((d) => d.latencyMs)), 1)}, `
        + `refusals per repair median ${med(ds.map((d) => d.refusals)) ?? '-'} max ${Math.max(...ds.map((d) => d.refusals ?? 0))} sum ${ds.reduce((a, d) => a + (d.refusals ?? 0), 0)}`
        + (FLUSH ? `; ${fs.length} flushes: median ${fmt(med(fs.map((f) => f.latencyMs)), 0)} ms, refusals ${fs.map((f) => f.refusals ?? '-').join(',')}` : ''));
    }
  }
}
console.log(`load ${loadavg()}`);
