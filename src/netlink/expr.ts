/**
 * The expression IR: one typed model of a kernel rule, shared by the rule
 * language (parser, renderer), the native encoder and decoder, and the
 * comparison the reconciler uses. Each kind mirrors one nf_tables expression
 * (NFTA_EXPR_NAME) and each field one of its NFTA_* attributes; byte strings
 * are lowercase hex, as the kernel holds them (network byte order for
 * addresses and ports, host order for marks and meta/ct integers).
 */

/** Registers as the kernel numbers them: 0 verdict, 1-4 (16 bytes), 8-23 (4 bytes). */
export type Reg = number;

/** Lowercase hex bytes. */
export type Hex = string;

export type Family = 'ip' | 'ip6' | 'inet' | 'arp' | 'bridge' | 'netdev';

export type Verdict = 'accept' | 'drop' | 'continue' | 'break' | 'jump' | 'goto' | 'return' | 'queue' | 'stolen';

export type CmpOp = 'eq' | 'neq' | 'lt' | 'lte' | 'gt' | 'gte';

export type MetaKey =
  | 'len' | 'protocol' | 'priority' | 'mark' | 'iif' | 'oif' | 'iifname' | 'oifname'
  | 'iiftype' | 'oiftype' | 'skuid' | 'skgid' | 'nftrace' | 'rtclassid' | 'secmark'
  | 'nfproto' | 'l4proto' | 'ibrname' | 'obrname' | 'pkttype' | 'cpu' | 'iifgroup'
  | 'oifgroup' | 'cgroup' | 'random' | 'ipsec' | 'iifkind' | 'oifkind' | 'ibrpvid'
  | 'ibrvproto' | 'time' | 'day' | 'hour' | 'sdif' | 'sdifname';

export type CtKey =
  | 'state' | 'direction' | 'status' | 'mark' | 'secmark' | 'expiration' | 'helper'
  | 'l3proto' | 'saddr' | 'daddr' | 'protocol' | 'proto-src' | 'proto-dst' | 'label'
  | 'packets' | 'bytes' | 'avgpkt' | 'zone' | 'event' | 'ip saddr' | 'ip daddr'
  | 'ip6 saddr' | 'ip6 daddr' | 'id';

/** NFTA_PAYLOAD_*: load `len` bytes at `offset` of a header into `dreg` (or store from `sreg`). */
export interface PayloadExpr {
  kind: 'payload';
  base: 'll' | 'network' | 'transport' | 'inner';
  offset: number;
  len: number;
  dreg?: Reg;
  sreg?: Reg;
  csumType?: number;
  csumOffset?: number;
  csumFlags?: number;
}

/** NFTA_CMP_*: compare register `sreg` with `data`. */
export interface CmpExpr {
  kind: 'cmp';
  sreg: Reg;
  op: CmpOp;
  data: Hex;
}

/** NFTA_RANGE_*: `from` <= sreg <= `to` (or outside, with neq). */
export interface RangeExpr {
  kind: 'range';
  sreg: Reg;
  op: 'eq' | 'neq';
  from: Hex;
  to: Hex;
}

/** NFTA_BITWISE_*: dreg = (sreg & mask) ^ xor, or a shift by `data`. */
export interface BitwiseExpr {
  kind: 'bitwise';
  sreg: Reg;
  dreg: Reg;
  len: number;
  op?: 'bool' | 'lshift' | 'rshift';
  mask?: Hex;
  xor?: Hex;
  data?: Hex;
}

/** NFTA_BYTEORDER_*. */
export interface ByteorderExpr {
  kind: 'byteorder';
  sreg: Reg;
  dreg: Reg;
  op: 'ntoh' | 'hton';
  len: number;
  size: number;
}

/** NFTA_META_*: load (dreg) or set (sreg) packet metadata. */
export interface MetaExpr {
  kind: 'meta';
  key: MetaKey | number;
  dreg?: Reg;
  sreg?: Reg;
}

/** NFTA_CT_*: load (dreg) or set (sreg) conntrack state. */
export interface CtExpr {
  kind: 'ct';
  key: CtKey | number;
  dreg?: Reg;
  sreg?: Reg;
  dir?: number;
}

/** NFTA_IMMEDIATE_*: a verdict (dreg 0) or data into a register. */
export interface ImmediateExpr {
  kind: 'immediate';
  dreg: Reg;
  data?: Hex;
  verdict?: Verdict | number;
  chain?: string;
}

/** NFTA_LOOKUP_*: sreg in set `set` (flags & 1: not in). */
export interface LookupExpr {
  kind: 'lookup';
  sreg: Reg;
  set: string;
  /** Batch-local id of a set created in the same batch; the kernel never reports it. */
  setId?: number;
  dreg?: Reg;
  flags?: number;
}

/** NFTA_NAT_*: snat/dnat to the addresses/ports in the registers. */
export interface NatExpr {
  kind: 'nat';
  type: 'snat' | 'dnat';
  family: Family | number;
  regAddrMin?: Reg;
  regAddrMax?: Reg;
  regProtoMin?: Reg;
  regProtoMax?: Reg;
  /** NF_NAT_RANGE_* bits. */
  flags?: number;
}

/** NFTA_MASQ_*. */
export interface MasqExpr {
  kind: 'masq';
  flags?: number;
  regProtoMin?: Reg;
  regProtoMax?: Reg;
}

/** NFTA_REDIR_*. */
export interface RedirExpr {
  kind: 'redir';
  flags?: number;
  regProtoMin?: Reg;
  regProtoMax?: Reg;
}

/** NFTA_COUNTER_*: values are state, not desired configuration; comparison ignores them. */
export interface CounterExpr {
  kind: 'counter';
  packets?: number;
  bytes?: number;
}

/** NFTA_LIMIT_*. */
export interface LimitExpr {
  kind: 'limit';
  rate: number;
  unit: number;
  burst?: number;
  type?: number;
  flags?: number;
}

/** NFTA_FIB_*: a routing lookup; result "type" with flags DADDR is `fib daddr type`. */
export interface FibExpr {
  kind: 'fib';
  result: 'oif' | 'oifname' | 'type' | number;
  flags: number;
  dreg: Reg;
}

/** NFTA_MATCH_*: an xtables match (iptables-nft's -m comment, -m addrtype, ...). */
export interface MatchExpr {
  kind: 'match';
  name: string;
  rev: number;
  info: Hex;
}

/** NFTA_TARGET_*: an xtables target (iptables-nft's -j MASQUERADE, -j DNAT, ...). */
export interface TargetExpr {
  kind: 'target';
  name: string;
  rev: number;
  info: Hex;
}

export interface LogExpr {
  kind: 'log';
  prefix?: string;
  group?: number;
  snaplen?: number;
  qthreshold?: number;
  level?: number;
  flags?: number;
}

export interface RejectExpr {
  kind: 'reject';
  type?: number;
  code?: number;
}

export interface QuotaExpr {
  kind: 'quota';
  bytes: number;
  flags?: number;
  consumed?: number;
}

export interface RtExpr {
  kind: 'rt';
  key: string | number;
  dreg: Reg;
}

export interface NumgenExpr {
  kind: 'numgen';
  dreg: Reg;
  modulus: number;
  type: number;
  offset?: number;
}

export interface NotrackExpr {
  kind: 'notrack';
}

/** Any expression the IR does not model, kept byte for byte (NFTA_EXPR_DATA) so nothing is lost. */
export interface UnknownExpr {
  kind: 'unknown';
  name: string;
  data: Hex;
}

export type Expr =
  | PayloadExpr | CmpExpr | RangeExpr | BitwiseExpr | ByteorderExpr | MetaExpr | CtExpr
  | ImmediateExpr | LookupExpr | NatExpr | MasqExpr | RedirExpr | CounterExpr | LimitExpr
  | FibExpr | MatchExpr | TargetExpr | LogExpr | RejectExpr | QuotaExpr | RtExpr
  | NumgenExpr | NotrackExpr | UnknownExpr;

export type ExprKind = Expr['kind'];

export const EXPR_KINDS: readonly ExprKind[] = [
  'payload', 'cmp', 'range', 'bitwise', 'byteorder', 'meta', 'ct', 'immediate', 'lookup',
  'nat', 'masq', 'redir', 'counter', 'limit', 'fib', 'match', 'target', 'log', 'reject',
  'quota', 'rt', 'numgen', 'notrack', 'unknown',
];

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
