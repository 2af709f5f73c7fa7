/**
 * S3 atomic rewrite of 10,000 owned rules: 1,000 owners (chains) × 10 rules,
 * written in one transaction by each tool, from empty and as a full replace
 * (the previous 10,000 rules replaced by 10,000 different ones).
 *   native:                one netlink batch over the addon's long-lived socket
 *   nft -f:                `nft -f -` with the whole table in nft syntax
 *   iptables-nft-restore:  `iptables-nft-restore` of the whole nat table (no --noflush)
 * Inputs (ops arrays, text) are built before the clock starts; the native
 * timing includes op validation inside commit(). No foreign rules (N = 0).
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { open, type Op } from '../../src/index.js';
import { withBenchNetns, type BenchNetns } from '../lib/netns.js';
import { run, runOk, cpuNow } from '../lib/exec.js';
import { summarize, type Summary } from '../lib/stats.js';

export const OWNERS = 1000;
export const PER_OWNER = 10;
const TABLE = 'nfk-s3';

export interface S3Row {
  tool: string;
  mode: 'from empty' | 'full replace';
  m: Summary & { cpuUs: number };
}

const chainName = (o: number): string => `own-${String(o).padStart(4, '0')}`;
const src = (o: number, r: number): string => `10.${o >> 8}.${o & 0xff}.${r + 1}`;
const dst = (r: number, v: number): string => `10.${200 + v}.0.${r + 1}`;
const hex = (a: string): string => Buffer.from(a.split('.').map(Number)).toString('hex');

/** The S3 rules as ops (version v), in `table`; bench/commit.ts times the same write alone. */
export function nativeOps(v: number, replace: boolean, table = TABLE): Op[] {
  const family = 'ip' as const;
  const ops: Op[] = [];
  if (replace) ops.push({ verb: 'delete', object: 'table', family, name: table });
  ops.push({ verb: 'add', object: 'table', family, name: table });
  for (let o = 0; o < OWNERS; o++) ops.push({ verb: 'add', object: 'chain', family, table, name: chainName(o) });
  for (let o = 0; o < OWNERS; o++) {
    for (let r = 0; r < PER_OWNER; r++) {
      ops.push({
        verb: 'add', object: 'rule', family, table, chain: chainName(o), exprs: [
          { kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 },
          { kind: 'cmp', sreg: 1, op: 'eq', data: hex(src(o, r)) },
          { kind: 'payload', base: 'network', offset: 16, len: 4, dreg: 1 },
          { kind: 'cmp', sreg: 1, op: 'eq', data: hex(dst(r, v)) },
          { kind: 'immediate', dreg: 0, verdict: 'accept' },
        ],
      });
    }
  }
  return ops;
}

/** The same rules as an `nft -f` script. */
export function nftText(v: number, replace: boolean, table = TABLE): string {
  const out: string[] = [];
  if (replace) out.push(`delete table ip ${table}`);
  out.push(`table ip ${table} {`);
  for (let o = 0; o < OWNERS; o++) {
    out.push(`  chain ${chainName(o)} {`);
    for (let r = 0; r < PER_OWNER; r++) out.push(`    ip saddr ${src(o, r)} ip daddr ${dst(r, v)} accept`);
    out.push('  }');
  }
  out.push('}', '');
  return out.join('\n');
}

function iptText(v: number): string {
  const out = ['*nat', ':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]'];
  for (let o = 0; o < OWNERS; o++) out.push(`:OWN-${String(o).padStart(4, '0')} - [0:0]`);
  for (let o = 0; o < OWNERS; o++) {
    for (let r = 0; r < PER_OWNER; r++) out.push(`-A OWN-${String(o).padStart(4, '0')} -s ${src(o, r)}/32 -d ${dst(r, v)}/32 -j ACCEPT`);
  }
  out.push('COMMIT', '');
  return out.join('\n');
}

async function countRules(ns: BenchNetns, table: string): Promise<number> {
  const s = open({ netns: ns.path });
  try {
    return (await s.listRules({ family: 'ip', table })).length;
  } catch {
    return 0;
  } finally {
    s.close();
  }
}

function dropTable(ns: BenchNetns, table: string): void {
  run(ns, 'nft', ['delete', 'table', 'ip', table]);
}

export async function runS3(reps: number, log: (m: string) => void): Promise<S3Row[]> {
  return withBenchNetns('s3', async (ns) => {
    const total = OWNERS * PER_OWNER;
    const sock = open({ netns: ns.path });
    const tools: { tool: string; table: string; write: (v: number, replace: boolean) => Promise<void> | void; prepare: (v: number, replace: boolean) => void }[] = [];
    let pendingOps: Op[] = [];
    let pendingText = '';
    tools.push({
      tool: 'native (one batch)', table: TABLE,
      prepare: (v, replace) => { pendingOps = nativeOps(v, replace); },
      write: async () => { await sock.commit(pendingOps); },
    });
    tools.push({
      tool: 'nft -f', table: TABLE,
      prepare: (v, replace) => { pendingText = nftText(v, replace); },
      write: () => { runOk(ns, 'nft', ['-f', '-'], pendingText); },
    });
    tools.push({
      tool: 'iptables-nft-restore', table: 'nat',
      prepare: (v) => { pendingText = iptText(v); },
      write: () => { runOk(ns, 'iptables-nft-restore', [], pendingText); },
    });
    const rows: S3Row[] = [];
    try {
      for (const t of tools) {
        for (const mode of ['from empty', 'full replace'] as const) {
          const samples: number[] = [];
          let cpu = 0;
          for (let i = 0; i < reps; i++) {
            dropTable(ns, t.table);
            if (mode === 'full replace') {
              t.prepare(0, false);
              await t.write(0, false);
            }
            const v = mode === 'full replace' ? 1 : 0;
            t.prepare(v, mode === 'full replace');
            const c0 = cpuNow();
            const t0 = process.hrtime.bigint();
            await t.write(v, mode === 'full replace');
            const us = Number(process.hrtime.bigint() - t0) / 1000;
            const c1 = cpuNow();
            samples.push(us);
            cpu += c1.self - c0.self + c1.children - c0.children;
            await yieldToLoop();
            const n = await countRules(ns, t.table);
            if (n !== total) throw new Error(`${t.tool} ${mode}: ${n} rules in the table, expected ${total}`);
          }
          const m = { ...summarize(samples), cpuUs: cpu / reps };
          log(`    ${t.tool.padEnd(22)} ${mode.padEnd(13)} median ${(m.median / 1000).toFixed(1)} ms  (${reps} runs)`);
          rows.push({ tool: t.tool, mode, m });
        }
        dropTable(ns, t.table);
      }
      return rows;
    } finally {
      sock.close();
    }
  });
}
