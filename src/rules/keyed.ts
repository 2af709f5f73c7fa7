/**
 * The rule side of sets and maps, the way nft 1.0.6 writes them: keys that are concatenations
 * (`ip daddr . meta l4proto . th dport`) or generators (`numgen random mod 2`, `jhash ip saddr
 * mod 2`, `symhash mod 2`), looked up in named sets (`@s`, `!= @s`), anonymous concatenated sets,
 * verdict maps (`vmap { … }`, `vmap @m`) and NAT data maps (`dnat to KEY map { … }`, `map @m`).
 * Parsing hooks into parser.ts, dependencies into compile.ts's evaluation, and rendering into
 * render.ts; the set and map objects come from sets.ts. Named sets are never created here: the
 * compiler is given the table's sets (CompileContext.sets) and checks that key and data fit.
 */
import { internWord } from './intern.js';
import type { DynsetExpr, Expr, StatefulExpr, Family, Hex, LookupExpr, NatExpr } from '../netlink/expr.js';
import { MAX_STATEFUL_EXPRS, NAT_RANGE } from '../netlink/expr.js';
import { statefulKey } from './stateful.js';
import { OBJ_TYPE, SET_ELEM_F, SET_F, type NftSet, type ObjType, type SetElement } from '../netlink/objects.js';
import { objrefUse, objTypeName } from './objnames.js';
import type {
  At, DupMapStmt, DynsetConst, DynsetStmt, Elem, Gen, KeyedStmt, MarkMapStmt, KeyElem, KeyPart, MapData, MapVerdict, MatchOp, NatMap, NatStmt, SetRhs,
} from './ast.js';
import { HOST_LE, andHex, hostValue, hexToBig, bigToHex, prefixMask, u16Be, u32Host, readU32Host, zeroHex } from './bytes.js';
import { rawPayloadAt, type Field } from './fields.js';
import { fieldMask, type Proto } from './headers.js';
import { matchPayloadSet, payloadSetExprs } from './payloadset.js';
import type { Token } from './lexer.js';
import {
  DATA_VERDICT, buildKeyedSet, concatHex, hostToNet, keyDesc, meterUserdata, type Fail, type KeyDesc, type KeyPartDesc, type KeyedElem,
  type MapDataDesc,
} from './anonymous-sets.js';
import { parseDupDevice } from './statements.js';
import { typeofTlvs, type KeyTypeof } from './udata.js';
import { keyTypeFromKernel } from './datatypes.js';
import { formatIPv4, formatIPv6, parseIPv4, parseIPv6, parseInteger } from './values.js';

// ---- parsing ---------------------------------------------------------------------------

/** The parser operations keyed parsing uses (parser.ts's Parser). */
export interface KeyedParser {
  peek(k?: number): Token;
  next(): Token;
  fail(at: { col: number; raw: string }, expected: string, reason?: string): never;
  isWord(t: Token, a?: string, b?: string, c?: string, d?: string, e?: string, f?: string): boolean;
  expectWord(expected: string, ...words: string[]): Token;
  parseElem(field: Field, scalar: boolean, what?: string): Elem;
  /** Parses one field (`ip daddr`, `meta mark`, …) through the statement grammar. */
  parseKeyField(expected: string): { field: Field } & At;
  /** A statement an element gets (`counter`, `limit rate …`, `quota …`, `ct count …`), or undefined where none starts. */
  parseStateful(): StatefulExpr[] | undefined;
  /** Splits the current word after `n` characters into two words. */
  splitWord(n: number): void;
}

const GEN_WORDS = ['numgen', 'jhash', 'symhash'];
/** Words that start a key in `snat/dnat to KEY map …` (none is an address). */
const NAT_KEY_START = new Set(['ip', 'ip6', 'tcp', 'udp', 'udplite', 'sctp', 'dccp', 'th', 'meta', 'ct', 'iifname', 'oifname', 'iif', 'oif',
  'mark', 'osf', 'fib', 'rt', 'ipsec', 'socket', ...GEN_WORDS]);
/** The base of a raw payload (`@ih,0,32`), which may start such a key too. */
const RAW_BASE = /^@(?:ll|nh|th|ih)$/;
const SET_NAME = /^@[A-Za-z_.][A-Za-z0-9_./-]*$/;
const CHAIN_NAME = /^[A-Za-z_.][A-Za-z0-9_./-]*$/;
const KEY_PART = 'a field such as ip daddr, meta l4proto or th dport';

const isDot = (p: KeyedParser, t: Token) => p.isWord(t, '.');
const at = (t: Token): At => ({ col: t.col, raw: t.raw });

function u32(p: KeyedParser, what: string, min = 0): number {
  const t = p.peek();
  const v = t.kind === 'word' ? parseInteger(t.text, 0xffffffff) : undefined;
  if (v === undefined || v < min) p.fail(t, `${what} (${min}-4294967295)`);
  p.next();
  return v!;
}

/** One key part: a generator or a field. */
function parsePart(p: KeyedParser, inHash: boolean, allowMask = false): KeyPart {
  const t = p.peek();
  if ((t.kind === 'word' && GEN_WORDS.includes(t.text))) {
    if (inHash) p.fail(t, KEY_PART, 'a hash of a generator is not supported');
    return { p: 'gen', gen: parseGen(p), ...at(t) };
  }
  const f = p.parseKeyField(inHash ? KEY_PART : `${KEY_PART}, or numgen, jhash or symhash`);
  const part: KeyPart = { p: 'field', field: f.field, col: f.col, raw: f.raw };
  const m = p.peek();
  if (allowMask && ((m.kind === 'punct' && m.text === '&') || p.isWord(m, 'and')) && f.field.load.kind === 'payload'
    && (f.field.type === 'ipv4' || f.field.type === 'ipv6')) {
    // an address under a mask as a map's key (nft's binop: the load, then the mask)
    p.next();
    part.mask = (p.parseElem(f.field, true, 'a mask') as { hex: string }).hex;
  }
  return part;
}

/** One key expression and nothing after it: a named set's typeof part (`ct zone`, `numgen inc mod 2`). */
export function parseLonePart(p: KeyedParser): KeyPart {
  const part = parsePart(p, false);
  if (p.peek().kind !== 'end') p.fail(p.peek(), 'the end of the expression (one field, numgen or symhash)');
  return part;
}

/** Parts joined by ' . ' after `first`. */
function parseConcat(p: KeyedParser, first: KeyPart, inHash: boolean): KeyPart[] {
  const parts = [first];
  while (isDot(p, p.peek())) {
    p.next();
    parts.push(parsePart(p, inHash));
  }
  const gen = parts.find((x) => x.p === 'gen');
  if (gen && parts.length > 1) p.fail(gen, 'a key of fields only', `${gen.raw} cannot be part of a concatenation`);
  return parts;
}

function parseGen(p: KeyedParser): Gen {
  const t = p.next();
  if (t.text === 'numgen') {
    const m = p.expectWord("'inc' or 'random' after 'numgen'", 'inc', 'random');
    p.expectWord("'mod' and a modulus", 'mod');
    const g: Gen = { g: 'numgen', mode: m.text as 'inc' | 'random', mod: u32(p, 'a modulus', 1) };
    if (p.isWord(p.peek(), 'offset')) { p.next(); g.offset = u32(p, 'an offset'); }
    return g;
  }
  if (t.text === 'jhash') {
    const of = parseConcat(p, parsePart(p, true), true);
    p.expectWord("'mod' and a modulus (or ' . ' and another field)", 'mod');
    const g: Gen = { g: 'jhash', of, mod: u32(p, 'a modulus', 1) };
    if (p.isWord(p.peek(), 'seed')) { p.next(); g.seed = u32(p, 'a seed'); }
    if (p.isWord(p.peek(), 'offset')) { p.next(); g.offset = u32(p, 'an offset'); }
    return g;
  }
  p.expectWord("'mod' and a modulus after 'symhash'", 'mod');
  const g: Gen = { g: 'symhash', mod: u32(p, 'a modulus', 1) };
  if (p.isWord(p.peek(), 'offset')) { p.next(); g.offset = u32(p, 'an offset'); }
  return g;
}

function parseNamed(p: KeyedParser): Extract<SetRhs, { k: 'named' }> {
  const t = p.peek();
  if (t.kind !== 'word' || !SET_NAME.test(t.text) || t.text.length > 256) {
    p.fail(t, "a set name after '@' (a letter, _ or . followed by letters, digits, / - _ .)");
  }
  p.next();
  return { k: 'named', name: t.text.slice(1), ...at(t) };
}

/** One value of a key part in a set or map element. */
function parsePartValue(p: KeyedParser, part: KeyPart, key: KeyPart[]): Elem {
  if (part.p === 'field') return p.parseElem(part.field, false);
  const t = p.peek();
  const m = t.kind === 'word' ? /^([^-]+)-([^-]+)$/.exec(t.text) : null;
  if (m && key.length === 1) {
    const lo = parseInteger(m[1]!, 0xffffffff), hi = parseInteger(m[2]!, 0xffffffff);
    if (lo === undefined || hi === undefined) p.fail(t, `a number or a range such as 0-5 for ${part.raw}`);
    if (lo! > hi!) p.fail(t, 'a range whose start is not above its end', 'empty range');
    p.next();
    return { k: 'range', lo: u32Host(lo!), hi: u32Host(hi!), ...at(t) };
  }
  const v = t.kind === 'word' ? parseInteger(t.text, 0xffffffff) : undefined;
  if (v === undefined) p.fail(t, `a number for ${part.raw}`);
  p.next();
  return { k: 'value', hex: u32Host(v!), ...at(t) };
}

type DataKind = 'verdict' | 'nat' | 'mark' | 'zone' | 'port' | 'ip' | 'ip6' | 'obj' | undefined;

function parseData(p: KeyedParser, kind: Exclude<DataKind, undefined>): MapData {
  const t = p.peek();
  if (kind === 'obj') {
    // an object of the table, by name ("c80" or c80)
    const name = t.kind === 'string' ? t.text : t.kind === 'word' ? t.text : '';
    if (!/^[A-Za-z_.][A-Za-z0-9_./-]*$/.test(name) || name.length > 255) p.fail(t, 'the name of an object of the table ("c80")');
    p.next();
    return { d: 'obj', name, ...at(t) };
  }
  if (kind === 'ip' || kind === 'ip6') {
    // one address of the table's family (dup's destination)
    const v = t.kind === 'word' ? (kind === 'ip' ? parseIPv4(t.text) : parseIPv6(t.text)) : undefined;
    if (v === undefined) p.fail(t, kind === 'ip' ? 'an IPv4 address' : 'an IPv6 address');
    p.next();
    return { d: 'value', parts: [{ k: 'value', hex: v!, ...at(t) }], ...at(t) };
  }
  if (kind === 'port') {
    const v = t.kind === 'word' ? parseInteger(t.text, 65535, false) : undefined;
    if (v === undefined) p.fail(t, 'a port number 0-65535');
    p.next();
    return { d: 'value', parts: [{ k: 'value', hex: u16Be(v!), ...at(t) }], ...at(t) };
  }
  if (kind === 'zone') {
    const v = t.kind === 'word' ? parseInteger(t.text, 0xffff) : undefined;
    if (v === undefined) p.fail(t, 'a conntrack zone 0-65535');
    p.next();
    // 16 bits in host byte order
    const be = v!.toString(16).padStart(4, '0');
    return { d: 'value', parts: [{ k: 'value', hex: HOST_LE ? be.slice(2) + be.slice(0, 2) : be, ...at(t) }], ...at(t) };
  }
  if (kind === 'mark') {
    const v = t.kind === 'word' ? parseInteger(t.text, 0xffffffff) : undefined;
    if (v === undefined) p.fail(t, 'a 32-bit mark such as 0x4000');
    p.next();
    return { d: 'value', parts: [{ k: 'value', hex: u32Host(v!), ...at(t) }], ...at(t) };
  }
  if (kind === 'verdict') {
    if (!p.isWord(t, 'accept', 'drop', 'return', 'continue', 'jump', 'goto')) {
      p.fail(t, 'a verdict: accept, drop, return, continue, jump CHAIN or goto CHAIN');
    }
    p.next();
    const d: MapData = { d: 'verdict', verdict: internWord(t.text as MapVerdict), ...at(t) };
    if (t.text === 'jump' || t.text === 'goto') {
      const c = p.peek();
      if (c.kind !== 'word' || !CHAIN_NAME.test(c.text) || c.text.length > 255) {
        p.fail(c, 'a chain name (a letter, _ or . followed by letters, digits, / - _ .)');
      }
      p.next();
      d.chain = c.text;
    }
    return d;
  }
  // NAT: address [. port], each also as a range (an address also as a prefix): nft's interval data
  const a = p.peek();
  const addr = a.kind === 'word' ? natAddrData(a.text) : undefined;
  if (addr === undefined) p.fail(a, "an address, range or prefix, optionally followed by ' . ' and a port or port range");
  p.next();
  const parts: Elem[] = [{ ...addr!, ...at(a) }];
  if (isDot(p, p.peek())) {
    p.next();
    const pt = p.peek();
    const m = pt.kind === 'word' ? /^(\d+)(?:-(\d+))?$/.exec(pt.text) : null;
    const lo = m ? parseInteger(m[1]!, 65535, false) : undefined;
    let hi = m?.[2] !== undefined ? parseInteger(m[2], 65535, false) : undefined;
    if (lo === undefined || (m?.[2] !== undefined && hi === undefined)) p.fail(pt, 'a port number 0-65535 or a port range');
    p.next();
    // `8888 - 8999`, as nft's own tests write it
    if (hi === undefined && p.isWord(p.peek(), '-')) {
      p.next();
      const h = p.peek();
      hi = h.kind === 'word' ? parseInteger(h.text, 65535, false) : undefined;
      if (hi === undefined) p.fail(h, 'the end of the port range');
      p.next();
    }
    if (hi !== undefined && hi < lo!) p.fail(pt, 'a port range whose start is not above its end', 'empty range');
    parts.push(hi === undefined ? { k: 'value', hex: u16Be(lo!), ...at(pt) } : { k: 'range', lo: u16Be(lo!), hi: u16Be(hi), ...at(pt) });
  }
  return { d: 'value', parts, ...at(a) };
}

/** A NAT map's address: one address, `a-b` or `a/len`, IPv4 or IPv6. */
function natAddrData(w: string): Elem | undefined {
  const one = (x: string) => parseIPv4(x) ?? parseIPv6(x);
  const v = one(w);
  if (v !== undefined) return { k: 'value', hex: v, col: 0, raw: '' };
  const slash = w.indexOf('/');
  if (slash > 0) {
    const b = one(w.slice(0, slash));
    const ps = w.slice(slash + 1);
    const plen = /^(?:0|[1-9][0-9]{0,2})$/.test(ps) ? Number(ps) : NaN;
    if (b === undefined || !(plen >= 0 && plen <= b.length * 4)) return undefined;
    return { k: 'prefix', hex: andHex(b, prefixMask(plen, b.length / 2)), plen, col: 0, raw: '' };
  }
  const dash = w.indexOf('-');
  if (dash > 0) {
    const lo = one(w.slice(0, dash)), hi = one(w.slice(dash + 1));
    if (lo === undefined || hi === undefined || lo.length !== hi.length || hi < lo) return undefined;
    return { k: 'range', lo, hi, col: 0, raw: '' };
  }
  return undefined;
}

/** The low and high bytes of a NAT data part. */
function spanOf(e: Elem): [Hex, Hex] {
  switch (e.k) {
    case 'value': return [e.hex, e.hex];
    case 'range': return [e.lo, e.hi];
    case 'prefix': {
      const m = prefixMask(e.plen, e.hex.length / 2);
      let hi = '';
      for (let i = 0; i < e.hex.length; i += 2) {
        hi += ((parseInt(e.hex.substr(i, 2), 16) | (~parseInt(m.substr(i, 2), 16) & 0xff))).toString(16).padStart(2, '0');
      }
      return [e.hex, hi];
    }
    default: throw new Error('unreachable: a wildcard as NAT data');
  }
}

/** `{ elem, … }` for `key`; with `data`, each element maps ` : ` to a verdict or NAT target. */
function parseAnon(p: KeyedParser, key: KeyPart[], data: DataKind): Extract<SetRhs, { k: 'anon' }> {
  const open = p.next(); // '{'
  const elems: KeyElem[] = [];
  for (;;) {
    const first = p.peek();
    const parts: Elem[] = [];
    // `* : data`: the map's catch-all element (NFT_SET_ELEM_CATCHALL), for what no key matches
    const star = data !== undefined && p.isWord(first, '*', '*:');
    if (star) {
      p.splitWord(1);
      p.next();
    }
    if (!star) key.forEach((part, i) => {
      if (i > 0) {
        const d = p.peek();
        if (!isDot(p, d)) p.fail(d, `' . ' and a value for ${key[i]!.raw} (the key has ${key.length} parts)`);
        p.next();
      }
      // `80:accept`, as nft's own tests write it (not for IPv6 keys, whose colons are the address's)
      const v = p.peek();
      if (data && i === key.length - 1 && v.kind === 'word' && part.p === 'field' && part.field.type === 'lladdr') {
        // an Ethernet address holds five colons: `ca:fe:ca:fe:ca:fe:accept`
        const c = v.text.split(':', 6).join(':').length;
        if (c < v.text.length) p.splitWord(c);
      } else if (data && i === key.length - 1 && v.kind === 'word' && !(part.p === 'field' && part.field.type === 'ipv6')) {
        const c = v.text.indexOf(':');
        if (c > 0) p.splitWord(c);
      } else if (data && i === key.length - 1 && v.kind === 'word') {
        // an IPv6 key: `…aaaa:::accept` and `::dddd: drop` as nft's tests write them (the last colon
        // separates when what is before it is an address and what follows is a verdict or nothing)
        const c = v.text.lastIndexOf(':');
        const rest = v.text.slice(c + 1);
        if (c > 0 && parseIPv6(v.text.slice(0, c)) !== undefined
          && (rest === '' || (data === 'verdict' && /^(?:accept|drop|return|continue|jump|goto)$/.test(rest)))) p.splitWord(c);
      }
      parts.push(parsePartValue(p, part, key));
    });
    const e: KeyElem = { parts, col: first.col, raw: first.raw };
    if (star) {
      if (elems.some((x) => x.catchall)) p.fail(first, 'one catch-all element', "'*' given twice");
      e.catchall = true;
    }
    if (data) {
      const sep = p.peek();
      if (sep.kind === 'word' && sep.text.startsWith(':') && sep.text.length > 1) p.splitWord(1);
      const c = p.peek();
      if (!p.isWord(c, ':')) {
        p.fail(c, isDot(p, c) ? `' : ' (the key has ${key.length} part${key.length > 1 ? 's' : ''})` : "' : ' and what the element maps to");
      }
      p.next();
      e.data = parseData(p, data);
    } else if (isDot(p, p.peek())) {
      p.fail(p.peek(), `',' or '}' (the key has ${key.length} part${key.length > 1 ? 's' : ''})`);
    }
    elems.push(e);
    const s = p.peek();
    if (s.kind === 'punct' && s.text === ',') { p.next(); continue; }
    if (s.kind === 'punct' && s.text === '}') { p.next(); break; }
    p.fail(s, "',' or '}'");
  }
  return { k: 'anon', elems, ...at(open) };
}

/** After the key: `vmap …`, or `[==|!=] @set`, `{ … }`, or (a generator) a value. */
function parseKeyedRest(p: KeyedParser, key: KeyPart[], start: At): KeyedStmt {
  const t = p.peek();
  if (p.isWord(t, 'vmap')) {
    p.next();
    const r = p.peek();
    let rhs: SetRhs;
    if (r.kind === 'punct' && r.text === '{') rhs = parseAnon(p, key, 'verdict');
    else if (r.kind === 'word' && r.text.startsWith('@')) rhs = parseNamed(p);
    else return p.fail(r, "'{' starting the verdict map's elements, or @name of a verdict map");
    return { t: 'keyed', key, op: 'implicit', vmap: true, rhs, ...start };
  }
  let op: MatchOp = 'implicit';
  let opAt: At | undefined;
  if (t.kind === 'punct' && (t.text === '==' || t.text === '!=')) {
    op = t.text === '==' ? 'eq' : 'neq';
    opAt = at(t);
    p.next();
  }
  const r = p.peek();
  let rhs: SetRhs;
  if (r.kind === 'word' && r.text.startsWith('@')) rhs = parseNamed(p);
  else if (r.kind === 'punct' && r.text === '{') rhs = parseAnon(p, key, undefined);
  else if (key.length === 1 && key[0]!.p === 'gen') {
    rhs = { k: 'value', elem: parsePartValue(p, key[0]!, key), ...at(r) };
  } else {
    return p.fail(r, key.length > 1 ? "'{' with concatenated values, @set or vmap" : "@set, vmap, or a value");
  }
  const st: KeyedStmt = { t: 'keyed', key, op, vmap: false, rhs, ...start };
  if (opAt) st.opAt = opAt;
  return st;
}

/**
 * Called by parseMatch right after a field: a keyed statement when the field is followed by
 * ' . ', 'vmap' or (after an optional ==/!=) '@name'; undefined for a plain match.
 */
export function parseKeyedMatch(p: KeyedParser, field: Field, start: At): KeyedStmt | undefined {
  const t = p.peek();
  const op = t.kind === 'punct' && (t.text === '==' || t.text === '!=');
  const r = op ? p.peek(1) : t;
  const named = r.kind === 'word' && r.text.startsWith('@');
  if (!named && (op || !(isDot(p, t) || p.isWord(t, 'vmap')))) return undefined;
  const key = parseConcat(p, { p: 'field', field, ...start }, false);
  return parseKeyedRest(p, key, start);
}

/** A statement starting with numgen, jhash or symhash. */
export function parseGenStatement(p: KeyedParser): KeyedStmt {
  const t = p.peek();
  const key = parseConcat(p, parsePart(p, false), false);
  return parseKeyedRest(p, key, at(t));
}

/** After `redirect to :`: `KEY map { k : port, … }`. */
export function parsePortMap(p: KeyedParser): NatMap {
  const t = p.peek();
  const key = parseConcat(p, parsePart(p, false), false);
  p.expectWord("'map' and { key : port, … }", 'map');
  const r = p.peek();
  if (!(r.kind === 'punct' && r.text === '{')) p.fail(r, "'{' starting the map's elements");
  return { key, rhs: parseAnon(p, key, 'port'), ...at(t) };
}

/** `redirect to :KEY map …`: the port from an anonymous map into register 1, then redir. */
export function linearizeRedirMap(st: { map?: NatMap; flags: number }, out: Expr[], kc: KeyedContext): void {
  const map = st.map!;
  const key = keyOf(map.key, kc.fail);
  if (!map.l4Known) {
    kc.fail(map, 'a transport protocol match before it (e.g. meta l4proto tcp)',
      'transport protocol mapping is only valid after transport protocol match');
  }
  const rhs = map.rhs as Extract<SetRhs, { k: 'anon' }>;
  const desc: MapDataDesc = { kind: 'value', dataType: TYPE_SERVICE, dataLen: 2, concat: false, byteorder: 2 };
  const elems = keyedElems(rhs.elems, valueData);
  const ref = anonSetKey(map.key, key, rhs, elems, desc, out, kc);
  out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 },
    { kind: 'redir', flags: st.flags | NAT_RANGE.PROTO_SPECIFIED, regProtoMin: 1, regProtoMax: 1 });
}

/** After `snat/dnat [ip|ip6] to`: true when the target is `KEY map …`. */
export function startsNatMap(p: KeyedParser): boolean {
  const t = p.peek();
  const n = p.peek(1);
  return t.kind === 'word' && (NAT_KEY_START.has(t.text) || (RAW_BASE.test(t.text) && n.kind === 'punct' && n.text === ','));
}

export function parseNatMap(p: KeyedParser): NatMap {
  const t = p.peek();
  const key = parseConcat(p, parsePart(p, false), false);
  p.expectWord("'map' and @name or { key : address, … }" + " (or ' . ' and another key part)", 'map');
  const r = p.peek();
  let rhs: NatMap['rhs'];
  if (r.kind === 'punct' && r.text === '{') rhs = parseAnon(p, key, 'nat');
  else if (r.kind === 'word' && r.text.startsWith('@')) rhs = parseNamed(p);
  else return p.fail(r, "'{' starting the map's elements, or @name of a map");
  return { key, rhs, ...at(t) };
}

const TIME_UNITS: [string, number][] = [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]];

/** nft's time values: `10s`, `1m30s`, `1d2h`, `500ms` (milliseconds), or undefined. */
export function parseNftTime(s: string): number | undefined {
  const m = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$/.exec(s);
  if (!m || s === '') return undefined;
  let ms = 0;
  TIME_UNITS.forEach(([, f], i) => { if (m[i + 1] !== undefined) ms += Number(m[i + 1]) * f; });
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/** Milliseconds as nft prints a time (`1m30s`). */
export function formatNftTime(ms: number): string {
  let rest = ms;
  let out = '';
  for (const [u, f] of TIME_UNITS) {
    const n = Math.floor(rest / f);
    if (n > 0) { out += `${n}${u}`; rest -= n * f; }
  }
  return out || '0s';
}

/** `add @set { KEY [timeout T] }` or `update @set { … }`. */
export function parseDynset(p: KeyedParser): DynsetStmt {
  const t = p.next();
  const s = p.peek();
  let set: DynsetStmt['set'];
  let meter: DynsetStmt['meter'];
  if (t.text === 'meter') {
    // `meter NAME [size N] { KEY STATEMENTS }`: nft 1.0.6 makes NAME a set of the rule's own (anonymous, dynamic)
    if (!(s.kind === 'word' && SET_NAME.test('@' + s.text) && s.text.length <= 255)) p.fail(s, 'the meter\'s name');
    p.next();
    set = { k: 'named', name: s.text, ...at(s) };
    meter = {};
    if (p.isWord(p.peek(), 'size')) {
      p.next();
      const n = p.peek();
      const v = n.kind === 'word' ? parseInteger(n.text, 0xffffffff, false) : undefined;
      if (v === undefined || v === 0) p.fail(n, 'a size (a number of elements)');
      p.next();
      meter.size = v;
    }
  } else {
    if (!(s.kind === 'word' && s.text.startsWith('@'))) p.fail(s, `@name of the set to ${t.text} to`);
    set = parseNamed(p);
  }
  const o = p.peek();
  if (!(o.kind === 'punct' && o.text === '{')) p.fail(o, "'{' and the key to add, e.g. { ip saddr }");
  p.next();
  // the key's parts: fields, or constants of the set's type at their place (`ip saddr . 22`)
  const items: (KeyPart | DynsetConst)[] = [];
  do {
    if (items.length) p.next();
    const v = p.peek();
    // (a number or an address: a word could be a field)
    if ((v.kind === 'word' && /^[0-9]|:/.test(v.text)) || v.kind === 'string') {
      p.next();
      items.push({ constant: v.text, ...at(v) });
    } else {
      items.push(parsePart(p, false));
    }
  } while (isDot(p, p.peek()));
  const key = items.filter((x): x is KeyPart => !('constant' in x));
  const gen = key.find((x) => x.p === 'gen');
  if (gen && items.length > 1) p.fail(gen, 'a key of fields only', `${gen.raw} cannot be part of a concatenation`);
  const st: DynsetStmt = { t: 'dynset', op: t.text === 'update' ? 'update' : 'add', set, key, ...at(t) };
  if (meter) st.meter = meter;
  if (key.length !== items.length) st.keyItems = items;
  if (meter && key.length !== items.length) p.fail(items.find((x) => 'constant' in x)!, 'a key of fields', 'a constant in a meter\'s key is not supported');
  if (p.isWord(p.peek(), 'timeout')) {
    p.next();
    const v = p.peek();
    const ms = v.kind === 'word' ? parseNftTime(v.text) : undefined;
    if (ms === undefined) p.fail(v, 'a time such as 10s, 1m30s or 1h');
    p.next();
    st.timeout = ms;
    st.timeoutAt = at(v);
  }
  // the statements the element it adds gets (`add @s { ip saddr limit rate 10/second }`)
  for (let v = p.peek(), x = p.parseStateful(); x; v = p.peek(), x = p.parseStateful()) {
    st.stmtsAt ??= at(v);
    st.stmts = [...(st.stmts ?? []), ...x];
  }
  if (meter && !st.stmts) p.fail(p.peek(), 'a statement for each key: counter, limit, quota or ct count');
  if (!meter && p.isWord(p.peek(), ':')) {
    // `: DATA`: what the packet path maps the key to (a map with flags dynamic)
    p.next();
    const d = p.peek();
    if (d.kind === 'word' && (NAT_KEY_START.has(d.text) || p.isWord(d, 'iif', 'oif'))) {
      st.data = parseConcat(p, parsePart(p, false), false);
    } else if (d.kind === 'word' || d.kind === 'string') {
      p.next();
      st.data = { constant: d.text, ...at(d) };
    } else {
      p.fail(d, 'the data: an expression such as ip daddr, or a value');
    }
  }
  const c = p.peek();
  if (!(c.kind === 'punct' && c.text === '}')) p.fail(c, "'}'" + (st.timeout === undefined && st.data === undefined ? ", ': DATA' or 'timeout' and a time" : ''));
  p.next();
  return st;
}

/** After `dup to`: true when the destination is `KEY map …`. */
export function startsDupMap(p: KeyedParser): boolean {
  return startsNatMap(p);
}

/** `dup to KEY map { k : addr, … } | map @m [device NAME]` (ip and ip6 tables). */
export function parseDupMap(p: KeyedParser, start: At, family: 'ip' | 'ip6', ifindex?: (name: string) => number | undefined): DupMapStmt {
  const key = parseConcat(p, parsePart(p, false), false);
  p.expectWord("'map' and @name or { key : address, … }" + " (or ' . ' and another key part)", 'map');
  const r = p.peek();
  let rhs: DupMapStmt['rhs'];
  if (r.kind === 'punct' && r.text === '{') rhs = parseAnon(p, key, family);
  else if (r.kind === 'word' && r.text.startsWith('@')) rhs = parseNamed(p);
  else return p.fail(r, "'{' starting the map's elements, or @name of a map");
  const st: DupMapStmt = { t: 'dupmap', key, rhs, ...start };
  const dev = parseDupDevice(p, ifindex);
  if (dev !== undefined) st.dev = dev;
  return st;
}

/** `dup to KEY map …`: the address from the map into register 1, the device's index into register 2, then dup. */
export function linearizeDupMap(st: DupMapStmt, out: Expr[], kc: KeyedContext): void {
  const key = keyOf(st.key, kc.fail);
  const v6 = kc.family === 'ip6';
  const dataType = v6 ? TYPE_IPV6 : TYPE_IPV4;
  if (st.rhs.k === 'named') {
    const s = namedSet(st.rhs, kc);
    checkKey(s, key, st.rhs, kc);
    if (!(s.flags & SET_F.MAP) || s.dataType !== dataType) {
      kc.fail(st.rhs, `a map to ${typeName(dataType)}`, s.flags & SET_F.MAP
        ? `map '${s.name}' maps to ${typeName(s.dataType ?? 0, 1)}` : `'${s.name}' is a set, not a map`);
    }
    emitKey(st.key, 0, out, kc, toNet(s, key, st.rhs, kc));
    out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: s.name, flags: 0 });
  } else {
    const desc: MapDataDesc = { kind: 'value', dataType, dataLen: v6 ? 16 : 4, concat: false, byteorder: 2 };
    const rhs = st.rhs;
    const elems = keyedElems(rhs.elems, valueData);
    const ref = anonSetKey(st.key, key, rhs, elems, desc, out, kc);
    out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 });
  }
  if (st.dev !== undefined) out.push({ kind: 'immediate', dreg: 2, data: u32Host(st.dev) }, { kind: 'dup', sregAddr: 1, sregDev: 2 });
  else out.push({ kind: 'dup', sregAddr: 1 });
}

/** After `meta/ct mark set`: a generator, or a packet field followed by `map`. */
export function startsMarkMap(p: KeyedParser): boolean {
  const t = p.peek();
  if (t.kind !== 'word') return false;
  if ([...GEN_WORDS, 'ip', 'ip6', 'tcp', 'udp', 'th', 'iifname', 'oifname', 'osf'].includes(t.text)) return true;
  // a raw payload (`@nh,96,32 map { … }`), never a value
  if (RAW_BASE.test(t.text) && p.peek(1).kind === 'punct' && p.peek(1).text === ',') return true;
  // a ct key with a direction (`ct original ip daddr map { … }`) is never the value itself
  if (t.text === 'ct' && p.isWord(p.peek(1), 'original', 'reply')) return true;
  // a mark as the key (`ct mark set meta mark map { … }`), not as the value (`ct mark set meta mark`)
  const after = t.text === 'mark' ? p.peek(1) : (t.text === 'meta' || t.text === 'ct') && p.isWord(p.peek(1), 'mark') ? p.peek(2) : undefined;
  return after !== undefined && p.isWord(after, 'map', '.');
}

export function parseMarkMap(p: KeyedParser, target: 'meta' | 'ct', start: At, zone = false, store?: Field): MarkMapStmt {
  const key = parseConcat(p, parsePart(p, false, !zone), false);
  const masked = key.find((k) => k.p === 'field' && k.mask !== undefined);
  if (masked && key.length > 1) p.fail(masked, 'a key of one masked address, or parts without a mask', 'a masked part in a concatenation is not supported');
  const st: MarkMapStmt = { t: 'markmap', target, key, ...start };
  if (zone) st.zone = true;
  if (store) st.store = store;
  const what = zone ? 'ct zone' : store ? store.name : `${target} mark`;
  const gen = key.length === 1 && key[0]!.p === 'gen';
  if (gen && !zone && !store && !p.isWord(p.peek(), 'map')) return st;
  p.expectWord(`'map' and ${zone ? '{ key : zone, … }' : store ? `@name or { key : value, … }` : '@name or { key : mark, … }'}` + (gen ? '' : ` (a field alone cannot set the ${what})`), 'map');
  const r = p.peek();
  const storeData = store?.type === 'ipv4' ? 'ip' : store?.type === 'ipv6' ? 'ip6' : 'port';
  if (r.kind === 'punct' && r.text === '{') st.rhs = parseAnon(p, key, zone ? 'zone' : store ? storeData : 'mark');
  else if (r.kind === 'word' && r.text.startsWith('@') && !zone) st.rhs = parseNamed(p);
  else p.fail(r, zone ? "'{' starting the map's elements" : "'{' starting the map's elements, or @name of a map");
  return st;
}

/**
 * `counter name KEY map @m`, `ct helper set KEY map @m` and the other objref statements with an
 * object map: the object of `obj`'s type that the key maps to. Only a named map of the table
 * (declared `type KEY : counter`); nft's anonymous object maps are not built yet.
 */
export function parseObjMap(p: KeyedParser, obj: ObjType, start: At): MarkMapStmt {
  const key = parseConcat(p, parsePart(p, false), false);
  p.expectWord("'map' and @name of an object map (or ' . ' and another key part)", 'map');
  const r = p.peek();
  if (r.kind === 'word' && r.text.startsWith('@')) return { t: 'markmap', target: 'meta', obj, key, rhs: parseNamed(p), ...start };
  if (r.kind === 'punct' && r.text === '{') return { t: 'markmap', target: 'meta', obj, key, rhs: parseAnon(p, key, 'obj'), ...start };
  return p.fail(r, `@name of a map of ${obj} objects, or { key : "name", … }`);
}

// ---- types -----------------------------------------------------------------------------

/** nft datatype ids used here. */
const TYPE_INTEGER = 4, TYPE_IPV4 = 7, TYPE_IPV6 = 8, TYPE_SERVICE = 13;
const TYPE_NAMES: Record<number, string> = {
  4: 'integer', 7: 'ipv4_addr', 8: 'ipv6_addr', 12: 'inet_proto', 13: 'inet_service', 19: 'mark', 41: 'ifname',
  [DATA_VERDICT]: 'verdict', 1: 'verdict', 2: 'nf_proto', 5: 'string', 6: 'lladdr', 9: 'ether_addr', 10: 'ether_type', 15: 'tcp_flag', 20: 'iface_index',
};

/** A datatype id (possibly a concatenation) as nft names it. */
export function typeName(type: number, _concat?: number): string {
  if (TYPE_NAMES[type] !== undefined) return TYPE_NAMES[type]!;
  const parts: number[] = [];
  let t = type;
  while (t > 0 && parts.length < 8) { parts.unshift(t % 64); t = Math.floor(t / 64); }
  if (parts.length <= 1) return TYPE_NAMES[type] ?? `type ${type}`;
  return parts.map((x) => TYPE_NAMES[x] ?? `type ${x}`).join(' . ');
}

function fieldTypeofTlvs(f: Field): Hex | undefined {
  return f.set?.key ? typeofTlvs(f.set.key) : undefined;
}

function partDesc(part: KeyPart, fail: Fail): KeyPartDesc {
  if (part.p === 'gen') {
    const g = part.gen;
    // a set keyed by numgen describes it (mode, modulus, offset)
    const desc = typeofOfGen(g);
    return {
      keyType: TYPE_INTEGER, len: 4, byteorder: 1, hostInt: true, hton: { len: 4, size: 4 },
      ...(desc?.expr === 'numgen' ? { typeofTlvs: typeofTlvs(desc) } : {}),
    };
  }
  const f = part.field;
  if (!f.set) return fail(part, KEY_PART, `${f.name} cannot be a set or map key`);
  const desc = fieldTypeofTlvs(f);
  const d: KeyPartDesc = { keyType: f.set.keyType, len: f.len, byteorder: f.set.byteorder, ...(desc ? { typeofTlvs: desc } : {}) };
  // the conversions measured with nft 1.0.6: 32-bit values (mark, ct mark) and meta l4proto
  if (f.set.byteorder === 1 && f.type !== 'ifname') {
    d.hostInt = true;
    if (f.len === 4 || f.name === 'meta l4proto') d.hton = { len: f.len, size: f.len === 1 ? 2 : f.len };
  }
  return d;
}

/** How nft describes a generator a set is keyed by (numgen, symhash); undefined for jhash, whose description nft cannot read back. */
function typeofOfGen(g: Gen): KeyTypeof | undefined {
  if (g.g === 'numgen') return { expr: 'numgen', mode: g.mode === 'inc' ? 0 : 1, mod: g.mod, offset: g.offset ?? 0 };
  if (g.g === 'symhash') return { expr: 'hash', type: 1, mod: g.mod, offset: g.offset ?? 0 };
  return undefined;
}

/**
 * What a named set's `typeof` part is (one key expression: a field, numgen or symhash): its key
 * type, length and byte order, and nft's description of it; a reason where nft's is not one.
 */
export function typeofOfPart(part: KeyPart): { keyType: number; len: number; byteorder: number; key: KeyTypeof } | string {
  if (part.p === 'gen') {
    const key = typeofOfGen(part.gen);
    // (nft 1.0.6 lists `typeof jhash ip saddr mod 2` as `typeof jhash `, which it cannot read)
    return key ? { keyType: TYPE_INTEGER, len: 4, byteorder: 1, key } : 'nft 1.0.6 cannot read back the typeof it writes for jhash';
  }
  const f = part.field;
  if (!f.set?.key) return `${f.name} cannot be a set key described by typeof`;
  return { keyType: f.set.keyType, len: f.len, byteorder: f.set.byteorder, key: f.set.key };
}

export function keyOf(parts: KeyPart[], fail: Fail): KeyDesc {
  return keyDesc(parts.map((p) => partDesc(p, fail)));
}

/** Every field a key loads (with the hash inputs), for protocol dependencies. */
export function keyFields(parts: readonly KeyPart[]): { field: Field; at: At }[] {
  const out: { field: Field; at: At }[] = [];
  for (const p of parts) {
    if (p.p === 'field') out.push({ field: p.field, at: p });
    else if (p.gen.g === 'jhash') out.push(...keyFields(p.gen.of));
  }
  return out;
}

// ---- linearization ------------------------------------------------------------------------

/** A register for 32-bit word `w` of the register file: the 16-byte name when aligned, as nft sends it. */
export function regOf(w: number): number {
  return w % 4 === 0 ? 1 + w / 4 : 8 + w;
}

/** Word of a register number (inverse of regOf). */
export function wordOf(r: number | undefined): number | undefined {
  if (r === undefined) return undefined;
  if (r >= 1 && r <= 4) return (r - 1) * 4;
  if (r >= 8 && r <= 23) return r - 8;
  return undefined;
}

export interface KeyedContext {
  family: Family;
  table: string;
  /** The table's named sets and maps. */
  sets?: ReadonlyMap<string, NftSet>;
  fail: Fail;
  /** Loads `field` (full length) into register 1 (the caller's loadExpr). */
  load: (field: Field) => Expr;
  /** Adds an anonymous set or map built with the id given; returns its lookup name and id. */
  addSet: (build: (id: number) => NftSet) => { name: string; setId: number };
  /** Statements as nft lists them, for a refusal's message (render.ts's renderStatements). */
  statementsText: (exprs: readonly StatefulExpr[]) => string;
}

/**
 * Loads the key's parts into consecutive registers from word `w0`, as nft does; for a
 * concatenated interval key (`toNet`), host-order parts are converted to network order.
 */
function emitKey(parts: readonly KeyPart[], w0: number, out: Expr[], kc: KeyedContext, toNet?: KeyDesc): void {
  let w = w0;
  for (const [i, p] of parts.entries()) {
    const dreg = regOf(w);
    if (p.p === 'field') {
      out.push({ ...kc.load(p.field), dreg } as Expr);
      if (p.mask !== undefined) {
        out.push({ kind: 'bitwise', sreg: dreg, dreg, len: p.field.len, op: 'bool', mask: p.mask, xor: zeroHex(p.field.len) });
      }
      // a bit field alone (ip dscp, ip hdrlength, ip6 flowlabel): its bytes masked, the values in place
      const m = parts.length === 1 ? fieldMask(p.field) : undefined;
      if (m !== undefined) {
        out.push({ kind: 'bitwise', sreg: dreg, dreg, len: p.field.len, op: 'bool', mask: bigToHex(m, p.field.len), xor: zeroHex(p.field.len) });
      }
      const h = toNet?.parts[i]?.hton;
      if (h) out.push({ kind: 'byteorder', sreg: dreg, dreg, op: 'hton', len: h.len, size: h.size });
      w += Math.ceil(p.field.len / 4);
      continue;
    }
    const g = p.gen;
    if (g.g === 'numgen') {
      out.push({ kind: 'numgen', dreg, modulus: g.mod, type: g.mode === 'inc' ? 0 : 1, offset: g.offset ?? 0 });
    } else if (g.g === 'jhash') {
      // the hash input goes into the next free 16-byte register after the result's
      emitKey(g.of, w + 4, out, kc);
      const e: Expr = { kind: 'hash', sreg: regOf(w + 4), dreg, len: keyOf(g.of, kc.fail).keyLen, modulus: g.mod, type: 0 };
      if (g.seed !== undefined) e.seed = g.seed;
      if (g.offset) e.offset = g.offset;
      out.push(e);
    } else {
      const e: Expr = { kind: 'hash', dreg, modulus: g.mod, type: 1 };
      if (g.offset) e.offset = g.offset;
      out.push(e);
    }
    const h = toNet?.parts[i]?.hton;
    if (h) out.push({ kind: 'byteorder', sreg: dreg, dreg, op: 'hton', len: h.len, size: h.size });
    w += 1;
  }
}

function namedSet(rhs: Extract<SetRhs, { k: 'named' }>, kc: KeyedContext): NftSet {
  const s = kc.sets?.get(rhs.name);
  if (!s) {
    return kc.fail(rhs, `a set or map of table ${kc.table}${kc.sets?.size ? ` (${[...kc.sets.keys()].slice(0, 8).join(', ')})` : ''}`,
      `set '${rhs.name}' does not exist`);
  }
  return s;
}

/** The key when `s` is an interval set (its host-order integer parts are converted), else undefined. */
function toNet(s: NftSet, key: KeyDesc, rhs: At, kc: KeyedContext): KeyDesc | undefined {
  if (!(s.flags & SET_F.INTERVAL)) return undefined;
  const bad = key.parts.findIndex((p) => p.hostInt && !p.hton);
  if (bad >= 0) {
    kc.fail(rhs, 'a set without the interval flag, or no host-order part in the key',
      `interval sets keyed by a host byte order part (part ${bad + 1}) are not supported`);
  }
  return key;
}

function checkKey(s: NftSet, key: KeyDesc, rhs: At, kc: KeyedContext): void {
  if (s.keyType !== key.keyType || s.keyLen !== key.keyLen) {
    kc.fail(rhs, `a set keyed by ${typeName(key.keyType, key.concat ? 1 : 0)} (${key.keyLen} bytes)`,
      `datatype mismatch: ${s.flags & SET_F.MAP ? 'map' : 'set'} '${s.name}' is keyed by ${typeName(s.keyType)} (${s.keyLen} bytes)`);
  }
}

function verdictData(d: MapData): KeyedElem['data'] {
  if (d.d !== 'verdict') return undefined;
  return d.chain !== undefined ? { verdict: d.verdict, chain: d.chain } : { verdict: d.verdict };
}

function keyedElems(elems: readonly KeyElem[], data: (e: KeyElem) => KeyedElem['data']): KeyedElem[] {
  return elems.map((e) => {
    const k: KeyedElem = { at: e, parts: e.parts };
    if (e.catchall) k.catchall = true;
    const d = data(e);
    if (d) k.data = d;
    return k;
  });
}

/** A map element's single value, in hex (the map data of mark, zone, dup and redirect maps). */
function valueData(e: KeyElem): KeyedElem['data'] {
  return { data: (e.data as Extract<MapData, { d: 'value' }>).parts.map((x) => (x as { hex: string }).hex)[0]! };
}

/**
 * Adds the rule's anonymous set or map of `elems` and loads its key into register 1 (in network
 * order where the built set's key needs it): what every lookup into an anonymous set starts with.
 */
function anonSetKey(parts: readonly KeyPart[], key: KeyDesc, rhs: At, elems: KeyedElem[],
  map: MapDataDesc | undefined, out: Expr[], kc: KeyedContext, w0 = 0): { name: string; setId: number } {
  let built: NftSet | undefined;
  const ref = kc.addSet((id) => (built = buildKeyedSet(key, elems, map, { family: kc.family, table: kc.table }, id, kc.fail)));
  emitKey(parts, w0, out, kc, toNet(built!, key, rhs, kc));
  return ref;
}

export function linearizeKeyed(st: KeyedStmt, out: Expr[], kc: KeyedContext): void {
  const key = keyOf(st.key, kc.fail);
  const neq = st.op === 'neq';
  const rhs = st.rhs;
  if (rhs.k === 'value') {
    emitKey(st.key, 0, out, kc);
    out.push({ kind: 'cmp', sreg: 1, op: neq ? 'neq' : 'eq', data: (rhs.elem as { hex: string }).hex });
    return;
  }
  if (rhs.k === 'named') {
    const s = namedSet(rhs, kc);
    checkKey(s, key, rhs, kc);
    if (st.vmap && (!(s.flags & SET_F.MAP) || s.dataType !== DATA_VERDICT)) {
      kc.fail(rhs, 'a verdict map (type … : verdict)', s.flags & SET_F.MAP
        ? `map '${s.name}' maps to ${typeName(s.dataType ?? 0)}, not to verdicts` : `'${s.name}' is a set, not a map`);
    }
    emitKey(st.key, 0, out, kc, toNet(s, key, rhs, kc));
    const l: LookupExpr = { kind: 'lookup', sreg: 1, set: s.name, flags: neq ? 1 : 0 };
    if (st.vmap) l.dreg = 0;
    out.push(orderLookup(l));
    return;
  }
  if (!st.vmap && !key.concat && st.key[0]!.p === 'gen' && st.key[0]!.gen.g !== 'numgen') {
    kc.fail(rhs, 'a value, @set or vmap', `anonymous sets keyed by ${st.key[0]!.gen.g} are not supported`);
  }
  const elems = keyedElems(rhs.elems, (e) => (e.data ? verdictData(e.data) : undefined));
  const map: MapDataDesc | undefined = st.vmap ? { kind: 'verdict' } : undefined;
  const ref = anonSetKey(st.key, key, rhs, elems, map, out, kc);
  const l: LookupExpr = { kind: 'lookup', sreg: 1, set: ref.name, setId: ref.setId, flags: neq ? 1 : 0 };
  if (st.vmap) l.dreg = 0;
  out.push(orderLookup(l));
}

function orderLookup(l: LookupExpr): LookupExpr {
  // the field order the decoder produces (sreg, dreg, set, setId, flags)
  const o: LookupExpr = { kind: 'lookup', sreg: l.sreg } as LookupExpr;
  if (l.dreg !== undefined) o.dreg = l.dreg;
  o.set = l.set;
  if (l.setId !== undefined) o.setId = l.setId;
  o.flags = l.flags ?? 0;
  return o;
}

/** `add/update @set { KEY [timeout T] }`: the key into register 1, then the dynset. */
export function linearizeDynset(st: DynsetStmt, out: Expr[], kc: KeyedContext): void {
  if (st.meter) return linearizeMeter(st, out, kc);
  const s = namedSet(st.set, kc);
  // a constant is a value of the set's key part at its place
  const setKey = st.keyItems ? keyTypeFromKernel(s.keyType, s.keyLen) : undefined;
  const constPart = (c: DynsetConst, i: number) => {
    const dt = setKey?.parts.length === st.keyItems!.length ? setKey.parts[i] : undefined;
    if (!dt) return kc.fail(c, 'a field such as ip daddr', `a constant in the key of set '${s.name}' (keyed by ${typeName(s.keyType)}) is not supported`);
    const hex = dt.parse(c.constant);
    if (hex === undefined) return kc.fail(c, dt.expected, `'${c.constant}' is not ${dt.expected}`);
    return { dt, hex };
  };
  const key = st.keyItems
    ? keyDesc(st.keyItems.map((x, i) => ('constant' in x ? (({ dt }) => ({ keyType: dt.id, len: dt.len, byteorder: dt.byteorder }))(constPart(x, i)) : partDesc(x, kc.fail))))
    : keyOf(st.key, kc.fail);
  checkKey(s, key, st.set, kc);
  if (s.flags & (SET_F.ANONYMOUS | SET_F.CONSTANT)) kc.fail(st.set, 'a set that is not constant', `set '${s.name}' is constant`);
  if (s.flags & SET_F.OBJECT) kc.fail(st.set, 'a set or a map to values', `'${s.name}' is an object map`);
  const map = (s.flags & SET_F.MAP) !== 0;
  if (map && s.dataType === DATA_VERDICT) kc.fail(st.set, 'a map to values', `'${s.name}' is a verdict map (a rule adds no verdicts)`);
  if (map && st.data === undefined) kc.fail(st.set, `a set, or ': DATA' for map '${s.name}'`, `'${s.name}' is a map: give the data, ${st.op} @${s.name} { KEY : DATA }`);
  if (!map && st.data !== undefined) kc.fail(Array.isArray(st.data) ? st.data[0]! : st.data, "'}': a set's element has no data", `'${s.name}' is a set, not a map`);
  if (s.flags & SET_F.INTERVAL) kc.fail(st.set, 'a set without the interval flag', `set '${s.name}' has the interval flag`);
  if (st.timeout !== undefined && !(s.flags & SET_F.TIMEOUT)) {
    kc.fail(st.timeoutAt!, 'no timeout, or a set with the timeout flag', `set '${s.name}' has no timeout flag`);
  }
  if (st.keyItems) {
    let w = 0;
    st.keyItems.forEach((x, i) => {
      if ('constant' in x) out.push({ kind: 'immediate', dreg: regOf(w), data: constPart(x, i).hex });
      else emitKey([x], w, out, kc);
      w += Math.ceil(key.parts[i]!.len / 4);
    });
  } else {
    emitKey(st.key, 0, out, kc);
  }
  const e: DynsetExpr = { kind: 'dynset', sregKey: 1, op: st.op === 'add' ? 0 : 1, set: s.name };
  if (st.timeout !== undefined) e.timeout = st.timeout;
  if (st.stmts) {
    if (st.stmts.length > MAX_STATEFUL_EXPRS) kc.fail(st.stmtsAt!, `at most ${MAX_STATEFUL_EXPRS} statements`, `${st.stmts.length} statements (the kernel keeps at most ${MAX_STATEFUL_EXPRS} per element)`);
    const own = s.exprs;
    if (own?.length) {
      // The kernel then gives each new element the set's statements and dumps the dynset without its own: nft
      // sends them, but nfkeeper could never see them again, so they must be the set's.
      if (statefulKey(own) !== statefulKey(st.stmts)) {
        kc.fail(st.stmtsAt!, `the statements of set '${s.name}' (${kc.statementsText(own)}), or none`,
          `set '${s.name}' has statements of its own: the kernel keeps no others for a rule's ${st.op}`);
      }
    } else {
      e.exprs = st.stmts;
      // NFT_DYNSET_F_EXPR: nft flags a list of more than one
      if (st.stmts.length > 1) e.flags = 2;
    }
  }
  if (st.data !== undefined) {
    // the data goes into the 16-byte register after the key's, as nft allocates them
    const w = Math.ceil(key.keyLen / 16) * 4;
    const wrong = (at: At, what: string) => kc.fail(at, `data of ${typeName(s.dataType ?? 0)} (${s.dataLen} bytes)`, `datatype mismatch: map '${s.name}' maps to ${typeName(s.dataType ?? 0)}, not ${what}`);
    if (Array.isArray(st.data)) {
      const d = keyOf(st.data, kc.fail);
      if (d.keyType !== s.dataType || d.keyLen !== s.dataLen) wrong(st.data[0]!, `${typeName(d.keyType, d.concat ? 1 : 0)} (${d.keyLen} bytes)`);
      emitKey(st.data, w, out, kc);
    } else {
      const dt = keyTypeFromKernel(s.dataType ?? 0, s.dataLen ?? 0);
      if (!dt || dt.parts.length !== 1) return kc.fail(st.data, 'an expression', `a constant of map '${s.name}''s data type ${typeName(s.dataType ?? 0)} is not supported`);
      const hex = dt.parts[0]!.parse(st.data.constant);
      if (hex === undefined) return kc.fail(st.data, dt.parts[0]!.expected, `'${st.data.constant}' is not ${dt.parts[0]!.expected}`);
      out.push({ kind: 'immediate', dreg: regOf(w), data: hex });
    }
    e.sregData = regOf(w);
  }
  out.push(e);
}

const TYPE_MARK = 19;

/** `meta/ct mark set GEN` or `… set KEY map …`: the value (or the map's result) into register 1, then the set. */
export function linearizeMarkMap(st: MarkMapStmt, out: Expr[], kc: KeyedContext): void {
  const key = keyOf(st.key, kc.fail);
  if (st.obj !== undefined && st.rhs?.k === 'anon') {
    // an anonymous object map, as nft builds it (__objmap%d)
    const elems = keyedElems(st.rhs.elems, (e) => (e.data?.d === 'obj' ? { objref: e.data.name } : undefined));
    const ref = anonSetKey(st.key, key, st.rhs, elems, { kind: 'object', objType: OBJ_TYPE[st.obj] }, out, kc);
    out.push({ kind: 'objref', sreg: 1, set: ref.name, setId: ref.setId });
    return;
  }
  if (st.obj !== undefined) {
    const rhs = st.rhs as Extract<SetRhs, { k: 'named' }>;
    const s = namedSet(rhs, kc);
    checkKey(s, key, rhs, kc);
    if (!(s.flags & SET_F.OBJECT) || s.objType !== OBJ_TYPE[st.obj]) {
      kc.fail(rhs, `a map to ${st.obj} objects (type … : ${st.obj})`, `'${s.name}' is not a map of ${st.obj} objects`);
    }
    emitKey(st.key, 0, out, kc, toNet(s, key, rhs, kc));
    out.push({ kind: 'objref', sreg: 1, set: s.name });
    return;
  }
  if (st.store) {
    // `ip daddr set KEY map …`: the map's value of the field's type, then the store nft writes for the field
    const f = st.store;
    const desc: MapDataDesc = { kind: 'value', dataType: f.set!.keyType, dataLen: f.len, concat: false, byteorder: f.set!.byteorder };
    let lookup: Expr;
    if (st.rhs!.k === 'named') {
      const s = namedSet(st.rhs!, kc);
      checkKey(s, key, st.rhs!, kc);
      if (!(s.flags & SET_F.MAP) || s.dataType !== desc.dataType || s.dataLen !== desc.dataLen) {
        kc.fail(st.rhs!, `a map to ${typeName(desc.dataType)}`, s.flags & SET_F.MAP
          ? `map '${s.name}' maps to ${typeName(s.dataType ?? 0, 1)}, not ${typeName(desc.dataType)}` : `'${s.name}' is a set, not a map`);
      }
      emitKey(st.key, 0, out, kc, toNet(s, key, st.rhs!, kc));
      lookup = { kind: 'lookup', sreg: 1, dreg: 1, set: s.name, flags: 0 };
    } else {
      const elems = keyedElems(st.rhs!.elems, valueData);
      const ref = anonSetKey(st.key, key, st.rhs!, elems, desc, out, kc);
      lookup = { kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 };
    }
    out.push(lookup, payloadSetExprs(f, zeroHex(f.len))!.at(-1)!);
    return;
  }
  if (st.zone) {
    // `ct zone set KEY map { k : N }`: a map to 16-bit integers in host order
    const rhs = st.rhs as Extract<SetRhs, { k: 'anon' }>;
    const desc: MapDataDesc = { kind: 'value', dataType: TYPE_INTEGER, dataLen: 2, concat: false, byteorder: 1 };
    const elems = keyedElems(rhs.elems, valueData);
    const ref = anonSetKey(st.key, key, rhs, elems, desc, out, kc);
    out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 }, { kind: 'ct', key: 'zone', sreg: 1 });
    return;
  }
  if (!st.rhs) {
    emitKey(st.key, 0, out, kc);
  } else if (st.rhs.k === 'named') {
    const s = namedSet(st.rhs, kc);
    checkKey(s, key, st.rhs, kc);
    if (!(s.flags & SET_F.MAP) || s.dataType !== TYPE_MARK) {
      kc.fail(st.rhs, 'a map to mark (type … : mark)', s.flags & SET_F.MAP
        ? `map '${s.name}' maps to ${typeName(s.dataType ?? 0, 1)}, not to marks` : `'${s.name}' is a set, not a map`);
    }
    emitKey(st.key, 0, out, kc, toNet(s, key, st.rhs, kc));
    out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: s.name, flags: 0 });
  } else {
    const desc: MapDataDesc = { kind: 'value', dataType: TYPE_MARK, dataLen: 4, concat: false, byteorder: 1 };
    const elems = keyedElems(st.rhs.elems, valueData);
    const ref = anonSetKey(st.key, key, st.rhs, elems, desc, out, kc);
    out.push({ kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 });
  }
  out.push(st.target === 'ct' ? { kind: 'ct', key: 'mark', sreg: 1 } : { kind: 'meta', key: 'mark', sreg: 1 });
}

/** The address datatype and whether a port follows, for a map's NAT data. */
function natData(fam: 'ip' | 'ip6', withPort: boolean): { dataType: number; dataLen: number } {
  const a = fam === 'ip' ? TYPE_IPV4 : TYPE_IPV6;
  const alen = fam === 'ip' ? 4 : 16;
  return withPort ? { dataType: a * 64 + TYPE_SERVICE, dataLen: alen + 4 } : { dataType: a, dataLen: alen };
}

/** Whether a NAT map's targets carry ports (checked against the family); undefined if unknown yet. */
export function natMapHasPorts(map: NatMap, fam: 'ip' | 'ip6', sets: ReadonlyMap<string, NftSet> | undefined,
  table: string, fail: Fail): boolean {
  const rhs = map.rhs;
  if (rhs.k === 'named') {
    const s = sets?.get(rhs.name);
    if (!s) {
      return fail(rhs, `a map of table ${table}`, `map '${rhs.name}' does not exist`);
    }
    const plain = natData(fam, false), ported = natData(fam, true);
    if (!(s.flags & SET_F.MAP) || (s.dataType !== plain.dataType && s.dataType !== ported.dataType)) {
      fail(rhs, `a map to ${typeName(plain.dataType)} or ${typeName(ported.dataType, 1)} for ${fam} NAT`,
        s.flags & SET_F.MAP ? `map '${s.name}' maps to ${typeName(s.dataType ?? 0, 1)}` : `'${s.name}' is a set, not a map`);
    }
    return s.dataType === ported.dataType;
  }
  let ports: boolean | undefined;
  let span: boolean | undefined;
  for (const e of rhs.elems) {
    const d = e.data as Extract<MapData, { d: 'value' }>;
    const a = d.parts[0]!;
    if ((spanOf(a)[0].length === 32) !== (fam === 'ip6')) {
      fail(a, fam === 'ip6' ? 'an IPv6 address' : 'an IPv4 address', `address family mismatch for ${fam} NAT`);
    }
    const has = d.parts.length > 1;
    if (ports !== undefined && has !== ports) {
      fail(d, ports ? "'address . port' like the other elements" : 'an address alone, like the other elements',
        'every element of a NAT map maps to the same kind of target');
    }
    ports = has;
    // the kernel takes one data length per map: ranges (and prefixes) in every element or in none
    const sp = d.parts.some((x) => x.k !== 'value');
    if (span !== undefined && sp !== span) {
      fail(d, span ? 'a range or prefix like the other elements' : 'single values like the other elements',
        'every element of a NAT map maps to the same kind of target (ranges in all or in none)');
    }
    span = sp;
    if (sp && has && fam === 'ip6') {
      fail(d, 'an IPv6 address range without ports, or single values', 'the kernel refuses IPv6 address . port ranges as map data (ENODATA)');
    }
  }
  return ports ?? false;
}

/** Whether an anonymous NAT map's data are ranges (nft's interval data: low and high values). */
function natMapSpans(map: NatMap): boolean {
  return map.rhs.k === 'anon' && map.rhs.elems.some((e) => (e.data as Extract<MapData, { d: 'value' }>).parts.some((x) => x.k !== 'value'));
}

/** A NAT map's key and its lookup into register 1 (the key loaded there first). */
function natMapLookup(map: NatMap, key: KeyDesc, fam: 'ip' | 'ip6', ports: boolean, span: boolean, out: Expr[], kc: KeyedContext): LookupExpr {
  if (map.rhs.k === 'named') {
    const s = namedSet(map.rhs, kc);
    checkKey(s, key, map.rhs, kc);
    emitKey(map.key, 0, out, kc, toNet(s, key, map.rhs, kc));
    return { kind: 'lookup', sreg: 1, dreg: 1, set: s.name, flags: 0 };
  }
  const d = natData(fam, ports);
  const desc: MapDataDesc = { kind: 'value', ...d, concat: ports, byteorder: 2 };
  if (span) {
    desc.dataLen *= 2;
    desc.interval = true;
  }
  const elems = keyedElems(map.rhs.elems, (e) => {
    const spans = (e.data as Extract<MapData, { d: 'value' }>).parts.map(spanOf);
    const lo = concatHex(spans.map((x) => x[0]), ports);
    return { data: span ? lo + concatHex(spans.map((x) => x[1]), ports) : lo };
  });
  const ref = anonSetKey(map.key, key, map.rhs, elems, desc, out, kc);
  return { kind: 'lookup', sreg: 1, dreg: 1, set: ref.name, setId: ref.setId, flags: 0 };
}

/**
 * `snat/dnat to ADDRESS|KEY map … : PORT|KEY map …` (an address map with a port after it, or a
 * port map after an address): the address into register 1 (a lookup, or immediates), the port into
 * the next 16-byte register (a lookup keyed there, or immediates), as nft's netlink_gen_nat_stmt.
 */
export function linearizeNatSplit(st: NatStmt, fam: 'ip' | 'ip6', out: Expr[], kc: KeyedContext): void {
  // (the kernel dumps each max register, the min's when none was given)
  const e: NatExpr = { kind: 'nat', type: st.type, family: fam, regAddrMin: 1, regAddrMax: 1 };
  let w = 4;
  if (st.map) {
    const map = st.map;
    if (natMapHasPorts(map, fam, kc.sets, kc.table, kc.fail)) {
      kc.fail(map.rhs, `a map to ${fam === 'ip' ? 'ipv4_addr' : 'ipv6_addr'} (the port comes after ':')`, 'the address map gives ports too');
    }
    if (natMapSpans(map)) kc.fail(map.rhs, "single addresses (ranges only without a port after ':')", 'address ranges from a map with a port after it are not supported');
    out.push(natMapLookup(map, keyOf(map.key, kc.fail), fam, false, false, out, kc));
  } else {
    const a = st.addr!;
    out.push({ kind: 'immediate', dreg: 1, data: a.lo });
    if (a.hi !== undefined) {
      out.push({ kind: 'immediate', dreg: 2, data: a.hi });
      e.regAddrMax = 2;
      w = 8;
    }
  }
  const reg = regOf(w);
  if (st.portMap) {
    const map = st.portMap;
    if (map.rhs.k !== 'anon') return kc.fail(map.rhs, "'{ key : port, … }'", 'a port map after the address is anonymous');
    const desc: MapDataDesc = { kind: 'value', dataType: TYPE_SERVICE, dataLen: 2, concat: false, byteorder: 2 };
    const ref = anonSetKey(map.key, keyOf(map.key, kc.fail), map.rhs, keyedElems(map.rhs.elems, valueData), desc, out, kc, w);
    out.push({ kind: 'lookup', sreg: reg, dreg: reg, set: ref.name, setId: ref.setId, flags: 0 });
    e.regProtoMin = reg;
    e.regProtoMax = reg;
  } else {
    const p = st.port!;
    out.push({ kind: 'immediate', dreg: reg, data: u16Be(p.lo) });
    e.regProtoMin = reg;
    e.regProtoMax = reg;
    if (p.hi !== undefined) {
      out.push({ kind: 'immediate', dreg: regOf(w + 4), data: u16Be(p.hi) });
      e.regProtoMax = regOf(w + 4);
    }
  }
  e.flags = st.flags | NAT_RANGE.MAP_IPS | NAT_RANGE.PROTO_SPECIFIED;
  out.push(e);
}

/** `snat/dnat [ip|ip6] to KEY map …`: lookup into register 1, nat from it (address, then the port). */
export function linearizeNatMap(st: NatStmt, fam: 'ip' | 'ip6', out: Expr[], kc: KeyedContext): void {
  const map = st.map!;
  const key = keyOf(map.key, kc.fail);
  const ports = natMapHasPorts(map, fam, kc.sets, kc.table, kc.fail);
  const span = natMapSpans(map);
  if (st.concat && !ports) {
    kc.fail(map.rhs, `a map to ${fam === 'ip' ? 'ipv4_addr' : 'ipv6_addr'} . inet_service ('addr . port' targets)`,
      `invalid data type, expected concatenation of (${fam === 'ip' ? 'IPv4' : 'IPv6'} address, internet network service)`);
  }
  if (ports && !map.l4Known) {
    kc.fail(map.rhs, 'a transport protocol match before it or in the key (e.g. ip daddr . tcp dport)',
      'transport protocol mapping is only valid after transport protocol match');
  }
  out.push(natMapLookup(map, key, fam, ports, span, out, kc));
  // the data's words: address, [port], then with ranges the high address and [port] (nft's layout)
  const aw = fam === 'ip' ? 1 : 4;
  const e: NatExpr = { kind: 'nat', type: st.type, family: fam, regAddrMin: 1,
    regAddrMax: span ? regOf(aw + (ports ? 1 : 0)) : 1 };
  let flags = st.flags | NAT_RANGE.MAP_IPS | (st.netmap ? NAT_RANGE.NETMAP : 0);
  if (ports) {
    e.regProtoMin = regOf(aw);
    e.regProtoMax = span ? regOf(2 * aw + 1) : regOf(aw);
    flags |= NAT_RANGE.PROTO_SPECIFIED;
  }
  e.flags = flags;
  out.push(e);
}


// ---- rendering ---------------------------------------------------------------------------

type LoadExprT = Extract<Expr, { kind: 'payload' | 'meta' | 'ct' | 'fib' | 'osf' | 'xfrm' | 'rt' }>;

/** The address or port field a whole-field store (`payload write reg 1`) writes, as nft writes it for `FIELD set …`. */
function storedField(st: Extract<Expr, { kind: 'payload' }>): Field | undefined {
  for (const proto of ['ip', 'ip6', 'tcp', 'udp', 'udplite', 'sctp', 'dccp'] as Proto[]) {
    const m = matchPayloadSet(proto, st, zeroHex(st.len), undefined);
    if (m && (m.field.type === 'ipv4' || m.field.type === 'ipv6' || m.field.type === 'port')) return m.field;
  }
  return undefined;
}

/** A key as the kernel holds it: loads (or a generator) then a lookup, a compare, or a NAT map. */
export interface KeyedGroup {
  /** Per key part: a load, or a generator (a jhash with its input loads). */
  parts: ({ k: 'load'; load: LoadExprT; hton?: boolean; bits?: Hex }
    /** A constant in a dynset's key (`ip saddr . 22`). */
    | { k: 'imm'; data: Hex }
    | { k: 'gen'; e: Extract<Expr, { kind: 'numgen' | 'hash' }>; of: LoadExprT[]; hton?: boolean })[];
  lookup?: LookupExpr;
  cmp?: Extract<Expr, { kind: 'cmp' }>;
  nat?: NatExpr;
  dynset?: Extract<Expr, { kind: 'dynset' }>;
  /** The dynset's map data: the loads, or the value, in the register after the key. */
  dynData?: { loads: LoadExprT[] } | { imm: Hex };
  /** `meta/ct mark set` from the generator or the map's result. */
  markset?: 'meta' | 'ct' | 'zone';
  /** `ip daddr set KEY map …`: the field the map's result is stored into. */
  store?: Field;
  /** `redirect to :KEY map …`. */
  redir?: Extract<Expr, { kind: 'redir' }>;
  /** `dup to KEY map … [device …]`: the device's index (register bytes). */
  dup?: { dev?: Hex };
  /** `counter name KEY map @m` (and the other objref statements): `lookup` stands for the objref's map. */
  objmap?: true;
}

function isLoadExpr(e: Expr | undefined): e is LoadExprT {
  if (!e) return false;
  if (e.kind === 'payload' || e.kind === 'meta' || e.kind === 'ct') return e.dreg !== undefined && e.sreg === undefined;
  if (e.kind === 'rt') return e.dreg !== undefined && typeof e.key === 'string';
  return e.kind === 'fib' || e.kind === 'osf' || e.kind === 'xfrm';
}

function loadWords(e: LoadExprT): number {
  if (e.kind === 'payload') return Math.ceil(e.len / 4);
  if (e.kind === 'meta' && (e.key === 'iifname' || e.key === 'oifname' || e.key === 'iifkind' || e.key === 'oifkind' || e.key === 'sdifname')) return 4;
  if (e.kind === 'osf' || (e.kind === 'xfrm' && (e.key === 2 || e.key === 4)) || (e.kind === 'rt' && e.key === 'nexthop6')) return 4;
  if (e.kind === 'ct' && (e.key === 'saddr' || e.key === 'daddr' || e.key === 'label' || e.key === 'ip6 saddr' || e.key === 'ip6 daddr')) return 4;
  return 1;
}

/** Loads into consecutive words from `w0`, from exprs[i]; `hton` also takes a byteorder after a load. */
function loadRun(exprs: readonly Expr[], i: number, w0: number, hton = false): { load: LoadExprT; hton: boolean }[] {
  const out: { load: LoadExprT; hton: boolean }[] = [];
  let w = w0;
  for (let j = i; j < exprs.length; j++) {
    const e = exprs[j];
    if (!isLoadExpr(e) || wordOf(e.dreg) !== w) break;
    const b = exprs[j + 1];
    const conv = hton && b?.kind === 'byteorder' && b.op === 'hton' && b.sreg === e.dreg && b.dreg === e.dreg;
    out.push({ load: e, hton: conv });
    if (conv) j++;
    w += loadWords(e);
  }
  return out;
}

function runLength(run: readonly { hton: boolean }[]): number {
  return run.reduce((n, r) => n + (r.hton ? 2 : 1), 0);
}

/**
 * A dynset whose key holds constants (`add @m { ip saddr . 22 : 1 }`): loads and immediates into
 * consecutive words from register 1, then the data and the dynset. Undefined when there is no
 * immediate in the key (groupKeyed's general case).
 */
function dynsetWithConstants(exprs: readonly Expr[], i: number): { g: KeyedGroup; n: number } | undefined {
  const parts: KeyedGroup['parts'] = [];
  let w = 0;
  let j = i;
  for (;; j++) {
    const x = exprs[j];
    if (isLoadExpr(x) && wordOf(x.dreg) === w) {
      parts.push({ k: 'load', load: x });
      w += loadWords(x);
    } else if (x?.kind === 'immediate' && x.data !== undefined && wordOf(x.dreg) === w && x.data.length <= 32) {
      parts.push({ k: 'imm', data: x.data });
      w += Math.ceil(x.data.length / 8);
    } else {
      break;
    }
  }
  if (!parts.some((x) => x.k === 'imm')) return undefined;
  const dataW = Math.ceil(w / 4) * 4;
  let dynData: KeyedGroup['dynData'];
  const d0 = exprs[j];
  if (d0?.kind === 'immediate' && d0.data !== undefined && d0.dreg === regOf(dataW) && exprs[j + 1]?.kind === 'dynset') {
    dynData = { imm: d0.data };
    j++;
  } else if (isLoadExpr(d0) && wordOf(d0.dreg) === dataW) {
    const run = loadRun(exprs, j, dataW);
    dynData = { loads: run.map((x) => x.load) };
    j += run.length;
  }
  const c = exprs[j];
  if (c?.kind !== 'dynset' || c.sregKey !== 1 || (dynData === undefined ? c.sregData !== undefined : c.sregData !== regOf(dataW))) return undefined;
  // the last immediate of a key that is all constants would read as the data
  return { g: { parts, dynset: c, ...(dynData ? { dynData } : {}) }, n: j - i + 1 };
}

/**
 * Recognises, at exprs[i], a keyed group the compiler would emit: a concatenation looked up in a
 * set, a load looked up with a result (vmap or NAT map), or a generator (numgen/hash) compared or
 * looked up. Returns the group and how many expressions it spans.
 */
export function groupKeyed(exprs: readonly Expr[], i: number): { g: KeyedGroup; n: number } | undefined {
  const e = exprs[i];
  // Every group but a generator's needs a lookup, dynset or hash after its first load: without one
  // (most rules) there is nothing to build (renderRule asks at every expression).
  if (e?.kind !== 'numgen' && e?.kind !== 'hash') {
    let k = i + 1;
    for (; k < exprs.length; k++) {
      const x = exprs[k]!.kind;
      if (x === 'lookup' || x === 'dynset' || x === 'hash' || x === 'objref') break;
    }
    if (k >= exprs.length) return undefined;
  }
  const withConst = dynsetWithConstants(exprs, i);
  if (withConst) return withConst;
  const parts: KeyedGroup['parts'] = [];
  let j = i;
  if (e?.kind === 'numgen' && e.dreg === 1) {
    parts.push({ k: 'gen', e, of: [] });
    j = i + 1;
  } else if (e?.kind === 'hash' && e.dreg === 1 && e.type === 1 && e.sreg === undefined) {
    parts.push({ k: 'gen', e, of: [] });
    j = i + 1;
  } else if (isLoadExpr(e) && wordOf(e.dreg) === 4) {
    // jhash input at register 2, then the hash into register 1
    const of = loadRun(exprs, i, 4).map((x) => x.load);
    const h = exprs[i + of.length];
    if (h?.kind !== 'hash' || h.type !== 0 || h.sreg !== 2 || h.dreg !== 1) return undefined;
    parts.push({ k: 'gen', e: h, of });
    j = i + of.length + 1;
  } else if (isLoadExpr(e) && e.dreg === 1) {
    const run = loadRun(exprs, i, 0, true);
    for (const l of run) parts.push(l.hton ? { k: 'load', load: l.load, hton: true } : { k: 'load', load: l.load });
    j = i + runLength(run);
    // a bit field alone: its mask before the lookup (emitKey)
    const bw = exprs[j];
    if (run.length === 1 && !run[0]!.hton && bw?.kind === 'bitwise' && bw.sreg === 1 && bw.dreg === 1 && (bw.op ?? 'bool') === 'bool'
      && bw.mask !== undefined && bw.xor !== undefined && /^0*$/.test(bw.xor) && exprs[j + 1]?.kind === 'lookup') {
      (parts[0] as { bits?: Hex }).bits = bw.mask;
      j++;
    }
  } else {
    return undefined;
  }
  const g0 = parts[0];
  const bo = exprs[j];
  if (parts.length === 1 && g0?.k === 'gen' && bo?.kind === 'byteorder' && bo.op === 'hton' && bo.sreg === 1 && bo.dreg === 1) {
    g0.hton = true;
    j++;
  }
  // a map's data after the key (add/update @m { KEY : DATA }): loads or one immediate, from the next 16-byte register
  let dynData: KeyedGroup['dynData'];
  const keyWords = parts.reduce((n, x) => n + (x.k === 'load' ? loadWords(x.load) : 1), 0);
  const dataW = Math.ceil(keyWords / 4) * 4;
  const d0 = exprs[j];
  if (d0?.kind === 'immediate' && d0.data !== undefined && d0.dreg === regOf(dataW) && exprs[j + 1]?.kind === 'dynset') {
    dynData = { imm: d0.data };
    j++;
  } else if (isLoadExpr(d0) && wordOf(d0.dreg) === dataW && dataW > 0) {
    const run = loadRun(exprs, j, dataW);
    if (exprs[j + run.length]?.kind === 'dynset') {
      dynData = { loads: run.map((x) => x.load) };
      j += run.length;
    }
  }
  const c = exprs[j];
  if (c?.kind === 'dynset' && c.sregKey === 1 && parts.every((x) => x.k === 'load')
    && (dynData === undefined ? c.sregData === undefined : c.sregData === regOf(dataW))) {
    return { g: { parts, dynset: c, ...(dynData ? { dynData } : {}) }, n: j - i + 1 };
  }
  if (dynData) return undefined;
  if (c?.kind === 'objref' && c.sreg === 1 && c.set !== undefined && c.name === undefined && parts.every((x) => x.k === 'load')) {
    return { g: { parts, lookup: { kind: 'lookup', sreg: 1, set: c.set, ...(c.setId !== undefined ? { setId: c.setId } : {}) }, objmap: true }, n: j - i + 1 };
  }
  const isMarkSet = (x: Expr | undefined): x is Extract<Expr, { kind: 'meta' | 'ct' }> =>
    (x?.kind === 'meta' || x?.kind === 'ct') && x.key === 'mark' && x.sreg === 1 && x.dreg === undefined;
  if (isMarkSet(c) && parts.length === 1 && g0?.k === 'gen') {
    return { g: { parts, markset: c.kind }, n: j - i + 1 };
  }
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && isMarkSet(exprs[j + 1])) {
    return { g: { parts, lookup: c, markset: (exprs[j + 1] as { kind: 'meta' | 'ct' }).kind }, n: j - i + 2 };
  }
  const rd = exprs[j + 1];
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && rd?.kind === 'redir' && rd.regProtoMin === 1
    && (rd.regProtoMax ?? 1) === 1) {
    return { g: { parts, lookup: c, redir: rd }, n: j - i + 2 };
  }
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && rd?.kind === 'dup' && rd.sregAddr === 1 && rd.sregDev === undefined) {
    return { g: { parts, lookup: c, dup: {} }, n: j - i + 2 };
  }
  const dd = exprs[j + 2];
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && rd?.kind === 'immediate' && rd.dreg === 2 && rd.data?.length === 8
    && dd?.kind === 'dup' && dd.sregAddr === 1 && dd.sregDev === 2) {
    return { g: { parts, lookup: c, dup: { dev: rd.data } }, n: j - i + 3 };
  }
  const z = exprs[j + 1];
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && z?.kind === 'payload' && z.sreg === 1 && z.dreg === undefined) {
    const store = storedField(z);
    if (store) return { g: { parts, lookup: c, store }, n: j - i + 2 };
  }
  if (c?.kind === 'lookup' && c.sreg === 1 && c.dreg === 1 && z?.kind === 'ct' && z.key === 'zone' && z.sreg === 1
    && z.dreg === undefined && z.dir === undefined) {
    return { g: { parts, lookup: c, markset: 'zone' }, n: j - i + 2 };
  }
  if (c?.kind === 'lookup' && c.sreg === 1) {
    // a plain field lookup (also a host-order key nft converts for an anonymous interval set)
    const single = parts.length === 1 && parts[0]!.k === 'load' && (!parts[0]!.hton || c.set.startsWith('__set'));
    if (c.dreg === undefined) {
      if (single) return undefined; // a plain field lookup: render.ts's own form
      return { g: { parts, lookup: c }, n: j - i + 1 };
    }
    if (c.dreg === 0) return { g: { parts, lookup: c }, n: j - i + 1 };
    const nat = exprs[j + 1];
    if (c.dreg === 1 && nat?.kind === 'nat' && nat.regAddrMin === 1) return { g: { parts, lookup: c, nat }, n: j - i + 2 };
    return undefined;
  }
  if (c?.kind === 'cmp' && c.sreg === 1 && (c.op === 'eq' || c.op === 'neq') && parts.length === 1 && parts[0]!.k === 'gen') {
    return { g: { parts, cmp: c }, n: j - i + 1 };
  }
  return undefined;
}

/**
 * A NAT target split in two (linearizeNatSplit): the address from a map (`addr`, rendered as that
 * map's NAT statement) or from immediates the caller holds, then the port from a map (`port`,
 * rendered as redirect's port map) or from immediates (`portRegs`). `n`: the expressions spanned.
 */
export interface NatSplitGroup {
  addr?: KeyedGroup;
  port?: KeyedGroup;
  portRegs?: Map<number, Hex>;
  nat: NatExpr;
}

/** The key and lookup at exprs[i] into register `reg`, with `reg` renamed register 1, then `tail`: groupKeyed's input. */
function asRegisterOne(exprs: readonly Expr[], i: number, end: number, reg: number, tail: Expr): Expr[] {
  const out: Expr[] = [];
  for (let k = i; k < end; k++) {
    const x = { ...exprs[k]! } as Expr & { sreg?: number; dreg?: number };
    if (x.sreg === reg) x.sreg = 1;
    if (x.dreg === reg) x.dreg = 1;
    out.push(x);
  }
  out.push(tail);
  return out;
}

/** The lookup a key starting at exprs[i] ends in (its index), or -1. */
function lookupAfter(exprs: readonly Expr[], i: number): number {
  for (let k = i; k < exprs.length && k < i + 12; k++) if (exprs[k]!.kind === 'lookup') return k;
  return -1;
}

/** The port side at exprs[k]: a key looked up into register `reg` then the nat; or undefined. */
function natPortGroup(exprs: readonly Expr[], k: number): { port: KeyedGroup; nat: NatExpr; end: number } | undefined {
  const l = lookupAfter(exprs, k);
  const look = exprs[l] as LookupExpr | undefined;
  const nat = exprs[l + 1];
  if (!look || look.sreg === 1 || look.dreg !== look.sreg || nat?.kind !== 'nat' || nat.regProtoMin !== look.sreg
    || (nat.regProtoMax ?? nat.regProtoMin) !== look.sreg || nat.regAddrMin !== 1) return undefined;
  const redir: Expr = { kind: 'redir', regProtoMin: 1, regProtoMax: 1, flags: NAT_RANGE.PROTO_SPECIFIED };
  const virt = asRegisterOne(exprs, k, l + 1, look.sreg, redir);
  const got = groupKeyed(virt, 0);
  if (!got?.g.redir || got.n !== virt.length) return undefined;
  return { port: got.g, nat, end: l + 2 };
}

/** Recognises linearizeNatSplit's output at exprs[i] (after any address immediates). */
export function groupNatSplit(exprs: readonly Expr[], i: number): { g: NatSplitGroup; n: number } | undefined {
  const e = exprs[i];
  const dreg = (e as { dreg?: number } | undefined)?.dreg;
  if (dreg === undefined || dreg === 0 || e!.kind === 'immediate' || e!.kind === 'lookup') return undefined;
  if (dreg !== 1) {
    // the port's map after an address the caller holds in immediates
    const p = natPortGroup(exprs, i);
    return p ? { g: { port: p.port, nat: p.nat }, n: p.end - i } : undefined;
  }
  const l = lookupAfter(exprs, i);
  const look = exprs[l] as LookupExpr | undefined;
  if (!look || look.sreg !== 1 || look.dreg !== 1 || exprs[l + 1]?.kind === 'nat') return undefined;
  // the port: a map, or immediates then the nat
  let nat: NatExpr | undefined;
  let port: KeyedGroup | undefined;
  const portRegs = new Map<number, Hex>();
  let end: number;
  const p = natPortGroup(exprs, l + 1);
  if (p) {
    ({ nat, port, end } = p);
  } else {
    let k = l + 1;
    for (let x = exprs[k]; x?.kind === 'immediate' && x.dreg !== 0 && x.data !== undefined && k < l + 3; x = exprs[++k]) portRegs.set(x.dreg, x.data);
    const x = exprs[k];
    if (k === l + 1 || x?.kind !== 'nat' || x.regAddrMin !== 1 || (x.regAddrMax ?? 1) !== 1 || x.regProtoMin === undefined) return undefined;
    nat = x;
    end = k + 1;
  }
  const addrNat: NatExpr = { kind: 'nat', type: nat.type, family: nat.family, regAddrMin: 1, regAddrMax: 1, flags: NAT_RANGE.MAP_IPS };
  const virt = asRegisterOne(exprs, i, l + 1, 1, addrNat);
  const a = groupKeyed(virt, 0);
  if (!a?.g.nat || a.n !== virt.length) return undefined;
  return { g: { addr: a.g, nat, ...(port ? { port } : { portRegs }) }, n: end - i };
}

export interface KeyedRenderEnv {
  family: Family;
  /** Names a load in the protocol context (render.ts's fieldOf). */
  fieldOf: (load: LoadExprT, bits?: Hex) => Field | undefined;
  /** One value of a field's type (render.ts's valueText). */
  valueText: (field: Field, data: Hex) => string | undefined;
  sets?: (name: string, setId?: number) => { set: NftSet; elements: SetElement[] } | undefined;
  verdictText: (v: unknown, chain?: string) => string;
  /** An interface's name by index (dup's device). */
  ifname?: (index: number) => string | undefined;
  /** Statements as nft lists them (render.ts's renderStatements). */
  statementsText: (exprs: readonly StatefulExpr[]) => string;
}

interface PartR { text: string; len: number; value: (hex: Hex) => string | undefined; field?: Field }

function genText(e: Extract<Expr, { kind: 'numgen' | 'hash' }>, of: string | undefined): string | undefined {
  if (e.kind === 'numgen') {
    const mode = e.type === 0 ? 'inc' : e.type === 1 ? 'random' : undefined;
    if (!mode) return undefined;
    return `numgen ${mode} mod ${e.modulus}${e.offset ? ` offset ${e.offset}` : ''}`;
  }
  if (e.type === 1) return `symhash mod ${e.modulus}${e.offset ? ` offset ${e.offset}` : ''}`;
  if (e.type !== 0 || of === undefined) return undefined;
  return `jhash ${of} mod ${e.modulus}${e.seed !== undefined ? ` seed 0x${e.seed.toString(16)}` : ''}${e.offset ? ` offset ${e.offset}` : ''}`;
}

function fieldsText(loads: readonly LoadExprT[], env: KeyedRenderEnv, bits?: Hex): { text: string; fields: Field[] } | undefined {
  const fields: Field[] = [];
  for (const l of loads) {
    const f = env.fieldOf(l, bits);
    if (!f || !f.set || (l.kind === 'payload' && l.len !== f.len)) return undefined;
    fields.push(f);
  }
  return { text: fields.map((f) => f.name).join(' . '), fields };
}

function intText(hex: Hex): string | undefined {
  const v = readU32Host(hex);
  return v === undefined ? undefined : String(v);
}

/**
 * The datatype of each key part of the set a group looks up or adds to (a concatenation's types
 * are 6 bits each), or undefined when there is no such set or the parts do not divide it.
 */
function setPartTypes(g: KeyedGroup, sets: KeyedRenderEnv['sets']): number[] | undefined {
  const ref = g.dynset ?? g.lookup;
  const s = ref ? sets?.(ref.set, ref.setId)?.set : undefined;
  if (!s) return undefined;
  if (g.parts.length === 1) return [s.keyType];
  const out: number[] = [];
  for (let v = s.keyType; v > 0; v = Math.floor(v / 64)) out.unshift(v % 64);
  return out.length === g.parts.length ? out : undefined;
}

/**
 * A payload key part as the set describes it: the header field the load names, or the raw
 * payload when the set is keyed by an integer there (`@nh,96,32 map { 1 : … }`, which nft lists
 * as `ip saddr map { 1 : … }`: that reads back as a map keyed by addresses).
 */
function partField(load: LoadExprT, type: number | undefined, f: Field | undefined, bits?: Hex): Field | undefined {
  if (type === undefined || load.kind !== 'payload' || bits !== undefined || !f?.set || f.set.keyType === type) return f;
  const raw = rawPayloadAt(load.base, load.offset, load.len);
  return raw?.set?.keyType === type ? raw : f;
}

/** Each load of a group (a generator's inputs too) with the field it is rendered as, for the caller's dependency handling. */
export function groupFields(g: KeyedGroup, sets: KeyedRenderEnv['sets'], fieldOf: (load: LoadExprT) => Field | undefined): { load: LoadExprT; field: Field | undefined }[] {
  const types = setPartTypes(g, sets);
  const out: { load: LoadExprT; field: Field | undefined }[] = [];
  g.parts.forEach((p, i) => {
    if (p.k === 'load') out.push({ load: p.load, field: partField(p.load, types?.[i], fieldOf(p.load)) });
    else if (p.k === 'gen') for (const load of p.of) out.push({ load, field: fieldOf(load) });
  });
  return out;
}

/** The key parts of a group, with how to print each part's values. */
function keyParts(g: KeyedGroup, env: KeyedRenderEnv): PartR[] | undefined {
  const out: PartR[] = [];
  const types = setPartTypes(g, env.sets);
  const ref = g.dynset ?? g.lookup;
  const isMap = ref !== undefined && ((env.sets?.(ref.set, ref.setId)?.set.flags ?? 0) & SET_F.MAP) !== 0;
  for (const p of g.parts) {
    if (p.k === 'load') {
      // an address under a mask, the key of a mark map (`ip6 saddr and ::ffff map { … }`)
      const addr = p.bits !== undefined && g.markset && g.markset !== 'zone' && g.parts.length === 1 ? fieldsText([p.load], env) : undefined;
      const af = addr?.fields[0];
      if (af && (af.type === 'ipv4' || af.type === 'ipv6') && p.bits!.length === af.len * 2) {
        const m = env.valueText(af, p.bits!);
        if (m === undefined) return undefined;
        out.push({ text: `${af.name} & ${m}`, len: af.len, field: af, value: (h) => env.valueText(af, h) });
        continue;
      }
      const f = partField(p.load, types?.[out.length], env.fieldOf(p.load, p.bits), p.bits);
      if (!f || !f.set || (p.load.kind === 'payload' && p.load.len !== f.len)) return undefined;
      // a converted part's element bytes are in network order
      const conv = p.hton === true;
      // nft lists a map's key of one raw payload in decimal (a set's, and a concatenation's parts, in hex)
      if (isMap && g.parts.length === 1 && f.name.startsWith('@')) {
        out.push({ text: f.name, len: f.len, field: f, value: (h) => hexToBig(h).toString() });
        continue;
      }
      out.push({ text: f.name, len: f.len, field: f, value: (h) => env.valueText(f, conv ? hostToNet(h) : h) });
    } else if (p.k === 'imm') {
      // a constant of a dynset's key: printed by the set's type at its place
      const s = g.dynset ? env.sets?.(g.dynset.set, g.dynset.setId)?.set : undefined;
      const dt = s ? keyTypeFromKernel(s.keyType, s.keyLen)?.parts[out.length] : undefined;
      if (!dt || dt.len * 2 !== p.data.length || g.parts.length !== keyTypeFromKernel(s!.keyType, s!.keyLen)!.parts.length) return undefined;
      out.push({ text: dt.format(p.data), len: dt.len, value: () => undefined });
    } else {
      let of: string | undefined;
      if (p.of.length) {
        const ft = fieldsText(p.of, env);
        if (!ft) return undefined;
        of = ft.text;
      }
      const t = genText(p.e, of);
      if (!t) return undefined;
      const conv = p.hton === true;
      out.push({ text: t, len: 4, value: (h) => intText(conv ? hostToNet(h) : h) });
    }
  }
  return out;
}

const pad4b = (n: number) => (n + 3) & ~3;

function splitKey(hex: Hex, parts: readonly PartR[]): Hex[] | undefined {
  if (parts.length === 1) return hex.length === parts[0]!.len * 2 ? [hex] : undefined;
  const out: Hex[] = [];
  let o = 0;
  for (const p of parts) {
    out.push(hex.slice(o, o + p.len * 2));
    if (hexToBig(hex.slice(o + p.len * 2, o + pad4b(p.len) * 2)) !== 0n) return undefined;
    o += pad4b(p.len) * 2;
  }
  return o === hex.length ? out : undefined;
}

function prefixOf(lo: Hex, hi: Hex): number | undefined {
  const a = hexToBig(lo), b = hexToBig(hi);
  if (b < a) return undefined;
  const size = b - a + 1n;
  if ((size & (size - 1n)) !== 0n || a % size !== 0n) return undefined;
  return lo.length * 4 - (size.toString(2).length - 1);
}

/** A part's values lo..hi as nft writes them in an element: a value, prefix, range or wildcard. */
function spanText(p: PartR, lo: Hex, hi: Hex): string | undefined {
  if (lo === hi) return p.value(lo);
  const f = p.field;
  if (!f) {
    const a = p.value(lo), b = p.value(hi);
    return a === undefined || b === undefined ? undefined : `${a}-${b}`;
  }
  // only the spans the language reads back (marks, protocols, … take single values; integers as numbers)
  if (f.type === 'int') {
    const a = p.value(lo), b = p.value(hi);
    const num = /^(?:0x[0-9a-f]+|[0-9]+)$/;
    return a !== undefined && b !== undefined && num.test(a) && num.test(b) ? `${a}-${b}` : undefined;
  }
  if (!['ipv4', 'ipv6', 'port', 'ifname', 'mark'].includes(f.type)) return undefined;
  if (f.type === 'ipv4' || f.type === 'ipv6') {
    const pl = prefixOf(lo, hi);
    const a = p.value(lo), b = p.value(hi);
    if (a === undefined || b === undefined) return undefined;
    return pl !== undefined ? `${a}/${pl}` : `${a}-${b}`;
  }
  if (f.type === 'ifname') {
    let n = lo.length / 2;
    while (n > 0 && lo.slice(n * 2 - 2, n * 2) === '00') n--;
    if (n === 0 || hi !== lo.slice(0, n * 2) + 'ff'.repeat(lo.length / 2 - n)) return undefined;
    return `"${Buffer.from(lo.slice(0, n * 2), 'hex').toString('utf8')}*"`;
  }
  const a = p.value(lo), b = p.value(hi);
  return a === undefined || b === undefined ? undefined : `${a}-${b}`;
}

function dataText(e: SetElement, set: NftSet, env: KeyedRenderEnv, fam: 'ip' | 'ip6' | undefined): string | undefined {
  if (set.flags & SET_F.OBJECT) return e.objref !== undefined ? `"${e.objref}"` : undefined;
  if (set.dataType === DATA_VERDICT) return e.verdict !== undefined ? env.verdictText(e.verdict, e.chain) : undefined;
  if (set.dataType === TYPE_SERVICE && set.dataLen === 2 && e.data?.length === 4) return String(parseInt(e.data, 16));
  if (set.dataType === TYPE_INTEGER && set.dataLen === 2 && e.data?.length === 4) {
    // a ct zone map's data: 16 bits in host order
    return String(parseInt(HOST_LE ? e.data.slice(2) + e.data.slice(0, 2) : e.data, 16));
  }
  if (set.dataType === TYPE_MARK && e.data !== undefined) {
    const v = readU32Host(e.data);
    return v === undefined ? undefined : `0x${v.toString(16).padStart(8, '0')}`;
  }
  if (e.data === undefined || !fam) return undefined;
  const ports = set.dataType === natData(fam, true).dataType;
  const half = natData(fam, ports).dataLen;
  if (set.dataLen === 2 * half) {
    return e.data.length === 4 * half ? natSpanText(e.data.slice(0, 2 * half), e.data.slice(2 * half), fam, ports) : undefined;
  }
  return natTargetText(e.data, fam, ports);
}

function natTargetText(data: Hex, fam: 'ip' | 'ip6', ports: boolean): string | undefined {
  const alen = fam === 'ip' ? 8 : 32;
  const fmt = fam === 'ip' ? formatIPv4 : formatIPv6;
  if (!ports) return data.length === alen ? fmt(data) : undefined;
  if (data.length !== alen + 8 || data.slice(alen + 4) !== '0000') return undefined;
  return `${fmt(data.slice(0, alen))} . ${parseInt(data.slice(alen, alen + 4), 16)}`;
}

/** Range data (low, high): `a-b`, `a/len` or `a`, then ` . p-q` or ` . p`; never a range that reads as one value. */
function natSpanText(lo: Hex, hi: Hex, fam: 'ip' | 'ip6', ports: boolean): string | undefined {
  const alen = fam === 'ip' ? 8 : 32;
  const fmt = fam === 'ip' ? formatIPv4 : formatIPv6;
  const a0 = lo.slice(0, alen), a1 = hi.slice(0, alen);
  if (a1 < a0) return undefined;
  let port = '';
  if (ports) {
    if (lo.length !== alen + 8 || hi.length !== alen + 8 || lo.slice(alen + 4) !== '0000' || hi.slice(alen + 4) !== '0000') return undefined;
    const p0 = parseInt(lo.slice(alen, alen + 4), 16), p1 = parseInt(hi.slice(alen, alen + 4), 16);
    if (p1 < p0) return undefined;
    port = p0 === p1 ? ` . ${p0}` : ` . ${p0}-${p1}`;
  } else if (lo.length !== alen || hi.length !== alen) return undefined;
  const plen = spanPrefix(a0, a1);
  const addr = a0 === a1 ? (port.includes('-') ? fmt(a0) : `${fmt(a0)}-${fmt(a1)}`)
    : plen !== undefined ? `${fmt(a0)}/${plen}` : `${fmt(a0)}-${fmt(a1)}`;
  return addr + port;
}

/** The prefix length when lo-hi is exactly one prefix. */
function spanPrefix(lo: Hex, hi: Hex): number | undefined {
  const a = hexToBig(lo), b = hexToBig(hi);
  const size = b - a + 1n;
  if ((size & (size - 1n)) !== 0n || a % size !== 0n) return undefined;
  return lo.length * 4 - (size.toString(2).length - 1);
}

/** Elements of an anonymous set or map as `{ … }` text, or undefined when they are not nft-shaped. */
function elementsText(parts: readonly PartR[], set: NftSet, elements: readonly SetElement[], env: KeyedRenderEnv,
  natFam: 'ip' | 'ip6' | undefined, hostOrder: boolean): string | undefined {
  const isMap = (set.flags & (SET_F.MAP | SET_F.OBJECT)) !== 0;
  const rows: { key: Hex; text: string }[] = [];
  let catchall: string | undefined;
  const push = (key: Hex, keyText: string | undefined, e: SetElement): boolean => {
    if (keyText === undefined) return false;
    let t = keyText;
    if (isMap) {
      const d = dataText(e, set, env, natFam);
      if (d === undefined) return false;
      t += ` : ${d}`;
    }
    rows.push({ key, text: t });
    return true;
  };
  if ((set.flags & SET_F.INTERVAL) && (set.flags & SET_F.CONCAT)) {
    for (const e of elements) {
      if (e.key === undefined || e.keyEnd === undefined || (e.flags ?? 0) !== 0) return undefined;
      const lo = splitKey(e.key, parts), hi = splitKey(e.keyEnd, parts);
      if (!lo || !hi) return undefined;
      const texts = parts.map((p, i) => spanText(p, lo[i]!, hi[i]!));
      if (texts.some((x) => x === undefined)) return undefined;
      if (!push(e.key, texts.join(' . '), e)) return undefined;
    }
  } else if (set.flags & SET_F.INTERVAL) {
    if (parts.length !== 1) return undefined;
    const els = [...elements].filter((e) => e.key !== undefined && e.key.length === set.keyLen * 2)
      .sort((a, b) => (a.key! < b.key! ? -1 : a.key! > b.key! ? 1 : 0));
    const stars = elements.filter((e) => e.key === undefined);
    if (stars.length > 0) {
      // the catch-all element of an interval map, printed last as nft does
      const d = isMap && stars.length === 1 && stars[0]!.flags === SET_ELEM_F.CATCHALL ? dataText(stars[0]!, set, env, natFam) : undefined;
      if (d === undefined) return undefined;
      catchall = `* : ${d}`;
    }
    if (els.length + stars.length !== elements.length) return undefined;
    const max = 'ff'.repeat(set.keyLen);
    for (let i = 0; i < els.length; i++) {
      const e = els[i]!;
      if ((e.flags ?? 0) & 1) continue; // END
      const next = els[i + 1];
      const hi = next ? bigToHex(hexToBig(next.key!) - 1n, set.keyLen) : max;
      if (!push(e.key!, spanText(parts[0]!, e.key!, hi), e)) return undefined;
    }
  } else {
    for (const e of elements) {
      if (e.key === undefined) {
        // the catch-all element, printed last as nft does
        if (!isMap || e.flags !== SET_ELEM_F.CATCHALL || catchall !== undefined) return undefined;
        const d = dataText(e, set, env, natFam);
        if (d === undefined) return undefined;
        catchall = `* : ${d}`;
        continue;
      }
      const ks = splitKey(e.key, parts);
      if (!ks) return undefined;
      const texts = parts.map((p, i) => p.value(ks[i]!));
      if (texts.some((x) => x === undefined)) return undefined;
      if (!push(e.key, texts.join(' . '), e)) return undefined;
    }
  }
  if (rows.length === 0) return undefined;
  const cmp = hostOrder ? (a: Hex, b: Hex) => (hostValue(a) < hostValue(b) ? -1 : hostValue(a) > hostValue(b) ? 1 : 0)
    : (a: Hex, b: Hex) => (a < b ? -1 : a > b ? 1 : 0);
  rows.sort((a, b) => cmp(a.key, b.key));
  if (!(set.flags & SET_F.INTERVAL)) {
    // nft sizes a hashed set by the elements as written: duplicates come back as the first written again
    const extra = Math.min(Math.max(0, (set.size ?? 0) - rows.length - (catchall !== undefined ? 1 : 0)), 64);
    if (extra > 0) rows.splice(1, 0, ...new Array<{ key: Hex; text: string }>(extra).fill(rows[0]!));
  }
  return `{ ${[...rows.map((r) => r.text), ...(catchall !== undefined ? [catchall] : [])].join(', ')} }`;
}

/**
 * `meter NAME [size N] { KEY STATEMENTS }` as nft 1.0.6 builds it: a set of the rule's own named
 * NAME (anonymous and dynamic: it goes with the rule), keyed by KEY, with the key's byte order as
 * its userdata, and an add of the key with the statements.
 */
function linearizeMeter(st: DynsetStmt, out: Expr[], kc: KeyedContext): void {
  const key = keyOf(st.key, kc.fail);
  if (kc.sets?.has(st.set.name)) kc.fail(st.set, 'a name no set of the table has', `the table has a set '${st.set.name}' already`);
  // (as nft 1.0.6's grammar: one)
  if (st.stmts!.length > 1) kc.fail(st.stmtsAt!, 'one statement', 'a meter takes one statement');
  const ref = kc.addSet((id) => {
    const set: NftSet = {
      family: kc.family, table: kc.table, name: st.set.name, id, flags: SET_F.ANONYMOUS | SET_F.EVAL,
      keyType: key.keyType, keyLen: key.keyLen, userdata: meterUserdata(key), elements: [],
    };
    // (a meter with a timeout: a set with timeouts, its elements updated with the timeout)
    if (st.timeout !== undefined) set.flags |= SET_F.TIMEOUT;
    if (st.meter!.size !== undefined) set.size = st.meter!.size;
    return set;
  });
  emitKey(st.key, 0, out, kc);
  const e: DynsetExpr = { kind: 'dynset', sregKey: 1, op: st.timeout !== undefined ? 1 : 0, set: ref.name, setId: ref.setId, exprs: st.stmts! };
  if (st.timeout !== undefined) e.timeout = st.timeout;
  if (st.stmts!.length > 1) e.flags = 2;
  out.push(e);
}

/** The text of a keyed group, or undefined when it is not in the rule language. */
export function renderKeyed(g: KeyedGroup, env: KeyedRenderEnv): string | undefined {
  const parts = keyParts(g, env);
  if (!parts) return undefined;
  const key = parts.map((p) => p.text).join(' . ');
  if (g.dynset) {
    const d = g.dynset;
    // (flags 2, NFT_DYNSET_F_EXPR, only says how its statements are sent)
    if ((d.sregData !== undefined) !== (g.dynData !== undefined) || ((d.flags ?? 0) & ~2) !== 0 || (d.op !== 0 && d.op !== 1)) return undefined;
    let data = '';
    if (g.dynData && 'imm' in g.dynData) {
      const s = env.sets?.(d.set, d.setId)?.set;
      const dt = s ? keyTypeFromKernel(s.dataType ?? 0, s.dataLen ?? 0) : undefined;
      if (!dt || dt.parts.length !== 1) return undefined;
      data = ` : ${dt.parts[0]!.format(g.dynData.imm)}`;
    } else if (g.dynData) {
      const ft = fieldsText(g.dynData.loads, env);
      if (!ft) return undefined;
      data = ` : ${ft.text}`;
    }
    const stmts = d.exprs?.length ? ` ${env.statementsText(d.exprs)}` : '';
    const own = env.sets?.(d.set, d.setId)?.set;
    if (own && own.flags & SET_F.ANONYMOUS) {
      // a meter: its set is the rule's (nft lists the size the kernel gives it, 65535 by default)
      const timed = d.op === 1 && !!d.timeout;
      if ((d.op !== 0 && !timed) || (d.op === 0 && d.timeout) || g.dynData || !stmts
        || own.flags !== (SET_F.ANONYMOUS | SET_F.EVAL | (timed ? SET_F.TIMEOUT : 0))) return undefined;
      return `meter ${d.set} size ${own.size ?? 65535} { ${key}${timed ? ` timeout ${formatNftTime(d.timeout!)}` : ''}${stmts} }`;
    }
    return `${d.op === 0 ? 'add' : 'update'} @${d.set} { ${key}${d.timeout ? ` timeout ${formatNftTime(d.timeout)}` : ''}${stmts}${data} }`;
  }
  if (g.markset && !g.lookup) return `${g.markset} mark set ${key}`;
  if (g.cmp) {
    const v = parts[0]!.value(g.cmp.data);
    return v === undefined ? undefined : `${key} ${g.cmp.op === 'neq' ? '!= ' : ''}${v}`;
  }
  const l = g.lookup!;
  const neq = ((l.flags ?? 0) & 1) !== 0;
  if ((neq && l.dreg !== undefined) || ((l.flags ?? 0) & ~1)) return undefined;
  let natFam: 'ip' | 'ip6' | undefined;
  let rhsWord = '';
  let natSpan = false;
  if (g.nat) {
    const n = g.nat;
    if (n.family !== 'ip' && n.family !== 'ip6') return undefined;
    natFam = n.family;
    const ports = n.regProtoMin !== undefined;
    // the registers nft uses for the data's words (linearizeNatMap), with and without ranges
    const aw = natFam === 'ip' ? 1 : 4;
    const regs = (span: boolean) => [span ? regOf(aw + (ports ? 1 : 0)) : 1,
      ports ? regOf(aw) : undefined, ports ? (span ? regOf(2 * aw + 1) : regOf(aw)) : undefined].join();
    const got = [n.regAddrMax ?? 1, n.regProtoMin, ports ? n.regProtoMax ?? n.regProtoMin : undefined].join();
    if (got === regs(true) && got !== regs(false)) natSpan = true;
    else if (got !== regs(false)) return undefined;
    const flags = (n.flags ?? 0) & ~(NAT_RANGE.MAP_IPS | NAT_RANGE.NETMAP | (ports ? NAT_RANGE.PROTO_SPECIFIED : 0));
    if (flags & ~(NAT_RANGE.PROTO_RANDOM | NAT_RANGE.PROTO_RANDOM_FULLY | NAT_RANGE.PERSISTENT)) return undefined;
    rhsWord = 'map';
  } else if (g.dup) {
    if (env.family !== 'ip' && env.family !== 'ip6') return undefined;
    natFam = env.family;
    rhsWord = 'map';
  } else if (g.store) {
    natFam = g.store.type === 'ipv4' ? 'ip' : g.store.type === 'ipv6' ? 'ip6' : undefined;
    rhsWord = 'map';
  } else if (l.dreg === 0) {
    rhsWord = 'vmap';
  } else if (g.markset) {
    rhsWord = 'map';
  }
  let rhs: string;
  const found = env.sets?.(l.set, l.setId);
  if (g.objmap) {
    // the statement from the map's object type; a named map by name, an anonymous one by its elements
    const type = found && found.set.flags & SET_F.OBJECT ? objTypeName(found.set.objType ?? 0) : undefined;
    if (!type) return undefined;
    if (!(found!.set.flags & SET_F.ANONYMOUS)) return `${objrefUse(type)} ${key} map @${l.set}`;
    const hostOrder = parts.length === 1 && parts[0]!.field?.set?.byteorder === 1;
    const body = elementsText(parts, found!.set, found!.elements, env, undefined, hostOrder);
    return body === undefined ? undefined : `${objrefUse(type)} ${key} map ${body}`;
  }
  if (!found || !(found.set.flags & SET_F.ANONYMOUS)) {
    if (l.set.startsWith('__') || natSpan) return undefined;
    rhs = `@${l.set}`;
  } else {
    // ranges as NAT data: twice the data length, and the registers to match
    if (natFam && g.nat && (found.set.dataLen === 2 * natData(natFam, g.nat!.regProtoMin !== undefined).dataLen) !== natSpan) return undefined;
    const hostOrder = parts.length === 1 && !parts[0]!.field ? true : parts.length === 1 && parts[0]!.field?.set?.byteorder === 1;
    const body = elementsText(parts, found.set, found.elements, env, natFam, hostOrder);
    if (body === undefined) return undefined;
    rhs = body;
  }
  if (g.nat) {
    const n = g.nat;
    const ports = n.regProtoMin !== undefined;
    const names: [number, string][] = [[NAT_RANGE.PROTO_RANDOM, 'random'], [NAT_RANGE.PROTO_RANDOM_FULLY, 'fully-random'], [NAT_RANGE.PERSISTENT, 'persistent']];
    const fl = names.filter(([b]) => (n.flags ?? 0) & b).map(([, s]) => s);
    // nft names the family when the table's does not say it, and for address . port targets
    const kw = env.family === 'inet' || ports || natSpan || (n.flags ?? 0) & NAT_RANGE.NETMAP ? ` ${natFam}` : '';
    const pre = (n.flags ?? 0) & NAT_RANGE.NETMAP ? ' prefix' : '';
    return `${n.type}${kw}${pre} to ${key} map ${rhs}${fl.length ? ' ' + fl.join(',') : ''}`;
  }
  if (g.dup) {
    let dev = '';
    if (g.dup.dev !== undefined) {
      const name = env.ifname?.(readU32Host(g.dup.dev)!);
      if (name === undefined) return undefined;
      dev = ` device "${name}"`;
    }
    return `dup to ${key} map ${rhs}${dev}`;
  }
  if (g.markset === 'zone') return `ct zone set ${key} map ${rhs}`;
  if (g.store) return `${g.store.name} set ${key} map ${rhs}`;
  if (g.redir) {
    const fl = (g.redir.flags ?? 0) & ~NAT_RANGE.PROTO_SPECIFIED;
    const names: [number, string][] = [[NAT_RANGE.PROTO_RANDOM, 'random'], [NAT_RANGE.PROTO_RANDOM_FULLY, 'fully-random'], [NAT_RANGE.PERSISTENT, 'persistent']];
    if (fl & ~(NAT_RANGE.PROTO_RANDOM | NAT_RANGE.PROTO_RANDOM_FULLY | NAT_RANGE.PERSISTENT)) return undefined;
    const ns = names.filter(([b]) => fl & b).map(([, s]) => s);
    return `redirect to :${key} map ${rhs}${ns.length ? ' ' + ns.join(',') : ''}`;
  }
  if (g.markset) return `${g.markset} mark set ${key} map ${rhs}`;
  return rhsWord ? `${key} ${rhsWord} ${rhs}` : `${key}${neq ? ' !=' : ''} ${rhs}`;
}
