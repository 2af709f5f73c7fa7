/**
 * Values of the integer-like fields in headers.ts as nft 1.0.6 parses and
 * prints them: integers (decimal or 0x hex) with symbolic names, flag masks,
 * tc handles (major:minor), user and group names, times (1h2m3s), service
 * names from /etc/services. Bytes are in the order the kernel holds them:
 * shifted into place for a bit field, host order for meta/ct integers.
 */
import { noteInput, systemFile } from '../base/compile-inputs.js';
import { HOST_LE, bigToHex, hexToBig } from './bytes.js';
import type { Field } from './fields.js';
import type { Token } from './lexer.js';

function width(f: Field): number {
  return f.width ?? f.len * 8;
}

function reverseHex(h: string): string {
  let r = '';
  for (let i = h.length - 2; i >= 0; i -= 2) r += h.substr(i, 2);
  return r;
}

/** The value as the kernel holds it in the register. */
export function encodeInt(f: Field, v: bigint): string {
  const h = bigToHex(v << BigInt(f.shift ?? 0), f.len);
  return f.host && HOST_LE ? reverseHex(h) : h;
}

/** The register bytes back to the value (undefined if bits outside the field are set). */
export function decodeInt(f: Field, h: string): bigint | undefined {
  if (h.length !== f.len * 2) return undefined;
  const raw = hexToBig(f.host && HOST_LE ? reverseHex(h) : h);
  const shift = BigInt(f.shift ?? 0);
  const v = raw >> shift;
  if ((v << shift) !== raw || v >= 1n << BigInt(width(f))) return undefined;
  return v;
}

/** Host-order bytes in network order (what nft's byteorder hton leaves in the register). */
export function toBigEndian(f: Field, h: string): string {
  return f.host && HOST_LE ? reverseHex(h) : h;
}

function parseNumber(s: string): bigint | undefined {
  if (/^(?:0|[1-9][0-9]*)$/.test(s)) return BigInt(s);
  if (/^0x[0-9a-fA-F]+$/.test(s)) return BigInt(s);
  return undefined;
}

// ---- names from the system's files, as nft's libc lookups find them ----------

/** A system file's text ('' when it cannot be read), noted at every use for the compile's inputs (src/base/compile-inputs.ts). */
const readTable = systemFile;

let services: Map<string, number> | undefined;
/** /etc/services: name and aliases to port (the first entry wins, as getaddrinfo finds it). */
export function serviceport(name: string): number | undefined {
  const text = readTable('/etc/services');
  if (!services) {
    services = new Map();
    for (const line of text.split('\n')) {
      const m = /^([^\s#]+)\s+(\d+)\/(tcp|udp|sctp|dccp)\b([^#]*)/.exec(line);
      if (!m) continue;
      for (const n of [m[1]!, ...m[4]!.trim().split(/\s+/).filter(Boolean)]) {
        if (!services.has(n)) services.set(n, Number(m[2]));
      }
    }
  }
  return services.get(name);
}

const ids = new Map<string, Map<string, number>>();
function idOf(file: string, name: string): number | undefined {
  const text = readTable(file);
  let m = ids.get(file);
  if (!m) {
    m = new Map();
    for (const line of text.split('\n')) {
      const p = line.split(':');
      if (p.length >= 3 && /^\d+$/.test(p[2]!)) m.set(p[0]!, Number(p[2]));
    }
    ids.set(file, m);
  }
  return m.get(name);
}

// ---- times ----------------------------------------------------------------------

const TIME_UNITS: [string, bigint][] = [['d', 86400000n], ['h', 3600000n], ['m', 60000n], ['s', 1000n], ['ms', 1n]];

/** nft's time string (1d2h3m4s5ms, units in that order, each once) in ms. */
export function parseTime(s: string): bigint | undefined {
  const re = /(\d+)(ms|d|h|m|s)/y;
  let i = 0, total = 0n, lastUnit = -1;
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m) return undefined;
    const u = TIME_UNITS.findIndex(([n]) => n === m[2]);
    if (u <= lastUnit) return undefined;
    lastUnit = u;
    total += BigInt(m[1]!) * TIME_UNITS[u]![1];
    i = re.lastIndex;
  }
  return i === 0 ? undefined : total;
}

export function formatTime(ms: bigint): string {
  if (ms === 0n) return '0s';
  let out = '';
  let rest = ms;
  for (const [n, f] of TIME_UNITS) {
    const q = rest / f;
    if (q > 0n) { out += `${q}${n}`; rest -= q * f; }
  }
  return out;
}

// ---- parse and print -------------------------------------------------------------------

export type IntParse = { lo: bigint; hi?: bigint } | { error?: string; expected: string };

function expectedOf(f: Field): string {
  const names = f.syms?.table.map(([n]) => n) ?? [];
  const max = (1n << BigInt(width(f))) - 1n;
  switch (f.type) {
    case 'classid': return "a tc handle: 'none', 'root' or major:minor in hex";
    case 'uid': return 'a user name or id';
    case 'gid': return 'a group name or id';
    case 'ms': return 'a time such as 30s, 1m or 1h30m';
    case 'hour': return 'a time of day "HH:MM" or "HH:MM:SS", or seconds since midnight';
    case 'date': return 'a date "YYYY-MM-DD HH:MM:SS" (or "YYYY-MM-DD HH:MM", "YYYY-MM-DD"), or seconds since the epoch';
    default:
      return names.length ? `${names.join(', ')} or a number 0-${max}` : `a number 0-${max}`;
  }
}

function one(f: Field, s: string): bigint | string {
  const max = (1n << BigInt(width(f))) - 1n;
  let v: bigint | undefined;
  switch (f.type) {
    case 'classid':
      if (s === 'none') v = 0n;
      else if (s === 'root') v = 0xffffffffn;
      else if (parseNumber(s) !== undefined) v = parseNumber(s);
      else {
        const m = /^([0-9a-fA-F]{0,4}):([0-9a-fA-F]{0,4})$/.exec(s);
        if (m && (m[1] || m[2])) v = (BigInt('0x0' + m[1]) << 16n) | BigInt('0x0' + m[2]);
      }
      break;
    case 'uid': case 'gid': {
      const n = parseNumber(s);
      if (n !== undefined) v = n;
      else {
        const id = idOf(f.type === 'uid' ? '/etc/passwd' : '/etc/group', s);
        if (id !== undefined) v = BigInt(id);
      }
      break;
    }
    // a bare number is seconds, as nft's time type takes it
    case 'ms': v = parseNumber(s) !== undefined ? parseNumber(s)! * 1000n : parseTime(s); break;
    // a bare number is taken as it is (seconds since midnight UTC), a time of day converted as nft does
    case 'hour': {
      v = parseNumber(s);
      if (v !== undefined) break;
      const m = /^(\d{1,2}):(\d{1,2})(?::(\d{1,2}))?$/.exec(s);
      if (!m || Number(m[1]) > 23 || Number(m[2]) > 59 || Number(m[3] ?? 0) > 59) break;
      if (!localIsUtc(Date.now(), true)) return TZ_REFUSAL;
      v = BigInt(Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3] ?? 0));
      break;
    }
    // a bare number is seconds since the epoch; a date is converted as nft's parse_iso_date does
    case 'date': {
      const n = parseNumber(s);
      if (n !== undefined) { v = n * 1_000_000_000n; break; }
      const m = /^(\d{4})-(\d{1,2})-(\d{1,2})(?: (\d{1,2}):(\d{1,2})(?::(\d{1,2}))?)?$/.exec(s);
      if (!m) break;
      const [y, mo, d, h, mi, sec] = [1, 2, 3, 4, 5, 6].map((i) => Number(m[i] ?? 0)) as [number, number, number, number, number, number];
      if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59) break;
      const ms = Date.UTC(y, mo - 1, d, h, mi, sec);
      if (ms < 0) break;
      if (!localIsUtc(ms)) return TZ_REFUSAL;
      v = BigInt(ms) * 1_000_000n;
      break;
    }
    default: {
      const named = f.syms?.table.find(([n]) => n === s);
      v = named ? BigInt(named[1]) : parseNumber(s);
    }
  }
  if (v === undefined) return expectedOf(f);
  if (v > max) return `Value ${v} exceeds valid range 0-${max}`;
  return v;
}

/**
 * nft converts `meta hour "17:00"` and `meta time "2019-06-21 17:00:00"` with the local time zone
 * of the machine it runs on (its offset now, for hours; at that date, for dates). nfkeeper takes
 * them only where the local zone is UTC at that instant, where the conversion is the identity and
 * cannot differ from nft's; elsewhere the numeric forms (seconds) say the same thing in any zone.
 */
export function localIsUtc(ms: number, now = false): boolean {
  const utc = new Date(ms).getTimezoneOffset() === 0;
  noteInput(() => ({ kind: 'utc', at: now ? null : ms, utc }));
  return utc;
}
const TZ_REFUSAL = 'tz:meta hour and meta time strings are converted with the local time zone, which is not UTC here';

/** One value or (unless scalar) a range `a-b` of the field's type. */
export function parseIntValue(f: Field, t: Token, scalar: boolean): IntParse {
  // nft takes a quoted symbol as well (meta iifgroup "default", meta skuid "root")
  if (t.kind !== 'word' && !(t.kind === 'string' && (f.type === 'uid' || f.type === 'gid' || f.type === 'hour' || f.type === 'date'
    || f.syms !== undefined))) {
    return { expected: expectedOf(f) };
  }
  const whole = one(f, t.text);
  if (typeof whole === 'bigint') return { lo: whole };
  if (whole.startsWith('tz:')) {
    return { error: whole.slice(3), expected: f.type === 'hour' ? 'seconds since midnight UTC (e.g. 61200 for 17:00 UTC)' : 'seconds since the epoch (UTC)' };
  }
  // (a date's own '-' is not a range)
  if (f.type === 'date' || f.type === 'hour') return { expected: whole };
  const dash = t.text.indexOf('-', 1);
  // (a range of flags only in numbers, as nft compares the byte: comp flags 0x33-0x45)
  if (!scalar && dash > 0 && (f.type !== 'flags' || /^(?:0x[0-9a-fA-F]+|[0-9]+)-(?:0x[0-9a-fA-F]+|[0-9]+)$/.test(t.text))) {
    const a = one(f, t.text.slice(0, dash)), b = one(f, t.text.slice(dash + 1));
    if (typeof a === 'bigint' && typeof b === 'bigint') {
      if (a > b) return { error: 'empty range', expected: 'a range whose start is not above its end' };
      return { lo: a, hi: b };
    }
  }
  return whole.startsWith('Value ') ? { error: whole, expected: expectedOf(f) } : { expected: whole };
}

/** How nft prints one value of the field. */
export function formatInt(f: Field, v: bigint, flagSep = ','): string {
  switch (f.type) {
    case 'classid':
      if (v === 0n) return 'none';
      if (v === 0xffffffffn) return 'root';
      return `${(v >> 16n).toString(16)}:${(v & 0xffffn).toString(16)}`;
    case 'ms': return formatTime(v);
    case 'hour': {
      // as a time of day where that reads back to the same value (local zone UTC), else seconds
      if (v >= 86400n || !localIsUtc(Date.now(), true)) return v.toString();
      const n = Number(v);
      const hm = `${String(Math.floor(n / 3600)).padStart(2, '0')}:${String(Math.floor(n / 60) % 60).padStart(2, '0')}`;
      return n % 60 ? `"${hm}:${String(n % 60).padStart(2, '0')}"` : `"${hm}"`;
    }
    case 'date': {
      if (v % 1_000_000_000n !== 0n) return `<ns ${v}>`;
      const s = v / 1_000_000_000n;
      const ms = Number(s) * 1000;
      if (!Number.isSafeInteger(ms) || !localIsUtc(ms) || ms > Date.UTC(9999, 11, 31, 23, 59, 59)) return s.toString();
      const d = new Date(ms);
      const p2 = (x: number) => String(x).padStart(2, '0');
      return `"${d.getUTCFullYear()}-${p2(d.getUTCMonth() + 1)}-${p2(d.getUTCDate())} ${p2(d.getUTCHours())}:${p2(d.getUTCMinutes())}:${p2(d.getUTCSeconds())}"`;
    }
    case 'flags': {
      const parts: string[] = [];
      let rest = v;
      for (const [n, bit] of f.syms?.table ?? []) {
        const b = BigInt(bit);
        if (rest & b) { parts.push(n); rest &= ~b; }
      }
      if (rest !== 0n || parts.length === 0) parts.push('0x' + rest.toString(16));
      return parts.join(flagSep);
    }
    default: {
      const named = f.syms?.table.find(([, x]) => BigInt(x) === v);
      if (named) return named[0];
      const fmt = f.syms?.fmt;
      if (fmt && fmt.base === 'hex') return '0x' + v.toString(16).padStart(fmt.digits, '0');
      return v.toString();
    }
  }
}
