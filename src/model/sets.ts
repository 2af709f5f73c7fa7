/**
 * Named sets and maps of an owned table: their declarations (from YAML or
 * an nft file, both as nft's own words: `type ipv4_addr . inet_service`,
 * elements as nft writes them) built into the kernel objects nft 1.0.6
 * would create (key and data types, flags, size, userdata, and elements in
 * the kernel's representation: interval start and end elements, a leading
 * zero end, open intervals, concatenated ranges as key and key end); the
 * element diff the reconciler plans from; and the text `check` and `export`
 * print.
 */
import { internWord } from '../rules/intern.js';
import * as z from 'zod';
import type { Family, Hex, StatefulExpr, Verdict } from '../netlink/expr.js';
import { RuleSyntaxError } from '../base/errors.js';
import { statefulKey } from '../rules/stateful.js';
import { compileStatements } from '../rules/compile.js';
import { renderStatements, type InterfaceResolver } from '../rules/render.js';
import { OBJ_TYPE, SET_ELEM_F, SET_F, type NftSet, type ObjType, type SetElement } from '../netlink/objects.js';
import { bigToHex, hexToBig, prefixMask, zeroHex } from '../rules/bytes.js';
import {
  DATATYPES, NFT_DATA_VERDICT, VERDICT_DATA_LEN, BYTEORDER_NONE, datatypeById, keyTypeFromKernel, keyTypeName, keyTypeOf,
  padPart, splitKey, swapBytes, type Datatype, type KeyType,
} from '../rules/datatypes.js';
import { F, type Field } from '../rules/fields.js';
import { parseKeyPart } from '../rules/parser.js';
import { typeofOfPart } from '../rules/keyed.js';
import { L4_NUM, headerField, headerFieldNames, type Proto } from '../rules/headers.js';
import {
  elementComment, elementUserdata, namedSetUserdata, parseNamedSetUserdata, parseTlvs, type KeyTypeof, type SetTypeof,
} from '../rules/udata.js';

/** The flags a config may give a set (SET_SCHEMA's, and the config's check without zod). */
export const SET_FLAG_WORDS = ['constant', 'interval', 'timeout', 'dynamic'] as const;

/**
 * A set or map as the config writes it (YAML `sets:`/`maps:` entries, or an nft `set`/`map` block).
 * Built when a document is first checked against it (zod's schemas cost time and memory to make,
 * and a config without sets never needs this one).
 */
export const SET_SCHEMA = z.lazy(() => z.strictObject({
  name: z.string().min(1).max(255).regex(/^[A-Za-z0-9_.\-/]+$/, 'use letters, digits, _ . - and / only'),
  type: z.string().min(1).max(512).optional(),
  typeof: z.string().min(1).max(512).optional(),
  flags: z.array(z.enum(SET_FLAG_WORDS)).optional(),
  timeout: z.string().min(1).max(64).optional(),
  'gc-interval': z.string().min(1).max(64).optional(),
  size: z.number().int().min(1).max(0xffffffff).optional(),
  policy: z.enum(['performance', 'memory']).optional(),
  'auto-merge': z.boolean().optional(),
  comment: z.string().max(128).optional(),
  /** What every element gets, as nft lists it: `counter`, `limit rate 10/second`, `counter quota 100 mbytes`. */
  statements: z.string().min(1).max(512).optional(),
  elements: z.array(z.string().min(1).max(4096)).optional(),
}));
export type RawSet = z.infer<typeof SET_SCHEMA>;

/** The data side of a map. */
export type DataType = { kind: 'verdict' } | { kind: 'value'; type: KeyType } | { kind: 'object'; type: ObjType };

/** The data of an object map (`type inet_service : counter`): the objects' type, by the words nft 1.0.6 takes there. */
const OBJECT_DATA: Record<string, ObjType> = {
  counter: 'counter', quota: 'quota', limit: 'limit', secmark: 'secmark', synproxy: 'synproxy',
};

export interface SetConfig {
  name: string;
  map: boolean;
  /** The definition to create (no handle, no elements); family and table filled in. */
  set: NftSet;
  /** The elements, in the kernel's representation. */
  elements: SetElement[];
  key: KeyType;
  data?: DataType;
  /** The declaration as written, normalised: what `check` prints for `add set`. */
  decl: RawSet;
}

/** Where a declaration is wrong: the key of the field (or element index) and, inside an element's text, a column. */
export type SetFail = (where: (string | number)[], reason: string, innerColumn?: number) => void;

class ElementError extends Error {
  constructor(readonly column: number, message: string) {
    super(message);
  }
}

// ---- nft time values --------------------------------------------------------

const TIME_UNITS: [string, number][] = [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]];

/** nft's time: `1d2h3m4s5ms`, or a bare number of seconds. Undefined if not one. */
export function parseNftTime(s: string): number | undefined {
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const re = /(\d+)(ms|d|h|m|s)/gy;
  let total = 0;
  let at = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * TIME_UNITS.find(([u]) => u === m![2])![1];
    at = re.lastIndex;
  }
  return at === s.length && s.length > 0 && Number.isSafeInteger(total) ? total : undefined;
}

/** A time as nft prints it: `1h`, `59m59s968ms`. */
export function formatNftTime(ms: number): string {
  if (ms === 0) return '0s';
  let out = '';
  let rest = ms;
  for (const [u, n] of TIME_UNITS) {
    const q = Math.floor(rest / n);
    if (q > 0) out += `${q}${u}`;
    rest -= q * n;
  }
  return out;
}

// ---- types -----------------------------------------------------------------

/** Fields a `typeof` may name, by nft's spelling (and `mark` for `meta mark` and friends). */
function typeofField(name: string): Field | undefined {
  const all = Object.values(F) as Field[];
  const f = all.find((x) => x.name === name && x.set) ?? all.find((x) => x.set && x.name === `meta ${name}`);
  if (f) return f;
  // a header field (tcp flags, ...) whose values a datatype here holds
  const [proto, ...rest] = name.split(' ');
  const h = proto && proto in L4_NUM || proto === 'ip' || proto === 'ip6' ? headerField(proto as Proto, rest.join(' ')) : undefined;
  return h?.set && datatypeById(h.set.keyType, h.len) && !h.special ? h : undefined;
}

/** Every field a typeof may name, for the way back from a set's userdata (export). */
function typeofFields(): Field[] {
  const headers = (['ip', 'ip6', ...Object.keys(L4_NUM)] as Proto[]).flatMap((p) => headerFieldNames(p).map((n) => typeofField(`${p} ${n}`)));
  return [...(Object.values(F) as Field[]).filter((f) => f.set), ...headers.filter((f): f is Field => f !== undefined)];
}

function parseTypeName(text: string, col: number): Datatype {
  const t = DATATYPES.get(text);
  if (!t) {
    throw new ElementError(col, `unknown datatype ${text} (nfkeeper knows ${[...DATATYPES.keys()].join(', ')} and verdict)`);
  }
  return t;
}

/** Words of a type expression with their columns (1-based). */
function words(text: string): { w: string; col: number }[] {
  const out: { w: string; col: number }[] = [];
  const re = /"[^"]*"|[^\s]+/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) !== null) out.push({ w: m[0], col: m.index + 1 });
  return out;
}

interface Side { type: KeyType; typeof: SetTypeof }

/** `ipv4_addr . inet_service` into its parts. */
function typeSide(ws: { w: string; col: number }[]): Side {
  const parts: Datatype[] = [];
  for (let i = 0; i < ws.length; i++) {
    if (i % 2 === 1) {
      if (ws[i]!.w !== '.') throw new ElementError(ws[i]!.col, `expected '.' between the parts of a concatenated type, found '${ws[i]!.w}'`);
      continue;
    }
    parts.push(parseTypeName(ws[i]!.w, ws[i]!.col));
  }
  if (parts.length === 0 || ws.length % 2 === 0) throw new ElementError(ws[ws.length - 1]?.col ?? 1, 'a type is missing after the last \'.\'');
  const type = keyTypeOf(parts);
  return { type, typeof: parts.length > 1 ? { expr: 'concat', parts: [] } : { expr: 'none' } };
}

/** A typeof part the rule language's key grammar reads (parseKeyPart), with its datatype; undefined if it is none. */
function ruleTypeof(text: string, col: number): { type: Datatype; key: KeyTypeof } | undefined {
  let part;
  try {
    part = parseKeyPart(text);
  } catch (e) {
    if (e instanceof RuleSyntaxError) return undefined;
    throw e;
  }
  const t = typeofOfPart(part);
  if (typeof t === 'string') throw new ElementError(col, `typeof ${text}: ${t}`);
  const type = datatypeById(t.keyType, t.len, t.byteorder);
  return type && type.len === t.len ? { type, key: t.key } : undefined;
}

/** The ct keys and directions, numgen and symhash a kernel set's typeof may name (export), to find its words by. */
const CT_TYPEOF_KEYS = ['zone', 'packets', 'bytes', 'avgpkt', 'expiration', 'l3proto', 'protocol', 'proto-src', 'proto-dst', 'id', 'secmark', 'direction'];

/** The words of a typeof part that `ruleTypeof` reads back to `k`, for the ones typeofFields does not name. */
function typeofWords(k: KeyTypeof): string | undefined {
  const candidates: string[] = [];
  switch (k.expr) {
    case 'ct': for (const w of CT_TYPEOF_KEYS) candidates.push(...['', 'original ', 'reply '].map((d) => `ct ${d}${w}`)); break;
    case 'osf': candidates.push('osf name'); break;
    case 'payload':
      if ('base' in k) candidates.push(`@${['', 'll', 'nh', 'th', 'ih'][k.base] ?? '?'},${k.offset},${k.bits}`);
      break;
    case 'numgen': candidates.push(`numgen ${k.mode === 0 ? 'inc' : 'random'} mod ${k.mod}${k.offset ? ` offset ${k.offset}` : ''}`); break;
    case 'hash': candidates.push(`symhash mod ${k.mod}${k.offset ? ` offset ${k.offset}` : ''}`); break;
    default: break;
  }
  const want = JSON.stringify(k);
  return candidates.find((c) => {
    try {
      const r = ruleTypeof(c, 1);
      return r !== undefined && JSON.stringify(r.key) === want;
    } catch {
      return false;
    }
  });
}

/** `ip daddr . tcp dport`: the fields' types and nft's description of them. */
function typeofSide(ws: { w: string; col: number }[]): Side {
  const groups: { w: string; col: number }[][] = [[]];
  for (const x of ws) {
    if (x.w === '.') groups.push([]);
    else groups[groups.length - 1]!.push(x);
  }
  const parts: Datatype[] = [];
  const descs: KeyTypeof[] = [];
  for (const g of groups) {
    if (g.length === 0) throw new ElementError(ws[ws.length - 1]?.col ?? 1, "an expression is missing around '.'");
    const name = g.map((x) => x.w).join(' ');
    const f = typeofField(name);
    const dt = f?.set ? datatypeById(f.set.keyType, f.len) : undefined;
    if (f && dt && dt.len === f.len && f.set?.key) {
      parts.push(dt);
      descs.push(f.set.key);
      continue;
    }
    // any other key the rule language describes as nft does (ct zone, osf name, @ih,0,32, numgen, symhash)
    const other = ruleTypeof(name, g[0]!.col);
    if (!other) {
      throw new ElementError(g[0]!.col, `typeof ${name}: not an expression nfkeeper can key a set by (use type, or one of ${(Object.values(F) as Field[]).filter((x) => x.set).map((x) => x.name).join(', ')}, a ct key, osf name, a raw payload of 1, 2 or 4 bytes, numgen or symhash)`);
    }
    parts.push(other.type);
    descs.push(other.key);
  }
  const type = keyTypeOf(parts);
  return { type, typeof: parts.length > 1 ? { expr: 'concat', parts: descs } : { expr: 'one', key: descs[0]! } };
}

// ---- elements ----------------------------------------------------------------

interface Part { lo: Hex; hi: Hex; single: boolean }

interface ParsedElement {
  parts: Part[];
  /** `*`: the catch-all element (NFT_SET_ELEM_CATCHALL), no key: what no other key matches. */
  catchall?: true;
  data?: { hex?: Hex; verdict?: Verdict; chain?: string; objref?: string };
  comment?: string;
  timeout?: number;
  expires?: number;
  /** `counter packets 0 bytes 0`, `limit rate 10/second`: the element's own statements. */
  exprs?: StatefulExpr[];
}

/** Statements as expressions, a refusal's column moved to `col` (where they start in the element or declaration). */
function statementsAt(text: string, col: number, family: Family): StatefulExpr[] {
  try {
    return compileStatements(text, family);
  } catch (e) {
    if (!(e instanceof RuleSyntaxError)) throw e;
    // (the column is the file's: the rule text's own is left out)
    throw new ElementError(col + e.column - 1, e.message.split('\n')[0]!.replace(/ at column \d+, '[^']*'| at the end of the rule/, ''));
  }
}

const STATEMENT_WORDS = new Set(['counter', 'limit', 'quota', 'ct']);
const OPTION_WORDS = new Set(['comment', 'timeout', 'expires', ':']);

function tokens(text: string): { w: string; col: number; quoted: boolean }[] {
  const out: { w: string; col: number; quoted: boolean }[] = [];
  const re = /"([^"]*)"|[^\s]+/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) !== null) {
    if (m[1] !== undefined) out.push({ w: m[0], col: m.index + 1, quoted: true });
    else out.push({ w: m[0], col: m.index + 1, quoted: false });
  }
  return out;
}

function parsePart(dt: Datatype, tok: { w: string; col: number; quoted: boolean }, interval: boolean, interfaces: InterfaceResolver | undefined): Part {
  // The common case first: one plain value (no closures on this path: it runs once per element part).
  if (dt.name !== 'ifname') {
    const whole = dt.parse(tok.w);
    if (whole !== undefined) return { lo: whole, hi: whole, single: true };
  }
  const bad = (why?: string) => new ElementError(tok.col, `'${tok.w}' is not ${dt.expected}${why ? `: ${why}` : ''}`);
  const needInterval = (what: string) => {
    if (!interval) throw new ElementError(tok.col, `You must add 'flags interval' to your set declaration if you want to add ${what} elements`);
  };
  if (dt.name === 'ifname') {
    // nft: a trailing `*` is a wildcard, `\*` a literal star.
    const name = tok.quoted ? tok.w.slice(1, -1) : tok.w;
    if (/[^\\]\*$|^\*$/.test(name)) {
      needInterval('wildcard');
      const stem = Buffer.from(name.slice(0, -1).replace(/\\\*/g, '*'), 'utf8').toString('hex');
      const pad = dt.len - stem.length / 2;
      if (pad < 1 || stem === '') throw bad('too long');
      return { lo: stem + zeroHex(pad), hi: stem + 'ff'.repeat(pad), single: false };
    }
    const v = dt.parse('"' + name.replace(/\\\*/g, '*') + '"');
    if (v === undefined) throw bad();
    return { lo: v, hi: v, single: true };
  }
  if (dt.prefix && tok.w.includes('/')) {
    const [a, p] = tok.w.split('/') as [string, string];
    const addr = dt.parse(a);
    const plen = /^\d+$/.test(p ?? '') ? Number(p) : NaN;
    if (addr === undefined || !(plen >= 0 && plen <= dt.len * 8)) throw bad('a prefix is ADDRESS/LENGTH');
    needInterval('prefix');
    const mask = hexToBig(prefixMask(plen, dt.len));
    const all = (1n << BigInt(dt.len * 8)) - 1n;
    const lo = hexToBig(addr) & mask;
    return { lo: bigToHex(lo, dt.len), hi: bigToHex(lo | (all ^ mask), dt.len), single: false };
  }
  for (let i = dt.ranges ? tok.w.indexOf('-') : -1; i > 0; i = tok.w.indexOf('-', i + 1)) {
    const lo = dt.parse(tok.w.slice(0, i));
    const hi = dt.parse(tok.w.slice(i + 1));
    if (lo === undefined || hi === undefined) continue;
    needInterval('range');
    // Ranges compare as numbers in network order; host-order types (mark) are ordered by value.
    const lv = dt.hostInt ? hostBig(lo) : hexToBig(lo);
    const hv = dt.hostInt ? hostBig(hi) : hexToBig(hi);
    if (lv > hv) throw new ElementError(tok.col, `range ${tok.w} has a start above its end`);
    return { lo, hi, single: false };
  }
  if (dt.name === 'iface_index' && interfaces && /^"?[^\s"]+"?$/.test(tok.w)) {
    // An interface by name, resolved in the target namespace as nft resolves it when it loads the element.
    const name = tok.quoted ? tok.w.slice(1, -1) : tok.w;
    const index = interfaces.indexOf(name);
    if (index === undefined) throw new ElementError(tok.col, `interface '${name}' does not exist`);
    const v = dt.parse(String(index))!;
    return { lo: v, hi: v, single: true };
  }
  throw bad();
}

function hostBig(h: Hex): bigint {
  return hexToBig(h.match(/../g)!.reverse().join(''));
}

const VERDICTS = new Set(['accept', 'drop', 'continue', 'return', 'jump', 'goto']);

function parseElement(text: string, key: KeyType, data: DataType | undefined, interval: boolean, family: Family,
  interfaces: InterfaceResolver | undefined): ParsedElement {
  const ts = tokens(text);
  let i = 0;
  const out: ParsedElement = { parts: [] };
  const readValues = (type: KeyType, allowInterval: boolean): Part[] => {
    const parts: Part[] = [];
    for (let p = 0; p < type.parts.length; p++) {
      if (p > 0) {
        const dot = ts[i];
        if (!dot || dot.w !== '.') {
          throw new ElementError(dot?.col ?? text.length + 1, `expected '.' and the next of ${type.parts.length} parts (${keyTypeName(type)})`);
        }
        i++;
      }
      let t = ts[i++];
      if (!t) throw new ElementError(text.length + 1, `expected ${type.parts[p]!.expected}`);
      // `syn | ack`: one value of a bit mask, over several words
      while (type.parts[p]!.bitmask && ts[i] && (t.w.endsWith('|') || ts[i]!.w.startsWith('|'))) t = { ...t, w: t.w + ts[i++]!.w };
      parts.push(parsePart(type.parts[p]!, t, allowInterval, interfaces));
    }
    return parts;
  };
  if (ts[0]?.w === '*' && !ts[0].quoted) {
    out.catchall = true;
    i = 1;
  } else {
    out.parts = readValues(key, interval);
  }
  // Options before the data, in the order nft lists them.
  for (;;) {
    const t = ts[i];
    if (!t || t.w === ':') break;
    i++;
    if (t.w === 'comment') {
      const c = ts[i++];
      if (!c || !c.quoted) throw new ElementError(c?.col ?? text.length + 1, 'comment takes a quoted string');
      out.comment = c.w.slice(1, -1);
      if (Buffer.byteLength(out.comment) > 128) throw new ElementError(c.col, 'comment too long, 128 characters maximum allowed');
    } else if (t.w === 'timeout' || t.w === 'expires') {
      const v = ts[i++];
      const ms = v ? parseNftTime(v.w) : undefined;
      if (ms === undefined) throw new ElementError(v?.col ?? text.length + 1, `${t.w} takes a time (1h, 30s, 1d2h)`);
      if (t.w === 'timeout') out.timeout = ms; else out.expires = ms;
    } else if (STATEMENT_WORDS.has(t.w) && !t.quoted) {
      // up to the next option or the data
      let j = i;
      while (ts[j] && !(OPTION_WORDS.has(ts[j]!.w) && !ts[j]!.quoted)) j++;
      const end = ts[j - 1]!;
      const stmt = text.slice(t.col - 1, end.col - 1 + end.w.length);
      if (out.exprs) throw new ElementError(t.col, 'the element\'s statements are given in two places');
      out.exprs = statementsAt(stmt, t.col, family);
      // (nft 1.0.6's element grammar takes one; a set's two reach each element without one)
      if (out.exprs.length > 1) throw new ElementError(t.col, 'an element takes one statement (as nft 1.0.6 writes it)');
      i = j;
    } else if (t.w === '.') {
      throw new ElementError(t.col, `the key is ${keyTypeName(key)}: too many parts`);
    } else {
      throw new ElementError(t.col, `unexpected '${t.w}' after the element's key (expected comment, timeout, expires, counter, limit, quota${data ? " or ': DATA'" : ''})`);
    }
  }
  const colon = ts[i];
  if (colon) {
    if (!data) throw new ElementError(colon.col, "set is not a map: an element of a set has no ': DATA'");
    i++;
    const d = ts[i];
    if (!d) throw new ElementError(colon.col, 'expected the data after \':\'');
    if (data.kind === 'object') {
      i++;
      const name = d.w.replace(/^"|"$/g, '');
      if (!/^[A-Za-z_.][A-Za-z0-9_./-]*$/.test(name) || name.length > 255) throw new ElementError(d.col, `a ${data.type} object's name`);
      out.data = { objref: name };
    } else if (data.kind === 'verdict') {
      if (!VERDICTS.has(d.w)) throw new ElementError(d.col, `'${d.w}' is not a verdict (accept, drop, continue, return, jump CHAIN, goto CHAIN)`);
      i++;
      if (d.w === 'jump' || d.w === 'goto') {
        const c = ts[i++];
        if (!c || !/^[A-Za-z0-9_.\-/]+$/.test(c.w.replace(/^"|"$/g, ''))) throw new ElementError(c?.col ?? text.length + 1, `${d.w} takes a chain name`);
        out.data = { verdict: internWord(d.w as Verdict), chain: c.w.replace(/^"|"$/g, '') };
      } else {
        out.data = { verdict: internWord(d.w as Verdict) };
      }
    } else {
      const parts = readValues(data.type, false);
      out.data = { hex: parts.map((p, k) => padPart(data.type.parts[k]!, p.lo, data.type.parts.length > 1)).join('') };
    }
  } else if (data) {
    throw new ElementError(text.length + 1, `an element of a map needs ': ${data.kind === 'verdict' ? 'verdict' : data.kind === 'object' ? `"${data.type} name"` : keyTypeName(data.type)}'`);
  }
  if (i < ts.length) throw new ElementError(ts[i]!.col, `unexpected '${ts[i]!.w}' at the end of the element`);
  return out;
}

// ---- building -----------------------------------------------------------------

const FLAG_BITS: Record<string, number> = { constant: SET_F.CONSTANT, interval: SET_F.INTERVAL, timeout: SET_F.TIMEOUT, dynamic: SET_F.EVAL };

/**
 * Builds one declaration into the kernel objects nft creates for it.
 * Problems go to `fail` with where they are; returns undefined if any.
 */
export function buildSet(raw: RawSet, map: boolean, ctx: { family: Family; table: string; interfaces?: InterfaceResolver }, fail: SetFail): SetConfig | undefined {
  let ok = true;
  const err: SetFail = (w, r, c) => { ok = false; fail(w, r, c); };
  const what = map ? 'map' : 'set';
  if ((raw.type === undefined) === (raw.typeof === undefined)) {
    err(['name'], `${what} ${raw.name}: give exactly one of type and typeof`);
    return undefined;
  }
  const declField = raw.type !== undefined ? 'type' : 'typeof';
  const declText = (raw.type ?? raw.typeof)!;
  let key: Side;
  let data: DataType | undefined;
  let dataTypeof: SetTypeof | undefined;
  try {
    const ws = words(declText);
    const colon = ws.findIndex((x) => x.w === ':');
    if (!map && colon >= 0) throw new ElementError(ws[colon]!.col, `a set has no data type; use a map for '${declText}'`);
    if (map && colon < 0) throw new ElementError(declText.length + 1, `a map's ${declField} is KEY : DATA`);
    const keyWords = map ? ws.slice(0, colon) : ws;
    if (keyWords.length === 0) throw new ElementError(1, 'the key type is missing');
    key = declField === 'type' ? typeSide(keyWords) : typeofSide(keyWords);
    if (map) {
      const dw = ws.slice(colon + 1);
      const objType = OBJECT_DATA[dw.map((x) => x.w).join(' ')];
      if (objType) {
        data = { kind: 'object', type: objType };
      } else if (dw.length === 1 && dw[0]!.w === 'verdict') {
        data = { kind: 'verdict' };
        dataTypeof = declField === 'typeof' ? { expr: 'verdict' } : { expr: 'none' };
      } else if (dw.length === 0) {
        throw new ElementError(declText.length + 1, 'the data type is missing after \':\'');
      } else {
        const side = declField === 'type' ? typeSide(dw) : typeofSide(dw);
        data = { kind: 'value', type: side.type };
        dataTypeof = side.typeof;
      }
    }
  } catch (e) {
    if (!(e instanceof ElementError)) throw e;
    err([declField], `${what} ${raw.name}: ${e.message}`, e.column);
    return undefined;
  }
  const flagsList = raw.flags ?? [];
  // an object map is no data map: the kernel keeps the objects' names (NFT_SET_OBJECT)
  let flags = data?.kind === 'object' ? SET_F.OBJECT : map ? SET_F.MAP : 0;
  for (const f of flagsList) flags |= FLAG_BITS[f]!;
  const interval = (flags & SET_F.INTERVAL) !== 0;
  const concat = key.type.parts.length > 1;
  if (interval && concat) flags |= SET_F.CONCAT;
  if (raw['auto-merge'] && map) err(['auto-merge'], `map ${raw.name}: auto-merge is for sets (nft 1.0.6 refuses it in a map)`);
  if (raw['auto-merge'] && !interval) err(['auto-merge'], `${what} ${raw.name}: auto-merge needs flags interval`);
  const timeout = raw.timeout !== undefined ? parseNftTime(raw.timeout) : undefined;
  if (raw.timeout !== undefined && timeout === undefined) err(['timeout'], `${what} ${raw.name}: timeout '${raw.timeout}' is not a time (1h, 30s, 1d2h)`);
  const gc = raw['gc-interval'] !== undefined ? parseNftTime(raw['gc-interval']) : undefined;
  if (raw['gc-interval'] !== undefined && gc === undefined) err(['gc-interval'], `${what} ${raw.name}: gc-interval '${raw['gc-interval']}' is not a time`);
  if (timeout !== undefined || gc !== undefined) flags |= SET_F.TIMEOUT;
  if (flags & SET_F.CONSTANT && flags & SET_F.TIMEOUT) err(['flags'], `${what} ${raw.name}: a constant set cannot have timeouts`);
  let exprs: StatefulExpr[] | undefined;
  if (raw.statements !== undefined) {
    try {
      exprs = statementsAt(raw.statements, 1, ctx.family);
    } catch (e) {
      if (!(e instanceof ElementError)) throw e;
      err(['statements'], `${what} ${raw.name}: ${e.message}`, e.column);
    }
  }
  // with more than one, nft flags the set (NFT_SET_EXPR) and sends NFTA_SET_EXPRESSIONS
  if (exprs && exprs.length > 1) flags |= SET_F.EXPR;

  // Elements: parsed, then laid out as the kernel keeps them.
  const parsed: { p: ParsedElement; index: number }[] = [];
  (raw.elements ?? []).forEach((text, index) => {
    try {
      const p = parseElement(text, key.type, data, interval, ctx.family, ctx.interfaces);
      if ((p.timeout !== undefined || p.expires !== undefined) && !(flags & SET_F.TIMEOUT)) {
        throw new ElementError(1, `element timeouts need flags timeout on ${what} ${raw.name}`);
      }
      // the kernel takes an element's own statements only of the kinds, in the order, the set's are
      if (p.exprs && exprs && p.exprs.map((x) => x.kind).join() !== exprs.map((x) => x.kind).join()) {
        throw new ElementError(1, `the element's statements (${p.exprs.map((x) => x.kind).join(', ')}) are not those of ${what} ${raw.name} (${exprs.map((x) => x.kind).join(', ')})`);
      }
      parsed.push({ p, index });
    } catch (e) {
      if (!(e instanceof ElementError)) throw e;
      err(['elements', index], `${what} ${raw.name}, element ${index + 1}: ${e.message}`, e.column);
    }
  });
  const stars = parsed.filter(({ p }) => p.catchall);
  if (stars.length > 1) err(['elements', stars[1]!.index], `${what} ${raw.name}, element ${stars[1]!.index + 1}: a second catch-all element ('*'); a ${what} has one`, 1);
  if (!ok) return undefined;
  const keyed = layout(parsed.filter(({ p }) => !p.catchall), key.type, interval, concat, !!raw['auto-merge'], (index, reason) =>
    err(['elements', index], `${what} ${raw.name}, element ${index + 1}: ${reason}`, 1));
  if (!ok || !keyed) return undefined;
  // the catch-all element is kept beside the set's backend, whatever its layout
  const elements = stars.length ? [...keyed, element(undefined, SET_ELEM_F.CATCHALL, stars[0]!.p)] : keyed;

  const set: NftSet = {
    family: ctx.family, table: ctx.table, name: raw.name, flags, keyType: key.type.id, keyLen: key.type.len,
    userdata: namedSetUserdata({
      keyByteorder: key.type.byteorder, keyTypeof: key.typeof, merge: !!raw['auto-merge'], comment: raw.comment,
      ...(data?.kind === 'object' ? { objectMap: true } : {}),
      ...(data && data.kind !== 'object' ? { data: { byteorder: data.kind === 'verdict' ? BYTEORDER_NONE : data.type.byteorder, typeof: dataTypeof! } } : {}),
    }),
  };
  if (data?.kind === 'object') {
    set.objType = OBJ_TYPE[data.type];
  } else if (data) {
    set.dataType = data.kind === 'verdict' ? NFT_DATA_VERDICT : data.type.id;
    set.dataLen = data.kind === 'verdict' ? VERDICT_DATA_LEN : data.type.len;
  }
  if (raw.policy === 'memory') set.policy = 1;
  if (raw.size !== undefined) set.size = raw.size;
  else if (flags & SET_F.CONSTANT && elements.length > 0) set.size = elements.length;  // nft sizes a constant set by its contents
  if (timeout !== undefined) set.timeout = timeout;
  if (gc !== undefined) set.gcInterval = gc;
  if (interval && concat) set.fieldLen = key.type.parts.map((p) => p.len);
  if (exprs) set.exprs = exprs;
  const decl: RawSet = { ...raw, [declField]: declText.replace(/\s+/g, ' ').trim() };
  return { name: raw.name, map, set, elements, key: key.type, data, decl };
}

function element(key: Hex | undefined, flags: number, p: ParsedElement, open = false): SetElement {
  const e: SetElement = key !== undefined ? { key, flags } : { flags };
  if (p.data?.hex !== undefined) e.data = p.data.hex;
  if (p.data?.verdict !== undefined) e.verdict = p.data.verdict;
  if (p.data?.chain !== undefined) e.chain = p.data.chain;
  if (p.data?.objref !== undefined) e.objref = p.data.objref;
  if (p.timeout !== undefined) e.timeout = p.timeout;
  if (p.expires !== undefined) e.expiration = p.expires;
  if (p.exprs) e.exprs = p.exprs;
  const u = elementUserdata(p.comment, open);
  if (u !== undefined) e.userdata = u;
  return e;
}

/** The kernel's elements for the parsed ones: hash entries, rbtree starts and ends, or pipapo key/key-end pairs. */
function layout(parsed: { p: ParsedElement; index: number }[], key: KeyType, interval: boolean, concat: boolean,
  merge: boolean, fail: (index: number, reason: string) => void): SetElement[] | undefined {
  const pad = (k: number, hex: Hex) => padPart(key.parts[k]!, hex, concat);
  if (!interval || concat) {
    const out = new Map<string, SetElement>();
    for (const { p, index } of parsed) {
      let k = '';
      for (let n = 0; n < p.parts.length; n++) k += pad(n, p.parts[n]!.lo);
      const e = element(k, 0, p);
      if (interval) e.keyEnd = p.parts.map((x, n) => pad(n, x.hi)).join('');
      const id = k + (e.keyEnd ?? '');
      const prev = out.get(id);
      if (prev && (prev.data !== e.data || prev.verdict !== e.verdict || prev.chain !== e.chain)) {
        fail(index, 'the same key is given twice with different data');
        return undefined;
      }
      if (!prev) out.set(id, e);
    }
    if (interval) {
      // pipapo refuses overlapping ranges; nft says so before it sends them.
      const list = [...out.values()];
      const spans = list.map((e) => splitKey(key, e.key!).map((lo, n) => [hexToBig(lo), hexToBig(splitKey(key, e.keyEnd!)[n]!)] as const));
      for (let a = 0; a < spans.length; a++) {
        for (let b = a + 1; b < spans.length && spans.length <= 2000; b++) {
          if (spans[a]!.every(([lo, hi], n) => lo <= spans[b]![n]![1] && spans[b]![n]![0] <= hi)) {
            fail(parsed[b]?.index ?? 0, 'conflicting intervals specified');
            return undefined;
          }
        }
      }
    }
    return [...out.values()];
  }
  // One-part interval set: sorted spans, checked (or merged) as nft does, then start and end elements.
  const len = key.len;
  // The kernel orders rbtree keys bytewise: a host-order integer goes in big-endian.
  const swap = key.parts[0]!.hostInt === true;
  const num = (h: Hex) => hexToBig(swap ? swapBytes(h) : h);
  const hex = (v: bigint) => bigToHex(v, len);
  const spans = parsed.map(({ p, index }) => ({ lo: num(p.parts[0]!.lo), hi: num(p.parts[0]!.hi), p, index }))
    .sort((a, b) => (a.lo < b.lo ? -1 : a.lo > b.lo ? 1 : 0));
  const merged: typeof spans = [];
  for (const s of spans) {
    const last = merged[merged.length - 1];
    if (last && s.lo <= last.hi + (merge ? 1n : 0n)) {
      if (!merge) {
        if (s.lo === last.lo && s.hi === last.hi) continue;  // the same interval twice
        fail(s.index, 'conflicting intervals specified');
        return undefined;
      }
      if (s.hi > last.hi) last.hi = s.hi;
    } else {
      merged.push({ ...s });
    }
  }
  const max = (1n << BigInt(len * 8)) - 1n;
  const out: SetElement[] = [];
  if (merged.length > 0 && merged[0]!.lo !== 0n) out.push({ key: hex(0n), flags: SET_ELEM_F.INTERVAL_END });
  for (const m of merged) {
    const open = m.hi === max;
    out.push(element(hex(m.lo), 0, m.p, open));
    if (!open) out.push({ key: hex(m.hi + 1n), flags: SET_ELEM_F.INTERVAL_END });
  }
  return out;
}

// ---- text ----------------------------------------------------------------------

/** One part's value as nft prints it, with its range or prefix. */
function formatSpan(dt: Datatype, lo: Hex, hi: Hex): string {
  if (lo === hi) return dt.format(lo);
  if (dt.name === 'ifname') {
    const stem = lo.replace(/(00)+$/, '');
    if (hi === stem + 'ff'.repeat(dt.len - stem.length / 2)) return `"${Buffer.from(stem, 'hex').toString('utf8')}*"`;
  }
  if (dt.prefix) {
    const a = hexToBig(lo);
    const b = hexToBig(hi);
    const bits = dt.len * 8;
    const hostBits = (b - a + 1n).toString(2).length - 1;
    if ((b - a + 1n) === (1n << BigInt(hostBits)) && (a & ((1n << BigInt(hostBits)) - 1n)) === 0n) {
      return `${dt.format(lo)}/${bits - hostBits}`;
    }
  }
  return `${dt.format(lo)}-${dt.format(hi)}`;
}

function formatOptions(e: SetElement, withExpires: boolean, family: Family): string {
  let s = '';
  if (e.timeout !== undefined) s += ` timeout ${formatNftTime(e.timeout)}`;
  if (withExpires && e.expiration !== undefined) s += ` expires ${formatNftTime(e.expiration)}`;
  // (the statements' state, counts and quota used, is the kernel's: not written back)
  if (e.exprs?.length) s += ` ${renderStatements(e.exprs, family)}`;
  const c = elementComment(e.userdata);
  if (c !== undefined) s += ` comment "${c}"`;
  return s;
}

function formatData(e: SetElement, data: DataType | undefined): string {
  if (!data) return '';
  if (data.kind === 'verdict') return ` : ${e.verdict ?? '?'}${e.chain !== undefined ? ` ${e.chain}` : ''}`;
  if (data.kind === 'object') return ` : "${e.objref ?? '?'}"`;
  const parts = splitKey(data.type, e.data ?? '');
  return ' : ' + parts.map((h, n) => data.type.parts[n]!.format(h)).join(' . ');
}

/**
 * Kernel elements as nft's element texts: a hash or pipapo element is one,
 * an rbtree start and the end after it are one interval (the leading zero end
 * is no element of its own). Undefined if they are not shaped as nft makes them.
 */
export function elementTexts(key: KeyType, data: DataType | undefined, interval: boolean,
  elements: readonly SetElement[], withExpires = false, family: Family = 'inet'): string[] | undefined {
  // The catch-all element, listed last as nft lists it.
  const stars = elements.filter((e) => (e.flags ?? 0) & SET_ELEM_F.CATCHALL);
  if (stars.length === 0) return keyedTexts(key, data, interval, elements, withExpires, family);
  if (stars.length > 1 || stars[0]!.key !== undefined) return undefined;
  const texts = keyedTexts(key, data, interval, elements.filter((e) => !((e.flags ?? 0) & SET_ELEM_F.CATCHALL)), withExpires, family);
  return texts && [...texts, '*' + formatOptions(stars[0]!, withExpires, family) + formatData(stars[0]!, data)];
}

function keyedTexts(key: KeyType, data: DataType | undefined, interval: boolean,
  elements: readonly SetElement[], withExpires: boolean, family: Family): string[] | undefined {
  const concat = key.parts.length > 1;
  if (!interval || concat) {
    // In key order, as nft lists a set of single values (integers by value, so a host-order mark too).
    const order = (e: SetElement) => (!concat && key.parts[0]!.hostInt ? swapBytes(e.key ?? '') : e.key ?? '');
    return [...elements].sort((a, b) => compareText(order(a), order(b))).map((e) => {
      const lo = splitKey(key, e.key ?? '');
      const hi = e.keyEnd !== undefined ? splitKey(key, e.keyEnd) : lo;
      return lo.map((l, n) => formatSpan(key.parts[n]!, l, hi[n]!)).join(' . ') + formatOptions(e, withExpires, family) + formatData(e, data);
    });
  }
  const kdt = key.parts[0]!;
  // Keys are big-endian here (see layout); the datatype formats its own byte order.
  const dt: Datatype = kdt.hostInt ? { ...kdt, format: (h) => kdt.format(swapBytes(h)) } : kdt;
  const num = (h: Hex) => hexToBig(h);
  const hex = (v: bigint) => bigToHex(v, key.len);
  const sorted = [...elements].sort((a, b) => {
    const x = num(a.key ?? '');
    const y = num(b.key ?? '');
    if (x !== y) return x < y ? -1 : 1;
    // At one key an end comes before a start (adjacent intervals).
    return ((b.flags ?? 0) & SET_ELEM_F.INTERVAL_END) - ((a.flags ?? 0) & SET_ELEM_F.INTERVAL_END);
  });
  const out: string[] = [];
  let start: SetElement | undefined;
  for (const e of sorted) {
    const end = ((e.flags ?? 0) & SET_ELEM_F.INTERVAL_END) !== 0;
    if (end) {
      if (!start) {
        if (out.length === 0 && num(e.key ?? '') === 0n) continue;
        return undefined;
      }
      out.push(formatSpan(dt, start.key!, hex(num(e.key!) - 1n)) + formatOptions(start, withExpires, family) + formatData(start, data));
      start = undefined;
    } else {
      if (start) return undefined;  // only the last interval may run to the end
      start = e;
    }
  }
  if (start && !isOpen(start)) return undefined;
  if (start) out.push(formatSpan(dt, start.key!, 'ff'.repeat(key.len)) + formatOptions(start, withExpires, family) + formatData(start, data));
  return out;
}

function isOpen(e: SetElement): boolean {
  return (parseTlvs(e.userdata ?? '') ?? []).some((t) => t.type === 1);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A declaration's body as nft's `add set` takes it on one line: `{ type …; flags …; }`. */
export function declarationText(d: RawSet, elements?: readonly string[]): string {
  const parts: string[] = [];
  if (d.type !== undefined) parts.push(`type ${d.type}`);
  if (d.typeof !== undefined) parts.push(`typeof ${d.typeof}`);
  if (d.policy !== undefined) parts.push(`policy ${d.policy}`);
  if (d.size !== undefined) parts.push(`size ${d.size}`);
  if (d.flags?.length) parts.push(`flags ${d.flags.join(',')}`);
  if (d.statements !== undefined) parts.push(d.statements);
  if (d.timeout !== undefined) parts.push(`timeout ${d.timeout}`);
  if (d['gc-interval'] !== undefined) parts.push(`gc-interval ${d['gc-interval']}`);
  if (d['auto-merge']) parts.push('auto-merge');
  if (d.comment !== undefined) parts.push(`comment "${d.comment}"`);
  if (elements?.length) parts.push(`elements = { ${elements.join(', ')} }`);
  return `{ ${parts.join('; ')}; }`;
}

/**
 * A kernel set as a declaration the config can hold (for export), or why it
 * cannot be one: nfkeeper never exports what it would install differently.
 */
export function kernelSetDecl(set: NftSet, elements: readonly SetElement[]): { decl: RawSet; map: boolean } | { unsupported: string } {
  const objMap = (set.flags & SET_F.OBJECT) !== 0;
  const map = (set.flags & SET_F.MAP) !== 0 || objMap;
  const what = map ? 'map' : 'set';
  if (set.flags & SET_F.ANONYMOUS) return { unsupported: `${what} ${set.name}: an anonymous set (a meter's) is not a declaration` };
  if ((set.flags & SET_F.EXPR) !== 0 && (set.exprs?.length ?? 0) < 2) return { unsupported: `${what} ${set.name}: flags expr without two expressions` };
  let key = keyTypeFromKernel(set.keyType, set.keyLen);
  let data: DataType | undefined;
  if (objMap) {
    const t = objTypeOf(set.objType);
    if (!t) return { unsupported: `${what} ${set.name}: object type ${set.objType} is not one nfkeeper knows` };
    data = { kind: 'object', type: t };
  } else if (map) {
    if (set.dataType === NFT_DATA_VERDICT) data = { kind: 'verdict' };
    else {
      const d = keyTypeFromKernel(set.dataType ?? 0, set.dataLen ?? 0);
      if (!d) return { unsupported: `${what} ${set.name}: data type ${set.dataType} is not a datatype nfkeeper knows` };
      data = { kind: 'value', type: d };
    }
  }
  const u = parseNamedSetUserdata(set.userdata, map && !objMap);
  if (!u) return { unsupported: `${what} ${set.name}: its userdata is not what nft writes` };
  const side = (t: KeyType, tf: SetTypeof): { type?: string; typeof?: string } | undefined => {
    if (tf.expr === 'none' || (tf.expr === 'concat' && tf.parts.length === 0)) return { type: keyTypeName(t) };
    const descs = tf.expr === 'one' ? [tf.key] : tf.expr === 'concat' ? tf.parts : [];
    const names = descs.map((k) => typeofFields().find((f) => f.set && JSON.stringify(f.set.key) === JSON.stringify(k))?.name ?? typeofWords(k));
    if (names.some((n) => n === undefined)) return undefined;
    return { typeof: names.join(' . ') };
  };
  const k = side(key ?? keyTypeOf([]), u.keyTypeof);
  if (!k) return { unsupported: `${what} ${set.name}: typeof names an expression nfkeeper does not know` };
  if (k.typeof !== undefined) {
    // the key's datatypes as its typeof says (a host-order integer, a string): the kernel's id alone does not
    const typed = typeofSide(words(k.typeof)).type;
    if (typed.id !== set.keyType || typed.len !== set.keyLen) return { unsupported: `${what} ${set.name}: its typeof does not describe its key type` };
    key = typed;
  }
  if (!key) return { unsupported: `${what} ${set.name}: key type ${set.keyType} (length ${set.keyLen}) is not a datatype nfkeeper knows` };
  let typeText = k.type ?? k.typeof!;
  if (data) {
    const ds = data.kind === 'verdict' ? { text: 'verdict' } : data.kind === 'object' ? { text: data.type } : (() => {
      const s = side(data.type, u.data?.typeof ?? { expr: 'none' });
      if (s?.typeof !== undefined) {
        // the data's datatypes as its typeof says, as for the key
        const typed = typeofSide(words(s.typeof)).type;
        if (typed.id !== set.dataType || typed.len !== set.dataLen) return undefined;
        data = { kind: 'value', type: typed };
      }
      return s ? { text: s.type ?? s.typeof! } : undefined;
    })();
    if (!ds) return { unsupported: `${what} ${set.name}: the data's typeof names an expression nfkeeper does not know` };
    typeText += ` : ${ds.text}`;
  }
  const flags: RawSet['flags'] = [];
  if (set.flags & SET_F.CONSTANT) flags.push('constant');
  if (set.flags & SET_F.EVAL) flags.push('dynamic');
  if (set.flags & SET_F.INTERVAL) flags.push('interval');
  // nft lists no timeout flag that a default timeout implies, unless other flags are listed.
  if (set.flags & SET_F.TIMEOUT && (set.timeout === undefined || flags.length > 0)) flags.push('timeout');
  // an element holding what its set gives every element is written without it (it gets it again)
  const own = set.exprs?.length ? statefulKey(set.exprs) : undefined;
  const written: readonly SetElement[] = own === undefined ? elements : elements.map((e): SetElement => {
    if (!e.exprs || statefulKey(e.exprs) !== own) return e;
    const { exprs: _x, ...rest } = e;
    return rest;
  });
  if (written.some((e) => (e.exprs?.length ?? 0) > 1)) return { unsupported: `${what} ${set.name}: an element holds two statements that are not its set's` };
  const texts = elementTexts(key, data, (set.flags & SET_F.INTERVAL) !== 0, written, false, set.family);
  if (!texts) return { unsupported: `${what} ${set.name}: its elements are not shaped as nft makes them` };
  const decl: RawSet = { name: set.name, ...(k.type !== undefined ? { type: typeText } : { typeof: typeText }) };
  if (flags.length) decl.flags = flags;
  if (set.policy === 1) decl.policy = 'memory';
  if (set.size !== undefined && !(set.flags & SET_F.CONSTANT && set.size === elements.length)) decl.size = set.size;
  if (set.timeout !== undefined) decl.timeout = formatNftTime(set.timeout);
  if (set.gcInterval !== undefined) decl['gc-interval'] = formatNftTime(set.gcInterval);
  if (u.merge) decl['auto-merge'] = true;
  if (u.comment !== undefined) decl.comment = u.comment;
  if (set.exprs?.length) decl.statements = renderStatements(set.exprs, set.family);
  if (texts.length) decl.elements = texts;
  return { decl, map };
}

function objTypeOf(n: number | undefined): ObjType | undefined {
  return (Object.keys(OBJ_TYPE) as ObjType[]).find((k) => OBJ_TYPE[k] === n);
}

/** The key and data types of a desired or kernel set, for rendering its elements. */
export function typesOf(set: NftSet): { key: KeyType; data?: DataType } | undefined {
  const key = keyTypeFromKernel(set.keyType, set.keyLen);
  if (!key) return undefined;
  if (set.flags & SET_F.OBJECT) {
    const t = objTypeOf(set.objType);
    return t ? { key, data: { kind: 'object', type: t } } : undefined;
  }
  if (!(set.flags & SET_F.MAP)) return { key };
  if (set.dataType === NFT_DATA_VERDICT) return { key, data: { kind: 'verdict' } };
  const d = keyTypeFromKernel(set.dataType ?? 0, set.dataLen ?? 0);
  return d ? { key, data: { kind: 'value', type: d } } : undefined;
}

