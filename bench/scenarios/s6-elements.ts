/**
 * S6's element columns, also run by bench/sets.ts: a kube-proxy-like
 * verdict map of N elements (`ipv4_addr . inet_proto . inet_service : goto
 * svc-K`) kept by the keeper as its own process (bench/s6-keeper.ts, the
 * table as an .nft config), in a namespace the caller made.
 *
 * - one-element repair, from OUTSIDE: bench/probe.ts's ElementRepairProbe,
 *   with its own socket, deletes one element (a different one each sample)
 *   and waits on the nftables multicast group for the keeper's commit adding
 *   it back; the element in that notification must be the deleted one, and
 *   the map is read back at the end;
 * - one desired change of one element: the keeper is told on stdin to apply
 *   the other of two precompiled configs (element 1 jumps to svc-0 instead of
 *   svc-1), timed from the command to its commit seen on the multicast group,
 *   beside the keeper's own figure for its commit (request → commit done);
 * - beside them, same map: `nft add element` and `nft delete element` execs,
 *   and the kernel's floor (one socket deletes an element and adds it back,
 *   two commits).
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Batch } from '../../src/netlink/batch.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { open } from '../../src/netlink/socket.js';
import { summarize, type Summary } from '../lib/stats.js';
import { probeElementRepairs } from '../probe.js';

export interface S6ElementRow {
  elements: number;
  /** From outside: probe deletion committed → the keeper's commit adding it back, seen on the multicast group (µs). */
  repair: Summary;
  /** A one-element desired change: the command to the keeper → its commit seen on the multicast group. */
  change: Summary;
  /** The same change as the keeper times its commit (the reload's request → commit done). */
  changeCommit: Summary;
  changeOps: number;
  nftAddElement: Summary;
  nftDeleteElement: Summary;
  /** One socket deletes one element and adds it back: two commits. */
  kernelFloor: Summary;
  /** 1-minute load average before and after the keeper's part. */
  load: [number, number];
}

export interface S6ElementOptions {
  netns: string;
  /** Runs a program in the namespace. */
  exec: (cmd: string, args: string[], input?: string) => string;
  /** A directory for the two config files. */
  dir: string;
  elements: number;
  chains?: number;
  repairs: number;
  changes: number;
  execs: number;
  gapMs: number;
  log?: (msg: string) => void;
}

const TABLE = 'kp';
const MAP = 'service-ips';
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const keyText = (i: number) => `${ip(i)} . tcp . ${80 + (i % 3)}`;

/** The table as nft's file; `changed`: element 1 jumps to svc-0 instead of svc-1. */
export function kpNft(n: number, chains: number, changed = false): string {
  const lines = [`table ip ${TABLE} {`];
  for (let c = 0; c < chains; c++) lines.push(`\tchain svc-${c} {`, '\t}');
  lines.push(`\tmap ${MAP} {`, '\t\ttype ipv4_addr . inet_proto . inet_service : verdict', '\t\telements = {');
  for (let i = 0; i < n; i++) lines.push(`\t\t\t${keyText(i)} : goto svc-${changed && i === 1 ? 0 : i % chains},`);
  lines.push('\t\t}', '\t}', '}');
  return lines.join('\n') + '\n';
}

const us = (t0: number) => (performance.now() - t0) * 1000;

export async function runS6Elements(o: S6ElementOptions): Promise<S6ElementRow> {
  const chains = o.chains ?? Math.min(100, Math.max(2, o.elements));
  const config = join(o.dir, `kp-${o.elements}.nft`);
  const alt = join(o.dir, `kp-${o.elements}-changed.nft`);
  writeFileSync(config, kpNft(o.elements, chains));
  writeFileSync(alt, kpNft(o.elements, chains, true));
  const load0 = loadavg()[0]!;
  const child = spawn(process.execPath, ['--import', 'tsx', join(PROJECT_ROOT, 'bench', 's6-keeper.ts'),
    '--netns', o.netns, '--config', config, '--alt-config', alt], { stdio: ['pipe', 'pipe', 'inherit'], cwd: PROJECT_ROOT });
  const exited = new Promise((r) => child.on('exit', r));
  const lines: string[] = [];
  let onLine: ((l: string) => void) | undefined;
  createInterface({ input: child.stdout! }).on('line', (l) => { lines.push(l); onLine?.(l); });
  const waitLine = (re: RegExp, timeoutMs: number) => new Promise<string>((resolve, reject) => {
    const take = (l: string) => { lines.splice(lines.indexOf(l), 1); resolve(l); };
    const seen = lines.find((l) => re.test(l));
    if (seen) { take(seen); return; }
    const t = setTimeout(() => reject(new Error(`the S6 element keeper did not print ${re} within ${timeoutMs} ms`)), timeoutMs);
    onLine = (l) => {
      if (!re.test(l)) return;
      clearTimeout(t);
      onLine = undefined;
      take(l);
    };
    void exited.then(() => reject(new Error('the S6 element keeper exited')));
  });
  let repair: Summary;
  const outside: number[] = [];
  const commit: number[] = [];
  let changeOps = 0;
  try {
    await waitLine(/^ready$/, 600_000);
    await waitLine(/^followed exact$/, 600_000);
    const big = o.elements >= 100_000;
    repair = (await probeElementRepairs({ netns: o.netns, family: 'ip', table: TABLE, set: MAP }, o.repairs, o.gapMs,
      { warmup: Math.min(3, o.repairs), timeoutMs: big ? 120_000 : 30_000 })).summary;
    o.log?.(`    ${o.elements.toLocaleString('en-US')} elements: one-element repair from outside p50 ${(repair.median / 1000).toFixed(3)} ms, ` +
      `p99 ${(repair.p99 / 1000).toFixed(3)} ms (${repair.n} samples)`);

    const sock = open({ netns: o.netns });
    let seen: ((at: number) => void) | undefined;
    const mon = new Monitor({ netns: o.netns, tables: [{ family: 'ip', name: TABLE }], ignorePorts: [sock.portId],
      onBatch: (b) => { if (b.events.some((e) => e.type === 'newsetelem' && e.name === MAP)) seen?.(performance.now()); } });
    try {
      for (let k = 0; k < o.changes + 1; k++) {
        const committed = new Promise<number>((resolve) => { seen = resolve; });
        const t0 = performance.now();
        child.stdin!.write('swap\n');
        const line = await waitLine(/^(changed|refused) /, big ? 120_000 : 30_000);
        if (line.startsWith('refused')) throw new Error(`the keeper refused the change: ${line}`);
        const at = await committed;
        const [, , ops, c] = line.split(' ');
        if (k > 0) {  // the first is a warm-up
          outside.push((at - t0) * 1000);
          commit.push(Number(c) * 1000);
          changeOps = Number(ops);
        }
        await new Promise((r) => setTimeout(r, o.gapMs));
      }
    } finally {
      mon.close();
      sock.close();
    }
    o.log?.(`    ${o.elements.toLocaleString('en-US')} elements: one-element desired change p50 ${(summarize(outside).median / 1000).toFixed(3)} ms from outside, ` +
      `its commit ${(summarize(commit).median / 1000).toFixed(3)} ms (${changeOps} ops)`);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  const load1 = loadavg()[0]!;

  // Beside it, the same map with nobody keeping it: exec drivers and the kernel's floor.
  const nftAdd: number[] = [];
  const nftDel: number[] = [];
  for (let r = 0; r < o.execs; r++) {
    const i = (2 + r * 104_729) % o.elements;
    const t0 = performance.now();
    o.exec('nft', ['delete', 'element', 'ip', TABLE, MAP, `{ ${keyText(i)} }`]);
    nftDel.push(us(t0));
    const t1 = performance.now();
    o.exec('nft', ['add', 'element', 'ip', TABLE, MAP, `{ ${keyText(i)} : goto svc-${i % chains} }`]);
    nftAdd.push(us(t1));
  }
  const sock = open({ netns: o.netns });
  const floor: number[] = [];
  try {
    const where = { family: 'ip' as const, table: TABLE, set: MAP };
    const some = (await sock.listElements(where)).slice(0, 64);
    for (let r = 0; r < Math.max(o.execs, 20); r++) {
      const e = some[r % some.length]!;
      const t0 = performance.now();
      await sock.commit(new Batch().delete('element', { ...where, elements: [{ key: e.key, flags: 0 }] }));
      await sock.commit(new Batch().add('element', { ...where, elements: [e] }));
      floor.push(us(t0));
    }
    if ((await sock.listElements(where)).length !== o.elements) throw new Error('S6 elements: the exec runs did not restore the map');
    await sock.commit(new Batch().delete('table', { family: 'ip', name: TABLE }));
  } finally {
    sock.close();
  }
  const row: S6ElementRow = {
    elements: o.elements, repair: repair!, change: summarize(outside), changeCommit: summarize(commit), changeOps,
    nftAddElement: summarize(nftAdd), nftDeleteElement: summarize(nftDel), kernelFloor: summarize(floor), load: [load0, load1],
  };
  o.log?.(`    ${o.elements.toLocaleString('en-US')} elements: nft add element ${(row.nftAddElement.median / 1000).toFixed(1)} ms, ` +
    `nft delete element ${(row.nftDeleteElement.median / 1000).toFixed(1)} ms, kernel floor ${(row.kernelFloor.median / 1000).toFixed(3)} ms`);
  return row;
}
