/**
 * Fields nft 1.0.6 reads with the exthdr expression: TCP options (tcpopt.c),
 * IPv6 extension headers (exthdr.c) and SCTP chunks (sctp_chunk.c), with
 * `exists`/`missing` presence tests. Offsets and widths are nft's template
 * bits; values are big-endian. Anonymous sets keyed by a whole-byte field are
 * described (typeof) as nft's exthdr_expr_build_udata does: the template's
 * index, the op (TCP, SCTP) and the header (IPv6 header id, option kind,
 * chunk type).
 */
import type { Field } from './fields.js';
import type { Syms } from './fields.js';
import { BYTEORDER_BIG } from './udata.js';

const BOOLEAN: Syms = { fmt: { base: 'dec' }, table: [['exists', 1], ['missing', 0]] };
const MH_TYPE: Syms = {
  fmt: { base: 'dec' },
  table: [
    ['binding-refresh-request', 0], ['home-test-init', 1], ['careof-test-init', 2], ['home-test', 3], ['careof-test', 4],
    ['binding-update', 5], ['binding-acknowledgement', 6], ['binding-error', 7], ['fast-binding-update', 8],
    ['fast-binding-acknowledgement', 9], ['fast-binding-advertisement', 10], ['experimental-mobility-header', 11],
    ['home-agent-switch-message', 12],
  ],
};

/** [bit offset, bits, proto-typed or syms, template index when it is not the field's position] */
type F = [number, number, ('proto' | Syms | undefined)?, number?];

export const TCP_OPTIONS: Record<string, { kind: number; fields: Record<string, F> }> = {
  eol: { kind: 0, fields: { kind: [0, 8] } },
  nop: { kind: 1, fields: { kind: [0, 8] } },
  maxseg: { kind: 2, fields: { kind: [0, 8], length: [8, 8], size: [16, 16] } },
  window: { kind: 3, fields: { kind: [0, 8], length: [8, 8], count: [16, 8] } },
  'sack-perm': { kind: 4, fields: { kind: [0, 8], length: [8, 8] } },
  sack: { kind: 5, fields: { kind: [0, 8], length: [8, 8], left: [16, 32], right: [48, 32] } },
  // nft's sack0 is sack; sack1-3 are the next blocks (templates left1, right1, … after right)
  sack0: { kind: 5, fields: { left: [16, 32, undefined, 2], right: [48, 32, undefined, 3] } },
  sack1: { kind: 5, fields: { left: [80, 32, undefined, 4], right: [112, 32, undefined, 5] } },
  sack2: { kind: 5, fields: { left: [144, 32, undefined, 6], right: [176, 32, undefined, 7] } },
  sack3: { kind: 5, fields: { left: [208, 32, undefined, 8], right: [240, 32, undefined, 9] } },
  timestamp: { kind: 8, fields: { kind: [0, 8], length: [8, 8], tsval: [16, 32], tsecr: [48, 32] } },
  md5sig: { kind: 19, fields: { kind: [0, 8], length: [8, 8] } },
  mptcp: { kind: 30, fields: { kind: [0, 8], length: [8, 8], subtype: [16, 4] } },
  fastopen: { kind: 34, fields: { kind: [0, 8], length: [8, 8] } },
};

/** IPv6 extension headers: next header type, nft's exthdr_desc id, fields. */
export const IPV6_EXTHDRS: Record<string, { type: number; desc: number; fields: Record<string, F> }> = {
  hbh: { type: 0, desc: 1, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8] } },
  rt: { type: 43, desc: 2, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8], type: [16, 8], 'seg-left': [24, 8] } },
  // a segment routing header (routing type 4); its sid[N] are srhSidField's
  srh: { type: 43, desc: 5, fields: { 'last-entry': [32, 8], flags: [40, 8], tag: [48, 16] } },
  frag: {
    type: 44, desc: 6,
    fields: {
      nexthdr: [0, 8, 'proto'], reserved: [8, 8], 'frag-off': [16, 13], reserved2: [29, 2], 'more-fragments': [31, 1],
      id: [32, 32],
    },
  },
  dst: { type: 60, desc: 7, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8] } },
  mh: {
    type: 135, desc: 8,
    fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8], type: [16, 8, MH_TYPE], reserved: [24, 8], checksum: [32, 16] },
  },
};

const COMMON: Record<string, F> = { type: [0, 8], flags: [8, 8], length: [16, 16] };
const INIT: Record<string, F> = {
  ...COMMON, 'init-tag': [32, 32], 'a-rwnd': [64, 32], 'num-outbound-streams': [96, 16], 'num-inbound-streams': [112, 16],
  'initial-tsn': [128, 32],
};

/** SCTP chunks by nft's name: chunk type and fields (type, flags, length, then the chunk's own). */
export const SCTP_CHUNKS: Record<string, { type: number; fields: Record<string, F> }> = {
  data: { type: 0, fields: { ...COMMON, tsn: [32, 32], stream: [64, 16], ssn: [80, 16], ppid: [96, 32] } },
  init: { type: 1, fields: INIT },
  'init-ack': { type: 2, fields: INIT },
  sack: { type: 3, fields: { ...COMMON, 'cum-tsn-ack': [32, 32], 'a-rwnd': [64, 32], 'num-gap-ack-blocks': [96, 16], 'num-dup-tsns': [112, 16] } },
  heartbeat: { type: 4, fields: COMMON },
  'heartbeat-ack': { type: 5, fields: COMMON },
  abort: { type: 6, fields: COMMON },
  shutdown: { type: 7, fields: { ...COMMON, 'cum-tsn-ack': [32, 32] } },
  'shutdown-ack': { type: 8, fields: COMMON },
  error: { type: 9, fields: COMMON },
  'cookie-echo': { type: 10, fields: COMMON },
  'cookie-ack': { type: 11, fields: COMMON },
  ecne: { type: 12, fields: { ...COMMON, 'lowest-tsn': [32, 32] } },
  cwr: { type: 13, fields: { ...COMMON, 'lowest-tsn': [32, 32] } },
  'shutdown-complete': { type: 14, fields: COMMON },
  'asconf-ack': { type: 128, fields: { ...COMMON, seqno: [32, 32] } },
  'forward-tsn': { type: 192, fields: { ...COMMON, 'new-cum-tsn': [32, 32] } },
  asconf: { type: 193, fields: { ...COMMON, seqno: [32, 32] } },
};

const OP_IPV6 = 0, OP_TCPOPT = 1, OP_SCTP = 3;
type Op = 0 | 1 | 3;
// nft datatype ids: integer, inet_proto, mh_type
const TYPE_INTEGER = 4, TYPE_PROTO = 12, TYPE_MH_TYPE = 17;

function make(name: string, op: Op, type: number, spec: F, index: number, ipv6Desc = 0): Field {
  const [off, bits, t, tmpl] = spec;
  const len = Math.ceil((off % 8 + bits) / 8);
  const shift = len * 8 - (off % 8) - bits;
  const f: Field = {
    name, type: t === 'proto' ? 'proto' : 'int', len,
    load: { kind: 'exthdr', op, type, offset: Math.floor(off / 8) },
    width: bits, shift,
  };
  if (t && t !== 'proto') f.syms = t;
  if (op === OP_IPV6) f.l3 = 'ip6';
  // IPv6 header templates count from 1 (0 is nft's invalid entry), TCP and SCTP ones from 0
  const keyType = t === 'proto' ? TYPE_PROTO : t === MH_TYPE ? TYPE_MH_TYPE : TYPE_INTEGER;
  const desc = op === OP_IPV6 ? ipv6Desc : type;
  f.set = { keyType, byteorder: BYTEORDER_BIG };
  // a bit field is keyed by `exthdr & mask`, which nft describes by byte order alone
  if (shift === 0 && bits % 8 === 0) f.set.key = { expr: 'exthdr', desc, tmpl: tmpl ?? (op === OP_IPV6 ? index + 1 : index), op };
  return f;
}

function fieldOf(table: Record<string, F>, field: string): [F, number] | undefined {
  const spec = table[field];
  return spec ? [spec, Object.keys(table).indexOf(field)] : undefined;
}

/** `tcp option NAME FIELD`, or `… exists|missing` (present: FIELD undefined). NAME may be a kind number (presence only). */
export function tcpOptionField(option: string, field: string | undefined): Field | undefined {
  const o = TCP_OPTIONS[option];
  if (!o) {
    const kind = /^(?:0|[1-9][0-9]{0,2})$/.test(option) ? Number(option) : NaN;
    if (!(kind <= 255) || field !== undefined) return undefined;
    const named = Object.entries(TCP_OPTIONS).find(([, x]) => x.kind === kind);
    return presence(`tcp option ${named ? named[0] : kind}`, OP_TCPOPT, kind);
  }
  if (field === undefined) return presence(`tcp option ${option === 'sack0' ? 'sack' : option}`, OP_TCPOPT, o.kind);
  const spec = fieldOf(o.fields, field);
  return spec ? make(`tcp option ${option} ${field}`, OP_TCPOPT, o.kind, spec[0], spec[1]) : undefined;
}

/** `tcp option @KIND,OFFSET,LENGTH` (bits): nft's raw option field; whole bytes only here. */
export function tcpOptionRaw(kind: number, bitOff: number, bits: number): Field | undefined {
  if (!(kind >= 0 && kind <= 255) || bitOff % 8 !== 0 || bits % 8 !== 0 || bits === 0 || bits > 128) return undefined;
  return {
    name: `tcp option @${kind},${bitOff},${bits}`, type: 'int', len: bits / 8,
    load: { kind: 'exthdr', op: OP_TCPOPT, type: kind, offset: bitOff / 8 }, width: bits, shift: 0,
  };
}

/** `sctp chunk NAME FIELD`, or `… exists|missing` (present: FIELD undefined). nft adds no dependency. */
export function sctpChunkField(chunk: string, field: string | undefined): Field | undefined {
  const c = SCTP_CHUNKS[chunk];
  if (!c) return undefined;
  if (field === undefined) return presence(`sctp chunk ${chunk}`, OP_SCTP, c.type);
  const spec = fieldOf(c.fields, field);
  return spec ? make(`sctp chunk ${chunk} ${field}`, OP_SCTP, c.type, spec[0], spec[1]) : undefined;
}

/** `hbh|rt|frag|dst|mh FIELD`, or (field undefined) `exthdr NAME` presence. */
export function ipv6ExthdrField(hdr: string, field: string | undefined): Field | undefined {
  const h = IPV6_EXTHDRS[hdr];
  if (!h) return undefined;
  if (field === undefined) {
    if (hdr === 'srh') return undefined;
    const p = presence(`exthdr ${hdr}`, OP_IPV6, h.type);
    p.l3 = 'ip6';
    return p;
  }
  const spec = fieldOf(h.fields, field);
  return spec ? make(`${hdr} ${field}`, OP_IPV6, h.type, spec[0], spec[1], h.desc) : undefined;
}

/** `srh sid[N]` (N from 1): an IPv6 address at 8 + 16 (N - 1); no sets. */
export function srhSidField(n: number): Field {
  return { name: `srh sid[${n}]`, type: 'ipv6', len: 16, load: { kind: 'exthdr', op: OP_IPV6, type: 43, offset: 8 + 16 * (n - 1) }, l3: 'ip6' };
}

function presence(name: string, op: Op, type: number): Field {
  return { name, type: 'int', len: 1, load: { kind: 'exthdr', op, type, offset: 0, flags: 1 }, syms: BOOLEAN };
}

/** The field an exthdr load reads (mask: the bit mask applied after it), for rendering. */
export function exthdrFieldAt(load: { op?: number; type: number; offset: number; len: number; flags?: number },
  mask: bigint | undefined, fieldMask: (f: Field) => bigint | undefined): Field | undefined {
  const op = load.op ?? 0;
  const present = ((load.flags ?? 0) & 1) !== 0;
  if ((load.flags ?? 0) & ~1) return undefined;
  // the headers of this type, by name (several TCP option names share sack's kind)
  const names: [string, Record<string, F>][] = op === OP_TCPOPT ? Object.entries(TCP_OPTIONS).filter(([, o]) => o.kind === load.type).map(([n, o]) => [n, o.fields])
    : op === OP_IPV6 ? Object.entries(IPV6_EXTHDRS).filter(([, h]) => h.type === load.type).map(([n, h]) => [n, h.fields])
      : op === OP_SCTP ? Object.entries(SCTP_CHUNKS).filter(([, c]) => c.type === load.type).map(([n, c]) => [n, c.fields]) : [];
  const mk = (name: string, fld: string | undefined) => (op === OP_TCPOPT ? tcpOptionField(name, fld)
    : op === OP_SCTP ? sctpChunkField(name, fld) : ipv6ExthdrField(name, fld));
  if (present) {
    if (load.offset !== 0 || load.len !== 1 || mask !== undefined) return undefined;
    if (names.length) return mk(names[0]![0], undefined);
    return op === OP_TCPOPT ? tcpOptionField(String(load.type), undefined) : undefined;
  }
  if (op === OP_IPV6 && load.type === 43 && load.len === 16 && load.offset >= 8 && (load.offset - 8) % 16 === 0 && mask === undefined) {
    return srhSidField((load.offset - 8) / 16 + 1);
  }
  for (const [name, table] of names) {
    for (const fld of Object.keys(table)) {
      const f = mk(name, fld)!;
      if ((f.load as { offset: number }).offset !== load.offset || f.len !== load.len) continue;
      const m = fieldMask(f);
      if (m === undefined ? mask === undefined : mask === m) return f;
    }
  }
  if (op === OP_TCPOPT && mask === undefined) return tcpOptionRaw(load.type, load.offset * 8, load.len * 8);
  return undefined;
}
