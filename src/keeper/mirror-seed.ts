/**
 * The event mirror's view of the desired state: made from a clean look (seedView), and moved to a
 * new desired state that changes only elements (the retarget helpers), without a read.
 */
import type { TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import { elementId, sameContent, sameElementFields, setDefinitionKey } from '../model/elements.js';
import { SET_F, type ObservedTable, type SetElement } from '../netlink/objects.js';
import { desiredKey } from './rule-key.js';
import { NO_RULES, type MirrorChain, type MirrorSet, type MirrorTable } from './mirror-plan.js';

/**
 * Sets whose elements change without a commit, or come in pieces, and object maps (whose element
 * events the monitor does not decode the object of): their element events turn the mirror off.
 */
const UNFOLLOWED_SET_FLAGS = SET_F.INTERVAL | SET_F.TIMEOUT | SET_F.EVAL | SET_F.CONSTANT | SET_F.OBJECT;

/** Whether the mirror follows this set's elements from the events (see UNFOLLOWED_SET_FLAGS). */
export function follows(sc: SetConfig): boolean {
  return (sc.set.flags & UNFOLLOWED_SET_FLAGS) === 0;
}

/** A table's key in the mirror's maps. */
export const tableKey = (family: string, table: string) => `${family} ${table}`;
const key = tableKey;

/**
 * The mirror's chains and sets from a look that found every desired table as desired: per desired
 * chain the kernel handle of each desired rule, in order; per followed set its desired elements.
 * Undefined when the look does not fit.
 */
export function seedView(desired: readonly TableConfig[], observed: readonly ObservedTable[]):
  { tables: Map<string, MirrorTable>; sets: Map<string, Map<string, MirrorSet | null>> } | undefined {
  const tables = new Map<string, MirrorTable>();
  const sets = new Map<string, Map<string, MirrorSet | null>>();
  for (const [i, t] of desired.entries()) {
    const have = observed[i];
    if (!have?.table || have.family !== t.family || have.name !== t.name) return undefined;
    if (have.chains.size !== t.chains.length) return undefined;
    const chains = new Map<string, MirrorChain>();
    for (const c of t.chains) {
      const rules = have.rules.get(c.name);
      if (!have.chains.has(c.name) || !rules || rules.length !== c.rules.length) return undefined;
      const handles = new Float64Array(rules.length);
      const byHandle = new Map<number, number>();
      for (let j = 0; j < rules.length; j++) {
        const h = rules[j]!.handle;
        if (!h) return undefined;
        handles[j] = h;
        byHandle.set(h, j);
      }
      chains.set(c.name, { family: t.family, table: t.name, name: c.name, key: `${key(t.family, t.name)} ${c.name}`, handles, byHandle, missing: new Set(), extras: new Map() });
    }
    tables.set(key(t.family, t.name), { table: have.table, chains, rules: NO_RULES });
    const named = new Map<string, MirrorSet | null>();
    for (const sc of t.sets ?? []) {
      const h = have.sets.get(sc.name);
      if (!h) return undefined;
      // The look was clean, so a followed set holds exactly its desired elements (none can have
      // expired: such a set takes no timeouts, and nothing but commits adds to it).
      const want = follows(sc) ? wantOf(sc) : undefined;
      named.set(sc.name, want && want.size === h.elements.length
        ? { family: t.family, table: t.name, name: sc.name, config: sc, want, differs: new Map() } : null);
    }
    sets.set(key(t.family, t.name), named);
  }
  return { tables, sets };
}

/** A set's new desired elements, the same as before but a few changed or appended (alignedChanges): only those are looked at. */
export function retargetChanged(ms: MirrorSet, sc: SetConfig, changed: readonly number[]): void {
  for (const i of changed) {
    const w = sc.elements[i]!;
    const id = elementId(w);
    const k = ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
    ms.want.set(id, w);
    if (k !== null && sameContent(w, k)) ms.differs.delete(id);
    else ms.differs.set(id, k);
  }
  ms.config = sc;
}

/** A set's new desired elements (`want`, by identity): where the kernel now differs from them. */
export function retargetSet(ms: MirrorSet, sc: SetConfig, want: Map<string, SetElement>): void {
  // What the kernel holds: the old desired elements where they did not differ.
  const kernel = (id: string) => ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
  const differs = new Map<string, SetElement | null>();
  for (const [id, w] of want) {
    const k = kernel(id);
    if (k === null || !sameContent(w, k)) differs.set(id, k);
  }
  for (const id of ms.want.keys()) {
    if (want.has(id)) continue;
    const k = kernel(id);
    if (k !== null) differs.set(id, k);
  }
  for (const [id, k] of ms.differs) if (k !== null && !want.has(id) && !ms.want.has(id)) differs.set(id, k);
  ms.config = sc;
  ms.want = want;
  ms.differs = differs;
}

/** An unfollowed set's desired config, the same as before in definition and elements (timeouts too). */
export function sameUnfollowed(old: SetConfig, sc: SetConfig): boolean {
  if (old === sc) return true;
  if (setDefinitionKey(old.set) !== setDefinitionKey(sc.set) || old.elements.length !== sc.elements.length) return false;
  return old.elements.every((e, i) => elementId(e) === elementId(sc.elements[i]!) && sameContent(e, sc.elements[i]!)
    && e.timeout === sc.elements[i]!.timeout && e.expiration === sc.elements[i]!.expiration);
}

/**
 * When `now` is `before` with some elements changed in place and some appended (none removed, no
 * identity moved), the indexes in `now` of those changed or appended; else undefined. O(elements)
 * comparisons, no map built: a reload from the same generator with one element changed.
 */
export function alignedChanges(before: readonly SetElement[], now: readonly SetElement[], want: ReadonlyMap<string, SetElement>): number[] | undefined {
  if (now.length < before.length) return undefined;
  const changed: number[] = [];
  for (let i = 0; i < before.length; i++) {
    const o = before[i]!;
    const n = now[i]!;
    // The same fields: the common case, 100,000 times per reload (no id string built for it).
    if (sameElementFields(o, n)) continue;
    if (elementId(o) !== elementId(n)) return undefined;
    if (!sameContent(o, n) || (o.userdata ?? '') !== (n.userdata ?? '')) changed.push(i);
  }
  const added = new Set<string>();
  for (let i = before.length; i < now.length; i++) {
    const id = elementId(now[i]!);
    if (want.has(id) || added.has(id)) return undefined;  // a duplicate: the general path dedupes it
    added.add(id);
    changed.push(i);
  }
  return changed;
}

/** A set's desired elements by identity (the config's objects). */
export function wantOf(sc: SetConfig): Map<string, SetElement> {
  const m = new Map<string, SetElement>();
  for (const e of sc.elements) m.set(elementId(e), e);
  return m;
}

/** The same chain apart from the objects: definition, comment and every rule's key, in order. */
export function sameChain(a: TableConfig['chains'][number], b: TableConfig['chains'][number]): boolean {
  if (a === b) return true;
  if (a.name !== b.name || JSON.stringify(a.base ?? null) !== JSON.stringify(b.base ?? null) || (a.userdata ?? '') !== (b.userdata ?? '')) return false;
  if (a.rules.length !== b.rules.length) return false;
  for (let j = 0; j < a.rules.length; j++) if (a.rules[j] !== b.rules[j] && desiredKey(a.rules[j]!) !== desiredKey(b.rules[j]!)) return false;
  return true;
}
