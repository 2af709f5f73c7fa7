/**
 * Statements of nft 1.0.6 that compile to one expression each (reject, limit,
 * log, quota, notrack, counter, meta … set): parsed straight into the kernel
 * IR nft sends, with the protocol dependencies nft adds for them, and
 * rendered back from the kernel's expressions.
 */
import type { Expr, Family, LimitExpr, LogExpr, QuotaExpr, RejectExpr, SynproxyExpr, TproxyExpr } from '../netlink/expr.js';
import { u16Be, u32Host } from './bytes.js';
import { formatIPv4, formatIPv6, parseIPv4, parseIPv6 } from './values.js';
import type { At, ExprStmt } from './ast.js';
import type { Token } from './lexer.js';
import { ICMPV6_CODE, ICMPX_CODE, ICMP_CODE } from './headers.js';
import type { Syms } from './fields.js';

/** The parser's cursor, as the statements here need it. */
export interface Cursor {
  peek(k?: number): Token;
  next(): Token;
  fail(at: { col: number; raw: string }, expected: string, reason?: string): never;
  isWord(t: Token, a?: string, b?: string, c?: string, d?: string, e?: string, f?: string): boolean;
}

const REJECT_ICMP_UNREACH = 0, REJECT_TCP_RST = 1, REJECT_ICMPX = 2;

function symbol(c: Cursor, syms: Syms, what: string): number {
  const t = c.peek();
  const hit = t.kind === 'word' ? syms.table.find(([n]) => n === t.text) : undefined;
  const num = t.kind === 'word' && /^\d+$/.test(t.text) && Number(t.text) <= 255 ? Number(t.text) : undefined;
  if (!hit && num === undefined) c.fail(t, `${what}: ${syms.table.map(([n]) => n).join(', ')}`);
  c.next();
  return hit ? hit[1] : num!;
}

function parseReject(c: Cursor, at: At, family: Family): ExprStmt {
  c.next();
  if (!c.isWord(c.peek(), 'with')) {
    // nft's default: icmp port-unreachable in ip, icmpv6 port-unreachable in ip6, icmpx in inet
    const e: RejectExpr = family === 'ip' ? { kind: 'reject', type: REJECT_ICMP_UNREACH, code: 3 }
      : family === 'ip6' ? { kind: 'reject', type: REJECT_ICMP_UNREACH, code: 4 }
      : { kind: 'reject', type: REJECT_ICMPX, code: 1 };
    return { t: 'expr', exprs: [e], terminal: true, defaultReject: true, ...at };
  }
  c.next();
  const k = c.peek();
  if (c.isWord(k, 'tcp')) {
    c.next();
    const r = c.peek();
    if (!c.isWord(r, 'reset', 'rst')) c.fail(r, "'reset' after 'with tcp'");
    c.next();
    // the kernel keeps no code for a tcp reset
    return { t: 'expr', exprs: [{ kind: 'reject', type: REJECT_TCP_RST }], l4: 6, terminal: true, ...at };
  }
  if (!c.isWord(k, 'icmp', 'icmpv6', 'icmpx')) c.fail(k, "'icmp', 'icmpv6', 'icmpx' or 'tcp reset' after 'reject with'");
  c.next();
  if (c.isWord(c.peek(), 'type')) c.next();
  if (k.text === 'icmpx') {
    if (family !== 'inet') c.fail(k, `'icmp${family === 'ip6' ? 'v6' : ''}' in an ${family} table`, 'abstracted ICMP unreachable not supported');
    return { t: 'expr', exprs: [{ kind: 'reject', type: REJECT_ICMPX, code: symbol(c, ICMPX_CODE, 'an icmpx code') }], terminal: true, ...at };
  }
  const v6 = k.text === 'icmpv6';
  if ((family === 'ip' && v6) || (family === 'ip6' && !v6)) {
    c.fail(k, `'${family === 'ip' ? 'icmp' : 'icmpv6'}' in an ${family} table`, `conflicting protocols specified: ${family} vs. ${v6 ? 'ip6' : 'ip'}`);
  }
  const code = symbol(c, v6 ? ICMPV6_CODE : ICMP_CODE, v6 ? 'an icmpv6 code' : 'an icmp code');
  return { t: 'expr', exprs: [{ kind: 'reject', type: REJECT_ICMP_UNREACH, code }], l3: v6 ? 'ip6' : 'ip', terminal: true, ...at };
}

const TIME_UNIT: Record<string, number> = { second: 1, minute: 60, hour: 3600, day: 86400, week: 604800 };
const BYTE_UNIT: Record<string, number> = { bytes: 1, kbytes: 1024, mbytes: 1024 * 1024 };

function num(c: Cursor, what: string, max = Number.MAX_SAFE_INTEGER): number {
  const t = c.peek();
  if (t.kind !== 'word' || !/^(?:0|[1-9]\d*)$/.test(t.text) || Number(t.text) > max) c.fail(t, what);
  c.next();
  return Number(t.text);
}

function parseLimit(c: Cursor, at: At): ExprStmt {
  c.next();
  const r = c.peek();
  if (!c.isWord(r, 'rate')) c.fail(r, "'rate' after 'limit'");
  c.next();
  let flags = 0;
  if (c.isWord(c.peek(), 'over')) { c.next(); flags = 1; }
  else if (c.isWord(c.peek(), 'until')) c.next();
  // N/unit (one word, '/' is a word character) or N bytes-unit/unit
  const t = c.peek();
  if (t.kind !== 'word') c.fail(t, 'a rate such as 10/second or 1 mbytes/second');
  let rate: number, unit: number, bytes = false;
  const m = /^(\d+)\/(second|minute|hour|day|week)$/.exec(t.text);
  if (m) {
    c.next();
    rate = Number(m[1]);
    unit = TIME_UNIT[m[2]!]!;
  } else {
    const n = num(c, 'a rate such as 10/second or 1 mbytes/second');
    const u = c.peek();
    let bm = u.kind === 'word' ? /^(bytes|kbytes|mbytes)\/(second|minute|hour|day|week)$/.exec(u.text) : null;
    // nft also takes `1 mbytes / second`
    if (!bm && c.isWord(u, 'bytes', 'kbytes', 'mbytes') && c.isWord(c.peek(1), '/')
      && c.isWord(c.peek(2), 'second', 'minute', 'hour', 'day', 'week')) {
      bm = [u.text, u.text, c.peek(2).text] as unknown as RegExpExecArray;
      c.next();
      c.next();
    }
    if (!bm) c.fail(u, "a unit such as 'bytes/second', 'kbytes/minute' or 'mbytes/hour'");
    c.next();
    rate = n * BYTE_UNIT[bm[1]!]!;
    unit = TIME_UNIT[bm[2]!]!;
    bytes = true;
  }
  let burst = bytes ? 0 : 5;
  if (c.isWord(c.peek(), 'burst')) {
    c.next();
    const b = num(c, 'a burst size', 0xffffffff);
    const u = c.peek();
    if (bytes) {
      if (!c.isWord(u, 'bytes', 'kbytes', 'mbytes')) c.fail(u, "'bytes', 'kbytes' or 'mbytes' after the burst");
      c.next();
      burst = b * BYTE_UNIT[u.text]!;
    } else {
      if (!c.isWord(u, 'packets')) c.fail(u, "'packets' after the burst");
      c.next();
      burst = b;
    }
  }
  if (rate === 0) c.fail(t, 'a rate above zero', 'limit rate must be above zero');
  const e: LimitExpr = { kind: 'limit', rate, unit, burst, type: bytes ? 1 : 0, flags };
  return { t: 'expr', exprs: [e], ...at };
}

export const LOG_LEVELS: [string, number][] = [
  ['emerg', 0], ['alert', 1], ['crit', 2], ['err', 3], ['warn', 4], ['notice', 5], ['info', 6], ['debug', 7], ['audit', 8],
];
const LOG_FLAGS = { tcpseq: 1, tcpopt: 2, ipopt: 4, uid: 8, macdecode: 32, all: 0x2f } as const;

function parseLog(c: Cursor, at: At): ExprStmt {
  c.next();
  const e: LogExpr = { kind: 'log' };
  for (;;) {
    const t = c.peek();
    if (c.isWord(t, 'prefix') && e.prefix === undefined) {
      c.next();
      const s = c.peek();
      if (s.kind !== 'string' && s.kind !== 'word') c.fail(s, 'a double-quoted prefix');
      if (Buffer.byteLength(s.text) > 127 || s.text.includes('$')) c.fail(s, 'a prefix of at most 127 bytes without variables');
      c.next();
      e.prefix = s.text;
    } else if (c.isWord(t, 'level') && e.level === undefined) {
      c.next();
      const l = c.peek();
      const v = LOG_LEVELS.find(([n]) => n === l.text);
      if (!v || l.kind !== 'word') c.fail(l, `a log level: ${LOG_LEVELS.map(([n]) => n).join(', ')}`);
      c.next();
      e.level = v[1];
    } else if (c.isWord(t, 'group') && e.group === undefined) {
      c.next();
      e.group = num(c, 'a log group 0-65535', 65535);
    } else if (c.isWord(t, 'snaplen') && e.snaplen === undefined) {
      c.next();
      e.snaplen = num(c, 'a snap length', 0xffffffff);
    } else if (c.isWord(t, 'queue-threshold') && e.qthreshold === undefined) {
      c.next();
      e.qthreshold = num(c, 'a queue threshold 0-65535', 65535);
    } else if (c.isWord(t, 'flags')) {
      c.next();
      e.flags = (e.flags ?? 0) | parseLogFlags(c);
    } else break;
  }
  if (e.group !== undefined) {
    if (e.level !== undefined || e.flags !== undefined) c.fail(at, "'group' without 'level' or 'flags'", 'level and flags are not used with group');
    // the kernel keeps (and reports) a netlink logger's snaplen and queue threshold only when not zero
    if (e.snaplen === 0) delete e.snaplen;
    if (e.qthreshold === 0) delete e.qthreshold;
  } else if (e.snaplen !== undefined || e.qthreshold !== undefined) {
    c.fail(at, "'group N' before 'snaplen' or 'queue-threshold'", 'snaplen and queue-threshold need a log group');
  } else {
    // the kernel's syslog logger defaults to warn and reports the level it uses
    e.level ??= 4;
  }
  return { t: 'expr', exprs: [e], ...at };
}

function parseLogFlags(c: Cursor): number {
  const t = c.peek();
  if (c.isWord(t, 'all')) { c.next(); return LOG_FLAGS.all; }
  if (c.isWord(t, 'skuid')) { c.next(); return LOG_FLAGS.uid; }
  if (c.isWord(t, 'ether')) { c.next(); return LOG_FLAGS.macdecode; }
  if (c.isWord(t, 'ip')) {
    c.next();
    const o = c.peek();
    if (!c.isWord(o, 'options')) c.fail(o, "'options' after 'ip'");
    c.next();
    return LOG_FLAGS.ipopt;
  }
  if (c.isWord(t, 'tcp')) {
    c.next();
    let f = 0;
    for (;;) {
      const o = c.peek();
      if (c.isWord(o, 'sequence')) f |= LOG_FLAGS.tcpseq;
      else if (c.isWord(o, 'options')) f |= LOG_FLAGS.tcpopt;
      else c.fail(o, "'sequence' or 'options' after 'tcp'");
      c.next();
      const s = c.peek();
      if (s.kind === 'punct' && s.text === ',') { c.next(); continue; }
      return f;
    }
  }
  return c.fail(t, "log flags: 'all', 'skuid', 'ether', 'ip options', 'tcp sequence', 'tcp options'");
}

function parseQuota(c: Cursor, at: At): ExprStmt {
  c.next();
  let flags = 0;
  if (c.isWord(c.peek(), 'over')) { c.next(); flags = 1; }
  else if (c.isWord(c.peek(), 'until')) c.next();
  const amount = (): number => {
    const n = num(c, 'a byte count');
    const u = c.peek();
    if (!c.isWord(u, 'bytes', 'kbytes', 'mbytes')) c.fail(u, "'bytes', 'kbytes' or 'mbytes'");
    c.next();
    return n * BYTE_UNIT[u.text]!;
  };
  const bytes = amount();
  let consumed = 0;
  if (c.isWord(c.peek(), 'used')) { c.next(); consumed = amount(); }
  const e: QuotaExpr = { kind: 'quota', bytes, flags, consumed };
  return { t: 'expr', exprs: [e], ...at };
}

const SYNPROXY_F = { mss: 1, wscale: 2, 'sack-perm': 4, timestamp: 8 } as const;

function parseSynproxy(c: Cursor, at: At): ExprStmt {
  c.next();
  const e: SynproxyExpr = { kind: 'synproxy', mss: 0, wscale: 0, flags: 0 };
  for (;;) {
    const t = c.peek();
    if (c.isWord(t, 'mss') && !(e.flags! & SYNPROXY_F.mss)) {
      c.next();
      e.mss = num(c, 'a segment size 0-65535', 65535);
      e.flags! |= SYNPROXY_F.mss;
    } else if (c.isWord(t, 'wscale') && !(e.flags! & SYNPROXY_F.wscale)) {
      c.next();
      e.wscale = num(c, 'a window scale 0-14', 14);
      e.flags! |= SYNPROXY_F.wscale;
    } else if (c.isWord(t, 'timestamp', 'sack-perm') && !(e.flags! & SYNPROXY_F[t.text as 'timestamp'])) {
      c.next();
      e.flags! |= SYNPROXY_F[t.text as 'timestamp'];
    } else break;
  }
  return { t: 'expr', exprs: [e], ...at };
}

/** tproxy [ip|ip6] to ADDR[:PORT] | [ADDR6]:PORT | :PORT */
function parseTproxy(c: Cursor, at: At, family: Family): ExprStmt {
  c.next();
  let fam: 'ip' | 'ip6' | undefined = family === 'inet' ? undefined : family === 'ip6' ? 'ip6' : 'ip';
  const f = c.peek();
  if (c.isWord(f, 'ip', 'ip6')) {
    if (family !== 'inet' && f.text !== family) c.fail(f, `'${family}' or nothing in an ${family} table`, `conflicting protocols specified: ${family} vs. ${f.text}`);
    fam = f.text as 'ip' | 'ip6';
    c.next();
  }
  const to = c.peek();
  if (!c.isWord(to, 'to')) c.fail(to, "'to' after 'tproxy'");
  c.next();
  const t = c.peek();
  const bad = (): never => c.fail(t, "an address, address:port, [IPv6]:port or :port");
  let addr: string | undefined, port: number | undefined;
  if (t.kind === 'punct' && t.text === '[') {
    c.next();
    const a = c.peek();
    addr = a.kind === 'word' ? parseIPv6(a.text) : undefined;
    if (addr === undefined) c.fail(a, 'an IPv6 address inside [ ]');
    c.next();
    const cl = c.next();
    if (!(cl.kind === 'punct' && cl.text === ']')) c.fail(cl, "']'");
    const p = c.peek();
    if (p.kind === 'word' && /^:\d+$/.test(p.text)) { c.next(); port = Number(p.text.slice(1)); }
    if (fam === 'ip') c.fail(a, 'an IPv4 address', 'address family mismatch');
    fam = 'ip6';
  } else if (t.kind === 'word') {
    c.next();
    const m = /^([^:]*)(?::(\d+))?$/.exec(t.text);
    const v4 = m && m[1] !== '' ? parseIPv4(m[1]!) : undefined;
    if (/^:\d+$/.test(t.text)) port = Number(t.text.slice(1));
    else if (v4 !== undefined) {
      addr = v4;
      if (m![2] !== undefined) port = Number(m![2]);
      if (fam === 'ip6') c.fail(t, 'an IPv6 address', 'address family mismatch');
      fam = fam ?? undefined;
      if (fam === undefined) c.fail(t, "'tproxy ip to' or 'tproxy ip6 to'", 'ip or ip6 must be specified with address for inet tables');
    } else {
      addr = parseIPv6(t.text);
      if (addr === undefined) bad();
      if (fam === 'ip') c.fail(t, 'an IPv4 address', 'address family mismatch');
      if (fam === undefined) c.fail(t, "'tproxy ip to' or 'tproxy ip6 to'", 'ip or ip6 must be specified with address for inet tables');
    }
  } else bad();
  if (port !== undefined && port > 65535) c.fail(t, 'a port 0-65535');
  const exprs: Expr[] = [];
  const e: TproxyExpr = { kind: 'tproxy', family: fam ?? 0 };
  let reg = 1;
  if (addr !== undefined) { exprs.push({ kind: 'immediate', dreg: reg, data: addr }); e.regAddr = reg++; }
  if (port !== undefined) { exprs.push({ kind: 'immediate', dreg: reg, data: u16Be(port) }); e.regPort = reg; }
  exprs.push(e);
  return { t: 'expr', exprs, needsL4: true, terminal: false, ...at };
}

/** dup's optional `device NAME`, resolved in the target namespace: its ifindex, or undefined if absent. */
export function parseDupDevice(c: Cursor, ifindex?: (n: string) => number | undefined): number | undefined {
  if (!c.isWord(c.peek(), 'device')) return undefined;
  c.next();
  const d = c.peek();
  if (d.kind !== 'string' && d.kind !== 'word') c.fail(d, 'a device name');
  const idx = ifindex?.(d.text);
  if (idx === undefined) c.fail(d, 'a device that exists in the target namespace', `interface '${d.text}' does not exist`);
  c.next();
  return idx;
}

/** dup to ADDR [device "name"] (ip and ip6 tables). */
function parseDup(c: Cursor, at: At, family: Family, ifindex?: (n: string) => number | undefined): ExprStmt {
  c.next();
  if (family === 'inet') c.fail(at, 'dup in an ip or ip6 table', 'dup in an inet table is not supported');
  const to = c.peek();
  if (!c.isWord(to, 'to')) c.fail(to, "'to' after 'dup'");
  c.next();
  const a = c.peek();
  const addr = a.kind === 'word' ? (family === 'ip' ? parseIPv4(a.text) : parseIPv6(a.text)) : undefined;
  if (addr === undefined) c.fail(a, family === 'ip' ? 'an IPv4 address' : 'an IPv6 address');
  c.next();
  const exprs: Expr[] = [{ kind: 'immediate', dreg: 1, data: addr! }];
  const idx = parseDupDevice(c, ifindex);
  if (idx !== undefined) exprs.push({ kind: 'immediate', dreg: 2, data: u32Host(idx) }, { kind: 'dup', sregAddr: 1, sregDev: 2 });
  else exprs.push({ kind: 'dup', sregAddr: 1 });
  return { t: 'expr', exprs, ...at };
}

/** Parses a statement of this file at `word`, or returns undefined when `word` is not one. */
export function parseExprStatement(c: Cursor, word: string, at: At, family: Family,
  ifindex?: (name: string) => number | undefined): ExprStmt | undefined {
  switch (word) {
    case 'synproxy': return parseSynproxy(c, at);
    case 'tproxy': return parseTproxy(c, at, family);
    case 'dup': return parseDup(c, at, family, ifindex);
    case 'reject': return parseReject(c, at, family);
    case 'limit': return parseLimit(c, at);
    case 'log': return parseLog(c, at);
    case 'quota': return parseQuota(c, at);
    case 'notrack': c.next(); return { t: 'expr', exprs: [{ kind: 'notrack' }], ...at };
    default: return undefined;
  }
}

// ---- rendering ------------------------------------------------------------------

function symName(syms: Syms, v: number): string {
  return syms.table.find(([, x]) => x === v)?.[0] ?? String(v);
}

function bytesText(n: number): string {
  if (n !== 0 && n % (1024 * 1024) === 0) return `${n / (1024 * 1024)} mbytes`;
  if (n !== 0 && n % 1024 === 0) return `${n / 1024} kbytes`;
  return `${n} bytes`;
}

const UNIT_NAME = new Map(Object.entries(TIME_UNIT).map(([k, v]) => [v, k]));

/** The text of a statement expression of this file, or undefined when it is not one (or not in nft's shape). */
/** tproxy and dup read their registers from the immediates before them. */
export function renderRegStatement(e: Expr, regs: Map<number, string>, family: Family,
  nameOf?: (index: number) => string | undefined): string | undefined {
  if (e.kind === 'tproxy') {
    const fam = e.family === 'ip' || e.family === 'ip6' ? e.family : e.family === 0 ? undefined : null;
    if (fam === null) return undefined;
    const a = e.regAddr !== undefined ? regs.get(e.regAddr) : undefined;
    const p = e.regPort !== undefined ? regs.get(e.regPort) : undefined;
    if ((e.regAddr !== undefined && a === undefined) || (e.regPort !== undefined && p?.length !== 4)) return undefined;
    if (a === undefined && p === undefined) return undefined;
    if (family !== 'inet' && fam !== undefined && fam !== family) return undefined;
    // (in inet an address needs its family; `tproxy ip to :port` names one without an address)
    if (family === 'inet' && a !== undefined && fam === undefined) return undefined;
    if (family !== 'inet' && fam === undefined) return undefined;
    const port = p !== undefined ? `:${parseInt(p, 16)}` : '';
    const kw = family === 'inet' && fam ? ` ${fam}` : '';
    if (a === undefined) return `tproxy${kw} to ${port}`;
    if (fam === 'ip' || (fam === undefined && family === 'ip')) return a.length === 8 ? `tproxy${kw} to ${formatIPv4(a)}${port}` : undefined;
    if (a.length !== 32) return undefined;
    return p !== undefined ? `tproxy${kw} to [${formatIPv6(a)}]${port}` : `tproxy${kw} to ${formatIPv6(a)}`;
  }
  if (e.kind === 'dup') {
    if (family === 'inet' || e.sregAddr !== 1) return undefined;
    const a = regs.get(1);
    if (a?.length !== (family === 'ip' ? 8 : 32)) return undefined;
    let t = `dup to ${family === 'ip' ? formatIPv4(a) : formatIPv6(a)}`;
    if (e.sregDev !== undefined) {
      const d = regs.get(e.sregDev);
      if (e.sregDev !== 2 || d?.length !== 8) return undefined;
      const v = Buffer.from(d, 'hex').readUInt32LE(0);
      const name = nameOf?.(v);
      if (name === undefined) return undefined;
      t += ` device "${name}"`;
    }
    return t;
  }
  return undefined;
}

export function renderExprStatement(e: Expr, family: Family, l3?: string): string | undefined {
  switch (e.kind) {
    case 'reject': {
      const type = e.type ?? 0, code = e.code ?? 0;
      if (type === REJECT_TCP_RST) return 'reject with tcp reset';
      if (type === REJECT_ICMPX) return family === 'inet' && code === 1 ? 'reject' : `reject with icmpx ${symName(ICMPX_CODE, code)}`;
      if (type !== REJECT_ICMP_UNREACH) return undefined;
      const netc = family === 'inet' ? l3 : family;
      if (netc === 'ip' && code === 3) return 'reject';
      if (netc === 'ip6' && code === 4) return 'reject';
      // in inet the protocol is told by a match before it (nft's dependency, kept in the text)
      const net = family === 'inet' ? l3 : family;
      if (net === 'ip') return `reject with icmp ${symName(ICMP_CODE, code)}`;
      if (net === 'ip6') return `reject with icmpv6 ${symName(ICMPV6_CODE, code)}`;
      return undefined;
    }
    case 'limit': {
      const unit = UNIT_NAME.get(Number(e.unit));
      const type = e.type ?? 0, flags = e.flags ?? 0, burst = e.burst ?? 0;
      if (!unit || (type !== 0 && type !== 1) || (flags !== 0 && flags !== 1)) return undefined;
      const over = flags ? 'over ' : '';
      if (type === 0) {
        return `limit rate ${over}${e.rate}/${unit}${burst !== 5 ? ` burst ${burst} packets` : ''}`;
      }
      const r = bytesText(Number(e.rate));
      return `limit rate ${over}${r.replace(' ', ' ')}/${unit}${burst !== 0 ? ` burst ${bytesText(burst)}` : ''}`;
    }
    case 'log': {
      let s = 'log';
      if (e.prefix !== undefined) {
        if (e.prefix.includes('"')) return undefined;
        s += ` prefix "${e.prefix}"`;
      }
      if (e.group !== undefined) {
        if (e.level !== undefined || e.flags !== undefined) return undefined;
        s += ` group ${e.group}`;
        if (e.snaplen) s += ` snaplen ${e.snaplen}`;
        if (e.qthreshold) s += ` queue-threshold ${e.qthreshold}`;
        return s;
      }
      if (e.snaplen !== undefined || e.qthreshold !== undefined) return undefined;
      if (e.level !== undefined && e.level !== 4) {
        const l = LOG_LEVELS.find(([, v]) => v === e.level);
        if (!l) return undefined;
        s += ` level ${l[0]}`;
      }
      if (e.flags !== undefined) {
        let f = e.flags;
        if (f === 0) return undefined;
        if (f === LOG_FLAGS.all) return `${s} flags all`;
        const tcp = [f & LOG_FLAGS.tcpseq ? 'sequence' : '', f & LOG_FLAGS.tcpopt ? 'options' : ''].filter(Boolean);
        if (tcp.length) s += ` flags tcp ${tcp.join(',')}`;
        if (f & LOG_FLAGS.ipopt) s += ' flags ip options';
        if (f & LOG_FLAGS.uid) s += ' flags skuid';
        if (f & LOG_FLAGS.macdecode) s += ' flags ether';
        f &= ~(LOG_FLAGS.tcpseq | LOG_FLAGS.tcpopt | LOG_FLAGS.ipopt | LOG_FLAGS.uid | LOG_FLAGS.macdecode);
        if (f !== 0) return undefined;
      }
      return s;
    }
    case 'quota': {
      const flags = e.flags ?? 0;
      if (flags !== 0 && flags !== 1) return undefined;
      const used = e.consumed ? ` used ${bytesText(Number(e.consumed))}` : '';
      return `quota ${flags ? 'over ' : ''}${bytesText(Number(e.bytes))}${used}`;
    }
    case 'notrack': return 'notrack';
    case 'synproxy': {
      const flags = e.flags ?? 0;
      if (flags & ~15) return undefined;
      if (!(flags & SYNPROXY_F.mss) && (e.mss ?? 0) !== 0) return undefined;
      if (!(flags & SYNPROXY_F.wscale) && (e.wscale ?? 0) !== 0) return undefined;
      let t = 'synproxy';
      if (flags & SYNPROXY_F.mss) t += ` mss ${e.mss ?? 0}`;
      if (flags & SYNPROXY_F.wscale) t += ` wscale ${e.wscale ?? 0}`;
      if (flags & SYNPROXY_F.timestamp) t += ' timestamp';
      if (flags & SYNPROXY_F['sack-perm']) t += ' sack-perm';
      return t;
    }
    default: return undefined;
  }
}
