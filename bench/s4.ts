/**
 * S4, the daemon itself (issue 7): `nfkeeper run` at 1 Hz in a namespace with
 * N foreign rules. Measures its CPU share and peak RSS from /proc while idle,
 * then under a storm of foreign rule changes in another table (does it keep
 * up, does it wake for nothing?), then while a hostile neighbour deletes its
 * rule every 10 ms (does the back-off bound its CPU, are the rules back after?).
 *   npx tsx bench/s4.ts [--seconds 20] [--full]
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../src/netlink/native.js';
import { Batch, open } from '../src/index.js';
import { withBenchNetns } from './lib/netns.js';
import { foreignRestore } from './scenarios/foreign.js';

const full = process.argv.includes('--full');
const secondsArg = process.argv.indexOf('--seconds');
const SECONDS = secondsArg >= 0 ? Number(process.argv[secondsArg + 1]) : full ? 60 : 20;
const SIZES = full ? [0, 10_000, 100_000] : [0, 10_000];
const CLK_TCK = 100;

function cpuTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(f[11]) + Number(f[12]);  // utime + stime
}
function rssPeakKiB(pid: number): number {
  return Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}
function repairs(metrics: string): number {
  return [...metrics.matchAll(/^nfkeeper_repairs_total\{[^}]*\} (\d+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Phase { cpuPercent: number; rssPeakMiB: number; repairs: number; eventWakeups: number; note?: string }
const out: { n: number; idle: Phase; storm: Phase & { foreignChangesPerSec: number; missedRepair: boolean }; hostile: Phase & { deletions: number; backAfterMs: number } }[] = [];

const dir = mkdtempSync(join(tmpdir(), 'nfk-s4-'));
const configFile = join(dir, 'flannel.yaml');
writeFileSync(configFile, readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml')));

for (const n of SIZES) {
  await withBenchNetns(`s4-${n}`, async (ns) => {
    if (n > 0) ns.exec('iptables-nft-restore', [], foreignRestore('a', n));
    const port = 19000 + (process.pid % 1000);
    const child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', configFile,
      '--netns', ns.path, '--interval', '1s', '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn'], { stdio: 'ignore' });
    const metrics = async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const events = (m: string) => Number(/^nfkeeper_event_batches_total (\d+)/m.exec(m)?.[1] ?? 0);
    const sock = open({ netns: ns.path });
    try {
      for (let i = 0; i < 100; i++) {
        await sleep(100);
        if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) break;
      }
      const phase = async (seconds: number, during?: () => Promise<void>): Promise<Phase> => {
        const m0 = await metrics();
        const c0 = cpuTicks(child.pid!);
        const t0 = Date.now();
        await (during ? Promise.race([during(), sleep(seconds * 1000)]) : sleep(seconds * 1000));
        const wall = (Date.now() - t0) / 1000;
        const m1 = await metrics();
        return {
          cpuPercent: ((cpuTicks(child.pid!) - c0) / CLK_TCK / wall) * 100, rssPeakMiB: rssPeakKiB(child.pid!) / 1024,
          repairs: repairs(m1) - repairs(m0), eventWakeups: events(m1) - events(m0),
        };
      };
      await sleep(10_000);  // let start-up (JIT, the first GCs) settle before measuring idle
      process.stderr.write(`S4 N=${n}: idle ${SECONDS} s...\n`);
      const idle = await phase(SECONDS);

      process.stderr.write(`S4 N=${n}: foreign storm ${SECONDS} s...\n`);
      let changes = 0;
      let stop = false;
      await sock.commit(new Batch().add('table', { family: 'ip', name: 'storm' }).add('chain', { family: 'ip', table: 'storm', name: 'c' }));
      const storm = async () => {
        const t0 = Date.now();
        while (!stop && Date.now() - t0 < SECONDS * 1000) {
          const b = new Batch().flush('chain', { family: 'ip', table: 'storm', name: 'c' });
          for (let i = 0; i < 100; i++) b.add('rule', { family: 'ip', table: 'storm', chain: 'c', exprs: [{ kind: 'counter' }] });
          await sock.commit(b);
          changes += 200;  // 100 deletions by the flush (after the first), 100 additions
          await sleep(10);
        }
      };
      const stormPhase = await phase(SECONDS, storm);
      stop = true;
      // One real tampering after the storm: it must still be repaired.
      const rules = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
      await sock.commit(new Batch().delete('rule', { family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: rules[0]!.handle! }));
      await sleep(300);
      const missedRepair = (await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' })).length !== 4;

      process.stderr.write(`S4 N=${n}: hostile neighbour (a deletion every 10 ms) ${SECONDS} s...\n`);
      let deletions = 0;
      const hostile = async () => {
        const t0 = Date.now();
        while (Date.now() - t0 < SECONDS * 1000) {
          const r = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
          if (r[1]) {
            await sock.commit(new Batch().delete('rule', { family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: r[1].handle! }))
              .then(() => deletions++, () => undefined);
          }
          await sleep(10);
        }
      };
      const hostilePhase = await phase(SECONDS, hostile);
      const tStop = Date.now();
      let backAfterMs = -1;
      while (Date.now() - tStop < 15_000) {
        if ((await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' })).length === 4) {
          backAfterMs = Date.now() - tStop;
          break;
        }
        await sleep(5);
      }
      out.push({ n, idle, storm: { ...stormPhase, foreignChangesPerSec: changes / SECONDS, missedRepair },
        hostile: { ...hostilePhase, deletions, backAfterMs } });
    } finally {
      sock.close();
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
    }
  });
}

const f = (x: number, d = 2) => x.toFixed(d);
console.log(`S4, ${SECONDS} s per phase; CPU = the daemon's utime+stime / wall time (one core = 100 %)\n`);
console.log('| foreign rules | idle CPU | idle RSS peak | storm changes/s | storm CPU | storm wake-ups | repair after storm | hostile deletions | hostile CPU | repairs | back after |');
console.log('|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|');
for (const r of out) {
  console.log(`| ${r.n.toLocaleString('en-US')} | ${f(r.idle.cpuPercent, 3)} % | ${f(r.idle.rssPeakMiB, 1)} MiB | ${f(r.storm.foreignChangesPerSec, 0)} | ` +
    `${f(r.storm.cpuPercent)} % | ${r.storm.eventWakeups} | ${r.storm.missedRepair ? 'MISSED' : 'ok'} | ${r.hostile.deletions} | ` +
    `${f(r.hostile.cpuPercent)} % | ${r.hostile.repairs} | ${r.hostile.backAfterMs} ms |`);
}
mkdirSync(join(PROJECT_ROOT, 'bench', 'results'), { recursive: true });
writeFileSync(join(PROJECT_ROOT, 'bench', 'results', 's4.json'), JSON.stringify({ date: new Date().toISOString(), seconds: SECONDS, results: out }, null, 2) + '\n');
