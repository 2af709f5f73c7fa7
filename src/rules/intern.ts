/**
 * The one copy of a word that compiled rules keep by the tens of thousands (a verdict, a NAT
 * type): a word sliced from a rule's text is a new string each time, and kube-proxy's file at
 * 10,000 services keeps 67,000 `goto`/`jump` and 19,000 `dnat` in its compiled rules and maps.
 */
const WORDS = new Map<string, string>(
  ['accept', 'drop', 'return', 'continue', 'jump', 'goto', 'queue', 'break', 'snat', 'dnat', 'masquerade', 'redirect']
    .map((w) => [w, w]),
);

/** `w` itself, or the kept copy of it when it is one of the words above. */
export function internWord<T extends string>(w: T): T {
  return (WORDS.get(w) ?? w) as T;
}

const HEX = new Map<string, string>();

/**
 * One flat copy of a userdata string that sets share: nft's userdata for an anonymous set or
 * map is built by concatenating its TLVs, a tree of a dozen strings, and kube-proxy's file at
 * 10,000 services has 9,800 anonymous maps with the same one. Looking `h` up flattens it, and
 * the copy kept is returned. The table is emptied when it grows past 1,024 (they are few).
 */
export function internHex(h: string): string {
  const kept = HEX.get(h);
  if (kept !== undefined) return kept;
  if (HEX.size >= 1024) HEX.clear();
  HEX.set(h, h);
  return h;
}
