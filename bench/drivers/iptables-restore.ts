/**
 * iptables-restore: what Calico felix (felix/iptables/table.go) and
 * kube-proxy's iptables proxier do: read the whole table with
 * `iptables-nft-save -t nat`, parse it, compare with the desired chain; write
 * with one `iptables-nft-restore --noflush` that rewrites the owned chain.
 */
import type { BenchNetns } from '../lib/netns.js';
import { runOk } from '../lib/exec.js';
import type { Driver } from './types.js';
import { IPT_CHAIN, IPT_JUMP, IPT_RULES, saveLine } from './flannel.js';
import { restoreArgs } from './iptables-check.js';

export class IptablesRestoreDriver implements Driver {
  readonly name = 'iptables-restore';
  readonly forksPerCheck = 1;
  readonly describe = '`iptables-nft-save -t nat`, parse, compare; repair: one `iptables-nft-restore --noflush`';
  private readonly wantJump = saveLine(IPT_JUMP);
  private readonly want = IPT_RULES.map(saveLine);

  constructor(private readonly ns: BenchNetns) {}

  /** The save output's rules by chain, in order. */
  static parse(save: string): Map<string, string[]> {
    const chains = new Map<string, string[]>();
    for (const line of save.split('\n')) {
      if (line.startsWith(':')) {
        const name = line.slice(1, line.indexOf(' '));
        if (!chains.has(name)) chains.set(name, []);
      } else if (line.startsWith('-A ')) {
        const name = line.slice(3, line.indexOf(' ', 3));
        let list = chains.get(name);
        if (!list) chains.set(name, (list = []));
        list.push(line);
      }
    }
    return chains;
  }

  async check(): Promise<boolean> {
    const chains = IptablesRestoreDriver.parse(runOk(this.ns, 'iptables-nft-save', ['-t', 'nat']));
    const own = chains.get(IPT_CHAIN);
    if (!own || own.length !== this.want.length || own.some((l, i) => l !== this.want[i])) return false;
    return (chains.get('POSTROUTING') ?? []).includes(this.wantJump);
  }

  async repair(): Promise<void> {
    const chains = IptablesRestoreDriver.parse(runOk(this.ns, 'iptables-nft-save', ['-t', 'nat']));
    const lines = ['*nat', `:${IPT_CHAIN} - [0:0]`, ...IPT_RULES.map((r) => restoreArgs(r, '-A'))];
    if (!(chains.get('POSTROUTING') ?? []).includes(this.wantJump)) lines.push(restoreArgs(IPT_JUMP, '-A'));
    lines.push('COMMIT', '');
    runOk(this.ns, 'iptables-nft-restore', ['--noflush'], lines.join('\n'));
  }

  async damage(): Promise<void> {
    const r = IPT_RULES[1]!;
    runOk(this.ns, 'iptables-nft', ['-t', 'nat', '-D', r.chain, ...r.spec, '--wait']);
  }

  close(): void {}
}
