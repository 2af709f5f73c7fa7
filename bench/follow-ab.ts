/**
 * One deleted rule's repair and the safety net's reads under a neighbour committing to a table of its
 * own, two builds alternating cell by cell, from outside: per cell a fresh namespace, `nfkeeper run`
 * from the build's dist/ (defaults, `--log-level debug`, metrics on a port of the run) owning S8's
 * chain of N rules; once ready, test/helpers/neighbour.ts starts at RATE commits a second; 3 s later
 * one rule is deleted by `nft` (by handle, read before the neighbour started); then WINDOW seconds
 * from the neighbour's start are watched: the `repaired` line (its latencyMs, and the wall time from
 * nft's exit), full passes ('repairing from a full read'), `nfkeeper_dumps_total` and
 * `nfkeeper_generation_retries_total` over the window, the daemon's CPU over it (/proc utime+stime).
 *
 *   sudo npx tsx bench/follow-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 10,100,1000] [--rounds 1] [--window-s 60] [--prefix P]
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chainYaml } from '../test/helpers/big-chain.js';
import { parseArgs } from './lib/args.js';
import { Cells, alternating, loadavg, type Cell } from './lib/daemon.js';
import { fixed, medianOf } from './lib/stats.js';

const USAGE = 'follow-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 10,100,1000] [--rounds 1] [--window-s 60] [--prefix P]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rates': 1, '--rounds': 1, '--window-s': 1, '--prefix': 1 }, { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '10000'));
const RATES = arg('--rates', '10,100,1000')!.split(',').map(Number);
const ROUNDS = Number(arg('--rounds', '1'));
const WINDOW_S = Number(arg('--window-s', '60'));
const cells = new Cells(arg('--prefix', 'nfk-bench')!, 'follow-ab');
const dir = cells.dir;

interface Run { latencyMs?: number; wallMs?: number; attempts?: number; full: number; dumps?: number; retries?: number; cpuS?: number; failed: number; neighbour?: string; exit?: string }

async function cell(c: Cell, root: string, rate: number, config: string): Promise<Run> {
  const { seq } = c;
  const run: Run = { full: 0, failed: 0 };
  const d = c.daemon(root, { config, port: 19900 + (seq % 90),
    args: ['--log-level', 'debug', '--record-dir', join(dir, `record-${seq}`), '--cache-dir', join(dir, `cache-${seq}`)] });
  let deletedAt: number | undefined;
  d.onLine((l) => {
    if (deletedAt === undefined) return;
    if (l.includes('"repaired"') && run.latencyMs === undefined) {
      run.wallMs = performance.now() - deletedAt;
      const j = JSON.parse(l) as { latencyMs: number; attempts: number };
      run.latencyMs = j.latencyMs;
      run.attempts = j.attempts;
    }
    if (l.includes('repairing from a full read')) run.full++;
    if (l.includes('reconcile failed')) run.failed++;
  });
  await d.running(120_000);
  const listing = execFileSync('ip', ['netns', 'exec', c.name, 'nft', '-a', 'list', 'chain', 'ip', 'big', 'c'], { encoding: 'utf8', maxBuffer: 1 << 30 });
  const handles = [...listing.matchAll(/# handle (\d+)/g)].map((m) => m[1]!);
  const victim = handles[handles.length >> 1]!;
  // Past the install's own read-back (trustOwnCommitMs after it): the window then sees the steady state.
  await new Promise((r) => setTimeout(r, 12_000));
  const dumps0 = await d.metric('nfkeeper_dumps_total');
  const retries0 = await d.metric('nfkeeper_generation_retries_total');
  const cpu0 = d.cpuS();
  const t0 = performance.now();
  const neighbour = rate > 0 ? await c.neighbour(rate, 'neigh2') : undefined;
  await new Promise((r) => setTimeout(r, 3000));
  execFileSync('ip', ['netns', 'exec', c.name, 'nft', 'delete', 'rule', 'ip', 'big', 'c', 'handle', victim]);
  deletedAt = performance.now();
  await new Promise((r) => setTimeout(r, Math.max(0, WINDOW_S * 1000 - (performance.now() - t0))));
  run.cpuS = d.cpuS() - cpu0;
  const dumps1 = await d.metric('nfkeeper_dumps_total');
  const retries1 = await d.metric('nfkeeper_generation_retries_total');
  if (dumps0 !== undefined && dumps1 !== undefined) run.dumps = dumps1 - dumps0;
  if (retries0 !== undefined && retries1 !== undefined) run.retries = retries1 - retries0;
  if (neighbour) {
    const n = await neighbour.stop();
    run.neighbour = `${n.commits}/${n.failed}`;
  }
  run.exit = await d.stop();
  return run;
}

const config = join(dir, 'c.yaml');
writeFileSync(config, chainYaml(N));
console.log(`N=${N} rates=${RATES.join(',')} rounds=${ROUNDS} window=${WINDOW_S}s load ${loadavg()}`);
for (const rate of RATES) {
  const runs = await alternating(ROUNDS, async (b) => {
    const x = await cells.cell((c) => cell(c, roots[b]!, rate, config));
    console.log(`  rate ${rate}/s ${b ? 'b' : 'a'}: repaired latencyMs ${fixed(x.latencyMs, 1)} (wall ${fixed(x.wallMs, 0)} ms, attempts ${x.attempts ?? '-'}), `
      + `full passes ${x.full}, dumps ${x.dumps ?? '-'}, retries ${x.retries ?? '-'}, cpu ${fixed(x.cpuS)} s/${WINDOW_S} s, failed ${x.failed}, `
      + `neighbour ${x.neighbour ?? '-'}${x.exit ? `, ${x.exit}` : ''}; load ${loadavg()}`);
    return x;
  });
  for (const b of [0, 1] as const) {
    const rs = runs[b];
    console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: median latencyMs ${fixed(medianOf(rs.map((x) => x.latencyMs)), 1)}, wall ${fixed(medianOf(rs.map((x) => x.wallMs)), 0)} ms, `
      + `dumps ${medianOf(rs.map((x) => x.dumps)) ?? '-'}, retries ${medianOf(rs.map((x) => x.retries)) ?? '-'}, cpu ${fixed(medianOf(rs.map((x) => x.cpuS)))} s`);
  }
}
console.log(`load ${loadavg()}`);
