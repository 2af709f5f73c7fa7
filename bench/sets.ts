/**
 * Named-set scaling, in a throwaway namespace: a kube-proxy-like verdict map
 * of N elements (`ipv4_addr . inet_proto . inet_service : goto svc-K`),
 * loaded from an nft file. Measures reading and building the file, nfkeeper's
 * install beside `nft -f` of the same file, a check pass that finds nothing,
 * and a one-element repair by a full read (observe, diff, plan, guarded commit
 * of element ops only: what the keeper falls back to without the event
 * mirror's proof), in process.
 *
 * Then from OUTSIDE the keeper: the keeper runs as its own process
 * (bench/s6-keeper.ts, the same file as its config), and bench/probe.ts's
 * ElementRepairProbe, with its own socket, deletes one element and waits on
 * the nftables multicast group for the keeper's commit adding it back (the
 * event mirror's repair, no read); and a desired change of one element (the
 * keeper is told on stdin to apply the precompiled other config, in which one
 * element jumps elsewhere), timed from the command to the keeper's commit
 * seen on the multicast group, with the keeper's own figures beside it.
 * Beside them, in the same run: `nft add element` and `nft delete element`
 * execs, and the kernel's floor (one socket deleting an element and adding
 * it back, two commits).
 *
 *   sudo npx tsx bench/sets.ts [--elements 100000] [--chains 100] [--repeat 5] [--samples 50] [--gap-ms 20]
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseNftConfig } from '../src/config/config.js';
import { diffTable, observeTable, planTable } from '../src/keeper/reconcile.js';
import { Batch } from '../src/netlink/batch.js';
import { open } from '../src/netlink/socket.js';
import { kpNft, runS6Elements } from './scenarios/s6-elements.js';

function arg(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}

const N = arg('elements', 100_000);
const CHAINS = arg('chains', 100);
const REPEAT = arg('repeat', 5);
const SAMPLES = arg('samples', 50);
const GAP_MS = arg('gap-ms', 20);

function ip(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

const file = () => kpNft(N, CHAINS);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (t0: number) => performance.now() - t0;

async function main(): Promise<void> {
  const name = `nfk-bench-sets-${process.pid}`;
  execFileSync('ip', ['netns', 'add', name]);
  const dir = mkdtempSync(join(tmpdir(), 'nfk-sets-'));
  const netns = `/run/netns/${name}`;
  const nsExec = (args: string[], input?: string) => {
    const r = spawnSync('ip', ['netns', 'exec', name, ...args], { input, encoding: 'utf8', maxBuffer: 1 << 28 });
    if (r.status !== 0) throw new Error(`${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  try {
    const text = file();
    const path = join(dir, 'kp.nft');
    writeFileSync(path, text);
    const out: Record<string, number | string> = { elements: N, chains: CHAINS, fileBytes: text.length };

    const builds: number[] = [];
    let config = parseNftConfig(text, path);
    for (let r = 0; r < REPEAT; r++) {
      const t0 = performance.now();
      config = parseNftConfig(text, path);
      builds.push(ms(t0));
    }
    out.readAndBuildMs = median(builds);

    const nftInstall: number[] = [];
    for (let r = 0; r < REPEAT; r++) {
      nsExec(['nft', 'flush', 'ruleset']);
      const t0 = performance.now();
      nsExec(['nft', '-f', path]);
      nftInstall.push(ms(t0));
    }
    out.nftFileInstallMs = median(nftInstall);

    const sock = open({ netns });
    try {
      const t = config.tables[0]!;
      const installs: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        nsExec(['nft', 'flush', 'ruleset']);
        const t0 = performance.now();
        const have = await observeTable(sock, t.family, t.name, t.chains.map((c) => c.name));
        const batch = new Batch();
        planTable(batch, t, have, diffTable(t, have));
        await sock.commit(batch, { expectGeneration: sock.generation() });
        installs.push(ms(t0));
      }
      out.nfkeeperInstallMs = median(installs);

      const checks: number[] = [];
      const diffs: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        const t0 = performance.now();
        const have = await observeTable(sock, t.family, t.name, t.chains.map((c) => c.name));
        const t1 = performance.now();
        const drifts = diffTable(t, have);
        diffs.push(ms(t1));
        checks.push(ms(t0));
        if (drifts.length) throw new Error(`not in sync: ${drifts.map((d) => d.detail).join('; ')}`);
      }
      out.inSyncPassMs = median(checks);
      out.inSyncDiffMs = median(diffs);

      const repairs: number[] = [];
      const observes: number[] = [];
      const commits: number[] = [];
      let ops = 0;
      for (let r = 0; r < REPEAT; r++) {
        const i = 1 + r * 7919 % N;
        nsExec(['nft', 'delete', 'element', 'ip', 'kp', 'service-ips', `{ ${ip(i)} . tcp . ${80 + (i % 3)} }`]);
        const t0 = performance.now();
        const have = await observeTable(sock, t.family, t.name, t.chains.map((c) => c.name));
        observes.push(ms(t0));
        const batch = new Batch();
        planTable(batch, t, have, diffTable(t, have));
        const t1 = performance.now();
        await sock.commit(batch, { expectGeneration: sock.generation() });
        commits.push(ms(t1));
        repairs.push(ms(t0));
        ops = batch.length;
        if (batch.ops.some((o) => o.object !== 'element')) throw new Error('repair touched more than elements');
      }
      out.fullReadRepairMs = median(repairs);
      out.fullReadRepairObserveMs = median(observes);
      out.fullReadRepairCommitMs = median(commits);
      out.fullReadRepairOps = ops;

      const execs: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        const i = 2 + r * 104729 % N;
        const elem = `${ip(i)} . tcp . ${80 + (i % 3)}`;
        nsExec(['nft', 'delete', 'element', 'ip', 'kp', 'service-ips', `{ ${elem} }`]);
        const t0 = performance.now();
        nsExec(['nft', 'add', 'element', 'ip', 'kp', 'service-ips', `{ ${elem} : goto svc-${i % CHAINS} }`]);
        execs.push(ms(t0));
      }
      out.nftAddElementExecMs = median(execs);
    } finally {
      sock.close();
    }

    // From outside: the keeper as its own process, the probe with its own socket (S6's element columns).
    nsExec(['nft', 'flush', 'ruleset']);
    const row = await runS6Elements({ netns, exec: (cmd, args, input) => nsExec([cmd, ...args], input), dir, elements: N, chains: CHAINS,
      repairs: SAMPLES, changes: Math.max(REPEAT, 10), execs: REPEAT, gapMs: GAP_MS });
    const msOf = (x: number) => x / 1000;
    Object.assign(out, {
      outsideElementRepairP50Ms: msOf(row.repair.median), outsideElementRepairP99Ms: msOf(row.repair.p99),
      outsideElementRepairMaxMs: msOf(row.repair.max), outsideElementRepairSamples: row.repair.n,
      desiredChangeOutsideP50Ms: msOf(row.change.median), desiredChangeOutsideP99Ms: msOf(row.change.p99),
      desiredChangeCommitP50Ms: msOf(row.changeCommit.median), desiredChangeCommitP99Ms: msOf(row.changeCommit.p99),
      desiredChangeOps: row.changeOps,
      nftAddElementExecMsBeside: msOf(row.nftAddElement.median), nftDeleteElementExecMs: msOf(row.nftDeleteElement.median),
      kernelFloorDeleteAddMs: msOf(row.kernelFloor.median), load1m: `${row.load[0].toFixed(2)} -> ${row.load[1].toFixed(2)}`,
    });
    for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(28)} ${typeof v === 'number' ? Number(v.toFixed(3)) : v}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    spawnSync('ip', ['netns', 'del', name]);
  }
}

await main();
