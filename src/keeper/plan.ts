/**
 * Minimal edit plans for one chain: which kernel rules stay (with their
 * handles and counters), which go (delete by handle), which change in place
 * (replace by handle) and where new ones go (add after a kept rule's handle,
 * or after a rule added earlier in the same batch by NFTA_RULE_POSITION_ID).
 * A flush-and-rewrite is chosen only when it takes fewer operations.
 *
 * The matching is a keyed diff that keeps order: common prefix and suffix,
 * then patience anchors (keys that occur once on each side, longest
 * increasing run of their positions) for big gaps, an exact LCS table for
 * small ones. Every step is linear or n·log n in the rules it looks at,
 * and total work has a budget, so a chain of 100,000 rules plans in
 * milliseconds; past the budget a gap is treated as all new, which is still
 * correct, only less minimal.
 */

/** What to do with one chain's rules. Indices refer to the kernel list (`have`) and the desired list (`want`). */
export interface ChainEdit {
  /** For each desired rule, the index of the kernel rule it keeps, or -1. */
  keep: Int32Array;
  /** The steps in chain order; `after` of an insert names the rule it follows (none: head of chain). */
  steps: EditStep[];
  /** Operations of the edit (rules, plus anonymous sets of the rules it adds). */
  editOps: number;
  /** Operations of a flush-and-rewrite: one flush plus every desired rule and its sets. */
  rewriteOps: number;
  /** True when the flush-and-rewrite is cheaper: then `steps` is not used. */
  rewrite: boolean;
}

export type Anchor = { kind: 'kept'; have: number } | { kind: 'new'; want: number };

export type EditStep =
  | { op: 'delete'; have: number }
  | { op: 'replace'; have: number; want: number; after?: Anchor }
  | { op: 'insert'; want: number; after?: Anchor };

/** Gaps larger than this (kernel × desired rules) without anchors are not matched exactly. */
const LCS_CELLS = 250_000;

/**
 * Plans `have` (kernel keys, fetched lazily by index) into `want` (desired keys).
 * `setsOf(j)` is the number of anonymous sets desired rule j adds with itself.
 */
export function planChain(haveKey: (i: number) => string, haveCount: number, want: readonly string[],
  setsOf: (j: number) => number = () => 0): ChainEdit {
  const keep = matchKeys(haveKey, haveCount, want);
  const steps: EditStep[] = [];
  let editOps = 0;
  let rewriteOps = 1;
  for (let j = 0; j < want.length; j++) rewriteOps += 1 + setsOf(j);

  // Walk the desired list; between two kept rules lies a gap of kernel rules that go and desired
  // rules that come. Pair them up as replaces (one op, and the handle stays), the rest are deletes
  // or inserts.
  let hi = 0;
  let prev: Anchor | undefined;
  let pending: number[] = [];
  const closeGap = (haveEnd: number) => {
    const gone: number[] = [];
    for (; hi < haveEnd; hi++) gone.push(hi);
    const paired = Math.min(gone.length, pending.length);
    for (let t = 0; t < paired; t++) {
      steps.push({ op: 'replace', have: gone[t]!, want: pending[t]!, ...(prev ? { after: prev } : {}) });
      editOps += 1 + setsOf(pending[t]!);
      prev = { kind: 'new', want: pending[t]! };
    }
    for (let t = paired; t < gone.length; t++) {
      steps.push({ op: 'delete', have: gone[t]! });
      editOps++;
    }
    for (let t = paired; t < pending.length; t++) {
      steps.push({ op: 'insert', want: pending[t]!, ...(prev ? { after: prev } : {}) });
      editOps += 1 + setsOf(pending[t]!);
      prev = { kind: 'new', want: pending[t]! };
    }
    pending = [];
  };
  for (let j = 0; j < want.length; j++) {
    const k = keep[j]!;
    if (k < 0) {
      pending.push(j);
      continue;
    }
    closeGap(k);
    hi = k + 1;
    prev = { kind: 'kept', have: k };
  }
  closeGap(haveCount);
  return { keep, steps, editOps, rewriteOps, rewrite: rewriteOps < editOps };
}

/**
 * An order-keeping matching of desired keys to kernel keys: keep[j] = i means
 * desired rule j is kernel rule i, and kept pairs increase in both indices.
 */
export function matchKeys(haveKey: (i: number) => string, n: number, want: readonly string[]): Int32Array {
  const m = want.length;
  const keep = new Int32Array(m).fill(-1);
  // Common prefix and suffix first: the usual drift (one rule gone, one added) leaves the middle tiny,
  // and kernel keys past the first difference are computed from the end.
  let p = 0;
  while (p < n && p < m && haveKey(p) === want[p]) keep[p] = p++;
  let s = 0;
  while (s < n - p && s < m - p && haveKey(n - 1 - s) === want[m - 1 - s]) {
    keep[m - 1 - s] = n - 1 - s;
    s++;
  }
  const aLen = n - p - s;
  const bLen = m - p - s;
  if (aLen === 0 || bLen === 0) return keep;
  const a: string[] = new Array(aLen);
  for (let i = 0; i < aLen; i++) a[i] = haveKey(p + i);
  const b = want.slice(p, m - s);
  const local = new Int32Array(bLen).fill(-1);
  matchRange(a, b, local);
  for (let j = 0; j < bLen; j++) if (local[j]! >= 0) keep[p + j] = p + local[j]!;
  return keep;
}

/** Patience anchors and LCS tables over a and b, into keep (b index → a index). */
function matchRange(a: readonly string[], b: readonly string[], keep: Int32Array): void {
  let budget = 32 * (a.length + b.length) + 100_000;
  const stack: [number, number, number, number][] = [[0, a.length, 0, b.length]];
  while (stack.length > 0) {
    let [aLo, aHi, bLo, bHi] = stack.pop()!;
    while (aLo < aHi && bLo < bHi && a[aLo] === b[bLo]) keep[bLo++] = aLo++;
    while (aLo < aHi && bLo < bHi && a[aHi - 1] === b[bHi - 1]) keep[--bHi] = --aHi;
    if (aLo === aHi || bLo === bHi) continue;
    const cells = (aHi - aLo) * (bHi - bLo);
    if (cells <= LCS_CELLS && budget >= cells) {
      // Small enough for the exact answer.
      budget -= cells;
      lcsTable(a, aLo, aHi, b, bLo, bHi, keep);
      continue;
    }
    const cost = aHi - aLo + bHi - bLo;
    if (budget < cost) continue;  // out of budget: this gap is all new (correct, not minimal)
    budget -= cost;
    const anchors = uniqueAnchors(a, aLo, aHi, b, bLo, bHi);
    if (anchors.length > 0) {
      let ai = aLo;
      let bi = bLo;
      for (const [x, y] of anchors) {
        keep[y] = x;
        stack.push([ai, x, bi, y]);
        ai = x + 1;
        bi = y + 1;
      }
      stack.push([ai, aHi, bi, bHi]);
    }
    // No anchors in a big gap (every key repeats): left unmatched.
  }
}

/** Pairs (a index, b index) of keys that occur exactly once in each range, longest increasing in both. */
function uniqueAnchors(a: readonly string[], aLo: number, aHi: number,
  b: readonly string[], bLo: number, bHi: number): [number, number][] {
  // Per key: occurrences in a and b, and the position of the last one in each.
  const seen = new Map<string, { ca: number; cb: number; ia: number; ib: number }>();
  for (let i = aLo; i < aHi; i++) {
    const e = seen.get(a[i]!);
    if (e) e.ca++;
    else seen.set(a[i]!, { ca: 1, cb: 0, ia: i, ib: -1 });
  }
  for (let j = bLo; j < bHi; j++) {
    const e = seen.get(b[j]!);
    if (e) {
      e.cb++;
      e.ib = j;
    }
  }
  const pairs: [number, number][] = [];
  for (let i = aLo; i < aHi; i++) {
    const e = seen.get(a[i]!)!;
    if (e.ca === 1 && e.cb === 1) pairs.push([i, e.ib]);
  }
  if (pairs.length <= 1) return pairs;
  // Longest increasing subsequence of the b positions (patience sorting), pairs already by a.
  const tails: number[] = [];
  const back = new Int32Array(pairs.length).fill(-1);
  for (let k = 0; k < pairs.length; k++) {
    const y = pairs[k]![1];
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (pairs[tails[mid]!]![1] < y) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0) back[k] = tails[lo - 1]!;
    tails[lo] = k;
  }
  const out: [number, number][] = new Array(tails.length);
  for (let k = tails[tails.length - 1]!, t = tails.length - 1; k >= 0; k = back[k]!, t--) out[t] = pairs[k]!;
  return out;
}

/** Exact longest common subsequence of two small ranges. */
function lcsTable(a: readonly string[], aLo: number, aHi: number,
  b: readonly string[], bLo: number, bHi: number, keep: Int32Array): void {
  const n = aHi - aLo;
  const m = bHi - bLo;
  const w = m + 1;
  // len[i][j] = LCS of a[aLo+i..] and b[bLo+j..]
  const len = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      len[i * w + j] = a[aLo + i] === b[bLo + j] ? len[(i + 1) * w + j + 1]! + 1
        : Math.max(len[(i + 1) * w + j]!, len[i * w + j + 1]!);
    }
  }
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[aLo + i] === b[bLo + j]) {
      keep[bLo + j] = aLo + i;
      i++;
      j++;
    } else if (len[(i + 1) * w + j]! >= len[i * w + j + 1]!) {
      i++;
    } else {
      j++;
    }
  }
}
