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
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseNftConfig } from '../src/config/config.js';
import { diffTable, observeTable, planTable } from '../src/keeper/reconcile.js';
import { Batch } from '../src/netlink/batch.js';
import { Monitor } from '../src/netlink/monitor.js';
import { PROJECT_ROOT } from '../src/netlink/native.js';
import { open } from '../src/netlink/socket.js';
import { summarize } from './lib/stats.js';
import { probeElementRepairs } from './probe.js';

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

/** The table; `changed`: element 1 jumps to svc-0 instead of svc-1 (the one-element desired change). */
function file(changed = false): string {
  const lines = ['table ip kp {'];
  for (let c = 0; c < CHAINS; c++) lines.push(`\tchain svc-${c} {`, '\t}');
  lines.push('\tmap service-ips {', '\t\ttype ipv4_addr . inet_proto . inet_service : verdict', '\t\telements = {');
  for (let i = 0; i < N; i++) lines.push(`\t\t\t${ip(i)} . tcp . ${80 + (i % 3)} : goto svc-${changed && i === 1 ? 0 : i % CHAINS},`);
  lines.push('\t\t}', '\t}', '}');
  return lines.join('\n') + '\n';
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
      const delExecs: number[] = [];
      for (let r = 0; r < REPEAT; r++) {
        const i = 3 + r * 104729 % N;
        const elem = `${ip(i)} . tcp . ${80 + (i % 3)}`;
        const t0 = performance.now();
        nsExec(['nft', 'delete', 'element', 'ip', 'kp', 'service-ips', `{ ${elem} }`]);
        delExecs.push(ms(t0));
        nsExec(['nft', 'add', 'element', 'ip', 'kp', 'service-ips', `{ ${elem} : goto svc-${i % CHAINS} }`]);
      }
      out.nftDeleteElementExecMs = median(delExecs);

      // The kernel's floor for the probe's sample: delete one element and add it back, two commits.
      const floor: number[] = [];
      const where = { family: 'ip' as const, table: 'kp', set: 'service-ips' };
      const some = (await sock.listElements(where)).slice(0, 64);
      for (let r = 0; r < Math.max(REPEAT, 20); r++) {
        const e = some[r % some.length]!;
        const t0 = performance.now();
        await sock.commit(new Batch().delete('element', { ...where, elements: [{ key: e.key, flags: 0 }] }));
        await sock.commit(new Batch().add('element', { ...where, elements: [e] }));
        floor.push(ms(t0));
      }
      out.kernelFloorDeleteAddMs = median(floor);
    } finally {
      sock.close();
    }

    // From outside: the keeper as its own process, the probe with its own socket.
    nsExec(['nft', 'flush', 'ruleset']);
    const alt = join(dir, 'kp-changed.nft');
    writeFileSync(alt, file(true));
    const child = spawn(process.execPath, ['--import', 'tsx', join(PROJECT_ROOT, 'bench', 's6-keeper.ts'),
      '--netns', netns, '--config', path, '--alt-config', alt], { stdio: ['pipe', 'pipe', 'inherit'], cwd: PROJECT_ROOT });
    const exited = new Promise((r) => child.on('exit', r));
    const lines: string[] = [];
    let onLine: ((l: string) => void) | undefined;
    createInterface({ input: child.stdout! }).on('line', (l) => { lines.push(l); onLine?.(l); });
    const waitLine = (re: RegExp, timeoutMs: number) => new Promise<string>((resolve, reject) => {
      const seen = lines.find((l) => re.test(l));
      if (seen) { lines.splice(lines.indexOf(seen), 1); resolve(seen); return; }
      const t = setTimeout(() => reject(new Error(`the keeper did not print ${re} within ${timeoutMs} ms`)), timeoutMs);
      onLine = (l) => {
        if (!re.test(l)) return;
        clearTimeout(t);
        lines.splice(lines.indexOf(l), 1);
        onLine = undefined;
        resolve(l);
      };
      void exited.then(() => reject(new Error('the keeper exited')));
    });
    try {
      await waitLine(/^ready$/, 300_000);
      await waitLine(/^mirror exact$/, 300_000);
      out.loadAvgBefore = loadavg().map((x) => x.toFixed(2)).join(' ');
      const probed = await probeElementRepairs({ netns, family: 'ip', table: 'kp', set: 'service-ips' }, SAMPLES, GAP_MS,
        { warmup: 3, timeoutMs: 60_000 });
      out.outsideElementRepairP50Ms = probed.summary.median / 1000;
      out.outsideElementRepairP99Ms = probed.summary.p99 / 1000;
      out.outsideElementRepairMaxMs = probed.summary.max / 1000;
      out.outsideElementRepairSamples = probed.summary.n;

      // One desired change: the command to the keeper's commit seen on the multicast group.
      const sock2 = open({ netns });
      let seen: ((at: number) => void) | undefined;
      const mon = new Monitor({ netns, tables: [{ family: 'ip', name: 'kp' }], ignorePorts: [sock2.portId],
        onBatch: (b) => { if (b.events.some((e) => e.type === 'newsetelem' && e.name === 'service-ips')) seen?.(performance.now()); } });
      const outside: number[] = [];
      const wall: number[] = [];
      const commit: number[] = [];
      let changeOps = 0;
      try {
        for (let k = 0; k < Math.max(REPEAT, 10) + 1; k++) {
          const committed = new Promise<number>((resolve) => { seen = resolve; });
          const t0 = performance.now();
          child.stdin!.write('swap\n');
          const line = await waitLine(/^(changed|refused) /, 120_000);
          if (line.startsWith('refused')) throw new Error(`the keeper refused the change: ${line}`);
          const at = await committed;
          const [, w, o, c] = line.split(' ');
          if (k === 0) continue;  // a warm-up
          outside.push(at - t0);
          wall.push(Number(w));
          commit.push(Number(c));
          changeOps = Number(o);
          await new Promise((r) => setTimeout(r, GAP_MS));
        }
      } finally {
        mon.close();
        sock2.close();
      }
      out.desiredChangeOutsideP50Ms = median(outside);
      out.desiredChangeSetConfigP50Ms = median(wall);
      out.desiredChangeCommitP50Ms = median(commit);
      out.desiredChangeCommitP99Ms = summarize(commit.map((x) => x * 1000)).p99 / 1000;
      out.desiredChangeOps = changeOps;
      out.loadAvgAfter = loadavg().map((x) => x.toFixed(2)).join(' ');
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
    for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(28)} ${typeof v === 'number' ? Number(v.toFixed(3)) : v}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    spawnSync('ip', ['netns', 'del', name]);
  }
}

await main();
