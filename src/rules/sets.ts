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
import { bigToHex, hexToBig, prefixMask } from './bytes.js';
import type { Field } from './fields.js';
import { ELEM_UDATA_INTERVAL_OPEN, setUserdata } from './udata.js';

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
      return { lo: hexToBig(e.prefix + '00'.repeat(pad)), hi: hexToBig(e.prefix + 'ff'.repeat(pad)), at: e };
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
  const interval = elems.some((e) => e.k !== 'value');
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
        userdata: setUserdata(desc.byteorder, false, desc.key), elements,
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
      userdata: setUserdata(desc.byteorder, true, desc.key), elements,
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
