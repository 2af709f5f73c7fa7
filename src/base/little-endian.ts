/**
 * A u16, little-endian, at `at` of `b`, which the caller has checked holds two bytes there. Not
 * Buffer's readUInt16LE: its argument check goes through a wrapper that allocates an array per
 * call, garbage a warm install made 30,000 times at 10,000 rules (its encoded rules' lengths).
 */
export function u16le(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8);
}
