/**
 * Named-set scaling, in a throwaway namespace: a kube-proxy-like verdict map
 * of N elements (`ipv4_addr . inet_proto . inet_service : goto svc-K`),
 * loaded from an nft file. Measures reading and building the file, nfkeeper's
 * install beside `nft -f` of the same file, a check pass that finds nothing,
 * and a one-element repair by a full read (observe, diff, plan, guarded commit
 * of element ops only: what the keeper falls back to without the followed
 * part's proof), in process.
 *
 * Then from OUTSIDE the keeper: the keeper runs as its own process
 * (bench/s6-keeper.ts, the same file as its config), and bench/probe.ts's
 * ElementRepairProbe, with its own socket, deletes one element and waits on
 * the nftables multicast group for the keeper's commit adding it back (the
 * followed part's repair, no read); and a desired change of one element (the
 * keeper is told on stdin to apply the precompiled other config, in which one
 * element jumps elsewhere), timed from the command to the keeper's commit
 * seen on the multicast group, with the keeper's own figures beside it.
 * Beside them, in the same run: `nft add element` and `nft delete element`
 * execs, and the kernel's floor (one socket deleting an element and adding
 * it back, two commits).
 *
 * Then the keeper's own passes over the same file, in process (src/keeper with events and the
 * followed part, its reads counted on its socket): its start-up on an empty namespace (install, then the
 * followed part seeded), a reload that changes a rule (the events cannot follow that: a full pass,
 * planned from what the keeper knows or from a read), and the safety net's read-back of that
 * trusted commit, and a fallback (the map flushed by nft, filled again by a full pass); each with
 * its time and the rule, digest and element dumps it made.
 *
 *   sudo npx tsx bench/sets.ts [--elements 100000] [--chains 100] [--repeat 5] [--samples 50] [--gap-ms 20] [--keeper-only]
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseNftConfig, type Config } from '../src/config/config.js';
import { Keeper } from '../src/keeper/keeper.js';
import type { NftConn, NftHost } from '../src/netlink/conn.js';
import { Monitor } from '../src/netlink/monitor.js';
import { diffTable } from '../src/keeper/table.js';
import { observeTable } from '../src/keeper/observe.js';
import { planTable } from '../src/keeper/plan.js';
import { Batch } from '../src/netlink/batch.js';
import { open } from '../src/netlink/socket.js';
import { kpNft, runS6Elements } from './scenarios/s6-elements.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--elements': 1, '--chains': 1, '--repeat': 1, '--samples': 1, '--gap-ms': 1, '--keeper-only': 0 });
const arg = (name: string, def: number): number => Number(cli.value(`--${name}`, String(def)));

const N = arg('elements', 100_000);
const CHAINS = arg('chains', 100);
const REPEAT = arg('repeat', 5);
const SAMPLES = arg('samples', 50);
const GAP_MS = arg('gap-ms', 20);

function ip(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

const file = () => kpNft(N, CHAINS);
const KEEPER_ONLY = cli.has('--keeper-only');

/**
 * The keeper's passes over `config` in the namespace (emptied first): start-up to ready and to the
 * the followed part exact, a reload of `changed` (a rule differs), and the safety net's read-back after it.
 */
async function keeperPasses(netns: string, config: Config, changed: Config, flush: () => void, flushMap: () => void):
  Promise<Record<string, number | string>> {
  flush();
  const reads = { listRules: 0, listRuleDigests: 0, listElements: 0 } as Record<string, number>;
  let lastReadAt = 0;
  const host: NftHost = {
    connect: () => {
      const real = open({ netns });
      return new Proxy(real, {
        get(target, p, recv) {
          const v = Reflect.get(target, p, recv);
          if (typeof v !== 'function') return v;
          if (typeof p === 'string' && p in reads) {
            return (...a: unknown[]) => {
              reads[p]!++;
              lastReadAt = performance.now();
              return (v as (...x: unknown[]) => unknown).apply(target, a);
            };
          }
          return v.bind(target);
        },
      }) as NftConn;
    },
    watch: (o) => new Monitor({ ...o, netns }),
  };
  const said = () => `${reads.listRules}/${reads.listRuleDigests}/${reads.listElements}`;
  const keeper = new Keeper({ config, host, intervalMs: 100, trustOwnCommitMs: 2000, fight: { threshold: 1e9 } });
  keeper.on('error', (e: Error) => console.error(`keeper: ${e.message}`));
  const dumps = async () => (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;
  const until = async (ok: () => boolean | Promise<boolean>, ms = 120_000) => {
    const end = performance.now() + ms;
    while (!(await ok())) {
      if (performance.now() > end) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const out: Record<string, number | string> = {};
  try {
    const t0 = performance.now();
    await keeper.start();
    out.keeperStartReadyMs = ms(t0);
    await until(() => keeper.followState()?.exact === true);
    await keeper.idle();
    out.keeperStartFollowedExactMs = ms(t0);
    out['keeperStartReads(rules/digests/elements)'] = said();
    // Past the start-up's own read-back, if it owes one.
    await new Promise((r) => setTimeout(r, 2500));
    await keeper.idle();
    Object.keys(reads).forEach((k) => { reads[k] = 0; });
    const d0 = await dumps();
    const t1 = performance.now();
    await keeper.setConfig(changed);
    out.keeperRuleReloadMs = ms(t1);
    out['keeperRuleReloadReads(rules/digests/elements)'] = said();
    Object.keys(reads).forEach((k) => { reads[k] = 0; });
    // The safety net: a read trustOwnCommitMs later, timed from its first read to its end.
    const d1 = await dumps();
    lastReadAt = 0;
    const readStart = { at: 0 };
    const watchFirst = setInterval(() => { if (lastReadAt && !readStart.at) readStart.at = lastReadAt; }, 1);
    await until(async () => await dumps() > d1, 20_000).catch(() => undefined);
    clearInterval(watchFirst);
    await keeper.idle();
    out.keeperSafetyNetMs = readStart.at ? Number((performance.now() - readStart.at).toFixed(1)) : 'none';
    out['keeperSafetyNetReads(rules/digests/elements)'] = said();
    out.keeperDumpsAfterReload = (await dumps()) - d0;
    // A fallback: the map flushed by nft (more element events than a monitor batch keeps: the followed part
    // gives up), found and filled again by a full pass; timed from the flush to the map whole again.
    await new Promise((r) => setTimeout(r, 2500));
    await keeper.idle();
    Object.keys(reads).forEach((k) => { reads[k] = 0; });
    const t2 = performance.now();
    flushMap();
    const check = open({ netns });
    try {
      await until(async () => (await check.listElements({ family: 'ip', table: 'kp', set: 'service-ips' })).length === N, 120_000);
    } finally {
      check.close();
    }
    out.keeperFlushedMapRepairMs = ms(t2);
    await keeper.idle();
    out['keeperFlushedMapReads(rules/digests/elements)'] = said();
  } finally {
    await keeper.stop();
  }
  return out;
}

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
    if (KEEPER_ONLY) {
      const changed = parseNftConfig(text.replace('\tchain svc-0 {\n\t}', '\tchain svc-0 {\n\t\tcounter\n\t}'), path);
      Object.assign(out, await keeperPasses(netns, parseNftConfig(text, path), changed, () => nsExec(['nft', 'flush', 'ruleset']),
        () => nsExec(['nft', 'flush', 'map', 'ip', 'kp', 'service-ips'])));
      for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(44)} ${typeof v === 'number' ? Number(v.toFixed(3)) : v}`);
      return;
    }

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
        const drifts = diffTable(t, have).drift;
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

    // The keeper's own passes, in process: start-up, a full pass after a rule reload, the safety net.
    const changed = parseNftConfig(text.replace('\tchain svc-0 {\n\t}', '\tchain svc-0 {\n\t\tcounter\n\t}'), path);
    Object.assign(out, await keeperPasses(netns, config, changed, () => nsExec(['nft', 'flush', 'ruleset']),
      () => nsExec(['nft', 'flush', 'map', 'ip', 'kp', 'service-ips'])));

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
    for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(44)} ${typeof v === 'number' ? Number(v.toFixed(3)) : v}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    spawnSync('ip', ['netns', 'del', name]);
  }
}

await main();
