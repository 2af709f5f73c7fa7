/**
 * S2 detection-to-repair: another process deletes rule 2 of the owned set;
 * how long until the whole ordered set is back (verified)?
 *
 * native: the keeper (src/keeper) with change notifications (its tick an hour
 * long, so only events can trigger the repair) and with events off at a 1 s
 * tick. Fight back-off is disabled: it exists to slow repeated tampering.
 *
 * exec drivers: their peers run check+repair in a loop at a fixed period, so a
 * deletion waits for the next check (uniform in [0, period)) and then costs one
 * check (which now misses) plus one repair. The pure check+repair time is
 * measured here; the period-bound latency is derived from it (mean = period/2 +
 * median, p99 ≈ 0.99 · period + p99), and a few real flannel periods are run to
 * show that the derivation holds.
 *
 * The deletion is committed from a second netlink socket in this process, so
 * the clock starts once the kernel has committed it (a forked tool would add its
 * own start-up). Legacy iptables has no netlink: its deletion is an
 * `iptables-legacy -D` fork, and the clock starts when that fork has returned.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep, setImmediate as yieldToLoop } from 'node:timers/promises';
import { parseConfig } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { Batch, open, type NftSocket } from '../../src/index.js';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { runOk } from '../lib/exec.js';
import { summarize, type Summary } from '../lib/stats.js';
import type { Driver } from '../drivers/types.js';
import { IptablesCheckDriver } from '../drivers/iptables-check.js';
import { IptablesRestoreDriver } from '../drivers/iptables-restore.js';
import { NftExecDriver } from '../drivers/nft-exec.js';
import { canonical, IPT_CHAIN, IPT_JUMP, IPT_RULES, NFT_CHAIN, saveLine } from '../drivers/flannel.js';
import { foreignCount, foreignRestore } from './foreign.js';

/** The loop period each exec driver's peer runs at, and where it is set. */
export const PEER_PERIOD: Record<string, { seconds: number; source: string }> = {
  'iptables-check': { seconds: 5, source: 'flannel `--iptables-resync` (default 5 s)' },
  'iptables-check (legacy)': { seconds: 5, source: 'flannel `--iptables-resync` (default 5 s)' },
  'iptables-restore': { seconds: 90, source: 'Calico felix `iptablesRefreshInterval` (default 90 s)' },
  'nft-exec': { seconds: 30, source: 'kube-proxy `--nftables-sync-period` (default 30 s)' },
};

export interface S2Native {
  n: number;
  foreignRules: number;
  /** Event path: deletion committed → keeper reports the repair committed. */
  event: Summary;
  /** Events off, 1 s tick (period-bound). */
  poll: Summary;
}

export interface S2Exec {
  n: number;
  foreignRules: number;
  driver: string;
  periodS: number;
  /** Pure cost: the check that finds the deletion plus the repair. */
  pure: Summary;
  /** Its two parts, medians in µs. */
  checkUs: number;
  repairUs: number;
  /** Derived, µs: period/2 + pure median, and 0.99 · period + pure p99. */
  derivedMean: number;
  derivedP99: number;
}

/** Real flannel loop at its 5 s period, deletions spread evenly over the period. */
export interface S2RealPeriods {
  n: number;
  driver: string;
  periodS: number;
  /** Deletion committed → the loop's repair done, µs, one per period. */
  samples: number[];
  observedMean: number;
  /** period/2 + the pure median measured in the same run at the same N. */
  derivedMean: number;
}

export interface S2Results {
  native: S2Native[];
  exec: S2Exec[];
  real?: S2RealPeriods;
  skipped: { n: number; drivers: string[]; why: string }[];
}

export interface S2Options {
  sizes: number[];
  eventReps: number;
  pollReps: number;
  /** Pure check+repair repetitions per exec driver; fewer at 100,000 foreign rules. */
  execReps: (n: number) => number;
  /** Exec drivers left out at this N, and why (a round of iptables-restore takes minutes at 100,000). */
  skip: (n: number) => { drivers: string[]; why: string } | undefined;
  /** Real 5 s periods of the flannel loop (0: skip), at the N given. */
  realPeriods: number;
  realAtN: number;
  log: (msg: string) => void;
}

const config = parseConfig(readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml'), 'utf8'));
const KEEPER_TABLE = config.tables[0]!;
const KEEPER_CHAIN = KEEPER_TABLE.chains[0]!;

async function measureNative(netns: string, events: boolean, reps: number): Promise<Summary> {
  const keeper = new Keeper({ config, netns, events, intervalMs: events ? 3_600_000 : 1000, fight: { threshold: 1e9 } });
  const tamper = open({ netns });
  const where = { family: 'ip' as const, table: KEEPER_TABLE.name, chain: KEEPER_CHAIN.name };
  const samples: number[] = [];
  try {
    await keeper.start();
    const warm = events ? 5 : 1;
    for (let i = 0; i < reps + warm; i++) {
      const rules = await tamper.listRules(where);
      const repaired = new Promise<RepairReport>((resolve) => keeper.once('repaired', resolve));
      await tamper.commit(new Batch().delete('rule', { ...where, handle: rules[1]!.handle! }));
      const t0 = performance.now();
      await repaired;
      const t1 = performance.now();
      await keeper.idle();
      const after = await tamper.listRules(where);
      if (after.length !== KEEPER_CHAIN.rules.length) throw new Error(`keeper repair left ${after.length} rules`);
      if (i >= warm) samples.push((t1 - t0) * 1000);
    }
  } finally {
    await keeper.stop();
    tamper.close();
  }
  return summarize(samples);
}

/** Deletes rule 2 of the driver's set "from another process" and returns when it is committed. */
function tamperer(ns: BenchNetns, sock: NftSocket, d: Driver): () => Promise<void> {
  if (d.name === 'iptables-check (legacy)') {
    const r = IPT_RULES[1]!;
    return async () => { runOk(ns, 'iptables-legacy', ['-t', 'nat', '-D', r.chain, ...r.spec, '--wait']); };
  }
  const where = d.name === 'nft-exec'
    ? { family: 'ip' as const, table: 'nfk-flannel-nft', chain: NFT_CHAIN }
    : { family: 'ip' as const, table: 'nat', chain: IPT_CHAIN };
  return async () => {
    const rules = await sock.listRules(where);
    await sock.commit(new Batch().delete('rule', { ...where, handle: rules[1]!.handle! }));
  };
}

/** The owned rules and the jump as the kernel holds them (nft-backed drivers), canonical JSON. */
async function kernelState(sock: NftSocket, d: Driver): Promise<string> {
  if (d.name === 'nft-exec') {
    const rules = await sock.listRules({ family: 'ip', table: 'nfk-flannel-nft', chain: NFT_CHAIN });
    return canonical(rules.map((r) => r.exprs));
  }
  const own = await sock.listRules({ family: 'ip', table: 'nat', chain: IPT_CHAIN });
  const post = await sock.listRules({ family: 'ip', table: 'nat', chain: 'POSTROUTING' });
  const jumps = post.filter((r) => r.exprs.some((e) => e.kind === 'immediate' && e.chain === IPT_CHAIN)).length;
  return canonical({ own: own.map((r) => r.exprs), jumps });
}

/**
 * Untimed, independent of the driver's own check: the full set is back, in
 * order. nft-backed: the kernel's rules (netlink, chain-filtered dumps) equal
 * those right after the first install, which was proven by parsing
 * iptables-nft-save or by the driver's structural check. Legacy: parsed
 * iptables-legacy-save.
 */
async function verifyRestored(ns: BenchNetns, sock: NftSocket, d: Driver, reference: string | undefined): Promise<void> {
  if (d.name !== 'iptables-check (legacy)') {
    if ((await kernelState(sock, d)) !== reference) throw new Error(`${d.name}: repair did not restore the ordered set`);
    return;
  }
  verifySave(ns, d, 'legacy');
}

function verifySave(ns: BenchNetns, d: Driver, backend: 'nft' | 'legacy'): void {
  const chains = IptablesRestoreDriver.parse(runOk(ns, `iptables-${backend}-save`, ['-t', 'nat']));
  const own = chains.get(IPT_CHAIN) ?? [];
  const want = IPT_RULES.map(saveLine);
  const jumps = (chains.get('POSTROUTING') ?? []).filter((l) => l === saveLine(IPT_JUMP)).length;
  if (own.length !== want.length || own.some((l, i) => l !== want[i]) || jumps !== 1) {
    throw new Error(`${d.name}: not the ordered set (${own.length} rules, ${jumps} jumps)`);
  }
}

/** Installs the driver's set, proves it, and returns the kernel's view of it for verifyRestored. */
async function install(ns: BenchNetns, sock: NftSocket, d: Driver, viaSave: boolean): Promise<string | undefined> {
  await d.repair();
  if (!(await d.check())) throw new Error(`${d.name}: not in sync after install`);
  if (d.name === 'iptables-check (legacy)') return undefined;
  if (viaSave && d.name !== 'nft-exec') verifySave(ns, d, 'nft');
  return kernelState(sock, d);
}

async function measureExec(ns: BenchNetns, sock: NftSocket, d: Driver, reps: number, warmup: number, viaSave: boolean): Promise<{ pure: Summary; checkUs: number; repairUs: number }> {
  const del = tamperer(ns, sock, d);
  const samples: number[] = [], checks: number[] = [], repairs: number[] = [];
  const reference = await install(ns, sock, d, viaSave);
  for (let i = 0; i < reps + warmup; i++) {
    await del();
    const t0 = performance.now();
    // What the peer's loop does once its period comes round: check, and on a miss, repair.
    if (await d.check()) throw new Error(`${d.name}: check did not see the deleted rule`);
    const tc = performance.now();
    await d.repair();
    const t1 = performance.now();
    await verifyRestored(ns, sock, d, reference);
    if (i >= warmup) {
      samples.push((t1 - t0) * 1000);
      checks.push((tc - t0) * 1000);
      repairs.push((t1 - tc) * 1000);
    }
    await yieldToLoop();
  }
  return { pure: summarize(samples), checkUs: summarize(checks).median, repairUs: summarize(repairs).median };
}

/**
 * flannel's loop for real: check every period, repair on a miss. Deletion k
 * lands at offset (k + 0.5)/count of period k, so the offsets are spread
 * evenly and the mean wait is period/2 by construction of the schedule, not by luck.
 */
async function realPeriods(ns: BenchNetns, sock: NftSocket, d: Driver, periodS: number, count: number): Promise<number[]> {
  const del = tamperer(ns, sock, d);
  const P = periodS * 1000;
  const reference = await install(ns, sock, d, false);
  const samples: number[] = [];
  let deletedAt: number | undefined;
  const start = performance.now() + 50;
  for (let k = 0; k <= count; k++) {
    const tick = start + k * P;
    await sleep(Math.max(0, tick - performance.now()));
    if (!(await d.check())) {
      await d.repair();
      const done = performance.now();
      if (deletedAt === undefined) throw new Error(`${d.name}: out of sync without a deletion`);
      samples.push((done - deletedAt) * 1000);
      deletedAt = undefined;
      await verifyRestored(ns, sock, d, reference);
    }
    if (k === count) break;
    const at = tick + ((k + 0.5) / count) * P;
    if (performance.now() > at) throw new Error(`${d.name}: the check took longer than the deletion offset`);
    await sleep(at - performance.now());
    await del();
    deletedAt = performance.now();
  }
  return samples;
}

export async function runS2(o: S2Options): Promise<S2Results> {
  const out: S2Results = { native: [], exec: [], skipped: [] };
  for (const n of o.sizes) {
    await withBenchNetns(`s2-${n}`, async (ns) => {
      const skip = o.skip(n);
      if (skip) out.skipped.push({ n, ...skip });
      const skipped = new Set(skip?.drivers ?? []);
      if (n > 0) {
        const text = foreignRestore('a', n);
        runOk(ns, 'iptables-nft-restore', ['--noflush'], text);
        if (!skipped.has('iptables-check (legacy)')) runOk(ns, 'iptables-legacy-restore', ['--noflush'], text);
      }
      o.log(`    N = ${n.toLocaleString('en-US')}: native, event path (${o.eventReps} repairs)`);
      const event = await measureNative(ns.path, true, o.eventReps);
      o.log(`    N = ${n.toLocaleString('en-US')}: native, 1 Hz polling (${o.pollReps} repairs)`);
      const poll = await measureNative(ns.path, false, o.pollReps);
      o.log(`      event median ${(event.median / 1000).toFixed(3)} ms p99 ${(event.p99 / 1000).toFixed(3)} ms; ` +
        `polling median ${(poll.median / 1000).toFixed(1)} ms`);
      out.native.push({ n, foreignRules: foreignCount('a', n), event, poll });

      const sock = open({ netns: ns.path });
      const drivers: Driver[] = [new IptablesCheckDriver(ns, 'nft'), new IptablesRestoreDriver(ns), new NftExecDriver(ns),
        new IptablesCheckDriver(ns, 'legacy')].filter((d) => !skipped.has(d.name));
      try {
        for (const d of drivers) {
          const reps = o.execReps(n);
          const { pure, checkUs, repairUs } = await measureExec(ns, sock, d, reps, n >= 100_000 ? 0 : 1, n < 100_000);
          const period = PEER_PERIOD[d.name]!.seconds;
          out.exec.push({ n, foreignRules: foreignCount('a', n), driver: d.name, periodS: period, pure, checkUs, repairUs,
            derivedMean: (period * 1e6) / 2 + pure.median, derivedP99: 0.99 * period * 1e6 + pure.p99 });
          o.log(`      ${d.name.padEnd(24)} check+repair median ${(pure.median / 1000).toFixed(1)} ms (check ${(checkUs / 1000).toFixed(1)} + repair ${(repairUs / 1000).toFixed(1)})  p99 ${(pure.p99 / 1000).toFixed(1)} ms  (${reps} repairs)`);
        }
        if (o.realPeriods > 0 && n === o.realAtN) {
          const d = drivers[0]!;
          const period = PEER_PERIOD[d.name]!.seconds;
          o.log(`      ${d.name}: ${o.realPeriods} real ${period} s periods (${o.realPeriods * period} s)`);
          const samples = await realPeriods(ns, sock, d, period, o.realPeriods);
          const pure = out.exec.find((x) => x.n === n && x.driver === d.name)!.pure;
          const observedMean = samples.reduce((a, b) => a + b, 0) / samples.length;
          out.real = { n, driver: d.name, periodS: period, samples, observedMean, derivedMean: (period * 1e6) / 2 + pure.median };
          o.log(`      observed mean ${(observedMean / 1e6).toFixed(3)} s, derived ${(out.real.derivedMean / 1e6).toFixed(3)} s`);
        }
      } finally {
        for (const d of drivers) d.close();
        sock.close();
      }
    });
  }
  return out;
}
