/**
 * S5 GC of 1,000 orphaned owners, the Nomad case (src/gc): 1,000 dead allocs,
 * each a `CNI-…` chain of two tagged rules jumped from POSTROUTING by a tagged
 * rule (`-m comment --comment 'name: "nomad" id: "<id>"'`, loaded with
 * iptables-nft-restore), plus one live alloc and N foreign kube-proxy-like
 * rules in the same nat table.
 *
 *   native:  src/gc over one socket, the steps of collect() timed one by one:
 *            scan() (the table's chain and rule dumps, tag parsing, the garbage
 *            plan), planBatch(), one commit guarded by the scan's generation;
 *            the generation must move by exactly 1.
 *   script:  what a cleanup script would do with the binaries:
 *            iptables-nft-save -t nat, parse the tags, and one
 *            iptables-nft-restore --noflush that deletes the dead rules and chains.
 * Both must leave the same table: the live alloc and every foreign rule.
 */
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import { compileOwner, parseOwnerChain } from '../../src/owners/index.js';
import { ownerSpec, ownersYaml } from '../../test/owners/fixtures.js';
import { GraceTracker, planBatch, scan, type ForeignTable } from '../../src/gc/index.js';
import { open } from '../../src/index.js';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { cpuNow, runOk } from '../lib/exec.js';
import { summarize, type Summary } from '../lib/stats.js';
import { foreignCount, foreignRestore } from './foreign.js';

export const ORPHANS = 1000;
const LIVE = 'ee25f5d7-dcb9-b336-fe3e-27e365aa5cd0';
const FOREIGN: ForeignTable[] = [{ family: 'ip', table: 'nat', owner: 'nomad' }];

export interface S5Row {
  n: number;
  foreignRules: number;
  tool: string;
  m: Summary & { cpuUs: number };
  /** Kernel transactions per collection (native: generation delta; script: one restore). */
  batches: number;
  opsOrLines: number;
  /** native only, medians in µs: the scan, of which a table dump alone (measured just before), and the commit. */
  phases?: { scanUs: number; dumpUs: number; commitUs: number };
}

export interface S5Options {
  sizes: number[];
  /** Also owned GC (src/owners): 1,000 registered owners orphaned while the daemon was down. */
  owned: boolean;
  reps: (n: number) => number;
  log: (msg: string) => void;
}

function allocId(i: number): string {
  const h = i.toString(16).padStart(8, '0');
  return `${h}-0000-4000-8000-${h.padStart(12, '0')}`;
}
const chainOf = (i: number) => `CNI-${i.toString(16).padStart(24, '0')}`;
const tag = (id: string) => `"name: \\"nomad\\" id: \\"${id}\\""`;

/**
 * iptables-restore --noflush input: `orphans` dead allocs, and with withLive
 * the live one; that is loaded once, as reloading would append a second copy
 * of its POSTROUTING jump.
 */
export function nomadAllocs(orphans: number, withLive: boolean): string {
  const allocs: { chain: string; id: string; ip: string }[] = [];
  for (let i = 0; i < orphans; i++) allocs.push({ chain: chainOf(i), id: allocId(i), ip: `172.26.${(i >> 8) & 255}.${i & 255}` });
  if (withLive) allocs.push({ chain: chainOf(0xffffff), id: LIVE, ip: '172.27.0.1' });
  const lines = ['*nat', ...allocs.map((a) => `:${a.chain} - [0:0]`)];
  for (const a of allocs) {
    lines.push(`-A POSTROUTING -s ${a.ip}/32 -m comment --comment ${tag(a.id)} -j ${a.chain}`);
    lines.push(`-A ${a.chain} -d 172.26.64.0/20 -m comment --comment ${tag(a.id)} -j ACCEPT`);
    lines.push(`-A ${a.chain} ! -d 224.0.0.0/4 -m comment --comment ${tag(a.id)} -j MASQUERADE`);
  }
  lines.push('COMMIT', '');
  return lines.join('\n');
}

const TAG_RE = /--comment "name: \\"nomad\\" id: \\"([^"\\]+)\\""/;

/**
 * The script's plan from iptables-save text: rules tagged with a dead id go; a
 * chain goes when every rule in it is dead and it is jumped to only by dead
 * rules. Returns the iptables-restore --noflush input, or undefined.
 */
export function scriptPlan(save: string, live: ReadonlySet<string>): { text: string; lines: number } | undefined {
  const chainRules = new Map<string, { line: string; dead: boolean }[]>();
  const jumpedByLive = new Set<string>();
  const rules: { chain: string; line: string; dead: boolean; target: string | undefined }[] = [];
  for (const line of save.split('\n')) {
    if (line.startsWith(':')) {
      chainRules.set(line.slice(1, line.indexOf(' ')), []);
    } else if (line.startsWith('-A ')) {
      const chain = line.slice(3, line.indexOf(' ', 3));
      const id = TAG_RE.exec(line)?.[1];
      const target = / -j ([^ ]+)/.exec(line)?.[1];
      const dead = id !== undefined && !live.has(id);
      rules.push({ chain, line, dead, target });
      chainRules.get(chain)?.push({ line, dead });
      if (!dead && target) jumpedByLive.add(target);
    }
  }
  const deadChains = new Set<string>();
  for (const r of rules) {
    if (!r.dead || !r.target || jumpedByLive.has(r.target)) continue;
    const own = chainRules.get(r.target);
    if (own && own.every((x) => x.dead)) deadChains.add(r.target);
  }
  const out = ['*nat'];
  for (const c of deadChains) out.push(`:${c} - [0:0]`);  // in --noflush mode: flushes the chain
  for (const r of rules) if (r.dead && !deadChains.has(r.chain)) out.push(`-D${r.line.slice(2)}`);
  for (const c of deadChains) out.push(`-X ${c}`);
  if (out.length === 1) return undefined;
  out.push('COMMIT', '');
  return { text: out.join('\n'), lines: out.length - 3 };
}

// The owners tests' config and owner shape (a chain of 9 rules and a jump from postrouting: 10 rules);
// the keeper opens neither the socket nor the state file named in it.
const OWNED_CONFIG = parseConfig(ownersYaml('/nonexistent'));

/**
 * Owned GC: a keeper installs 1,000 owners and stops; a keeper started with
 * none (the owners were unregistered, or their state lost, while it was down)
 * must collect them all at start-up in one guarded batch. Timed: the start-up
 * pass (the keeper's own report, observe to committed) and the whole start().
 */
async function ownedGc(netns: string, reps: number): Promise<{ pass: number[]; start: number[]; ops: number }> {
  const table = OWNED_CONFIG.tables[0]!;
  const owners = Array.from({ length: ORPHANS }, (_, i) => compileOwner(`alloc-${String(i).padStart(4, '0')}`, ownerSpec(i, 10), OWNED_CONFIG.owners!, table));
  const pass: number[] = [], start: number[] = [];
  let ops = 0;
  const sock = open({ netns });
  try {
    for (let i = 0; i < reps; i++) {
      const install = new Keeper({ config: OWNED_CONFIG, netns, intervalMs: 3_600_000, owners });
      install.on('error', () => undefined);
      await install.start();
      await install.stop();
      const gen = sock.generation();
      const gc = new Keeper({ config: OWNED_CONFIG, netns, intervalMs: 3_600_000, owners: [] });
      gc.on('error', () => undefined);
      let report: RepairReport | undefined;
      gc.on('repaired', (r: RepairReport) => { report = r; });
      const t0 = performance.now();
      await gc.start();
      const t1 = performance.now();
      await gc.stop();
      const left = (await sock.listChains({ family: 'ip', table: 'nfkeeper' })).filter((c) => parseOwnerChain(c.name)).length;
      const moved = sock.generation() - gen;
      if (!report || left !== 0 || moved !== 1) throw new Error(`owned GC: ${left} owner chains left, generation moved by ${moved}`);
      pass.push(report.latencyMs * 1000);
      start.push((t1 - t0) * 1000);
      ops = report.ops;
    }
  } finally {
    sock.close();
  }
  return { pass, start, ops };
}

/** The table after GC, without counters and comments: the same for both tools. */
function natState(ns: BenchNetns): string {
  return runOk(ns, 'iptables-nft-save', ['-t', 'nat']).split('\n').filter((l) => !l.startsWith('#'))
    .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
}

export async function runS5(o: S5Options): Promise<S5Row[]> {
  const out: S5Row[] = [];
  const live = new Set([LIVE]);
  for (const n of o.sizes) {
    const reps = o.reps(n);
    await withBenchNetns(`s5-${n}`, async (ns) => {
      if (n > 0) runOk(ns, 'iptables-nft-restore', ['--noflush'], foreignRestore('a', n));
      runOk(ns, 'iptables-nft-restore', ['--noflush'], nomadAllocs(0, true));
      const allocs = nomadAllocs(ORPHANS, false);
      const sock = open({ netns: ns.path });
      let expected: string | undefined;
      const check = (tool: string) => {
        const s = natState(ns);
        if (s.split('\n').filter((l) => l.startsWith(':CNI-')).length !== 1) throw new Error(`${tool}: dead chains left behind`);
        if (expected === undefined) expected = s;
        else if (s !== expected) throw new Error(`${tool}: the table after GC differs from native's`);
      };
      try {
        const native: number[] = [], script: number[] = [], scans: number[] = [], dumps: number[] = [], commits: number[] = [];
        let nativeCpu = 0, scriptCpu = 0, ops = 0, lines = 0;
        for (let i = 0; i < reps; i++) {
          runOk(ns, 'iptables-nft-restore', ['--noflush'], allocs);
          const dumpStart = performance.now();
          await Promise.all([sock.listChains({ family: 'ip', table: 'nat' }), sock.listRules({ family: 'ip', table: 'nat' })]);
          dumps.push((performance.now() - dumpStart) * 1000);
          const gen = sock.generation();
          const c0 = cpuNow();
          const t0 = performance.now();
          const found = await scan(sock, { foreign: FOREIGN, live, graceMs: 0, tracker: new GraceTracker() });
          const t1 = performance.now();
          const batch = planBatch(found.garbage);
          await sock.commit(batch, { expectGeneration: found.generation });
          const t2 = performance.now();
          const c1 = cpuNow();
          if (found.garbage.length !== ORPHANS) throw new Error(`native GC found ${found.garbage.length} ids`);
          const moved = sock.generation() - gen;
          if (moved !== 1) throw new Error(`native GC moved the generation by ${moved}, not 1`);
          native.push((t2 - t0) * 1000);
          scans.push((t1 - t0) * 1000);
          commits.push((t2 - t1) * 1000);
          nativeCpu += c1.self - c0.self + c1.children - c0.children;
          ops = batch.length;
          check('native');

          runOk(ns, 'iptables-nft-restore', ['--noflush'], allocs);
          const d0 = cpuNow();
          const s0 = performance.now();
          const plan = scriptPlan(runOk(ns, 'iptables-nft-save', ['-t', 'nat']), live);
          if (!plan) throw new Error('script GC found nothing');
          runOk(ns, 'iptables-nft-restore', ['--noflush'], plan.text);
          const s1 = performance.now();
          const d1 = cpuNow();
          script.push((s1 - s0) * 1000);
          scriptCpu += d1.self - d0.self + d1.children - d0.children;
          lines = plan.lines;
          check('script');
        }
        const fr = foreignCount('a', n);
        const nat = { ...summarize(native), cpuUs: nativeCpu / reps };
        const scr = { ...summarize(script), cpuUs: scriptCpu / reps };
        out.push({ n, foreignRules: fr, tool: 'native (src/gc scan + one batch)', m: nat, batches: 1, opsOrLines: ops,
          phases: { scanUs: summarize(scans).median, dumpUs: summarize(dumps).median, commitUs: summarize(commits).median } });
        out.push({ n, foreignRules: fr, tool: 'iptables-nft-save + restore --noflush', m: scr, batches: 1, opsOrLines: lines });
        if (o.owned) {
          const g = await ownedGc(ns.path, reps);
          out.push({ n, foreignRules: fr, tool: 'owned GC: keeper start-up pass (src/owners)', m: { ...summarize(g.pass), cpuUs: NaN }, batches: 1, opsOrLines: g.ops });
          out.push({ n, foreignRules: fr, tool: 'owned GC: whole keeper start()', m: { ...summarize(g.start), cpuUs: NaN }, batches: 1, opsOrLines: g.ops });
          o.log(`    N = ${n.toLocaleString('en-US')}: owned GC of ${ORPHANS} owners at start-up: pass median ${(summarize(g.pass).median / 1000).toFixed(1)} ms, ` +
            `start() ${(summarize(g.start).median / 1000).toFixed(1)} ms (${g.ops} ops, one batch)`);
        }
        o.log(`    N = ${n.toLocaleString('en-US')}: native median ${(nat.median / 1000).toFixed(1)} ms (${ops} ops, one batch; ` +
          `scan ${(summarize(scans).median / 1000).toFixed(1)} ms of which a table dump ${(summarize(dumps).median / 1000).toFixed(1)} ms, ` +
          `commit ${(summarize(commits).median / 1000).toFixed(1)} ms); ` +
          `script median ${(scr.median / 1000).toFixed(1)} ms (${lines} restore lines)  (${reps} runs each)`);
      } finally {
        sock.close();
      }
    });
  }
  return out;
}
