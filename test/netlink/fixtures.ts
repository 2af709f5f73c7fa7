/**
 * Shared fixtures for the netlink tests: foreign rulesets in a kube-proxy-like
 * layout (loaded with `nft -f` or `iptables-nft-restore`), xt info blobs as
 * iptables-nft builds them, hex helpers and process counters.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { withNetns, type Netns } from '../helpers/netns.js';
import { open, type Expr, type NftSocket, type Op } from '../../src/index.js';

/**
 * Under scripts/sanitize.sh (NFK_SANITIZE=1) the sizes of the big tests are
 * divided by 10 unless it runs with --full (NFK_SANITIZE_FULL=1): the same
 * code paths (errors-only acks, overflowing receive buffers, multi-message
 * dumps) at sizes an ASan-instrumented Node gets through in CI time.
 */
export const SANITIZE_QUICK = process.env.NFK_SANITIZE === '1' && process.env.NFK_SANITIZE_FULL !== '1';
export function scaled(n: number): number {
  return SANITIZE_QUICK ? Math.round(n / 10) : n;
}

/** Lowercase hex of an IPv4 address in network order: 10.0.0.1 -> 0a000001. */
export function ip4(addr: string): string {
  return Buffer.from(addr.split('.').map(Number)).toString('hex');
}

/** A port in network order: 8080 -> 1f90. */
export function port(p: number): string {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(p);
  return b.toString('hex');
}

/** A u32 in host (little-endian) order, as meta/ct marks and fib results are held. */
export function u32le(v: number): string {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v >>> 0);
  return b.toString('hex');
}

/** struct xt_comment_info { char comment[256]; } as hex. */
export function commentInfo(text: string): string {
  const b = Buffer.alloc(256);
  if (Buffer.byteLength(text) > 255) throw new Error('xt comment is at most 255 bytes');
  b.write(text, 'utf8');
  return b.toString('hex');
}

/** The comment text held in xt comment match info. */
export function commentText(infoHex: string): string {
  const b = Buffer.from(infoHex, 'hex');
  const end = b.indexOf(0);
  return b.subarray(0, end < 0 ? b.length : end).toString('utf8');
}

/**
 * MASQUERADE target info, struct nf_nat_ipv4_multi_range_compat with
 * rangesize 1 (host order), XT_ALIGNed from 20 to 24 bytes.
 */
export function masqueradeInfo(flags = 0): string {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(1, 0);
  b.writeUInt32LE(flags, 4);
  return b.toString('hex');
}

/** `ip saddr == addr` (or daddr) as iptables-nft and nft encode it. */
export function matchAddr(which: 'saddr' | 'daddr', addr: string): Expr[] {
  return [
    { kind: 'payload', base: 'network', offset: which === 'saddr' ? 12 : 16, len: 4, dreg: 1 },
    { kind: 'cmp', sreg: 1, op: 'eq', data: ip4(addr) },
  ];
}

/** Open file descriptors of this process. */
export function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Resident set size of this process in bytes. */
export function rssBytes(): number {
  const statm = readFileSync('/proc/self/statm', 'utf8').split(' ');
  return Number(statm[1]) * 4096;
}

/** `nft list ruleset` inside the namespace. */
export function listRuleset(ns: Netns): string {
  return ns.exec('nft', ['list', 'ruleset']);
}

// --- the owned chain --------------------------------------------------------

export const OWNED = { family: 'ip', table: 'nfkeeper', chain: 'owned' } as const;

/** The four rules a keeper would own: two SNAT-ish rules and two jumps, tagged by userdata. */
export function ownedRules(tag = 'a'): Expr[][] {
  return [
    [...matchAddr('saddr', '10.1.0.1'), { kind: 'counter' }, { kind: 'immediate', dreg: 0, verdict: 'accept' }],
    [...matchAddr('saddr', '10.1.0.2'), { kind: 'immediate', dreg: 0, verdict: 'drop' }],
    [...matchAddr('daddr', '10.2.0.1'), { kind: 'meta', key: 'mark', dreg: 1 },
      { kind: 'cmp', sreg: 1, op: 'eq', data: u32le(tag.charCodeAt(0)) },
      { kind: 'immediate', dreg: 0, verdict: 'accept' }],
    [{ kind: 'counter' }, { kind: 'immediate', dreg: 0, verdict: 'return' }],
  ];
}

/** Ops creating the owned table and chain with its four rules. */
export function ownedSetup(tag = 'a'): Op[] {
  const { family, table, chain } = OWNED;
  return [
    { verb: 'add', object: 'table', family, name: table },
    { verb: 'add', object: 'chain', family, table, name: chain },
    ...ownedRules(tag).map((exprs): Op => ({ verb: 'add', object: 'rule', family, table, chain, exprs })),
  ];
}

/** One batch: flush the owned chain and add its four rules again. */
export function flushAndReplace(tag = 'b'): Op[] {
  const { family, table, chain } = OWNED;
  return [
    { verb: 'flush', object: 'chain', family, table, name: chain },
    ...ownedRules(tag).map((exprs): Op => ({ verb: 'add', object: 'rule', family, table, chain, exprs })),
  ];
}

// --- foreign rules ----------------------------------------------------------
// kube-proxy's layout: per service one KUBE-SERVICES rule, one KUBE-SVC- chain
// with one rule and one KUBE-SEP- chain with two (mark for masquerade, DNAT).
// Four rules and two chains per service: N rules sit in about N/2 chains.

function svcId(i: number): string {
  return i.toString(16).toUpperCase().padStart(16, '0');
}

function svcAddrs(i: number): { clusterIp: string; podIp: string } {
  return {
    clusterIp: `10.96.${(i >> 8) & 0xff}.${i & 0xff}`,
    podIp: `10.244.${(i >> 8) & 0xff}.${i & 0xff}`,
  };
}

/**
 * iptables-nft-restore input with about `rules` rules in the `nat` table,
 * kube-proxy style: -m comment and -j DNAT, which iptables-nft stores as xt
 * match and target expressions.
 */
export function kubeProxyRestore(rules: number): string {
  const services = Math.max(1, Math.round(rules / 4));
  const chains: string[] = [':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]',
    ':POSTROUTING ACCEPT [0:0]', ':KUBE-SERVICES - [0:0]', ':KUBE-MARK-MASQ - [0:0]', ':KUBE-POSTROUTING - [0:0]'];
  const lines: string[] = [
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    '-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000',
    '-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE',
  ];
  for (let i = 0; i < services; i++) {
    const id = svcId(i);
    const { clusterIp, podIp } = svcAddrs(i);
    chains.push(`:KUBE-SVC-${id} - [0:0]`, `:KUBE-SEP-${id} - [0:0]`);
    lines.push(
      `-A KUBE-SERVICES -d ${clusterIp}/32 -p tcp -m comment --comment "default/svc-${i} cluster IP" -m tcp --dport 80 -j KUBE-SVC-${id}`,
      `-A KUBE-SVC-${id} -m comment --comment "default/svc-${i} -> ${podIp}:8080" -j KUBE-SEP-${id}`,
      `-A KUBE-SEP-${id} -s ${podIp}/32 -m comment --comment "default/svc-${i}" -j KUBE-MARK-MASQ`,
      `-A KUBE-SEP-${id} -p tcp -m comment --comment "default/svc-${i}" -m tcp -j DNAT --to-destination ${podIp}:8080`,
    );
  }
  return ['*nat', ...chains, ...lines, 'COMMIT', ''].join('\n');
}

/** The number of rules kubeProxyRestore(rules) writes. */
export function kubeProxyRuleCount(rules: number): number {
  return 5 + 4 * Math.max(1, Math.round(rules / 4));
}

/** The same layout in native nft syntax, in table `ip <table>`. */
export function kubeProxyNft(rules: number, table = 'kube'): string {
  const services = Math.max(1, Math.round(rules / 4));
  const out: string[] = [`table ip ${table} {`,
    '  chain prerouting { type nat hook prerouting priority dstnat; policy accept; jump services; }',
    '  chain mark-masq { meta mark set meta mark or 0x4000; }'];
  const svc: string[] = [];
  for (let i = 0; i < services; i++) {
    const { clusterIp, podIp } = svcAddrs(i);
    svc.push(`    ip daddr ${clusterIp} tcp dport 80 jump svc-${i} comment "default/svc-${i} cluster IP"`);
    out.push(`  chain svc-${i} { jump sep-${i} comment "default/svc-${i}"; }`);
    out.push(`  chain sep-${i} {`,
      `    ip saddr ${podIp} jump mark-masq`,
      `    meta l4proto tcp dnat to ${podIp}:8080`,
      '  }');
  }
  out.push('  chain services {', ...svc, '  }', '}', '');
  return out.join('\n');
}

/** The number of rules kubeProxyNft(rules) writes. */
export function kubeProxyNftRuleCount(rules: number): number {
  return 2 + 4 * Math.max(1, Math.round(rules / 4));
}

/** Loads about `rules` foreign rules into the namespace with iptables-nft-restore. */
export function loadIptablesForeign(ns: Netns, rules: number): void {
  ns.exec('iptables-nft-restore', ['--noflush'], kubeProxyRestore(rules));
}

/** Loads about `rules` foreign rules into the namespace with nft -f. */
export function loadNftForeign(ns: Netns, rules: number, table = 'kube'): void {
  ns.nft(kubeProxyNft(rules, table));
}

/**
 * Runs `fn` with a socket in a fresh namespace; the socket is closed and the
 * namespace removed afterwards, even when `fn` throws.
 */
export function withSocket<T>(fn: (s: NftSocket, ns: Netns) => Promise<T>, tag?: string): Promise<T> {
  return withNetns(async (ns) => {
    const s = open({ netns: ns.path });
    try {
      return await fn(s, ns);
    } finally {
      s.close();
    }
  }, tag);
}
