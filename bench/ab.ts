/**
 * Interleaved A/B of two builds of the addon in one process, on the same
 * namespace: the filtered 4-rule dump (S1's listRules) and the S3 10,000-rule
 * commit, alternating blocks between the builds so that load drift on a
 * shared machine hits both alike. CPU is the process's user+system time.
 *
 *   npx tsx bench/ab.ts A.node B.node [--blocks 10]
 */
import { createRequire } from 'node:module';
import { NetlinkError } from '../src/base/errors.js';
import { ownedSetup, OWNED } from '../test/netlink/fixtures.js';
import { withBenchNetns } from './lib/netns.js';
import { parseArgs } from './lib/args.js';

const require = createRequire(import.meta.url);
const cli = parseArgs(import.meta.url, { '--blocks': 1 }, { positional: 2, usage: 'ab.ts A.node B.node [--blocks 10]' });
const [pathA, pathB] = cli.positional;
if (!pathA || !pathB) throw new Error('usage: ab.ts A.node B.node');
const BLOCKS = Number(cli.value('--blocks') || 10);

type Native = { commit(ops: unknown[], gen?: number): Promise<void>; dump(...a: unknown[]): Promise<unknown[]>; close(): void };
function load(path: string): new (ns: string) => Native {
  const addon = require(path) as { init(e: unknown): void; NftSocket: new (ns: string) => Native };
  addon.init(NetlinkError);
  return addon.NftSocket;
}

const hex = (a: string): string => Buffer.from(a.split('.').map(Number)).toString('hex');
function s3(v: number): unknown[] {
  const family = 'ip';
  const ops: unknown[] = [{ verb: 'delete', object: 'table', family, name: 'ab' }, { verb: 'add', object: 'table', family, name: 'ab' }];
  for (let o = 0; o < 1000; o++) ops.push({ verb: 'add', object: 'chain', family, table: 'ab', name: `own-${o}` });
  for (let o = 0; o < 1000; o++) for (let r = 0; r < 10; r++) ops.push({ verb: 'add', object: 'rule', family, table: 'ab', chain: `own-${o}`, exprs: [
    { kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'eq', data: hex(`10.${o >> 8}.${o & 255}.${r + 1}`) },
    { kind: 'payload', base: 'network', offset: 16, len: 4, dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'eq', data: hex(`10.${200 + v}.0.${r + 1}`) },
    { kind: 'immediate', dreg: 0, verdict: 'accept' }] });
  return ops;
}

const median = (v: number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;

await withBenchNetns('ab', async (ns) => {
  const socks = [new (load(pathA))(ns.path), new (load(pathB))(ns.path)];
  await socks[0]!.commit(ownedSetup());
  await socks[0]!.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'ab' }]);
  const res = socks.map(() => ({ dumpWall: [] as number[], dumpCpu: [] as number[], commitWall: [] as number[], commitCpu: [] as number[] }));
  const DUMPS = 2000;
  let v = 0;
  for (let b = 0; b < BLOCKS; b++) {
    for (let k = 0; k < 2; k++) {
      const s = socks[(b + k) % 2]!, r = res[(b + k) % 2]!;
      for (let i = 0; i < 200; i++) await s.dump('rule', OWNED.family, OWNED.table, OWNED.chain, false);
      let c0 = process.cpuUsage(), t0 = performance.now();
      for (let i = 0; i < DUMPS; i++) await s.dump('rule', OWNED.family, OWNED.table, OWNED.chain, false);
      let c = process.cpuUsage(c0);
      r.dumpWall.push((performance.now() - t0) * 1000 / DUMPS);
      r.dumpCpu.push((c.user + c.system) / DUMPS);
      const ops = s3(v++ & 1);
      c0 = process.cpuUsage(); t0 = performance.now();
      await s.commit(ops);
      c = process.cpuUsage(c0);
      r.commitWall.push(performance.now() - t0);
      r.commitCpu.push((c.user + c.system) / 1000);
    }
  }
  for (const [i, r] of res.entries()) {
    console.log(`${i === 0 ? 'A' : 'B'} ${[pathA, pathB][i]}: 4-rule dump median wall ${median(r.dumpWall).toFixed(1)} µs, cpu ${median(r.dumpCpu).toFixed(1)} µs; ` +
      `10k-rule replace median wall ${median(r.commitWall).toFixed(1)} ms, cpu ${median(r.commitCpu).toFixed(1)} ms  [${BLOCKS} blocks]`);
  }
  for (const s of socks) s.close();
});
