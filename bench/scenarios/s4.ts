/**
 * S4, the daemon itself: `nfkeeper run` as its own process at 1 Hz in a
 * namespace with N foreign rules (layout a). CPU share and peak RSS from /proc
 * while idle; then under a storm of foreign rule changes in another table
 * (does it keep up, does it wake for nothing?); then while a hostile neighbour
 * deletes its rule every 10 ms (does the back-off bound its CPU, are the rules
 * back afterwards?).
 *
 * CPU = the daemon's time on a CPU, all its threads (/proc/PID/task/TID/schedstat, nanoseconds;
 * utime + stime counted 10 ms clock ticks, two to six over an idle phase) / wall time, one core =
 * 100 %. RSS peak = VmHWM.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { Batch, open } from '../../src/index.js';
import { withBenchNetns } from '../lib/netns.js';
import { runOk } from '../lib/exec.js';
import { foreignCount, foreignRestore } from './foreign.js';
import { recordArgs } from '../lib/record.js';

const WHERE = { family: 'ip' as const, table: 'nfkeeper', chain: 'postrouting' };

export interface S4Phase {
  seconds: number;
  cpuPercent: number;
  /** The daemon's CPU time over the phase, ms (all threads, ns resolution). */
  cpuMs: number;
  rssPeakMiB: number;
  repairs: number;
  /** Change-notification batches that reached JavaScript. */
  eventWakeups: number;
}

export interface S4Row {
  n: number;
  /** Peak RSS of a bare `node` process idling in a timer, measured in the same run: Node's own floor. */
  nodeBaselineMiB: number;
  foreignRules: number;
  idle: S4Phase;
  storm: S4Phase & { foreignChangesPerSec: number; missedRepair: boolean };
  hostile: S4Phase & { deletions: number; backAfterMs: number };
}

export interface S4Options {
  sizes: number[];
  idleSeconds: (n: number) => number;
  stormSeconds: number;
  settleSeconds: number;
  log: (msg: string) => void;
}

/** VmHWM of `node -e` that only waits: what Node 20 itself costs before any module. */
async function nodeBaselineMiB(): Promise<number> {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 3000)'], { stdio: 'ignore' });
  const exited = new Promise((r) => child.on('exit', r));
  await sleep(1500);
  const kib = rssPeakKiB(child.pid!);
  await exited;
  return kib / 1024;
}

/** Every thread's time on a CPU so far, ns (a thread that ended meanwhile takes its time with it). */
function cpuNs(pid: number): number {
  return readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
    try {
      return sum + Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      return sum;
    }
  }, 0);
}
function rssPeakKiB(pid: number): number {
  return Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}
function repairs(metrics: string): number {
  return [...metrics.matchAll(/^nfkeeper_repairs_total\{[^}]*\} (\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
}
const eventBatches = (m: string) => Number(/^nfkeeper_event_batches_total (\d+)/m.exec(m)?.[1] ?? 0);

export async function runS4(o: S4Options): Promise<S4Row[]> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-s4-'));
  const configFile = join(dir, 'flannel.yaml');
  writeFileSync(configFile, readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml')));
  const out: S4Row[] = [];
  const baseline = await nodeBaselineMiB();
  try {
    for (const n of o.sizes) {
      await withBenchNetns(`s4-${n}`, async (ns) => {
        if (n > 0) runOk(ns, 'iptables-nft-restore', ['--noflush'], foreignRestore('a', n));
        const port = 19000 + (process.pid % 1000);
        const child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', configFile,
          '--netns', ns.path, ...recordArgs(PROJECT_ROOT, ns), '--interval', '1s', '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn'], { stdio: 'ignore' });
        const exited = new Promise((r) => child.on('exit', r));
        const metrics = async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        const sock = open({ netns: ns.path });
        try {
          let ready = false;
          for (let i = 0; i < 100 && !ready; i++) {
            await sleep(100);
            ready = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false);
          }
          if (!ready) throw new Error('nfkeeper run did not become ready in 10 s');
          // The example's chain as installed (its rule count is the example's, not a constant here).
          const owned = (await sock.listRules(WHERE)).length;
          const phase = async (seconds: number, during?: () => Promise<void>): Promise<S4Phase> => {
            const m0 = await metrics();
            const c0 = cpuNs(child.pid!);
            const t0 = Date.now();
            await (during ? Promise.race([during(), sleep(seconds * 1000)]) : sleep(seconds * 1000));
            const wall = (Date.now() - t0) / 1000;
            // CPU before the closing scrape: serving /metrics is ours, not the daemon's idle cost.
            const c1 = cpuNs(child.pid!);
            const m1 = await metrics();
            return {
              seconds: wall, cpuPercent: ((c1 - c0) / 1e9 / wall) * 100, cpuMs: (c1 - c0) / 1e6, rssPeakMiB: rssPeakKiB(child.pid!) / 1024,
              repairs: repairs(m1) - repairs(m0), eventWakeups: eventBatches(m1) - eventBatches(m0),
            };
          };
          // Let start-up (JIT, the first collections) settle before measuring idle.
          await sleep(o.settleSeconds * 1000);
          const idleS = o.idleSeconds(n);
          o.log(`    N = ${n.toLocaleString('en-US')}: idle ${idleS} s`);
          const idle = await phase(idleS);

          o.log(`    N = ${n.toLocaleString('en-US')}: foreign storm ${o.stormSeconds} s`);
          let changes = 0;
          let stop = false;
          await sock.commit(new Batch().add('table', { family: 'ip', name: 'storm' }).add('chain', { family: 'ip', table: 'storm', name: 'c' }));
          const storm = async () => {
            while (!stop) {
              const b = new Batch().flush('chain', { family: 'ip', table: 'storm', name: 'c' });
              for (let i = 0; i < 100; i++) b.add('rule', { family: 'ip', table: 'storm', chain: 'c', exprs: [{ kind: 'counter' }] });
              await sock.commit(b);
              changes += 200;  // 100 deletions by the flush (after the first), 100 additions
              await sleep(10);
            }
          };
          const stormLoop = storm();
          const stormPhase = await phase(o.stormSeconds);
          stop = true;
          await stormLoop;
          // One real tampering after the storm: it must still be repaired.
          const rules = await sock.listRules(WHERE);
          await sock.commit(new Batch().delete('rule', { ...WHERE, handle: rules[0]!.handle! }));
          await sleep(300);
          const missedRepair = (await sock.listRules(WHERE)).length !== owned;

          o.log(`    N = ${n.toLocaleString('en-US')}: hostile neighbour (a deletion every 10 ms) ${o.stormSeconds} s`);
          let deletions = 0;
          stop = false;
          const hostile = async () => {
            while (!stop) {
              const r = await sock.listRules(WHERE);
              if (r[1]) {
                await sock.commit(new Batch().delete('rule', { ...WHERE, handle: r[1].handle! })).then(() => deletions++, () => undefined);
              }
              await sleep(10);
            }
          };
          const hostileLoop = hostile();
          const hostilePhase = await phase(o.stormSeconds);
          stop = true;
          await hostileLoop;
          const tStop = Date.now();
          let backAfterMs = -1;
          while (Date.now() - tStop < 15_000) {
            if ((await sock.listRules(WHERE)).length === owned) {
              backAfterMs = Date.now() - tStop;
              break;
            }
            await sleep(5);
          }
          const row: S4Row = {
            n, nodeBaselineMiB: baseline, foreignRules: foreignCount('a', n), idle,
            storm: { ...stormPhase, foreignChangesPerSec: changes / stormPhase.seconds, missedRepair },
            hostile: { ...hostilePhase, deletions, backAfterMs },
          };
          o.log(`      idle ${idle.cpuPercent.toFixed(3)} %, RSS ${idle.rssPeakMiB.toFixed(1)} MiB; storm ${stormPhase.cpuPercent.toFixed(2)} % ` +
            `(${Math.round(row.storm.foreignChangesPerSec)} changes/s, ${stormPhase.eventWakeups} wake-ups, repair after: ${missedRepair ? 'MISSED' : 'ok'}); ` +
            `hostile ${hostilePhase.cpuPercent.toFixed(2)} %, back after ${backAfterMs} ms`);
          out.push(row);
        } finally {
          sock.close();
          child.kill('SIGTERM');
          await exited;
        }
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}
