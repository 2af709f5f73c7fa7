/**
 * S2 detection-to-repair for the native keeper (issue 7): another socket
 * deletes one owned rule; how long until the whole ordered set is back?
 *   npx tsx bench/s2.ts [--full]
 * The tamper is committed from a second netlink socket in this process, so
 * the clock starts when the kernel has committed the deletion (a forked `nft`
 * would add its own start-up to the measurement). Event path: the keeper's
 * tick is an hour, only change notifications can trigger the repair.
 * Polling: events off, a 1 s tick. Fight back-off is disabled here: it exists
 * to slow exactly this kind of repeated tampering.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../src/config/config.js';
import { Keeper, type RepairReport } from '../src/keeper/keeper.js';
import { PROJECT_ROOT } from '../src/netlink/native.js';
import { Batch, open } from '../src/index.js';
import { withBenchNetns } from './lib/netns.js';
import { foreignRestore } from './scenarios/foreign.js';
import { summarize, type Summary } from './lib/stats.js';

const full = process.argv.includes('--full');
const SIZES = full ? [0, 1000, 10_000, 100_000] : [0, 1000, 10_000];
const EVENT_REPS = full ? 300 : 100;
const POLL_REPS = full ? 10 : 4;
const config = parseConfig(readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml'), 'utf8'));
const want = config.tables[0]!.chains[0]!.rules.length;

async function measure(netns: string, events: boolean, reps: number): Promise<Summary> {
  const keeper = new Keeper({ config, netns, events, intervalMs: events ? 3_600_000 : 1000, fight: { threshold: 1e9 } });
  const tamper = open({ netns });
  const samples: number[] = [];
  try {
    await keeper.start();
    for (let i = 0; i < reps + 5; i++) {
      const rules = await tamper.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
      const repaired = new Promise<RepairReport>((resolve) => keeper.once('repaired', resolve));
      await tamper.commit(new Batch().delete('rule', { family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: rules[1]!.handle! }));
      const t0 = performance.now();
      await repaired;
      const t1 = performance.now();
      await keeper.idle();
      const after = await tamper.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
      if (after.length !== want) throw new Error(`repair left ${after.length} rules, want ${want}`);
      if (i >= 5) samples.push((t1 - t0) * 1000);  // the first few warm the JIT
    }
  } finally {
    await keeper.stop();
    tamper.close();
  }
  return summarize(samples);
}

const ms = (us: number) => `${(us / 1000).toFixed(3)} ms`;
const results: { n: number; event: Summary; poll: Summary }[] = [];
for (const n of SIZES) {
  await withBenchNetns(`s2-${n}`, async (ns) => {
    if (n > 0) ns.exec('iptables-nft-restore', [], foreignRestore('a', n));
    process.stderr.write(`S2 N=${n}: event path...\n`);
    const event = await measure(ns.path, true, EVENT_REPS);
    process.stderr.write(`S2 N=${n}: 1 Hz polling...\n`);
    const poll = await measure(ns.path, false, POLL_REPS);
    results.push({ n, event, poll });
  });
}
console.log('| foreign rules | event path median | p99 | 1 Hz polling median | p99 (max) |');
console.log('|---:|---:|---:|---:|---:|');
for (const r of results) {
  console.log(`| ${r.n.toLocaleString('en-US')} | ${ms(r.event.median)} | ${ms(r.event.p99)} | ${ms(r.poll.median)} | ${ms(r.poll.max)} |`);
}
mkdirSync(join(PROJECT_ROOT, 'bench', 'results'), { recursive: true });
writeFileSync(join(PROJECT_ROOT, 'bench', 'results', 's2.json'),
  JSON.stringify({ date: new Date().toISOString(), mode: full ? 'full' : 'quick', results }, null, 2) + '\n');
