/**
 * nft-exec: what knftables (kube-proxy's nftables mode, flannel's nftables
 * mode) does: read with `nft --json list table …`, write with `nft -f -`
 * carrying one flush-and-recreate transaction.
 */
import type { BenchNetns } from '../lib/netns.js';
import { run, runOk } from '../lib/exec.js';
import type { Driver } from './types.js';
import { canonical, NFT_CHAIN, NFT_JSON_RULES, NFT_PRIORITY, NFT_RULE_TEXT } from './flannel.js';

interface JsonItem {
  chain?: { table: string; name: string; type?: string; hook?: string; prio?: number };
  rule?: { table: string; chain: string; handle: number; expr: unknown[] };
}

export class NftExecDriver implements Driver {
  readonly name = 'nft-exec';
  readonly forksPerCheck = 1;
  readonly describe = '`nft --json list table`, parse, compare; repair: `nft -f -` (add table/chain, flush chain, add rules)';
  private readonly want = NFT_JSON_RULES.map(canonical);

  constructor(private readonly ns: BenchNetns, private readonly table = 'nfk-flannel-nft') {}

  private list(): JsonItem[] | undefined {
    const r = run(this.ns, 'nft', ['--json', 'list', 'table', 'ip', this.table]);
    if (r.status !== 0) {
      if (/No such file/.test(r.stderr)) return undefined;
      throw new Error(`nft list table failed (${r.status}): ${r.stderr}`);
    }
    return (JSON.parse(r.stdout) as { nftables: JsonItem[] }).nftables;
  }

  async check(): Promise<boolean> {
    const items = this.list();
    if (!items) return false;
    const chain = items.find((i) => i.chain?.name === NFT_CHAIN)?.chain;
    if (!chain || chain.type !== 'nat' || chain.hook !== 'postrouting' || chain.prio !== NFT_PRIORITY) return false;
    const rules = items.flatMap((i) => (i.rule && i.rule.chain === NFT_CHAIN ? [i.rule] : []));
    if (rules.length !== this.want.length) return false;
    return rules.every((r, i) => canonical(r.expr) === this.want[i]);
  }

  async repair(): Promise<void> {
    const t = `ip ${this.table}`;
    const text = [
      `add table ${t}`,
      `add chain ${t} ${NFT_CHAIN} { type nat hook postrouting priority srcnat; policy accept; }`,
      `flush chain ${t} ${NFT_CHAIN}`,
      ...NFT_RULE_TEXT.map((r) => `add rule ${t} ${NFT_CHAIN} ${r}`),
      '',
    ].join('\n');
    runOk(this.ns, 'nft', ['-f', '-'], text);
  }

  async damage(): Promise<void> {
    const items = this.list() ?? [];
    const rules = items.flatMap((i) => (i.rule && i.rule.chain === NFT_CHAIN ? [i.rule] : []));
    const victim = rules[1];
    if (!victim) throw new Error('nothing to damage');
    runOk(this.ns, 'nft', ['delete', 'rule', 'ip', this.table, NFT_CHAIN, 'handle', String(victim.handle)]);
  }

  close(): void {}
}
