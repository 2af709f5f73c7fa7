/**
 * A large run of rules missing from inside a long chain, put back: two builds alternating (a b b a …),
 * timed from outside. The namespace holds S8's chain of N rules (`nft -f`); the damage is one `nft -f`
 * batch that flushes the chain and appends every rule but those of the gap (`--at middle`: the
 * `--gap` rules around the middle; `head`: the first `--gap`), so the kernel holds the chain with
 * the run missing, as if it had been deleted.
 *
 * run: `nfkeeper run` as deployed (bin/'s flags, its own record and cache directories, --no-metrics)
 * started onto the whole chain, held `--hold-ms` after `nfkeeper running`, then the damage: from
 * nft's exit to the daemon's `repaired` line read, its own latencyMs, and the daemon's CPU over it
 * (/proc, 10 ms ticks).
 * apply: the damaged chain installed, then `nfkeeper apply` of the config timed as a whole process
 * (wall, user + system: wait4), each build with its own compile cache directory, warmed by an
 * untimed apply first.
 * floor: in the damaged chain, one batch of the addon's appending the gap's rules at the chain's
 * end (no position): the kernel's own cost of adding that many rules, in-process.
 *
 * After each repair the table is listed (`nft list table`) and compared with the listing of the
 * whole chain installed by nft: a repair that put the rules anywhere else stops the run.
 * `--dump DIR`: each build's `nft --debug=netlink list ruleset` after its first repair, handles
 * taken out, written to DIR (a.txt, b.txt, ref.txt: the whole chain as nft installs it).
 *
 *   sudo npx tsx bench/gap-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--gap 50000] [--at middle|head] [--rounds 2]
 *     [--modes run,apply,floor] [--hold-ms 3000] [--dump DIR]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Batch } from '../src/netlink/batch.js';
import { open } from '../src/netlink/socket.js';
import { parseArgs } from './lib/args.js';
import { withBenchNetns, type BenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { takesCacheDir, takesRecord } from './lib/record.js';
import { medianOf } from './lib/stats.js';
import { runWhole } from './lib/whole.js';
import { chainNft, chainYaml } from './scenarios/s8.js';

const USAGE = 'gap-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--gap 50000] [--at middle|head] [--rounds 2] [--modes run,apply,floor]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--gap': 1, '--at': 1, '--rounds': 1, '--modes': 1, '--hold-ms': 1, '--dump': 1 },
  { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '100000'));
const GAP = Number(arg('--gap', '50000'));
const AT = arg('--at', 'middle');
if (AT !== 'middle' && AT !== 'head') throw new Error('--at takes middle or head');
const ROUNDS = Number(arg('--rounds', '2'));
const MODES = new Set(arg('--modes', 'run,apply,floor').split(','));
const HOLD_MS = Number(arg('--hold-ms', '3000'));
const DUMP = arg('--dump');
const LO = AT === 'head' ? 0 : Math.floor((N - GAP) / 2);
const HI = LO + GAP;

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const cpuSeconds = (pid: number): number => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};
const med = (xs: number[]) => medianOf(xs)!;
const name = (i: number) => (i === 0 ? 'a' : 'b');

const dir = mkdtempSync(join(tmpdir(), 'nfk-gap-ab-'));
const config = join(dir, 'c.yaml');
const whole = join(dir, 'whole.nft');
const damage = join(dir, 'damage.nft');
const damaged = join(dir, 'damaged.nft');

function files(): void {
  writeFileSync(config, chainYaml(N));
  const text = chainNft(N);
  writeFileSync(whole, text);
  // The chain's rule lines, in order: the damage keeps all but [LO, HI).
  const lines = text.split('\n');
  const first = lines.findIndex((l) => l.includes('type filter hook'));
  const rules = lines.slice(first + 1, first + 1 + N).map((l) => l.trim());
  const kept = rules.filter((_, i) => i < LO || i >= HI);
  writeFileSync(damage, `flush chain ip big c\n${kept.map((r) => `add rule ip big c ${r}`).join('\n')}\n`);
  writeFileSync(damaged, `${lines.slice(0, first + 1).join('\n')}\n${kept.map((r) => `\t\t${r}`).join('\n')}\n\t}\n}\n`);
}

/** Strips the handles from `nft --debug=netlink list ruleset`'s rule headers and `# handle` comments. */
function netlinkDump(ns: BenchNetns): string {
  return ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']).split('\n')
    .map((l) => l.replace(/^(ip big c) \d+( \d+)?$/, '$1').replace(/ # handle \d+/, '')).join('\n');
}

function checkListing(ns: BenchNetns, ref: string, what: string): void {
  const now = ns.exec('nft', ['list', 'table', 'ip', 'big']);
  if (now !== ref) throw new Error(`${what}: the table differs from the whole chain's listing`);
}

interface RunResult { latencyMs: number; seenMs: number; cpuS: number }

async function daemonRepair(ns: BenchNetns, i: number, extra: string[]): Promise<RunResult> {
  ns.exec('nft', ['flush', 'ruleset']);
  ns.exec('nft', ['-f', whole]);
  const child = spawn('node', [...daemonNodeFlags(roots[i]!), join(roots[i]!, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path, '--no-metrics', ...extra],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => child.on('exit', r));
  try {
    let ready!: () => void;
    let repaired: ((ms: number) => void) | undefined;
    const running = new Promise<void>((r) => { ready = r; });
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (l.includes('"nfkeeper running"')) ready();
      if (l.includes('"msg":"repaired"')) repaired?.((JSON.parse(l) as { latencyMs: number }).latencyMs);
    });
    await Promise.race([running, exited.then(() => { throw new Error('nfkeeper run exited before it was running'); })]);
    await new Promise((r) => setTimeout(r, HOLD_MS));
    const cpu0 = cpuSeconds(child.pid!);
    const line = new Promise<number>((r) => { repaired = r; });
    ns.exec('nft', ['-f', damage]);
    const t0 = performance.now();
    const latencyMs = await Promise.race([line, new Promise<number>((_, j) => setTimeout(() => j(new Error('not repaired in 600 s')), 600_000))]);
    const seenMs = performance.now() - t0;
    return { latencyMs, seenMs, cpuS: cpuSeconds(child.pid!) - cpu0 };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

function applyRepair(ns: BenchNetns, i: number): { wallS: number; cpuS: number } {
  ns.exec('nft', ['flush', 'ruleset']);
  ns.exec('nft', ['-f', damaged]);
  const r = runWhole('node', [join(roots[i]!, 'bin', 'nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path,
    ...(takesCacheDir(roots[i]!) ? ['--cache-dir', join(dir, `apply-cache-${i}`)] : [])], { ns });
  return { wallS: r.wallUs / 1e6, cpuS: r.cpuUs / 1e6 };
}

async function floor(ns: BenchNetns, missing: Awaited<ReturnType<ReturnType<typeof open>['listRules']>>): Promise<number> {
  ns.exec('nft', ['flush', 'ruleset']);
  ns.exec('nft', ['-f', damaged]);
  const s = open({ netns: ns.path });
  try {
    const b = new Batch();
    for (const x of missing) b.push({ verb: 'add', object: 'rule', family: 'ip', table: 'big', chain: 'c', exprs: x.exprs });
    const t0 = performance.now();
    await s.commit(b);
    return (performance.now() - t0) / 1000;
  } finally {
    s.close();
  }
}

try {
  files();
  await withBenchNetns('gap', async (ns) => {
    ns.exec('nft', ['-f', whole]);
    const ref = ns.exec('nft', ['list', 'table', 'ip', 'big']);
    const refDump = DUMP ? netlinkDump(ns) : '';
    const s = open({ netns: ns.path });
    const missing = (await s.listRules({ family: 'ip', table: 'big', chain: 'c' })).slice(LO, HI);
    s.close();
    if (DUMP) {
      mkdirSync(DUMP, { recursive: true });
      writeFileSync(join(DUMP, 'ref.txt'), refDump);
    }
    const extras = roots.map((r, i) => [...(takesRecord(r) ? ['--record-dir', join(dir, `record-${i}`)] : []),
      ...(takesCacheDir(r) ? ['--cache-dir', join(dir, `cache-${i}`)] : [])]);
    console.log(`N ${N}, ${GAP} rules missing at the ${AT} ([${LO}, ${HI})); a ${roots[0]}, b ${roots[1]}; load ${loadavg()}`);
    // Warm-ups: each build's compile cache (the daemon's and apply's) stored, not timed.
    for (const i of [0, 1]) {
      if (MODES.has('run')) await daemonRepair(ns, i, extras[i]!);
      if (MODES.has('apply')) applyRepair(ns, i);
    }
    const runs: RunResult[][] = [[], []];
    const applies: { wallS: number; cpuS: number }[][] = [[], []];
    const floors: number[] = [];
    const dumped = new Set<number>();
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of [0, 1]) {
        const i = (round + k) % 2;
        if (MODES.has('run')) {
          const r = await daemonRepair(ns, i, extras[i]!);
          checkListing(ns, ref, `${name(i)}'s daemon`);
          runs[i]!.push(r);
          console.log(`round ${round + 1} ${name(i)} run: latencyMs ${r.latencyMs.toFixed(0)}, line read ${r.seenMs.toFixed(0)} ms after nft's exit, ` +
            `daemon CPU ${r.cpuS.toFixed(2)} s; load ${loadavg()}`);
          if (DUMP && !dumped.has(i)) {
            writeFileSync(join(DUMP, `${name(i)}.txt`), netlinkDump(ns));
            dumped.add(i);
          }
        }
        if (MODES.has('apply')) {
          const r = applyRepair(ns, i);
          checkListing(ns, ref, `${name(i)}'s apply`);
          applies[i]!.push(r);
          console.log(`round ${round + 1} ${name(i)} apply: wall ${r.wallS.toFixed(2)} s, CPU ${r.cpuS.toFixed(2)} s; load ${loadavg()}`);
        }
      }
      if (MODES.has('floor')) {
        const f = await floor(ns, missing);
        floors.push(f);
        console.log(`round ${round + 1} floor: ${GAP} rules appended by one batch in ${f.toFixed(2)} s; load ${loadavg()}`);
      }
    }
    for (const i of [0, 1]) {
      const parts: string[] = [];
      if (runs[i]!.length) {
        parts.push(`run: latencyMs ${med(runs[i]!.map((r) => r.latencyMs)).toFixed(0)}, line read ${med(runs[i]!.map((r) => r.seenMs)).toFixed(0)} ms, ` +
          `daemon CPU ${med(runs[i]!.map((r) => r.cpuS)).toFixed(2)} s`);
      }
      if (applies[i]!.length) parts.push(`apply: wall ${med(applies[i]!.map((r) => r.wallS)).toFixed(2)} s, CPU ${med(applies[i]!.map((r) => r.cpuS)).toFixed(2)} s`);
      console.log(`${name(i)} ${roots[i]} medians: ${parts.join('; ')}`);
    }
    if (floors.length) console.log(`floor: median ${med(floors).toFixed(2)} s`);
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
