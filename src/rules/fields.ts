/**
 * The things a rule can match on, with how nft 1.0.6 loads each one (payload
 * offset and length, meta or ct key), the protocol it depends on, and how an
 * anonymous set keyed by it is described (key type, byte order, typeof).
 */
import type { CtKey, MetaKey } from '../netlink/expr.js';
import { BYTEORDER_BIG, BYTEORDER_HOST, type KeyTypeof } from './udata.js';

/** A symbol table and how values without a name print (nft's symbol_table base / basefmt). */
export interface Syms {
  table: readonly (readonly [string, number])[];
  /** How a value without a name prints: decimal, or hex with at least `digits` digits. */
  fmt: { base: 'dec' } | { base: 'hex'; digits: number };
}

export type TypeId =
  | 'ipv4' | 'ipv6' | 'port' | 'proto' | 'ifname' | 'ifindex' | 'mark' | 'ctstate' | 'ctstatus'
  | 'nfproto' | 'fibtype' | 'ports'
  /** An Ethernet address (ether saddr/daddr). */
  | 'lladdr'
  /** An unsigned integer (optionally with symbolic names), big-endian unless `host`. */
  | 'int'
  /** A bit mask with symbolic flag names (tcp flags, ct event): a bare value tests for any of its bits. */
  | 'flags'
  /** tc handle (meta priority): none, root, major:minor in hex. */
  | 'classid'
  /** User and group ids (names from /etc/passwd and /etc/group). */
  | 'uid' | 'gid'
  /** A time in milliseconds (ct expiration), written as nft's 1h2m3s4ms. */
  | 'ms'
  /** meta hour: seconds since midnight UTC, written "HH:MM[:SS]" (docs/rule-language.md: time zones). */
  | 'hour'
  /** meta time: nanoseconds since the epoch, written "YYYY-MM-DD[ HH:MM[:SS]]" or as seconds. */
  | 'date';

export type Load =
  | { kind: 'payload'; base: 'network' | 'transport' | 'll' | 'inner'; offset: number }
  | { kind: 'meta'; key: MetaKey }
  | { kind: 'ct'; key: CtKey; dir?: 0 | 1 }
  | { kind: 'fib'; result: 'oif' | 'oifname' | 'type'; flags: number }
  /** exthdr: op 0 IPv6 extension header, 1 TCP option, 3 SCTP chunk; offset in bytes; flags 1 presence. */
  | { kind: 'exthdr'; op: 0 | 1 | 3; type: number; offset: number; flags?: number }
  /** socket transparent|mark|wildcard (NFT_SOCKET_*). */
  | { kind: 'socket'; key: number }
  /** rt KEY: the packet's route (NFT_RT_*). */
  | { kind: 'rt'; key: 'classid' | 'nexthop4' | 'nexthop6' | 'mtu' | 'ipsec' }
  /** ipsec in|out [spnum N] KEY: the packet's IPsec state (NFT_XFRM_KEY_*; dir 0 in, 1 out). */
  | { kind: 'xfrm'; key: number; dir: 0 | 1; spnum: number }
  /** osf [ttl loose|skip] name|version: the fingerprint's genre (flags 1: with version). */
  | { kind: 'osf'; ttl: number; flags: number };

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
  /** int/flags that are not whole bytes: the value's width in bits and its left shift in the loaded bytes. */
  width?: number;
  shift?: number;
  /** The value sits in the register in host byte order (meta and ct integers). */
  host?: boolean;
  /** Symbolic value names (icmp type, dscp, tcp flags, ...). */
  syms?: Syms;
  /** In an inet table, the network protocol nft makes the rule depend on first (icmp: ip, icmpv6: ip6). */
  l3dep?: 'ip' | 'ip6';
  /** An icmp field nft guards with an icmp type match (headers.ts ICMP_DEPS). */
  icmpDep?: { types: number[]; ctx: number };
  /** A link layer field: nft makes the rule depend on `meta iiftype ether` first. */
  ll?: boolean;
  /** A field inside an Ethernet payload (vlan): nft makes the rule depend on `ether type` this value too. */
  llType?: number;
  /** In inet, `l3` must come from an earlier match: nft adds no dependency for it (ct original saddr). */
  l3NoDep?: boolean;
  /** Anonymous sets keyed by this field: key type, byte order, typeof. Absent: no sets. */
  set?: { keyType: number; byteorder: number; key?: KeyTypeof };
}

// nft's proto_desc ids and header template indexes (include/proto.h)
const DESC_UDP = 6, DESC_TCP = 8, DESC_TH = 11, DESC_IP = 12, DESC_IP6 = 13;
// NFT_META_* and NFT_CT_* numbers
const META_NUM: Partial<Record<MetaKey, number>> = {
  mark: 3, iif: 4, oif: 5, iifname: 6, oifname: 7, nfproto: 15, l4proto: 16,
};
const CT_NUM: Partial<Record<CtKey, number>> = { state: 0, status: 2, mark: 3 };
// set key types (nft datatype ids)
const TYPE_FIB_ADDR = 38;
const TYPE_NFPROTO = 2, TYPE_IPV4 = 7, TYPE_IPV6 = 8, TYPE_PROTO = 12, TYPE_SERVICE = 13, TYPE_MARK = 19, TYPE_IFINDEX = 20, TYPE_IFNAME = 41;

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
  iif: meta('iif', 'ifindex', 'iif', 4, TYPE_IFINDEX),
  oif: meta('oif', 'ifindex', 'oif', 4, TYPE_IFINDEX),
  l4proto: meta('meta l4proto', 'proto', 'l4proto', 1, TYPE_PROTO, { protoKey: true }),
  nfproto: meta('meta nfproto', 'nfproto', 'nfproto', 1, TYPE_NFPROTO),
  mark: meta('meta mark', 'mark', 'mark', 4, TYPE_MARK),
  ctState: ct('ct state', 'ctstate', 'state', 26),
  ctStatus: ct('ct status', 'ctstatus', 'status', 28),
  ctMark: ct('ct mark', 'mark', 'mark', TYPE_MARK),
  fibDaddrType: { name: 'fib daddr type', type: 'fibtype', len: 4, load: { kind: 'fib', result: 'type', flags: 2 },
    set: { keyType: 38, byteorder: BYTEORDER_HOST, key: { expr: 'fib', result: 3, flags: 2 } } } as Field,
} satisfies Record<string, Field>;

const PORT_DESC: Record<string, [number, number]> = { tcp: [DESC_TCP, 6], udp: [DESC_UDP, 17], udplite: [7, 136], dccp: [9, 33], sctp: [10, 132] };
const portCache = new Map<string, Field>();

/** `tcp|udp|udplite|sctp|dccp sport|dport`. */
export function portField(proto: string, which: 'sport' | 'dport'): Field {
  if (proto === 'tcp') return which === 'sport' ? F.tcpSport : F.tcpDport;
  if (proto === 'udp') return which === 'sport' ? F.udpSport : F.udpDport;
  const key = `${proto} ${which}`;
  let f = portCache.get(key);
  if (!f) {
    const [desc, l4] = PORT_DESC[proto]!;
    f = payload(key, 'port', 'transport', which === 'sport' ? 0 : 2, 2, desc, which === 'sport' ? 1 : 2, TYPE_SERVICE, { l4 });
    portCache.set(key, f);
  }
  return f;
}

/**
 * `ct original|reply saddr|daddr`: NFT_CT_SRC/DST, whose length follows the
 * network protocol (the rule's family, or in inet the protocol matched before).
 */
export function ctAddrField(which: 'saddr' | 'daddr', dir: 0 | 1, v6: boolean): Field {
  return {
    name: `ct ${dir === 0 ? 'original' : 'reply'} ${which}`, type: v6 ? 'ipv6' : 'ipv4', len: v6 ? 16 : 4,
    load: { kind: 'ct', key: which, dir }, l3: v6 ? 'ip6' : 'ip', l3NoDep: true,
  };
}

const FIB_KEYS: [string, number][] = [['saddr', 1], ['daddr', 2], ['mark', 4], ['iif', 8], ['oif', 16]];
const FIB_PRESENT = 32;
const fibCache = new Map<string, Field>();

/** `fib saddr|daddr [. mark] [. iif|oif] oif|oifname|type`, or `… oif|oifname exists|missing` (present). */
export function fibField(flags: number, result: 'oif' | 'oifname' | 'type'): Field | undefined {
  const key = `${flags}/${result}`;
  const hit = fibCache.get(key);
  if (hit) return hit;
  const names = FIB_KEYS.filter(([, b]) => flags & b).map(([n]) => n);
  if ((flags & ~(FIB_PRESENT | 31)) !== 0 || names.length === 0) return undefined;
  const present = (flags & FIB_PRESENT) !== 0;
  if (present && result === 'type') return undefined;
  const name = `fib ${names.join(' . ')} ${result}`;
  // sets keyed by a fib result: nft's typeof names the result (NFT_FIB_RESULT_*) and the flags
  const set = (keyType: number) => ({ keyType, byteorder: BYTEORDER_HOST,
    key: { expr: 'fib' as const, result: { oif: 1, oifname: 2, type: 3 }[result], flags } });
  const f: Field = present
    ? { name, type: 'int', len: 4, host: true, load: { kind: 'fib', result, flags },
      syms: { fmt: { base: 'dec' }, table: [['exists', 1], ['missing', 0]] } }
    : result === 'type' ? { name, type: 'fibtype', len: 4, load: { kind: 'fib', result, flags }, set: set(TYPE_FIB_ADDR) }
    : result === 'oif' ? { name, type: 'ifindex', len: 4, load: { kind: 'fib', result, flags }, set: set(TYPE_IFINDEX) }
    // (a string, nft's type 5, not ifname)
    : { name, type: 'ifname', len: 16, load: { kind: 'fib', result, flags }, set: set(5) };
  fibCache.set(key, f);
  return f;
}

const ETHERTYPE_SYMS = {
  fmt: { base: 'hex' as const, digits: 4 },
  table: [['ip', 0x0800], ['arp', 0x0806], ['ip6', 0x86dd], ['vlan', 0x8100], ['8021q', 0x8100], ['8021ad', 0x88a8]] as [string, number][],
};

/** `ether daddr|saddr|type` (nft's proto_eth, desc 17). */
export const ETHER: Record<'daddr' | 'saddr' | 'type', Field> = {
  daddr: { name: 'ether daddr', type: 'lladdr', len: 6, load: { kind: 'payload', base: 'll', offset: 0 }, ll: true,
    set: { keyType: 9, byteorder: BYTEORDER_BIG, key: { expr: 'payload', desc: 17, tmpl: 1 } } },
  saddr: { name: 'ether saddr', type: 'lladdr', len: 6, load: { kind: 'payload', base: 'll', offset: 6 }, ll: true,
    set: { keyType: 9, byteorder: BYTEORDER_BIG, key: { expr: 'payload', desc: 17, tmpl: 2 } } },
  type: { name: 'ether type', type: 'int', len: 2, load: { kind: 'payload', base: 'll', offset: 12 }, ll: true, syms: ETHERTYPE_SYMS,
    set: { keyType: 10, byteorder: BYTEORDER_BIG, key: { expr: 'payload', desc: 17, tmpl: 3 } } },
};

const RAW_BASE = { ll: 'll', nh: 'network', th: 'transport', ih: 'inner' } as const;
/** nft's enum proto_bases. */
const RAW_BASE_NUM = { ll: 1, nh: 2, th: 3, ih: 4 } as const;

/**
 * nft's raw payload `@ll|nh|th|ih,OFFSET,LENGTH` (bits): an integer at any bit offset, loaded as
 * the bytes that hold it (masked and shifted as a bit field), with no dependency. No sets.
 */
export function rawPayloadField(base: 'll' | 'nh' | 'th' | 'ih', bitOff: number, bits: number): Field | undefined {
  const len = Math.ceil((bitOff % 8 + bits) / 8);
  if (bits < 1 || len > 16 || bitOff > 0xffff * 8) return undefined;
  const f: Field = {
    name: `@${base},${bitOff},${bits}`, type: 'int', len, load: { kind: 'payload', base: RAW_BASE[base], offset: Math.floor(bitOff / 8) },
    width: bits, shift: len * 8 - (bitOff % 8) - bits,
    // nft lists raw payload values in hex
    syms: { fmt: { base: 'hex', digits: 1 }, table: [] },
  };
  // nft's payload_init_raw: @th,0,16 and @th,16,16 are th sport and th dport (inet_service, th's typeof)
  if (base === 'th' && bits === 16 && (bitOff === 0 || bitOff === 16)) f.set = (bitOff === 0 ? F.thSport : F.thDport).set!;
  // whole bytes: an integer key described by base, offset and length (nft's raw payload typeof)
  else if (bitOff % 8 === 0 && bits % 8 === 0) {
    f.set = { keyType: 4, byteorder: BYTEORDER_BIG, key: { expr: 'payload', desc: 0, tmpl: 0, base: RAW_BASE_NUM[base], offset: bitOff, bits } };
  }
  return f;
}

/** The raw payload field a load (and an optional bit mask) reads, for rendering. */
export function rawPayloadAt(base: 'll' | 'network' | 'transport' | 'inner', offset: number, len: number, mask?: bigint): Field | undefined {
  const b = (Object.entries(RAW_BASE).find(([, v]) => v === base)?.[0]) as 'll' | 'nh' | 'th' | 'ih' | undefined;
  if (!b || len < 1 || len > 16) return undefined;
  let lead = 0, bits = len * 8;
  if (mask !== undefined) {
    // one run of ones: its position and width
    if (mask === 0n) return undefined;
    const s = mask.toString(2).padStart(len * 8, '0');
    if (s.length !== len * 8 || !/^0*1+0*$/.test(s)) return undefined;
    lead = s.indexOf('1');
    bits = s.lastIndexOf('1') - lead + 1;
    if (bits === len * 8) return undefined;
  }
  const f = rawPayloadField(b, offset * 8 + lead, bits);
  return f && f.len === len ? f : undefined;
}

/** The 802.1Q header after the Ethernet one (nft's proto_vlan): `vlan id|pcp|dei|type`, needing ether type vlan. No sets. */
export const VLAN: Record<'id' | 'pcp' | 'dei' | 'type', Field> = {
  pcp: { name: 'vlan pcp', type: 'int', len: 1, load: { kind: 'payload', base: 'll', offset: 14 }, ll: true, llType: 0x8100, width: 3, shift: 5 },
  dei: { name: 'vlan dei', type: 'int', len: 1, load: { kind: 'payload', base: 'll', offset: 14 }, ll: true, llType: 0x8100, width: 1, shift: 4 },
  id: { name: 'vlan id', type: 'int', len: 2, load: { kind: 'payload', base: 'll', offset: 14 }, ll: true, llType: 0x8100, width: 12, shift: 0 },
  type: { name: 'vlan type', type: 'int', len: 2, load: { kind: 'payload', base: 'll', offset: 16 }, ll: true, llType: 0x8100, syms: ETHERTYPE_SYMS },
};

/** `socket transparent|mark|wildcard`. */
export function socketField(key: 'transparent' | 'mark' | 'wildcard'): Field {
  const k = { transparent: 0, mark: 1, wildcard: 2 }[key];
  return key === 'mark'
    ? { name: 'socket mark', type: 'mark', len: 4, load: { kind: 'socket', key: k } }
    : { name: `socket ${key}`, type: 'int', len: 1, host: true, load: { kind: 'socket', key: k } };
}

/**
 * `rt classid|ip nexthop|ip6 nexthop|mtu|ipsec` (nft's rt expression; no dependency, not even in
 * inet). `syms` are the realm names for classid, exists/missing for ipsec.
 */
export function rtField(key: 'classid' | 'nexthop4' | 'nexthop6' | 'mtu' | 'ipsec', syms?: Syms): Field {
  const num = { classid: 0, nexthop4: 1, nexthop6: 2, mtu: 3, ipsec: 4 }[key];
  const load = { kind: 'rt' as const, key };
  const typeofKey = { expr: 'rt' as const, key: num };
  switch (key) {
    case 'classid': return { name: 'rt classid', type: 'int', len: 4, host: true, load, ...(syms ? { syms } : {}),
      set: { keyType: 22, byteorder: BYTEORDER_HOST, key: typeofKey } };
    case 'nexthop4': return { name: 'rt ip nexthop', type: 'ipv4', len: 4, load, set: { keyType: TYPE_IPV4, byteorder: BYTEORDER_BIG, key: typeofKey } };
    case 'nexthop6': return { name: 'rt ip6 nexthop', type: 'ipv6', len: 16, load, set: { keyType: TYPE_IPV6, byteorder: BYTEORDER_BIG, key: typeofKey } };
    case 'mtu': return { name: 'rt mtu', type: 'int', len: 2, host: true, load, set: { keyType: 4, byteorder: BYTEORDER_HOST, key: typeofKey } };
    case 'ipsec': return { name: 'rt ipsec', type: 'int', len: 1, host: true, load, ...(syms ? { syms } : {}),
      set: { keyType: 39, byteorder: BYTEORDER_HOST, key: typeofKey } };
  }
}

/** `ipsec in|out [spnum N] reqid|spi|ip saddr|ip daddr|ip6 saddr|ip6 daddr` (nft's xfrm expression). */
export function xfrmField(dir: 0 | 1, spnum: number, what: 'reqid' | 'spi' | 'ip saddr' | 'ip daddr' | 'ip6 saddr' | 'ip6 daddr'): Field {
  const key = { 'ip daddr': 1, 'ip6 daddr': 2, 'ip saddr': 3, 'ip6 saddr': 4, reqid: 5, spi: 6 }[what];
  const name = `ipsec ${dir === 0 ? 'in' : 'out'}${spnum ? ` spnum ${spnum}` : ''} ${what}`;
  const load = { kind: 'xfrm' as const, key, dir, spnum };
  // nft's set typeof for it: EXPR_XFRM with key, spnum, dir
  const typeofKey = { expr: 'xfrm' as const, key, spnum, dir };
  if (what === 'reqid') return { name, type: 'int', len: 4, host: true, load, set: { keyType: 4, byteorder: BYTEORDER_HOST, key: typeofKey } };
  if (what === 'spi') return { name, type: 'int', len: 4, load, set: { keyType: 4, byteorder: BYTEORDER_BIG, key: typeofKey } };
  const v6 = what.startsWith('ip6');
  return { name, type: v6 ? 'ipv6' : 'ipv4', len: v6 ? 16 : 4, load,
    set: { keyType: v6 ? TYPE_IPV6 : TYPE_IPV4, byteorder: BYTEORDER_BIG, key: typeofKey } };
}

/** `osf [ttl loose|skip] name|version`. */
export function osfField(ttl: number, version: boolean): Field {
  const t = ttl === 1 ? 'ttl loose ' : ttl === 2 ? 'ttl skip ' : '';
  return { name: `osf ${t}${version ? 'version' : 'name'}`, type: 'ifname', len: 16, load: { kind: 'osf', ttl, flags: version ? 1 : 0 },
    // a string (type 5) in host order; nft's typeof names the osf expression without its ttl or flags
    set: { keyType: 5, byteorder: BYTEORDER_HOST, key: { expr: 'osf' } } };
}

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
