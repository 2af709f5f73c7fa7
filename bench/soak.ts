/**
 * Chaos soak: while a keeper runs, a tamperer applies random
 * operations at random intervals, and after each one an independent check
 * (its own socket, its own dump and comparison) measures how long the kernel
 * took to hold the desired ruleset again.
 *   npx tsx bench/soak.ts --ops 500 --seed 1 [--backoff off]
 * [--tamper nft]
 * `--backoff off` runs the keeper with the fight back-off disabled (it never
 * escalates), so convergence is the repair path's own latency.
 * Everything happens in a network namespace made here and removed after.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../src/config/config.js';
import { Keeper, checkOnce } from '../src/keeper/keeper.js';
import type { FightOptions } from '../src/keeper/fight.js';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { Batch } from '../src/netlink/batch.js';
import type { Expr } from '../src/netlink/expr.js';
import { open, type NftSocket } from '../src/netlink/socket.js';
import { ruleHandles } from '../test/helpers/nft.js';
import { createBenchNetns } from './lib/netns.js';
import { summarize } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

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
type Nft = (h: number[], rnd: () => number) => string;
type Sock = (t: NftSocket, h: number[], rnd: () => number) => Promise<unknown>;
const OWN = { family: 'ip', table: 'nfkeeper', chain: 'postrouting' } as const;
const saddrIs = (a: number[]): Expr[] => [
  { kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 },
  { kind: 'cmp', sreg: 1, op: 'eq', data: Buffer.from(a).toString('hex') },
];
const verdict = (v: 'accept' | 'return'): Expr => ({ kind: 'immediate', dreg: 0, verdict: v });
const pick = (h: number[], r: () => number): number => h[Math.floor(r() * h.length)]!;

/** Each operation as an nft script and as the same change through a netlink socket. */
const OPS: [string, Nft, Sock][] = [
  ['delete a rule', (h, r) => `delete rule ${C} handle ${pick(h, r)}`,
    (t, h, r) => t.commit(new Batch().delete('rule', { ...OWN, handle: pick(h, r) }))],
  ['insert a foreign rule first', () => `insert rule ${C} ip saddr 192.0.2.7 accept`,
    (t) => t.commit(new Batch().insert('rule', { ...OWN, exprs: [...saddrIs([192, 0, 2, 7]), verdict('accept')] }))],
  ['replace a rule in place', (h, r) => `replace rule ${C} handle ${pick(h, r)} ip saddr 198.51.100.0/24 return`,
    (t, h, r) => t.commit(new Batch().replace('rule', { ...OWN, handle: pick(h, r), exprs: [
      { kind: 'payload', base: 'network', offset: 12, len: 3, dreg: 1 },
      { kind: 'cmp', sreg: 1, op: 'eq', data: 'c63364' }, verdict('return')] }))],
  ['flush the chain', () => `flush chain ${C}`,
    (t) => t.commit(new Batch().flush('chain', { family: 'ip', table: 'nfkeeper', name: 'postrouting' }))],
  ['delete the chain', () => `flush chain ${C}\ndelete chain ${C}`,
    (t) => t.commit(new Batch().flush('chain', { family: 'ip', table: 'nfkeeper', name: 'postrouting' })
      .delete('chain', { family: 'ip', table: 'nfkeeper', name: 'postrouting' }))],
  ['delete the table', () => 'delete table ip nfkeeper',
    (t) => t.commit(new Batch().delete('table', { family: 'ip', name: 'nfkeeper' }))],
  ['flush ruleset', () => 'flush ruleset',
    async (t) => {
      const b = new Batch();
      for (const x of await t.listTables()) b.delete('table', { family: x.family, name: x.name });
      await t.commit(b);
    }],
  ['foreign churn', (_h, r) => Array.from({ length: 50 }, (_, i) => `add rule ip churn c ip saddr 10.${Math.floor(r() * 250)}.0.${i} accept`)
    .join('\n').replace(/^/, 'add table ip churn\nadd chain ip churn c\n'),
  (t, _h, r) => {
    const b = new Batch().add('table', { family: 'ip', name: 'churn' }).add('chain', { family: 'ip', table: 'churn', name: 'c' });
    for (let i = 0; i < 50; i++) {
      b.add('rule', { family: 'ip', table: 'churn', chain: 'c', exprs: [...saddrIs([10, Math.floor(r() * 250), 0, i]), verdict('accept')] });
    }
    return t.commit(b);
  }],
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

/**
 * `tamper`: 'socket' (default) makes each change through its own netlink
 * socket, a few hundred microseconds; 'nft' forks `nft` twice per operation
 * (list for handles, then the script), which on a loaded 2-core machine costs
 * most of a second and would make 10,000 operations a matter of hours.
 */
export async function soak(opsCount: number, seed: number, log: (s: string) => void = () => undefined,
  fight?: Partial<FightOptions>, tamper: 'socket' | 'nft' = 'socket'): Promise<SoakResult> {
  const rnd = prng(seed);
  const config = parseConfig(readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml'), 'utf8'));
  const ns = createBenchNetns(`soak-${seed}`);
  const keeper = new Keeper({ config, netns: ns.path, intervalMs: 1000, fight });
  let keeperErrors = 0;
  keeper.on('error', () => keeperErrors++);
  const checker = open({ netns: ns.path });
  const tamperer = tamper === 'socket' ? open({ netns: ns.path }) : undefined;
  const samples: number[] = [];
  const byOp: Record<string, number> = {};
  let converged = 0;
  let finalDivergence: string[] = [];
  try {
    await keeper.start();
    const rss0 = process.memoryUsage().rss;
    for (let i = 0; i < opsCount; i++) {
      const [name, script, viaSocket] = OPS[Math.floor(rnd() * OPS.length)]!;
      byOp[name] = (byOp[name] ?? 0) + 1;
      if (tamperer) {
        const h = await tamperer.listRules(OWN).then((rs) => rs.map((x) => x.handle!), () => []);
        // A failure means the object was already gone: still an operation the keeper must survive.
        await viaSocket(tamperer, h.length ? h : [1], rnd).catch(() => undefined);
      } else {
        const listing = (() => { try { return ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']); } catch { return ''; } })();
        const h = ruleHandles(listing);
        try {
          ns.exec('nft', ['-f', '-'], script(h.length ? h : [1], rnd));
        } catch { /* as above */ }
      }
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
      if ((i + 1) % 500 === 0) {
        // A checkpoint, so a long run that has to be stopped still has figures.
        const s = summarize(samples);
        log(`checkpoint ${i + 1}: median ${(s.median / 1000).toFixed(1)} ms, p99 ${(s.p99 / 1000).toFixed(1)} ms, ` +
          `keeper errors ${keeperErrors}, RSS ${((process.memoryUsage().rss - rss0) / 2 ** 20).toFixed(1)} MiB over the start`);
      }
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
    tamperer?.close();
    ns.remove();
  }
}

if (process.argv[1]?.endsWith('soak.ts')) {
  const cli = parseArgs(import.meta.url, { '--ops': 1, '--seed': 1, '--backoff': 1, '--tamper': 1 });
  const backoffOff = cli.value('--backoff') === 'off';
  // threshold Infinity: repairs never count as a fight, so there is never a wait.
  const tamper = cli.value('--tamper') === 'nft' ? 'nft' : 'socket';
  const r = await soak(Number(cli.value('--ops', '500')), Number(cli.value('--seed', '1')), (s) => process.stderr.write(s + '\n'),
    backoffOff ? { threshold: Infinity } : undefined, tamper);
  console.log(`tamperer: ${tamper}`);
  console.log(`back-off: ${backoffOff ? 'off' : 'default'}`);
  console.log('| operations | converged | median | p99 | max | keeper errors | RSS growth | final divergence |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---|');
  console.log(`| ${r.ops} | ${r.converged} | ${r.medianMs.toFixed(2)} ms | ${r.p99Ms.toFixed(2)} ms | ${r.maxMs.toFixed(1)} ms | ` +
    `${r.keeperErrors} | ${r.rssGrowthMiB.toFixed(1)} MiB | ${r.finalDivergence.length ? r.finalDivergence.join('; ') : 'none'} |`);
  console.log('\noperations applied:', JSON.stringify(r.byOp));
}
