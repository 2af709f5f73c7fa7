/**
 * Foreign GC under a neighbour committing to a table of its own, two builds alternating cell by
 * cell, from outside. Per cell a fresh namespace holding ALLOCS dead Nomad allocations and one live
 * one in iptables-nft's `ip nat` (test/gc/fixtures.ts manyAllocs: a jump, a CNI chain and two rules
 * each); test/helpers/neighbour.ts starts at RATE commits a second (or 'max') on `ip neighbour`,
 * 300 ms later:
 * - `oneshot`: `nfkeeper gc --grace 0s --live-file` from the build's bin/, timed as a whole process
 *   (exit, wall, user + system CPU);
 * - `daemon`: `nfkeeper run` of a gc-only config (gc.enabled, interval 1s, grace 0s); its log is
 *   watched WINDOW seconds for `foreign garbage collected` (time from spawn) and the failed passes
 *   before it;
 * - `cleanup`: `nfkeeper cleanup` of S8's 10,000-rule table `ip big` (installed by a quiet `apply`
 *   before the neighbour starts), timed as a whole process.
 * Then the neighbour stops and the CNI chains left are counted (1, the live one, when collected; for
 * cleanup, 0 and `ip big` gone).
 *
 *   sudo npx tsx bench/gc-ab.ts --a CHECKOUT --b CHECKOUT [--allocs 1000] [--rates 10,100,1000,max] [--rounds 1]
 *     [--kinds oneshot,daemon,cleanup] [--window-s 30] [--prefix P]
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startNeighbour, type Neighbour } from '../test/helpers/neighbour.js';
import { LIVE, manyAllocs } from '../test/gc/fixtures.js';
import { chainYaml } from '../test/helpers/big-chain.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { parseArgs } from './lib/args.js';
import { medianOf } from './lib/stats.js';
import { runWhole } from './lib/whole.js';

const USAGE = 'gc-ab.ts --a CHECKOUT --b CHECKOUT [--allocs 1000] [--rates 10,100,1000,max] [--rounds 1] [--kinds oneshot,daemon,cleanup] [--window-s 30] [--prefix P]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--allocs': 1, '--rates': 1, '--rounds': 1, '--kinds': 1, '--window-s': 1, '--prefix': 1 },
  { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const ALLOCS = Number(arg('--allocs', '1000'));
const RATES = arg('--rates', '10,100,1000,max')!.split(',').map((r) => (r === 'max' ? 'max' as const : Number(r)));
const ROUNDS = Number(arg('--rounds', '1'));
const KINDS = arg('--kinds', 'oneshot,daemon')!.split(',');
const WINDOW_S = Number(arg('--window-s', '30'));
const PREFIX = arg('--prefix', 'nfk-bench')!;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const dir = mkdtempSync(join(tmpdir(), 'nfk-gc-ab-'));
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

interface Run { exit: number | string; wallS?: number; cpuS?: number; failedPasses?: number; chainsLeft: number; neighbour?: string; why?: string }

const liveFile = join(dir, 'live.json');
writeFileSync(liveFile, JSON.stringify([LIVE]));
const foreign = 'gc:\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n';
const oneshotConfig = join(dir, 'gc.yaml');
writeFileSync(oneshotConfig, `tables: []\n${foreign}`);
const daemonConfig = join(dir, 'gcd.yaml');
writeFileSync(daemonConfig, `tables: []\n${foreign}  live:\n    file: ${liveFile}\n  grace: 0s\n  interval: 1s\n  enabled: true\n`);
const restore = manyAllocs(ALLOCS);
const bigConfig = join(dir, 'big.yaml');
writeFileSync(bigConfig, chainYaml(10_000));

let seq = 0;
async function cell(root: string, kind: string, rate: number | 'max'): Promise<Run> {
  const ns = `${PREFIX}-${++seq}`;
  execFileSync('ip', ['netns', 'add', ns]);
  live.add(ns);
  const path = `/run/netns/${ns}`;
  let neighbour: Neighbour | undefined;
  try {
    if (kind === 'cleanup') execFileSync('node', [join(root, 'bin', 'nfkeeper.js'), 'apply', '--config', bigConfig, '--netns', path, '--no-cache-dir']);
    else execFileSync('ip', ['netns', 'exec', ns, 'iptables-nft-restore'], { input: restore });
    // Rate 0: no neighbour (the quiet command's cost, the same cell otherwise).
    if (rate !== 0) {
      neighbour = await startNeighbour(path, rate);
      neighbours.add(neighbour);
      await new Promise((r) => setTimeout(r, 300));
    }
    const run: Run = { exit: 'none', chainsLeft: 0 };
    const bin = join(root, 'bin', 'nfkeeper.js');
    if (kind === 'oneshot' || kind === 'cleanup') {
      const err = join(dir, `err-${seq}`);
      const command = kind === 'cleanup' ? `cleanup --config ${bigConfig} --netns ${path}`
        : `gc --config ${oneshotConfig} --netns ${path} --live-file ${liveFile} --grace 0s --json`;
      const p = runWhole('sh', ['-c', `exec node ${bin} ${command} 2>${err}`], { ok: [0, 1, 2] });
      Object.assign(run, { exit: p.status, wallS: p.wallUs / 1e6, cpuS: p.cpuUs / 1e6 });
      if (p.status !== 0) run.why = readFileSync(err, 'utf8').trim().split('\n').at(-1);
    } else {
      const child = spawn('node', [...daemonNodeFlags(root), bin, 'run', '--config', daemonConfig, '--netns', path, '--no-metrics',
        '--no-record', '--no-cache-dir', '--socket', join(dir, `s-${seq}.sock`)], { stdio: ['ignore', 'pipe', 'pipe'] });
      children.add(child);
      const t0 = performance.now();
      let failed = 0;
      let done!: () => void;
      const collected = new Promise<void>((r) => { done = r; });
      let stderr = '';
      child.stderr!.on('data', (d) => { stderr += String(d); });
      createInterface({ input: child.stdout! }).on('line', (l) => {
        if (l.includes('foreign gc pass failed')) {
          failed++;
          run.why = (JSON.parse(l) as { err?: string }).err;
        }
        if (l.includes('foreign garbage collected') && run.wallS === undefined) {
          run.wallS = (performance.now() - t0) / 1000;
          done();
        }
      });
      const exited = new Promise<void>((r) => child.on('exit', (code, sig) => { run.exit = code ?? String(sig); r(); }));
      await Promise.race([collected, exited, new Promise((r) => setTimeout(r, WINDOW_S * 1000))]);
      run.failedPasses = failed;
      child.kill('SIGTERM');
      await exited;
      if (run.exit !== 0) run.why ??= stderr.trim().split('\n').at(-1);
      children.delete(child);
    }
    const c = await neighbour?.stop();
    if (c) run.neighbour = `${c.commits}/${c.failed}`;
    run.chainsLeft = kind === 'cleanup'
      ? execFileSync('ip', ['netns', 'exec', ns, 'nft', 'list', 'tables'], { encoding: 'utf8' }).split('\n').filter((l) => l === 'table ip big').length
      : execFileSync('ip', ['netns', 'exec', ns, 'iptables-nft-save', '-t', 'nat'], { encoding: 'utf8', maxBuffer: 1 << 28 })
        .split('\n').filter((l) => l.startsWith(':CNI-')).length;
    return run;
  } finally {
    if (neighbour) { neighbour.kill(); neighbours.delete(neighbour); }
    spawnSync('ip', ['netns', 'del', ns]);
    live.delete(ns);
  }
}

const fmt = (x: number | undefined, d = 2) => (x === undefined ? '-' : x.toFixed(d));
console.log(`allocs=${ALLOCS} rates=${RATES.join(',')} kinds=${KINDS.join(',')} rounds=${ROUNDS} load ${loadavg()}`);
for (const kind of KINDS) {
  for (const rate of RATES) {
    const runs: Run[][] = [[], []];
    for (let r = 0; r < ROUNDS; r++) {
      for (const b of r % 2 ? [1, 0] : [0, 1]) {
        const x = await cell(roots[b]!, kind, rate);
        runs[b]!.push(x);
        console.log(`  ${kind} ${rate}/s ${b ? 'b' : 'a'}: exit ${x.exit}, wall ${fmt(x.wallS)} s, cpu ${fmt(x.cpuS)} s`
          + `${x.failedPasses !== undefined ? `, failed passes ${x.failedPasses}` : ''}, CNI chains left ${x.chainsLeft}, neighbour ${x.neighbour ?? '-'}`
          + `${x.why ? ` (${x.why.slice(0, 160)})` : ''}; load ${loadavg()}`);
      }
    }
    for (const b of [0, 1]) {
      const rs = runs[b]!;
      console.log(`${kind} ${rate}/s ${b ? 'b' : 'a'}: done ${rs.filter((x) => x.chainsLeft === (kind === 'cleanup' ? 0 : 1)).length}/${rs.length}, `
        + `median wall ${fmt(medianOf(rs.map((x) => x.wallS)))} s, cpu ${fmt(medianOf(rs.map((x) => x.cpuS)))} s`);
    }
  }
}
console.log(`load ${loadavg()}`);
