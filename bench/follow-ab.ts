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
 * fight's threshold); `--flush`: then the chain flushed (the full pass's repair of N rules). Each
 * repair's latencyMs and its refusals by the generation (the retries metric from its damage to its
 * `repaired` line), medians per build. RATE `max`: the neighbour as fast as it can.
 *
 *   sudo npx tsx bench/follow-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 10,100,1000,max] [--rounds 1] [--window-s 60]
 *     [--deletions 1] [--flush] [--prefix P]
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chainYaml } from '../test/helpers/big-chain.js';
import { parseArgs } from './lib/args.js';
import { Cells, alternating, loadavg, type Cell } from './lib/daemon.js';
import { fixed, medianOf } from './lib/stats.js';

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
const cells = new Cells(arg('--prefix', 'nfk-bench')!, 'follow-ab');
const dir = cells.dir;

interface Repair { latencyMs: number; refusals?: number }
interface Run {
  latencyMs?: number; wallMs?: number; attempts?: number; full: number; dumps?: number; retries?: number; cpuS?: number; failed: number; neighbour?: string; exit?: string;
  /** Every deletion's repair (--deletions), and the flush's (--flush). */
  deletions: Repair[]; flush?: Repair;
}

async function cell(c: Cell, root: string, rate: number | 'max', config: string): Promise<Run> {
  const { seq } = c;
  const run: Run = { full: 0, failed: 0, deletions: [] };
  const d = c.daemon(root, { config, port: 19900 + (seq % 90),
    args: ['--log-level', 'debug', '--record-dir', join(dir, `record-${seq}`), '--cache-dir', join(dir, `cache-${seq}`)] });
  let deletedAt: number | undefined;
  let onRepaired: ((latencyMs: number) => void) | undefined;
  d.onLine((l) => {
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
  await d.running(120_000);
  const listing = execFileSync('ip', ['netns', 'exec', c.name, 'nft', '-a', 'list', 'chain', 'ip', 'big', 'c'], { encoding: 'utf8', maxBuffer: 1 << 30 });
  const handles = [...listing.matchAll(/# handle (\d+)/g)].map((m) => m[1]!);
  const victims = Array.from({ length: DELETIONS }, (_, i) => handles[Math.floor(((i + 1) * handles.length) / (DELETIONS + 1))]!);
  // Past the install's own read-back (trustOwnCommitMs after it): the window then sees the steady state.
  await new Promise((r) => setTimeout(r, 12_000));
  const dumps0 = await d.metric('nfkeeper_dumps_total');
  const retries0 = await d.metric('nfkeeper_generation_retries_total');
  const cpu0 = d.cpuS();
  const t0 = performance.now();
  const neighbour = rate === 'max' || rate > 0 ? await c.neighbour(rate, 'neigh2') : undefined;
  await new Promise((r) => setTimeout(r, 3000));
  // One damage and its repair: the `repaired` line that follows, and the refusals meanwhile.
  const damage = async (args: string[]): Promise<Repair | undefined> => {
    const before = await d.metric('nfkeeper_generation_retries_total');
    const repaired = new Promise<number>((r) => { onRepaired = r; });
    execFileSync('ip', ['netns', 'exec', c.name, 'nft', ...args]);
    deletedAt ??= performance.now();
    const latencyMs = await Promise.race([repaired, new Promise<undefined>((r) => setTimeout(() => r(undefined), 30_000))]);
    onRepaired = undefined;
    const after = await d.metric('nfkeeper_generation_retries_total');
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
    if (DELETIONS > 1 || FLUSH) {
      console.log(`    deletions (latencyMs/refusals): ${x.deletions.map((r) => `${fixed(r.latencyMs, 1)}/${r.refusals ?? '-'}`).join(' ')} (${x.deletions.length} of ${DELETIONS})`
        + (FLUSH ? `; flush ${x.flush ? `${fixed(x.flush.latencyMs, 0)} ms/${x.flush.refusals ?? '-'}` : 'not repaired in 30 s'}` : ''));
    }
    return x;
  });
  for (const b of [0, 1] as const) {
    const rs = runs[b];
    console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: median latencyMs ${fixed(medianOf(rs.map((x) => x.latencyMs)), 1)}, wall ${fixed(medianOf(rs.map((x) => x.wallMs)), 0)} ms, `
      + `dumps ${medianOf(rs.map((x) => x.dumps)) ?? '-'}, retries ${medianOf(rs.map((x) => x.retries)) ?? '-'}, cpu ${fixed(medianOf(rs.map((x) => x.cpuS)))} s`);
    if (DELETIONS > 1 || FLUSH) {
      const ds = rs.flatMap((x) => x.deletions);
      const fs = rs.flatMap((x) => (x.flush ? [x.flush] : []));
      console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: ${ds.length} deletions: median latencyMs ${fixed(medianOf(ds.map((r) => r.latencyMs)), 1)}, `
        + `refusals per repair median ${medianOf(ds.map((r) => r.refusals)) ?? '-'} max ${Math.max(...ds.map((r) => r.refusals ?? 0))} sum ${ds.reduce((a, r) => a + (r.refusals ?? 0), 0)}`
        + (FLUSH ? `; ${fs.length} flushes: median ${fixed(medianOf(fs.map((f) => f.latencyMs)), 0)} ms, refusals ${fs.map((f) => f.refusals ?? '-').join(',')}` : ''));
    }
  }
}
console.log(`load ${loadavg()}`);
