/**
 * The desired set every driver keeps: flannel's four masquerade rules for a
 * node with pod CIDR 10.244.1.0/24 in cluster network 10.244.0.0/16 (flannel
 * pkg/trafficmngr/iptables MasqRules, without the IPv6 and --random-fully
 * detection), in the three forms the tools speak.
 */
import type { Expr } from '../../src/index.js';

/** iptables drivers: the owned chain in `ip nat` and its jump from POSTROUTING, as flannel does. */
export const IPT_CHAIN = 'FLANNEL-POSTRTG';
const C = ['-m', 'comment', '--comment', 'flanneld masq'];
export interface IptRule {
  chain: string;
  spec: string[];
}
export const IPT_JUMP: IptRule = { chain: 'POSTROUTING', spec: [...C, '-j', IPT_CHAIN] };
export const IPT_RULES: IptRule[] = [
  { chain: IPT_CHAIN, spec: ['-s', '10.244.0.0/16', '-d', '10.244.0.0/16', ...C, '-j', 'RETURN'] },
  { chain: IPT_CHAIN, spec: ['-s', '10.244.0.0/16', '!', '-d', '224.0.0.0/4', ...C, '-j', 'MASQUERADE', '--random-fully'] },
  { chain: IPT_CHAIN, spec: ['!', '-s', '10.244.0.0/16', '-d', '10.244.1.0/24', ...C, '-j', 'RETURN'] },
  { chain: IPT_CHAIN, spec: ['!', '-s', '10.244.0.0/16', '-d', '10.244.0.0/16', ...C, '-j', 'MASQUERADE', '--random-fully'] },
];

/** A rule spec as iptables-save prints it (arguments joined, the comment quoted). */
export function saveLine(r: IptRule): string {
  return ['-A', r.chain, ...r.spec.map((a) => (a === 'flanneld masq' ? '"flanneld masq"' : a))].join(' ');
}

/** Native and nft-exec: a base chain on postrouting at srcnat priority in the driver's own table. */
export const NFT_CHAIN = 'postrtg';
export const NFT_PRIORITY = 100;
export const NFT_RULE_TEXT = [
  'ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return',
  'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
];

// NF_NAT_RANGE_PROTO_RANDOM_FULLY
const RANDOM_FULLY = 0x10;
const pl = (offset: number, len: number): Expr => ({ kind: 'payload', base: 'network', offset, len, dreg: 1 });
const eq = (data: string, op: 'eq' | 'neq' = 'eq'): Expr => ({ kind: 'cmp', sreg: 1, op, data });

/**
 * The same rules as nf_tables expressions, the way nft 1.0.6 encodes the text
 * above (byte-aligned prefixes become shorter payload loads).
 */
export const NATIVE_RULES: Expr[][] = [
  [pl(12, 2), eq('0af4'), pl(16, 2), eq('0af4'), { kind: 'immediate', dreg: 0, verdict: 'return' }],
  [pl(12, 2), eq('0af4'), pl(16, 4),
    { kind: 'bitwise', sreg: 1, dreg: 1, len: 4, op: 'bool', mask: 'f0000000', xor: '00000000' },
    eq('e0000000', 'neq'), { kind: 'masq', flags: RANDOM_FULLY }],
  [pl(12, 2), eq('0af4', 'neq'), pl(16, 3), eq('0af401'), { kind: 'immediate', dreg: 0, verdict: 'return' }],
  [pl(12, 2), eq('0af4', 'neq'), pl(16, 2), eq('0af4'), { kind: 'masq', flags: RANDOM_FULLY }],
];

/** What `nft --json list table` prints for each rule's `expr` (nft 1.0.6). */
const prefix = (field: 'saddr' | 'daddr', op: '==' | '!=', addr: string, len: number): unknown =>
  ({ match: { op, left: { payload: { protocol: 'ip', field } }, right: { prefix: { addr, len } } } });
export const NFT_JSON_RULES: unknown[][] = [
  [prefix('saddr', '==', '10.244.0.0', 16), prefix('daddr', '==', '10.244.0.0', 16), { return: null }],
  [prefix('saddr', '==', '10.244.0.0', 16), prefix('daddr', '!=', '224.0.0.0', 4), { masquerade: { flags: 'fully-random' } }],
  [prefix('saddr', '!=', '10.244.0.0', 16), prefix('daddr', '==', '10.244.1.0', 24), { return: null }],
  [prefix('saddr', '!=', '10.244.0.0', 16), prefix('daddr', '==', '10.244.0.0', 16), { masquerade: { flags: 'fully-random' } }],
];

/** JSON with object keys sorted, so that structurally equal values compare equal as strings. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}
