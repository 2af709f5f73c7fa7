/**
 * The expression IR and its schema: one typed model of a kernel rule, shared
 * by the rule language (parser, renderer), the native encoder and decoder,
 * the validator and the comparison the reconciler uses.
 *
 * EXPR_SCHEMA below is the one description of every expression kind: each
 * kind mirrors one nf_tables expression (NFTA_EXPR_NAME) and each field one
 * of its NFTA_* attributes, with the field's type and bounds. From it come
 *  - the TypeScript types of the IR (Expr, PayloadExpr, ...), by type mapping;
 *  - the validator (validate.ts), which refuses what the encoder cannot send;
 *  - the addon's C++ table (native/expr_schema.gen.h, written by
 *    `npm run gen:schema`; test/netlink/schema.test.ts fails when it is stale),
 *    through which native/encode.cc, decode.cc and decode_json.cc read and
 *    write expressions.
 * Adding an expression kind is one entry here (then `npm run gen:schema`).
 *
 * Byte strings are lowercase hex, as the kernel holds them (network byte
 * order for addresses and ports, host order for marks and meta/ct integers).
 */

/** Registers as the kernel numbers them: 0 verdict, 1-4 (16 bytes), 8-23 (4 bytes). */
export type Reg = number;

/** Lowercase hex bytes. */
export type Hex = string;

// --- schema vocabulary ---------------------------------------------------------

/**
 * How a field is typed in the IR and on the wire (through libnftnl):
 * reg: a register number (u32 on the wire); u8/u16/u32/i32/u64: integers of
 * that width (i32: u32 on the wire, signed in meaning); str: a NUL-free string;
 * data: hex of one data register value (at most NFT_DATA_VALUE_MAXLEN bytes);
 * blob: hex of an opaque blob (xt match/target info); enum: a name from
 * `enum` (u32 on the wire, a number when the kernel sends one we do not name).
 */
export type FieldType = 'reg' | 'u8' | 'u16' | 'u32' | 'i32' | 'u64' | 'str' | 'data' | 'blob' | 'enum';

/** Names for the values of a kernel enum, by the C constant from the kernel's uapi headers. */
export interface EnumSpec {
  /** Stem of the C table's name (kCmpOpMap). */
  readonly c: string;
  /** The C table is visible outside expr_table.cc (encode.cc uses it for chains, sets, families). */
  readonly shared?: boolean;
  readonly values: Readonly<Record<string, string>>;
}

export interface FieldSpec {
  /** Attribute suffix: libnftnl's NFTNL_EXPR_<kind nftnl>_<attr>, the kernel's NFTA_<KIND>_<attr>. */
  readonly attr: string;
  readonly type: FieldType;
  readonly enum?: EnumSpec;
  /** The IR type admits a raw number for this enum besides its names. */
  readonly orNumber?: boolean;
  readonly optional?: boolean;
  /** str/data/blob: most bytes. */
  readonly max?: number;
}

export interface KindSpec {
  /** libnftnl's attribute prefix for the kind; absent for `unknown`, which is passed through raw. */
  readonly nftnl?: string;
  /** In the order the decoders emit them. */
  readonly fields: Readonly<Record<string, FieldSpec>>;
  /** Pairs of fields of which exactly one must be present. */
  readonly exactlyOne?: readonly (readonly [string, string])[];
  /** A cross-field rule the types cannot say; returns why the expression is refused. */
  readonly check?: (e: Readonly<Record<string, unknown>>) => string | undefined;
}

// NFT_DATA_VALUE_MAXLEN
export const MAX_DATA = 64;
// A netlink attribute's length is 16 bits; the encoder keeps below it.
export const MAX_BLOB = 0xff00;
// XT_EXTENSION_MAXNAMELEN - 1: libnftnl silently truncates a longer xt name.
export const MAX_XT_NAME = 28;

const field = <T extends FieldType, A extends string>(type: T, attr: A) => ({ attr, type }) as const;
const reg = <A extends string>(attr: A) => field('reg', attr);
const u8 = <A extends string>(attr: A) => field('u8', attr);
const u16 = <A extends string>(attr: A) => field('u16', attr);
const u32 = <A extends string>(attr: A) => field('u32', attr);
const u64 = <A extends string>(attr: A) => field('u64', attr);
const str = <A extends string>(attr: A) => field('str', attr);
const data = <A extends string>(attr: A) => ({ attr, type: 'data', max: MAX_DATA }) as const;
const blob = <A extends string>(attr: A) => ({ attr, type: 'blob', max: MAX_BLOB }) as const;
const enumOf = <A extends string, E extends EnumSpec>(attr: A, e: E) => ({ attr, type: 'enum', enum: e }) as const;
/** An enum field whose IR type also takes a raw number. */
const enumOrNumber = <A extends string, E extends EnumSpec>(attr: A, e: E) =>
  ({ attr, type: 'enum', enum: e, orNumber: true }) as const;
const opt = <F extends FieldSpec>(f: F) => ({ ...f, optional: true }) as const;

// --- enums ------------------------------------------------------------------------

export const FAMILY = {
  c: 'Family', shared: true,
  values: { inet: 'NFPROTO_INET', ip: 'NFPROTO_IPV4', arp: 'NFPROTO_ARP', netdev: 'NFPROTO_NETDEV', bridge: 'NFPROTO_BRIDGE', ip6: 'NFPROTO_IPV6' },
} as const;

export const INET_HOOK = {
  c: 'InetHook', shared: true,
  values: {
    prerouting: 'NF_INET_PRE_ROUTING', input: 'NF_INET_LOCAL_IN', forward: 'NF_INET_FORWARD',
    output: 'NF_INET_LOCAL_OUT', postrouting: 'NF_INET_POST_ROUTING', ingress: 'NF_INET_INGRESS',
  },
} as const;

export const NETDEV_HOOK = {
  c: 'NetdevHook', shared: true, values: { ingress: 'NF_NETDEV_INGRESS', egress: 'NF_NETDEV_EGRESS' },
} as const;

export const POLICY = { c: 'Policy', shared: true, values: { drop: 'NF_DROP', accept: 'NF_ACCEPT' } } as const;

export const VERDICT = {
  c: 'Verdict', shared: true,
  values: {
    drop: 'NF_DROP', accept: 'NF_ACCEPT', stolen: 'NF_STOLEN', queue: 'NF_QUEUE', continue: 'NFT_CONTINUE',
    break: 'NFT_BREAK', jump: 'NFT_JUMP', goto: 'NFT_GOTO', return: 'NFT_RETURN',
  },
} as const;

const PAYLOAD_BASE = {
  c: 'PayloadBase',
  values: {
    ll: 'NFT_PAYLOAD_LL_HEADER', network: 'NFT_PAYLOAD_NETWORK_HEADER',
    transport: 'NFT_PAYLOAD_TRANSPORT_HEADER', inner: 'NFT_PAYLOAD_INNER_HEADER',
  },
} as const;

const CMP_OP = {
  c: 'CmpOp',
  values: { eq: 'NFT_CMP_EQ', neq: 'NFT_CMP_NEQ', lt: 'NFT_CMP_LT', lte: 'NFT_CMP_LTE', gt: 'NFT_CMP_GT', gte: 'NFT_CMP_GTE' },
} as const;

const RANGE_OP = { c: 'RangeOp', values: { eq: 'NFT_RANGE_EQ', neq: 'NFT_RANGE_NEQ' } } as const;

const BITWISE_OP = {
  c: 'BitwiseOp', values: { bool: 'NFT_BITWISE_MASK_XOR', lshift: 'NFT_BITWISE_LSHIFT', rshift: 'NFT_BITWISE_RSHIFT' },
} as const;

const BYTEORDER_OP = { c: 'ByteorderOp', values: { ntoh: 'NFT_BYTEORDER_NTOH', hton: 'NFT_BYTEORDER_HTON' } } as const;

/** Meta keys as nft spells them. */
const META_KEY = {
  c: 'MetaKey',
  values: {
    len: 'NFT_META_LEN', protocol: 'NFT_META_PROTOCOL', priority: 'NFT_META_PRIORITY', mark: 'NFT_META_MARK',
    iif: 'NFT_META_IIF', oif: 'NFT_META_OIF', iifname: 'NFT_META_IIFNAME', oifname: 'NFT_META_OIFNAME',
    iiftype: 'NFT_META_IIFTYPE', oiftype: 'NFT_META_OIFTYPE', skuid: 'NFT_META_SKUID', skgid: 'NFT_META_SKGID',
    nftrace: 'NFT_META_NFTRACE', rtclassid: 'NFT_META_RTCLASSID', secmark: 'NFT_META_SECMARK',
    nfproto: 'NFT_META_NFPROTO', l4proto: 'NFT_META_L4PROTO', ibrname: 'NFT_META_BRI_IIFNAME',
    obrname: 'NFT_META_BRI_OIFNAME', pkttype: 'NFT_META_PKTTYPE', cpu: 'NFT_META_CPU',
    iifgroup: 'NFT_META_IIFGROUP', oifgroup: 'NFT_META_OIFGROUP', cgroup: 'NFT_META_CGROUP',
    random: 'NFT_META_PRANDOM', ipsec: 'NFT_META_SECPATH', iifkind: 'NFT_META_IIFKIND',
    oifkind: 'NFT_META_OIFKIND', ibrpvid: 'NFT_META_BRI_IIFPVID', ibrvproto: 'NFT_META_BRI_IIFVPROTO',
    time: 'NFT_META_TIME_NS', day: 'NFT_META_TIME_DAY', hour: 'NFT_META_TIME_HOUR', sdif: 'NFT_META_SDIF',
    sdifname: 'NFT_META_SDIFNAME',
  },
} as const;

const CT_KEY = {
  c: 'CtKey',
  values: {
    state: 'NFT_CT_STATE', direction: 'NFT_CT_DIRECTION', status: 'NFT_CT_STATUS', mark: 'NFT_CT_MARK',
    secmark: 'NFT_CT_SECMARK', expiration: 'NFT_CT_EXPIRATION', helper: 'NFT_CT_HELPER',
    l3proto: 'NFT_CT_L3PROTOCOL', saddr: 'NFT_CT_SRC', daddr: 'NFT_CT_DST', protocol: 'NFT_CT_PROTOCOL',
    'proto-src': 'NFT_CT_PROTO_SRC', 'proto-dst': 'NFT_CT_PROTO_DST', label: 'NFT_CT_LABELS',
    packets: 'NFT_CT_PKTS', bytes: 'NFT_CT_BYTES', avgpkt: 'NFT_CT_AVGPKT', zone: 'NFT_CT_ZONE',
    event: 'NFT_CT_EVENTMASK', 'ip saddr': 'NFT_CT_SRC_IP', 'ip daddr': 'NFT_CT_DST_IP',
    'ip6 saddr': 'NFT_CT_SRC_IP6', 'ip6 daddr': 'NFT_CT_DST_IP6', id: 'NFT_CT_ID',
  },
} as const;

const NAT_TYPE = { c: 'NatType', values: { snat: 'NFT_NAT_SNAT', dnat: 'NFT_NAT_DNAT' } } as const;

const FIB_RESULT = {
  c: 'FibResult', values: { oif: 'NFT_FIB_RESULT_OIF', oifname: 'NFT_FIB_RESULT_OIFNAME', type: 'NFT_FIB_RESULT_ADDRTYPE' },
} as const;

const RT_KEY = {
  c: 'RtKey',
  values: { classid: 'NFT_RT_CLASSID', nexthop4: 'NFT_RT_NEXTHOP4', nexthop6: 'NFT_RT_NEXTHOP6', mtu: 'NFT_RT_TCPMSS', ipsec: 'NFT_RT_XFRM' },
} as const;

/** Every enum the addon names, in the order its C tables are written. */
export const ENUMS: readonly EnumSpec[] = [
  FAMILY, INET_HOOK, NETDEV_HOOK, POLICY, VERDICT, PAYLOAD_BASE, CMP_OP, RANGE_OP, BITWISE_OP,
  BYTEORDER_OP, META_KEY, CT_KEY, NAT_TYPE, FIB_RESULT, RT_KEY,
];

// --- the expression kinds -----------------------------------------------------------

export const EXPR_SCHEMA = {
  /** NFTA_PAYLOAD_*: load `len` bytes at `offset` of a header into `dreg` (or store from `sreg`). */
  payload: {
    nftnl: 'PAYLOAD',
    fields: {
      dreg: opt(reg('DREG')), base: enumOf('BASE', PAYLOAD_BASE), offset: u32('OFFSET'), len: u32('LEN'),
      sreg: opt(reg('SREG')), csumType: opt(u32('CSUM_TYPE')), csumOffset: opt(u32('CSUM_OFFSET')),
      csumFlags: opt(u32('FLAGS')),
    },
    exactlyOne: [['dreg', 'sreg']],
  },
  /** NFTA_CMP_*: compare register `sreg` with `data`. */
  cmp: { nftnl: 'CMP', fields: { sreg: reg('SREG'), op: enumOf('OP', CMP_OP), data: data('DATA') } },
  /** NFTA_RANGE_*: `from` <= sreg <= `to` (or outside, with neq). */
  range: {
    nftnl: 'RANGE',
    fields: { sreg: reg('SREG'), op: enumOf('OP', RANGE_OP), from: data('FROM_DATA'), to: data('TO_DATA') },
  },
  /** NFTA_BITWISE_*: dreg = (sreg & mask) ^ xor, or a shift by `data`. */
  bitwise: {
    nftnl: 'BITWISE',
    fields: {
      sreg: reg('SREG'), dreg: reg('DREG'), len: u32('LEN'), op: opt(enumOf('OP', BITWISE_OP)),
      mask: opt(data('MASK')), xor: opt(data('XOR')), data: opt(data('DATA')),
    },
  },
  /** NFTA_BYTEORDER_*. */
  byteorder: {
    nftnl: 'BYTEORDER',
    fields: { sreg: reg('SREG'), dreg: reg('DREG'), op: enumOf('OP', BYTEORDER_OP), len: u32('LEN'), size: u32('SIZE') },
  },
  /** NFTA_META_*: load (dreg) or set (sreg) packet metadata. */
  meta: {
    nftnl: 'META',
    fields: { key: enumOrNumber('KEY', META_KEY), dreg: opt(reg('DREG')), sreg: opt(reg('SREG')) },
    exactlyOne: [['dreg', 'sreg']],
  },
  /** NFTA_CT_*: load (dreg) or set (sreg) conntrack state. */
  ct: {
    nftnl: 'CT',
    fields: { key: enumOrNumber('KEY', CT_KEY), dreg: opt(reg('DREG')), sreg: opt(reg('SREG')), dir: opt(u8('DIR')) },
    exactlyOne: [['dreg', 'sreg']],
  },
  /**
   * NFTA_IMMEDIATE_*: a verdict (dreg 0) or data into a register. A jump names its chain, or
   * (`chainId`, NFTA_VERDICT_CHAIN_ID) a chain added in the same batch by its id, as nft names a
   * bound chain (`jump { … }`); the kernel dumps the bound chain's name.
   */
  immediate: {
    nftnl: 'IMM',
    fields: {
      dreg: reg('DREG'), data: opt(data('DATA')), verdict: opt(enumOrNumber('VERDICT', VERDICT)), chain: opt(str('CHAIN')),
      chainId: opt(u32('CHAIN_ID')),
    },
    exactlyOne: [['data', 'verdict']],
    check: (e) => {
      const jumps = e.verdict === 'jump' || e.verdict === 'goto';
      if (jumps && (e.chain === undefined) === (e.chainId === undefined)) return `a ${String(e.verdict)} needs a 'chain' or a 'chainId'`;
      if (!jumps && (e.chain !== undefined || e.chainId !== undefined)) return "'chain' and 'chainId' only go with a jump or goto verdict";
      return undefined;
    },
  },
  /** NFTA_LOOKUP_*: sreg in set `set` (flags & 1: not in). `setId`: the batch-local id of a set created in the same batch; the kernel never reports it. */
  lookup: {
    nftnl: 'LOOKUP',
    fields: { sreg: reg('SREG'), dreg: opt(reg('DREG')), set: str('SET'), setId: opt(u32('SET_ID')), flags: opt(u32('FLAGS')) },
  },
  /** NFTA_NAT_*: snat/dnat to the addresses/ports in the registers; `flags`: NF_NAT_RANGE_* bits. */
  nat: {
    nftnl: 'NAT',
    fields: {
      type: enumOf('TYPE', NAT_TYPE), family: enumOrNumber('FAMILY', FAMILY), regAddrMin: opt(reg('REG_ADDR_MIN')),
      regAddrMax: opt(reg('REG_ADDR_MAX')), regProtoMin: opt(reg('REG_PROTO_MIN')), regProtoMax: opt(reg('REG_PROTO_MAX')),
      flags: opt(u32('FLAGS')),
    },
  },
  /** NFTA_MASQ_*. */
  masq: {
    nftnl: 'MASQ',
    fields: { flags: opt(u32('FLAGS')), regProtoMin: opt(reg('REG_PROTO_MIN')), regProtoMax: opt(reg('REG_PROTO_MAX')) },
  },
  /** NFTA_REDIR_*. */
  redir: {
    nftnl: 'REDIR',
    fields: { flags: opt(u32('FLAGS')), regProtoMin: opt(reg('REG_PROTO_MIN')), regProtoMax: opt(reg('REG_PROTO_MAX')) },
  },
  /** NFTA_COUNTER_*: values are state, not desired configuration; comparison ignores them. */
  counter: { nftnl: 'CTR', fields: { packets: opt(u64('PACKETS')), bytes: opt(u64('BYTES')) } },
  /** NFTA_LIMIT_*. */
  limit: {
    nftnl: 'LIMIT',
    fields: { rate: u64('RATE'), unit: u64('UNIT'), burst: opt(u32('BURST')), type: opt(u32('TYPE')), flags: opt(u32('FLAGS')) },
  },
  /** NFTA_FIB_*: a routing lookup; result "type" with flags DADDR is `fib daddr type`. */
  fib: { nftnl: 'FIB', fields: { result: enumOrNumber('RESULT', FIB_RESULT), flags: u32('FLAGS'), dreg: reg('DREG') } },
  /** NFTA_MATCH_*: an xtables match (iptables-nft's -m comment, -m addrtype, ...). */
  match: { nftnl: 'MT', fields: { name: { ...str('NAME'), max: MAX_XT_NAME }, rev: u32('REV'), info: blob('INFO') } },
  /** NFTA_TARGET_*: an xtables target (iptables-nft's -j MASQUERADE, -j DNAT, ...). */
  target: { nftnl: 'TG', fields: { name: { ...str('NAME'), max: MAX_XT_NAME }, rev: u32('REV'), info: blob('INFO') } },
  /** NFTA_LOG_*. */
  log: {
    nftnl: 'LOG',
    fields: {
      prefix: opt(str('PREFIX')), group: opt(u16('GROUP')), snaplen: opt(u32('SNAPLEN')),
      qthreshold: opt(u16('QTHRESHOLD')), level: opt(u32('LEVEL')), flags: opt(u32('FLAGS')),
    },
  },
  /** NFTA_REJECT_*. */
  reject: { nftnl: 'REJECT', fields: { type: opt(u32('TYPE')), code: opt(u8('CODE')) } },
  /** NFTA_QUOTA_*. */
  quota: { nftnl: 'QUOTA', fields: { bytes: u64('BYTES'), flags: opt(u32('FLAGS')), consumed: opt(u64('CONSUMED')) } },
  /** NFTA_RT_*. */
  rt: { nftnl: 'RT', fields: { key: enumOrNumber('KEY', RT_KEY), dreg: reg('DREG') } },
  /** NFTA_NG_*. */
  numgen: {
    nftnl: 'NG', fields: { dreg: reg('DREG'), modulus: u32('MODULUS'), type: u32('TYPE'), offset: opt(u32('OFFSET')) },
  },
  /**
   * NFTA_HASH_*: dreg = hash % modulus + offset. type 0 (jhash) hashes `len` bytes from sreg with
   * `seed` (absent: the kernel picks one and does not dump it); type 1 (symhash) hashes the flow.
   */
  hash: {
    nftnl: 'HASH',
    fields: {
      sreg: opt(reg('SREG')), dreg: reg('DREG'), len: opt(u32('LEN')), modulus: u32('MODULUS'),
      seed: opt(u32('SEED')), offset: opt(u32('OFFSET')), type: u32('TYPE'),
    },
  },
  /**
   * NFTA_DYNSET_*: add (op 0) or update (op 1) the key in `sregKey` (and the data in `sregData`) to
   * the named set, with `timeout` ms. The kernel dumps timeout 0 and flags 0 when none were given.
   * Its own statements for the element it adds (NFTA_DYNSET_EXPR, or NFTA_DYNSET_EXPRESSIONS with
   * flags 2, NFT_DYNSET_F_EXPR, for more than one) are `exprs` (see DynsetExpr); the kernel dumps
   * them only when the set has no expressions of its own.
   */
  dynset: {
    nftnl: 'DYNSET',
    fields: {
      sregKey: reg('SREG_KEY'), sregData: opt(reg('SREG_DATA')), op: u32('OP'), timeout: opt(u64('TIMEOUT')),
      set: str('SET_NAME'), setId: opt(u32('SET_ID')), flags: opt(u32('FLAGS')),
    },
  },
  /**
   * NFTA_OBJREF_*: use the named stateful object `name` of `type` (NFT_OBJECT_*: 1 counter, 2 quota,
   * 3 ct helper, 4 limit, 7 ct timeout, 8 secmark, 9 ct expectation, 10 synproxy), or the object the
   * key in `sreg` maps to in the object map `set`.
   */
  objref: {
    nftnl: 'OBJREF',
    fields: {
      type: opt(u32('IMM_TYPE')), name: opt(str('IMM_NAME')), sreg: opt(reg('SET_SREG')), set: opt(str('SET_NAME')),
      setId: opt(u32('SET_ID')),
    },
    exactlyOne: [['name', 'set']],
  },
  /** notrack: no attributes. */
  notrack: { nftnl: 'NOTRACK', fields: {} },
  /**
   * NFTA_EXTHDR_*: an IPv6 extension header field, a TCP option (op 1), an IPv4
   * option (2) or an SCTP chunk (3): load into `dreg` (flags & 1: presence only)
   * or store from `sreg`; with neither register, a TCP option is stripped (`reset tcp option`,
   * which the kernel takes only without offset, len and flags).
   */
  exthdr: {
    nftnl: 'EXTHDR',
    fields: {
      dreg: opt(reg('DREG')), type: u8('TYPE'), offset: opt(u32('OFFSET')), len: opt(u32('LEN')), flags: opt(u32('FLAGS')),
      op: opt(u32('OP')), sreg: opt(reg('SREG')),
    },
  },
  /** NFTA_SOCKET_*: a property of the packet's socket (key: NFT_SOCKET_*). */
  socket: { nftnl: 'SOCKET', fields: { key: u32('KEY'), dreg: reg('DREG'), level: opt(u32('LEVEL')) } },
  /** NFTA_XFRM_*: a property of the packet's IPsec state (key: NFT_XFRM_KEY_*, dir 0 in / 1 out, spnum: secpath index). */
  xfrm: { nftnl: 'XFRM', fields: { dreg: reg('DREG'), key: u32('KEY'), dir: u8('DIR'), spnum: u32('SPNUM') } },
  /** NFTA_CONNLIMIT_*: `ct count [over] N` (flags 1: NFT_CONNLIMIT_F_INV, over). */
  connlimit: { nftnl: 'CONNLIMIT', fields: { count: u32('COUNT'), flags: opt(u32('FLAGS')) } },
  /** NFTA_OSF_*: passive OS fingerprint name (flags 1: with version). */
  osf: { nftnl: 'OSF', fields: { dreg: reg('DREG'), ttl: opt(u8('TTL')), flags: opt(u32('FLAGS')) } },
  /** NFTA_SYNPROXY_*. */
  synproxy: { nftnl: 'SYNPROXY', fields: { mss: opt(u16('MSS')), wscale: opt(u8('WSCALE')), flags: opt(u32('FLAGS')) } },
  /** NFTA_TPROXY_*: divert to a local socket at the address/port in the registers. */
  tproxy: {
    nftnl: 'TPROXY',
    fields: { family: enumOrNumber('FAMILY', FAMILY), regAddr: opt(reg('REG_ADDR')), regPort: opt(reg('REG_PORT')) },
  },
  /** NFTA_DUP_*: clone to the address (and device) in the registers. */
  dup: { nftnl: 'DUP', fields: { sregAddr: opt(reg('SREG_ADDR')), sregDev: opt(reg('SREG_DEV')) } },
  /** Any expression the IR does not model, kept byte for byte (NFTA_EXPR_NAME, NFTA_EXPR_DATA) so nothing is lost. */
  unknown: { fields: { name: str('NAME'), data: blob('DATA') } },
} as const satisfies Readonly<Record<string, KindSpec>>;

// --- the IR types, derived from the schema -------------------------------------------

type Schema = typeof EXPR_SCHEMA;
export type ExprKind = keyof Schema;

type EnumName<E> = E extends { values: infer V } ? keyof V & string : never;
type ValueOf<F> =
  F extends { type: 'enum'; enum: infer E } ? EnumName<E> | (F extends { orNumber: true } ? number : never)
  : F extends { type: 'str' } ? string
  : F extends { type: 'data' | 'blob' } ? Hex
  : number;
type Simplify<T> = { [K in keyof T]: T[K] } & {};
type FieldsOf<K extends ExprKind> = Schema[K]['fields'];

/** The IR object of one expression kind, as the schema describes it. */
export type ExprOf<K extends ExprKind> = Simplify<
  { kind: K }
  & { -readonly [F in keyof FieldsOf<K> as FieldsOf<K>[F] extends { optional: true } ? never : F]: ValueOf<FieldsOf<K>[F]> }
  & { -readonly [F in keyof FieldsOf<K> as FieldsOf<K>[F] extends { optional: true } ? F : never]?: ValueOf<FieldsOf<K>[F]> }
>;

/** The expressions a set, a set element or a dynset carries (NFT_SET_EXPR_MAX: at most 2). */
export const STATEFUL_KINDS = ['counter', 'limit', 'quota', 'connlimit'] as const;
export type StatefulExpr = { [K in (typeof STATEFUL_KINDS)[number]]: ExprOf<K> }[(typeof STATEFUL_KINDS)[number]];
export const MAX_STATEFUL_EXPRS = 2;

export type Expr = { [K in ExprKind]: K extends 'dynset' ? ExprOf<K> & { exprs?: StatefulExpr[] } : ExprOf<K> }[ExprKind];

export const EXPR_KINDS = Object.keys(EXPR_SCHEMA) as readonly ExprKind[];

export type Family = EnumName<typeof FAMILY>;
export type Verdict = EnumName<typeof VERDICT>;
export type CmpOp = EnumName<typeof CMP_OP>;
export type MetaKey = EnumName<typeof META_KEY>;
export type CtKey = EnumName<typeof CT_KEY>;

export type PayloadExpr = ExprOf<'payload'>;
export type CmpExpr = ExprOf<'cmp'>;
export type RangeExpr = ExprOf<'range'>;
export type BitwiseExpr = ExprOf<'bitwise'>;
export type ByteorderExpr = ExprOf<'byteorder'>;
export type MetaExpr = ExprOf<'meta'>;
export type CtExpr = ExprOf<'ct'>;
export type ImmediateExpr = ExprOf<'immediate'>;
export type LookupExpr = ExprOf<'lookup'>;
export type NatExpr = ExprOf<'nat'>;
export type MasqExpr = ExprOf<'masq'>;
export type RedirExpr = ExprOf<'redir'>;
export type CounterExpr = ExprOf<'counter'>;
export type LimitExpr = ExprOf<'limit'>;
export type FibExpr = ExprOf<'fib'>;
export type MatchExpr = ExprOf<'match'>;
export type TargetExpr = ExprOf<'target'>;
export type LogExpr = ExprOf<'log'>;
export type RejectExpr = ExprOf<'reject'>;
export type QuotaExpr = ExprOf<'quota'>;
export type RtExpr = ExprOf<'rt'>;
export type NumgenExpr = ExprOf<'numgen'>;
export type HashExpr = ExprOf<'hash'>;
export type DynsetExpr = Extract<Expr, { kind: 'dynset' }>;
export type NotrackExpr = ExprOf<'notrack'>;
export type ObjrefExpr = ExprOf<'objref'>;
export type ExthdrExpr = ExprOf<'exthdr'>;
export type SocketExpr = ExprOf<'socket'>;
export type XfrmExpr = ExprOf<'xfrm'>;
export type ConnlimitExpr = ExprOf<'connlimit'>;
export type OsfExpr = ExprOf<'osf'>;
export type SynproxyExpr = ExprOf<'synproxy'>;
export type TproxyExpr = ExprOf<'tproxy'>;
export type DupExpr = ExprOf<'dup'>;

export type UnknownExpr = ExprOf<'unknown'>;

/** Register numbers (enum nft_registers). */
export const REG_VERDICT = 0;
export const REG_1 = 1;
export const REG32_00 = 8;

/** NF_NAT_RANGE_* flags (linux/netfilter/nf_nat.h). */
export const NAT_RANGE = {
  MAP_IPS: 1 << 0,
  PROTO_SPECIFIED: 1 << 1,
  PROTO_RANDOM: 1 << 2,
  PERSISTENT: 1 << 3,
  PROTO_RANDOM_FULLY: 1 << 4,
  PROTO_OFFSET: 1 << 5,
  NETMAP: 1 << 6,
} as const;

/** NFT_LOOKUP_F_INV. */
export const LOOKUP_F_INV = 1;

/** NFTA_FIB_F_* flags. */
export const FIB_F = { SADDR: 1, DADDR: 2, MARK: 4, IIF: 8, OIF: 16, PRESENT: 32 } as const;
