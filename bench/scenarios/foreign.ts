/**
 * Foreign rules loaded into the benchmark's namespace before the drivers
 * install their own: layout (a) kube-proxy-like (test/netlink/fixtures.ts,
 * about N/2 chains), layout (b) all N rules in the shared nat POSTROUTING.
 */
import { kubeProxyRestore, kubeProxyRuleCount } from '../../test/netlink/fixtures.js';

export type Layout = 'a' | 'b';

export const LAYOUT_TEXT: Record<Layout, string> = {
  a: '(a) kube-proxy-like: KUBE-SERVICES/KUBE-SVC-*/KUBE-SEP-* chains with -m comment and -j DNAT, about N/2 chains',
  b: '(b) worst case: all N foreign rules in the shared nat POSTROUTING chain',
};

/** iptables-restore input (for --noflush) for about n foreign rules. */
export function foreignRestore(layout: Layout, n: number): string {
  if (layout === 'a') return kubeProxyRestore(n);
  const lines = ['*nat'];
  for (let i = 0; i < n; i++) {
    lines.push(`-A POSTROUTING -s 10.${64 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}/32 -m comment --comment "foreign ${i}" -j RETURN`);
  }
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** The number of rules foreignRestore writes. */
export function foreignCount(layout: Layout, n: number): number {
  if (n === 0) return 0;
  return layout === 'a' ? kubeProxyRuleCount(n) : n;
}
