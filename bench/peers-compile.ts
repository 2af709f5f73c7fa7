/**
 * Compile time of a kube-proxy nftables-mode file at scale (the target: a
 * 10,000-service file, about 50,000 rules and elements, in under a second)
 * through nfkeeper's .nft loader, with the breakdown: reading the file
 * (tokens and structure, src/config/nftfile.ts), then the schema and the
 * rule compiler (buildConfig). The file is generated the way kube-proxy
 * writes it (test/helpers/peers/kube-proxy.ts).
 *
 * What the loader refuses today is reported, and the loader is timed twice:
 * on the whole file (until it stops: the reader stops at the first object it
 * cannot hold, the rule compiler checks every rule before it throws) and on
 * the subset it accepts (test/helpers/peers/reduce.ts), which it compiles
 * completely. Times are medians of 5 runs (--runs) after one warm-up, in one process; the
 * whole file's line also gives the median CPU time and the warm-up (cold) call. Through tsx
 * these are the TypeScript sources' times (slower than the build: esbuild's keepNames).
 *
 * What a user meets is the last line: `nfkeeper validate --config FILE` of the written file,
 * the real bin/nfkeeper.js on the build (dist/: `npm run build` first) in a fresh process each
 * time, --cold-runs times (default 5; 0 skips it): median wall time, and CPU time (user + system,
 * the garbage collector's threads included) where /usr/bin/time exists.
 *
 * Run: npx tsx bench/peers-compile.ts [--services 10000] [--family ip|ip6] [--runs 5] [--cold-runs 5] [--json FILE]
 * Reaches no kernel and no namespace.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { anyInterface, parseNftConfig } from '../src/config/config.js';
import { readNftFile } from '../src/config/nftfile.js';
import { ConfigError } from '../src/base/errors.js';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { compileRule } from '../src/rules/index.js';
import { kubeProxy } from '../test/helpers/peers/kube-proxy.js';
import { reduce } from '../test/helpers/peers/reduce.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--services': 1, '--family': 1, '--runs': 1, '--cold-runs': 1, '--json': 1 });
const services = Number(cli.value('--services', '10000'));
const family = cli.value('--family', 'ip') as 'ip' | 'ip6';
const runs = Number(cli.value('--runs', '5'));
const interfaces = anyInterface();

const os = () => `${cpus().length} CPUs`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/**
 * Median ms of `runs` calls after one warm-up; the function's last result. Also the warm-up's ms
 * (the first call in a fresh process: what one `nfkeeper validate` pays, before the JIT has the
 * hot paths) and the median CPU ms of the process (user + system, the garbage collector's threads
 * included), which moves less than wall time when other work shares the machine.
 */
function time<T>(f: () => T): { ms: number; cpuMs: number; firstMs: number; result: T } {
  const t = performance.now();
  let result = f();
  const firstMs = performance.now() - t;
  const ms: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    result = f();
    const c = process.cpuUsage(c0);
    ms.push(performance.now() - t0);
    cpu.push((c.user + c.system) / 1000);
  }
  return { ms: median(ms), cpuMs: median(cpu), firstMs, result };
}

const load = (text: string) => {
  try {
    parseNftConfig(text, 'kube-proxy.nft', { interfaces });
    return 'accepted';
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return `refused (${e.all.length} errors), first: ${e.message.split('\n')[0]}`;
  }
};

const loadAtStart = loadavg()[0]!;
const t0 = performance.now();
const file = kubeProxy({ family, services });
const genMs = performance.now() - t0;
const c = file.counts;
console.log(`kube-proxy ${family}, ${services} services: ${file.text.length} bytes, ${c.chains} chains, ` +
  `${c.rules} rules, ${c.sets} sets/maps, ${c.elements} elements (${c.rules + c.elements} rules and elements); ` +
  `generated in ${genMs.toFixed(0)} ms`);

const whole = time(() => load(file.text));
console.log(`whole file: loader ${whole.ms.toFixed(1)} ms (median of ${runs}; CPU ${whole.cpuMs.toFixed(1)} ms; ` +
  `first call in this process ${whole.firstMs.toFixed(1)} ms), ${whole.result}`);

const tr = performance.now();
const red = reduce(file.text, 'kube-proxy.nft');
console.log(`(finding the accepted subset took ${((performance.now() - tr) / 1000).toFixed(1)} s)`);
const kinds = new Map<string, number>();
for (const r of red.refused) {
  const k = `${/^add (\w+)/.exec(r.text)?.[1]}: ${r.reason.split('\n')[0]!.replace(/rule \d+ of chain \S+: /, '').replace(/, '[^']*'/, '')}`;
  kinds.set(k, (kinds.get(k) ?? 0) + 1);
}
console.log(`accepted subset: ${red.rules.kept} of ${red.rules.total} rules, ${red.objects.kept} of ${red.objects.total} other objects; ` +
  `refused lines by reason:`);
for (const [k, n] of [...kinds].sort((a, b) => b[1] - a[1])) console.log(`  ${String(n).padStart(6)}  ${k.slice(0, 150)}`);
for (const s of red.stripped.slice(0, 3)) console.log(`  stripped at line ${s.line}: ${s.reason}`);

const read = time(() => readNftFile(red.text, 'kube-proxy.nft'));
const full = time(() => load(red.text));
const raw = read.result.raw;
const texts: { text: string; table: string; chain: string; family: string }[] = [];
for (const t of raw.tables) for (const ch of t.chains) for (const r of ch.rules) texts.push({ text: r, table: t.name, chain: ch.name, family: t.family });
// The rules compile against their table's named sets, as the loader gives them.
const named = new Map(parseNftConfig(red.text, 'kube-proxy.nft', { interfaces }).tables
  .map((t) => [t.name, new Map((t.sets ?? []).map((x) => [x.name, x.set]))]));
const rules = time(() => {
  let n = 0;
  for (const r of texts) {
    n += compileRule(r.text, { family: r.family as 'ip', table: r.table, chain: r.chain, interfaces, sets: named.get(r.table) }).exprs.length;
  }
  return n;
});
const chains = raw.tables.reduce((n, t) => n + t.chains.length, 0);
console.log(`subset (${texts.length} rules in ${chains} chains): loader ${full.ms.toFixed(1)} ms (${full.result}) = ` +
  `read ${read.ms.toFixed(1)} ms + schema, checks and compile ${(full.ms - read.ms).toFixed(1)} ms; ` +
  `compileRule alone ${rules.ms.toFixed(1)} ms (${((rules.ms * 1000) / Math.max(1, texts.length)).toFixed(1)} µs per rule)`);
const perObject = full.ms / Math.max(1, red.rules.kept + red.objects.kept);
console.log(`per accepted object: ${(perObject * 1000).toFixed(1)} µs; at that rate the whole file's ` +
  `${c.rules + c.elements + c.chains + c.sets + 1} objects would take ${(perObject * (c.rules + c.elements + c.chains + c.sets + 1)).toFixed(0)} ms`);

/**
 * `nfkeeper validate --config FILE` in fresh processes through the real bin (its Node flags
 * included): median wall ms and, with /usr/bin/time, median CPU ms; the load average around it.
 */
function cold(text: string, n: number): { wallMs: number; cpuMs?: number; load: string } | string {
  const bin = join(PROJECT_ROOT, 'bin', 'nfkeeper.js');
  if (!existsSync(join(PROJECT_ROOT, 'dist', 'cli.js'))) return 'skipped: no dist/ (npm run build)';
  const dir = mkdtempSync(join(tmpdir(), 'nfk-peers-'));
  try {
    const file = join(dir, 'kube-proxy.nft');
    writeFileSync(file, text);
    const timeBin = existsSync('/usr/bin/time') ? '/usr/bin/time' : undefined;
    const wall: number[] = [];
    const cpu: number[] = [];
    const before = loadavg()[0]!;
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      const r = timeBin ? spawnSync(timeBin, ['-f', 'nfk-cpu %U %S', bin, 'validate', '--config', file], { encoding: 'utf8' })
        : spawnSync(bin, ['validate', '--config', file], { encoding: 'utf8' });
      wall.push(performance.now() - t);
      if (r.status !== 0) return `failed (exit ${r.status}): ${(r.stderr ?? '').split('\n')[0]}`;
      const m = /nfk-cpu ([\d.]+) ([\d.]+)/.exec(r.stderr ?? '');
      if (m) cpu.push((Number(m[1]) + Number(m[2])) * 1000);
    }
    return { wallMs: median(wall), ...(cpu.length ? { cpuMs: median(cpu) } : {}),
      load: `load average ${before.toFixed(1)} before, ${loadavg()[0]!.toFixed(1)} after` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// The same warm loads on the build (dist/), the JavaScript bin/nfkeeper.js runs.
let built: ReturnType<typeof time<string>> | undefined;
if (existsSync(join(PROJECT_ROOT, 'dist', 'config', 'config.js'))) {
  const dist = await import(join(PROJECT_ROOT, 'dist', 'config', 'config.js')) as typeof import('../src/config/config.js');
  built = time(() => {
    dist.parseNftConfig(file.text, 'kube-proxy.nft', { interfaces: dist.anyInterface() });
    return 'accepted';
  });
  console.log(`whole file on the build (dist/): loader ${built.ms.toFixed(1)} ms (median of ${runs}; CPU ${built.cpuMs.toFixed(1)} ms; ` +
    `first call in this process ${built.firstMs.toFixed(1)} ms, load average ${loadavg()[0]!.toFixed(1)})`);
}

const coldRuns = Number(cli.value('--cold-runs', '5'));
const coldResult = coldRuns > 0 ? cold(file.text, coldRuns) : undefined;
if (typeof coldResult === 'string') console.log(`nfkeeper validate (cold, the real bin): ${coldResult}`);
else if (coldResult) {
  console.log(`nfkeeper validate (cold, the real bin, fresh process each): ${coldResult.wallMs.toFixed(0)} ms wall` +
    `${coldResult.cpuMs !== undefined ? `, ${coldResult.cpuMs.toFixed(0)} ms CPU` : ''} (median of ${coldRuns}; ${coldResult.load})`);
}

const loadNote = `load average ${loadAtStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end, on ${os()}`;
console.log(loadNote);

const json = cli.value('--json');
if (json) {
  writeFileSync(json, JSON.stringify({
    family, services, bytes: file.text.length, counts: c,
    wholeFile: { ms: whole.ms, cpuMs: whole.cpuMs, firstMs: whole.firstMs, runs, result: whole.result },
    builtWholeFile: built && { ms: built.ms, cpuMs: built.cpuMs, firstMs: built.firstMs, runs },
    validateCold: coldResult,
    subset: { rules: red.rules, objects: red.objects, loaderMs: full.ms, readMs: read.ms, compileRulesMs: rules.ms },
    refused: Object.fromEntries(kinds), load: loadNote, node: process.version, date: new Date().toISOString(),
  }, null, 2) + '\n');
}
