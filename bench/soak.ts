/**
 * Chaos soak (issue 9): while a keeper runs, a tamperer applies random
 * operations at random intervals, and after each one an independent check
 * (its own socket, its own dump and comparison) measures how long the kernel
 * took to hold the desired ruleset again.
 *   npx tsx bench/soak.ts --ops 500 --seed 1
 * Everything happens in a network namespace made here and removed after.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../src/config/config.js';
import { Keeper, checkOnce } from '../src/keeper/keeper.js';
import type { FightOptions } from '../src/keeper/fight.js';
import { PROJECT_ROOT } from '../src/native.js';
import { open } from '../src/netlink/socket.js';
import { ruleHandles } from '../test/helpers/nft.js';
import { createBenchNetns } from './lib/netns.js';
import { summarize } from './lib/stats.js';

export interface SoakResult {
  ops: number;
  converged: number;
  medianMs: number;
  p99Ms: number;
  maxMs: number;
  keeperErrors: number;
  rssGrowthMiB: number;
  finalDivergence: string[];
  byOp: Record<string, number>;
}

const C = 'ip nfkeeper postrouting';
const OPS: [string, (h: number[], rnd: () => number) => string][] = [
  ['delete a rule', (h, r) => `delete rule ${C} handle ${h[Math.floor(r() * h.length)]}`],
  ['insert a foreign rule first', () => `insert rule ${C} ip saddr 192.0.2.7 accept`],
  ['replace a rule in place', (h, r) => `replace rule ${C} handle ${h[Math.floor(r() * h.length)]} ip saddr 198.51.100.0/24 return`],
  ['flush the chain', () => `flush chain ${C}`],
  ['delete the chain', () => `flush chain ${C}\ndelete chain ${C}`],
  ['delete the table', () => 'delete table ip nfkeeper'],
  ['flush ruleset', () => 'flush ruleset'],
  ['foreign churn', (_h, r) => Array.from({ length: 50 }, (_, i) => `add rule ip churn c ip saddr 10.${Math.floor(r() * 250)}.0.${i} accept`)
    .join('\n').replace(/^/, 'add table ip churn\nadd chain ip churn c\n')],
];

/** mulberry32: a small seeded PRNG, so a run can be replayed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function soak(opsCount: number, seed: number, log: (s: string) => void = () => undefined,
  fight?: Partial<FightOptions>): Promise<SoakResult> {
  const rnd = prng(seed);
  const config = parseConfig(readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml'), 'utf8'));
  const ns = createBenchNetns(`soak-${seed}`);
  const keeper = new Keeper({ config, netns: ns.path, intervalMs: 1000, fight });
  let keeperErrors = 0;
  keeper.on('error', () => keeperErrors++);
  const checker = open({ netns: ns.path });
  const samples: number[] = [];
  const byOp: Record<string, number> = {};
  let converged = 0;
  let finalDivergence: string[] = [];
  try {
    await keeper.start();
    const rss0 = process.memoryUsage().rss;
    for (let i = 0; i < opsCount; i++) {
      const [name, script] = OPS[Math.floor(rnd() * OPS.length)]!;
      byOp[name] = (byOp[name] ?? 0) + 1;
      const listing = (() => { try { return ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']); } catch { return ''; } })();
      const h = ruleHandles(listing);
      try {
        ns.exec('nft', ['-f', '-'], script(h.length ? h : [1], rnd));
      } catch { /* the object was already gone: still an operation that the keeper must survive */ }
      const t0 = performance.now();
      let ok = false;
      while (performance.now() - t0 < 10_000) {
        const { drift } = await checkOnce(checker, config, false);
        if (drift.every((d) => d.drift.length === 0)) {
          ok = true;
          break;
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      if (ok) {
        converged++;
        samples.push((performance.now() - t0) * 1000);
      }
      if ((i + 1) % 10 === 0) log(`${i + 1}/${opsCount} operations, ${converged} converged`);
      await new Promise((r) => setTimeout(r, 5 + rnd() * 100));
    }
    const { drift } = await checkOnce(checker, config, false);
    finalDivergence = drift.flatMap((d) => d.drift.map((x) => x.detail));
    const s = summarize(samples);
    return {
      ops: opsCount, converged, medianMs: s.median / 1000, p99Ms: s.p99 / 1000, maxMs: s.max / 1000, keeperErrors,
      rssGrowthMiB: (process.memoryUsage().rss - rss0) / 2 ** 20, finalDivergence, byOp,
    };
  } finally {
    await keeper.stop();
    checker.close();
    ns.remove();
  }
}

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
}

if (process.argv[1]?.endsWith('soak.ts')) {
  const r = await soak(arg('--ops', 500), arg('--seed', 1), (s) => process.stderr.write(s + '\n'));
  console.log('| operations | converged | median | p99 | max | keeper errors | RSS growth | final divergence |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---|');
  console.log(`| ${r.ops} | ${r.converged} | ${r.medianMs.toFixed(2)} ms | ${r.p99Ms.toFixed(2)} ms | ${r.maxMs.toFixed(1)} ms | ` +
    `${r.keeperErrors} | ${r.rssGrowthMiB.toFixed(1)} MiB | ${r.finalDivergence.length ? r.finalDivergence.join('; ') : 'none'} |`);
  console.log('\noperations applied:', JSON.stringify(r.byOp));
}
