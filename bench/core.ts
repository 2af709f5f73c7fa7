/**
 * Costs of the native netfilter-netlink core, measured on the real kernel in
 * throwaway network namespaces:
 *   - generation()                        (NFT_MSG_GETGEN round trip, synchronous)
 *   - a table+chain-filtered dump of the 4-rule owned chain
 *   - a 4-rule flush-and-replace commit   (flush chain + 4 adds in one batch)
 * each with N foreign rules in a kube-proxy-like `ip nat` layout (about N/2
 * chains) loaded with iptables-nft-restore.
 *
 *   npx tsx bench/core.ts [--sizes 0,1000,10000,100000] [--out bench/results/core.json]
 *
 * Prints a table and writes the figures (microseconds) as JSON.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { open } from '../src/index.js';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { flushAndReplace, kubeProxyRestore, kubeProxyRuleCount, OWNED, ownedSetup } from '../test/netlink/fixtures.js';
import { withBenchNetns } from './lib/netns.js';
import { formatUs, summarize, timeCalls, timeSyncCalls, type Summary } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

interface Measured extends Summary {
  /** The median of each round, to show the run-to-run spread on a noisy machine. */
  roundMedians: number[];
}

interface Row {
  foreignRules: number;
  foreignChains: number;
  loadMs: number;
  generation: Measured;
  filteredDump: Measured;
  flushReplaceCommit: Measured;
}

const cli = parseArgs(import.meta.url, { '--sizes': 1, '--out': 1, '--rounds': 1 });
const arg = cli.value;

const sizes = (arg('--sizes') ?? '0,1000,10000,100000').split(',').map(Number);
const out = arg('--out') ?? join(PROJECT_ROOT, 'bench', 'results', 'core.json');
// Per round; ROUNDS rounds per size, interleaved, samples pooled.
const ITER = { generation: 10_000, dump: 2_000, commit: 500 };
const ROUNDS = Number(arg('--rounds') ?? 3);

function pool(rounds: Summary[], samples: number[][]): Measured {
  return { ...summarize(samples.flat()), roundMedians: rounds.map((r) => r.median) };
}

async function measure(n: number): Promise<Row> {
  return withBenchNetns(`core-${n}`, async (ns) => {
    let loadMs = 0;
    let foreignRules = 0;
    if (n > 0) {
      const t0 = Date.now();
      ns.exec('iptables-nft-restore', ['--noflush'], kubeProxyRestore(n));
      loadMs = Date.now() - t0;
      foreignRules = kubeProxyRuleCount(n);
    }
    const s = open({ netns: ns.path });
    try {
      await s.commit(ownedSetup());
      const foreignChains = n > 0 ? (await s.listChains({ family: 'ip', table: 'nat' })).length : 0;
      const filter = { family: OWNED.family, table: OWNED.table, chain: OWNED.chain };

      const g: Summary[] = [], d: Summary[] = [], c: Summary[] = [];
      const gs: number[][] = [], ds: number[][] = [], cs: number[][] = [];
      let k = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const gen = timeSyncCalls(() => s.generation(), ITER.generation);
        const dump = await timeCalls(async () => {
          const rules = await s.listRules(filter);
          if (rules.length !== 4) throw new Error(`expected 4 rules, dumped ${rules.length}`);
        }, ITER.dump);
        const commit = await timeCalls(() => s.commit(flushAndReplace((k++ & 1) === 0 ? 'b' : 'c')), ITER.commit);
        g.push(gen.summary); gs.push(gen.samples);
        d.push(dump.summary); ds.push(dump.samples);
        c.push(commit.summary); cs.push(commit.samples);
      }
      const generation = pool(g, gs), filteredDump = pool(d, ds), flushReplaceCommit = pool(c, cs);

      // Sanity: the chain still holds exactly its four rules, the foreign ones are intact.
      const after = await s.listRules(filter);
      if (after.length !== 4) throw new Error(`owned chain has ${after.length} rules after the run`);
      if (n > 0) {
        const natRules = (await s.listRules({ family: 'ip', table: 'nat' })).length;
        if (natRules !== foreignRules) throw new Error(`foreign rules changed: ${natRules} != ${foreignRules}`);
      }
      return { foreignRules, foreignChains, loadMs, generation, filteredDump, flushReplaceCommit };
    } finally {
      s.close();
    }
  });
}

function libnftnlVersion(): string {
  const r = spawnSync('pkg-config', ['--modversion', 'libnftnl'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : 'unknown';
}

async function main(): Promise<void> {
  const rows: Row[] = [];
  for (const n of sizes) {
    process.stderr.write(`measuring with ${n} foreign rules...\n`);
    rows.push(await measure(n));
  }

  const header = ['foreign rules', 'chains', 'generation() med / p99', 'filtered 4-rule dump med / p99',
    'flush+4 commit med / p99'];
  const lines = rows.map((r) => [
    String(r.foreignRules),
    String(r.foreignChains),
    `${formatUs(r.generation.median)} / ${formatUs(r.generation.p99)}`,
    `${formatUs(r.filteredDump.median)} / ${formatUs(r.filteredDump.p99)}`,
    `${formatUs(r.flushReplaceCommit.median)} / ${formatUs(r.flushReplaceCommit.p99)}`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join(' | ');
  console.log(fmt(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const l of lines) console.log(fmt(l));
  console.log(`${ROUNDS} rounds of generation ${ITER.generation}, dump ${ITER.dump}, commit ${ITER.commit} calls ` +
    '(each after a 10% warm-up); medians and p99 over all rounds. Round medians:');
  for (const r of rows) {
    const rm = (m: Measured) => m.roundMedians.map(formatUs).join(', ');
    console.log(`  N=${r.foreignRules}: generation ${rm(r.generation)}; dump ${rm(r.filteredDump)}; commit ${rm(r.flushReplaceCommit)}`);
  }

  const meta = {
    date: new Date().toISOString(),
    kernel: release(),
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    libnftnl: libnftnlVersion(),
    loadavg: readFileSync('/proc/loadavg', 'utf8').trim(),
    units: 'microseconds',
    iterationsPerRound: ITER,
    rounds: ROUNDS,
    layout: 'kube-proxy-like ip nat table via iptables-nft-restore: per service 4 rules in 2 chains (KUBE-SVC-, KUBE-SEP-) with -m comment and -j DNAT',
  };
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ meta, results: rows }, null, 2)}\n`);
  console.log(`wrote ${out}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
