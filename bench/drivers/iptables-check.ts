/**
 * iptables-check: what flannel's iptables mode does every resync period
 * (flannel pkg/trafficmngr/iptables/iptables.go, ensureIPTables): one
 * `iptables -t nat -C CHAIN RULE --wait` fork per desired rule, stopping at the
 * first miss (go-iptables Exists; the jump from POSTROUTING is one of flannel's
 * rules, so 5 forks per check); on a miss, one `iptables-restore --noflush`
 * that deletes and re-appends the whole set in order.
 *
 * Works with either back end: iptables-nft (default) or iptables-legacy.
 */
import type { BenchNetns } from '../lib/netns.js';
import { run, runOk } from '../lib/exec.js';
import type { Driver } from './types.js';
import { IPT_CHAIN, IPT_JUMP, IPT_RULES, type IptRule } from './flannel.js';

const ALL: IptRule[] = [IPT_JUMP, ...IPT_RULES];

export function restoreArgs(r: IptRule, verb: '-A' | '-D'): string {
  return [verb, r.chain, ...r.spec.map((a) => (a.includes(' ') ? `"${a}"` : a))].join(' ');
}

export class IptablesCheckDriver implements Driver {
  readonly name: string;
  readonly describe: string;
  readonly forksPerCheck = ALL.length;
  constructor(private readonly ns: BenchNetns, private readonly backend: 'nft' | 'legacy' = 'nft') {
    this.name = backend === 'nft' ? 'iptables-check' : 'iptables-check (legacy)';
    this.describe = `${ALL.length} × \`iptables-${backend} -t nat -C … --wait\` forks; repair: one \`iptables-${backend}-restore --noflush\``;
  }

  private exists(r: IptRule): boolean {
    const res = run(this.ns, `iptables-${this.backend}`, ['-t', 'nat', '-C', r.chain, ...r.spec, '--wait']);
    if (res.status === 0) return true;
    if (res.status === 1) return false;
    // A missing chain (exit 2); go-iptables would report an error here, flannel then rebuilds.
    if (res.status === 2 && /does not exist|No chain|Couldn't load target/.test(res.stderr)) return false;
    throw new Error(`iptables-${this.backend} -C failed (${res.status}): ${res.stderr}`);
  }

  async check(): Promise<boolean> {
    for (const r of ALL) if (!this.exists(r)) return false;
    return true;
  }

  async repair(): Promise<void> {
    // As flannel's ipTablesCleanAndBuild: ask which rules exist, delete those and append all.
    // Declaring the owned chain in --noflush mode creates it, or flushes it when it exists,
    // which deletes the chain's rules in the same transaction.
    const lines = ['*nat', `:${IPT_CHAIN} - [0:0]`];
    if (this.exists(IPT_JUMP)) lines.push(restoreArgs(IPT_JUMP, '-D'));
    for (const r of ALL) lines.push(restoreArgs(r, '-A'));
    lines.push('COMMIT', '');
    runOk(this.ns, `iptables-${this.backend}-restore`, ['--noflush'], lines.join('\n'));
  }

  async damage(): Promise<void> {
    const r = IPT_RULES[1]!;
    runOk(this.ns, `iptables-${this.backend}`, ['-t', 'nat', '-D', r.chain, ...r.spec, '--wait']);
  }

  close(): void {}
}
