/**
 * The S3 native write alone, with its phases, for before/after comparisons of
 * the addon's commit path: 1,000 chains × 10 rules (the rules of
 * bench/scenarios/s3.ts) in one batch, from empty and as a full replace.
 *
 *   npx tsx bench/commit.ts [--reps 15] [--nft] [--out FILE]
 *
 * Phases per write (milliseconds):
 *   js:    commit() until the native call returns its promise (op validation
 *          in TypeScript and encoding in the addon, both on the JS thread)
 *   total: commit() until its promise settles
 *   cpu:   the process's user+system CPU time over the write (JS thread,
 *          worker thread and the kernel's work inside sendmsg), which a
 *          loaded shared machine distorts far less than wall time
 * With --nft, `nft -f` of the same rules in the same namespace, for the ratio.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { open, type NftSocket, type Op } from '../src/index.js';
import { withBenchNetns, type BenchNetns } from './lib/netns.js';
import { summarize } from './lib/stats.js';
import { OWNERS, PER_OWNER, nativeOps, nftText as s3Text } from './scenarios/s3.js';
import { parseArgs } from './lib/args.js';

const TABLE = 'nfk-commit';

const cli = parseArgs(import.meta.url, { '--reps': 1, '--nft': 0, '--out': 1 });
const arg = cli.value;
const REPS = Number(arg('--reps') ?? 15);

// The S3 rules, in this script's own table.
const ops = (v: number, replace: boolean): Op[] => nativeOps(v, replace, TABLE);
const nftText = (v: number, replace: boolean): string => s3Text(v, replace, TABLE);

async function count(s: NftSocket): Promise<number> {
  try {
    return (await s.listRules({ family: 'ip', table: TABLE })).length;
  } catch {
    return 0;
  }
}

interface Row { mode: string; total: ReturnType<typeof summarize>; js: ReturnType<typeof summarize>; cpu: ReturnType<typeof summarize> }

async function nativeRows(ns: BenchNetns): Promise<Row[]> {
  const s = open({ netns: ns.path });
  const rows: Row[] = [];
  try {
    for (const replace of [false, true]) {
      const totals: number[] = [], jss: number[] = [], cpus: number[] = [];
      for (let i = 0; i < REPS + 2; i++) {
        ns.exec('nft', ['flush', 'ruleset']);
        if (replace) await s.commit(ops(0, false));
        const batch = ops(replace ? 1 : 0, replace);
        const c0 = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        const p = s.commit(batch);
        const t1 = process.hrtime.bigint();
        await p;
        const t2 = process.hrtime.bigint();
        const c = process.cpuUsage(c0);
        if (i >= 2) { // two warm-up writes
          jss.push(Number(t1 - t0) / 1e3);
          totals.push(Number(t2 - t0) / 1e3);
          cpus.push(c.user + c.system);
        }
        await yieldToLoop();
        const n = await count(s);
        if (n !== OWNERS * PER_OWNER) throw new Error(`${n} rules after the write`);
      }
      rows.push({ mode: replace ? 'full replace' : 'from empty', total: summarize(totals), js: summarize(jss), cpu: summarize(cpus) });
    }
  } finally {
    s.close();
  }
  return rows;
}

function nftRows(ns: BenchNetns): Row[] {
  const rows: Row[] = [];
  for (const replace of [false, true]) {
    const totals: number[] = [];
    for (let i = 0; i < REPS; i++) {
      ns.exec('nft', ['flush', 'ruleset']);
      if (replace) ns.exec('nft', ['-f', '-'], nftText(0, false));
      const text = nftText(replace ? 1 : 0, replace);
      const t0 = process.hrtime.bigint();
      ns.exec('nft', ['-f', '-'], text);
      totals.push(Number(process.hrtime.bigint() - t0) / 1e3);
    }
    rows.push({ mode: replace ? 'full replace' : 'from empty', total: summarize(totals), js: summarize([NaN]), cpu: summarize([NaN]) });
  }
  return rows;
}

async function main(): Promise<void> {
  const load0 = readFileSync('/proc/loadavg', 'utf8').trim();
  const result = await withBenchNetns('commit', async (ns) => {
    const native = await nativeRows(ns);
    const nft = cli.has('--nft') ? nftRows(ns) : [];
    return { native, nft };
  });
  const load1 = readFileSync('/proc/loadavg', 'utf8').trim();
  const ms = (us: number) => (us / 1000).toFixed(1);
  for (const r of result.native) {
    console.log(`native ${r.mode.padEnd(12)} total median ${ms(r.total.median)} ms (min ${ms(r.total.min)}, max ${ms(r.total.max)}), ` +
      `js+encode median ${ms(r.js.median)} ms, cpu median ${ms(r.cpu.median)} ms  [${REPS} writes]`);
  }
  for (const r of result.nft) {
    console.log(`nft -f ${r.mode.padEnd(12)} total median ${ms(r.total.median)} ms (min ${ms(r.total.min)}, max ${ms(r.total.max)})  [${REPS} writes, incl. ip netns exec fork]`);
  }
  console.log(`loadavg before: ${load0}; after: ${load1}`);
  const out = arg('--out');
  if (out) writeFileSync(out, `${JSON.stringify({ date: new Date().toISOString(), load0, load1, reps: REPS, ...result }, null, 2)}\n`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
