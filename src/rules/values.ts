/**
 * Values of the rule language: addresses, ports, protocols, flag names, and
 * the tables nft 1.0.6 prints them with. Parsers return undefined on bad
 * input so the caller can raise a RuleSyntaxError with the position.
 */
import { HEX2, hexByteAt, toHex } from './bytes.js';

// ---- IPv4 ----------------------------------------------------------------

/**
 * Strict dotted quad (no leading zeros, no short forms): hex bytes, or undefined.
 * Four octets of `0|[1-9][0-9]{0,2}` up to 255, read in one pass over the characters.
 */
export function parseIPv4(s: string): string | undefined {
  let out = '';
  let dots = 0, v = 0, digits = 0, leadingZero = false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 46) { // '.'
      if (digits === 0 || v > 255 || ++dots > 3) return undefined;
      out += HEX2[v];
      v = 0;
      digits = 0;
      continue;
    }
    if (c < 48 || c > 57 || (leadingZero && digits > 0) || digits === 3) return undefined;
    if (digits === 0) leadingZero = c === 48;
    v = v * 10 + (c - 48);
    digits++;
  }
  if (dots !== 3 || digits === 0 || v > 255) return undefined;
  return out + HEX2[v];
}

export function formatIPv4(h: string): string {
  const a = hexByteAt(h, 0), b = hexByteAt(h, 2), c = hexByteAt(h, 4), d = hexByteAt(h, 6);
  if (a >= 0 && b >= 0 && c >= 0 && d >= 0) return `${a}.${b}.${c}.${d}`;
  const out: number[] = [];
  for (let i = 0; i < 8; i += 2) out.push(parseInt(h.substr(i, 2), 16));
  return out.join('.');
}

// ---- IPv6 ----------------------------------------------------------------

const HEXGROUP = /^[0-9a-fA-F]{1,4}$/;

export function parseIPv6(s: string): string | undefined {
  if (s.length < 2 || s.length > 45) return undefined;
  let tail = '';
  let main = s;
  const lastColon = s.lastIndexOf(':');
  if (lastColon < 0) return undefined;
  if (s.indexOf('.', lastColon) >= 0) {
    const v4 = parseIPv4(s.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    tail = v4;
    main = s.slice(0, lastColon + 1);
    // "::" stays, a single trailing ':' separating the IPv4 part goes
    if (!main.endsWith('::')) main = main.slice(0, -1);
  }
  const words: string[] = [];
  const maxWords = tail ? 6 : 8;
  const dbl = main.indexOf('::');
  if (dbl >= 0) {
    if (main.indexOf('::', dbl + 1) >= 0) return undefined;
    const left = main.slice(0, dbl);
    const right = main.slice(dbl + 2);
    const l = left === '' ? [] : left.split(':');
    const r = right === '' ? [] : right.split(':');
    for (const g of [...l, ...r]) if (!HEXGROUP.test(g)) return undefined;
    // "::" stands for at least one zero group
    if (l.length + r.length > maxWords - 1) return undefined;
    words.push(...l, ...Array<string>(maxWords - l.length - r.length).fill('0'), ...r);
  } else {
    const g = main === '' ? [] : main.split(':');
    if (g.length !== maxWords) return undefined;
    for (const x of g) if (!HEXGROUP.test(x)) return undefined;
    words.push(...g);
  }
  return words.map((w) => w.toLowerCase().padStart(4, '0')).join('') + tail;
}

/** glibc inet_ntop(AF_INET6) formatting, which nft uses. */
export function formatIPv6(h: string): string {
  const words: number[] = [];
  for (let i = 0; i < 32; i += 4) words.push(parseInt(h.substr(i, 4), 16));
  let bestBase = -1, bestLen = 0, curBase = -1, curLen = 0;
  for (let i = 0; i < 8; i++) {
    if (words[i] === 0) {
      if (curBase === -1) { curBase = i; curLen = 1; } else curLen++;
    } else if (curBase !== -1) {
      if (bestBase === -1 || curLen > bestLen) { bestBase = curBase; bestLen = curLen; }
      curBase = -1;
    }
  }
  if (curBase !== -1 && (bestBase === -1 || curLen > bestLen)) { bestBase = curBase; bestLen = curLen; }
  if (bestBase !== -1 && bestLen < 2) bestBase = -1;
  let out = '';
  for (let i = 0; i < 8; i++) {
    if (bestBase !== -1 && i >= bestBase && i < bestBase + bestLen) {
      if (i === bestBase) out += ':';
      continue;
    }
    if (i !== 0) out += ':';
    if (i === 6 && bestBase === 0 && (bestLen === 6 || (bestLen === 5 && words[5] === 0xffff))) {
      out += formatIPv4(h.slice(24));
      return out;
    }
    out += words[i]!.toString(16);
  }
  if (bestBase !== -1 && bestBase + bestLen === 8) out += ':';
  return out;
}

// ---- numbers -------------------------------------------------------------

const DEC = /^(?:0|[1-9][0-9]*)$/;
const HEXNUM = /^0x[0-9a-fA-F]+$/;

/** Decimal or 0x-hex integer up to `max`. */
export function parseInteger(s: string, max: number, allowHex = true): number | undefined {
  let v: number;
  if (DEC.test(s)) v = Number(s);
  else if (allowHex && HEXNUM.test(s)) v = parseInt(s.slice(2), 16);
  else return undefined;
  if (!Number.isSafeInteger(v) || v > max) return undefined;
  return v;
}

export function hex32(v: number): string {
  return '0x' + (v >>> 0).toString(16).padStart(8, '0');
}

// ---- protocols (Debian netbase /etc/protocols, first name per number, as getprotobynumber) --

const PROTOCOL_LIST: [string, number][] = [
  ['ip', 0], ['hopopt', 0], ['icmp', 1], ['igmp', 2], ['ggp', 3], ['ipencap', 4], ['st', 5],
  ['tcp', 6], ['egp', 8], ['igp', 9], ['pup', 12], ['udp', 17], ['hmp', 20], ['xns-idp', 22],
  ['rdp', 27], ['iso-tp4', 29], ['dccp', 33], ['xtp', 36], ['ddp', 37], ['idpr-cmtp', 38],
  ['ipv6', 41], ['ipv6-route', 43], ['ipv6-frag', 44], ['idrp', 45], ['rsvp', 46], ['gre', 47],
  ['esp', 50], ['ah', 51], ['skip', 57], ['ipv6-icmp', 58], ['ipv6-nonxt', 59],
  ['ipv6-opts', 60], ['rspf', 73], ['vmtp', 81], ['eigrp', 88], ['ospf', 89], ['ax.25', 93],
  ['ipip', 94], ['etherip', 97], ['encap', 98], ['pim', 103], ['ipcomp', 108], ['vrrp', 112],
  ['l2tp', 115], ['isis', 124], ['sctp', 132], ['fc', 133], ['mobility-header', 135],
  ['udplite', 136], ['mpls-in-ip', 137], ['manet', 138], ['hip', 139], ['shim6', 140],
  ['wesp', 141], ['rohc', 142], ['ethernet', 143],
];
export const PROTOCOL_BY_NAME = new Map<string, number>(PROTOCOL_LIST);
// nft's grammar has its own words for these (icmpv6, comp) besides /etc/protocols' names
PROTOCOL_BY_NAME.set('icmpv6', 58);
PROTOCOL_BY_NAME.set('comp', 108);
export const PROTOCOL_NAME = new Map<number, string>();
for (const [n, v] of PROTOCOL_LIST) if (!PROTOCOL_NAME.has(v)) PROTOCOL_NAME.set(v, n);

export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
/** Transport protocols nft 1.0.6 has a header description for (NAT port mapping needs one). */
export const TRANSPORT_PROTOCOLS = new Set([6, 17, 33, 132, 136]);
export const L4_NAME: Record<number, 'tcp' | 'udp'> = { 6: 'tcp', 17: 'udp' };

export function parseProtocol(s: string): number | undefined {
  const named = PROTOCOL_BY_NAME.get(s);
  if (named !== undefined) return named;
  return parseInteger(s, 255, false);
}

export function formatProtocol(v: number): string {
  return PROTOCOL_NAME.get(v) ?? String(v);
}

// ---- flag and symbol tables ----------------------------------------------

export const CT_STATE: [string, number][] = [
  ['invalid', 1], ['established', 2], ['related', 4], ['new', 8], ['untracked', 64],
];
export const CT_STATUS: [string, number][] = [
  ['expected', 1], ['seen-reply', 2], ['assured', 4], ['confirmed', 8], ['snat', 16],
  ['dnat', 32], ['dying', 512],
];
export const FIB_TYPES: [string, number][] = [
  ['unspec', 0], ['unicast', 1], ['local', 2], ['broadcast', 3], ['anycast', 4],
  ['multicast', 5], ['blackhole', 6], ['unreachable', 7], ['prohibit', 8],
];
export const NFPROTO: [string, number][] = [['ipv4', 2], ['ipv6', 10]];

export function symbolValue(table: [string, number][], s: string): number | undefined {
  for (const [n, v] of table) if (n === s) return v;
  return undefined;
}

export function symbolName(table: [string, number][], v: number): string | undefined {
  for (const [n, x] of table) if (x === v) return n;
  return undefined;
}

/** nft's flag printing: known flags in bit order, then any leftover bits in hex. */
export function formatFlags(table: [string, number][], v: number, sep: string): string {
  const parts: string[] = [];
  let rest = v >>> 0;
  const sorted = [...table].sort((a, b) => a[1] - b[1]);
  for (const [n, bit] of sorted) {
    if (rest & bit) { parts.push(n); rest = (rest & ~bit) >>> 0; }
  }
  if (rest !== 0 || parts.length === 0) parts.push('0x' + rest.toString(16));
  return parts.join(sep);
}

// ---- interface names -----------------------------------------------------

export const IFNAMSIZ = 16;

/** Exact interface name as the 16-byte NUL-padded key nft compares. */
export function ifnameBytes(name: string): string {
  const b = Buffer.from(name, 'utf8');
  const out = new Uint8Array(IFNAMSIZ);
  out.set(b.subarray(0, IFNAMSIZ));
  return toHex(out);
}
