/**
 * Named-set scaling, in a throwaway namespace: a kube-proxy-like verdict map
 * of N elements (`ipv4_addr . inet_proto . inet_service : goto svc-K`),
 * loaded from an nft file. Measures reading and building the file, nfkeeper's
 * install beside `nft -f` of the same file, a check pass that finds nothing,
 * and a one-element repair (observe, diff, plan, guarded commit of element
 * ops only) after a foreign deletion, beside `nft add element` exec.
 *
 *   sudo npx tsx bench/sets.ts [--elements 100000] [--chains 100] [--repeat 5]
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

function arg(name: string, def: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
}

const N = arg('elements', 100_000);
const CHAINS = arg('chains', 100);
const REPEAT = arg('repeat', 5);

function ip(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

function file(): string {
  const lines = ['table ip kp {'];
  for (let c = 0; c < CHAINS; c++) lines.push(`\tchain svc-${c} {`, '\t}');
  lines.push('\tmap service-ips {', '\t\ttype ipv4_addr . inet_proto . inet_service : verdict', '\t\telements = {');
  for (let i = 0; i < N; i++) lines.push(`\t\t\t${ip(i)} . tcp . ${80 + (i % 3)} : goto svc-${i % CHAINS},`);
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
      out.oneElementRepairMs = median(repairs);
      out.oneElementRepairObserveMs = median(observes);
      out.oneElementRepairCommitMs = median(commits);
      out.oneElementRepairOps = ops;

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
    for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(28)} ${typeof v === 'number' ? Number(v.toFixed(1)) : v}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    spawnSync('ip', ['netns', 'del', name]);
  }
}

await main();
