/**
 * The things a rule can match on, with how nft 1.0.6 loads each one (payload
 * offset and length, meta or ct key), the protocol it depends on, and how an
 * anonymous set keyed by it is described (key type, byte order, typeof).
 */
import type { CtKey, MetaKey } from '../netlink/expr.js';
import { BYTEORDER_BIG, BYTEORDER_HOST, type KeyTypeof } from './udata.js';

export type TypeId =
  | 'ipv4' | 'ipv6' | 'port' | 'proto' | 'ifname' | 'ifindex' | 'mark' | 'ctstate' | 'ctstatus'
  | 'nfproto' | 'fibtype' | 'ports';

export type Load =
  | { kind: 'payload'; base: 'network' | 'transport'; offset: number }
  | { kind: 'meta'; key: MetaKey }
  | { kind: 'ct'; key: CtKey }
  | { kind: 'fib' };

export interface Field {
  /** Canonical nft spelling. */
  name: string;
  type: TypeId;
  /** Bytes loaded. */
  len: number;
  load: Load;
  /** Network protocol the field belongs to (needs `meta nfproto` in inet). */
  l3?: 'ip' | 'ip6';
  /** Transport protocol the field belongs to (needs `meta l4proto`). */
  l4?: number;
  /** Matching it on one value tells nft the transport protocol. */
  protoKey?: boolean;
  /** Anonymous sets keyed by this field: key type, byte order, typeof. Absent: no sets. */
  set?: { keyType: number; byteorder: number; key: KeyTypeof };
}

// nft's proto_desc ids and header template indexes (include/proto.h)
const DESC_UDP = 6, DESC_TCP = 8, DESC_TH = 11, DESC_IP = 12, DESC_IP6 = 13;
// NFT_META_* and NFT_CT_* numbers
const META_NUM: Partial<Record<MetaKey, number>> = {
  mark: 3, iif: 4, oif: 5, iifname: 6, oifname: 7, nfproto: 15, l4proto: 16,
};
const CT_NUM: Partial<Record<CtKey, number>> = { state: 0, status: 2, mark: 3 };
// set key types (nft datatype ids)
const TYPE_IPV4 = 7, TYPE_IPV6 = 8, TYPE_PROTO = 12, TYPE_SERVICE = 13, TYPE_MARK = 19, TYPE_IFNAME = 41;

function payload(name: string, type: TypeId, base: 'network' | 'transport', offset: number, len: number,
  desc: number, tmpl: number, keyType: number, extra: Partial<Field>): Field {
  return {
    name, type, len, load: { kind: 'payload', base, offset },
    set: { keyType, byteorder: BYTEORDER_BIG, key: { expr: 'payload', desc, tmpl } }, ...extra,
  };
}

function meta(name: string, type: TypeId, key: MetaKey, len: number, keyType?: number, extra: Partial<Field> = {}): Field {
  return {
    name, type, len, load: { kind: 'meta', key },
    ...(keyType !== undefined
      ? { set: { keyType, byteorder: BYTEORDER_HOST, key: { expr: 'meta' as const, key: META_NUM[key]! } } }
      : {}),
    ...extra,
  };
}

function ct(name: string, type: TypeId, key: CtKey, keyType?: number): Field {
  return {
    name, type, len: 4, load: { kind: 'ct', key },
    ...(keyType !== undefined
      ? { set: { keyType, byteorder: BYTEORDER_HOST, key: { expr: 'ct' as const, key: CT_NUM[key]! } } }
      : {}),
  };
}

export const F = {
  ipSaddr: payload('ip saddr', 'ipv4', 'network', 12, 4, DESC_IP, 11, TYPE_IPV4, { l3: 'ip' }),
  ipDaddr: payload('ip daddr', 'ipv4', 'network', 16, 4, DESC_IP, 12, TYPE_IPV4, { l3: 'ip' }),
  ipProtocol: payload('ip protocol', 'proto', 'network', 9, 1, DESC_IP, 9, TYPE_PROTO, { l3: 'ip', protoKey: true }),
  ip6Saddr: payload('ip6 saddr', 'ipv6', 'network', 8, 16, DESC_IP6, 8, TYPE_IPV6, { l3: 'ip6' }),
  ip6Daddr: payload('ip6 daddr', 'ipv6', 'network', 24, 16, DESC_IP6, 9, TYPE_IPV6, { l3: 'ip6' }),
  ip6Nexthdr: payload('ip6 nexthdr', 'proto', 'network', 6, 1, DESC_IP6, 6, TYPE_PROTO, { l3: 'ip6', protoKey: true }),
  tcpSport: payload('tcp sport', 'port', 'transport', 0, 2, DESC_TCP, 1, TYPE_SERVICE, { l4: 6 }),
  tcpDport: payload('tcp dport', 'port', 'transport', 2, 2, DESC_TCP, 2, TYPE_SERVICE, { l4: 6 }),
  udpSport: payload('udp sport', 'port', 'transport', 0, 2, DESC_UDP, 1, TYPE_SERVICE, { l4: 17 }),
  udpDport: payload('udp dport', 'port', 'transport', 2, 2, DESC_UDP, 2, TYPE_SERVICE, { l4: 17 }),
  // nft's `th`: the ports of whatever transport header follows, with no protocol dependency
  thSport: payload('th sport', 'port', 'transport', 0, 2, DESC_TH, 1, TYPE_SERVICE, {}),
  thDport: payload('th dport', 'port', 'transport', 2, 2, DESC_TH, 2, TYPE_SERVICE, {}),
  iifname: meta('iifname', 'ifname', 'iifname', 16, TYPE_IFNAME),
  oifname: meta('oifname', 'ifname', 'oifname', 16, TYPE_IFNAME),
  iif: meta('iif', 'ifindex', 'iif', 4),
  oif: meta('oif', 'ifindex', 'oif', 4),
  l4proto: meta('meta l4proto', 'proto', 'l4proto', 1, TYPE_PROTO, { protoKey: true }),
  nfproto: meta('meta nfproto', 'nfproto', 'nfproto', 1),
  mark: meta('meta mark', 'mark', 'mark', 4, TYPE_MARK),
  ctState: ct('ct state', 'ctstate', 'state'),
  ctStatus: ct('ct status', 'ctstatus', 'status'),
  ctMark: ct('ct mark', 'mark', 'mark', TYPE_MARK),
  fibDaddrType: { name: 'fib daddr type', type: 'fibtype', len: 4, load: { kind: 'fib' } } as Field,
} satisfies Record<string, Field>;

/** `tcp sport X tcp dport Y` after nft merged the two adjacent loads into one. */
export function mergedPorts(l4: number): Field {
  return {
    name: l4 === 6 ? 'tcp sport . dport' : 'udp sport . dport', type: 'ports', len: 4,
    load: { kind: 'payload', base: 'transport', offset: 0 }, l4,
  };
}

export function portFields(l4: number): { sport: Field; dport: Field } | undefined {
  if (l4 === 6) return { sport: F.tcpSport, dport: F.tcpDport };
  if (l4 === 17) return { sport: F.udpSport, dport: F.udpDport };
  return undefined;
}

export const NFPROTO_IPV4 = 2;
export const NFPROTO_IPV6 = 10;
