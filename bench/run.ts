/**
 * nfkeeper against the exec-based drivers (issue 7): S1 steady-state check and
 * S3 atomic rewrite, every driver in the same run, in throwaway namespaces.
 *
 *   npx tsx bench/run.ts [--full]
 *
 * Quick mode (default): N = 0, 1,000, 10,000, short time budgets (a few minutes
 * on 2 cores). --full adds N = 100,000 and longer budgets. Writes
 * bench/results/drivers.json, bench/results/s1.svg and BENCHMARKS.md.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem, arch, version as osVersion } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { PROJECT_ROOT } from '../src/netlink/native.js';
import { runS1Case, type S1Case, type S1Options } from './scenarios/s1.js';
import { runS3 } from './scenarios/s3.js';
import type { Layout } from './scenarios/foreign.js';
import type { Budget } from './lib/measure.js';
import { renderMarkdown, renderS1Svg, type RunResults } from './lib/report.js';

const full = process.argv.includes('--full');
const SIZES = full ? [0, 1000, 10_000, 100_000] : [0, 1000, 10_000];
const B: { native: Budget; nativeVerify: Budget; exec: Budget; s3Reps: number } = full
  ? {
    native: { maxIter: 50_000, budgetMs: 3000, minIter: 1000, warmup: 1000 },
    nativeVerify: { maxIter: 10_000, budgetMs: 3000, minIter: 200, warmup: 100 },
    exec: { maxIter: 300, budgetMs: 10_000, minIter: 10, warmup: 2 },
    s3Reps: 7,
  }
  : {
    native: { maxIter: 5000, budgetMs: 500, minIter: 100, warmup: 2000 },
    nativeVerify: { maxIter: 1000, budgetMs: 500, minIter: 50, warmup: 50 },
    exec: { maxIter: 100, budgetMs: 3000, minIter: 5, warmup: 1 },
    s3Reps: 3,
  };

const started = Date.now();
const log = (msg: string): void => {
  process.stderr.write(`[${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${msg}\n`);
};

function version(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? (r.stdout || r.stderr).trim().split('\n')[0]! : `${cmd}: unknown`;
}

function budgetText(b: Budget): string {
  return `up to ${b.maxIter} checks or ${b.budgetMs / 1000} s (at least ${b.minIter}) after ${b.warmup} warm-up`;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (it creates network namespaces)');
  const loadavgStart = readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' ');
  const cases: [Layout, number][] = [['a', 0]];
  for (const n of SIZES.filter((x) => x > 0)) cases.push(['a', n]);
  for (const n of SIZES.filter((x) => x > 0)) cases.push(['b', n]);

  const opts: S1Options = { native: B.native, nativeVerify: B.nativeVerify, exec: B.exec, log };
  const s1: S1Case[] = [];
  for (const [i, [layout, n]] of cases.entries()) {
    log(`S1 ${i + 1}/${cases.length}: layout (${layout}), N = ${n.toLocaleString('en-US')} foreign rules`);
    const c = await runS1Case(layout, n, opts);
    log(`    (foreign rules loaded in ${c.loadMs} ms; ip netns exec floor ${(c.execFloor.median / 1000).toFixed(2)} ms)`);
    s1.push(c);
  }
  log(`S3: 10,000 owned rules, ${B.s3Reps} runs per tool and mode`);
  const s3 = await runS3(B.s3Reps, log);

  const c0 = cpus()[0];
  const results: RunResults = {
    meta: {
      date: new Date().toISOString(),
      mode: full ? 'full' : 'quick',
      machine: `${cpus().length} × ${c0?.model ?? 'unknown CPU'}${c0?.speed ? ` @ ${c0.speed} MHz` : ''}, ` +
        `${(totalmem() / 2 ** 30).toFixed(1)} GiB, Linux ${release()} ${arch()} (${osVersion()})`,
      versions: [`Node ${process.version}`, version('nft', ['--version']), version('iptables-nft', ['--version']),
        version('iptables-legacy', ['--version']), `libnftnl ${version('pkg-config', ['--modversion', 'libnftnl'])}`].join('; '),
      loadavgStart,
      loadavgEnd: readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' '),
      durationS: (Date.now() - started) / 1000,
      budgets: `native tick ${budgetText(B.native)}; native verify ${budgetText(B.nativeVerify)}; ` +
        `exec drivers ${budgetText(B.exec)}; S3 ${B.s3Reps} runs per tool and mode`,
    },
    s1,
    s3,
  };
  const dir = join(PROJECT_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'drivers.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(dir, 's1.svg'), renderS1Svg(results));
  const md = renderMarkdown(results);
  writeFileSync(join(PROJECT_ROOT, 'BENCHMARKS.md'), md);
  process.stdout.write(md);
  log('wrote bench/results/drivers.json, bench/results/s1.svg, BENCHMARKS.md');
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
