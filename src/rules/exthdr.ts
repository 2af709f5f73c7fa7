/**
 * Fields nft 1.0.6 reads with the exthdr expression: TCP options (tcpopt.c)
 * and IPv6 extension headers (exthdr.c), with `exists`/`missing` presence
 * tests. Offsets and widths are nft's template bits; values are big-endian.
 */
import type { Field } from './fields.js';
import type { Syms } from './headers.js';

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

/** [bit offset, bits, proto-typed?, syms] */
type F = [number, number, ('proto' | Syms)?];

export const TCP_OPTIONS: Record<string, { kind: number; fields: Record<string, F> }> = {
  eol: { kind: 0, fields: { kind: [0, 8] } },
  nop: { kind: 1, fields: { kind: [0, 8] } },
  maxseg: { kind: 2, fields: { kind: [0, 8], length: [8, 8], size: [16, 16] } },
  window: { kind: 3, fields: { kind: [0, 8], length: [8, 8], count: [16, 8] } },
  'sack-perm': { kind: 4, fields: { kind: [0, 8], length: [8, 8] } },
  sack: { kind: 5, fields: { kind: [0, 8], length: [8, 8], left: [16, 32], right: [48, 32] } },
  timestamp: { kind: 8, fields: { kind: [0, 8], length: [8, 8], tsval: [16, 32], tsecr: [48, 32] } },
  md5sig: { kind: 19, fields: { kind: [0, 8], length: [8, 8] } },
  mptcp: { kind: 30, fields: { kind: [0, 8], length: [8, 8], subtype: [16, 4] } },
  fastopen: { kind: 34, fields: { kind: [0, 8], length: [8, 8] } },
};

export const IPV6_EXTHDRS: Record<string, { type: number; fields: Record<string, F> }> = {
  hbh: { type: 0, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8] } },
  rt: { type: 43, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8], type: [16, 8], 'seg-left': [24, 8] } },
  frag: {
    type: 44,
    fields: {
      nexthdr: [0, 8, 'proto'], reserved: [8, 8], 'frag-off': [16, 13], reserved2: [29, 2], 'more-fragments': [31, 1],
      id: [32, 32],
    },
  },
  dst: { type: 60, fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8] } },
  mh: {
    type: 135,
    fields: { nexthdr: [0, 8, 'proto'], hdrlength: [8, 8], type: [16, 8, MH_TYPE], reserved: [24, 8], checksum: [32, 16] },
  },
};

const OP_IPV6 = 0, OP_TCPOPT = 1;

function make(name: string, op: 0 | 1, type: number, spec: F): Field {
  const [off, bits, t] = spec;
  const len = Math.ceil((off % 8 + bits) / 8);
  const f: Field = {
    name, type: t === 'proto' ? 'proto' : 'int', len,
    load: { kind: 'exthdr', op, type, offset: Math.floor(off / 8) },
    width: bits, shift: len * 8 - (off % 8) - bits,
  };
  if (t && t !== 'proto') f.syms = t;
  if (op === OP_IPV6) f.l3 = 'ip6';
  return f;
}

/** `tcp option NAME FIELD`, or `… exists|missing` (present: FIELD undefined). */
export function tcpOptionField(option: string, field: string | undefined): Field | undefined {
  const o = TCP_OPTIONS[option];
  if (!o) return undefined;
  if (field === undefined) return presence(`tcp option ${option}`, OP_TCPOPT, o.kind);
  const spec = o.fields[field];
  return spec ? make(`tcp option ${option} ${field}`, OP_TCPOPT, o.kind, spec) : undefined;
}

/** `hbh|rt|frag|dst|mh FIELD`, or (field undefined) `exthdr NAME` presence. */
export function ipv6ExthdrField(hdr: string, field: string | undefined): Field | undefined {
  const h = IPV6_EXTHDRS[hdr];
  if (!h) return undefined;
  if (field === undefined) {
    const p = presence(`exthdr ${hdr}`, OP_IPV6, h.type);
    p.l3 = 'ip6';
    return p;
  }
  const spec = h.fields[field];
  return spec ? make(`${hdr} ${field}`, OP_IPV6, h.type, spec) : undefined;
}

function presence(name: string, op: 0 | 1, type: number): Field {
  return { name, type: 'int', len: 1, load: { kind: 'exthdr', op, type, offset: 0, flags: 1 }, syms: BOOLEAN };
}

/** The field an exthdr load reads (mask: the bit mask applied after it), for rendering. */
export function exthdrFieldAt(load: { op?: number; type: number; offset: number; len: number; flags?: number },
  mask: bigint | undefined, fieldMask: (f: Field) => bigint | undefined): Field | undefined {
  const op = load.op ?? 0;
  const present = ((load.flags ?? 0) & 1) !== 0;
  if ((load.flags ?? 0) & ~1) return undefined;
  let table: Record<string, F> | undefined, name: string | undefined;
  if (op === OP_TCPOPT) {
    for (const [n, o] of Object.entries(TCP_OPTIONS)) if (o.kind === load.type) { table = o.fields; name = n; }
  } else if (op === OP_IPV6) {
    for (const [n, h] of Object.entries(IPV6_EXTHDRS)) if (h.type === load.type) { table = h.fields; name = n; }
  }
  if (!table || !name) return undefined;
  const mk = (fld: string | undefined) => (op === OP_TCPOPT ? tcpOptionField(name!, fld) : ipv6ExthdrField(name!, fld));
  if (present) return load.offset === 0 && load.len === 1 && mask === undefined ? mk(undefined) : undefined;
  for (const fld of Object.keys(table)) {
    const f = mk(fld)!;
    if ((f.load as { offset: number }).offset !== load.offset || f.len !== load.len) continue;
    const m = fieldMask(f);
    if (m === undefined ? mask === undefined : mask === m) return f;
  }
  return undefined;
}
