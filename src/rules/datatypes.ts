/**
 * nft's datatypes as named sets and maps use them: the name a `type` line
 * gives, the id the kernel keeps (NFTA_SET_KEY_TYPE / NFTA_SET_DATA_TYPE),
 * the length, the byte order nft records in the set's userdata, and how one
 * value is parsed and printed (as nft 1.0.6 does). Concatenations combine
 * ids as nft does, `(id << 6) | next`, each part taking a multiple of 4
 * bytes in the key.
 */
import { systemFile } from '../base/compile-inputs.js';
import type { Hex } from '../netlink/expr.js';
import { BYTEORDER_BIG, BYTEORDER_HOST } from './udata.js';
import { readU32Host, toHex, u16Be, u32Host, zeroHex } from './bytes.js';
import { TCP_FLAGS } from './headers.js';
import type { Syms } from './fields.js';
import { formatInt } from './intvalues.js';
import {
  formatIPv4, formatIPv6, formatProtocol, ifnameBytes, IFNAMSIZ, parseInteger, parseIPv4, parseIPv6, parseProtocol,
} from './values.js';

/** NFT_DATA_VERDICT: the data type the kernel keeps for a verdict map. */
export const NFT_DATA_VERDICT = 0xffffff00;
/** A verdict map's data length (struct nft_verdict as the kernel sizes it). */
export const VERDICT_DATA_LEN = 16;
/** nft's BYTEORDER_INVALID: what it records for one-byte types, concatenations and verdicts. */
export const BYTEORDER_NONE = 0;

export interface Datatype {
  /** nft's name, as `type` takes it. */
  name: string;
  /** nft's TYPE_* id. */
  id: number;
  /** Bytes of one value. */
  len: number;
  /** What nft records as the key's or data's byte order. */
  byteorder: number;
  /** Prefixes (`a/n`) make sense (addresses). */
  prefix: boolean;
  /**
   * An integer kept in host byte order (mark): interval sets hold it
   * big-endian, since the kernel orders their keys bytewise.
   */
  hostInt?: boolean;
  /** Ranges (`a-b`) make sense. */
  ranges: boolean;
  /** Values or'ed with '|' (bit masks): an element's words around a '|' are one value. */
  bitmask?: true;
  /** One value, as hex in the kernel's byte order; undefined if `s` is not one. */
  parse(s: string): Hex | undefined;
  /** A value as nft lists it. */
  format(h: Hex): string;
  /** What a value looks like, for errors. */
  expected: string;
}

const MAC = /^[0-9a-fA-F]{1,2}(?::[0-9a-fA-F]{1,2}){5}$/;

let services: Map<string, number> | undefined;
/** Service names as nft resolves them (getservbyname: /etc/services), read once. */
function serviceByName(name: string): number | undefined {
  // (every use, for the compile's inputs: src/base/compile-inputs.ts)
  const text = systemFile('/etc/services');
  if (!services) {
    services = new Map();
    // No services file: '', numbers only.
    for (const line of text.split('\n')) {
      const m = /^([A-Za-z0-9][\w.+-]*)\s+(\d+)\/(tcp|udp)((?:\s+[\w.+-]+)*)/.exec(line.replace(/#.*/, ''));
      if (!m) continue;
      for (const n of [m[1]!, ...m[4]!.trim().split(/\s+/).filter(Boolean)]) if (!services.has(n)) services.set(n, Number(m[2]));
    }
  }
  return services.get(name);
}

/** An interface name: quoted or bare, up to 15 bytes. */
function unquote(s: string): string | undefined {
  const t = s.startsWith('"') ? (s.endsWith('"') && s.length >= 2 ? s.slice(1, -1) : undefined) : s;
  if (t === undefined || t.includes('"') || Buffer.byteLength(t) >= IFNAMSIZ) return undefined;
  return t;
}

/**
 * A one-byte bit mask with flag names (tcp_flag): `syn`, `0x12`, or flags or'ed (`syn | ack`,
 * the element's words joined), printed as nft prints it (`fin | syn`).
 */
function flagsType(name: string, id: number, syms: Syms, expected: string): Datatype {
  const field = { name, type: 'flags', len: 1, load: { kind: 'meta', key: 'mark' }, syms } as const;
  return {
    name, id, len: 1, byteorder: BYTEORDER_BIG, prefix: false, ranges: false, bitmask: true, expected,
    parse: (s) => {
      let v = 0;
      for (const w of s.split('|')) {
        const n = syms.table.find(([k]) => k === w.trim())?.[1] ?? parseInteger(w.trim(), 0xff);
        if (n === undefined) return undefined;
        v |= n;
      }
      return toHex([v]);
    },
    format: (h) => formatInt(field, BigInt('0x' + h), ' | '),
  };
}

const TYPES: Datatype[] = [
  {
    name: 'ipv4_addr', id: 7, len: 4, byteorder: BYTEORDER_BIG, prefix: true, ranges: true, expected: 'an IPv4 address',
    parse: parseIPv4, format: formatIPv4,
  },
  {
    name: 'ipv6_addr', id: 8, len: 16, byteorder: BYTEORDER_BIG, prefix: true, ranges: true, expected: 'an IPv6 address',
    parse: parseIPv6, format: formatIPv6,
  },
  {
    name: 'ether_addr', id: 9, len: 6, byteorder: BYTEORDER_BIG, prefix: false, ranges: true, expected: 'a MAC address (00:11:22:33:44:55)',
    parse: (s) => (MAC.test(s) ? s.split(':').map((x) => x.toLowerCase().padStart(2, '0')).join('') : undefined),
    format: (h) => h.match(/../g)!.join(':'),
  },
  {
    name: 'inet_proto', id: 12, len: 1, byteorder: BYTEORDER_NONE, prefix: false, ranges: true, expected: 'a protocol name or number',
    parse: (s) => {
      const v = parseProtocol(s);
      return v === undefined ? undefined : toHex([v]);
    },
    format: (h) => formatProtocol(parseInt(h, 16)),
  },
  {
    name: 'inet_service', id: 13, len: 2, byteorder: BYTEORDER_BIG, prefix: false, ranges: true, expected: 'a port number or service name',
    parse: (s) => {
      const v = parseInteger(s, 0xffff) ?? serviceByName(s);
      return v === undefined ? undefined : u16Be(v);
    },
    format: (h) => String(parseInt(h, 16)),
  },
  {
    name: 'mark', id: 19, len: 4, byteorder: BYTEORDER_HOST, prefix: false, ranges: true, hostInt: true, expected: 'a 32-bit mark',
    parse: (s) => {
      const v = parseInteger(s, 0xffffffff);
      return v === undefined ? undefined : u32Host(v);
    },
    format: (h) => '0x' + readU32Host(h)!.toString(16).padStart(8, '0'),
  },
  {
    name: 'ifname', id: 41, len: IFNAMSIZ, byteorder: BYTEORDER_HOST, prefix: false, ranges: false, expected: 'an interface name ("eth0")',
    parse: (s) => {
      const n = unquote(s);
      return n === undefined || n.length === 0 ? undefined : ifnameBytes(n);
    },
    format: (h) => {
      const b = Buffer.from(h, 'hex');
      const nul = b.indexOf(0);
      return `"${b.subarray(0, nul < 0 ? b.length : nul).toString('utf8')}"`;
    },
  },
  flagsType('tcp_flag', 15, TCP_FLAGS, 'TCP flags (syn, syn | ack, 0x12)'),
  {
    // an interface by its index, as nft keeps it (a name is resolved in the target namespace: iif "eth0", an element "eth0")
    name: 'iface_index', id: 20, len: 4, byteorder: BYTEORDER_HOST, prefix: false, ranges: true, hostInt: true,
    expected: 'an interface index or the name of an interface of the target namespace',
    parse: (s) => {
      const v = parseInteger(s, 0xffffffff);
      return v === undefined ? undefined : u32Host(v);
    },
    format: (h) => String(readU32Host(h)!),
  },
];

export const DATATYPES: ReadonlyMap<string, Datatype> = new Map(TYPES.map((t) => [t.name, t]));
const BY_ID = new Map(TYPES.map((t) => [t.id, t]));

/** nft's TYPE_INTEGER: its length is the expression's (a typeof key such as udp length). */
const TYPE_INTEGER = 4;
const integers = new Map<number, Datatype>();

/** A big-endian integer of `len` bytes (1, 2 or 4), written and printed in decimal. */
function integerType(len: number): Datatype | undefined {
  if (len !== 1 && len !== 2 && len !== 4) return undefined;
  let t = integers.get(len);
  if (!t) {
    const max = 2 ** (len * 8) - 1;
    t = {
      name: 'integer', id: TYPE_INTEGER, len, byteorder: BYTEORDER_BIG, prefix: false, ranges: true, expected: `an integer 0-${max}`,
      parse: (s) => {
        const v = parseInteger(s, max);
        return v === undefined ? undefined : v.toString(16).padStart(len * 2, '0');
      },
      format: (h) => String(parseInt(h, 16)),
    };
    integers.set(len, t);
  }
  return t;
}

const hostIntegers = new Map<number, Datatype>();

/**
 * An integer of `len` bytes (2 or 4) in host byte order, as a typeof on a host-order key gives it
 * (ct zone, numgen, symhash): written and printed in decimal.
 */
function hostIntegerType(len: number): Datatype | undefined {
  if (len !== 2 && len !== 4) return undefined;
  let t = hostIntegers.get(len);
  if (!t) {
    const max = 2 ** (len * 8) - 1;
    t = {
      name: 'integer', id: TYPE_INTEGER, len, byteorder: BYTEORDER_HOST, prefix: false, ranges: true, hostInt: true,
      expected: `an integer 0-${max}`,
      parse: (s) => {
        const v = parseInteger(s, max);
        return v === undefined ? undefined : len === 4 ? u32Host(v) : swapBytes(v.toString(16).padStart(4, '0'));
      },
      format: (h) => String(len === 4 ? readU32Host(h)! : parseInt(swapBytes(h), 16)),
    };
    hostIntegers.set(len, t);
  }
  return t;
}

/** nft's TYPE_STRING: a NUL-padded string of the expression's length (osf name). */
const TYPE_STRING = 5;
const strings = new Map<number, Datatype>();
function stringType(len: number): Datatype {
  let t = strings.get(len);
  if (!t) {
    t = {
      name: 'string', id: TYPE_STRING, len, byteorder: BYTEORDER_HOST, prefix: false, ranges: false, expected: `a string of at most ${len - 1} bytes ("Linux")`,
      parse: (s) => {
        const n = unquote(s);
        const b = n === undefined ? undefined : Buffer.from(n, 'utf8');
        return b === undefined || b.length === 0 || b.length >= len || b.includes(0) ? undefined : toHex(Buffer.concat([b, Buffer.alloc(len - b.length)]));
      },
      format: (h) => {
        const b = Buffer.from(h, 'hex');
        const nul = b.indexOf(0);
        return `"${b.subarray(0, nul < 0 ? b.length : nul).toString('utf8')}"`;
      },
    };
    strings.set(len, t);
  }
  return t;
}

/** The datatype of an id; an integer's needs its length (`len`, the expression's), and a host-order one says so. */
export function datatypeById(id: number, len?: number, byteorder?: number): Datatype | undefined {
  if (id === TYPE_INTEGER) return len === undefined ? undefined : byteorder === BYTEORDER_HOST ? hostIntegerType(len) : integerType(len);
  if (id === TYPE_STRING) return len !== undefined && len > 1 && len <= 64 ? stringType(len) : undefined;
  return BY_ID.get(id);
}

/** A set's key or a map's data: one type or a concatenation of types. */
export interface KeyType {
  parts: Datatype[];
  /** NFTA_SET_KEY_TYPE / NFTA_SET_DATA_TYPE. */
  id: number;
  /** NFTA_SET_KEY_LEN / DATA_LEN: the parts, each rounded up to 4 bytes when concatenated. */
  len: number;
  byteorder: number;
}

/** The bytes a part takes in a concatenated key. */
export function partLen(t: Datatype): number {
  return Math.ceil(t.len / 4) * 4;
}

export function keyTypeOf(parts: Datatype[]): KeyType {
  if (parts.length === 1) return { parts, id: parts[0]!.id, len: parts[0]!.len, byteorder: parts[0]!.byteorder };
  let id = 0;
  for (const p of parts) id = (id << 6) | p.id;
  return { parts, id: id >>> 0, len: parts.reduce((n, p) => n + partLen(p), 0), byteorder: BYTEORDER_NONE };
}

/**
 * The parts of a kernel key type id: a single known type, or a concatenation
 * whose 6-bit groups are known types whose lengths add up to `len`.
 */
export function keyTypeFromKernel(id: number, len: number): KeyType | undefined {
  const single = datatypeById(id, len);
  if (single && single.len === len) return keyTypeOf([single]);
  const parts: Datatype[] = [];
  for (let v = id; v > 0; v = Math.floor(v / 64)) {
    const t = BY_ID.get(v % 64);
    if (!t) return undefined;
    parts.unshift(t);
  }
  if (parts.length < 2) return undefined;
  const k = keyTypeOf(parts);
  return k.len === len && k.id === id ? k : undefined;
}

/** `ipv4_addr . inet_service` as nft prints it. */
export function keyTypeName(k: KeyType): string {
  return k.parts.map((p) => p.name).join(' . ');
}

/** A part's value padded to its place in a concatenated key (zeros after it). */
export function padPart(t: Datatype, hex: Hex, concat: boolean): Hex {
  return concat ? hex + zeroHex(partLen(t) - t.len) : hex;
}

/** Splits a concatenated key into its parts' values. */
export function splitKey(k: KeyType, hex: Hex): Hex[] {
  if (k.parts.length === 1) return [hex];
  const out: Hex[] = [];
  let at = 0;
  for (const p of k.parts) {
    out.push(hex.slice(at * 2, (at + p.len) * 2));
    at += partLen(p);
  }
  return out;
}

/** Reverses the bytes of a value: host order to big-endian and back (for hostInt types in interval sets). */
export function swapBytes(h: Hex): Hex {
  return h.match(/../g)!.reverse().join('');
}
