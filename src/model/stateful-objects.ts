/**
 * Named stateful objects of an owned table: counter, quota, limit, ct helper, ct timeout,
 * ct expectation, synproxy and secmark, declared in nft's own words (an nft file's `counter c { … }` block or
 * `add counter …` command, or a YAML `objects:` entry whose `spec` is the block's body), built into
 * the kernel object nft 1.0.6 creates; the definition the reconciler compares (their state, the
 * packets and bytes a counter has counted and what a quota has used, is never compared nor reset);
 * and the text `check` and `export` print.
 */
import * as z from 'zod';
import type { Family } from '../netlink/expr.js';
import type { NftObj, ObjType } from '../netlink/objects.js';
import type { LimitExpr, QuotaExpr } from '../netlink/expr.js';
import { tokenize, type Token } from '../rules/lexer.js';
import { parseExprStatement, renderExprStatement, type Cursor } from '../rules/statements.js';
import { commentOf, commentUserdata } from '../rules/udata.js';
import { RuleSyntaxError } from '../base/errors.js';
import { formatNftTime, parseNftTime } from './sets.js';

export const OBJ_KINDS = ['counter', 'quota', 'limit', 'ct helper', 'ct timeout', 'ct expectation', 'synproxy', 'secmark'] as const;

/** A stateful object as the config writes it (a YAML `objects:` entry, or an nft object block); built when first used, as SET_SCHEMA. */
export const OBJ_SCHEMA = z.lazy(() => z.strictObject({
  name: z.string().min(1).max(255).regex(/^[A-Za-z_.][A-Za-z0-9_.\-/]*$/, 'a letter, _ or . followed by letters, digits, _ . - and / only'),
  type: z.enum(OBJ_KINDS),
  /** The body of nft's block, `{ … }` without the braces: `over 100 mbytes`, `type "ftp" protocol tcp; l3proto ip`. */
  spec: z.string().max(4096).optional(),
  comment: z.string().max(128).optional(),
}));
export type RawObj = z.infer<typeof OBJ_SCHEMA>;

export interface ObjConfig {
  name: string;
  type: ObjType;
  /** The object to create (family and table filled in, no handle). */
  obj: NftObj;
}

/** Where a declaration is wrong: the field and, inside the spec's text, a column. */
export type ObjFail = (where: (string | number)[], reason: string, innerColumn?: number) => void;

/** The fields of each type that are state, not configuration: never compared, never reset. */
const STATE: Partial<Record<ObjType, readonly string[]>> = { counter: ['packets', 'bytes'], quota: ['consumed'] };

const L3: Record<string, number> = { ip: 2, ip6: 10, inet: 1 };
const L3_NAME = new Map(Object.entries(L3).map(([k, v]) => [v, k]));
const L4: Record<string, number> = { tcp: 6, udp: 17, dccp: 33, sctp: 132, udplite: 136, icmp: 1, icmpv6: 58, gre: 47 };
const L4_NAME = new Map(Object.entries(L4).map(([k, v]) => [v, k]));
const SYNPROXY_F = { mss: 1, wscale: 2, 'sack-perm': 4, timestamp: 8 } as const;

/**
 * A ct timeout's states by protocol, in the kernel's order (CTA_TIMEOUT_TCP_* / _UDP_*), with the
 * timeout nft 1.0.6 sends for a state its policy does not name (its src/ct.c tables): nft sends
 * every state's, so the object never depends on the kernel's defaults. nft takes tcp and udp only.
 */
const CT_TIMEOUT_STATES: Record<number, readonly (readonly [string, number])[]> = {
  6: [['syn_sent', 120], ['syn_recv', 60], ['established', 432000], ['fin_wait', 120], ['close_wait', 60], ['last_ack', 30],
    ['time_wait', 120], ['close', 10], ['syn_sent2', 120], ['retrans', 300], ['unack', 300]],
  17: [['unreplied', 30], ['replied', 120]],
};
/**
 * The kernel keeps a timeout as jiffies in 32 bits (seconds × HZ) and dumps it divided by HZ, so
 * a larger value (which nft sends) comes back as another number: refused, at any HZ up to 1000.
 */
const CT_TIMEOUT_MAX = Math.floor(0xffffffff / 1000);

class SpecError extends Error {
  constructor(readonly column: number, message: string) {
    super(message);
  }
}

/** A cursor over a spec's tokens, as statements.ts's parsers take one. */
class SpecCursor implements Cursor {
  private i = 0;
  constructor(private readonly toks: Token[]) {}
  peek(k = 0): Token {
    return this.toks[Math.min(this.i + k, this.toks.length - 1)]!;
  }
  next(): Token {
    const t = this.peek();
    if (this.i < this.toks.length - 1) this.i++;
    return t;
  }
  fail(at: { col: number; raw: string }, expected: string, reason?: string): never {
    throw new SpecError(at.col, `${reason ? `${reason}: ` : ''}expected ${expected}, found ${at.raw === '' ? 'the end' : `'${at.raw}'`}`);
  }
  isWord(t: Token, ...words: string[]): boolean {
    return t.kind === 'word' && (words.length === 0 || words.includes(t.text));
  }
  done(): boolean {
    return this.peek().kind === 'end';
  }
}

function cursorOf(spec: string): SpecCursor {
  // `;` and newlines separate an nft block's statements: here they are spaces (columns stay).
  try {
    return new SpecCursor(tokenize(spec.replace(/[;\n\r\t]/g, ' ')));
  } catch (e) {
    if (e instanceof RuleSyntaxError) throw new SpecError(e.column, e.message);
    throw e;
  }
}

function uint(c: SpecCursor, what: string, max: number): number {
  const t = c.peek();
  if (t.kind !== 'word' || !/^\d+$/.test(t.text) || Number(t.text) > max) c.fail(t, `${what} (0-${max})`);
  c.next();
  return Number(t.text);
}

function protoOf(c: SpecCursor, table: Record<string, number>, what: string): number {
  const t = c.peek();
  const v = t.kind === 'word' ? table[t.text] : undefined;
  if (v === undefined) c.fail(t, `${what}: ${Object.keys(table).join(', ')}`);
  c.next();
  return v;
}

/** A quota's or limit's body read as the rule statement of the same words (statements.ts), columns kept. */
function asStatement(word: 'quota' | 'limit', spec: string, family: Family): QuotaExpr | LimitExpr {
  const toks = tokenize(`${word} ${spec.replace(/[;\n\r\t]/g, ' ')}`);
  const c = new SpecCursor(toks.map((t) => ({ ...t, col: t.col - word.length - 1 })));
  const st = parseExprStatement(c, word, { col: 1, raw: '' }, family)!;
  if (!c.done()) c.fail(c.peek(), `the end of the ${word}`);
  return st.exprs[0] as QuotaExpr | LimitExpr;
}

/** The NFTA_<TYPE>_* data nft 1.0.6 sends for the block body `spec` of a `type` object in a `family` table. */
function parseSpec(type: ObjType, spec: string, family: Family): NftObj['data'] {
  if (type === 'ct timeout') return parseCtTimeout(spec);
  const c = cursorOf(spec);
  const at = { col: 1, raw: '' };
  switch (type) {
    case 'counter': {
      let packets = 0, bytes = 0;
      while (!c.done()) {
        const w = c.peek();
        if (!c.isWord(w, 'packets', 'bytes')) c.fail(w, "'packets N' or 'bytes N'");
        c.next();
        const n = uint(c, w.text === 'packets' ? 'a packet count' : 'a byte count', Number.MAX_SAFE_INTEGER);
        if (w.text === 'packets') packets = n;
        else bytes = n;
      }
      return { packets, bytes };
    }
    case 'quota': {
      const e = asStatement('quota', spec, family) as QuotaExpr;
      return { bytes: e.bytes, consumed: e.consumed ?? 0, flags: e.flags ?? 0 };
    }
    case 'limit': {
      const e = asStatement('limit', spec, family) as LimitExpr;
      return { rate: e.rate, unit: e.unit, burst: e.burst ?? 0, type: e.type ?? 0, flags: e.flags ?? 0 };
    }
    case 'ct helper': {
      let name: string | undefined, l4: number | undefined, l3 = L3[family]!;
      while (!c.done()) {
        const w = c.peek();
        if (c.isWord(w, 'type')) {
          c.next();
          const s = c.peek();
          if (s.kind !== 'string' || s.text.length === 0 || s.text.length > 15) c.fail(s, 'a helper name in quotes, at most 15 characters');
          c.next();
          name = s.text;
          const p = c.peek();
          if (!c.isWord(p, 'protocol')) c.fail(p, "'protocol tcp' or 'protocol udp' after the helper's type");
          c.next();
          l4 = protoOf(c, { tcp: 6, udp: 17 }, 'a protocol');
        } else if (c.isWord(w, 'l3proto')) {
          c.next();
          l3 = protoOf(c, L3, 'a network protocol');
        } else c.fail(w, "'type \"NAME\" protocol tcp|udp' or 'l3proto ip|ip6|inet'");
      }
      if (name === undefined) c.fail(at, "'type \"NAME\" protocol tcp|udp'", 'a ct helper needs its type');
      return { name: name!, l3proto: l3, l4proto: l4! };
    }
    case 'ct expectation': {
      const d: Record<string, number> = { l3proto: L3[family]! };
      while (!c.done()) {
        const w = c.next();
        switch (w.kind === 'word' ? w.text : '') {
          case 'protocol': d.l4proto = protoOf(c, L4, 'a protocol'); break;
          case 'dport': d.dport = uint(c, 'a port', 65535); break;
          case 'size': d.size = uint(c, 'a size', 255); break;
          case 'l3proto': d.l3proto = protoOf(c, L3, 'a network protocol'); break;
          case 'timeout': {
            const t = c.peek();
            const ms = t.kind === 'word' ? parseNftTime(t.text) : undefined;
            if (ms === undefined || ms > 0xffffffff) c.fail(t, 'a time (10s, 1m, 500ms)');
            c.next();
            d.timeout = ms!;
            break;
          }
          default: c.fail(w, "'protocol', 'dport', 'timeout', 'size' or 'l3proto'");
        }
      }
      for (const k of ['l4proto', 'dport', 'timeout', 'size']) {
        if (d[k] === undefined) c.fail(at, `'${k === 'l4proto' ? 'protocol' : k}'`, `a ct expectation needs its ${k === 'l4proto' ? 'protocol' : k}`);
      }
      if (d.l3proto === L3.inet) c.fail(at, "'l3proto ip' or 'l3proto ip6'", 'in an inet table a ct expectation needs its network protocol (the kernel refuses inet)');
      return d;
    }
    case 'synproxy': {
      let mss = 0, wscale = 0, flags = 0;
      while (!c.done()) {
        const w = c.next();
        if (c.isWord(w, 'mss')) { mss = uint(c, 'an MSS', 65535); flags |= SYNPROXY_F.mss; }
        else if (c.isWord(w, 'wscale')) { wscale = uint(c, 'a window scale', 14); flags |= SYNPROXY_F.wscale; }
        else if (c.isWord(w, 'timestamp')) flags |= SYNPROXY_F.timestamp;
        else if (c.isWord(w, 'sack-perm')) flags |= SYNPROXY_F['sack-perm'];
        else c.fail(w, "'mss N', 'wscale N', 'timestamp' or 'sack-perm'");
      }
      return { mss, wscale, flags };
    }
    case 'secmark': {
      const s = c.next();
      if (s.kind !== 'string' || s.text.length === 0 || Buffer.byteLength(s.text) > 255) c.fail(s, 'a security context in quotes');
      if (!c.done()) c.fail(c.peek(), 'the end of the secmark');
      return { ctx: s.text };
    }
    default:
      throw new SpecError(1, `${type} objects are not supported by nfkeeper`);
  }
}

/**
 * `protocol tcp|udp; [l3proto ip|ip6|inet;] [policy = { STATE: SECONDS, … };]`, in any order, as nft
 * 1.0.6 takes it: the last protocol counts, policies add up, a state is checked against the
 * protocol. No l3proto: none is sent (the kernel takes the table's family), as nft sends it.
 */
function parseCtTimeout(spec: string): NftObj['data'] {
  // `=` and `:` are not rule tokens: blanked (`=`) and split off (`established:100`), columns kept
  const c = cursorOf(spec.replace(/=/g, ' ').replace(/:/g, ' : '));
  const col = (t: Token) => columnIn(spec, t.col);
  let l4: number | undefined, l3: number | undefined, l4at: Token | undefined;
  const states: { name: Token; value: number }[] = [];
  const fail = (t: Token, expected: string, reason?: string): never => c.fail({ ...t, col: col(t) }, expected, reason);
  while (!c.done()) {
    const w = c.next();
    if (c.isWord(w, 'protocol')) {
      l4at = c.peek();
      const v = l4at.kind === 'word' ? { tcp: 6, udp: 17 }[l4at.text] : undefined;
      if (v === undefined) fail(l4at, "'tcp' or 'udp' (nft's ct timeout takes these)");
      c.next();
      l4 = v;
    } else if (c.isWord(w, 'l3proto')) {
      const t = c.peek();
      const v = t.kind === 'word' ? L3[t.text] : undefined;
      if (v === undefined) fail(t, `a network protocol: ${Object.keys(L3).join(', ')}`);
      c.next();
      l3 = v;
    } else if (c.isWord(w, 'policy')) {
      const open = c.next();
      if (open.kind !== 'punct' || open.text !== '{') fail(open, "'= {' and the states' timeouts");
      for (;;) {
        const name = c.next();
        if (name.kind !== 'word' || name.text === ':') fail(name, 'a state (established, close, …)');
        const colon = c.next();
        if (colon.text !== ':') fail(colon, `':' and a timeout in seconds after ${name.text}`);
        const n = c.peek();
        const v = n.kind === 'word' && /^(?:\d+|0x[0-9a-fA-F]+)$/.test(n.text) ? Number(n.text) : undefined;
        if (v === undefined || v > CT_TIMEOUT_MAX) {
          fail(n, `a timeout in seconds (0-${CT_TIMEOUT_MAX})`, v === undefined ? undefined
            : 'the kernel holds a timeout in jiffies, 32 bits: a larger one would come back as another number');
        }
        c.next();
        states.push({ name, value: v! });
        const sep = c.next();
        if (sep.kind === 'punct' && sep.text === '}') break;
        if (sep.kind !== 'punct' || sep.text !== ',') fail(sep, "',' and another state, or '}'");
      }
    } else fail(w, "'protocol tcp|udp', 'l3proto ip|ip6|inet' or 'policy = { STATE: SECONDS, … }'");
  }
  if (l4 === undefined) fail({ kind: 'end', text: '', raw: '', col: 1 }, "'protocol tcp' or 'protocol udp'", 'a ct timeout needs its protocol');
  const table = CT_TIMEOUT_STATES[l4!]!;
  const policy = table.map(([, v]) => v);
  for (const st of states) {
    const i = table.findIndex(([n]) => n === st.name.text);
    if (i < 0) fail(st.name, `a ${l4 === 6 ? 'tcp' : 'udp'} state: ${table.map(([n]) => n).join(', ')}`, 'invalid state for this protocol');
    policy[i] = st.value;
  }
  return { ...(l3 !== undefined ? { l3proto: l3 } : {}), l4proto: l4!, policy };
}

/** The column in `spec` of column `col` of its copy with every `:` widened to ` : `. */
function columnIn(spec: string, col: number): number {
  let w = 0;
  for (let i = 0; i < spec.length; i++) {
    const width = spec[i] === ':' ? 3 : 1;
    if (col - 1 < w + width) return i + 1;
    w += width;
  }
  return spec.length + 1 + (col - 1 - w);
}

/** A table's object declaration built into the object nft creates, or undefined after fail(). */
export function buildObject(raw: RawObj, where: { family: Family; table: string }, fail: ObjFail): ObjConfig | undefined {
  let data: NftObj['data'];
  try {
    data = parseSpec(raw.type, raw.spec ?? '', where.family);
  } catch (e) {
    if (e instanceof SpecError) {
      fail(['spec'], `${raw.type} ${raw.name}: ${e.message}`, e.column);
      return undefined;
    }
    throw e;
  }
  const obj: NftObj = {
    family: where.family, table: where.table, name: raw.name, type: raw.type, data,
    ...(raw.comment !== undefined ? { userdata: commentUserdata(raw.comment) } : {}),
  };
  return { name: raw.name, type: raw.type, obj };
}

/**
 * What is compared of an object: its type, configuration and comment; never its state. A ct
 * timeout declared without l3proto has the table's family, as the kernel dumps it.
 */
export function objectDefinitionKey(o: NftObj): string {
  const state = typeof o.type === 'string' ? STATE[o.type] ?? [] : [];
  const d = o.type === 'ct timeout' && o.data.l3proto === undefined ? { ...o.data, l3proto: L3[o.family]! } : o.data;
  const data = Object.keys(d).filter((k) => !state.includes(k)).sort().map((k) => `${k}=${String(d[k])}`);
  return `${String(o.type)}|${o.userdata ?? ''}|${data.join(',')}`;
}

/**
 * The body nft lists for an object (`over 100 mbytes`, `type "ftp" protocol tcp; l3proto ip`),
 * without its state; undefined when nfkeeper cannot write it (a type or value it does not model).
 */
export function objectSpec(o: NftObj, family: Family): string | undefined {
  const d = o.data;
  switch (o.type) {
    case 'counter': return '';
    case 'quota': {
      const t = renderExprStatement({ kind: 'quota', bytes: Number(d.bytes), flags: Number(d.flags ?? 0) }, family);
      return t?.replace(/^quota /, '');
    }
    case 'limit': {
      const t = renderExprStatement({
        kind: 'limit', rate: Number(d.rate), unit: Number(d.unit), burst: Number(d.burst ?? 0), type: Number(d.type ?? 0),
        flags: Number(d.flags ?? 0),
      }, family);
      return t?.replace(/^limit /, '');
    }
    case 'ct helper': {
      const l4 = d.l4proto === 6 ? 'tcp' : d.l4proto === 17 ? 'udp' : undefined;
      const l3 = L3_NAME.get(Number(d.l3proto));
      if (!l4 || !l3 || typeof d.name !== 'string' || d.name.includes('"')) return undefined;
      return `type "${d.name}" protocol ${l4}; l3proto ${l3}`;
    }
    case 'ct expectation': {
      const l4 = L4_NAME.get(Number(d.l4proto));
      const l3 = L3_NAME.get(Number(d.l3proto));
      if (!l4 || !l3) return undefined;
      return `protocol ${l4}; dport ${d.dport}; timeout ${formatNftTime(Number(d.timeout))}; size ${d.size}; l3proto ${l3}`;
    }
    case 'synproxy': {
      const f = Number(d.flags ?? 0);
      if (f & ~15) return undefined;
      const parts: string[] = [];
      if (f & SYNPROXY_F.mss) parts.push(`mss ${d.mss}`);
      if (f & SYNPROXY_F.wscale) parts.push(`wscale ${d.wscale}`);
      const opts = [f & SYNPROXY_F.timestamp ? 'timestamp' : '', f & SYNPROXY_F['sack-perm'] ? 'sack-perm' : ''].filter(Boolean);
      if (opts.length) parts.push(opts.join(' '));
      return parts.join('; ');
    }
    case 'secmark': return typeof d.ctx === 'string' && !d.ctx.includes('"') ? `"${d.ctx}"` : undefined;
    case 'ct timeout': {
      // as nft lists it: the states whose timeout is not nft's default (none: no policy, since nft
      // cannot read back its own `policy = {  }`)
      const table = CT_TIMEOUT_STATES[Number(d.l4proto)];
      const l3 = L3_NAME.get(Number(d.l3proto ?? L3[family]));
      const policy = d.policy;
      if (!table || !l3 || !Array.isArray(policy) || policy.length !== table.length) return undefined;
      const changed = table.flatMap(([n, v], i) => (policy[i] !== v ? [`${n}: ${policy[i]}`] : []));
      if (policy.some((v: number) => v > CT_TIMEOUT_MAX)) return undefined;
      return `protocol ${d.l4proto === 6 ? 'tcp' : 'udp'}; l3proto ${l3}${changed.length ? `; policy = { ${changed.join(', ')} }` : ''}`;
    }
    default: return undefined;
  }
}

/** An object as nft's block form writes it in a table: `counter c { }`, `quota q { over 100 mbytes; comment "x" }`. */
export function objectBlock(o: NftObj, family: Family): string | undefined {
  const spec = objectSpec(o, family);
  if (spec === undefined || typeof o.type !== 'string') return undefined;
  const comment = commentOf(o.userdata);
  if (o.userdata !== undefined && comment === undefined) return undefined;
  const body = [spec, comment !== undefined ? `comment ${JSON.stringify(comment)}` : ''].filter(Boolean).join('; ');
  return `${o.type} ${o.name} { ${body}${body ? ' ' : ''}}`;
}

/** The raw declaration (the YAML `objects:` entry) export writes for a kernel object, or undefined. */
export function rawObjectOf(o: NftObj, family: Family): RawObj | undefined {
  const spec = objectSpec(o, family);
  if (spec === undefined || typeof o.type !== 'string') return undefined;
  const comment = commentOf(o.userdata);
  if (o.userdata !== undefined && comment === undefined) return undefined;
  return { name: o.name, type: o.type, ...(spec ? { spec } : {}), ...(comment !== undefined ? { comment } : {}) };
}
