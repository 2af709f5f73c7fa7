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
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chainYaml } from './scenarios/s8.js';
import { parseArgs } from './lib/args.js';
import { Cells, alternating, loadavg, type Cell } from './lib/daemon.js';
import { fixed, medianOf } from './lib/stats.js';

const USAGE = 'readback-ab.ts --a CHECKOUT --b CHECKOUT [--n 10000] [--rates 0,1,10,100] [--rounds 2] [--wait-s 25] [--prefix P]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rates': 1, '--rounds': 1, '--wait-s': 1, '--prefix': 1, '--after-ready': 0 }, { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '10000'));
const RATES = arg('--rates', '0,1,10,100')!.split(',').map(Number);
const ROUNDS = Number(arg('--rounds', '2'));
const WAIT_S = Number(arg('--wait-s', '25'));
// The neighbour starts at the daemon's ready line: the install is the only commit (trusted, its record not verified), and the read-back runs under the neighbour.
const AFTER_READY = cli.has('--after-ready');
const cells = new Cells(arg('--prefix', 'nfk-bench')!, 'readback-ab');
const dir = cells.dir;

interface Run { readyS?: number; verifiedS?: number; firstRecord?: string; dumps?: number; retries?: number; exit?: string }

async function start(c: Cell, root: string, b: number, rate: number, config: string): Promise<Run> {
  const begin = async () => {
    await c.neighbour(rate);
    await new Promise((r) => setTimeout(r, 300));
  };
  if (rate > 0 && !AFTER_READY) await begin();
  const t0 = performance.now();
  const d = c.daemon(root, { config, port: 19600 + (c.seq % 300),
    args: ['--log-level', 'debug', '--record-dir', join(dir, `record-${c.seq}`), '--cache-dir', join(dir, `cache-${b}`)] });
  const run: Run = {};
  const verified = new Promise<void>((resolve) => {
    d.onLine((l) => {
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
    void d.exited.then(() => resolve());
  });
  await Promise.race([verified, new Promise((r) => setTimeout(r, WAIT_S * 1000))]);
  run.dumps = await d.metric('nfkeeper_dumps_total');
  run.retries = await d.metric('nfkeeper_generation_retries_total');
  run.exit = await d.stop();
  return run;
}

const config = join(dir, 'c.yaml');
writeFileSync(config, chainYaml(N));
console.log(`N=${N} rates=${RATES.join(',')} rounds=${ROUNDS} wait=${WAIT_S}s load ${loadavg()}`);
// Warm-up: each build's compile cache stored (not measured).
for (const [b, root] of roots.entries()) await cells.cell((c) => start(c, root, b, 0, config));
for (const rate of RATES) {
  const runs = await alternating(ROUNDS, async (b) => {
    const run = await cells.cell((c) => start(c, roots[b]!, b, rate, config));
    console.log(`  rate ${rate}/s ${b ? 'b' : 'a'}: ready ${fixed(run.readyS)} s, verified record ${fixed(run.verifiedS)} s (first: ${run.firstRecord ?? 'none'}), reads ${run.dumps ?? '-'}, retries ${run.retries ?? '-'}${run.exit ? `, ${run.exit}` : ''}; load ${loadavg()}`);
    return run;
  });
  for (const b of [0, 1] as const) {
    const rs = runs[b];
    console.log(`rate ${rate}/s ${b ? 'b' : 'a'}: median ready ${fixed(medianOf(rs.map((x) => x.readyS)))} s, verified record ${fixed(medianOf(rs.map((x) => x.verifiedS)))} s `
      + `(${rs.filter((x) => x.verifiedS !== undefined).length}/${rs.length} within ${WAIT_S} s), reads ${medianOf(rs.map((x) => x.dumps)) ?? '-'}`);
  }
}
console.log(`load ${loadavg()}`);
