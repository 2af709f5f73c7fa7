/**
 * nft 1.0.6's vocabulary of fields beyond addresses and ports: every header
 * field of ip, ip6, tcp, udp, udplite, sctp, dccp, ah, esp, comp, icmp and
 * icmpv6 (nft's proto.c templates: offset and length in bits, datatype, byte
 * order), the meta keys and the ct keys (with original/reply), and the symbol
 * tables nft parses and prints their values with.
 *
 * A field that is not whole bytes (ip dscp, tcp doff, ...) is loaded as the
 * bytes that hold it, masked and compared with the value shifted into place,
 * as nft's expr_evaluate_bits does.
 */
import { systemFile } from '../base/compile-inputs.js';
import type { CtKey, MetaKey } from '../netlink/expr.js';
import type { Field, Syms, TypeId } from './fields.js';
import { BYTEORDER_BIG, BYTEORDER_HOST } from './udata.js';

const dec = { base: 'dec' } as const;
const hex = (digits = 1) => ({ base: 'hex', digits }) as const;

export const ICMP_TYPE: Syms = {
  fmt: dec,
  table: [
    ['echo-reply', 0], ['destination-unreachable', 3], ['source-quench', 4], ['redirect', 5],
    ['echo-request', 8], ['router-advertisement', 9], ['router-solicitation', 10], ['time-exceeded', 11],
    ['parameter-problem', 12], ['timestamp-request', 13], ['timestamp-reply', 14], ['info-request', 15],
    ['info-reply', 16], ['address-mask-request', 17], ['address-mask-reply', 18],
  ],
};
export const ICMP_CODE: Syms = {
  fmt: dec,
  table: [
    ['net-unreachable', 0], ['host-unreachable', 1], ['prot-unreachable', 2], ['port-unreachable', 3],
    ['net-prohibited', 9], ['host-prohibited', 10], ['admin-prohibited', 13], ['frag-needed', 4],
  ],
};
export const ICMPV6_TYPE: Syms = {
  fmt: dec,
  table: [
    ['destination-unreachable', 1], ['packet-too-big', 2], ['time-exceeded', 3], ['parameter-problem', 4],
    ['echo-request', 128], ['echo-reply', 129], ['mld-listener-query', 130], ['mld-listener-report', 131],
    ['mld-listener-done', 132], ['mld-listener-reduction', 132], ['nd-router-solicit', 133],
    ['nd-router-advert', 134], ['nd-neighbor-solicit', 135], ['nd-neighbor-advert', 136], ['nd-redirect', 137],
    ['router-renumbering', 138], ['ind-neighbor-solicit', 141], ['ind-neighbor-advert', 142],
    ['mld2-listener-report', 143],
  ],
};
export const ICMPV6_CODE: Syms = {
  fmt: dec,
  table: [
    ['no-route', 0], ['admin-prohibited', 1], ['addr-unreachable', 3], ['port-unreachable', 4],
    ['policy-fail', 5], ['reject-route', 6],
  ],
};
export const ICMPX_CODE: Syms = {
  fmt: dec,
  table: [['port-unreachable', 1], ['admin-prohibited', 3], ['no-route', 0], ['host-unreachable', 2]],
};
export const TCP_FLAGS: Syms = {
  fmt: hex(),
  table: [['fin', 1], ['syn', 2], ['rst', 4], ['psh', 8], ['ack', 16], ['urg', 32], ['ecn', 64], ['cwr', 128]],
};
const DSCP: Syms = {
  fmt: hex(2),
  table: [
    ['cs0', 0], ['cs1', 8], ['cs2', 16], ['cs3', 24], ['cs4', 32], ['cs5', 40], ['cs6', 48], ['cs7', 56],
    ['df', 0], ['be', 0], ['lephb', 1], ['af11', 10], ['af12', 12], ['af13', 14], ['af21', 18], ['af22', 20],
    ['af23', 22], ['af31', 26], ['af32', 28], ['af33', 30], ['af41', 34], ['af42', 36], ['af43', 38],
    ['va', 44], ['ef', 46],
  ],
};
const IGMP_TYPE: Syms = {
  fmt: dec,
  table: [
    ['membership-query', 0x11], ['membership-report-v1', 0x12], ['membership-report-v2', 0x16],
    ['membership-report-v3', 0x22], ['leave-group', 0x17],
  ],
};
const ECN: Syms = { fmt: hex(1), table: [['not-ect', 0], ['ect1', 1], ['ect0', 2], ['ce', 3]] };
const DCCP_PKTTYPE: Syms = {
  fmt: hex(),
  table: [
    ['request', 0], ['response', 1], ['data', 2], ['ack', 3], ['dataack', 4], ['closereq', 5], ['close', 6],
    ['reset', 7], ['sync', 8], ['syncack', 9],
  ],
};
export const PKTTYPE: Syms = {
  fmt: dec, table: [['host', 0], ['unicast', 0], ['broadcast', 1], ['multicast', 2], ['other', 3]],
};
const ARPHRD: Syms = {
  fmt: dec,
  table: [
    ['ether', 1], ['ppp', 512], ['ipip', 768], ['ipip6', 769], ['loopback', 772], ['sit', 776], ['ipgre', 778],
  ],
};
const ETHERTYPE: Syms = {
  fmt: hex(4), table: [['ip', 0x0800], ['arp', 0x0806], ['ip6', 0x86dd], ['vlan', 0x8100], ['8021q', 0x8100], ['8021ad', 0x88a8]],
};
const DEVGROUP: Syms = { fmt: dec, table: [['default', 0]] };
/** ct label bits by number (2 ** N: exact as a double). */
const LABELS: Syms = { fmt: dec, table: Array.from({ length: 128 }, (_, i): [string, number] => [String(i), 2 ** i]) };
let realms: [string, number][] | undefined;
/** Route realms by name, from /etc/iproute2/rt_realms as nft reads them (realm_type). */
export const REALMS: Syms = {
  fmt: dec,
  get table(): [string, number][] {
    // (every use, for the compile's inputs: src/base/compile-inputs.ts; no file: '', numbers only)
    const text = systemFile('/etc/iproute2/rt_realms');
    if (!realms) {
      realms = [];
      for (const line of text.split('\n')) {
        const m = /^\s*(0x[0-9a-fA-F]+|\d+)\s+([A-Za-z_][\w.-]*)\s*(?:#.*)?$/.exec(line);
        if (m) realms.push([m[2]!, Number(m[1])]);
      }
    }
    return realms;
  },
};
const BOOLEAN: Syms = { fmt: dec, table: [['exists', 1], ['missing', 0]] };
export const BOOLEAN_SYMS = BOOLEAN;
const DAYS: Syms = {
  fmt: dec, table: [['Sunday', 0], ['Monday', 1], ['Tuesday', 2], ['Wednesday', 3], ['Thursday', 4], ['Friday', 5], ['Saturday', 6]],
};
export const CT_DIR: Syms = { fmt: dec, table: [['original', 0], ['reply', 1]] };
const CT_EVENT: Syms = {
  fmt: hex(),
  table: [
    ['new', 1], ['related', 2], ['destroy', 4], ['reply', 8], ['assured', 16], ['protoinfo', 32], ['helper', 64],
    ['mark', 128], ['seqadj', 256], ['secmark', 512], ['label', 1024],
  ],
};
const NO_SYMS: Syms = { fmt: dec, table: [] };

// nft's proto_desc ids (include/proto.h)
const DESC = { ah: 1, esp: 2, comp: 3, icmp: 4, igmp: 5, udp: 6, udplite: 7, tcp: 8, dccp: 9, sctp: 10, ip: 12, ip6: 13, icmpv6: 14 } as const;
export type Proto = keyof typeof DESC;
/** IP protocol numbers of the transport headers. */
export const L4_NUM: Record<Exclude<Proto, 'ip' | 'ip6'>, number> = {
  ah: 51, esp: 50, comp: 108, icmp: 1, igmp: 2, udp: 17, udplite: 136, tcp: 6, dccp: 33, sctp: 132, icmpv6: 58,
};
export const L4_BY_NUM = new Map<number, Proto>(Object.entries(L4_NUM).map(([k, v]) => [v, k as Proto]));

// nft datatype ids (include/datatype.h)
const T = {
  bitmask: 3, integer: 4, proto: 12, service: 13, icmpType: 14, tcpFlag: 15, dccpPkttype: 16, mark: 19,
  ifindex: 20, arphrd: 21, realm: 22, classid: 23, uid: 24, gid: 25, ctState: 26, ctDir: 27, ctStatus: 28,
  icmp6Type: 29, pkttype: 31, icmpCode: 32, icmpv6Code: 33, devgroup: 35, dscp: 36, ecn: 37, boolean: 39,
  ctEvent: 40, ifname: 41, nfproto: 2, ipv4: 7, ipv6: 8, ethertype: 10,
} as const;

interface Spec {
  /** Bit offset and width as in nft's templates. */
  off: number;
  bits: number;
  type?: TypeId;
  syms?: Syms;
  keyType: number;
  /** Needs a protocol match nft cannot infer (icmp id and friends); refused for now. */
  special?: string;
}

function int(off: number, bits: number, keyType: number = T.integer, syms?: Syms, type: TypeId = 'int'): Spec {
  return syms ? { off, bits, keyType, syms, type } : { off, bits, keyType, type };
}

/** Each header's fields, with nft's template index for set typeof userdata. */
const HEADERS: Record<Proto, Record<string, [number, Spec]>> = {
  ip: {
    version: [1, int(0, 4)], hdrlength: [2, int(4, 4)], dscp: [3, int(8, 6, T.dscp, DSCP)],
    ecn: [4, int(14, 2, T.ecn, ECN)], length: [5, int(16, 16)], id: [6, int(32, 16)],
    'frag-off': [7, int(48, 16)], ttl: [8, int(64, 8)], checksum: [10, int(80, 16)],
  },
  ip6: {
    version: [1, int(0, 4)], dscp: [2, int(4, 6, T.dscp, DSCP)], ecn: [3, int(10, 2, T.ecn, ECN)],
    flowlabel: [4, int(12, 20)], length: [5, int(32, 16)], hoplimit: [7, int(56, 8)],
  },
  tcp: {
    sequence: [3, int(32, 32)], ackseq: [4, int(64, 32)], doff: [5, int(96, 4)], reserved: [6, int(100, 4)],
    flags: [7, int(104, 8, T.tcpFlag, TCP_FLAGS, 'flags')], window: [8, int(112, 16)],
    checksum: [9, int(128, 16)], urgptr: [10, int(144, 16)],
  },
  udp: { length: [3, int(32, 16)], checksum: [4, int(48, 16)] },
  udplite: { csumcov: [3, int(32, 16)], checksum: [4, int(48, 16)] },
  sctp: { vtag: [3, int(32, 32)], checksum: [4, int(64, 32)] },
  dccp: { type: [3, int(67, 4, T.dccpPkttype, DCCP_PKTTYPE)] },
  ah: {
    nexthdr: [1, { ...int(0, 8, T.proto), type: 'proto' }], hdrlength: [2, int(8, 8)], reserved: [3, int(16, 16)],
    spi: [4, int(32, 32)], sequence: [5, int(64, 32)],
  },
  esp: { spi: [1, int(0, 32)], sequence: [2, int(32, 32)] },
  comp: {
    nexthdr: [1, { ...int(0, 8, T.proto), type: 'proto' }], flags: [2, int(8, 8, T.bitmask, NO_SYMS, 'flags')],
    cpi: [3, int(16, 16)],
  },
  icmp: {
    type: [1, int(0, 8, T.icmpType, ICMP_TYPE)], code: [2, int(8, 8, T.icmpCode, ICMP_CODE)],
    checksum: [3, int(16, 16)],
    id: [4, { ...int(32, 16), special: 'icmp id' }], sequence: [5, { ...int(48, 16), special: 'icmp sequence' }],
    gateway: [6, { ...int(32, 32), special: 'icmp gateway' }], mtu: [7, { ...int(48, 16), special: 'icmp mtu' }],
  },
  igmp: {
    type: [1, int(0, 8, 42, IGMP_TYPE)], checksum: [2, int(16, 16)], mrt: [3, int(8, 8)], group: [4, int(32, 32)],
  },
  icmpv6: {
    type: [1, int(0, 8, T.icmp6Type, ICMPV6_TYPE)], code: [2, int(8, 8, T.icmpv6Code, ICMPV6_CODE)],
    checksum: [3, int(16, 16)],
    'parameter-problem': [4, { ...int(32, 32), special: 'icmpv6 parameter-problem' }],
    mtu: [5, { ...int(32, 32), special: 'icmpv6 mtu' }], id: [6, { ...int(32, 16), special: 'icmpv6 id' }],
    sequence: [7, { ...int(48, 16), special: 'icmpv6 sequence' }],
    'max-delay': [8, { ...int(32, 16), special: 'icmpv6 max-delay' }],
  },
};

const fieldCache = new Map<string, Field>();

/**
 * nft's icmp_dep (proto.c ICMP46HDR_FIELD): the icmp type a field needs. An echo field gets
 * `icmp type { echo-reply, echo-request }` (icmpv6: 128, 129) unless an earlier match fixed the
 * type, the others `icmp type T`.
 */
export const ICMP_DEPS: Record<string, { types: number[]; ctx: number }> = {
  'icmp id': { types: [0, 8], ctx: 8 }, 'icmp sequence': { types: [0, 8], ctx: 8 },
  'icmp gateway': { types: [5], ctx: 5 }, 'icmp mtu': { types: [3], ctx: 3 },
  'icmpv6 id': { types: [128, 129], ctx: 128 }, 'icmpv6 sequence': { types: [128, 129], ctx: 128 },
  'icmpv6 mtu': { types: [2], ctx: 2 }, 'icmpv6 max-delay': { types: [130], ctx: 130 },
  'icmpv6 parameter-problem': { types: [4], ctx: 4 },
};

/**
 * The field `proto name` (ip dscp, tcp flags, ...) as nft 1.0.6 loads it, or
 * undefined when nft has no such field. Fields already in fields.ts (addresses,
 * ports, protocol) are not here.
 */
export function headerField(proto: Proto, name: string): (Field & { special?: string }) | undefined {
  const key = `${proto} ${name}`;
  const cached = fieldCache.get(key);
  if (cached) return cached;
  const h = HEADERS[proto]?.[name];
  if (!h) return undefined;
  const [tmpl, s] = h;
  const byteOff = Math.floor(s.off / 8);
  const len = Math.ceil((s.off % 8 + s.bits) / 8);
  const shift = len * 8 - (s.off % 8) - s.bits;
  const network = proto === 'ip' || proto === 'ip6';
  const f: Field & { special?: string } = {
    name: key, type: s.type ?? 'int', len,
    load: { kind: 'payload', base: network ? 'network' : 'transport', offset: byteOff },
    set: {
      keyType: s.keyType, byteorder: BYTEORDER_BIG,
      // a bit field is keyed by `payload & mask`, which nft describes by byte order alone
      ...(shift !== 0 || s.bits % 8 !== 0 ? {} : {
        key: s.keyType === T.integer ? { expr: 'payload', desc: DESC[proto], tmpl, len: s.bits } : { expr: 'payload', desc: DESC[proto], tmpl },
      }),
    },
    width: s.bits, shift,
  };
  if (s.syms) f.syms = s.syms;
  if (network) f.l3 = proto as 'ip' | 'ip6';
  else {
    f.l4 = L4_NUM[proto as keyof typeof L4_NUM];
    if (proto === 'icmp' || proto === 'igmp') f.l3dep = 'ip';
    if (proto === 'icmpv6') f.l3dep = 'ip6';
  }
  if (s.special) f.special = s.special;
  const dep = ICMP_DEPS[key];
  if (dep) f.icmpDep = dep;
  fieldCache.set(key, f);
  return f;
}

/** Field names of a header, for error messages. */
export function headerFieldNames(proto: Proto): string[] {
  return Object.keys(HEADERS[proto]);
}

/** The header field a payload load (with an optional bit mask) reads, for rendering. */
export function headerFieldAt(proto: Proto, offset: number, len: number, mask: bigint | undefined,
  allowSpecial = false): Field | undefined {
  for (const name of Object.keys(HEADERS[proto])) {
    const f = headerField(proto, name)!;
    if ((f as { special?: string }).special && !allowSpecial) continue;
    const l = f.load as { offset: number };
    if (l.offset !== offset || f.len !== len) continue;
    const m = fieldMask(f);
    if (m === undefined ? mask === undefined : mask === m) return f;
  }
  return undefined;
}

/** Every field of `proto` at offset/len (icmp fields share places: sequence and mtu). */
export function headerFieldsAt(proto: Proto, offset: number, len: number, mask: bigint | undefined): Field[] {
  const out: Field[] = [];
  for (const name of Object.keys(HEADERS[proto])) {
    const f = headerField(proto, name)!;
    const l = f.load as { offset: number };
    if (l.offset !== offset || f.len !== len) continue;
    const m = fieldMask(f);
    if (m === undefined ? mask === undefined : mask === m) out.push(f);
  }
  return out;
}

/** The mask nft applies to a field that is not whole bytes, else undefined. */
export function fieldMask(f: Field): bigint | undefined {
  const width = f.width ?? f.len * 8;
  if (width === f.len * 8) return undefined;
  return ((1n << BigInt(width)) - 1n) << BigInt(f.shift ?? 0);
}

// ---- meta and ct keys -------------------------------------------------------

interface KeySpec { type: TypeId; len: number; syms?: Syms; keyType?: number; host?: boolean; num: number }

/** meta keys beyond iif/oif/iifname/oifname/l4proto/nfproto/mark (fields.ts has those). */
const META: Partial<Record<MetaKey, KeySpec>> = {
  len: { type: 'int', len: 4, host: true, keyType: T.integer, num: 0 },
  protocol: { type: 'int', len: 2, syms: ETHERTYPE, keyType: T.ethertype, num: 1 },
  priority: { type: 'classid', len: 4, host: true, keyType: T.classid, num: 2 },
  iiftype: { type: 'int', len: 2, host: true, syms: ARPHRD, keyType: T.arphrd, num: 8 },
  oiftype: { type: 'int', len: 2, host: true, syms: ARPHRD, keyType: T.arphrd, num: 9 },
  skuid: { type: 'uid', len: 4, host: true, keyType: T.uid, num: 10 },
  skgid: { type: 'gid', len: 4, host: true, keyType: T.gid, num: 11 },
  nftrace: { type: 'int', len: 1, host: true, keyType: T.integer, num: 12 },
  rtclassid: { type: 'int', len: 4, host: true, syms: REALMS, keyType: T.realm, num: 13 },
  secmark: { type: 'int', len: 4, host: true, keyType: T.integer, num: 14 },
  pkttype: { type: 'int', len: 1, host: true, syms: PKTTYPE, keyType: T.pkttype, num: 19 },
  cpu: { type: 'int', len: 4, host: true, keyType: T.integer, num: 20 },
  iifgroup: { type: 'int', len: 4, host: true, syms: DEVGROUP, keyType: T.devgroup, num: 21 },
  oifgroup: { type: 'int', len: 4, host: true, syms: DEVGROUP, keyType: T.devgroup, num: 22 },
  cgroup: { type: 'int', len: 4, host: true, keyType: T.integer, num: 23 },
  random: { type: 'int', len: 4, keyType: T.integer, num: 24 },
  ipsec: { type: 'int', len: 1, host: true, syms: BOOLEAN, keyType: T.boolean, num: 25 },
  iifkind: { type: 'ifname', len: 16, keyType: T.ifname, num: 26 },
  oifkind: { type: 'ifname', len: 16, keyType: T.ifname, num: 27 },
  sdif: { type: 'ifindex', len: 4, host: true, keyType: T.ifindex, num: 33 },
  sdifname: { type: 'ifname', len: 16, keyType: T.ifname, num: 34 },
  // nft's time, hour and day types (43, 44, 45): host order
  time: { type: 'date', len: 8, host: true, keyType: 43, num: 30 },
  day: { type: 'int', len: 1, host: true, syms: DAYS, keyType: 45, num: 31 },
  hour: { type: 'hour', len: 4, host: true, keyType: 44, num: 32 },
};

/** Meta keys that need `meta` before them (nft's unqualified ones are in UNQUALIFIED_META). */
export const META_KEYS = Object.keys(META) as MetaKey[];
/** Meta keys nft accepts without `meta` (meta_key_unqualified in nft's grammar). */
export const UNQUALIFIED_META = new Set([
  'mark', 'iif', 'iifname', 'iiftype', 'oif', 'oifname', 'oiftype', 'skuid', 'skgid', 'nftrace', 'rtclassid',
  'ibriport', 'obriport', 'ibrname', 'obrname', 'pkttype', 'cpu', 'iifgroup', 'oifgroup', 'cgroup', 'ipsec', 'time',
]);

export function metaField(key: MetaKey): Field | undefined {
  const s = META[key];
  if (!s) return undefined;
  const name = `meta ${key === 'len' ? 'length' : key}`;
  const f: Field = {
    name, type: s.type, len: s.len, load: { kind: 'meta', key },
    // (nft's strings are host byte order too)
    set: { keyType: s.keyType!, byteorder: s.host || s.type === 'ifname' ? BYTEORDER_HOST : BYTEORDER_BIG, key: { expr: 'meta', key: s.num } },
  };
  if (s.host) f.host = true;
  if (s.syms) f.syms = s.syms;
  return f;
}

/** nft's spelling of a meta key word (length is NFT_META_LEN). */
export function metaKeyOf(word: string): MetaKey | undefined {
  if (word === 'length') return 'len';
  // nft's other name for meta ipsec
  if (word === 'secpath') return 'ipsec';
  if (word === 'len') return undefined;
  return word in META ? (word as MetaKey) : undefined;
}

interface CtSpec { type: TypeId; len: number; syms?: Syms; keyType?: number; host?: boolean; num: number; dir?: 'optional' | 'required' | 'none' }

// num: the kernel's NFT_CT_* key, which nft's typeof userdata names
const CT: Partial<Record<CtKey, CtSpec>> = {
  direction: { type: 'int', len: 1, host: true, syms: CT_DIR, keyType: T.ctDir, num: 1, dir: 'none' },
  expiration: { type: 'ms', len: 4, host: true, keyType: 18, num: 5, dir: 'none' },
  l3proto: { type: 'nfproto', len: 1, host: true, keyType: T.nfproto, num: 7, dir: 'optional' },
  protocol: { type: 'proto', len: 1, keyType: T.proto, num: 10, dir: 'optional' },
  'proto-src': { type: 'port', len: 2, keyType: T.service, num: 11, dir: 'optional' },
  'proto-dst': { type: 'port', len: 2, keyType: T.service, num: 12, dir: 'optional' },
  packets: { type: 'int', len: 8, host: true, keyType: T.integer, num: 14, dir: 'optional' },
  bytes: { type: 'int', len: 8, host: true, keyType: T.integer, num: 15, dir: 'optional' },
  avgpkt: { type: 'int', len: 8, host: true, keyType: T.integer, num: 16, dir: 'optional' },
  zone: { type: 'int', len: 2, host: true, keyType: T.integer, num: 17, dir: 'optional' },
  event: { type: 'flags', len: 4, host: true, syms: CT_EVENT, keyType: T.ctEvent, num: 18, dir: 'none' },
  secmark: { type: 'int', len: 4, host: true, keyType: T.integer, num: 4, dir: 'none' },
  id: { type: 'int', len: 4, keyType: T.integer, num: 23, dir: 'none' },
  // a string of up to 16 bytes, as ifname (no sets)
  helper: { type: 'ifname', len: 16, num: 6, dir: 'none' },
  // a 128-bit label bitmap: `ct label N` tests bit N (names would come from connlabel.conf; numbers only here)
  label: { type: 'flags', len: 16, host: true, syms: LABELS, num: 13, dir: 'none' },
  'ip saddr': { type: 'ipv4', len: 4, keyType: T.ipv4, num: 19, dir: 'required' },
  'ip daddr': { type: 'ipv4', len: 4, keyType: T.ipv4, num: 20, dir: 'required' },
  'ip6 saddr': { type: 'ipv6', len: 16, keyType: T.ipv6, num: 21, dir: 'required' },
  'ip6 daddr': { type: 'ipv6', len: 16, keyType: T.ipv6, num: 22, dir: 'required' },
};

/** A ct key with an optional direction (0 original, 1 reply). */
export function ctField(key: CtKey, dir?: 0 | 1): Field | undefined {
  const s = CT[key];
  if (!s) return undefined;
  const d = dir === undefined ? '' : dir === 0 ? 'original ' : 'reply ';
  const f: Field = {
    name: `ct ${d}${key}`, type: s.type, len: s.len,
    load: dir === undefined ? { kind: 'ct', key } : { kind: 'ct', key, dir },
  };
  if (s.keyType !== undefined) {
    // nft's typeof names the direction (none: 0xffffffff)
    f.set = { keyType: s.keyType, byteorder: s.host ? BYTEORDER_HOST : BYTEORDER_BIG,
      key: dir === undefined ? { expr: 'ct', key: s.num } : { expr: 'ct', key: s.num, dir } };
  }
  if (s.host) f.host = true;
  if (s.syms) f.syms = s.syms;
  return f;
}

/** Whether `ct KEY` takes original/reply: 'required' (addresses), 'optional', 'none'. */
export function ctDirection(key: CtKey): 'optional' | 'required' | 'none' | undefined {
  return CT[key]?.dir;
}
