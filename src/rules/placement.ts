/**
 * Where a compiled rule may go: jumps to chains that exist, NAT statements in
 * the nat chains and hooks the kernel accepts them in. Checked for the
 * config's tables and for owners' chains alike.
 */
import type { ChainType, Hook } from '../netlink/objects.js';
import type { CompiledRule } from './compile.js';

/** What the kernel would refuse at commit time, said before anything is sent. */
export function checkRulePlacement(rule: CompiledRule, hook: Hook | undefined, type: ChainType | undefined,
  chains: ReadonlySet<string>, scope = 'this table'): string | undefined {
  for (const e of rule.exprs) {
    if (e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') && e.chain && !chains.has(e.chain)) {
      return `${e.verdict} to chain '${e.chain}', which ${scope} does not define`;
    }
    if (hook === undefined) continue;  // regular chains: the kernel checks through the jumps
    const dnatLike = (e.kind === 'nat' && e.type === 'dnat') || e.kind === 'redir';
    const snatLike = (e.kind === 'nat' && e.type === 'snat') || e.kind === 'masq';
    if ((dnatLike || snatLike) && type !== 'nat') return 'NAT statements need a chain of type nat';
    if (dnatLike && hook !== 'prerouting' && hook !== 'output') {
      return 'dnat and redirect are only valid in prerouting and output chains';
    }
    if (snatLike && hook !== 'postrouting' && hook !== 'input') {
      return 'snat and masquerade are only valid in postrouting and input chains';
    }
  }
  return undefined;
}
