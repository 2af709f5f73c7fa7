/**
 * `nfkeeper apply` before and after, beside `nft -f` of the same ruleset: S8's install rows alone,
 * for an A/B of two builds in one run. Each round installs into a freshly flushed namespace with
 * this build, the other build (--root DIR, main's say) and nft, in turn; every process is timed
 * from outside (wait4: wall, user + system CPU, peak RSS).
 *
 *   npx tsx bench/apply-ab.ts --root /tmp/base [--rules 10000,100000] [--services 1000,10000] [--reps 5] [--cache DIR] [--kinds warm,before,nft]
 *     [--kinds boot,before-boot,cold,before-cold,nft]
 *
 * --cache DIR gives each build its own code-cache directory (DIR/after, DIR/before, as
 * NODE_COMPILE_CACHE): two builds sharing one remove each other's entry of the command on every
 * run (bin/), and each run then starts from the package's entry and writes its own. The warm-up
 * round makes each build's entry, as a user's first run does.
 *
 * This build's apply runs three ways when it has a compile cache (--cache-dir): `off` (--no-cache-dir),
 * `cold` (its cache directory emptied before each run: the compile, then the store after the commit)
 * and `warm` (the directory kept: the first, untimed run stored the entry). An older build runs as
 * it is (`before`). cold against off is what the store costs a first apply.
 *
 * `boot`: warm, after every proof kept beside the entry (compiled-*.held) was made to name another
 * boot: the first apply of a node after a reboot. `before-cold`, `before-warm` and `before-boot`: the
 * other build with its own --cache-dir, the same way (its directory emptied; kept; its proofs' boot
 * changed).
 *
 * Prints one line per process as it goes and Markdown tables at the end (medians, CPU ratios).
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { kubeProxy } from '../test/helpers/peers/kube-proxy.js';
import { withBenchNetns } from './lib/netns.js';
import { applyAbTables, fmt, type Kind, type WorkRuns } from './lib/apply-ab-summary.js';
import { runWhole, type ProcessRun } from './lib/whole.js';
import { chainNft, chainYaml } from './scenarios/s8.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--command': 1, '--root': 1, '--rules': 1, '--services': 1, '--reps': 1, '--cache': 1, '--kinds': 1 });
const arg = cli.value;
const list = (s: string | undefined, d: number[]) => (s === undefined ? d : s === '' ? [] : s.split(',').map(Number));
// --command check: `nfkeeper check` of the config installed (in sync), three ways (off, cold, warm)
// and no other build: check without a cache is the check an earlier build runs.
const command = arg('--command') ?? 'apply';
if (command !== 'apply' && command !== 'check') throw new Error('--command apply or check');
const root = arg('--root');
if (!root && command === 'apply') throw new Error('--root DIR: the other build (its bin/nfkeeper.js) is required');
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

const hasCacheDir = spawnSync('node', [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'apply', '--help'], { encoding: 'utf8' }).stdout.includes('--cache-dir');
// --kinds warm,before,nft: only those, for more rounds of one comparison in the same time.
const only = arg('--kinds')?.split(',');
// (boot, before-cold and before-boot only when asked for)
const KINDS: readonly Kind[] = only ? only as Kind[]
  : command === 'check' ? ['off', 'cold', 'warm'] : hasCacheDir ? ['off', 'cold', 'warm', 'before', 'nft'] : ['after', 'before', 'nft'];
const compileCache = (k: 'cold' | 'warm' | 'before-cold' | 'before-warm' | 'before-boot', w: { file: string }) => join(dir, `compile-cache-${k}-${w.file.replace(/\W/g, '_')}`);
const done: WorkRuns[] = [];
console.log(`load average at start: ${load()}`);
await withBenchNetns('applyab', async (ns) => {
  // A check reads the ruleset the config installed: nothing flushed between its runs.
  const flush = () => { if (command === 'apply') ns.exec('nft', ['flush', 'ruleset']); };
  for (const w of works) {
    if (command === 'check') {
      ns.exec('nft', ['flush', 'ruleset']);
      // The entry a check reads is the daemon's (run stores every config): a run stores it for warm.
      await storedByRun(ns.name, w.file, compileCache('warm', w));
    }
    const runs: Partial<Record<Kind, ProcessRun[]>> = Object.fromEntries(KINDS.map((k) => [k, []]));
    const ours = (extra: string[]) => () => runWhole('node', [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), command, '--config', w.file, ...extra], { ns, ...cacheEnv('after') });
    const cmds: Partial<Record<Kind, () => ProcessRun>> = {
      after: ours([]),
      off: ours(['--no-cache-dir']),
      cold: () => {
        // (for check: no entry, which it only looks for)
        rmSync(compileCache('cold', w), { recursive: true, force: true });
        return ours(['--cache-dir', compileCache('cold', w)])();
      },
      warm: ours(['--cache-dir', compileCache('warm', w)]),
      boot: () => {
        otherBoot(compileCache('warm', w));
        return ours(['--cache-dir', compileCache('warm', w)])();
      },
      before: () => runWhole('node', [join(root!, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file], { ns, ...cacheEnv('before') }),
      'before-cold': () => {
        rmSync(compileCache('before-cold', w), { recursive: true, force: true });
        return runWhole('node', [join(root!, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file, '--cache-dir', compileCache('before-cold', w)], { ns, ...cacheEnv('before') });
      },
      'before-warm': () => runWhole('node', [join(root!, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file, '--cache-dir', compileCache('before-warm', w)], { ns, ...cacheEnv('before') }),
      'before-boot': () => {
        otherBoot(compileCache('before-boot', w));
        return runWhole('node', [join(root!, 'bin', 'nfkeeper.js'), 'apply', '--config', w.file, '--cache-dir', compileCache('before-boot', w)], { ns, ...cacheEnv('before') });
      },
      nft: () => runWhole('nft', ['-f', w.nft], { ns }),
    };
    // One warm-up round (file cache, the kernel's modules; the warm compile cache's entry), not counted.
    for (const k of KINDS) { flush(); cmds[k]!(); }
    for (let i = 0; i < reps; i++) {
      for (const k of KINDS) {
        // A turn of the event loop between runs: a SIGTERM or SIGINT is handled here (the namespace
        // removed), not only when every synchronous run is over.
        await new Promise((r) => setImmediate(r));
        flush();
        const r = cmds[k]!();
        runs[k]!.push(r);
        console.log(`${w.work} ${k} round ${i + 1}: wall ${fmt(r.wallUs)}, CPU ${fmt(r.cpuUs)} (system ${fmt(r.sysUs ?? NaN)}), ` +
          `${(r.rssKiB / 1024).toFixed(0)} MiB (load ${load()})`);
      }
    }
    done.push({ work: w.work, runs });
  }
});
console.log(`load average at end: ${load()}`);
for (const line of applyAbTables(KINDS, command, done, reps)) console.log(line);

/** `nfkeeper run` of `file` in the namespace `ns` until it has stored the compiled config in `cacheDir`, then stopped. */
async function storedByRun(ns: string, file: string, cacheDir: string): Promise<void> {
  const child = spawn('ip', ['netns', 'exec', ns, 'node', join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', file, '--cache-dir', cacheDir,
    '--no-metrics', '--no-record'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let seen = '';
  await new Promise<void>((res, rej) => {
    child.stdout!.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes('compiled config stored in the compile cache')) res();
      else if (seen.includes('compiled config not stored')) rej(new Error(`run did not store: ${seen}`));
    });
    child.on('exit', () => rej(new Error(`run exited: ${seen}`)));
  });
  child.kill('SIGTERM');
  await new Promise((r) => child.on('exit', r));
}

/**
 * Every proof in the compile cache `dir` made to name another boot (what it finds after a reboot):
 * a key of the kernel build and boot as a string (`... boot ID`) or an object with `boot`.
 */
function otherBoot(dir: string): void {
  if (!existsSync(dir)) return;
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.held'))) {
    const proof = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { kernel: unknown };
    const other = `${Math.random().toString(16).slice(2, 10)}-0000-0000-0000-000000000000`;
    if (typeof proof.kernel === 'string') proof.kernel = proof.kernel.replace(/boot \S+$/, `boot ${other}`);
    else if (typeof proof.kernel === 'object' && proof.kernel !== null && 'boot' in proof.kernel) proof.kernel = { ...proof.kernel, boot: other };
    writeFileSync(join(dir, f), `${JSON.stringify(proof)}\n`);
  }
}
