/**
 * A restart onto an installed ruleset, two builds alternating, timed from outside: `nfkeeper run`
 * (bin/'s own flags, --no-metrics) started on a namespace that already holds S8's chain of N rules,
 * from the spawn to its `nfkeeper running` log line (READY=1 goes to systemd at the same point);
 * CPU is the process's user + system time from /proc/PID/stat at that line (10 ms ticks), peak
 * RSS its VmHWM then. Each daemon is stopped with SIGTERM after `--hold-ms`, and the ruleset
 * generation is compared before and after it (a restart that wrote anything shows). A build that
 * takes --record-dir keeps its restart record (and, a build that has one, its compile cache) in a
 * directory of this run's; its first start (no record yet) is a warm-up, left out, and runs until
 * its compile cache is stored. Nothing is asserted.
 *
 * --from-empty: the ruleset is flushed before each start, so every start installs the N rules (the
 * record cannot match; a compile cache stored by the warm-up can): ready from empty.
 *
 * --nft: each round also runs `nft -f` of the same ruleset (S8's .nft file) into an empty namespace
 * of its own (nothing else there, no listener), timed from the spawn to its exit; CPU is its user +
 * system time (bash's `times`).
 *
 * --reboot: each build's record directory is emptied before each start (as a reboot clears /run);
 * a build with --cache-dir keeps its compile cache in a directory of this run's, which stays. With
 * --from-empty too: the first start after a reboot.
 *
 * --delete-at first|middle|last: a repair right after the restart: when the daemon logs `nfkeeper
 * running`, `nft delete rule` of the chain's rule at that place, then another deletion (the rule
 * after it, or before the last) --later-ms after ready; each repair's latencyMs from the daemon's
 * own `repaired` log line (from the event's callback: not the event's wait for the daemon's loop),
 * and from outside: from the spawn of nft to that line read, which holds that wait too. The handles
 * are listed before each start (not timed), and each measured start follows one of the same build
 * that records the handles the other build's repairs left (with --from-empty too: the install into
 * the emptied ruleset gives the rules those handles again).
 *
 * --from-empty, --reboot and --delete-at are kinds of start (KINDS below): what each does before
 * the spawn and after ready.
 *
 * --owners K: the config has an owners section (table big, dispatch chain d, a regular chain of its
 * own beside S8's) and a state file of this run's holding K owners, each a chain of one rule and a
 * jump to it from d: their rules are merged into the desired state the record is compared with.
 * --dispatch c: the dispatch chain is S8's chain itself (its N config rules, then the jumps).
 *
 * --reboot-b: only b's record directory is emptied before each of its starts. With --a and --b the
 * same checkout: a restart that adopts its record against one that has none (a daemon killed
 * between ready and its record's first write, test/reliability/record-window.test.ts).
 *
 * --kill-after MS: before each measured start, a start from empty of the same build (the ruleset
 * flushed, its record directory emptied, its compile cache kept) killed with SIGKILL MS after its
 * `nfkeeper running` line: the measured start is the one after a kill between ready and the record
 * a read verified (test/reliability/record-window.test.ts), whatever record that build left.
 *
 * --protect: the config has a second table, ip guard (one chain, one rule), with `protect: true`:
 * the daemon's socket owns a table (protect mode). S8's table stays unprotected, so that nft can
 * delete its rules (--delete-at).
 *
 *   sudo npx tsx bench/restart-ab.ts --a /path/to/checkoutA --b /path/to/checkoutB [--n 100000] [--rounds 3] [--hold-ms 1500] [--from-empty]
 *     [--nft] [--reboot] [--delete-at middle] [--later-ms 3000] [--owners 5] [--dispatch c] [--protect] [--reboot-b] [--kill-after 2000]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { open } from '../src/netlink/socket.js';
import { withBenchNetns, type BenchNetns } from './lib/netns.js';
import { chainNft, chainYaml } from './scenarios/s8.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { takesCacheDir, takesRecord } from './lib/record.js';
import { parseArgs } from './lib/args.js';
import { cpuSecondsOf, loadavg } from './lib/daemon.js';
import { medianOf } from './lib/stats.js';

const USAGE = 'restart-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--rounds 3] [--hold-ms 1500]';
const cli = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rounds': 1, '--hold-ms': 1, '--nft': 0, '--delete-at': 1, '--later-ms': 1,
  '--owners': 1, '--dispatch': 1, '--protect': 0, '--reboot-b': 0, '--from-empty': 0, '--reboot': 0, '--kill-after': 1 }, { usage: USAGE });
const arg = cli.value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '100000'));
const ROUNDS = Number(arg('--rounds', '3'));
const HOLD_MS = Number(arg('--hold-ms', '1500'));
const NFT = cli.has('--nft');
const DELETE_AT = arg('--delete-at');
const LATER_MS = Number(arg('--later-ms', '3000'));
const OWNERS = Number(arg('--owners', '0'));
const DISPATCH = arg('--dispatch', 'd')!;
const PROTECT = cli.has('--protect');
const REBOOT_B = cli.has('--reboot-b');
const KILL_AFTER = arg('--kill-after');
if (!['c', 'd'].includes(DISPATCH)) throw new Error('--dispatch c|d');
if (DELETE_AT !== undefined && !['first', 'middle', 'last'].includes(DELETE_AT)) throw new Error('--delete-at first|middle|last');
const vmHwmMiB = (pid: number) => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;

interface Run { wallS: number; cpuS: number; hwmMiB: number; wrote: boolean; record?: string; cache?: string; repairMs?: number[]; seenMs?: number[] }

/** The handles of S8's chain (ip big c) in order. */
const handlesOf = (ns: BenchNetns): number[] =>
  [...ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', 'c']).matchAll(/ # handle (\d+)$/gm)].map((m) => Number(m[1]));
/** The places deleted: right after ready, and --later-ms after. */
const deletedPlaces = (n: number): [number, number] =>
  DELETE_AT === 'first' ? [0, 1] : DELETE_AT === 'last' ? [n - 1, n - 2] : [n >> 1, (n >> 1) + 1];

/** One start of a daemon: what a kind of start may look at and leave. */
interface Start {
  ns: BenchNetns;
  /** The build's --record-dir, if it takes one. */
  recordDir?: string;
  /** A start that is not measured (the warm-up, or one that records the handles left). */
  warmUp: boolean;
  /** When the parent read the `nfkeeper running` line (performance.now). */
  readyAt: number;
  /** Resolves with the latencyMs of the daemon's next `repaired` line and when it was read. */
  nextRepair(): Promise<{ latencyMs: number; at: number }>;
  /** What the kind measured, added to the start's Run. */
  out: Partial<Run>;
  /** What a kind keeps from before the spawn to after ready. */
  handles?: number[];
  /** Spawns this build's daemon as the measured start will be; resolves at its `nfkeeper running` line. */
  launch(): Promise<ReturnType<typeof spawn>>;
}

/** A kind of start, chosen by its flag: what it does around the timed spawn-to-ready. */
interface StartKind {
  /** Before the spawn (not timed). */
  before?(s: Start): void | Promise<void>;
  /** After ready, before the hold; a measured start only. */
  afterReady?(s: Start): Promise<void>;
}

const KINDS: Record<string, StartKind> = {
  // Listed before the flush of --from-empty: the install into an emptied ruleset gives the same handles.
  '--delete-at': {
    before: (s) => { if (!s.warmUp) s.handles = deletedPlaces(N).map((j) => handlesOf(s.ns)[j]!); },
    afterReady: async (s) => {
      const repairMs: number[] = [];
      const seenMs: number[] = [];
      for (const [k, h] of s.handles!.entries()) {
        if (k > 0) await new Promise((r) => setTimeout(r, Math.max(0, s.readyAt + LATER_MS - performance.now())));
        const got = s.nextRepair();
        // From nft's spawn: its own start and commit (the same for both builds), the event's wait for
        // the daemon's loop, the repair and the log line.
        const deleted = performance.now();
        s.ns.exec('nft', ['delete', 'rule', 'ip', 'big', 'c', 'handle', String(h)]);
        const r = await Promise.race([got, new Promise<undefined>((res) => setTimeout(() => res(undefined), 60_000))]);
        repairMs.push(r?.latencyMs ?? NaN);
        seenMs.push(r ? r.at - deleted : NaN);
      }
      Object.assign(s.out, { repairMs, seenMs });
    },
  },
  // Every start installs the N rules (the record cannot match; a compile cache stored by the warm-up can).
  '--from-empty': { before: (s) => void s.ns.exec('nft', ['flush', 'ruleset']) },
  // A start from empty killed KILL_AFTER ms after ready: what it left on disk is what the measured start finds.
  '--kill-after': {
    before: async (s) => {
      if (s.warmUp) return;
      s.ns.exec('nft', ['flush', 'ruleset']);
      if (s.recordDir) rmSync(s.recordDir, { recursive: true, force: true });
      const child = await s.launch();
      await new Promise((r) => setTimeout(r, Number(KILL_AFTER)));
      const exited = new Promise((r) => child.on('exit', r));
      child.kill('SIGKILL');
      await exited;
    },
  },
  // As a reboot clears /run: the record goes; a --cache-dir stays.
  '--reboot': { before: (s) => { if (s.recordDir) rmSync(s.recordDir, { recursive: true, force: true }); } },
};
const kinds = Object.entries(KINDS).filter(([flag]) => cli.has(flag)).map(([, kind]) => kind);

async function restart(ns: BenchNetns, root: string, config: string, extra: string[], warmUp = false): Promise<Run> {
  const repairs: ((r: { latencyMs: number; at: number }) => void)[] = [];
  const s: Start = {
    ns, warmUp, readyAt: 0, out: {},
    ...(extra.includes('--record-dir') ? { recordDir: extra[extra.indexOf('--record-dir') + 1]! } : {}),
    nextRepair: () => new Promise((r) => repairs.push(r)),
    launch: async () => {
      const child = spawn('node', [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path, '--no-metrics', ...extra],
        { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on('line', (l) => { if (l.includes('"nfkeeper running"')) resolve(); });
        child.on('exit', () => reject(new Error('nfkeeper run exited before it was running')));
      });
      return child;
    },
  };
  for (const kind of kinds) await kind.before?.(s);
  if (REBOOT_B && s.recordDir === join(dir, 'record-1')) rmSync(s.recordDir, { recursive: true, force: true });
  const sock = open({ netns: ns.path });
  try {
    const before = sock.generation();
    const t0 = performance.now();
    const child = spawn('node', [...daemonNodeFlags(root), join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path, '--no-metrics', ...extra],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((r) => child.on('exit', r));
    let record: string | undefined;
    let cache: string | undefined;
    let cacheStored!: () => void;
    const stored = new Promise<void>((r) => { cacheStored = r; });
    await new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const msg = () => (JSON.parse(l) as { msg: string }).msg;
        if (l.includes('"restart record')) record = `${msg().split(';')[0]}${l.includes('"verified":false') ? ' (not verified)' : ''}`;
        if (l.includes('"compile cache')) cache = msg().split(';')[0]!.split(':')[0];
        if (l.includes('"compiled config')) cacheStored();
        if (l.includes('"msg":"repaired"')) repairs.shift()?.({ latencyMs: (JSON.parse(l) as { latencyMs: number }).latencyMs, at: performance.now() });
        if (l.includes('"nfkeeper running"')) resolve();
      });
      child.on('exit', () => reject(new Error('nfkeeper run exited before it was running')));
    });
    s.readyAt = performance.now();
    const wallS = (s.readyAt - t0) / 1000;
    const run = { wallS, cpuS: cpuSecondsOf(child.pid!), hwmMiB: vmHwmMiB(child.pid!) };
    if (!warmUp) for (const kind of kinds) await kind.afterReady?.(s);
    await new Promise((r) => setTimeout(r, HOLD_MS));
    // A warm-up that compiled stores its compile cache once running: it is left to finish that.
    if (warmUp && cache?.startsWith('compile cache not used')) await Promise.race([stored, new Promise((r) => setTimeout(r, 60_000))]);
    child.kill('SIGTERM');
    await exited;
    return { ...run, wrote: sock.generation() !== before, ...(record ? { record } : {}), ...(cache ? { cache } : {}), ...s.out };
  } finally {
    sock.close();
  }
}

/** `nft -f file` into `ns` after a flush: wall from the spawn to the exit, CPU its user + system time. */
function nftFile(ns: BenchNetns, file: string): { wallS: number; cpuS: number } {
  ns.exec('nft', ['flush', 'ruleset']);
  const t0 = performance.now();
  const out = ns.exec('bash', ['-c', 'nft -f "$1" && times', 'nft-f', file]);
  const wallS = (performance.now() - t0) / 1000;
  // times: the shell's own user/system, then its children's.
  const [u, s] = out.trim().split('\n').at(-1)!.split(' ').map((x) => { const m = /(\d+)m([\d.]+)s/.exec(x)!; return Number(m[1]) * 60 + Number(m[2]); });
  return { wallS, cpuS: u! + s! };
}

const dir = mkdtempSync(join(tmpdir(), 'nfk-restart-ab-'));
try {
  const config = join(dir, 'c.yaml');
  const guard = PROTECT ? '  - family: ip\n    name: guard\n    protect: true\n    chains:\n      - name: g\n        rules:\n          - ip daddr 192.0.2.9 return\n' : '';
  writeFileSync(config, chainYaml(N) + guard);
  if (OWNERS > 0) {
    writeFileSync(config, `${chainYaml(N)}      - name: d\n        rules: []\n${guard}owners:\n  family: ip\n  table: big\n  dispatch: [${DISPATCH}]\n` +
      `  socket: ${join(dir, 'owners.sock')}\n  state: ${join(dir, 'owners.json')}\n`, 'utf8');
    const owners = Object.fromEntries(Array.from({ length: OWNERS }, (_, i) => [`o${i}`,
      { chains: [{ name: 'c', rules: [`ip daddr 192.0.2.${i + 1} tcp dport 80 accept`] }], jumps: { [DISPATCH]: [`ip saddr 10.9.${i >> 8}.${i & 255} jump c`] } }]));
    writeFileSync(join(dir, 'owners.json'), `${JSON.stringify({ version: 1, owners })}\n`);
  }
  const nftRules = join(dir, 'c.nft');
  if (NFT) writeFileSync(nftRules, chainNft(N));
  // The compile cache where a build has one apart from the record: this run's, not /var/cache/nfkeeper
  // (the install below too).
  process.env.NFKEEPER_CACHE_DIR = join(dir, 'apply-cache');
  const extras = roots.map((r, i) => [...(takesRecord(r) ? ['--record-dir', join(dir, `record-${i}`)] : []),
    ...(takesCacheDir(r) ? ['--cache-dir', join(dir, `cache-${i}`)] : [])]);
  await withBenchNetns('restart', async (ns) => {
    const apply = spawnSync('node', [join(roots[0]!, 'bin', 'nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (apply.status !== 0) throw new Error('the install failed');
    const runs: Run[][] = [[], []];
    const nftRuns: { wallS: number; cpuS: number }[] = [];
    // Warm-up: each build's first start (a build with a record writes it at that stop).
    for (const i of [0, 1]) await restart(ns, roots[i]!, config, extras[i]!, true);
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of [0, 1]) {
        const i = (round + k) % 2;
        // The other build's repairs gave the rules new handles: a start (not measured) records them.
        if (DELETE_AT !== undefined) await restart(ns, roots[i]!, config, extras[i]!, true);
        const r = await restart(ns, roots[i]!, config, extras[i]!);
        runs[i]!.push(r);
        console.log(`round ${round + 1} ${i === 0 ? 'a' : 'b'}: ready ${r.wallS.toFixed(2)} s, CPU ${r.cpuS.toFixed(2)} s, peak RSS ${r.hwmMiB.toFixed(0)} MiB, ` +
          `${r.wrote ? 'wrote' : 'nothing written'}${r.record ? ` (${r.record})` : ''}${r.cache ? ` (${r.cache})` : ''}` +
          `${r.repairMs ? `; repair at ready ${r.repairMs[0]!.toFixed(1)} ms, ${LATER_MS} ms after ${r.repairMs[1]!.toFixed(1)} ms` +
            ` (its line read ${r.seenMs![0]!.toFixed(1)} ms, ${r.seenMs![1]!.toFixed(1)} ms after nft's spawn)` : ''}; load ${loadavg()}`);
      }
      if (NFT) {
        const r = await withBenchNetns('restart-nft', async (peer) => nftFile(peer, nftRules));
        nftRuns.push(r);
        console.log(`round ${round + 1} nft -f: ${r.wallS.toFixed(2)} s, CPU ${r.cpuS.toFixed(2)} s; load ${loadavg()}`);
      }
    }
    const med = (xs: number[]) => medianOf(xs)!;
    for (const [i, rs] of runs.entries()) {
      console.log(`${i === 0 ? 'a' : 'b'} ${roots[i]}${OWNERS > 0 ? ` (${OWNERS} owners)` : ''}: median ready ${med(rs.map((r) => r.wallS)).toFixed(2)} s, CPU ${med(rs.map((r) => r.cpuS)).toFixed(2)} s, ` +
        `peak RSS ${Math.max(...rs.map((r) => r.hwmMiB)).toFixed(0)} MiB` +
        `${DELETE_AT ? `, repair at ready ${med(rs.map((r) => r.repairMs![0]!)).toFixed(1)} ms, ${LATER_MS} ms after ${med(rs.map((r) => r.repairMs![1]!)).toFixed(1)} ms` +
          ` (its line read ${med(rs.map((r) => r.seenMs![0]!)).toFixed(1)} ms, ${med(rs.map((r) => r.seenMs![1]!)).toFixed(1)} ms after nft's spawn)` : ''}`);
    }
    if (NFT) console.log(`nft -f: median ${med(nftRuns.map((r) => r.wallS)).toFixed(2)} s, CPU ${med(nftRuns.map((r) => r.cpuS)).toFixed(2)} s`);
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
