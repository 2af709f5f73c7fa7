/**
 * `nfkeeper demo`: in a network namespace of its own, installs the flannel
 * example, tampers with it the ways the keeper must survive, and shows each
 * repair with its latency and the final rule order. Removes the namespace
 * at the end, also on failure. Nothing outside that namespace is touched.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseConfig } from './config/config.js';
import { Keeper, type RepairReport } from './keeper/keeper.js';
import { PROJECT_ROOT } from './netlink/addon.js';

interface Step {
  name: string;
  script: (handles: number[]) => string;
}

const T = 'ip nfkeeper';
const C = `${T} postrouting`;

const STEPS: Step[] = [
  { name: 'delete rule 2', script: (h) => `delete rule ${C} handle ${h[1]}` },
  { name: 'insert a foreign rule first', script: () => `insert rule ${C} ip saddr 192.0.2.1 accept` },
  { name: 'replace rule 1 in place', script: (h) => `replace rule ${C} handle ${h[0]} ip saddr 10.0.0.0/8 return` },
  { name: 'flush the chain', script: () => `flush chain ${C}` },
  { name: 'delete the chain', script: () => `flush chain ${C}\ndelete chain ${C}` },
  { name: 'delete the table', script: () => `delete table ${T}` },
  { name: 'nft flush ruleset', script: () => 'flush ruleset' },
];

/**
 * The rule handles in `nft -a list chain` output, in order (the chain's own line has one too).
 * Tests and benchmarks have their own in test/helpers/nft.ts: src/ does not serve test code.
 */
function ruleHandles(listing: string): number[] {
  return listing.split('\n').filter((l) => !/^\s*(chain|table)\b/.test(l))
    .flatMap((l) => [...l.matchAll(/# handle (\d+)/g)].map((m) => Number(m[1])));
}

export interface DemoResult {
  step: string;
  repaired: boolean;
  cause?: string;
  latencyMs?: number;
  drift?: string[];
  orderOk: boolean;
}

function sh(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { input, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr || r.error}`);
  return r.stdout;
}

export async function demo(options: { json: boolean; out: (s: string) => void }): Promise<number> {
  const { out } = options;
  const file = join(PROJECT_ROOT, 'examples', 'flannel.yaml');
  const config = parseConfig(readFileSync(file, 'utf8'), file);
  const ns = `nfk-demo-${process.pid}`;
  const nft = (script: string) => sh('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], script);
  const listing = () => sh('ip', ['netns', 'exec', ns, 'nft', '-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']);
  const wantOrder = config.tables[0]!.chains[0]!.rules.map((r) => r.compiled.text);
  sh('ip', ['netns', 'add', ns]);
  const keeper = new Keeper({ config, netns: `/run/netns/${ns}`, intervalMs: 1000 });
  const results: DemoResult[] = [];
  try {
    if (!options.json) out(`nfkeeper demo in network namespace ${ns} (the host's firewall is not touched)\n`);
    const t0 = performance.now();
    await keeper.start();
    if (!options.json) {
      out(`installed ${file} in ${(performance.now() - t0).toFixed(1)} ms:`);
      out(listing().trimEnd().split('\n').map((l) => '    ' + l).join('\n') + '\n');
    }
    for (const step of STEPS) {
      const handles = ruleHandles(listing());
      const repaired = new Promise<RepairReport | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), 5000);
        keeper.once('repaired', (r: RepairReport) => {
          clearTimeout(timer);
          resolve(r);
        });
      });
      nft(step.script(handles));
      const r = await repaired;
      await keeper.idle();
      const lines = listing().split('\n').map((l) => l.trim().replace(/\s+# handle \d+$/, ''))
        .filter((l) => /^(ip|meta|masquerade|return|accept)/.test(l));
      const orderOk = lines.length === wantOrder.length && lines.every((l, i) => l === wantOrder[i]);
      results.push({ step: step.name, repaired: r !== undefined, cause: r?.cause, latencyMs: r?.latencyMs,
        drift: r?.drift.map((d) => d.detail), orderOk });
    }
  } finally {
    await keeper.stop();
    spawnSync('ip', ['netns', 'del', ns]);
  }
  const ok = results.every((r) => r.repaired && r.orderOk);
  if (options.json) {
    out(JSON.stringify({ ok, results }));
  } else {
    out('tampering                      repaired  by     detection→repair  order');
    for (const r of results) {
      out(`${r.step.padEnd(30)} ${(r.repaired ? 'yes' : 'NO').padEnd(9)} ${(r.cause ?? '-').padEnd(6)} ` +
        `${r.latencyMs !== undefined ? (r.latencyMs.toFixed(3) + ' ms').padStart(12) : '           -'}      ${r.orderOk ? 'ok' : 'WRONG'}`);
    }
    out(`\n${ok ? 'every tampering was repaired in order' : 'SOME TAMPERING WAS NOT REPAIRED'}; namespace ${ns} removed`);
  }
  return ok ? 0 : 1;
}
