/**
 * `nfkeeper apply` before and after, beside `nft -f` of the same ruleset: S8's install rows alone,
 * for an A/B of two builds in one run. Each round installs into a freshly flushed namespace with
 * this build, the other build (--root DIR, main's say) and nft, in turn; every process is timed
 * from outside (wait4: wall, user + system CPU, peak RSS).
 *
 *   npx tsx bench/apply-ab.ts --root /tmp/base [--rules 10000,100000] [--services 1000,10000] [--reps 5] [--cache DIR]
 *
 * --cache DIR gives each build its own code-cache directory (DIR/after, DIR/before, as
 * NODE_COMPILE_CACHE): two builds sharing one remove each other's entry of the command on every
 * run (bin/), and each run then starts from the package's entry and writes its own. The warm-up
 * round makes each build's entry, as a user's first run does.
 *
 * Prints one line per process as it goes and a Markdown table at the end (medians, CPU ratios).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { kubeProxy } from '../test/helpers/peers/kube-proxy.js';
import { withBenchNetns } from './lib/netns.js';
import { runWhole, summarizeRuns, type ProcessRun } from './lib/whole.js';
import { chainNft, chainYaml } from './scenarios/s8.js';

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const list = (s: string | undefined, d: number[]) => (s === undefined ? d : s === '' ? [] : s.split(',').map(Number));
const root = arg('--root');
if (!root) throw new Error('--root DIR: the other build (its bin/nfkeeper.js) is required');
const rules = list(arg('--rules'), [10_000]);
const services = list(arg('--services'), [1000]);
const reps = Number(arg('--reps') ?? 5);
const cache = arg('--cache');
const cacheEnv = (build: 'after' | 'before') => (cache ? { env: { NODE_COMPILE_CACHE: join(cache, build) } } : {});
const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');

const dir = mkdtempSync(join(tmpdir(), 'nfk-apply-ab-'));
const works: { work: string; file: string; nft: string }[] = [];
for (const n of rules) {
  const nft = join(dir, `chain-${n}.nft`), yaml = join(dir, `chain-${n}.yaml`);
  writeFileSync(nft, chainNft(n));
  writeFileSync(yaml, chainYaml(n));
  works.push({ work: `${n.toLocaleString('en-US')} rules in one chain, YAML`, file: yaml, nft });
  works.push({ work: `${n.toLocaleString('en-US')} rules in one chain, the same .nft file`, file: nft, nft });
}
for (const s of services) {
  const kp = kubeProxy({ services: s, seed: 8 });
  const file = join(dir, `kube-proxy-${s}.nft`);
  writeFileSync(file, kp.text);
  works.push({ work: `kube-proxy at ${s.toLocaleString('en-US')} services (${kp.counts.rules.toLocaleString('en-US')} rules, ` +
    `${(kp.text.length / 1048576).toFixed(1)} MiB)`, file, nft: file });
}

const fmt = (us: number) => (us >= 1e6 ? `${(us / 1e6).toFixed(2)} s` : `${(us / 1e3).toFixed(0)} ms`);
const rows: string[] = [];
const sysRows: string[] = [];
const pairRows: string[] = [];
console.log(`load average at start: ${load()}`);
await withBenchNetns('applyab', async (ns) => {
  const flush = () => { ns.exec('nft', ['flush', 'ruleset']); };
  for (const w of works) {
    const runs: Record<'after' | 'before' | 'nft', ProcessRun[]> = { after: [], before: [], nft: [] };
    const cmds = {
      after: () => runWhole('node', [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file], { ns, ...cacheEnv('after') }),
      before: () => runWhole('node', [join(root, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file], { ns, ...cacheEnv('before') }),
      nft: () => runWhole('nft', ['-f', w.nft], { ns }),
    };
    // One warm-up round (file cache, the kernel's modules), not counted.
    for (const k of ['after', 'before', 'nft'] as const) { flush(); cmds[k](); }
    for (let i = 0; i < reps; i++) {
      for (const k of ['after', 'before', 'nft'] as const) {
        flush();
        const r = cmds[k]();
        runs[k].push(r);
        console.log(`${w.work} ${k} round ${i + 1}: wall ${fmt(r.wallUs)}, CPU ${fmt(r.cpuUs)} (system ${fmt(r.sysUs ?? NaN)}), ` +
          `${(r.rssKiB / 1024).toFixed(0)} MiB (load ${load()})`);
      }
    }
    const [a, b, p] = [summarizeRuns(runs.after), summarizeRuns(runs.before), summarizeRuns(runs.nft)];
    // Pair by pair (after / before of the same round): the median ratio and how often after was lower.
    const pairs = (f: (r: ProcessRun) => number) => {
      const q = runs.after.map((r, i) => f(r) / f(runs.before[i]!)).sort((x, y) => x - y);
      return `${q[q.length >> 1]!.toFixed(3)} (lower in ${q.filter((x) => x < 1).length} of ${q.length})`;
    };
    pairRows.push(`| ${w.work} | ${pairs((r) => r.cpuUs)} | ${pairs((r) => r.wallUs)} | ${(b.rssKiB / 1024).toFixed(0)} / ${(a.rssKiB / 1024).toFixed(0)} MiB |`);
    // The kernel's own share: the system time of each (median), beside the CPU.
    const sys = (rs: ProcessRun[]) => fmt(rs.map((r) => r.sysUs ?? NaN).sort((x, y) => x - y)[rs.length >> 1]!);
    sysRows.push(`| ${w.work} | ${sys(runs.before)} | ${sys(runs.after)} | ${sys(runs.nft)} |`);
    rows.push(`| ${w.work} | ${fmt(b.wall.median)} | ${fmt(b.cpu.median)} | ${fmt(a.wall.median)} | ${fmt(a.cpu.median)} | ` +
      `${(a.rssKiB / 1024).toFixed(0)} MiB | ${fmt(p.wall.median)} | ${fmt(p.cpu.median)} | ${(a.cpu.median / b.cpu.median).toFixed(2)}× | ` +
      `${(a.cpu.median / p.cpu.median).toFixed(2)}× | ${(a.wall.median / p.wall.median).toFixed(2)}× | ${reps} |`);
  }
});
console.log(`load average at end: ${load()}`);
console.log('| work | before: wall p50 | CPU p50 | after: wall p50 | CPU p50 | peak RSS | `nft -f` wall p50 | CPU p50 | CPU after / before | CPU after / nft | wall after / nft | rounds |');
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
for (const r of rows) console.log(r);
console.log('\n| work | before: system CPU p50 | after | `nft -f` |');
console.log('|---|---:|---:|---:|');
for (const r of sysRows) console.log(r);
console.log('\n| work | CPU after / before, by pairs | wall, by pairs | peak RSS before / after |');
console.log('|---|---:|---:|---:|');
for (const r of pairRows) console.log(r);
