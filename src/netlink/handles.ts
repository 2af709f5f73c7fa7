/**
 * The handles of a batch's new rules, derived from a few echoed ones. The kernel allocates chain,
 * rule, set, object and flowtable handles from one counter per table (nf_tables_alloc_handle,
 * table->hgenerator), under the commit mutex, in the batch's order: a new rule takes one, a replace
 * or a delete none; a new set (anonymous ones included) one. So within a run of a table's rule ops
 * that nothing else of that table interrupts, the new rules hold consecutive handles, and the
 * echoes of the run's first and last new rule prove it (their difference is the count between
 * them) and give every other one's. An op of the table whose handle-taking this batch cannot tell
 * (a chain, named set or object added, which takes none where it exists; the table itself) ends
 * the run; an anonymous set, always new, is counted inside it.
 */
import type { Op } from './ops.js';
import { SET_F } from './objects.js';

/** One run: its first and last new rule's op indices. */
interface Run {
  first: number;
  last: number;
}

/** A new rule: takes a handle (a replace names the one it keeps; an add with a handle is refused). */
function newRule(op: Op): boolean {
  return op.object === 'rule' && (op.verb === 'add' || op.verb === 'insert') && op.handle === undefined;
}

/** An anonymous set added: always new, so it takes a handle. */
function anonymousSet(op: Op): boolean {
  return op.object === 'set' && (op.verb === 'add' || op.verb === 'create') && op.flags !== undefined && (op.flags & SET_F.ANONYMOUS) !== 0;
}

/** The table an op is of, as one string; the key of the op before reused (a batch's ops come by table). */
function tableKeys(): (op: Op) => string {
  let family: string | undefined, table: string | undefined, key = '';
  return (op) => {
    const t = op.object === 'table' ? op.name : op.table;
    if (op.family !== family || t !== table) {
      family = op.family;
      table = t;
      key = `${family} ${t}`;
    }
    return key;
  };
}

/** The runs of `ops`, per table, each with at least one new rule (one walk, nothing kept per op). */
function runsOf(ops: readonly Op[]): Run[] {
  const open = new Map<string, Run>();
  const out: Run[] = [];
  const keyOf = tableKeys();
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (op.object === 'element') continue;
    const k = keyOf(op);
    if (newRule(op)) {
      let r = open.get(k);
      if (!r) open.set(k, r = { first: i, last: i });
      r.last = i;
      continue;
    }
    // A replace or a delete takes none; an anonymous set one, counted where its run's handles are derived.
    if (op.object === 'rule' || anonymousSet(op)) continue;
    // Anything else of the table (a chain, a named set or object added, which takes none where it
    // exists; a deletion, after which the same may be added again; the table) ends its run.
    const r = open.get(k);
    if (r) {
      out.push(r);
      open.delete(k);
    }
  }
  for (const r of open.values()) out.push(r);
  return out;
}

/** The op indices whose new rules a commit echoes for deriveHandles: each run's first and last new rule. */
export function echoPoints(ops: readonly Op[]): number[] {
  const out: number[] = [];
  for (const r of runsOf(ops)) {
    out.push(r.first);
    if (r.last !== r.first) out.push(r.last);
  }
  return out.sort((a, b) => a - b);
}

/**
 * The handle of every new or replaced rule of `ops`, by op index, from the handles echoed for echoPoints(ops):
 * undefined unless every run's echoes are there and lie exactly as far apart as the run's
 * handle-taking ops (never a guess the kernel did not confirm).
 */
export function deriveHandles(ops: readonly Op[], echoed: ReadonlyMap<number, number>): ReadonlyMap<number, number> | undefined {
  const out = new OpHandles(ops.length);
  // A replaced rule keeps its handle.
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (op.object === 'rule' && op.verb === 'replace') out.set(i, op.handle!);
  }
  const keyOf = tableKeys();
  for (const r of runsOf(ops)) {
    const h0 = echoed.get(r.first), h1 = echoed.get(r.last);
    if (h0 === undefined || h1 === undefined) return undefined;
    // The handles from the first new rule on: each new rule's, and each anonymous set's between.
    const k = keyOf(ops[r.first]!);
    let at = 0;
    let span = -1;
    for (let i = r.first; i <= r.last; i++) {
      const op = ops[i]!;
      if (op.object === 'element' || keyOf(op) !== k) continue;
      if (newRule(op)) {
        out.set(i, h0 + at);
        span = at;
        at++;
      } else if (anonymousSet(op)) {
        at++;
      }
    }
    if (h1 - h0 !== span) return undefined;
  }
  return out;
}

/** Handles by op index in one typed array (an install's 100,000 without a map entry each); 0 for none (no handle is 0). */
class OpHandles implements ReadonlyMap<number, number> {
  private readonly at: Float64Array;
  private count = 0;

  constructor(ops: number) {
    this.at = new Float64Array(ops);
  }

  set(i: number, handle: number): void {
    if (this.at[i] === 0) this.count++;
    this.at[i] = handle;
  }

  get(i: number): number | undefined {
    const h = this.at[i];
    return h ? h : undefined;
  }

  has(i: number): boolean {
    return !!this.at[i];
  }

  get size(): number {
    return this.count;
  }

  *entries(): MapIterator<[number, number]> {
    for (let i = 0; i < this.at.length; i++) if (this.at[i]) yield [i, this.at[i]!];
  }

  *keys(): MapIterator<number> {
    for (const [i] of this.entries()) yield i;
  }

  *values(): MapIterator<number> {
    for (const [, h] of this.entries()) yield h;
  }

  [Symbol.iterator](): MapIterator<[number, number]> {
    return this.entries();
  }

  forEach(f: (handle: number, i: number, map: ReadonlyMap<number, number>) => void): void {
    for (const [i, h] of this.entries()) f(h, i, this);
  }
}
