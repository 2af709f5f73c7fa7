/**
 * S1 steady-state check: the desired set is installed, nothing changes, each
 * driver checks again and again. Per check: wall time (median, p99) and CPU.
 */
import { spawnSync } from 'node:child_process';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { run, runOk } from '../lib/exec.js';
import { measureCalls, type Budget, type Measurement } from '../lib/measure.js';
import type { Driver } from '../drivers/types.js';
import { NativeDriver } from '../drivers/native.js';
import { IptablesCheckDriver } from '../drivers/iptables-check.js';
import { IptablesRestoreDriver } from '../drivers/iptables-restore.js';
import { NftExecDriver } from '../drivers/nft-exec.js';
import { IPT_CHAIN } from '../drivers/flannel.js';
import { open } from '../../src/index.js';
import { foreignCount, foreignRestore, type Layout } from './foreign.js';

export interface S1Row {
  layout: Layout;
  n: number;
  foreignRules: number;
  driver: string;
  describe: string;
  forksPerCheck: number;
  m: Measurement;
}

export interface S1Case {
  layout: Layout;
  n: number;
  foreignRules: number;
  loadMs: number;
  /** `ip netns exec NS true`: the part of every exec driver's fork that is the namespace switch. */
  execFloor: Measurement;
  /** spawnSync('true') without the namespace switch: this Node process's fork+exec+wait alone. */
  spawnFloor: Measurement;
  rows: S1Row[];
}

export interface S1Options {
  native: Budget;
  nativeVerify: Budget;
  exec: Budget;
  /**
   * For 100,000 foreign rules, where one iptables-nft-save takes a minute: install
   * only (no damage-and-repair round, no second in-sync pass; the first timed
   * check must still answer "in sync" or the run fails), and iptables-restore
   * uses the chain iptables-check installed (they keep the same one).
   */
  light?: boolean;
  log: (msg: string) => void;
}

function makeDrivers(ns: BenchNetns): Driver[] {
  return [
    new NativeDriver(ns, 'tick'),
    new NativeDriver(ns, 'verify'),
    new IptablesCheckDriver(ns, 'nft'),
    new IptablesRestoreDriver(ns),
    new NftExecDriver(ns),
    new IptablesCheckDriver(ns, 'legacy'),
  ];
}

/** Install, then prove each driver sees a deletion and repairs it; throws otherwise. */
async function selfTest(d: Driver): Promise<void> {
  await d.repair();
  if (!(await d.check())) throw new Error(`${d.name}: not in sync right after repair`);
  await d.damage();
  if (await d.check()) throw new Error(`${d.name}: did not notice a deleted rule`);
  await d.repair();
  if (!(await d.check())) throw new Error(`${d.name}: not in sync after the second repair`);
}

export async function runS1Case(layout: Layout, n: number, o: S1Options): Promise<S1Case> {
  return withBenchNetns(`s1${layout}-${n}`, async (ns) => {
    const t0 = Date.now();
    if (n > 0) {
      const text = foreignRestore(layout, n);
      runOk(ns, 'iptables-nft-restore', ['--noflush'], text);
      runOk(ns, 'iptables-legacy-restore', ['--noflush'], text);
    }
    const loadMs = Date.now() - t0;
    const drivers = makeDrivers(ns);
    try {
      // Native tick and verify share one table; the second install is a no-op rewrite.
      for (const d of drivers) {
        if (!o.light) await selfTest(d);
        else if (!(d instanceof IptablesRestoreDriver)) await d.repair();
        o.log(`    ${d.name}: ${o.light ? 'installed' : 'self-test passed'}`);
        await yieldToLoop();
      }
      // Everything installed: every driver must now agree that it is in sync.
      if (!o.light) for (const d of drivers) if (!(await d.check())) throw new Error(`${d.name}: out of sync after setup`);
      const execFloor = await measureCalls(async () => run(ns, 'true', []).status === 0, o.exec);
      const spawnFloor = await measureCalls(async () => spawnSync('true').status === 0, o.exec);
      const rows: S1Row[] = [];
      for (const d of drivers) {
        const budget = d.name === 'native tick' ? o.native : d.name === 'native verify' ? o.nativeVerify : o.exec;
        const m = await measureCalls(() => d.check(), budget);
        o.log(`    ${d.name.padEnd(24)} median ${fmt(m.median)}  p99 ${fmt(m.p99)}  cpu ${fmt(m.cpuUs)}  (${m.n} checks)`);
        rows.push({ layout, n, foreignRules: foreignCount(layout, n), driver: d.name, describe: d.describe, forksPerCheck: d.forksPerCheck, m });
      }
      // The foreign rules are still all there (nobody's driver touched them): every nat rule but
      // the owned chain's and the jump to it. Not at 100,000, where the whole-table dump takes half a minute.
      if (n > 0 && !o.light) {
        const sock = open({ netns: ns.path });
        try {
          const nat = await sock.listRules({ family: 'ip', table: 'nat' });
          const count = nat.filter((r) => r.chain !== IPT_CHAIN
            && !r.exprs.some((e) => e.kind === 'immediate' && e.chain === IPT_CHAIN)).length;
          if (count !== foreignCount(layout, n)) throw new Error(`foreign rules changed: ${count} != ${foreignCount(layout, n)}`);
        } finally {
          sock.close();
        }
      }
      return { layout, n, foreignRules: foreignCount(layout, n), loadMs, execFloor, spawnFloor, rows };
    } finally {
      for (const d of drivers) d.close();
    }
  });
}

function fmt(us: number): string {
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`.padStart(9);
  if (us >= 1000) return `${(us / 1000).toFixed(2)} ms`.padStart(9);
  return `${us.toFixed(1)} µs`.padStart(9);
}
