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
  /**
   * Operations of a flush-and-rewrite: one flush plus every desired rule and its sets (when the
   * edit costs no more than 1 + the desired rules, that lower bound: the rewrite is not chosen).
   */
  rewriteOps: number;
  /** True when the flush-and-rewrite is cheaper: then `steps` is not used. */
  rewrite: boolean;
}

/** What a plan of the chain's ops uses of an edit (src/keeper/plan.ts): its steps, unless a flush and rewrite is cheaper. */
export type RuleEdit = Pick<ChainEdit, 'steps' | 'rewrite'>;

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
  const editOps = stepsIn(keep, 0, haveCount, 0, want.length, undefined, steps, setsOf);
  return withRewrite(keep, steps, editOps, want.length, setsOf);
}

/**
 * A chain whose desired rules are known to differ from the kernel's only in `splices` (src/model/derivation.ts;
 * outside them desired rule j is kernel rule j + the offset the splices before it leave), planned by
 * matching the splices' rules alone: a registration among 1,000 owners looks at its own jump, not at
 * every owner's. The same plan planChain makes when its matching keeps the rules outside the splices.
 * Undefined when the splices are not runs of these two lists (the caller then plans the whole chain).
 */
export function planSplices(haveKey: (i: number) => string, haveCount: number, wantKey: (j: number) => string, wantCount: number,
  splices: readonly { fromStart: number; fromEnd: number; start: number; end: number }[], setsOf: (j: number) => number = () => 0): ChainEdit | undefined {
  const keep = new Int32Array(wantCount);
  const steps: EditStep[] = [];
  let editOps = 0;
  let i = 0;
  let j = 0;
  for (const h of splices) {
    for (; j < h.start; j++) keep[j] = i++;
    if (i !== h.fromStart || h.fromEnd > haveCount || h.end > wantCount) return undefined;  // not runs of these lists: planChain
    // Keys only where both sides have rules to match (an owner added or removed has none to compare).
    if (h.fromStart < h.fromEnd && h.start < h.end) {
      const a: string[] = [];
      for (let x = h.fromStart; x < h.fromEnd; x++) a.push(haveKey(x));
      const b: string[] = [];
      for (let y = h.start; y < h.end; y++) b.push(wantKey(y));
      const local = matchKeys((x) => a[x]!, a.length, b);
      for (let y = 0; y < b.length; y++) keep[h.start + y] = local[y]! >= 0 ? h.fromStart + local[y]! : -1;
    } else {
      for (let y = h.start; y < h.end; y++) keep[y] = -1;
    }
    // The rule before the splice is kept (splices never touch): new rules go after its handle.
    editOps += stepsIn(keep, h.fromStart, h.fromEnd, h.start, h.end, h.start > 0 ? { kind: 'kept', have: h.fromStart - 1 } : undefined, steps, setsOf);
    i = h.fromEnd;
    j = h.end;
  }
  for (; j < wantCount; j++) keep[j] = i++;
  if (i !== haveCount) return undefined;
  return withRewrite(keep, steps, editOps, wantCount, setsOf);
}

/** A run of desired rules the kernel lacks, over the kernel rules standing in their place (`have` indices [from, to)). */
export interface MissingRun {
  /** Desired rules [start, end), none of them in the kernel. */
  start: number;
  end: number;
  /** The kernel rule before them (desired rule start - 1, kept), absent at the head of the chain. */
  after?: number;
  from: number;
  to: number;
}

/** stepsIn's match for the desired rules of a run: none kept (the runs are at most a repair's few ops long). */
const NONE_KEPT = new Int32Array(64).fill(-1);

/**
 * A chain whose match is known (the view's followed part: each desired rule present at its handle,
 * or missing; each foreign rule by its handle, some in a missing rule's place), planned over what
 * differs alone: the kernel rules in `deleted` go, and each run of missing rules is the gap planChain
 * would find between two kept rules (the kernel rules in its place replaced, the rest inserted after
 * the rule before). O(difference): `have` indices name only the rules the steps use. Never a
 * rewrite: the events our commit shows must be the planned rule ops.
 */
export function planKnown(runs: readonly MissingRun[], deleted: readonly number[]): RuleEdit {
  const steps: EditStep[] = [];
  for (const have of deleted) steps.push({ op: 'delete', have });
  for (const r of runs) {
    const keep = r.end - r.start <= NONE_KEPT.length ? NONE_KEPT : new Int32Array(r.end - r.start).fill(-1);
    stepsIn(keep, r.from, r.to, r.start, r.end, r.after !== undefined ? { kind: 'kept', have: r.after } : undefined, steps, NO_SETS, r.start);
  }
  return { steps, rewrite: false };
}

const NO_SETS = () => 0;

/**
 * A flush-and-rewrite costs one flush plus every desired rule and its sets: at least 1 + wantCount,
 * counted exactly only when the edit costs more than that (a walk of every desired rule otherwise).
 */
function withRewrite(keep: Int32Array, steps: EditStep[], editOps: number, wantCount: number, setsOf: (j: number) => number): ChainEdit {
  let rewriteOps = 1 + wantCount;
  if (editOps > rewriteOps) {
    rewriteOps = 1;
    for (let j = 0; j < wantCount; j++) rewriteOps += 1 + setsOf(j);
  }
  return { keep, steps, editOps, rewriteOps, rewrite: rewriteOps < editOps };
}

/**
 * The steps for desired rules [wLo, wHi) over kernel rules [hLo, hHi), `keep` mapping the one to
 * the other (desired rule j at keep[j - base]), appended to `steps`; `anchor` is the rule the first
 * new one goes after. Returns their ops.
 */
function stepsIn(keep: Int32Array, hLo: number, hHi: number, wLo: number, wHi: number, anchor: Anchor | undefined,
  steps: EditStep[], setsOf: (j: number) => number, base = 0): number {
  // Walk the desired list; between two kept rules lies a gap of kernel rules that go and desired
  // rules that come. Pair them up as replaces (one op, and the handle stays), the rest are deletes
  // or inserts.
  let editOps = 0;
  let hi = hLo;
  let prev = anchor;
  let prevKept = -1;  // a kept rule's anchor, made only when a new rule follows it
  let pending = 0;
  const pendingAt: number[] = [];
  const closeGap = (haveEnd: number) => {
    if (hi === haveEnd && pending === 0) return;
    if (prevKept >= 0) prev = { kind: 'kept', have: prevKept };
    prevKept = -1;
    const gone = haveEnd - hi;
    const paired = Math.min(gone, pending);
    for (let t = 0; t < paired; t++) {
      steps.push({ op: 'replace', have: hi + t, want: pendingAt[t]!, ...(prev ? { after: prev } : {}) });
      editOps += 1 + setsOf(pendingAt[t]!);
      prev = { kind: 'new', want: pendingAt[t]! };
    }
    for (let t = paired; t < gone; t++) {
      steps.push({ op: 'delete', have: hi + t });
      editOps++;
    }
    for (let t = paired; t < pending; t++) {
      steps.push({ op: 'insert', want: pendingAt[t]!, ...(prev ? { after: prev } : {}) });
      editOps += 1 + setsOf(pendingAt[t]!);
      prev = { kind: 'new', want: pendingAt[t]! };
    }
    hi = haveEnd;
    pending = 0;
    pendingAt.length = 0;
  };
  for (let j = wLo; j < wHi; j++) {
    const k = keep[j - base]!;
    if (k < 0) {
      pendingAt.push(j);
      pending++;
      continue;
    }
    closeGap(k);
    hi = k + 1;
    prevKept = k;
  }
  closeGap(hHi);
  return editOps;
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
