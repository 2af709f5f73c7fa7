/**
 * S1's native full verify alone, and its two requests apart: GETCHAIN of the
 * base chain and the table+chain-filtered GETRULE dump of its 4 rules, through
 * the native driver of bench/drivers/native.ts, in a namespace with N foreign
 * rules (kube-proxy-like layout). For before/after comparisons of the dump path.
 *
 *   npx tsx bench/verify.ts [--sizes 0,10000] [--iter 20000] [--rounds 3]
 */
import { readFileSync } from 'node:fs';
import { kubeProxyRestore } from '../test/netlink/fixtures.js';
import { NativeDriver } from './drivers/native.js';
import { NFT_CHAIN } from './drivers/flannel.js';
import { withBenchNetns } from './lib/netns.js';
import { formatUs, summarize, timeCalls } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--sizes': 1, '--iter': 1, '--rounds': 1 });
const arg = cli.value;
const sizes = (arg('--sizes') ?? '0,10000').split(',').map(Number);
const ITER = Number(arg('--iter') ?? 20_000);
const ROUNDS = Number(arg('--rounds') ?? 3);

async function main(): Promise<void> {
  console.log(`loadavg ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
  for (const n of sizes) {
    await withBenchNetns(`verify-${n}`, async (ns) => {
      if (n > 0) ns.exec('iptables-nft-restore', ['--noflush'], kubeProxyRestore(n));
      const d = new NativeDriver(ns, 'verify');
      try {
        await d.repair();
        if (!(await d.check())) throw new Error('not in sync after repair');
        const sock = (d as unknown as { sock: import('../src/index.js').NftSocket }).sock;
        const v: number[] = [], c: number[] = [], r: number[] = [];
        const med: string[] = [];
        let cpuUs = 0;
        for (let round = 0; round < ROUNDS; round++) {
          const c0 = process.cpuUsage();
          const tv = await timeCalls(async () => { if (!(await d.check())) throw new Error('out of sync'); }, ITER);
          const cu = process.cpuUsage(c0);
          cpuUs += cu.user + cu.system;
          const tc = await timeCalls(() => sock.getChain('ip', 'nfk-flannel', NFT_CHAIN), ITER);
          const tr = await timeCalls(() => sock.listRules({ family: 'ip', table: 'nfk-flannel', chain: NFT_CHAIN }), ITER);
          v.push(...tv.samples); c.push(...tc.samples); r.push(...tr.samples);
          med.push(formatUs(tv.summary.median));
        }
        const f = (s: number[]) => { const m = summarize(s); return `${formatUs(m.median)} / ${formatUs(m.p99)}`; };
        const perVerify = cpuUs / (ROUNDS * (ITER + Math.ceil(ITER / 10)));
        console.log(`N=${n}: verify ${f(v)} (round medians ${med.join(', ')}; CPU ${formatUs(perVerify)} a verify); getChain ${f(c)}; listRules(4) ${f(r)}  [median / p99, ${ROUNDS}×${ITER}]`);
      } finally {
        d.close();
      }
    });
  }
  console.log(`loadavg ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
