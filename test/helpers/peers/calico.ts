/**
 * Calico's NAT as felix's nftables dataplane writes it (projectcalico/calico
 * felix/nftables: one table `calico` per IP family holding every felix
 * chain; this is its NAT part). Base chains `nat-PREROUTING|INPUT|OUTPUT|POSTROUTING`
 * with felix's priorities, each hooked to its `nat-cali-*` chain; the static
 * NAT chains of felix/rules (fip-dnat, fip-snat, nat-outgoing, the VXLAN
 * tunnel masquerade); the IPAM pool sets as interval sets. felix renders
 * each rule as MATCH `counter` ACTION with a comment `cali:HASH;` where HASH
 * chains sha224 over the chain name and the previous rules
 * (generictables.RuleHashes). Deterministic for a seed.
 */
import { createHash } from 'node:crypto';
import { concat, Transaction } from './knftables.js';
import type { PeerFile } from './kube-proxy.js';
import { Rng } from './rng.js';

/** generictables.RuleHashes: 16 characters of raw-URL base64 of a chained sha224. */
function ruleHashes(chain: string, rules: string[]): string[] {
  let hash = createHash('sha224').update(chain).digest();
  return rules.map((r) => {
    hash = createHash('sha224').update(hash).update(r).digest();
    return hash.toString('base64url').slice(0, 16);
  });
}

export function calico(o: { floatingIPs?: number; family?: 'ip' | 'ip6'; seed?: number } = {}): PeerFile {
  const family = o.family ?? 'ip';
  const six = family === 'ip6';
  const v = six ? 6 : 4;
  const ipX = family;
  const rng = new Rng(o.seed ?? 3);
  const tx = new Transaction(family, 'calico');
  tx.addTable();
  const masqPools = `cali${v}0masq-ipam-pools`;
  const allPools = `cali${v}0all-ipam-pools`;
  tx.addSet({ name: allPools, type: six ? 'ipv6_addr' : 'ipv4_addr', flags: ['interval'] });
  tx.addSet({ name: masqPools, type: six ? 'ipv6_addr' : 'ipv4_addr', flags: ['interval'] });
  const pools = six ? ['fd00:192:168::/48', 'fd00:10:10::/48'] : ['192.168.0.0/16', '10.10.0.0/16'];
  for (const p of pools) tx.addElement({ set: allPools, key: [p] });
  tx.addElement({ set: masqPools, key: [pools[0]!] });

  // felix's baseChains (felix/nftables/table.go), the NAT ones.
  const base: [string, string, string][] = [
    ['nat-PREROUTING', 'prerouting', 'dstnat'],
    ['nat-INPUT', 'input', 'dstnat'],
    ['nat-OUTPUT', 'output', 'srcnat'],
    ['nat-POSTROUTING', 'postrouting', 'srcnat'],
  ];
  for (const [name, hook, priority] of base) tx.addChain({ name, type: 'nat', hook, priority });

  const fips = Array.from({ length: o.floatingIPs ?? 4 }, (_, i) => ({
    ext: six ? `2001:db8:f1::${(i + 1).toString(16)}` : `198.51.100.${i + 1}`,
    int: six ? `fd00:192:168::${rng.int(2, 0xfff).toString(16)}` : `192.168.${rng.int(0, 255)}.${rng.int(2, 254)}`,
  }));
  // felix sorts the floating IPs (DNATsToIptablesChains / SNATsToIptablesChains).
  const byExt = [...fips].sort((a, b) => (a.ext < b.ext ? -1 : 1));
  const byInt = [...fips].sort((a, b) => (a.int < b.int ? -1 : 1));
  const chains: [string, string[]][] = [
    ['nat-cali-PREROUTING', ['counter jump nat-cali-fip-dnat']],
    ['nat-cali-POSTROUTING', [
      'counter jump nat-cali-fip-snat',
      'counter jump nat-cali-nat-outgoing',
      // the VXLAN tunnel: masquerade what the host sends through it from a non-tunnel address
      concat('oifname "vxlan.calico"', 'fib saddr . oif type != local', 'fib saddr type local', 'counter', 'masquerade fully-random'),
    ]],
    ['nat-cali-OUTPUT', ['counter jump nat-cali-fip-dnat']],
    ['nat-cali-nat-outgoing', [concat(ipX, 'saddr', `@${masqPools}`, ipX, 'daddr', '!=', `@${allPools}`, 'counter', 'masquerade fully-random')]],
    ['nat-cali-fip-dnat', byExt.map((f) => concat(ipX, 'daddr', f.ext, 'counter', 'dnat to', f.int))],
    ['nat-cali-fip-snat', byInt.map((f) => concat(ipX, 'daddr', f.int, ipX, 'saddr', f.int, 'counter', 'snat to', f.ext, 'fully-random'))],
  ];
  for (const [name] of chains) tx.addChain({ name });
  const hooked: [string, string][] = [
    ['nat-PREROUTING', 'counter jump nat-cali-PREROUTING'],
    ['nat-POSTROUTING', 'counter jump nat-cali-POSTROUTING'],
    ['nat-OUTPUT', 'counter jump nat-cali-OUTPUT'],
  ];
  for (const [chain, rule] of hooked) tx.addRule(chain, rule, `cali:${ruleHashes(chain, [rule])[0]};`);
  for (const [name, rules] of chains) {
    const hashes = ruleHashes(name, rules);
    rules.forEach((r, i) => tx.addRule(name, r, `cali:${hashes[i]};`));
  }
  return { family, table: 'calico', text: tx.text(), counts: { chains: tx.chains, rules: tx.rules, sets: tx.sets, elements: tx.elements } };
}
