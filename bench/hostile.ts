/**
 * A hostile neighbour: while `nfkeeper run` keeps examples/flannel.yaml
 * with its default back-off, another process tries every 10 ms for 20 s to
 * delete nfkeeper's masquerade rule (one filtered dump and, if the rule is
 * there, one delete). Measures the daemon's CPU from /proc, the back-off
 * levels it reported (its warnings and nfkeeper_fight_level), repairs against
 * deletions, and how long after the neighbour stops the rules are back,
 * against the back-off step in force at that moment.
 *   npx tsx bench/hostile.ts [--seconds 20] [--every-ms 10]
 * Everything happens in a network namespace made here and removed after.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { DEFAULT_FIGHT } from '../src/keeper/fight.js';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { Batch, open } from '../src/index.js';
import { sleep } from '../test/helpers/wait.js';
import { withBenchNetns } from './lib/netns.js';
import { recordArgs } from './lib/record.js';
import { parseArgs } from './lib/args.js';
import { metricOf } from './lib/metrics.js';

const CLK_TCK = 100;
const CHAIN = { family: 'ip', table: 'nfkeeper', chain: 'postrouting' } as const;

/** utime + stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

export interface HostileResult {
  seconds: number;
  attempts: number;
  deletions: number;
  repairs: number;
  cpuPercent: number;
  cpuPercentBefore: number;
  levels: number[];
  maxLevel: number;
  stepAtStopMs: number;
  backAfterMs: number;
  fightOverAfterMs: number;
  keeperErrors: number;
}

export async function hostile(seconds = 20, everyMs = 10): Promise<HostileResult> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-hostile-'));
  const config = join(dir, 'flannel.yaml');
  writeFileSync(config, readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml')));
  try {
    return await withBenchNetns('hostile', async (ns) => {
      const port = 21000 + (process.pid % 1000);
      const child = spawn(process.execPath, [join(PROJECT_ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', config,
        '--netns', ns.path, ...recordArgs(PROJECT_ROOT, ns), '--interval', '1s', '--metrics', `127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'ignore'] });
      const logs: { t: number; msg: string; level?: number; delayMs?: number; lvl: number }[] = [];
      let partial = '';
      child.stdout!.on('data', (d: Buffer) => {
        const lines = (partial + d.toString()).split('\n');
        partial = lines.pop()!;
        for (const l of lines) {
          if (!l) continue;
          const j = JSON.parse(l) as { msg: string; level: number; delayMs?: number };
          logs.push({ t: performance.now(), msg: j.msg, lvl: j.level, delayMs: j.delayMs });
        }
      });
      const metric = async (name: string) => (await metricOf(port, name)) ?? 0;
      const sock = open({ netns: ns.path });
      try {
        for (let i = 0; i < 100; i++) {
          await sleep(100);
          if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) break;
        }
        await sleep(3000);  // start-up settles
        const c00 = cpuSeconds(child.pid!), t00 = performance.now();
        await sleep(5000);
        const cpuPercentBefore = ((cpuSeconds(child.pid!) - c00) / ((performance.now() - t00) / 1000)) * 100;

        // The example's chain as installed (its rule count is the example's, not a constant here).
        const owned = (await sock.listRules(CHAIN)).length;
        const repairs0 = await metric('nfkeeper_repairs_total');
        const c0 = cpuSeconds(child.pid!);
        const t0 = performance.now();
        let attempts = 0, deletions = 0, maxLevel = 0;
        const levels: number[] = [];
        const sampler = setInterval(() => {
          metric('nfkeeper_fight_level').then((l) => {
            levels.push(l);
            maxLevel = Math.max(maxLevel, l);
          }, () => undefined);
        }, 250);
        while (performance.now() - t0 < seconds * 1000) {
          attempts++;
          const rules = await sock.listRules(CHAIN);
          const masq = rules.find((r) => r.exprs.some((e) => e.kind === 'masq'));
          if (masq) {
            await sock.commit(new Batch().delete('rule', { ...CHAIN, handle: masq.handle! })).then(() => deletions++, () => undefined);
          }
          await sleep(everyMs);
        }
        clearInterval(sampler);
        const tStop = performance.now();
        const wall = (tStop - t0) / 1000;
        const cpuPercent = ((cpuSeconds(child.pid!) - c0) / wall) * 100;
        const level = await metric('nfkeeper_fight_level');
        maxLevel = Math.max(maxLevel, level);
        const stepAtStopMs = level === 0 ? 0 : Math.min(DEFAULT_FIGHT.baseMs * 2 ** (level - 1), DEFAULT_FIGHT.capMs);
        let backAfterMs = -1;
        while (performance.now() - tStop < 30_000) {
          const rules = await sock.listRules(CHAIN);
          if (rules.length === owned) {
            backAfterMs = performance.now() - tStop;
            break;
          }
          await sleep(5);
        }
        const repairs = (await metric('nfkeeper_repairs_total')) - repairs0;
        // The fight ends after a quiet spell (>= 10 s and >= twice the delay).
        let fightOverAfterMs = -1;
        while (performance.now() - tStop < 40_000) {
          if (logs.some((l) => l.msg.startsWith('the fight is over') && l.t > tStop)) {
            fightOverAfterMs = logs.find((l) => l.msg.startsWith('the fight is over') && l.t > tStop)!.t - tStop;
            break;
          }
          await sleep(100);
        }
        const keeperErrors = logs.filter((l) => l.lvl >= 50).length;
        return { seconds: wall, attempts, deletions, repairs, cpuPercent, cpuPercentBefore, levels, maxLevel,
          stepAtStopMs, backAfterMs, fightOverAfterMs, keeperErrors };
      } finally {
        sock.close();
        child.kill('SIGTERM');
        await new Promise((r) => child.on('exit', r));
      }
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1]?.endsWith('hostile.ts')) {
  const cli = parseArgs(import.meta.url, { '--seconds': 1, '--every-ms': 1 });
  const EVERY_MS = Number(cli.value('--every-ms', '10'));
  const r = await hostile(Number(cli.value('--seconds', '20')), EVERY_MS);
  const levelsSeen = [...new Set(r.levels)].sort((a, b) => a - b).join(', ');
  console.log(`hostile neighbour: a deletion attempt every ${EVERY_MS} ms for ${r.seconds.toFixed(1)} s\n`);
  console.log('| attempts | deletions | repairs | daemon CPU (idle before) | back-off levels seen | step at stop | rules back after | fight over after | errors |');
  console.log('|---:|---:|---:|---:|---|---:|---:|---:|---:|');
  console.log(`| ${r.attempts} | ${r.deletions} | ${r.repairs} | ${r.cpuPercent.toFixed(2)} % (${r.cpuPercentBefore.toFixed(2)} %) | ` +
    `${levelsSeen} (max ${r.maxLevel}) | ${r.stepAtStopMs} ms | ${r.backAfterMs.toFixed(0)} ms | ${(r.fightOverAfterMs / 1000).toFixed(1)} s | ${r.keeperErrors} |`);
}
