/**
 * Where the start-up peak comes from: one `nfkeeper run` (as bench/rss.ts starts it) with one owned
 * chain of N rules, its VmRSS sampled every few milliseconds from outside, its log lines (info) and
 * with --gc V8's --trace-gc lines, time-stamped on the same clock. Prints the RSS in steps of
 * --step-ms (the highest sample of each) with what the daemon said meanwhile (with --gc: how many
 * collections, the full ones in full), and when the peak was. Samples stop 12 s after ready.
 *
 *   sudo npx tsx bench/rss-trace.ts [--n 100000] [--restart] [--gc] [--root DIR] [--step-ms 100] [--node-flags "…"]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { withBenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { recordArgs } from './lib/record.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--n': 1, '--root': 1, '--step-ms': 1, '--node-flags': 1, '--restart': 0, '--gc': 0 });
const arg = cli.value;
const N = Number(arg('--n', '100000'));
const ROOT = arg('--root', PROJECT_ROOT);
const STEP = Number(arg('--step-ms', '100'));
const NODE_FLAGS = arg('--node-flags', '').split(' ').filter(Boolean);
const RESTART = cli.has('--restart');
const GC = cli.has('--gc');
const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const config = (n: number) => 'tables:\n  - family: ip\n    name: nfk-rss\n    chains:\n      - name: owned\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n' +
  Array.from({ length: n }, (_, i) => `          - ip saddr ${addr(i)} ip daddr 192.0.2.1 return`).join('\n') + '\n';
const kib = (s: string, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(s)?.[1] ?? NaN);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-rsst-'));
  const file = join(dir, 'c.yaml');
  writeFileSync(file, config(N));
  const port = 19990 + (process.pid % 9);
  try {
    await withBenchNetns('rsst', async (ns) => {
      const daemon = (flags: string[]) => spawn(process.execPath, [...daemonNodeFlags(ROOT), ...flags, join(ROOT, 'bin', 'nfkeeper.js'), 'run', '--config', file,
        '--netns', ns.path, ...recordArgs(ROOT, ns), '--interval', '1s', '--metrics', `127.0.0.1:${port}`, '--log-level', 'info'], { stdio: ['ignore', 'pipe', 'pipe'] });
      const untilReady = async (c: ReturnType<typeof daemon>) => {
        for (;;) {
          if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) return;
          if (c.exitCode !== null) throw new Error('exited before ready');
          await sleep(20);
        }
      };
      if (RESTART) {
        const first = daemon([]);
        first.stdout!.resume(); first.stderr!.resume();
        const gone = new Promise((r) => first.on('exit', r));
        await untilReady(first);
        first.kill('SIGTERM');
        await gone;
      }
      const t0 = performance.now();
      const c = daemon([...NODE_FLAGS, ...(GC ? ['--trace-gc'] : [])]);
      const events: { t: number; what: string }[] = [];
      for (const s of [c.stdout!, c.stderr!]) {
        createInterface({ input: s }).on('line', (l) => {
          let what = l;
          try {
            const j = JSON.parse(l) as Record<string, unknown>;
            what = `log: ${String(j.msg)}`;
          } catch { /* a --trace-gc line */ }
          events.push({ t: performance.now() - t0, what: what.slice(0, 260) });
        });
      }
      const samples: { t: number; rss: number }[] = [];
      let ready = NaN;
      let readyPoll = 0;
      let polling = false;
      for (;;) {
        let st: string;
        try { st = readFileSync(`/proc/${c.pid}/status`, 'utf8'); } catch { break; }
        const t = performance.now() - t0;
        samples.push({ t, rss: kib(st, 'VmRSS') / 1024 });
        if (Number.isNaN(ready) && t - readyPoll > 50 && !polling) {
          readyPoll = t;
          polling = true;
          // Not awaited: the daemon answers only between its synchronous steps, the sampling goes on.
          void fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false).then((ok) => {
            polling = false;
            if (ok && Number.isNaN(ready)) ready = performance.now() - t0;
          });
        }
        if (!Number.isNaN(ready) && t > ready + 12_000) break;
        await sleep(3);
      }
      const hwm = kib(readFileSync(`/proc/${c.pid}/status`, 'utf8'), 'VmHWM') / 1024;
      c.kill('SIGTERM');
      await new Promise((r) => c.on('exit', r));
      const peak = samples.reduce((a, s) => (s.rss > a.rss ? s : a));
      console.log(`N=${N}${RESTART ? ' restart' : ''}: ready at ${(ready / 1000).toFixed(2)} s, VmHWM ${hwm.toFixed(1)} MiB, sampled peak ${peak.rss.toFixed(1)} MiB at ${(peak.t / 1000).toFixed(2)} s`);
      let ei = 0;
      for (let t = 0; t < samples[samples.length - 1]!.t; t += STEP) {
        const w = samples.filter((s) => s.t >= t && s.t < t + STEP);
        if (w.length === 0) continue;
        const said: string[] = [];
        while (ei < events.length && events[ei]!.t < t + STEP) said.push(events[ei++]!.what);
        const gcs = said.filter((s) => !s.startsWith('log:'));
        const logs = said.filter((s) => s.startsWith('log:'));
        const full = gcs.filter((g) => /Mark-Compact|Mark-sweep/i.test(g)).map((g) => g.replace(/^\[\d+:0x[0-9a-f]+\]\s*/, '').replace(/\(average mu.*$/, ''));
        const lastGc = full.length ? `  FULL: ${full.join(' ; ')}` : gcs.length ? `  gc x${gcs.length}, last: ${gcs[gcs.length - 1]!.replace(/^\[\d+:0x[0-9a-f]+\]\s*/, '')}` : '';
        console.log(`${(t / 1000).toFixed(2).padStart(6)} s ${Math.max(...w.map((s) => s.rss)).toFixed(1).padStart(7)} MiB${lastGc}${logs.length ? '  ' + logs.join(' | ') : ''}`);
      }
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
