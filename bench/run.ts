/**
 * nfkeeper against the exec-based drivers, every scenario in one
 * run, in throwaway namespaces:
 *   S1 steady-state check, S2 detection to repair, S3 atomic rewrite,
 *   S4 the daemon itself, S5 GC of 1,000 orphaned owners, S6 owned-rule scaling.
 *
 *   npm run bench [-- --full] [--only s1,s3] [--sizes 0,10000]
 *
 * Quick mode (default): N = 0, 1,000, 10,000 and short budgets (a few minutes
 * on 2 cores). --full adds N = 100,000 and longer budgets (about 20 minutes).
 * A run of every scenario writes bench/results/results.json, one SVG per
 * scenario and BENCHMARKS.md; with --only or --sizes it prints the Markdown to stdout and
 * leaves the committed results alone. Progress goes to stderr.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem, arch, version as osVersion } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { runS1Case, type S1Case, type S1Options } from './scenarios/s1.js';
import { runS2, type S2Options } from './scenarios/s2.js';
import { runS3 } from './scenarios/s3.js';
import { runS4, type S4Options } from './scenarios/s4.js';
import { runS5, type S5Options } from './scenarios/s5.js';
import { runS6, type S6Options } from './scenarios/s6.js';
import { runS7, type S7Options } from './scenarios/s7.js';
import { runS8, S8_PARTS, type S8Options, type S8Part } from './scenarios/s8.js';
import type { Layout } from './scenarios/foreign.js';
import type { Budget } from './lib/measure.js';
import { renderMarkdown, renderS1Svg, renderS2Svg, renderS4Svg, renderS5Svg, renderS6Svg, type RunResults } from './lib/report.js';
import { parseArgs } from './lib/args.js';

const SCENARIOS = ['s1', 's2', 's3', 's4', 's5', 's6', 's7', 's8'] as const;
type Scenario = (typeof SCENARIOS)[number];

// Anything else is refused before a scenario runs or a result is written.
const cli = parseArgs(import.meta.url, { '--full': 0, '--only': 1, '--merge': 0, '--sizes': 1, '--s8-repairs': 1, '--s8-parts': 1, '--root': 1, '--render': 0 });

const full = cli.has('--full');
const onlyArg = cli.value('--only');
const only = new Set<Scenario>(onlyArg !== undefined
  ? onlyArg.split(',').map((s) => {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`--only takes a list of ${SCENARIOS.join(', ')}; got "${s}"`);
    return s as Scenario;
  })
  : SCENARIOS);
// --merge (with --only): write this run's scenarios into the committed results beside the earlier run's others.
const merge = cli.has('--merge');
const sizesArg = cli.value('--sizes');
// --sizes 0,100000: only these N (for trying one point; such a run is not a full result either).
const pick = sizesArg !== undefined ? new Set(sizesArg.split(',').map(Number)) : undefined;
const sizes = (list: number[]) => (pick ? list.filter((n) => pick.has(n)) : list);
const SIZES = sizes(full ? [0, 1000, 10_000, 100_000] : [0, 1000, 10_000]);

interface Budgets {
  s1: { native: Budget; nativeVerify: Budget; exec: Budget; execAt100k: Budget };
  s2: Omit<S2Options, 'sizes' | 'log'>;
  s3Reps: number;
  s4: Omit<S4Options, 'sizes' | 'log'> & { sizes: number[] };
  s5: Omit<S5Options, 'sizes' | 'log'> & { sizes: number[] };
  s6: Omit<S6Options, 'log'>;
  s7: Omit<S7Options, 'log'>;
  s8: Omit<S8Options, 'log'>;
}

const SKIP_100K = {
  drivers: ['iptables-restore', 'iptables-check (legacy)'],
  why: 'one iptables-nft-save of the kube-proxy-like nat table takes tens of seconds to minutes at 100,000 rules on this machine, depending on its load, and a round is two saves, ' +
    'a restore and a check; the legacy driver is left out with it to keep the full run within about 20 minutes',
};

const B: Budgets = full
  ? {
    s1: {
      native: { maxIter: 50_000, budgetMs: 3000, minIter: 1000, warmup: 1000 },
      nativeVerify: { maxIter: 10_000, budgetMs: 3000, minIter: 200, warmup: 100 },
      exec: { maxIter: 300, budgetMs: 3000, minIter: 10, warmup: 2 },
      // One check takes from seconds (iptables-check, layout b) to over a minute (iptables-nft-save, layout a) at 100,000.
      execAt100k: { maxIter: 5, budgetMs: 15_000, minIter: 1, warmup: 0 },
    },
    s2: { eventReps: 300, pollReps: 5, execReps: (n) => (n >= 100_000 ? 5 : 12), skip: (n) => (n >= 100_000 ? SKIP_100K : undefined),
      realPeriods: 6, realAtN: 10_000 },
    s3Reps: 7,
    // The daemon never reads foreign rules (its dumps are filtered to its own table), so 100,000 adds loading time, not information.
    // Idle: long enough that one collection by V8's memory reducer (once, some time after start-up) weighs little.
    s4: { sizes: sizes([0, 10_000]), idleSeconds: () => 120, stormSeconds: 10, settleSeconds: 20 },
    s5: { sizes: sizes([0, 10_000]), reps: () => 5, owned: true },
    s6: { sizes: sizes([4, 100, 10_000, 100_000]), reps: (n) => (n >= 100_000
      ? { install: 2, repair: 30, change: 4, exec: 3, gapMs: 100 }
      : { install: 3, repair: n >= 10_000 ? 200 : 300, change: 20, exec: 10, gapMs: n >= 10_000 ? 60 : 20 }) },
    s7: { owners: 1000, passes: 30, rssSizes: [0, 10_000, 100_000], inFlight: [8, 32], root: rootArg() },
    s8: { chainSizes: [10_000, 100_000], services: [1000, 10_000], reps: (n) => (n >= 50_000 ? 3 : 7), daemonSizes: [10_000, 100_000],
      repairRules: [4, 10_000], repairElements: [100_000], repairs: s8Repairs() ?? 30, repairGapMs: 2600, neighbourSeconds: 10, neighbourRuns: 3 },
  }
  : {
    s1: {
      native: { maxIter: 5000, budgetMs: 500, minIter: 100, warmup: 2000 },
      nativeVerify: { maxIter: 1000, budgetMs: 500, minIter: 50, warmup: 50 },
      exec: { maxIter: 100, budgetMs: 3000, minIter: 5, warmup: 1 },
      execAt100k: { maxIter: 5, budgetMs: 15_000, minIter: 1, warmup: 0 },
    },
    s2: { eventReps: 100, pollReps: 3, execReps: () => 10, skip: (n) => (n >= 100_000 ? SKIP_100K : undefined), realPeriods: 4, realAtN: 1000 },
    s3Reps: 3,
    s4: { sizes: sizes([0, 10_000]), idleSeconds: () => 20, stormSeconds: 10, settleSeconds: 10 },
    s5: { sizes: sizes([0, 10_000]), reps: () => 3, owned: true },
    s6: { sizes: sizes([4, 100, 10_000]), reps: (n) => ({ install: 3, repair: n >= 10_000 ? 50 : 200, change: n >= 10_000 ? 5 : 10, exec: 5, gapMs: n >= 10_000 ? 60 : 20 }) },
    s7: { owners: 1000, passes: 15, rssSizes: [0, 10_000, 100_000], inFlight: [8, 32], root: rootArg() },
    s8: { chainSizes: [10_000], services: [1000], reps: () => 5, daemonSizes: [10_000], repairRules: [4, 10_000], repairElements: [100_000],
      repairs: s8Repairs() ?? 10, repairGapMs: 2600, neighbourSeconds: 5, neighbourRuns: 3 },
  };

/** --s8-repairs N: repairs as deployed per case (10 in quick mode is too few for a p50 between two builds). */
function s8Repairs(): number | undefined {
  const s = cli.value('--s8-repairs');
  if (s === undefined) return undefined;
  const v = Number(s);
  if (!Number.isInteger(v) || v < 1) throw new Error(`--s8-repairs takes a whole number of repairs; got "${s}"`);
  return v;
}

/** --s8-parts commands,ready,…: only these parts of S8 (a before/after of the commands alone, say). */
function s8Parts(): S8Part[] | undefined {
  return cli.value('--s8-parts')?.split(',').map((p) => {
    if (!(S8_PARTS as readonly string[]).includes(p)) throw new Error(`--s8-parts takes a list of ${S8_PARTS.join(', ')}; got "${p}"`);
    return p as S8Part;
  });
}

/**
 * --root DIR: another build's bin/nfkeeper.js (main's, say), for a before/after: S7's daemon is
 * that build's; S8 runs that build's command in turn with this one's and the peer.
 */
function rootArg(): string | undefined {
  return cli.value('--root');
}

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

function budgetLines(): string[] {
  const out: string[] = [];
  const n = (x: number) => x.toLocaleString('en-US');
  if (only.has('s1')) {
    out.push(`S1 repetitions: native tick ${budgetText(B.s1.native)}; native verify ${budgetText(B.s1.nativeVerify)}; ` +
      `exec drivers ${budgetText(B.s1.exec)}${full ? `; at 100,000 foreign rules exec drivers ${budgetText(B.s1.execAt100k)}, ` +
        'and each driver is installed and its first timed check must say "in sync", without the damage-and-repair self-test run at smaller N' : ''}`);
  }
  if (only.has('s2')) {
    out.push(`S2 repetitions: native ${B.s2.eventReps} event-path repairs and ${B.s2.pollReps} polled repairs per N; exec drivers ` +
      `${SIZES.map((x) => `${B.s2.execReps(x)} at ${n(x)}`).join(', ')} check+repair rounds (after one warm-up, none at 100,000); ` +
      `${B.s2.realPeriods} real 5 s flannel periods at ${n(B.s2.realAtN)}`);
  }
  if (only.has('s3')) out.push(`S3 repetitions: ${B.s3Reps} runs per tool and mode`);
  if (only.has('s4')) {
    out.push(`S4 durations: at N = ${B.s4.sizes.map((x) => `${n(x)} idle ${B.s4.idleSeconds(x)} s`).join(', ')}; storm and hostile ` +
      `${B.s4.stormSeconds} s each; ${B.s4.settleSeconds} s settle after start-up`);
  }
  if (only.has('s5')) out.push(`S5 repetitions: ${B.s5.sizes.map((x) => `${B.s5.reps(x)} runs per tool at ${n(x)}`).join(', ')}`);
  if (only.has('s7')) out.push(`S7: ${B.s7.owners.toLocaleString('en-US')} owners registered one by one and ${(B.s7.inFlight ?? []).join(', ')} in flight, ${B.s7.passes} passes, RSS at ${B.s7.rssSizes.join(', ')} owned rules${B.s7.root ? `; daemon from ${B.s7.root}` : ''}`);
  if (only.has('s8')) {
    const parts = new Set<S8Part>(s8Parts() ?? S8_PARTS);
    const said: string[] = [];
    if (parts.has('commands')) {
      said.push(`installs at ${B.s8.chainSizes.map(n).join(', ')} rules in one chain and kube-proxy at ${B.s8.services.map(n).join(', ')} services, ` +
        `${B.s8.reps(0)} runs per command (${B.s8.reps(100_000)} at 50,000 rules or more), alternating with nft${rootArg() ? ` and with ${rootArg()}'s build` : ''}, ` +
        `after one untimed run of each build, each with its own code-cache directory`);
    }
    if (parts.has('ready')) said.push(`daemon ready at ${B.s8.daemonSizes.map(n).join(', ')}`);
    if (parts.has('repairs')) {
      said.push(`${B.s8.repairs} repairs ${B.s8.repairGapMs} ms apart as deployed at ${B.s8.repairRules.map(n).join(', ')} rules and ${B.s8.repairElements.map(n).join(', ')} elements`);
    }
    if (parts.has('neighbour')) said.push(`a neighbour for ${B.s8.neighbourSeconds} s, ${B.s8.neighbourRuns ?? 1} runs${rootArg() ? ' of each build in turn' : ''}`);
    out.push(`S8${parts.size < S8_PARTS.length ? ` (${[...parts].join(', ')} only; the rest from the earlier run)` : ''}: ${said.join('; ')}`);
  }
  if (only.has('s6')) {
    out.push(`S6 repetitions: ${B.s6.sizes.map((x) => {
      const r = B.s6.reps(x);
      return `at ${n(x)} ${r.install} installs, ${r.repair} probed repairs ${r.gapMs} ms apart (after ${x >= 100_000 ? 2 : 5} warm-up), ${r.change} changes, ${r.exec} runs per exec tool`;
    }).join('; ')}`);
  }
  return out;
}

const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' ');

function gitDescribe(): string {
  const r = spawnSync('git', ['log', '-1', '--format=%h (%s)'], { cwd: PROJECT_ROOT, encoding: 'utf8' });
  const head = r.status === 0 ? r.stdout.trim() : 'unknown commit';
  const dirty = spawnSync('git', ['status', '--porcelain', '--untracked-files=no', 'src', 'native'], { cwd: PROJECT_ROOT, encoding: 'utf8' });
  return `commit ${head.replace(/\|/g, '/')}${dirty.stdout.trim() ? ' with uncommitted changes in src/ or native/' : ''}`;
}

async function main(): Promise<void> {
  if (cli.has('--render')) {
    // Re-render BENCHMARKS.md and the SVGs from the last run's results.json (after a change to the report only).
    const results = JSON.parse(readFileSync(join(PROJECT_ROOT, 'bench', 'results', 'results.json'), 'utf8')) as RunResults;
    writeOutputs(results);
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (it creates network namespaces)');
  const loadavgStart = loadavg();
  const out: Omit<RunResults, 'meta'> = {};

  if (only.has('s1')) {
    const cases: [Layout, number][] = SIZES.includes(0) ? [['a', 0]] : [];
    for (const n of SIZES.filter((x) => x > 0)) cases.push(['a', n]);
    for (const n of SIZES.filter((x) => x > 0)) cases.push(['b', n]);
    const s1: S1Case[] = [];
    for (const [i, [layout, n]] of cases.entries()) {
      log(`S1 ${i + 1}/${cases.length}: layout (${layout}), N = ${n.toLocaleString('en-US')} foreign rules (load average ${loadavg()})`);
      const big = n >= 100_000;
      const opts: S1Options = { native: B.s1.native, nativeVerify: B.s1.nativeVerify, exec: big ? B.s1.execAt100k : B.s1.exec, light: big, log };
      const c = await runS1Case(layout, n, opts);
      log(`    (foreign rules loaded in ${c.loadMs} ms; ip netns exec floor ${(c.execFloor.median / 1000).toFixed(2)} ms)`);
      s1.push(c);
    }
    out.s1 = s1;
    write(out, loadavgStart, 'S2-S5');
  }
  if (only.has('s2')) {
    log(`S2 detection to repair, N = ${SIZES.map((x) => x.toLocaleString('en-US')).join(', ')} (load average ${loadavg()})`);
    out.s2 = await runS2({ ...B.s2, sizes: SIZES, log });
    write(out, loadavgStart, 'S3-S5');
  }
  if (only.has('s3')) {
    log(`S3: 10,000 owned rules, ${B.s3Reps} runs per tool and mode (load average ${loadavg()})`);
    out.s3 = await runS3(B.s3Reps, log);
    write(out, loadavgStart, 'S4, S5');
  }
  if (only.has('s4')) {
    log(`S4 the daemon, N = ${B.s4.sizes.map((x) => x.toLocaleString('en-US')).join(', ')} (load average ${loadavg()})`);
    out.s4 = await runS4({ ...B.s4, log });
    write(out, loadavgStart, 'S5');
  }
  if (only.has('s5')) {
    log(`S5 GC of 1,000 orphaned owners, N = ${B.s5.sizes.map((x) => x.toLocaleString('en-US')).join(', ')} (load average ${loadavg()})`);
    out.s5 = await runS5({ ...B.s5, log });
    write(out, loadavgStart, 'S6');
  }
  if (only.has('s6')) {
    log(`S6 owned-rule scaling, N = ${B.s6.sizes.map((x) => x.toLocaleString('en-US')).join(', ')} (load average ${loadavg()})`);
    out.s6 = await runS6({ ...B.s6, log });
    write(out, loadavgStart, 'S7');
  }
  if (only.has('s7')) {
    log(`S7 owners at scale, ${B.s7.owners.toLocaleString('en-US')} owners (load average ${loadavg()})`);
    out.s7 = await runS7({ ...B.s7, log });
    write(out, loadavgStart, 'S8');
  }
  if (only.has('s8')) {
    log(`S8 what users run, as whole processes (load average ${loadavg()})`);
    out.s8 = await runS8({ ...B.s8, root: rootArg(), parts: s8Parts(), log });
  }

  write(out, loadavgStart, undefined);
}

/**
 * Renders and (for a run of every scenario) writes the results. Called after
 * each scenario too, with `pending` naming what has not run yet, so that a run
 * cut short still leaves its finished scenarios behind, marked as incomplete.
 */
function write(out: Omit<RunResults, 'meta'>, loadavgStart: string, pending: string | undefined): void {
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
      loadavgEnd: loadavg(),
      durationS: (Date.now() - started) / 1000,
      budgets: budgetLines(),
      commit: gitDescribe(),
      ...(pending ? { incomplete: pending } : {}),
    },
    ...out,
  };
  const partialOnly = only.size !== SCENARIOS.length || pick !== undefined;
  if (merge && !pending) {
    // --merge: this run's scenarios replace theirs in the committed results; the rest stay from the
    // earlier run, and the page says which part came from when.
    const file = join(PROJECT_ROOT, 'bench', 'results', 'results.json');
    const prev = JSON.parse(readFileSync(file, 'utf8')) as RunResults;
    // With --sizes, S6 rows of other sizes stay (and so does the note of the run they came from).
    const rows = pick && out.s6 && prev.s6 ? { s6: [...prev.s6.filter((x) => !pick.has(x.n)), ...out.s6].sort((x, y) => x.n - y.n) } : {};
    // With --s8-parts, the parts of S8 this run left out stay from the earlier one.
    const parts = s8Parts();
    if (parts && out.s8 && prev.s8) {
      out.s8 = { ...out.s8, ...(parts.includes('commands') ? {} : { rows: prev.s8.rows, nodeStart: prev.s8.nodeStart }),
        ...(parts.includes('ready') ? {} : { ready: prev.s8.ready }), ...(parts.includes('repairs') ? {} : { repairs: prev.s8.repairs }),
        ...(parts.includes('neighbour') ? {} : { neighbour: prev.s8.neighbour }),
        // null: that part came from a run with no other build (this run's --root is not its before).
        beforeOf: Object.fromEntries(S8_PARTS.filter((p) => !parts.includes(p))
          .map((p) => [p, (prev.s8!.beforeOf && p in prev.s8!.beforeOf ? prev.s8!.beforeOf[p] : prev.s8!.before) ?? null])) };
    }
    // A scenario the earlier run had not reached is no longer missing once merged in.
    const stillPending = prev.meta.incomplete?.split(', ')
      .flatMap((x) => { const m = /^S(\d)-S(\d)$/.exec(x); return m ? Array.from({ length: +m[2]! - +m[1]! + 1 }, (_, i) => `S${+m[1]! + i}`) : [x]; })
      .filter((x) => !only.has(x.toLowerCase() as Scenario)).join(', ');
    const { incomplete: _pending, ...prevMeta } = prev.meta;
    const merged: RunResults = { ...prev, ...out, ...rows, meta: { ...prevMeta, ...(stillPending ? { incomplete: stillPending } : {}), merged: [...(prev.meta.merged ?? [])
      // (with --s8-parts, the earlier S8 run's line stays too: it says where the other parts came from)
      .filter((x) => pick || (parts && x.startsWith('S8 ')) || ![...only].some((o) => x.startsWith(o.toUpperCase() + ' '))),
      `${[...only].map((o) => o.toUpperCase()).join(', ')}${pick ? ` at N = ${[...pick].join(', ')}` : ''} from a separate ${results.meta.mode} run on ${results.meta.date} (${results.meta.durationS.toFixed(0)} s, ` +
        `load average ${results.meta.loadavgStart} / ${results.meta.loadavgEnd}, ${results.meta.commit.replace(/ \(.*\)/, '')}; ${results.meta.budgets.join('; ')})`] } };
    writeOutputs(merged);
    log(`--merge: ${[...only].join(', ')} written into bench/results/results.json, the SVGs and BENCHMARKS.md`);
    return;
  }
  const md = renderMarkdown(results);
  if (!pending) process.stdout.write(md);
  if (partialOnly) {
    if (!pending) log('--only/--sizes: BENCHMARKS.md and bench/results/ left alone (the Markdown above is this run\'s)');
    return;
  }
  writeOutputs(results);
  log(`wrote bench/results/results.json, the SVGs and BENCHMARKS.md${pending ? ` (so far; still to run: ${pending})` : ''}`);
}

function writeOutputs(results: RunResults): void {
  const dir = join(PROJECT_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  if (results.s1) writeFileSync(join(dir, 's1.svg'), renderS1Svg(results));
  if (results.s2) writeFileSync(join(dir, 's2.svg'), renderS2Svg(results));
  if (results.s4) writeFileSync(join(dir, 's4.svg'), renderS4Svg(results));
  if (results.s5) writeFileSync(join(dir, 's5.svg'), renderS5Svg(results));
  if (results.s6) writeFileSync(join(dir, 's6.svg'), renderS6Svg(results));
  writeFileSync(join(PROJECT_ROOT, 'BENCHMARKS.md'), renderMarkdown(results));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
