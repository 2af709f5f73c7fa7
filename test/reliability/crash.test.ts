/**
 * kill -9 at random points (docs/reliability.md, crashes and restarts). A daemon
 * (bin/nfkeeper.js run, a real child process) installs a large config, in one
 * batch, into an empty namespace, or swaps a large config for another large
 * one on reload, and is killed with SIGKILL after a seeded random delay that
 * lands around its commit. The kernel must then hold exactly the old or
 * exactly the new ruleset in every owned table, never a mix. The oracle is
 * independent of nfkeeper's code: `nft list` in the namespace, and every rule
 * carries a comment naming its config and position. A restarted daemon must
 * adopt a correct ruleset without writing (the generation stays) or repair
 * the old one to the new.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, describe, expect, it } from 'vitest';
import { prng } from '../../bench/soak.js';
import { open } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep, until } from '../helpers/wait.js';
import { NEW, OLD, TABLES, type Ruleset } from './crash-configs.js';

// NFK_CRASH_RUNS=20 NFK_CRASH_SEED=5 npx vitest run test/reliability/crash.test.ts for a longer run.
const SEED = Number(process.env.NFK_CRASH_SEED ?? 9);
const RUNS = Number(process.env.NFK_CRASH_RUNS ?? 2);

type Seen = 'none' | 'A' | 'B';

/** What the kernel holds, read with nft; throws on anything but exactly nothing, A or B in every table. */
function kernelHolds(ns: Netns): Seen {
  const listing = ns.exec('nft', ['list', 'ruleset']);
  const per: Seen[] = [];
  for (const t of TABLES) {
    const m = new RegExp(`^table ip ${t.name} \\{.*$([\\s\\S]*?)^\\}$`, 'm').exec(listing);
    if (!m) {
      per.push('none');
      continue;
    }
    const chains: Record<string, string[]> = {};
    let current = '';
    for (const line of m[1]!.split('\n')) {
      const c = /^\tchain (\S+) \{/.exec(line);
      if (c) chains[current = c[1]!] = [];
      const k = /comment "([^"]+)"/.exec(line);
      if (k) chains[current]!.push(k[1]!);
    }
    const match = [OLD, NEW].find((r) => JSON.stringify(r.tables[t.name]) === JSON.stringify(chains));
    if (!match) {
      const counts = Object.entries(chains).map(([c, l]) => `${c}: ${l.length} rules, ` +
        `A ${l.filter((x) => x.startsWith('A-')).length}, B ${l.filter((x) => x.startsWith('B-')).length}`);
      throw new Error(`table ${t.name} holds neither the old nor the new ruleset: ${counts.join('; ')}`);
    }
    per.push(match.tag as Seen);
  }
  if (new Set(per).size !== 1) throw new Error(`tables disagree (one batch must be all or nothing): ${per.join(', ')}`);
  return per[0]!;
}

const dir = tempDir('crash');

function writeConfig(file: string, r: Ruleset): void {
  // Atomically, as an editor or a ConfigMap would: the daemon never reads half a file.
  writeFileSync(file + '.tmp', r.yaml);
  renameSync(file + '.tmp', file);
}

interface Daemon {
  child: ChildProcess;
  logs: Record<string, unknown>[];
  exited: Promise<number | null>;
  stderr: string[];
}

function startDaemon(ns: Netns, config: string): Daemon {
  const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record,
    '--no-metrics', '--interval', '200ms'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: Record<string, unknown>[] = [];
  let partial = '';
  child.stdout!.on('data', (d: Buffer) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop()!;
    for (const l of lines) if (l) logs.push(JSON.parse(l) as Record<string, unknown>);
  });
  const stderr: string[] = [];
  child.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, logs, exited, stderr };
}

/** Polls the generation (a few µs per read) until it moves; returns ms since `t0`. */
async function untilGenerationMoves(ns: Netns, d: Daemon, t0: number, timeoutMs: number): Promise<number> {
  const sock = open({ netns: ns.path });
  try {
    const g0 = sock.generation();
    while (performance.now() - t0 < timeoutMs) {
      if (sock.generation() !== g0) return performance.now() - t0;
      // A daemon that died (a signal before its handler was in) never moves it: say so, not "never moved".
      if (d.child.exitCode !== null || d.child.signalCode !== null) {
        throw new Error(`the daemon ended (${d.child.exitCode ?? d.child.signalCode}) before it committed: ${d.stderr.join('')}`);
      }
      await sleep(2);
    }
    throw new Error('the generation never moved');
  } finally {
    sock.close();
  }
}


async function kill9(d: Daemon): Promise<void> {
  d.child.kill('SIGKILL');
  await d.exited;
}

function running(d: Daemon): boolean {
  if (d.child.exitCode !== null) throw new Error(`the daemon exited with ${d.child.exitCode}: ${d.stderr.join('')}`);
  return d.logs.some((l) => l.msg === 'nfkeeper running');
}

/** Every rule of the namespace as `comment handle`, in listing order. */
function allHandles(ns: Netns): string[] {
  return [...ns.exec('nft', ['-a', 'list', 'ruleset']).matchAll(/comment "([^"]+)" # handle (\d+)$/gm)].map((m) => `${m[1]} ${m[2]}`);
}

/**
 * Restarts the daemon on `want` and checks it converges. A kernel that already
 * holds `want` is adopted: no rule is rewritten (every handle stays), and the
 * only write is claiming the protected table the killed daemon left orphaned.
 */
async function restartConverges(ns: Netns, config: string, want: Ruleset, seen: Seen): Promise<'adopted' | 'repaired'> {
  const before = allHandles(ns);
  const d = startDaemon(ns, config);
  try {
    await until('the restarted daemon to be running', () => running(d));
    try {
      expect(kernelHolds(ns)).toBe(want.tag);
    } catch (e) {
      throw new Error(`${(e as Error).message}\nafter ${seen}, the restarted daemon logged:\n${d.logs.map((l) => JSON.stringify(l).slice(0, 400)).join('\n')}`);
    }
    expect(d.logs.filter((l) => l.level as number >= 50)).toEqual([]);
    const installed = d.logs.find((l) => l.msg === 'installed desired ruleset');
    if (seen === want.tag) {
      expect(allHandles(ns)).toEqual(before);
      expect(installed?.drift).toEqual(['ip crash_b: table ip crash_b is an orphan; claiming it']);
      return 'adopted';
    }
    expect(allHandles(ns)).not.toEqual(before);
    return 'repaired';
  } finally {
    await kill9(d);
  }
}

describe('kill -9 at random points', () => {
  const rnd = prng(SEED);
  const outcomes: string[] = [];
  afterAll(() => console.log(`[crash] seed ${SEED}: ${outcomes.join('; ')}`));

  it('cold start of ~3,000 rules into an empty namespace: nothing or everything, then the restart converges', async () => {
    const ns = createNetns('crash-cold');
    const config = join(dir, 'cold.yaml');
    writeConfig(config, OLD);
    try {
      // Calibrate: when does an undisturbed daemon commit its first batch?
      const t0 = performance.now();
      let d = startDaemon(ns, config);
      const commitAt = await untilGenerationMoves(ns, d, t0, 30_000);
      await until('the daemon to be running', () => running(d));
      await kill9(d);
      expect(kernelHolds(ns)).toBe('A');
      const seen = new Set<Seen>();
      for (let i = 0; i < RUNS; i++) {
        ns.exec('nft', ['flush', 'ruleset']);  // the protected table is an orphan now: anyone may delete it
        expect(kernelHolds(ns)).toBe('none');
        // Around the commit: from well before it (compiling, planning, encoding) to just after.
        const delay = commitAt * (0.7 + 0.6 * rnd());
        d = startDaemon(ns, config);
        await sleep(delay);
        await kill9(d);
        const s = kernelHolds(ns);
        seen.add(s);
        const how = await restartConverges(ns, config, OLD, s);
        outcomes.push(`cold #${i} killed at ${delay.toFixed(0)} ms (commit ~${commitAt.toFixed(0)} ms): ${s}, restart ${how}`);
      }
      expect([...seen].every((s) => s === 'none' || s === 'A')).toBe(true);
    } finally {
      ns.remove();
    }
  }, 60_000 + RUNS * 30_000);

  it('reload from one ~3,000-rule config to another: exactly old or exactly new, then the restart converges', async () => {
    const ns = createNetns('crash-reload');
    const config = join(dir, 'reload.yaml');
    try {
      // Calibrate the reload: from SIGHUP to the generation moving.
      writeConfig(config, OLD);
      let d = startDaemon(ns, config);
      await until('the daemon to be running', () => running(d));
      writeConfig(config, NEW);
      let t0 = performance.now();
      d.child.kill('SIGHUP');
      const commitAt = await untilGenerationMoves(ns, d, t0, 30_000);
      await kill9(d);
      expect(kernelHolds(ns)).toBe('B');
      for (let i = 0; i < RUNS; i++) {
        writeConfig(config, OLD);
        d = startDaemon(ns, config);
        await until('the daemon to be running', () => running(d));
        expect(kernelHolds(ns)).toBe('A');
        writeConfig(config, NEW);
        const delay = commitAt * (0.6 + 0.8 * rnd());
        t0 = performance.now();
        d.child.kill('SIGHUP');
        await sleep(delay);
        await kill9(d);
        const s = kernelHolds(ns);
        expect(s).not.toBe('none');
        const how = await restartConverges(ns, config, NEW, s);
        outcomes.push(`reload #${i} killed at ${delay.toFixed(0)} ms (commit ~${commitAt.toFixed(0)} ms): ${s}, restart ${how}`);
      }
    } finally {
      ns.remove();
    }
  }, 60_000 + RUNS * 30_000);
});
