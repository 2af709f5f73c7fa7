/**
 * Anonymous sets the way nft 1.0.6 builds them: a hash set (ANONYMOUS |
 * CONSTANT) for plain values, an interval set (| INTERVAL) as soon as one
 * element is a prefix, a range or an interface wildcard. Interval sets hold
 * start elements and INTERVAL_END elements one past each interval, a leading
 * zero END element when the first interval does not start at zero, and an
 * "open" start (userdata flag, no end element) for an interval that runs to
 * the largest key. NFTA_SET_DESC_SIZE counts two per interval plus the
 * leading zero.
 */
import { SET_ELEM_F, SET_F, type NftSet, type SetElement } from '../netlink/objects.js';
import type { Elem } from './ast.js';
import type { Hex } from '../netlink/expr.js';
import { HOST_LE, bigToHex, hexToBig, prefixMask, u32Host, zeroHex } from './bytes.js';
import type { Field } from './fields.js';
import { ELEM_UDATA_INTERVAL_OPEN, setUserdata, tlv } from './udata.js';
import { internHex } from './intern.js';

export type Fail = (at: { col: number; raw: string }, expected: string, reason: string) => never;

interface Span { lo: bigint; hi: bigint; at: Elem }

function span(e: Elem, len: number): Span {
  switch (e.k) {
    case 'value': { const v = hexToBig(e.hex); return { lo: v, hi: v, at: e }; }
    case 'range': return { lo: hexToBig(e.lo), hi: hexToBig(e.hi), at: e };
    case 'prefix': {
      const mask = hexToBig(prefixMask(e.plen, len));
      const all = (1n << BigInt(len * 8)) - 1n;
      const lo = hexToBig(e.hex) & mask;
      return { lo, hi: lo | (all ^ mask), at: e };
    }
    case 'wildcard': {
      const pad = len - e.prefix.length / 2;
      return { lo: hexToBig(e.prefix + zeroHex(pad)), hi: hexToBig(e.prefix + 'ff'.repeat(pad)), at: e };
    }
  }
}

export interface BuiltSet {
  set: NftSet;
  interval: boolean;
}

/**
 * The anonymous set for `field { elems }`, normalised as nft 1.0.6 does it:
 * a duplicate value is kept once, and overlapping or adjacent intervals are
 * merged into one (which may leave a single interval: nft then lists
 * `{ 10.1.0.0-10.2.255.255 }`, and still installs a set).
 */
export function buildAnonymousSet(field: Field, elems: Elem[], ctx: { family: NftSet['family']; table: string },
  id: number, fail: Fail): BuiltSet {
  const desc = field.set!;
  const len = field.len;
  // A full-length prefix is a one-address interval to nft: the set is an interval set.
  const interval = elems.some((e) => e.k !== 'value' || e.full === true);
  const base: Omit<NftSet, 'flags' | 'elements' | 'size' | 'userdata'> = {
    family: ctx.family, table: ctx.table, name: '__set%d', id, keyType: desc.keyType, keyLen: len,
  };
  if (!interval) {
    const seen = new Set<string>();
    const elements: SetElement[] = [];
    for (const e of elems) {
      const hex = (e as { hex: string }).hex;
      if (seen.has(hex)) continue;
      seen.add(hex);
      elements.push({ key: hex, flags: 0 });
    }
    return {
      interval,
      set: {
        // nft sizes a hashed set by the elements as written, duplicates included.
        ...base, flags: SET_F.ANONYMOUS | SET_F.CONSTANT, size: elems.length,
        userdata: internHex(setUserdata(desc.byteorder, false, desc.key)), elements,
      },
    };
  }
  const spans = elems.map((e) => span(e, len)).sort((a, b) => (a.lo < b.lo ? -1 : a.lo > b.lo ? 1 : 0));
  const merged: Span[] = [];
  for (const s of spans) {
    const last = merged[merged.length - 1];
    // nft merges overlapping and adjacent intervals of an anonymous set.
    if (last && s.lo <= last.hi + 1n) {
      if (s.hi > last.hi) last.hi = s.hi;
    } else {
      merged.push({ ...s });
    }
  }
  const max = (1n << BigInt(len * 8)) - 1n;
  const elements: SetElement[] = [];
  if (merged[0]!.lo !== 0n) elements.push({ key: bigToHex(0n, len), flags: SET_ELEM_F.INTERVAL_END });
  for (const m of merged) {
    if (m.hi === max) {
      elements.push({ key: bigToHex(m.lo, len), flags: 0, userdata: ELEM_UDATA_INTERVAL_OPEN });
    } else {
      elements.push({ key: bigToHex(m.lo, len), flags: 0 });
      elements.push({ key: bigToHex(m.hi + 1n, len), flags: SET_ELEM_F.INTERVAL_END });
    }
  }
  const size = merged.length * 2 + (merged[0]!.lo !== 0n ? 1 : 0);
  return {
    interval,
    set: {
      ...base, flags: SET_F.ANONYMOUS | SET_F.CONSTANT | SET_F.INTERVAL, size,
      userdata: internHex(setUserdata(desc.byteorder, true, desc.key)), elements,
    },
  };
}

/** Inclusive intervals of an interval set's elements, or undefined if they are not nft-shaped. */
export function setIntervals(keyLen: number, elements: readonly SetElement[]): { lo: string; hi: string }[] | undefined {
  const els = [...elements].filter((e) => e.key !== undefined);
  if (els.some((e) => ((e.flags ?? 0) & ~SET_ELEM_F.INTERVAL_END) !== 0 || e.key!.length !== keyLen * 2)) return undefined;
  els.sort((a, b) => (a.key! < b.key! ? -1 : a.key! > b.key! ? 1 : 0));
  const out: { lo: string; hi: string }[] = [];
  let start: string | undefined;
  for (const e of els) {
    const end = ((e.flags ?? 0) & SET_ELEM_F.INTERVAL_END) !== 0;
    if (end) {
      if (start === undefined) {
        if (out.length === 0 && hexToBig(e.key!) === 0n) continue; // the leading zero element
        return undefined;
      }
      out.push({ lo: start, hi: bigToHex(hexToBig(e.key!) - 1n, keyLen) });
      start = undefined;
    } else {
      if (start !== undefined) return undefined;
      start = e.key!;
    }
  }
  if (start !== undefined) out.push({ lo: start, hi: 'ff'.repeat(keyLen) });
  return out;
}

// ---- concatenated keys and maps, as rules use them -----------------------------------

/** One part of a set key: its datatype id, length, byte order and nft's typeof description. */
export interface KeyPartDesc {
  keyType: number;
  len: number;
  byteorder: number;
  /** The part's typeof TLVs (0: expression type, 1: its data), when nft writes one. */
  typeofTlvs?: Hex;
  /**
   * For a host-order part: the byteorder conversion nft puts after its load when the key is a
   * concatenated interval (len, size), whose element bytes are then in network order.
   */
  hton?: { len: number; size: number };
  /** A host-order integer (not a string such as an interface name): concatenated intervals convert it. */
  hostInt?: boolean;
}

/** A set key: one part, or a concatenation (type ids joined 6 bits apart, each part padded to 4 bytes). */
export interface KeyDesc {
  parts: KeyPartDesc[];
  keyType: number;
  keyLen: number;
  concat: boolean;
}

/** NFT_DATA_VERDICT as a set data type. */
export const DATA_VERDICT = 0xffffff00;
/** nft's EXPR_CONCAT and EXPR_VERDICT expression types in typeof userdata. */
const EXPR_CONCAT = 13, EXPR_VERDICT = 1;

/** What an anonymous map maps to. */
export type MapDataDesc =
  | { kind: 'verdict' }
  /** An object map (NFT_SET_OBJECT): the elements name objects of this NFT_OBJECT_* type. */
  | { kind: 'object'; objType: number }
  | { kind: 'value'; dataType: number; dataLen: number; concat: boolean; byteorder: number;
    /** The data are ranges, low then high (nft's interval data: `… : 10.0.0.1-10.0.0.9`). */
    interval?: boolean };

export interface KeyedElem {
  at: { col: number; raw: string };
  /** One element per key part. */
  parts: Elem[];
  /** The element's data (maps only): a verdict, or data bytes. */
  data?: { verdict?: SetElement['verdict']; chain?: string; data?: Hex; objref?: string };
  /** The catch-all element (`*`): no key. */
  catchall?: true;
}

const pad4 = (n: number) => (n + 3) & ~3;

/** Host-order bytes in network order (the byteorder expression's hton). */
export function hostToNet(h: Hex): Hex {
  if (!HOST_LE) return h;
  let r = '';
  for (let i = h.length - 2; i >= 0; i -= 2) r += h.substr(i, 2);
  return r;
}

export function keyDesc(parts: KeyPartDesc[]): KeyDesc {
  if (parts.length === 1) return { parts, keyType: parts[0]!.keyType, keyLen: parts[0]!.len, concat: false };
  let keyType = 0;
  for (const p of parts) keyType = keyType * 64 + p.keyType;
  return { parts, keyType, keyLen: parts.reduce((a, p) => a + pad4(p.len), 0), concat: true };
}

/** Concatenated values: each part padded with zero bytes to a multiple of 4. */
export function concatHex(values: readonly Hex[], concat: boolean): Hex {
  if (!concat) return values[0]!;
  return values.map((v) => v + zeroHex(pad4(v.length / 2) - v.length / 2)).join('');
}

function keyTypeofTlv(key: KeyDesc, converted = false): Hex | undefined {
  if (!key.concat) return key.parts[0]!.typeofTlvs;
  // nft cannot describe a part wrapped in a byteorder conversion: it describes the parts before it
  const parts = converted ? key.parts.slice(0, Math.max(0, key.parts.findIndex((p) => p.hton))) : key.parts;
  if (parts.some((p) => p.typeofTlvs === undefined)) return undefined;
  return tlv(0, u32Host(EXPR_CONCAT)) + tlv(1, parts.map((p, i) => tlv(i, p.typeofTlvs!)).join(''));
}

/** The userdata nft 1.0.6 writes on a meter's set: the key byte order only (0 for a concatenation). */
export function meterUserdata(key: KeyDesc): Hex {
  return tlv(0, u32Host(key.concat ? 0 : key.parts[0]!.byteorder));
}

/**
 * The userdata nft 1.0.6 writes on an anonymous set or map: key byte order (0 for a
 * concatenation), for maps the data byte order, the merge flag on interval sets (not maps),
 * the key's typeof (sets; maps only for a concatenated key), a verdict map's data typeof, and
 * on maps the data-interval flag (0).
 */
function keyedUserdata(key: KeyDesc, map: MapDataDesc | undefined, interval: boolean): Hex {
  const keyOrder = key.concat ? 0 : key.parts[0]!.byteorder;
  const typeofKey = keyTypeofTlv(key, !map && interval && key.concat && key.parts.some((p) => p.hton));
  if (!map) {
    return tlv(0, u32Host(keyOrder)) + (interval ? tlv(2, u32Host(1)) : '')
      + (typeofKey !== undefined ? tlv(3, typeofKey) : '');
  }
  // an object map has no data byte order
  const dataOrder = map.kind === 'object' ? undefined : map.kind === 'verdict' || map.concat ? 0 : map.byteorder;
  return tlv(0, u32Host(keyOrder)) + (dataOrder !== undefined ? tlv(1, u32Host(dataOrder)) : '')
    // (nft describes no key of an object map)
    + (key.concat && typeofKey !== undefined && map.kind !== 'object' ? tlv(3, typeofKey) : '')
    + (map.kind === 'verdict' ? tlv(4, tlv(0, u32Host(EXPR_VERDICT)) + tlv(1, '')) : '')
    + tlv(6, u32Host(map.kind === 'value' && map.interval ? 1 : 0));
}

function sameData(a: KeyedElem['data'], b: KeyedElem['data']): boolean {
  return a?.verdict === b?.verdict && a?.chain === b?.chain && a?.data === b?.data && a?.objref === b?.objref;
}

function withData(e: SetElement, d: KeyedElem['data']): SetElement {
  if (d?.verdict !== undefined) e.verdict = d.verdict;
  if (d?.chain !== undefined) e.chain = d.chain;
  if (d?.data !== undefined) e.data = d.data;
  if (d?.objref !== undefined) e.objref = d.objref;
  return e;
}

/**
 * An anonymous set keyed by a concatenation or a generator, or an anonymous map (`vmap { … }`,
 * `map { … }` in NAT), as nft 1.0.6 builds it. Hashed: one element per distinct key (the same
 * key twice with the same data is kept once; with different data it is refused, as the kernel
 * would), sized by the elements as written. A concatenation with a prefix, range or wildcard is an
 * interval+concat set of key/key-end elements; a one-part interval map holds start and END
 * elements like an interval set, but nft neither merges its intervals nor lets them overlap, and
 * an END that falls on the next start is left out.
 */
export function buildKeyedSet(key: KeyDesc, elems: readonly KeyedElem[], map: MapDataDesc | undefined,
  ctx: { family: NftSet['family']; table: string }, id: number, fail: Fail): NftSet {
  const interval = elems.some((e) => e.parts.some((p) => p.k !== 'value'));
  const star = elems.find((e) => e.catchall);
  if (star && interval && elems.some((e) => !e.catchall && e.parts.length > 1)) {
    fail(star.at, 'single keys, or one-part keys, with a catch-all element', "a catch-all element ('*') in a concatenated interval map is not supported");
  }
  const objmap = map?.kind === 'object';
  const base: NftSet = {
    family: ctx.family, table: ctx.table, name: objmap ? '__objmap%d' : map ? '__map%d' : '__set%d', id,
    flags: SET_F.ANONYMOUS | SET_F.CONSTANT | (objmap ? SET_F.OBJECT : map ? SET_F.MAP : 0), keyType: key.keyType, keyLen: key.keyLen,
    size: elems.length, userdata: internHex(keyedUserdata(key, map, interval)),
  };
  if (map?.kind === 'object') {
    base.objType = map.objType;
  } else if (map) {
    base.dataType = map.kind === 'verdict' ? DATA_VERDICT : map.dataType;
    base.dataLen = map.kind === 'verdict' ? 16 : map.dataLen;
  }
  const spans = elems.map((e) => e.parts.map((p, i) => span(p, key.parts[i]!.len)));
  if (!interval) {
    const seen = new Map<Hex, KeyedElem>();
    const elements: SetElement[] = [];
    elems.forEach((e, k) => {
      if (e.catchall) return;
      const hex = concatHex(spans[k]!.map((s, i) => bigToHex(s.lo, key.parts[i]!.len)), key.concat);
      const prev = seen.get(hex);
      if (prev) {
        if (!sameData(prev.data, e.data)) fail(e.at, 'each key once in a map', `'${e.at.raw}' is already in this map with other data`);
        return;
      }
      seen.set(hex, e);
      elements.push(withData({ key: hex, flags: 0 }, e.data));
    });
    if (star) elements.push(withData({ flags: SET_ELEM_F.CATCHALL }, star.data));
    // (not a spread copy of base: at kube-proxy's 10,000 such maps each copy got a hidden class of its own)
    base.elements = elements;
    return base;
  }
  if (key.concat) {
    // nft converts host-order parts (marks, …) of a concatenated interval key to network order,
    // with a byteorder expression in the rule and swapped element bytes: not done here
    const host = key.parts.findIndex((p) => p.hostInt && !p.hton);
    if (host >= 0) {
      fail(elems.find((e) => e.parts.some((x) => x.k !== 'value'))!.at, 'single values only, or no host-order part in the key',
        `ranges, prefixes and wildcards with a host byte order part (part ${host + 1}) in the key are not supported`);
    }
    // host-order parts are converted to network order in the rule, so their element bytes are too
    const netOrder = (v: bigint, i: number): Hex => {
      const h = bigToHex(v, key.parts[i]!.len);
      return key.parts[i]!.hton ? hostToNet(h) : h;
    };
    base.flags |= SET_F.INTERVAL | SET_F.CONCAT;
    // the kernel's concatenated interval sets need each part's length (NFTA_SET_DESC_CONCAT)
    base.fieldLen = key.parts.map((p) => p.len);
    const rows = spans.map((parts) => parts.map((s, i) => ({ lo: s.lo, hi: s.hi, len: key.parts[i]!.len })));
    // The kernel's concatenated interval sets (pipapo) refuse overlapping elements (EEXIST).
    if (rows.length <= 2048) {
      for (let a = 0; a < rows.length; a++) {
        for (let b = 0; b < a; b++) {
          if (rows[a]!.every((s, i) => s.lo <= rows[b]![i]!.hi && rows[b]![i]!.lo <= s.hi)) {
            fail(elems[a]!.at, 'elements that do not overlap', `'${elems[a]!.at.raw}' overlaps '${elems[b]!.at.raw}'`);
          }
        }
      }
    }
    const elements = rows.map((r, k) => withData({
      key: concatHex(r.map((s, i) => netOrder(s.lo, i)), true),
      keyEnd: concatHex(r.map((s, i) => netOrder(s.hi, i)), true),
      flags: 0,
    }, elems[k]!.data));
    base.elements = elements;
    return base;
  }
  // one part, intervals
  base.flags |= SET_F.INTERVAL;
  const len = key.keyLen;
  const part = key.parts[0]!;
  if (!map) {
    return fail(elems[0]!.at, 'single values', 'intervals in a set keyed by a number generator are not supported');
  }
  if (part.hostInt && !part.hton) {
    fail(elems.find((e) => e.parts[0]!.k !== 'value')!.at, 'single values', 'intervals of this host byte order key are not supported');
  }
  // a host-order integer key is converted to network order in the rule: its elements are too
  const net = (e: Elem): Elem => {
    if (!part.hton) return e;
    if (e.k === 'value') return { ...e, hex: hostToNet(e.hex) };
    if (e.k === 'range') return { ...e, lo: hostToNet(e.lo), hi: hostToNet(e.hi) };
    return e;
  };
  const order = elems.flatMap((e, k) => (e.catchall ? [] : [{ ...span(net(e.parts[0]!), len), k }]))
    .sort((x, y) => (x.lo < y.lo ? -1 : x.lo > y.lo ? 1 : 0));
  for (let i = 1; i < order.length; i++) {
    if (order[i]!.lo <= order[i - 1]!.hi) {
      fail(order[i]!.at, 'intervals that do not overlap', `conflicting intervals: '${order[i]!.at.raw}' and '${order[i - 1]!.at.raw}'`);
    }
  }
  const max = (1n << BigInt(len * 8)) - 1n;
  const elements: SetElement[] = [];
  if (order[0]!.lo !== 0n) elements.push({ key: bigToHex(0n, len), flags: SET_ELEM_F.INTERVAL_END });
  order.forEach((s, i) => {
    const start = withData({ key: bigToHex(s.lo, len), flags: 0 }, elems[s.k]!.data);
    if (s.hi === max) {
      start.userdata = ELEM_UDATA_INTERVAL_OPEN;
      elements.push(start);
      return;
    }
    elements.push(start);
    const next = order[i + 1];
    if (!next || next.lo !== s.hi + 1n) elements.push({ key: bigToHex(s.hi + 1n, len), flags: SET_ELEM_F.INTERVAL_END });
  });
  // the catch-all last, as nft sends it, and counted in the size
  if (star) elements.push(withData({ flags: SET_ELEM_F.CATCHALL }, star.data));
  base.size = order.length * 2 + (order[0]!.lo !== 0n ? 1 : 0) + (star ? 1 : 0);
  base.elements = elements;
  return base;
}
