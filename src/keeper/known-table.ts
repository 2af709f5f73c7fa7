/**
 * One table as the known state holds it (known.ts), and what its pieces share: how a table is
 * keyed, which sets are read at each look and which are known by their desired elements, and why
 * stateful objects keep a table out of it.
 */
import type { ChainConfig, TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import { SET_F, type NftSet, type ObservedTable } from '../netlink/objects.js';
export const tableKey = (t: { family: string; name: string }) => `${t.family} ${t.name}`;

export interface KnownTable {
  observed: ObservedTable;
  /** The desired chain (by identity) each chain's rules were verified against. */
  verified: Map<string, ChainConfig>;
  /**
   * The desired set (by identity) whose elements each named set holds: observed.sets has that
   * config's own element list for it, not a decoded copy. A volatile set (see volatileSet) is never
   * here: its elements are read at each look.
   */
  verifiedSets: Map<string, SetConfig>;
  /**
   * The desired table (by identity) every chain of which is in `verified` as that table's own
   * object, the kernel holding no other chain: a pass for a table derived from it (src/model/derivation.ts)
   * compares only the chains the derivation changed. Undefined when not known so.
   */
  whole?: TableConfig;
}

/**
 * Sets whose elements the kernel changes without a commit, so that no generation or event vouches
 * for them: timeouts expire, and a dynamic set's elements are added (and updated) by the data path.
 * The known state holds their definition but reads their elements at each look (one element dump
 * of that set, not of the table). Interval sets change only by commits and are known like plain ones.
 */
export const volatileSet = (s: NftSet): boolean => (s.flags & (SET_F.TIMEOUT | SET_F.EVAL)) !== 0;

/** What a look of a known table needs of each desired set: its definition, and its elements unless volatile. */
export function knownSets(t: TableConfig, defs: (name: string) => NftSet | undefined, verifiedSets: Map<string, SetConfig>):
  ObservedTable['sets'] | undefined {
  const sets: ObservedTable['sets'] = new Map();
  for (const s of t.sets ?? []) {
    const set = defs(s.name);
    if (!set) return undefined;
    if (volatileSet(s.set)) {
      verifiedSets.delete(s.name);
      sets.set(s.name, { set, elements: [] });  // read at each look (Reconciler.look)
    } else {
      verifiedSets.set(s.name, s);
      sets.set(s.name, { set, elements: s.elements });
    }
  }
  return sets;
}

/**
 * Stateful objects are not part of the known state: their configuration can be changed in place
 * (NEWOBJ with the update flag) without touching the table's use count, so a table that has or
 * wants any is read at each look.
 */
export function objectsUnknown(t: TableConfig, o: ObservedTable): boolean {
  return (t.objects?.length ?? 0) > 0 || (o.objs?.size ?? 0) > 0;
}
