/**
 * The start-up's read-back and restart record under a busy neighbour, two builds alternating, timed
 * from outside: per cell a fresh namespace, test/helpers/neighbour.ts committing RATE times a second to a
 * table of its own (started 300 ms before the daemon; 0: none), then `nfkeeper run` from empty
 * (S8's chain of N rules, the build's compile cache warm from a warm-up start) with
 * --log-level debug and metrics on a port of this run's. Measured: spawn to `nfkeeper running`
 * (ready), spawn to the first `restart record written` marked verified (within --wait-s), and at
 * that point (or the wait's end) nfkeeper_dumps_total (reads: passes that dumped, and the view's
 * digest reads) and nfkeeper_generation_retries_total. Nothing is asserted. --after-ready: the
 * neighbour starts at the ready line instead (the install then the only commit, its read-back under
 * the neighbour).
 *
 *   sudo npx tsx bench/readback-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 0,1,10,100] [--rounds 2] [--wait-s 25] [--prefix readbackW]
 */
import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startNeighbour, type Neighbour } from '../test/helpers/neighbour.js';
import { chainYaml } from './scenarios/s8.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { parseArgs } from './lib/args.js';
import { medianOf } from './lib/stats.js';
import { metricOf } from './lib/metrics.js';

const USAGE = 'readback-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 0,1,10,100] [--rounds 2] [--wait-s 25] [--prefix P]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rates': 1, '--rounds': 1, '--wait-s': 1, '--prefix': 1, '--after-ready': 0 }, { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '10000'));
const RATES = arg('--rates', '0,1,10,100')!.split(',').map(Number);
const ROUNDS = Number(arg('--rounds', '2'));
const WAIT_S = Number(arg('--wait-s', '25'));
const PREFIX = arg('--prefix', 'nfk-bench')!;
// The neighbour starts at the daemon's ready line: the install is the only commit (trusted, its record not verified), and the read-back runs under the neighbour.
const AFTER_READY = cli.has('--after-ready');
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const dir = mkdtempSync(join(tmpdir(), 'nfk-readback-ab-'));
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

interface Run { readyS?: number; verifiedS?: number; firstRecord?: string; dumps?: number; retries?: number; exit?: string }

let seq = 0;
async function start(root: string, b: number, rate: number, config: string): Promise<Run> {
  const ns = `${PREFIX}-${process.pid}-${++seq}`;
  execFileSync('ip', ['netns', 'add', ns]);
  live.add(ns);
  const path = `/run/netns/${ns}`;
  const record = join(dir, `record-${seq}`);
  const port = 19600 + (seq % 300);
  let neighbour: Neighbour | undefined;
  try {
    const begin = async () => {
      neighbour = await startNeighbour(path, rate);
      neighbours.add(neighbour);
      await new Promise((r) => setTimeout(r, 300));
    };
    if (rate > 0 && !AFTER_READY) await begin();
    const t0 = performance.now();
    const child = spawn('node', [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', path,
      '--metrics', `127.0.0.1:${port}`, '--log-level', 'debug', '--record-dir', record, '--cache-dir', join(dir, `cache-${b}`)], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    const run: Run = {};
    let stderr = '';
    child.stderr!.on('data', (d) => { stderr += String(d); });
    const exited = new Promise<void>((r) => child.on('exit', (code, sig) => { run.exit ??= `exit ${code ?? sig}: ${stderr.trim().split('\n').at(-1)}`; r(); }));
    const verified = new Promise<void>((resolve) => {
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const s = (performance.now() - t0) / 1000;
        if (l.includes('"nfkeeper running"')) {
          run.readyS = s;
          if (rate > 0 && AFTER_READY) void begin();
        }
        if (l.includes('"restart record written"')) {
          run.firstRecord ??= l.includes('"verified":true') ? 'verified' : 'not verified';
          if (l.includes('"verified":true')) { run.verifiedS = s; resolve(); }
        }
      });
      child.on('exit', () => resolve());
    });
    await Promise.race([verified, new Promise((r) => setTimeout(r, WAIT_S * 1000))]);
    run.dumps = await metricOf(port, 'nfkeeper_dumps_total');
    run.retries = await metricOf(port, 'nfkeeper_generation_retries_total');
    if (run.exit === undefined) run.exit = undefined;
    child.kill('SIGTERM');
    await exited;
    if (run.exit === 'exit 0: ' || run.exit?.startsWith('exit 0')) delete run.exit;
    children.delete(child);
    return run;
  } finally {
    if (neighbour) {
      neighbour.kill();
      neighbours.delete(neighbour);
    }
    spawnSync('ip', ['netns', 'del', ns]);
    live.delete(ns);
  }
}

const med = medianOf;
const fmt = (x: number | undefined, d = 2) => (x === undefined ? '-' : x.toFixed(d));

const config = join(dir, 'c.yaml');
writeFileSync(config, chainYaml(N));
console.log(`N=${N} rates=${RATES.join(',')} rounds=${ROUNDS} wait=${WAIT_S}s load ${loadavg()}`);
// Warm-up: each build's compile cache stored (not measured).
for (const [b, root] of roots.entries()) await start(root, b, 0, config);
for (const rate of RATES) {
  const runs: Run[][] = [[], []];
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? [1, 0] : [0, 1];
    for (const b of order) {
      const run = await start(roots[b]!, b, rate, config);
      runs[b]!.push(run);
      console.log(`  rate ${rate}/s ${b ? 'b' : 'a'}: ready ${fmt(run.readyS)} s, verified record ${fmt(run.verifiedS)} s (first: ${run.firstRecord ?? 'none'}), reads ${run.dumps ?? '-'}, retries ${run.retries ?? '-'}${run.exit ? `, ${run.exit}` : ''}; load ${loadavg()}`);
    }
  }
  for (const b of [0, 1]) {
    const rs = runs[b]!;
    console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: median ready ${fmt(med(rs.map((x) => x.readyS)))} s, verified record ${fmt(med(rs.map((x) => x.verifiedS)))} s `
      + `(${rs.filter((x) => x.verifiedS !== undefined).length}/${rs.length} within ${WAIT_S} s), reads ${med(rs.map((x) => x.dumps)) ?? '-'}`);
  }
}
console.log(`load ${loadavg()}`);
