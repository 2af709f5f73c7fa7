/**
 * A config reload, two builds alternating, timed from outside: `nfkeeper run --cache-dir D --reload-status F` on a namespace holding S8's chain of N
 * rules, then SIGHUP, from the signal to the daemon's `config reloaded` log line (written after the
 * status file); CPU is the process's user + system time from /proc/PID/stat across the same span
 * (10 ms ticks); with --edit, each reload's compile cache store is waited for before the next
 * (--gap-ms after it). Each build has its own cache and record directories in this run's; its first
 * daemon (a warm-up, left out) compiles and stores the entry. Each round starts a daemon of each
 * build in turn (the order alternating), which reloads --reloads times, --gap-ms apart, then stops.
 * The ruleset generation is compared across each reload (an unchanged config writes nothing).
 *
 * --edit none (default): the config unchanged (a compile cache hit); one: one rule of the chain
 * edited before each SIGHUP (a different one, its port changed); all: every rule edited (each
 * reload alternates two versions of the whole chain). --repair-ms T: T ms after the SIGHUP an owned
 * rule of a small second chain (p, untouched by the edits) is deleted, and the time from that
 * deletion to the rule's add (the repair's commit, or the reload's that puts it back) is taken by
 * a monitor of the table, as bench/probe.ts's RepairProbe does. --trigger file: no SIGHUP, the
 * edited file's write is the reload's start (the daemon's watch, 200 ms of debounce in the figure;
 * a --repair-ms of 205 deletes just after the reload began).
 *
 * --prof DIR: the measured daemons run with --cpu-prof into DIR/a, DIR/b (one profile a daemon).
 *
 *   sudo npx tsx bench/reload-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--rounds 3] [--reloads 3] [--gap-ms 1000] [--settle-ms GAP] [--edit none|one|all] [--trigger hup|file] [--repair-ms 5] [--prof DIR]
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { open } from '../src/netlink/socket.js';
import { Batch } from '../src/netlink/batch.js';
import { Monitor } from '../src/netlink/monitor.js';
import { withBenchNetns, type BenchNetns } from './lib/netns.js';
import { daemonNodeFlags } from './lib/node-flags.js';
import { chainYaml } from './scenarios/s8.js';
import { parseArgs } from './lib/args.js';
import { cpuSecondsOf, loadavg } from './lib/daemon.js';
import { medianOf } from './lib/stats.js';

const USAGE = 'reload-ab.ts --a CHECKOUT --b CHECKOUT [--n 100000] [--rounds 3] [--reloads 3] [--gap-ms 1000] [--settle-ms GAP] [--edit none|one|all] [--trigger hup|file] [--repair-ms 5] [--prof DIR]';
const arg = parseArgs(import.meta.url, { '--a': 1, '--b': 1, '--n': 1, '--rounds': 1, '--reloads': 1, '--gap-ms': 1, '--settle-ms': 1, '--edit': 1, '--repair-ms': 1, '--trigger': 1, '--prof': 1 }, { usage: USAGE }).value;
const roots = [arg('--a'), arg('--b')] as string[];
if (!roots[0] || !roots[1]) throw new Error(`usage: ${USAGE}`);
const N = Number(arg('--n', '100000'));
const ROUNDS = Number(arg('--rounds', '3'));
const RELOADS = Number(arg('--reloads', '3'));
const GAP_MS = Number(arg('--gap-ms', '1000'));
/** From ready (and its store, if it compiled) to the first reload: past a start's own late work (a restart record's read-back 10 s on). */
const SETTLE_MS = Number(arg('--settle-ms', String(GAP_MS)));
const PROF = arg('--prof');
const EDIT = arg('--edit', 'none');
if (!['none', 'one', 'all'].includes(EDIT!)) throw new Error(`usage: ${USAGE}`);
const TRIGGER = arg('--trigger', 'hup');
if (TRIGGER === 'file' && EDIT === 'none') throw new Error('--trigger file needs --edit one or all');
const REPAIR_MS = arg('--repair-ms') === undefined ? undefined : Number(arg('--repair-ms'));
/** The small chain the repair probe deletes from, after S8's chain c. */
const PROBED = '      - name: p\n        rules:\n' + [1, 2, 3, 4].map((i) => `          - "tcp dport ${i} counter accept"\n`).join('');
/** The config's text for edit number `k` (0: as installed). */
let edits = 0;
function configText(k: number): string {
  if (EDIT === 'all') return (k % 2 === 0 ? chainYaml(N) : chainYaml(N).replaceAll(' counter accept', ' counter drop')) + PROBED;
  let text = chainYaml(N);
  if (EDIT === 'one' && k > 0) {
    // rule k of the chain, its port 65000 + k: a rule no other is
    const lines = text.split('\n');
    const first = lines.findIndex((l) => l.includes('ip saddr'));
    const at = first + ((k * 7919) % N);
    lines[at] = lines[at]!.replace(/dport \d+/, `dport ${60001 + (k % 5000)}`);
    text = lines.join('\n');
  }
  return text + PROBED;
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Reload { wallMs: number; cpuS: number; wrote: boolean; ok: boolean; repairMs?: number }

async function daemon(ns: BenchNetns, root: string, config: string, dir: string, i: number, warmUp: boolean): Promise<Reload[]> {
  const prof = PROF && !warmUp ? ['--cpu-prof', '--cpu-prof-dir', join(PROF, i === 0 ? 'a' : 'b')] : [];
  const child = spawn('node', [...daemonNodeFlags(root), ...prof, join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path,
    '--no-metrics', '--record-dir', join(dir, `record-${i}`), '--cache-dir', join(dir, `cache-${i}`), '--reload-status', join(dir, `status-${i}.json`)],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => child.on('exit', r));
  const waiting: { re: RegExp; done: (l: string) => void }[] = [];
  const seen: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (l) => {
    seen.push(l);
    const k = waiting.findIndex((w) => w.re.test(l));
    if (k >= 0) waiting.splice(k, 1)[0]!.done(l);
  });
  const next = (re: RegExp) => new Promise<string>((resolve, reject) => {
    waiting.push({ re, done: resolve });
    child.once('exit', () => reject(new Error(`nfkeeper run exited before ${re}: ${seen.slice(-5).join('\n')}`)));
  });
  const sock = open({ netns: ns.path });
  try {
    const running = next(/"nfkeeper running"/);
    const stored = next(/"compiled config (not )?stored/);
    stored.catch(() => undefined);
    await running;
    if (seen.some((l) => l.includes('"compile cache not used'))) await stored;
    // From the cache: no store, and its waiter would take the first reload's store line.
    else waiting.splice(waiting.findIndex((w) => String(w.re).includes('stored')), 1);
    await sleep(SETTLE_MS);
    const out: Reload[] = [];
    for (let k = 0; k < (warmUp ? 1 : RELOADS); k++) {
      const before = sock.generation();
      const line = next(/"config reload(ed| rejected)"|the kernel refused/);
      const storedAgain = EDIT === 'none' ? undefined : next(/"compiled config (not )?stored/);
      storedAgain?.catch(() => undefined);
      if (EDIT !== 'none' && TRIGGER === 'hup') writeFileSync(config, configText(++edits));
      const cpu0 = cpuSecondsOf(child.pid!);
      const t0 = performance.now();
      if (TRIGGER === 'hup') child.kill('SIGHUP');
      else writeFileSync(config, configText(++edits));
      const repaired = REPAIR_MS === undefined ? undefined : repairAfter(ns, REPAIR_MS);
      const l = await line;
      const wallMs = performance.now() - t0;
      const repairMs = await repaired;
      out.push({ wallMs, cpuS: cpuSecondsOf(child.pid!) - cpu0, wrote: sock.generation() !== before, ok: l.includes('"config reloaded"'), ...(repairMs !== undefined ? { repairMs } : {}) });
      // A reload that compiled stores the config in the compile cache after it: the next one starts after that.
      if (EDIT !== 'none') await storedAgain;
      await sleep(GAP_MS);
    }
    return out;
  } finally {
    sock.close();
    child.kill('SIGTERM');
    await exited;
  }
}

/** `ms` after now, an owned rule of chain p deleted; resolves with the ms from that deletion to a rule added to p. */
async function repairAfter(ns: BenchNetns, ms: number): Promise<number> {
  await sleep(ms);
  const sock = open({ netns: ns.path });
  const where = { family: 'ip' as const, table: 'big', chain: 'p' };
  let waiter: ((at: number) => void) | undefined;
  const monitor = new Monitor({
    netns: ns.path, tables: [{ family: 'ip', name: 'big' }], ignorePorts: [sock.portId],
    onBatch: (b) => { if (b.overflow || b.events.some((e) => e.type === 'newrule' && e.name === 'p')) waiter?.(performance.now()); },
  });
  try {
    const rules = await sock.listRules(where);
    const added = new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no repair of chain p within 120 s')), 120_000);
      waiter = (at) => { clearTimeout(timer); waiter = undefined; resolve(at); };
    });
    const t0 = performance.now();
    await sock.commit(new Batch().delete('rule', { ...where, handle: rules[1]!.handle! }));
    return (await added) - t0;
  } finally {
    monitor.close();
    sock.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'nfk-reload-ab-'));
try {
  const config = join(dir, 'c.yaml');
  writeFileSync(config, configText(0));
  if (PROF) for (const s of ['a', 'b']) mkdirSync(join(PROF, s), { recursive: true });
  await withBenchNetns('reload', async (ns) => {
    const apply = spawnSync('node', [join(roots[0]!, 'bin', 'nfkeeper.js'), 'apply', '--no-cache-dir', '--config', config, '--netns', ns.path], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (apply.status !== 0) throw new Error('the install failed');
    for (const i of [0, 1]) await daemon(ns, roots[i]!, config, dir, i, true);
    const runs: Reload[][] = [[], []];
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of [0, 1]) {
        const i = (round + k) % 2;
        // each daemon starts from the text installed (its cache's entry), then edits from there
        if (EDIT !== 'none') writeFileSync(config, configText(edits = 0));
        const rs = await daemon(ns, roots[i]!, config, dir, i, false);
        runs[i]!.push(...rs);
        console.log(`round ${round + 1} ${i === 0 ? 'a' : 'b'}: reloads ${rs.map((r) => `${r.wallMs.toFixed(0)} ms (CPU ${r.cpuS.toFixed(2)} s${r.ok ? '' : ', NOT OK'}${r.wrote ? ', wrote' : ''}${r.repairMs !== undefined ? `, repair ${r.repairMs.toFixed(0)} ms` : ''})`).join(', ')}; load ${loadavg()}`);
      }
    }
    const med = (xs: number[]) => medianOf(xs)!;
    for (const [i, rs] of runs.entries()) {
      const w = rs.map((r) => r.wallMs);
      console.log(`${i === 0 ? 'a' : 'b'} ${roots[i]}: ${rs.length} reloads at ${N} rules, median ${med(w).toFixed(0)} ms (${Math.min(...w).toFixed(0)}-${Math.max(...w).toFixed(0)}), ` +
        `CPU median ${med(rs.map((r) => r.cpuS)).toFixed(2)} s, ${rs.filter((r) => r.wrote).length} wrote, ${rs.filter((r) => !r.ok).length} not ok` +
        (REPAIR_MS !== undefined ? `, repair ${REPAIR_MS} ms after the SIGHUP: median ${med(rs.map((r) => r.repairMs!)).toFixed(0)} ms (${Math.min(...rs.map((r) => r.repairMs!)).toFixed(0)}-${Math.max(...rs.map((r) => r.repairMs!)).toFixed(0)})` : ''));
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
