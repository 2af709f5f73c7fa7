/**
 * Byte helpers for the rule compiler and renderer. The IR holds byte strings
 * as lowercase hex in the order the kernel keeps them: network byte order for
 * addresses and ports, host byte order for marks, interface indexes and the
 * conntrack/meta integers.
 */
import { endianness } from 'node:os';

export const HOST_LE = endianness() === 'LE';

const HEX_DIGITS = '0123456789abcdef';

/*
 * Tables for the byte ↔ hex conversions every compiled and rendered value goes
 * through (a 10,000-service kube-proxy file is some 200,000 of them): one
 * lookup per byte, not a string per digit or a substring and parseInt.
 */
/** A byte's two hex digits. */
export const HEX2: readonly string[] = Array.from({ length: 256 }, (_, v) => HEX_DIGITS[v >> 4]! + HEX_DIGITS[v & 15]!);
/** A character code's value as a hex digit (either case), or 255. */
const DIGIT = new Uint8Array(128).fill(255);
for (let v = 0; v < 16; v++) {
  DIGIT[HEX_DIGITS.charCodeAt(v)] = v;
  DIGIT[HEX_DIGITS.toUpperCase().charCodeAt(v)] = v;
}

/** Zero bytes of a field's length in hex, made once per length (a compiled match needs them often, a string each time). */
const ZEROS: string[] = Array.from({ length: 17 }, (_, n) => '00'.repeat(n));
export function zeroHex(len: number): string {
  return len < ZEROS.length ? ZEROS[len]! : '00'.repeat(len);
}

/** The byte of two hex digits at `i`, or -1 when they are not both hex digits. */
export function hexByteAt(h: string, i: number): number {
  const a = h.charCodeAt(i), b = h.charCodeAt(i + 1);
  if (!(a < 128 && b < 128)) return -1;
  const x = DIGIT[a]!, y = DIGIT[b]!;
  return x === 255 || y === 255 ? -1 : (x << 4) | y;
}

export function toHex(b: ArrayLike<number>): string {
  let s = '';
  for (let i = 0; i < b.length; i++) {
    const v = b[i]!;
    s += (v & 0xff) === v ? HEX2[v]! : HEX_DIGITS[v >> 4]! + HEX_DIGITS[v & 15]!;
  }
  return s;
}

export function fromHex(h: string): Uint8Array {
  const out = new Uint8Array(h.length >> 1);
  for (let i = 0; i < out.length; i++) {
    const v = hexByteAt(h, i * 2);
    // (parseInt for what is not two hex digits: its NaN and partial readings are what callers always got)
    out[i] = v >= 0 ? v : parseInt(h.substr(i * 2, 2), 16);
  }
  return out;
}

/** A u32 in host byte order, as the kernel holds meta mark, ct state and friends. */
export function u32Host(v: number): string {
  const b0 = HEX2[v & 0xff]!, b1 = HEX2[(v >>> 8) & 0xff]!, b2 = HEX2[(v >>> 16) & 0xff]!, b3 = HEX2[(v >>> 24) & 0xff]!;
  return HOST_LE ? b0 + b1 + b2 + b3 : b3 + b2 + b1 + b0;
}

export function readU32Host(h: string): number | undefined {
  if (h.length !== 8) return undefined;
  const b = fromHex(h);
  if (!HOST_LE) b.reverse();
  return (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
}

export function u16Be(v: number): string {
  return HEX2[(v >> 8) & 0xff]! + HEX2[v & 0xff]!;
}

export function u8(v: number): string {
  return HEX2[v & 0xff]!;
}

export function hexToBig(h: string): bigint {
  return h.length === 0 ? 0n : BigInt('0x' + h);
}

export function bigToHex(v: bigint, len: number): string {
  const s = v.toString(16);
  return s.length >= len * 2 ? s.slice(s.length - len * 2) : '0'.repeat(len * 2 - s.length) + s;
}

/** Host-order integer value of a byte string (for sorting host-endian keys as nft does). */
export function hostValue(h: string): bigint {
  if (!HOST_LE) return hexToBig(h);
  let r = '';
  for (let i = h.length - 2; i >= 0; i -= 2) r += h.substr(i, 2);
  return hexToBig(r);
}

/** Mask of the first `plen` bits of a `len`-byte value, as hex. */
export function prefixMask(plen: number, len: number): string {
  let s = '';
  for (let i = 0; i < len; i++) {
    const bits = Math.max(0, Math.min(8, plen - i * 8));
    s += HEX_DIGITS[((0xff00 >> bits) & 0xff) >> 4]! + HEX_DIGITS[((0xff00 >> bits) & 0xff) & 15]!;
  }
  return s;
}

export function andHex(a: string, b: string): string {
  const x = fromHex(a), y = fromHex(b);
  for (let i = 0; i < x.length; i++) x[i] = x[i]! & (y[i] ?? 0);
  return toHex(x);
}

/** If `mask` is a run of leading one bits followed by zeros, its length; else undefined. */
export function prefixLenOfMask(mask: string): number | undefined {
  const b = fromHex(mask);
  let n = 0, i = 0;
  for (; i < b.length && b[i] === 0xff; i++) n += 8;
  if (i < b.length) {
    const v = b[i]!;
    let bits = 0;
    while (bits < 8 && (v & (0x80 >> bits))) bits++;
    if (((0xff00 >> bits) & 0xff) !== v) return undefined;
    n += bits;
    for (i++; i < b.length; i++) if (b[i] !== 0) return undefined;
  }
  return n;
}
