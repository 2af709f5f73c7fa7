/**
 * Interleaved A/B of the one-rule repair from outside (S6's figure) for two checkouts: each block
 * runs one checkout's bench/s6-keeper.ts as its own process on the same chain of N rules and
 * bench/probe.ts's RepairProbe against it, alternating the checkouts (and their order) block by
 * block, so that the load of a shared machine hits both alike. Nothing is asserted.
 *
 *   sudo npx tsx bench/repair-ab.ts --a /path/to/checkoutA --b /path/to/checkoutB [--n 4] [--blocks 6] [--count 100] [--gap-ms 20] [--no-verify]
 *     [--a-env KEY=VALUE] [--b-env KEY=VALUE] [--a-wrap "CMD ARGS"] [--b-wrap "CMD ARGS"]
 *
 * --no-verify leaves out the read-back of the chain after each repair (at N = 10,000 it costs far more
 * than the repair, which makes a short A/B of big chains possible; the tests check the result).
 * --a-env / --b-env set one environment variable for that side's keeper (the same checkout twice
 * with and without a switch); --a-wrap / --b-wrap run that side's keeper under a command, e.g.
 * "nice -n -10" or "chrt -f 10" (scheduling experiments: the product sets neither).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { withBenchNetns } from './lib/netns.js';
import { probeRepairs } from './probe.js';
import { s6Yaml } from './scenarios/s6.js';
import { quantile } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

const USAGE = 'repair-ab.ts --a CHECKOUT --b CHECKOUT [--n 4] [--blocks 6] [--count 100] [--gap-ms 20]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--blocks': 1, '--count': 1, '--gap-ms': 1, '--no-verify': 0, '--a-env': 1, '--b-env': 1, '--a-wrap': 1, '--b-wrap': 1 }, { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '4'));
const BLOCKS = Number(arg('--blocks', '6'));
const COUNT = Number(arg('--count', '100'));
const GAP_MS = Number(arg('--gap-ms', '20'));
const VERIFY = !cli.has('--no-verify');
const TABLE = 'nfk-ab';
const envOf = (side: string): NodeJS.ProcessEnv => {
  const kv = arg(side);
  if (!kv) return process.env;
  const i = kv.indexOf('=');
  return { ...process.env, [kv.slice(0, i)]: kv.slice(i + 1) };
};
const envs = [envOf('--a-env'), envOf('--b-env')];
const wraps = [arg('--a-wrap'), arg('--b-wrap')].map((w) => (w ? w.split(' ').filter(Boolean) : []));
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!;

const dir = mkdtempSync(join(tmpdir(), 'nfk-ab-'));
const config = join(dir, 'c.yaml');
writeFileSync(config, s6Yaml(N, -1, TABLE));
const all: number[][] = [[], []];
try {
  await withBenchNetns('ab', async (ns) => {
    for (let b = 0; b < BLOCKS; b++) {
      for (let k = 0; k < 2; k++) {
        const which = (b + k) % 2;
        const root = roots[which]!;
        const argv = [process.execPath, '--import', 'tsx', join(root, 'bench', 's6-keeper.ts'), '--netns', ns.path, '--config', config];
        const [cmd, ...args] = [...wraps[which]!, ...argv];
        const child = spawn(cmd!, args,
          { stdio: ['ignore', 'pipe', 'inherit'], cwd: root, env: envs[which] });
        const exited = new Promise((r) => child.on('exit', r));
        try {
          await new Promise<void>((resolve) => createInterface({ input: child.stdout! }).on('line', (l) => { if (l === 'ready') resolve(); }));
          const load = loadavg();
          const { samples } = await probeRepairs({ netns: ns.path, family: 'ip', table: TABLE, chain: 'owned' }, COUNT, GAP_MS, { warmup: 10, verify: VERIFY });
          all[which]!.push(...samples);
          const s = [...samples].sort((x, y) => x - y);
          process.stdout.write(`block ${b} ${which === 0 ? 'A' : 'B'} (load ${load}): p50 ${quantile(s, 0.5).toFixed(0)} µs, p99 ${quantile(s, 0.99).toFixed(0)} µs\n`);
        } finally {
          child.kill('SIGTERM');
          await exited;
        }
      }
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
for (const [i, v] of all.entries()) {
  const s = v.sort((x, y) => x - y);
  process.stdout.write(`${i === 0 ? 'A' : 'B'} ${roots[i]}: ${s.length} repairs, p50 ${quantile(s, 0.5).toFixed(0)} µs, p90 ${quantile(s, 0.9).toFixed(0)} µs, p99 ${quantile(s, 0.99).toFixed(0)} µs\n`);
}
