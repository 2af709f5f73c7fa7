/**
 * The payload statement (`ip ttl set 23`, `tcp dport set 80`, `ip dscp set
 * af23`) as nft 1.0.6 compiles it (evaluate.c stmt_evaluate_payload,
 * netlink_gen_payload_stmt): a field that is not whole bytes, or an odd-sized
 * one in a header with a checksum, is rewritten read-modify-write over the
 * bytes around it (widened to 16 bits for the checksum), and every store says
 * how to fix the header's checksum and whether the field is part of the
 * transport pseudo-header.
 */
import type { Expr, Hex } from '../netlink/expr.js';
import { bigToHex, hexToBig } from './bytes.js';
import { F, portField, type Field } from './fields.js';
import { headerField, headerFieldNames, type Proto } from './headers.js';

/** Headers with a checksum nft keeps right: NFT_PAYLOAD_CSUM_INET (1) or _SCTP (2), and its byte offset. */
const CSUM: Partial<Record<Proto, [number, number]>> = {
  ip: [1, 10], icmp: [1, 2], igmp: [1, 2], udp: [1, 6], tcp: [1, 16], sctp: [2, 8], icmpv6: [1, 2],
};
/** Fields in the transport checksum's pseudo-header. */
const PSEUDO = new Set(['ip saddr', 'ip daddr', 'ip protocol', 'ip length', 'ip6 saddr', 'ip6 daddr', 'ip6 nexthdr', 'ip6 length']);
const L4PROTO: Record<number, Proto> = { 2: 'igmp', 6: 'tcp', 17: 'udp', 136: 'udplite', 132: 'sctp', 33: 'dccp', 51: 'ah', 50: 'esp', 108: 'comp', 1: 'icmp', 58: 'icmpv6' };

function protoOf(f: Field): Proto | undefined {
  if (f.l3 && f.load.kind === 'payload' && f.load.base === 'network') return f.l3;
  if (f.l4 !== undefined && f.load.kind === 'payload') return L4PROTO[f.l4];
  return undefined;
}

export interface StoreShape {
  offset: number;
  len: number;
  /** The bits kept by a read-modify-write (absent: a plain store of the value). */
  keep?: bigint;
  shift: number;
  csumType: number;
  csumOffset: number;
  csumFlags: number;
}

/** How nft stores into the field, or undefined when the field cannot be set. */
export function storeShape(f: Field): StoreShape | undefined {
  const proto = protoOf(f);
  if (!proto || f.load.kind !== 'payload') return undefined;
  const [csumType, csumOffset] = CSUM[proto] ?? [0, 0];
  const needCsum = csumType !== 0;
  const bits = f.width ?? f.len * 8;
  const bitOff = f.load.offset * 8 + (f.len * 8 - bits - (f.shift ?? 0));
  const base = { csumType, csumOffset, csumFlags: PSEUDO.has(f.name) ? 1 : 0 };
  const adjust = bitOff % 8 !== 0 || bits % 8 !== 0;
  if (!adjust && (!needCsum || ((bits / 8) & 1) === 0)) return { offset: bitOff / 8, len: bits / 8, shift: 0, ...base };
  let byteOff = Math.floor(bitOff / 8);
  // expr_offset_shift
  const newOff = bitOff % 8;
  let shift = Math.ceil(bits / 8) * 8 - (newOff + bits);
  let extra = 0;
  while (shift < 0) { shift += 8; extra += 8; }
  let size = Math.ceil((bits + extra) / 8);
  if (needCsum && (size & 1)) {
    size++;
    if (byteOff & 1) byteOff--;
    else shift += 8;
  }
  const all = (1n << BigInt(size * 8)) - 1n;
  const keep = all ^ (((1n << BigInt(bits)) - 1n) << BigInt(shift));
  return { offset: byteOff, len: size, keep, shift, ...base };
}

/** The expressions of `FIELD set VALUE` (value: the field's bytes as a match would compare them). */
export function payloadSetExprs(f: Field, value: Hex): Expr[] | undefined {
  const s = storeShape(f);
  if (!s || f.load.kind !== 'payload') return undefined;
  const store: Expr = {
    kind: 'payload', base: f.load.base, offset: s.offset, len: s.len, sreg: 1,
    csumType: s.csumType, csumOffset: s.csumOffset, csumFlags: s.csumFlags,
  };
  if (s.keep === undefined) return [{ kind: 'immediate', dreg: 1, data: value }, store];
  // the value as the field holds it (bit fields come shifted into their bytes): back to a number
  const v = hexToBig(value) >> BigInt(f.shift ?? 0);
  return [
    { kind: 'payload', base: f.load.base, offset: s.offset, len: s.len, dreg: 1 },
    { kind: 'bitwise', sreg: 1, dreg: 1, len: s.len, op: 'bool', mask: bigToHex(s.keep, s.len), xor: bigToHex(v << BigInt(s.shift), s.len) },
    store,
  ];
}

/** Every settable field of a header, for recognising a store when rendering. */
export function settableFields(proto: Proto): Field[] {
  const out: Field[] = [];
  if (proto === 'ip') out.push(F.ipSaddr, F.ipDaddr, F.ipProtocol);
  else if (proto === 'ip6') out.push(F.ip6Saddr, F.ip6Daddr, F.ip6Nexthdr);
  else if (['tcp', 'udp', 'udplite', 'sctp', 'dccp'].includes(proto)) out.push(portField(proto, 'sport'), portField(proto, 'dport'));
  for (const n of headerFieldNames(proto)) {
    const f = headerField(proto, n);
    if (f && !f.special) out.push(f);
  }
  return out;
}

/** The field and value of a store nft wrote for `FIELD set VALUE`, if `exprs` is exactly that. */
export function matchPayloadSet(proto: Proto, store: Extract<Expr, { kind: 'payload' }>, value: Hex,
  rmw: { keep: Hex } | undefined): { field: Field; value: Hex } | undefined {
  for (const f of settableFields(proto)) {
    const s = storeShape(f);
    if (!s || f.load.kind !== 'payload' || f.load.base !== store.base || s.offset !== store.offset || s.len !== store.len) continue;
    if ((store.csumType ?? 0) !== s.csumType || (store.csumOffset ?? 0) !== s.csumOffset || (store.csumFlags ?? 0) !== s.csumFlags) continue;
    if (rmw === undefined && s.keep === undefined) return value.length === f.len * 2 ? { field: f, value } : undefined;
    if (rmw !== undefined && s.keep !== undefined && hexToBig(rmw.keep) === s.keep) {
      const x = hexToBig(value);
      if ((x & s.keep) !== 0n) return undefined;
      return { field: f, value: bigToHex((x >> BigInt(s.shift)) << BigInt(f.shift ?? 0), f.len) };
    }
  }
  return undefined;
}
