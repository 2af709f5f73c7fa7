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
