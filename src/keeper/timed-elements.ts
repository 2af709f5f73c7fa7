/**
 * The timed set elements (a timeout or expires in the config) this process has seen installed: one
 * of those missing later has expired and is left to the kernel, one never seen is installed.
 */
import type { Batch } from '../netlink/batch.js';
import type { ObservedTable, SetElement } from '../netlink/objects.js';
import { SET_F } from '../netlink/objects.js';
import type { TableConfig } from '../model/desired.js';
import { elementId } from '../model/elements.js';

/** See DiffOptions.timedSeen: element ids by `family table set`. */
export type TimedSeen = Map<string, Set<string>>;

/**
 * Keeps `timedSeen` (DiffOptions.timedSeen) for `tables` after an observation: the desired timed elements found in
 * the kernel are noted as seen, and those no longer desired are forgotten (desired again later, they are
 * installed again).
 */
export function noteTimedSeen(timedSeen: TimedSeen, tables: readonly TableConfig[], observed: readonly ObservedTable[]): void {
  const keep = new Set<string>();
  for (const [i, t] of tables.entries()) {
    for (const s of t.sets ?? []) {
      if (!(s.set.flags & SET_F.TIMEOUT)) continue;
      const k = `${t.family} ${t.name} ${s.name}`;
      const timed = s.elements.filter((e) => e.timeout !== undefined || e.expiration !== undefined);
      if (timed.length === 0) continue;
      keep.add(k);
      const old = timedSeen.get(k);
      const present = new Set((observed[i]?.sets.get(s.name)?.elements ?? []).map(elementId));
      const now = new Set<string>();
      for (const e of timed) {
        const id = elementId(e);
        if (old?.has(id) || present.has(id)) now.add(id);
      }
      timedSeen.set(k, now);
    }
  }
  for (const k of timedSeen.keys()) if (!keep.has(k)) timedSeen.delete(k);
}

/** After a commit of `batch`: the timed elements it added (with their set, or to it) are noted as seen. */
export function noteTimedAdded(timedSeen: TimedSeen, batch: Batch): void {
  for (const op of batch.ops) {
    if (op.verb !== 'add' && op.verb !== 'create') continue;
    let k: string;
    let els: readonly SetElement[] | undefined;
    if (op.object === 'element') [k, els] = [`${op.family} ${op.table} ${op.set}`, op.elements];
    else if (op.object === 'set') [k, els] = [`${op.family} ${op.table} ${op.name}`, op.elements];
    else continue;
    if (!els) continue;
    for (const e of els) {
      if (e.timeout === undefined && e.expiration === undefined) continue;
      let a = timedSeen.get(k);
      if (!a) timedSeen.set(k, a = new Set());
      a.add(elementId(e));
    }
  }
}
