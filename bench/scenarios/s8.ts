/**
 * S8 what users run, measured from outside the process, beside nft in the same run:
 * - installs: `nfkeeper apply` of a ruleset into an empty namespace against `nft -f` of the same
 *   ruleset (one chain of N rules, as YAML and as the same .nft file; kube-proxy's nftables table
 *   at a number of services), alternating, each run into a freshly flushed namespace; a later apply
 *   of the config (its compile cache entry kept) and its first (the entry removed before each run);
 * - one-shot commands on flannel's config (version, validate, check, status) and `export` of a
 *   big table, against the nft command that does the same;
 * - the daemon: time from exec to /readyz with N owned rules into an empty namespace, and after a
 *   restart onto the installed ruleset (with the generation compared: an adoption writes nothing);
 * - repairs as deployed: `nfkeeper run` with its defaults, one deletion every 2.6 s by an outside
 *   probe (bench/probe.ts), beside the kernel's floor for the same deletion and re-add from one
 *   bare socket, in the same namespace;
 * - a neighbour committing to a table nfkeeper does not own as fast as it can (up to 10,000 a
 *   second): the daemon's CPU.
 * With another build (S8Options.root) its daemon runs the same repairs and neighbour in turn with
 * this one's (the order alternating), for a before/after in one run.
 * Every process is timed by wait4 (bench/lib/whole.ts): wall, CPU and peak RSS of that process.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Batch, open } from '../../src/index.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { kubeProxy } from '../../test/helpers/peers/kube-proxy.js';
import { chainYaml as bigChainYaml, ip } from '../../test/helpers/big-chain.js';
import { cpuSecondsOf, startDaemon as startBuildDaemon } from '../lib/daemon.js';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { summarize, type Summary } from '../lib/stats.js';
import { alternate, runWhole, summarizeRuns, type ProcessRun, type WholeSummary } from '../lib/whole.js';
import { probeElementRepairs, probeRepairs } from '../probe.js';
import { recordArgs } from '../lib/record.js';

export interface S8Options {
  /** Rules in one chain for the install rows. */
  chainSizes: number[];
  /** kube-proxy services for the install rows. */
  services: number[];
  /** Whole-process runs per command (alternating with its peer). */
  reps: (n: number) => number;
  /** Owned rules for the daemon's ready rows. */
  daemonSizes: number[];
  /** Repairs as deployed: owned rules in one chain, and elements in one set. */
  repairRules: number[];
  repairElements: number[];
  repairs: number;
  repairGapMs: number;
  neighbourSeconds: number;
  /** Runs of the neighbour (each build in turn when there is another). */
  neighbourRuns?: number;
  /** Another build's package root (main's, say): its `nfkeeper` runs in turn with this one's and the peer, for a before/after. */
  root?: string;
  /** Only these parts (default all): installs and one-shot commands, the daemon's ready, repairs as deployed, the neighbour. */
  parts?: readonly S8Part[];
  log: (m: string) => void;
}

export const S8_PARTS = ['commands', 'ready', 'repairs', 'neighbour'] as const;
export type S8Part = (typeof S8_PARTS)[number];

export interface S8Row {
  group: 'install' | 'one-shot';
  work: string;
  nfkeeper: WholeSummary;
  peer?: { tool: string; s: WholeSummary };
  /** nfkeeper's median wall time over the peer's. */
  ratio?: number;
  /** The same command as the other build (S8Options.root) ran it, in the same rounds. */
  before?: WholeSummary;
}

export interface S8Ready {
  rules: number;
  fresh: { wallUs: number; rssKiB: number };
  /** A restart that finds the restart record the first daemon left (it adopts without reading the rules). */
  restart: { wallUs: number; rssKiB: number; wrote: boolean; recorded?: boolean };
  /** A restart with no record (`--no-record`: another config, say): it reads the owned tables. */
  restartRead?: { wallUs: number; rssKiB: number; wrote: boolean };
  /** A start after a reboot: the ruleset empty, no record (/run cleared), the compile cache kept (/var/cache). */
  boot?: { wallUs: number; rssKiB: number };
}

export interface S8Repair {
  owned: string;
  repair: Summary;
  floor: Summary;
  /**
   * The same probe, the same gap, answered by bench/floor/responder.c instead of the daemon: a
   * process that only reads the deletion's event and commits its re-add. The floor of an
   * event-driven repair from another process (the wake-ups included), where `floor` is one socket's
   * two commits back to back.
   */
  responder?: Summary;
  /** The same repairs by the other build's daemon (S8Options.root), in the same run. */
  before?: Summary;
}

export interface S8Neighbour {
  seconds: number;
  commitsPerSecond: number;
  /** The median over the runs. */
  daemonCpuPercent: number;
  /** Each run's, in order. */
  runs?: number[];
  /** The other build's daemon (S8Options.root), its runs in turn with these. */
  before?: { commitsPerSecond: number; daemonCpuPercent: number; runs: number[] };
}

export interface S8Result {
  node: string;
  /** The other build's package root and commit, when there was one. */
  before?: { root: string; commit: string };
  /** Where a part was kept from an earlier run (--s8-parts with --merge): that run's other build. */
  beforeOf?: Partial<Record<S8Part, { root: string; commit: string } | null>>;
  rows: S8Row[];
  /** `node -e 0` on the same Node, in turn with `version`: Node's own start, the floor of every command. */
  nodeStart?: WholeSummary;
  ready: S8Ready[];
  repairs: S8Repair[];
  neighbour?: S8Neighbour;
}

const BIN = join(PROJECT_ROOT, 'bin', 'nfkeeper.js');
/** The Node a user's `nfkeeper` runs on: the first `node` on PATH (bin/nfkeeper.js's #! line). */
const NODE = 'node';

const ruleText = (i: number) => `ip saddr ${ip(i)} tcp dport ${1 + (i % 60000)} counter accept`;

export function chainNft(n: number): string {
  const out = ['table ip big {', '\tchain c {', '\t\ttype filter hook forward priority filter; policy accept;'];
  for (let i = 0; i < n; i++) out.push(`\t\t${ruleText(i)}`);
  out.push('\t}', '}', '');
  return out.join('\n');
}

export function chainYaml(n: number): string {
  return bigChainYaml(n, { rule: ruleText });
}

function setNft(n: number): string {
  const el: string[] = [];
  for (let i = 0; i < n; i++) el.push(ip(i));
  return `table ip big {\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { ${el.join(', ')} }\n\t}\n` +
    '\tchain c {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tip saddr @s counter accept\n\t}\n}\n';
}

const vmHwmKiB = (pid: number): number => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);

interface Daemon { child: ChildProcess; exited: Promise<unknown>; readyUs: number; stop: () => Promise<void> }

let nextPort = 19_800 + (process.pid % 100) * 5;

/**
 * Each build's own code-cache directory for this run (NODE_COMPILE_CACHE), as a user with one
 * install has: two builds sharing root's /var/cache/nfkeeper could remove each other's entries
 * (a build before the day-old rule did at every run), and each run would then be timed with the
 * package's entry and the writing of its own at exit.
 */
const codeCacheOf = new Map<string, string>();
const cacheEnv = (root: string): Record<string, string> => {
  const d = codeCacheOf.get(root);
  // And its compile cache (run's and apply's --cache-dir, a build that has one): this run's, not
  // root's /var/cache/nfkeeper; kept through the run, so an apply after the untimed first is warm.
  return d === undefined ? {} : { NODE_COMPILE_CACHE: d, NFKEEPER_CACHE_DIR: join(d, 'compiled') };
};

/**
 * `nfkeeper run` as installed: its defaults, the Node flags of bin/'s #! line, the namespace given
 * with --netns (its HTTP stays on this namespace's loopback); ready when /readyz says so.
 */
async function startDaemon(ns: BenchNetns, config: string, extra: string[] = [], root = PROJECT_ROOT): Promise<Daemon> {
  const port = nextPort++;
  const t0 = performance.now();
  const d = startBuildDaemon(root, { netns: ns.path, config, port, args: [...recordArgs(root, ns, extra), ...extra], env: cacheEnv(root), log: 'ignore' });
  for (;;) {
    if (d.child.exitCode !== null) throw new Error('nfkeeper run exited before it was ready');
    if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) break;
    if (performance.now() - t0 > 300_000) throw new Error('nfkeeper run not ready in 300 s');
    await sleep(5);
  }
  const readyUs = (performance.now() - t0) * 1000;
  return { child: d.child, exited: d.exited, readyUs, stop: async () => { await d.stop(); } };
}

const pidOf = (d: Daemon) => d.child.pid!;

export async function runS8(o: S8Options): Promise<S8Result> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-s8-'));
  const node = spawnSync(NODE, ['--version'], { encoding: 'utf8' }).stdout.trim();
  const result: S8Result = { node, rows: [], ready: [], repairs: [] };
  const parts = new Set<S8Part>(o.parts ?? S8_PARTS);
  if (o.root !== undefined) {
    // A checkout says its commit; an unpacked tree (git archive) may carry it in a file COMMIT.
    const commit = spawnSync('git', ['-C', o.root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim() ||
      (existsSync(join(o.root, 'COMMIT')) ? readFileSync(join(o.root, 'COMMIT'), 'utf8').trim() : '');
    result.before = { root: o.root, commit: commit || 'unknown' };
  }
  for (const [root, name] of [[PROJECT_ROOT, 'after'], ...(o.root === undefined ? [] : [[o.root, 'before']])] as const) {
    codeCacheOf.set(root, join(dir, `code-cache-${name}`));
    mkdirSync(join(dir, `code-cache-${name}`), { mode: 0o700 });
  }
  const nfkWith = (root: string) => (ns: BenchNetns | undefined, args: string[], ok = [0], stdout?: string) => () =>
    runWhole(NODE, [join(root, 'bin', 'nfkeeper.js'), ...args], { ns, ok, stdout, env: cacheEnv(root) });
  const nfk = nfkWith(PROJECT_ROOT);
  const nfkBefore = o.root === undefined ? undefined : nfkWith(o.root);
  const nft = (ns: BenchNetns | undefined, args: string[]) => () => runWhole('nft', args, { ns });
  // A command in turn with its peer, and with the other build's run of it when there is one.
  // `stdout`: a file for nfkeeper's output instead of /dev/null, where apply and check render no plan.
  // Each build runs the command once untimed first: its own code-cache entry made, as after a
  // user's first run.
  const vs = (reps: number, reset: () => void, ns: BenchNetns | undefined, args: string[], peer: () => ProcessRun, stdout?: string) => {
    for (const run of [nfk(ns, args, [0], stdout), nfkBefore?.(ns, args, [0], stdout)]) {
      if (run === undefined) continue;
      reset();
      run();
    }
    return alternate(reps, reset, nfk(ns, args, [0], stdout), peer, nfkBefore?.(ns, args, [0], stdout));
  };
  const row = (group: S8Row['group'], work: string, r: ReturnType<typeof alternate>, tool: string) => {
    result.rows.push({ group, work, nfkeeper: r.a, peer: { tool, s: r.b }, ratio: r.ratio, ...(r.before ? { before: r.before } : {}) });
    o.log(`    ${work}: nfkeeper ${(r.a.wall.median / 1000).toFixed(1)} ms, CPU ${(r.a.cpu.median / 1000).toFixed(1)} ms (${(r.a.rssKiB / 1024).toFixed(1)} MiB), ` +
      (r.before ? `before ${(r.before.wall.median / 1000).toFixed(1)} ms, CPU ${(r.before.cpu.median / 1000).toFixed(1)} ms (${(r.before.rssKiB / 1024).toFixed(1)} MiB), ` : '') +
      `${tool} ${(r.b.wall.median / 1000).toFixed(1)} ms, CPU ${(r.b.cpu.median / 1000).toFixed(1)} ms: ${r.ratio.toFixed(2)}×`);
  };
  try {
    if (parts.has('commands')) await withBenchNetns('s8', async (ns) => {
      const flush = () => { ns.exec('nft', ['flush', 'ruleset']); };
      // A config's first apply: its compile cache entry (and the proof beside it) gone as well, for
      // each build; the V8 code cache stays, as on a node that ran nfkeeper before.
      const flushAndForget = () => {
        flush();
        for (const d of codeCacheOf.values()) rmSync(join(d, 'compiled'), { recursive: true, force: true });
      };
      // Installs.
      for (const n of o.chainSizes) {
        const nftFile = join(dir, `chain-${n}.nft`), yamlFile = join(dir, `chain-${n}.yaml`);
        writeFileSync(nftFile, chainNft(n));
        writeFileSync(yamlFile, chainYaml(n));
        row('install', `${n.toLocaleString('en-US')} rules in one chain, YAML config`,
          vs(o.reps(n), flush, ns, ['apply', '--config', yamlFile], nft(ns, ['-f', nftFile])), 'nft -f');
        row('install', `${n.toLocaleString('en-US')} rules in one chain, YAML config, its first apply (compiled and stored)`,
          vs(o.reps(n), flushAndForget, ns, ['apply', '--config', yamlFile], nft(ns, ['-f', nftFile])), 'nft -f');
        row('install', `${n.toLocaleString('en-US')} rules in one chain, the same .nft file`,
          vs(o.reps(n), flush, ns, ['apply', '--config', nftFile], nft(ns, ['-f', nftFile])), 'nft -f');
        // As in a script that keeps apply's output: every line of the plan rendered and written.
        row('install', `${n.toLocaleString('en-US')} rules in one chain, YAML config, its plan written to a file`,
          vs(o.reps(n), flush, ns, ['apply', '--config', yamlFile], nft(ns, ['-f', nftFile]), join(dir, 'plan.txt')), 'nft -f');
      }
      for (const services of o.services) {
        const kp = kubeProxy({ services, seed: 8 });
        const file = join(dir, `kube-proxy-${services}.nft`);
        writeFileSync(file, kp.text);
        row('install', `kube-proxy's table at ${services.toLocaleString('en-US')} services (${kp.counts.rules.toLocaleString('en-US')} rules, ` +
          `${kp.counts.elements.toLocaleString('en-US')} elements, ${(kp.text.length / 1048576).toFixed(1)} MiB)`,
          vs(o.reps(kp.counts.rules), flush, ns, ['apply', '--config', file], nft(ns, ['-f', file])), 'nft -f');
        row('install', `kube-proxy's table at ${services.toLocaleString('en-US')} services, its first apply (compiled and stored)`,
          vs(o.reps(kp.counts.rules), flushAndForget, ns, ['apply', '--config', file], nft(ns, ['-f', file])), 'nft -f');
      }
      // Export of the biggest chain, installed once.
      const big = Math.max(...o.chainSizes);
      flush();
      ns.exec('nft', ['-f', join(dir, `chain-${big}.nft`)]);
      row('one-shot', `export of a ${big.toLocaleString('en-US')}-rule table`,
        vs(o.reps(big), () => undefined, ns, ['export', '--table', 'ip', 'big'], nft(ns, ['list', 'table', 'ip', 'big'])), 'nft list table');
      // One-shots on flannel's config, installed.
      flush();
      const flannel = join(PROJECT_ROOT, 'examples', 'flannel.yaml');
      nfk(ns, ['apply', '--config', flannel])();
      const flannelNft = join(dir, 'flannel.nft');
      writeFileSync(flannelNft, ns.exec(NODE, [BIN, 'export', '--table', 'ip', 'nfkeeper']));
      const same = () => undefined;
      row('one-shot', 'version', vs(o.reps(0), same, undefined, ['version'], nft(undefined, ['--version'])), 'nft --version');
      const nodeRuns: ProcessRun[] = [];
      for (let i = 0; i < o.reps(0); i++) {
        nodeRuns.push(runWhole(NODE, ['-e', '0']));
        nfk(undefined, ['version'])();
      }
      result.nodeStart = summarizeRuns(nodeRuns);
      o.log(`    node -e 0: ${(result.nodeStart.wall.median / 1000).toFixed(1)} ms, CPU ${(result.nodeStart.cpu.median / 1000).toFixed(1)} ms (${(result.nodeStart.rssKiB / 1024).toFixed(1)} MiB)`);
      row('one-shot', 'validate, flannel\'s config', vs(o.reps(0), same, undefined, ['validate', '--config', flannel],
        nft(ns, ['-c', '-f', flannelNft])), 'nft -c -f');
      row('one-shot', 'check, flannel\'s config (in sync)', vs(o.reps(0), same, ns, ['check', '--config', flannel],
        nft(ns, ['list', 'table', 'ip', 'nfkeeper'])), 'nft list table');
      const sock = join(dir, 'control.sock');
      const d = await startDaemon(ns, flannel, ['--socket', sock]);
      try {
        const runs: ProcessRun[] = [];
        const beforeRuns: ProcessRun[] = [];
        nfk(undefined, ['status', '--socket', sock])();
        nfkBefore?.(undefined, ['status', '--socket', sock])();
        for (let i = 0; i < o.reps(0); i++) {
          runs.push(nfk(undefined, ['status', '--socket', sock])());
          if (nfkBefore) beforeRuns.push(nfkBefore(undefined, ['status', '--socket', sock])());
        }
        const s = summarizeRuns(runs);
        result.rows.push({ group: 'one-shot', work: 'status, daemon with flannel\'s config', nfkeeper: s,
          ...(nfkBefore ? { before: summarizeRuns(beforeRuns) } : {}) });
        o.log(`    status: ${(s.wall.median / 1000).toFixed(1)} ms (${(s.rssKiB / 1024).toFixed(1)} MiB)`);
      } finally {
        await d.stop();
      }
    });

    // The daemon: ready from empty, and after a restart onto what it installed.
    for (const n of parts.has('ready') ? o.daemonSizes : []) {
      await withBenchNetns(`s8r${n}`, async (ns) => {
        const file = join(dir, `daemon-${n}.yaml`);
        writeFileSync(file, chainYaml(n));
        const records = join(dir, `records-${n}`);
        const first = await startDaemon(ns, file, ['--record-dir', records]);
        const fresh = { wallUs: first.readyUs, rssKiB: vmHwmKiB(pidOf(first)) };
        // As a daemon that has run a while stops: it has written its restart record and stored its
        // compiled config (after ready, a slice per turn: stopped at once, the next start compiles).
        const recorded = await until(() => existsSync(records) && readdirSync(records).length > 0, 120_000);
        const stored = await until(() => existsSync(ns.record) && readdirSync(ns.record).some((f) => /^compiled-.*\.json$/.test(f)), 120_000);
        if (!stored) throw new Error(`the daemon with ${n} rules stored no compiled config in ${ns.record} within 120 s`);
        await first.stop();
        const s = open({ netns: ns.path });
        try {
          const gen = s.generation();
          const second = await startDaemon(ns, file, ['--record-dir', records]);
          const restart = { wallUs: second.readyUs, rssKiB: vmHwmKiB(pidOf(second)), wrote: s.generation() !== gen, recorded };
          await second.stop();
          const gen2 = s.generation();
          const third = await startDaemon(ns, file, ['--no-record']);
          const restartRead = { wallUs: third.readyUs, rssKiB: vmHwmKiB(pidOf(third)), wrote: s.generation() !== gen2 };
          await third.stop();
          ns.exec('nft', ['flush', 'ruleset']);
          rmSync(records, { recursive: true, force: true });
          const fourth = await startDaemon(ns, file, ['--record-dir', records]);
          const boot = { wallUs: fourth.readyUs, rssKiB: vmHwmKiB(pidOf(fourth)) };
          await fourth.stop();
          result.ready.push({ rules: n, fresh, restart, restartRead, boot });
          o.log(`    daemon with ${n.toLocaleString('en-US')} rules: ready ${(fresh.wallUs / 1e6).toFixed(2)} s fresh, ` +
            `${(restart.wallUs / 1e6).toFixed(2)} s after a restart ${recorded ? 'with its record' : '(no record was written)'} (${restart.wrote ? 'it wrote' : 'nothing written'}), ` +
            `${(restartRead.wallUs / 1e6).toFixed(2)} s without one (${restartRead.wrote ? 'it wrote' : 'nothing written'}), ` +
            `${(boot.wallUs / 1e6).toFixed(2)} s after a reboot (ruleset empty, compile cache kept)`);
        } finally {
          s.close();
        }
      });
    }

    // Repairs as deployed, beside the kernel's floor: the daemon keeps table big, the floor runs on
    // the same ruleset as table cmp in the same namespace.
    const cases = [
      ...o.repairRules.map((n) => ({ n, owned: `one rule of ${n.toLocaleString('en-US')} in one chain`, file: `repair-${n}.yaml`, text: chainYaml(n),
        cmp: chainNft(n), probe: (ns: BenchNetns, table = 'big') => probeRepairs({ netns: ns.path, family: 'ip', table, chain: 'c' }, o.repairs, o.repairGapMs,
          { warmup: 1, timeoutMs: 60_000, collect: true }), floor: ruleFloor, answer: ['rule', 'c'] })),
      ...o.repairElements.map((n) => ({ n, owned: `one element of ${n.toLocaleString('en-US')} in one set`, file: `elements-${n}.nft`, text: setNft(n),
        cmp: setNft(n), probe: (ns: BenchNetns, table = 'big') => probeElementRepairs({ netns: ns.path, family: 'ip', table, set: 's' }, o.repairs, o.repairGapMs,
          { warmup: 1, timeoutMs: 60_000, collect: true }), floor: elementFloor, answer: ['element', 's'] })),
    ];
    const responder = parts.has('repairs') && cases.length > 0 ? buildResponder(dir) : undefined;
    for (const [i, c] of (parts.has('repairs') ? cases : []).entries()) {
      await withBenchNetns(`s8p${result.repairs.length}`, async (ns) => {
        const file = join(dir, c.file);
        writeFileSync(file, c.text);
        ns.exec('nft', ['-f', '-'], c.cmp.replace('table ip big', 'table ip cmp'));
        // Each build's daemon onto an empty table big in turn (the order alternating from case to case).
        const probeWith = async (root: string): Promise<Summary> => {
          ns.exec('nft', ['-f', '-'], 'table ip big\ndelete table ip big\n');
          const d = await startDaemon(ns, file, [], root);
          try {
            return (await c.probe(ns)).summary;
          } finally {
            await d.stop();
          }
        };
        const builds = o.root === undefined ? [PROJECT_ROOT] : i % 2 === 0 ? [PROJECT_ROOT, o.root] : [o.root, PROJECT_ROOT];
        const got = new Map<string, Summary>();
        for (const root of builds) got.set(root, await probeWith(root));
        const repair = got.get(PROJECT_ROOT)!;
        const before = o.root === undefined ? undefined : got.get(o.root);
        const floor = await c.floor(ns, o.repairs);
        const answered = responder ? await withResponder(responder, ns, ['2', 'cmp', ...c.answer], async () => (await c.probe(ns, 'cmp')).summary) : undefined;
        result.repairs.push({ owned: c.owned, repair, floor, ...(answered ? { responder: answered } : {}), ...(before ? { before } : {}) });
        o.log(`    repair of ${c.owned}: p50 ${(repair.median / 1000).toFixed(3)} ms, p99 ${(repair.p99 / 1000).toFixed(3)} ms; ` +
          (before ? `before p50 ${(before.median / 1000).toFixed(3)} ms, p99 ${(before.p99 / 1000).toFixed(3)} ms; ` : '') +
          `floor ${(floor.median / 1000).toFixed(3)} ms` +
          (answered ? `; a C responder p50 ${(answered.median / 1000).toFixed(3)} ms, p99 ${(answered.p99 / 1000).toFixed(3)} ms` : ''));
      });
    }

    // A neighbour's commits to a table nfkeeper does not own: each run a daemon of its own (each build in turn).
    if (parts.has('neighbour') && o.neighbourSeconds > 0) {
      const runs = new Map<string, { commitsPerSecond: number; cpuPercent: number }[]>();
      const flannel = join(PROJECT_ROOT, 'examples', 'flannel.yaml');
      for (let r = 0; r < (o.neighbourRuns ?? 1); r++) {
        const builds = o.root === undefined ? [PROJECT_ROOT] : r % 2 === 0 ? [PROJECT_ROOT, o.root] : [o.root, PROJECT_ROOT];
        for (const root of builds) {
          await withBenchNetns('s8n', async (ns) => {
            ns.exec('nft', ['-f', '-'], 'table ip other {\n\tchain c {\n\t}\n}\n');
            const d = await startDaemon(ns, flannel, [], root);
            const s = open({ netns: ns.path });
            try {
              await sleep(2000);
              const x = await storm(s, pidOf(d), o.neighbourSeconds);
              (runs.get(root) ?? runs.set(root, []).get(root)!).push(x);
              o.log(`    neighbour${root === PROJECT_ROOT ? '' : ` (${root})`}: ${x.commitsPerSecond.toFixed(0)} commits/s; daemon ${x.cpuPercent.toFixed(2)} % of a core`);
            } finally {
              s.close();
              await d.stop();
            }
          });
        }
      }
      const of = (root: string) => {
        const xs = runs.get(root)!;
        return { commitsPerSecond: median(xs.map((x) => x.commitsPerSecond)), daemonCpuPercent: median(xs.map((x) => x.cpuPercent)),
          runs: xs.map((x) => x.cpuPercent) };
      };
      result.neighbour = { seconds: o.neighbourSeconds, ...of(PROJECT_ROOT), ...(o.root !== undefined ? { before: of(o.root) } : {}) };
    }
    return result;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => summarize(xs).median;

/**
 * Another socket commits to table other (not the daemon's) as fast as it can up to 10,000 a second
 * for `seconds`: the daemon's CPU meanwhile, from /proc (user + system, all threads).
 */
async function storm(s: ReturnType<typeof open>, pid: number, seconds: number): Promise<{ commitsPerSecond: number; cpuPercent: number }> {
  const where = { family: 'ip' as const, table: 'other', chain: 'c' };
  const add = new Batch().add('rule', { ...where, exprs: [{ kind: 'immediate', dreg: 0, verdict: 'accept' }] });
  const flushChain = new Batch().flush('chain', { family: 'ip', table: 'other', name: 'c' });
  const c0 = cpuSecondsOf(pid);
  const t0 = performance.now();
  let commits = 0;
  const end = t0 + seconds * 1000;
  while (performance.now() < end) {
    // Up to 10,000 a second: a commit every 100 µs at most.
    const due = t0 + commits * 0.1;
    if (performance.now() < due) continue;
    await s.commit(commits % 2 === 0 ? add : flushChain);
    commits++;
  }
  const took = (performance.now() - t0) / 1000;
  return { commitsPerSecond: commits / took, cpuPercent: ((cpuSecondsOf(pid) - c0) / took) * 100 };
}

/** Polls cond every 100 ms until it holds (true) or ms pass (false). */
async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) return false;
    await sleep(100);
  }
  return true;
}

/** bench/floor/responder.c built into dir (cc is part of the set-up: the addon is built with it). */
function buildResponder(dir: string): string {
  const out = join(dir, 'responder');
  const cc = spawnSync('cc', ['-O2', '-Wall', '-o', out, join(PROJECT_ROOT, 'bench', 'floor', 'responder.c')], { encoding: 'utf8' });
  if (cc.status !== 0) throw new Error(`cc bench/floor/responder.c: ${cc.stderr}`);
  return out;
}

/** Runs fn while the responder answers deletions in the namespace (args: FAMILY TABLE rule|element NAME). */
async function withResponder<T>(bin: string, ns: BenchNetns, args: string[], fn: () => Promise<T>): Promise<T> {
  const child = spawn(bin, [ns.path, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the responder exited (${code}) before it was ready`)));
      child.stdout!.once('data', () => resolve());
    });
    return await fn();
  } finally {
    child.kill('SIGKILL');
  }
}

/** One socket deletes the middle rule of table cmp's chain and adds it back where it was. */
async function ruleFloor(ns: BenchNetns, reps: number): Promise<Summary> {
  const sock = open({ netns: ns.path });
  const where = { family: 'ip' as const, table: 'cmp', chain: 'c' };
  const samples: number[] = [];
  try {
    for (let r = 0; r < reps; r++) {
      const rules = await sock.listRules(where);
      const i = rules.length >> 1;
      const t0 = performance.now();
      await sock.commit(new Batch().delete('rule', { ...where, handle: rules[i]!.handle! }));
      await sock.commit(new Batch().add('rule', i > 0 ? { ...where, exprs: rules[i]!.exprs, position: rules[i - 1]!.handle! }
        : { ...where, exprs: rules[i]!.exprs }));
      samples.push((performance.now() - t0) * 1000);
    }
  } finally {
    sock.close();
  }
  return summarize(samples);
}

/** One socket deletes an element of table cmp's set and adds it back. */
async function elementFloor(ns: BenchNetns, reps: number): Promise<Summary> {
  const sock = open({ netns: ns.path });
  const where = { family: 'ip' as const, table: 'cmp', set: 's' };
  const samples: number[] = [];
  try {
    const elements = await sock.listElements(where);
    for (let r = 0; r < reps; r++) {
      const e = elements[(r * 7919) % elements.length]!;
      const t0 = performance.now();
      await sock.commit(new Batch().delete('element', { ...where, elements: [{ key: e.key }] }));
      await sock.commit(new Batch().add('element', { ...where, elements: [{ key: e.key }] }));
      samples.push((performance.now() - t0) * 1000);
    }
  } finally {
    sock.close();
  }
  return summarize(samples);
}
