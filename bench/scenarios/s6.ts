/**
 * S6 owned-rule scaling: one owned chain of N rules.
 *
 * - install: an in-process Keeper's start() into an empty namespace (observe,
 *   plan, one commit, the verify pass), N rules compiled beforehand;
 * - one-rule repair, measured from OUTSIDE the keeper: the keeper runs as its
 *   own process (bench/s6-keeper.ts), and bench/probe.ts's RepairProbe, with
 *   its own socket, deletes the middle rule and waits on the nftables
 *   multicast group for the keeper's commit that puts it back; the chain is
 *   read back after every sample;
 * - one desired change: an in-process Keeper's setConfig() with one rule in
 *   the middle changed (alternating two precompiled configs), including its
 *   verify pass;
 * - after them, in the same run and namespace, each on its own table and alone
 *   in the namespace (the keeper's table and every other driver's removed first:
 *   nft reads what a namespace holds into its cache, so a table left beside it
 *   would be timed too): one `nft add rule … position H` exec putting one
 *   deleted rule back, `nft -f` of a flush-and-rewrite of the chain
 *   (kube-proxy's full sync), and `iptables-nft-restore --noflush` with one
 *   `-I CHAIN K`;
 * - the kernel's floor for the probe's sample: one socket deleting the middle
 *   rule and re-adding it at its position, two commits back to back (every
 *   commit that touches a chain rebuilds that chain's rule blob, so each costs
 *   time linear in the chain's rules, whoever sends it);
 * - the element columns, with a verdict map of N elements instead of the
 *   chain (bench/scenarios/s6-elements.ts): one-element repair from outside,
 *   one desired change of one element, `nft add/delete element` execs.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseConfig, type Config } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { Batch } from '../../src/netlink/batch.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { summarize, type Summary } from '../lib/stats.js';
import { probeRepairs } from '../probe.js';
import { runS6Elements, type S6ElementRow } from './s6-elements.js';

export interface S6Row {
  n: number;
  install: Summary;
  installOps: number;
  /** From outside: probe deletion committed → keeper's commit seen on the multicast group. */
  repair: Summary;
  change: Summary;
  changeOps: number;
  nftPosition: Summary;
  nftRewrite: Summary;
  iptRestoreInsert: Summary;
  /**
   * The kernel's own floor for what the probe times: one socket commits the deletion of the middle
   * rule and then its re-add at its position (two commits, each rebuilding the chain's rule blob).
   */
  kernelFloor?: Summary;
  /** The same N as elements of a verdict map (s6-elements.ts). */
  elements?: S6ElementRow;
}

export interface S6Options {
  sizes: number[];
  reps: (n: number) => { install: number; repair: number; change: number; exec: number; gapMs: number };
  log: (msg: string) => void;
}

const TABLE = 'nfk-s6';
const CHAIN = 'owned';
const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const ruleText = (i: number, changed = false) => `ip saddr ${addr(i)} ip daddr ${changed ? '192.0.2.2' : '192.0.2.1'} return`;

/** S6's owned chain of n rules as a YAML config (rule `changedAt` with another daddr); also bench/repair-trace.ts's. */
export function s6Yaml(n: number, changedAt = -1, table = TABLE): string {
  const rules = Array.from({ length: n }, (_, i) => `          - ${ruleText(i, i === changedAt)}`).join('\n');
  return `tables:
  - family: ip
    name: ${table}
    chains:
      - name: ${CHAIN}
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
${rules}
`;
}

const us = (t0: number) => (performance.now() - t0) * 1000;

function execUs(ns: BenchNetns, cmd: string, args: string[], input?: string): number {
  const t0 = performance.now();
  ns.exec(cmd, args, input);
  return us(t0);
}

async function deleteMiddle(sock: NftSocket, family: 'ip', table: string, chain: string): Promise<{ prev: number; index: number }> {
  const rules = await sock.listRules({ family, table, chain });
  const index = rules.length >> 1;
  await sock.commit(new Batch().delete('rule', { family, table, chain, handle: rules[index]!.handle! }));
  return { prev: rules[index - 1]?.handle ?? 0, index };
}

async function count(sock: NftSocket, table: string, chain: string): Promise<number> {
  return (await sock.listRules({ family: 'ip', table, chain })).length;
}

export async function runS6(o: S6Options): Promise<S6Row[]> {
  const out: S6Row[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'nfk-s6-'));
  try {
    for (const n of o.sizes) {
      const reps = o.reps(n);
      const c0: Config = parseConfig(s6Yaml(n));
      const c1: Config = parseConfig(s6Yaml(n, n >> 1));
      const configFile = join(dir, `s6-${n}.yaml`);
      writeFileSync(configFile, s6Yaml(n));
      await withBenchNetns(`s6-${n}`, async (ns) => {
        const sock = open({ netns: ns.path });
        try {
          // install and one desired change, in process
          const installs: number[] = [];
          const changes: number[] = [];
          let installOps = 0;
          let changeOps = 0;
          for (let r = 0; r < reps.install; r++) {
            if (await sock.getTable('ip', TABLE)) await sock.commit(new Batch().delete('table', { family: 'ip', name: TABLE }));
            const keeper = new Keeper({ config: c0, netns: ns.path, intervalMs: 3_600_000, fight: { threshold: 1e9 } });
            keeper.on('repaired', (x: RepairReport) => { if (x.cause === 'startup') installOps = x.ops; });
            const t0 = performance.now();
            await keeper.start();
            installs.push(us(t0));
            if (r === reps.install - 1) {
              keeper.on('repaired', (x: RepairReport) => { if (x.cause === 'reload') changeOps = x.ops; });
              for (let k = 0; k < reps.change + 1; k++) {
                const t1 = performance.now();
                await keeper.setConfig(k % 2 === 0 ? c1 : c0);
                if (k > 0) changes.push(us(t1));  // the first is a warm-up
              }
              await keeper.setConfig(c0);
            }
            await keeper.stop();
          }
          if (await count(sock, TABLE, CHAIN) !== n) throw new Error('S6: install left the wrong rule count');
          o.log(`    N = ${n.toLocaleString('en-US')}: install ${(summarize(installs).median / 1000).toFixed(2)} ms (${installOps} ops), ` +
            `one change ${(summarize(changes).median / 1000).toFixed(2)} ms (${changeOps} ops)`);

          // one-rule repair, from outside the keeper process
          const child = spawn(process.execPath, ['--import', 'tsx', join(PROJECT_ROOT, 'bench', 's6-keeper.ts'),
            '--netns', ns.path, '--config', configFile], { stdio: ['ignore', 'pipe', 'inherit'], cwd: PROJECT_ROOT });
          const exited = new Promise((r) => child.on('exit', r));
          let repair: Summary;
          try {
            const lines = createInterface({ input: child.stdout! });
            // The deadline's timer is cleared once the keeper is ready: left pending, it kept the run alive 2 minutes after its end.
            const deadline = new AbortController();
            await Promise.race([
              new Promise<void>((resolve) => lines.on('line', (l) => { if (l === 'ready') resolve(); })),
              exited.then(() => { throw new Error('S6 keeper exited before it was ready'); }),
              sleep(120_000, undefined, { signal: deadline.signal }).then(() => { throw new Error('S6 keeper not ready in 120 s'); }, () => undefined),
            ]).finally(() => deadline.abort());
            const probed = await probeRepairs({ netns: ns.path, family: 'ip', table: TABLE, chain: CHAIN },
              reps.repair, reps.gapMs, { warmup: Math.min(n >= 100_000 ? 2 : 5, reps.repair), timeoutMs: n >= 100_000 ? 120_000 : 10_000 });
            repair = probed.summary;
          } finally {
            child.kill('SIGTERM');
            await exited;
          }
          o.log(`    N = ${n.toLocaleString('en-US')}: one-rule repair from outside p50 ${(repair.median / 1000).toFixed(3)} ms, ` +
            `p99 ${(repair.p99 / 1000).toFixed(3)} ms (${repair.n} samples)`);

          // exec drivers on their own tables, each alone in the namespace
          await sock.commit(new Batch().delete('table', { family: 'ip', name: TABLE }));
          const nftText = Array.from({ length: n }, (_, i) => `add rule ip cmp c ${ruleText(i)}`).join('\n');
          ns.exec('nft', ['-f', '-'], `add table ip cmp\nadd chain ip cmp c { type nat hook postrouting priority srcnat; }\n${nftText}\n`);
          const floor: number[] = [];
          for (let r = 0; r < Math.max(reps.exec, 10); r++) {
            const rules = await sock.listRules({ family: 'ip', table: 'cmp', chain: 'c' });
            const index = rules.length >> 1;
            const where = { family: 'ip' as const, table: 'cmp', chain: 'c' };
            const t0 = performance.now();
            await sock.commit(new Batch().delete('rule', { ...where, handle: rules[index]!.handle! }));
            await sock.commit(new Batch().add('rule', { ...where, exprs: rules[index]!.exprs, position: rules[index - 1]!.handle! }));
            floor.push(us(t0));
          }
          if (await count(sock, 'cmp', 'c') !== n) throw new Error('S6: the kernel floor run did not restore the chain');
          const nftPosition: number[] = [];
          const nftRewrite: number[] = [];
          const ipt: number[] = [];
          for (let r = 0; r < reps.exec; r++) {
            const { prev, index } = await deleteMiddle(sock, 'ip', 'cmp', 'c');
            nftPosition.push(execUs(ns, 'nft', ['add', 'rule', 'ip', 'cmp', 'c', 'position', String(prev), ...ruleText(index).split(' ')]));
            if (await count(sock, 'cmp', 'c') !== n) throw new Error('S6: nft add rule position did not restore the chain');
          }
          const rewrite = `flush chain ip cmp c\n${nftText}\n`;
          for (let r = 0; r < reps.exec; r++) {
            await deleteMiddle(sock, 'ip', 'cmp', 'c');
            nftRewrite.push(execUs(ns, 'nft', ['-f', '-'], rewrite));
            if (await count(sock, 'cmp', 'c') !== n) throw new Error('S6: nft -f did not restore the chain');
          }
          await sock.commit(new Batch().delete('table', { family: 'ip', name: 'cmp' }));
          const iptRules = Array.from({ length: n }, (_, i) => `-A S6 -s ${addr(i)}/32 -d 192.0.2.1/32 -j RETURN`).join('\n');
          ns.exec('iptables-nft-restore', ['--noflush'], `*nat\n:S6 - [0:0]\n${iptRules}\nCOMMIT\n`);
          for (let r = 0; r < reps.exec; r++) {
            const { index } = await deleteMiddle(sock, 'ip', 'nat', 'S6');
            ipt.push(execUs(ns, 'iptables-nft-restore', ['--noflush'],
              `*nat\n-I S6 ${index + 1} -s ${addr(index)}/32 -d 192.0.2.1/32 -j RETURN\nCOMMIT\n`));
            if (await count(sock, 'nat', 'S6') !== n) throw new Error('S6: iptables-nft-restore did not restore the chain');
          }
          await sock.commit(new Batch().delete('table', { family: 'ip', name: 'nat' }));
          const left = await sock.listTables();
          if (left.length > 0) throw new Error(`S6: tables left before the element columns: ${left.map((t) => t.name).join(', ')}`);
          const row: S6Row = {
            n, install: summarize(installs), installOps, repair, change: summarize(changes), changeOps,
            nftPosition: summarize(nftPosition), nftRewrite: summarize(nftRewrite), iptRestoreInsert: summarize(ipt),
            kernelFloor: summarize(floor),
          };
          o.log(`    N = ${n.toLocaleString('en-US')}: nft add rule position ${(row.nftPosition.median / 1000).toFixed(1)} ms, ` +
            `nft -f rewrite ${(row.nftRewrite.median / 1000).toFixed(1)} ms, iptables-nft-restore -I ${(row.iptRestoreInsert.median / 1000).toFixed(1)} ms, ` +
            `kernel floor (delete + re-add, two commits) ${(row.kernelFloor!.median / 1000).toFixed(2)} ms`);
          row.elements = await runS6Elements({ netns: ns.path, exec: (cmd, args, input) => ns.exec(cmd, args, input), dir,
            elements: n, repairs: reps.repair, changes: reps.change, execs: reps.exec, gapMs: reps.gapMs, log: o.log });
          out.push(row);
        } finally {
          sock.close();
        }
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}
