/**
 * The userdata TLVs nft 1.0.6 writes (libnftnl's nftnl_udata: u8 type, u8
 * length, value) on rules (the comment), on anonymous sets (key byte order,
 * merge flag, the key's "typeof" expression) and on interval elements (open
 * end), plus the xtables comment match iptables-nft uses for `-m comment`.
 */
import type { Hex, MatchExpr } from '../netlink/expr.js';
import { fromHex, readU32Host, toHex, u32Host, u8 } from './bytes.js';

export function tlv(type: number, value: Hex): Hex {
  return u8(type) + u8(value.length / 2) + value;
}

/** NFTNL_UDATA_RULE_COMMENT. */
export const UDATA_RULE_COMMENT = 0;
/** nft refuses longer comments ("comment too long, 128 characters maximum allowed"). */
export const COMMENT_MAX = 128;

/** The rule userdata nft writes for `comment "…"`: type 0, length, the bytes, a NUL. */
export function commentUserdata(comment: string): Hex {
  const b = Buffer.from(comment, 'utf8');
  if (b.length > COMMENT_MAX) throw new RangeError(`a comment holds at most ${COMMENT_MAX} bytes, not ${b.length}`);
  if (b.includes(0)) throw new RangeError('a comment cannot contain a NUL byte');
  return tlv(UDATA_RULE_COMMENT, toHex(b) + '00');
}

/** Splits userdata into its TLVs; undefined when it is not well formed. */
export function parseTlvs(h: Hex): { type: number; value: Hex }[] | undefined {
  const out: { type: number; value: Hex }[] = [];
  let i = 0;
  while (i < h.length) {
    if (i + 4 > h.length) return undefined;
    const type = parseInt(h.substr(i, 2), 16);
    const len = parseInt(h.substr(i + 2, 2), 16);
    const end = i + 4 + len * 2;
    if (end > h.length) return undefined;
    out.push({ type, value: h.slice(i + 4, end) });
    i = end;
  }
  return out;
}

/** The comment in rule userdata (NFTNL_UDATA_RULE_COMMENT), or undefined. */
export function commentOf(userdata?: Hex): string | undefined {
  if (!userdata) return undefined;
  const t = parseTlvs(userdata)?.find((x) => x.type === UDATA_RULE_COMMENT);
  if (!t) return undefined;
  return cString(t.value);
}

function cString(h: Hex): string {
  const b = Buffer.from(fromHex(h));
  const nul = b.indexOf(0);
  return b.subarray(0, nul < 0 ? b.length : nul).toString('utf8');
}

/**
 * The comment text of an xtables `comment` match (struct xt_comment_info:
 * char comment[256], NUL-terminated), as iptables-nft stores `-m comment`.
 */
export function decodeXtComment(info: Hex): string {
  return cString(info);
}

/** Comments of every xt `comment` match in a rule (Nomad/CNI tags live here, not in userdata). */
export function xtComments(rule: { exprs: readonly { kind: string }[] }): string[] {
  return rule.exprs
    .filter((e): e is MatchExpr => e.kind === 'match' && (e as MatchExpr).name === 'comment')
    .map((e) => decodeXtComment(e.info));
}

// ---- anonymous set userdata -----------------------------------------------

/** NFTNL_UDATA_SET_* */
const SET_KEYBYTEORDER = 0;
const SET_MERGE_ELEMENTS = 2;
const SET_KEY_TYPEOF = 3;
/** NFTNL_UDATA_SET_TYPEOF_EXPR / _DATA */
const TYPEOF_EXPR = 0;
const TYPEOF_DATA = 1;
/** nft's enum expr_types */
export const EXPR_TYPE = { payload: 7, exthdr: 8, meta: 9, osf: 11, ct: 12, numgen: 23, hash: 24, rt: 25, fib: 26, xfrm: 27 } as const;

/** How nft describes the expression a set is keyed by. */
export type KeyTypeof =
  | { expr: 'payload'; desc: number; tmpl: number; /** bits, for integer-typed fields (KEY_PAYLOAD_LEN) */ len?: number }
  | { expr: 'meta'; key: number }
  /** exthdr: desc (IPv6 header id, TCP option kind, SCTP chunk type), template index, op (0 IPv6: not written). */
  | { expr: 'exthdr'; desc: number; tmpl: number; op: number }
  | { expr: 'rt'; key: number }
  | { expr: 'osf' }
  /** xfrm (ipsec): key, secpath index, direction. */
  | { expr: 'xfrm'; key: number; spnum: number; dir: number }
  /** ct: key and direction (0 original, 1 reply; none: nft writes 0xffffffff). */
  | { expr: 'ct'; key: number; dir?: number }
  /** fib: result (NFT_FIB_RESULT_*) and flags (NFTA_FIB_F_*). */
  | { expr: 'fib'; result: number; flags: number }
  /** A raw payload (`@nh,8,8`): no header, its base, offset and length in bits. */
  | { expr: 'payload'; desc: 0; tmpl: 0; base: number; offset: number; bits: number }
  /** numgen: mode (0 inc, 1 random), modulus, offset. */
  | { expr: 'numgen'; mode: number; mod: number; offset: number }
  /** symhash (type 1; nft cannot read back its own jhash description): modulus, offset. */
  | { expr: 'hash'; type: 1; mod: number; offset: number };

/** Byte order values of nft's enum byteorder. */
export const BYTEORDER_HOST = 1;
export const BYTEORDER_BIG = 2;

/** The TLVs nft writes for an expression a set is keyed (or a map's data is) by: its expr type, then its data. */
export function typeofTlvs(key: KeyTypeof): Hex {
  let data: Hex;
  switch (key.expr) {
    case 'payload':
      data = 'base' in key
        ? tlv(0, u32Host(0)) + tlv(1, u32Host(0)) + tlv(2, u32Host(key.base)) + tlv(3, u32Host(key.offset)) + tlv(4, u32Host(key.bits))
        : tlv(0, u32Host(key.desc)) + tlv(1, u32Host(key.tmpl)) + (key.len !== undefined ? tlv(4, u32Host(key.len)) : '');
      break;
    case 'meta': case 'rt': data = tlv(0, u32Host(key.key)); break;
    case 'osf': data = ''; break;
    // nft's exthdr_expr_build_udata: the template, the op (not for IPv6 headers), the header
    case 'exthdr': data = tlv(1, u32Host(key.tmpl)) + (key.op ? tlv(2, u32Host(key.op)) : '') + tlv(0, u32Host(key.desc)); break;
    case 'xfrm': data = tlv(0, u32Host(key.key)) + tlv(1, u32Host(key.spnum)) + tlv(2, u32Host(key.dir)); break;
    case 'ct': data = tlv(0, u32Host(key.key)) + tlv(1, u32Host(key.dir ?? 0xffffffff)); break;
    case 'fib': data = tlv(0, u32Host(key.result)) + tlv(1, u32Host(key.flags)); break;
    case 'numgen': data = tlv(0, u32Host(key.mode)) + tlv(1, u32Host(key.mod)) + tlv(2, u32Host(key.offset)); break;
    // nft's hash_expr_build_udata: type, offset, modulus, seed, whether a seed was given
    case 'hash': data = tlv(0, u32Host(key.type)) + tlv(1, u32Host(key.offset)) + tlv(2, u32Host(key.mod)) + tlv(3, u32Host(0)) + tlv(4, u32Host(0)); break;
  }
  return tlv(TYPEOF_EXPR, u32Host(EXPR_TYPE[key.expr])) + tlv(TYPEOF_DATA, data);
}

/** `key` undefined: a set keyed by something nft does not describe (a masked bit field): byte order alone. */
export function setUserdata(byteorder: number, interval: boolean, key: KeyTypeof | undefined): Hex {
  return tlv(SET_KEYBYTEORDER, u32Host(byteorder))
    + (interval ? tlv(SET_MERGE_ELEMENTS, u32Host(1)) : '')
    + (key ? tlv(SET_KEY_TYPEOF, typeofTlvs(key)) : '');
}

// ---- named set userdata ------------------------------------------------------

const SET_DATABYTEORDER = 1;
const SET_DATA_TYPEOF = 4;
const SET_DATA_INTERVAL = 6;
const SET_COMMENT = 7;
/** nft's EXPR_VERDICT and EXPR_CONCAT */
const EXPR_VERDICT = 1;
const EXPR_CONCAT = 13;

/**
 * What a named set's key or data is declared by, as nft records it: nothing
 * for a plain `type`, an empty concatenation for a `type` of several parts,
 * the expressions of a `typeof`, an empty verdict for `typeof … : verdict`.
 */
export type SetTypeof =
  | { expr: 'none' }
  | { expr: 'concat'; parts: KeyTypeof[] }
  | { expr: 'verdict' }
  | { expr: 'one'; key: KeyTypeof };

function declTlvs(t: SetTypeof): Hex | undefined {
  switch (t.expr) {
    case 'none': return undefined;
    case 'one': return typeofTlvs(t.key);
    case 'verdict': return tlv(TYPEOF_EXPR, u32Host(EXPR_VERDICT)) + tlv(TYPEOF_DATA, '');
    case 'concat':
      return tlv(TYPEOF_EXPR, u32Host(EXPR_CONCAT))
        + tlv(TYPEOF_DATA, t.parts.map((p, i) => tlv(i, typeofTlvs(p))).join(''));
  }
}

export interface NamedSetUdata {
  keyByteorder: number;
  keyTypeof: SetTypeof;
  /** Maps only. */
  data?: { byteorder: number; typeof: SetTypeof };
  /** auto-merge */
  merge: boolean;
  comment?: string;
  /** An object map: nft writes its data-interval flag (0) but no data byteorder or typeof. */
  objectMap?: boolean;
}

/** A named set's userdata, in the order nft 1.0.6 writes it. */
export function namedSetUserdata(u: NamedSetUdata): Hex {
  let out = tlv(SET_KEYBYTEORDER, u32Host(u.keyByteorder));
  if (u.data) out += tlv(SET_DATABYTEORDER, u32Host(u.data.byteorder));
  if (u.merge) out += tlv(SET_MERGE_ELEMENTS, u32Host(1));
  const k = declTlvs(u.keyTypeof);
  if (k !== undefined) out += tlv(SET_KEY_TYPEOF, k);
  if (u.data) {
    const d = declTlvs(u.data.typeof);
    if (d !== undefined) out += tlv(SET_DATA_TYPEOF, d);
    out += tlv(SET_DATA_INTERVAL, u32Host(0));
  } else if (u.objectMap) {
    out += tlv(SET_DATA_INTERVAL, u32Host(0));
  }
  if (u.comment !== undefined) out += tlv(SET_COMMENT, toHex(Buffer.from(u.comment, 'utf8')) + '00');
  return out;
}

function readTypeof(value: Hex): SetTypeof | undefined {
  const t = parseTlvs(value);
  const etype = t?.find((x) => x.type === TYPEOF_EXPR);
  const data = t?.find((x) => x.type === TYPEOF_DATA);
  if (!etype || !data) return undefined;
  const et = readU32Host(etype.value);
  const one = (et2: number | undefined, d: Hex): KeyTypeof | undefined => {
    const f = parseTlvs(d);
    const u = (type: number) => { const x = f?.find((y) => y.type === type); return x && readU32Host(x.value); };
    if (et2 === EXPR_TYPE.osf) return f?.length === 0 ? { expr: 'osf' } : undefined;
    const v = u(0);
    if (v === undefined) return undefined;
    if (et2 === EXPR_TYPE.meta) return { expr: 'meta', key: v };
    if (et2 === EXPR_TYPE.ct) {
      const dir = u(1);
      return dir === undefined || dir === 0xffffffff ? { expr: 'ct', key: v } : { expr: 'ct', key: v, dir };
    }
    const w = u(1);
    if (et2 === EXPR_TYPE.numgen && w !== undefined && u(2) !== undefined) return { expr: 'numgen', mode: v, mod: w, offset: u(2)! };
    if (et2 === EXPR_TYPE.hash && v === 1 && w !== undefined && u(2) !== undefined && u(3) === 0 && u(4) === 0) {
      return { expr: 'hash', type: 1, mod: u(2)!, offset: w };
    }
    if (et2 === EXPR_TYPE.payload && w !== undefined) {
      // a raw payload: no header, its base, offset and bits
      if (v === 0 && w === 0 && u(2) !== undefined && u(3) !== undefined && u(4) !== undefined) {
        return { expr: 'payload', desc: 0, tmpl: 0, base: u(2)!, offset: u(3)!, bits: u(4)! };
      }
      // an integer-typed field's width (udp length, ip ttl)
      const bits = u(4);
      return bits !== undefined ? { expr: 'payload', desc: v, tmpl: w, len: bits } : { expr: 'payload', desc: v, tmpl: w };
    }
    return undefined;
  };
  if (et === EXPR_VERDICT) return { expr: 'verdict' };
  if (et === EXPR_CONCAT) {
    const parts: KeyTypeof[] = [];
    for (const p of parseTlvs(data.value) ?? []) {
      const inner = parseTlvs(p.value);
      const pe = inner?.find((x) => x.type === TYPEOF_EXPR);
      const pd = inner?.find((x) => x.type === TYPEOF_DATA);
      const k = pe && pd ? one(readU32Host(pe.value), pd.value) : undefined;
      if (!k) return undefined;
      parts.push(k);
    }
    return { expr: 'concat', parts };
  }
  const k = one(et, data.value);
  return k ? { expr: 'one', key: k } : undefined;
}

/** Reads a named set's userdata back; undefined when nft would not have written it so. */
export function parseNamedSetUserdata(h: Hex | undefined, map: boolean): NamedSetUdata | undefined {
  const t = parseTlvs(h ?? '');
  if (!t) return undefined;
  const get = (type: number) => t.find((x) => x.type === type)?.value;
  const kb = get(SET_KEYBYTEORDER);
  const out: NamedSetUdata = { keyByteorder: kb ? readU32Host(kb) ?? 0 : 0, keyTypeof: { expr: 'none' }, merge: false };
  const kt = get(SET_KEY_TYPEOF);
  if (kt !== undefined) {
    const r = readTypeof(kt);
    if (!r) return undefined;
    out.keyTypeof = r;
  }
  if (map) {
    const db = get(SET_DATABYTEORDER);
    const dt = get(SET_DATA_TYPEOF);
    const r = dt !== undefined ? readTypeof(dt) : { expr: 'none' as const };
    if (!r) return undefined;
    out.data = { byteorder: db ? readU32Host(db) ?? 0 : 0, typeof: r };
  }
  const m = get(SET_MERGE_ELEMENTS);
  out.merge = m !== undefined && readU32Host(m) === 1;
  const c = get(SET_COMMENT);
  if (c !== undefined) out.comment = cString(c);
  return out;
}

/** NFTNL_UDATA_SET_ELEM_COMMENT: an element's `comment "…"`. */
const ELEM_COMMENT = 0;

/** An element's userdata as nft writes it: its comment, then the open-interval flag. */
export function elementUserdata(comment: string | undefined, open: boolean): Hex | undefined {
  let out = '';
  if (comment !== undefined) out += tlv(ELEM_COMMENT, toHex(Buffer.from(comment, 'utf8')) + '00');
  if (open) out += ELEM_UDATA_INTERVAL_OPEN;
  return out === '' ? undefined : out;
}

/** The comment in an element's userdata, or undefined. */
export function elementComment(userdata?: Hex): string | undefined {
  const t = userdata ? parseTlvs(userdata)?.find((x) => x.type === ELEM_COMMENT) : undefined;
  return t ? cString(t.value) : undefined;
}

/** NFTNL_UDATA_SET_ELEM_FLAGS = NFTNL_SET_ELEM_F_INTERVAL_OPEN: nft marks an interval running to the end. */
export const ELEM_UDATA_INTERVAL_OPEN = tlv(1, u32Host(1));
