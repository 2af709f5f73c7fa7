/**
 * The userdata TLVs nft 1.0.6 writes (libnftnl's nftnl_udata: u8 type, u8
 * length, value) on rules (the comment), on anonymous sets (key byte order,
 * merge flag, the key's "typeof" expression) and on interval elements (open
 * end), plus the xtables comment match iptables-nft uses for `-m comment`.
 */
import type { Hex, MatchExpr } from '../netlink/expr.js';
import { fromHex, toHex, u32Host, u8 } from './bytes.js';

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
export const EXPR_TYPE = { payload: 7, meta: 9, ct: 12 } as const;

/** How nft describes the expression a set is keyed by. */
export type KeyTypeof =
  | { expr: 'payload'; desc: number; tmpl: number }
  | { expr: 'meta'; key: number }
  | { expr: 'ct'; key: number };

/** Byte order values of nft's enum byteorder. */
export const BYTEORDER_HOST = 1;
export const BYTEORDER_BIG = 2;

export function setUserdata(byteorder: number, interval: boolean, key: KeyTypeof): Hex {
  let data: Hex;
  switch (key.expr) {
    case 'payload': data = tlv(0, u32Host(key.desc)) + tlv(1, u32Host(key.tmpl)); break;
    case 'meta': data = tlv(0, u32Host(key.key)); break;
    case 'ct': data = tlv(0, u32Host(key.key)) + tlv(1, u32Host(0xffffffff)); break;
  }
  return tlv(SET_KEYBYTEORDER, u32Host(byteorder))
    + (interval ? tlv(SET_MERGE_ELEMENTS, u32Host(1)) : '')
    + tlv(SET_KEY_TYPEOF, tlv(TYPEOF_EXPR, u32Host(EXPR_TYPE[key.expr])) + tlv(TYPEOF_DATA, data));
}

/** NFTNL_UDATA_SET_ELEM_FLAGS = NFTNL_SET_ELEM_F_INTERVAL_OPEN: nft marks an interval running to the end. */
export const ELEM_UDATA_INTERVAL_OPEN = tlv(1, u32Host(1));
