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

/** One run: the op indices of its handle-taking ops, in order, and which of them are new rules. */
interface Run {
  takers: number[];
  rules: number[];
}

/** The runs of `ops`, per table, each with at least one new rule. */
function runsOf(ops: readonly Op[]): Run[] {
  const open = new Map<string, Run>();
  const out: Run[] = [];
  const close = (k: string) => {
    const r = open.get(k);
    if (r && r.rules.length > 0) out.push(r);
    open.delete(k);
  };
  for (const [i, op] of ops.entries()) {
    const k = `${op.family} ${op.object === 'table' ? op.name : op.table}`;
    if (op.object === 'element') continue;
    if (op.object === 'rule') {
      if (op.verb === 'replace' || op.verb === 'delete' || op.handle !== undefined) continue;
      let r = open.get(k);
      if (!r) open.set(k, r = { takers: [], rules: [] });
      r.takers.push(i);
      r.rules.push(i);
      continue;
    }
    if (op.object === 'set' && (op.verb === 'add' || op.verb === 'create') && op.flags !== undefined && (op.flags & SET_F.ANONYMOUS) !== 0) {
      const r = open.get(k);
      if (r) r.takers.push(i);
      else open.set(k, { takers: [i], rules: [] });
      continue;
    }
    // Deleting or flushing takes no handle, but what it deletes may be added again in the run:
    // anything but a rule, an element or an anonymous set ends it.
    close(k);
  }
  for (const k of [...open.keys()]) close(k);
  return out;
}

/** The op indices whose new rules a commit echoes for deriveHandles: each run's first and last new rule. */
export function echoPoints(ops: readonly Op[]): number[] {
  const out: number[] = [];
  for (const r of runsOf(ops)) {
    out.push(r.rules[0]!);
    if (r.rules.length > 1) out.push(r.rules[r.rules.length - 1]!);
  }
  return out.sort((a, b) => a - b);
}

/**
 * The handle of every new or replaced rule of `ops`, by op index, from the handles echoed for echoPoints(ops):
 * undefined unless every run's echoes are there and lie exactly as far apart as the run's
 * handle-taking ops (never a guess the kernel did not confirm).
 */
export function deriveHandles(ops: readonly Op[], echoed: ReadonlyMap<number, number>): Map<number, number> | undefined {
  const out = new Map<number, number>();
  // A replaced rule keeps its handle.
  for (const [i, op] of ops.entries()) if (op.object === 'rule' && op.verb === 'replace') out.set(i, op.handle!);
  for (const r of runsOf(ops)) {
    const first = r.rules[0]!, last = r.rules[r.rules.length - 1]!;
    const h0 = echoed.get(first), h1 = echoed.get(last);
    if (h0 === undefined || h1 === undefined) return undefined;
    const from = r.takers.indexOf(first);
    if (h1 - h0 !== r.takers.indexOf(last) - from) return undefined;
    let at = 0;
    for (let j = from; j < r.takers.length; j++) {
      const i = r.takers[j]!;
      if (i > last) break;
      if (ops[i]!.object === 'rule') out.set(i, h0 + at);
      at++;
    }
  }
  return out;
}
