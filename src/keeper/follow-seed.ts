/**
 * The followed part of an owned table (OwnedTable.followed): made from a clean observation
 * (seedTable), and moved to a new desired state that changes only elements (the retarget helpers),
 * without a read.
 */
import { ruleCount, type ChainConfig, type TableConfig } from '../model/desired.js';
import { knownChainDigest } from '../model/desired-digest.js';
import type { SetConfig } from '../model/sets.js';
import { elementId, sameContent, sameElementFields, setDefinitionKey } from '../model/elements.js';
import type { ObservedTable, Rule, SetElement } from '../netlink/objects.js';
import { desiredKey, isKnownAt, knownRuleAt } from './rule-key.js';
import { NO_RULES } from './plan.js';
import { follows, type FollowedChain, type FollowedSet, type FollowedTable, type OwnedTable, type TableRules } from './owned-table.js';

/**
 * Table `t` as followed from an observation that found it as desired: per desired chain the known
 * rule of each desired rule at its kernel handle, in order; per followed set its desired elements.
 * A chain the table's rules `kt` hold as this desired chain is followed in their very array (one
 * array per chain); any other (the table's rules not held: stateful objects, anonymous sets) gets
 * known rules made from the observation's. Undefined when the observation does not fit. `prev`: the
 * table's followed part being replaced.
 */
export function seedTable(t: TableConfig, have: ObservedTable | undefined, kt?: TableRules, prev?: FollowedTable): FollowedTable | undefined {
  if (!have?.table || have.family !== t.family || have.name !== t.name) return undefined;
  if (have.chains.size !== t.chains.length) return undefined;
  const chains = new Map<string, FollowedChain>();
  for (const c of t.chains) {
    const own = kt?.verified.get(c.name) === c ? kt.observed.rules.get(c.name) as Rule[] | undefined : undefined;
    const seen = own ?? have.rules.get(c.name);
    // Only counted: a chain whose rules are made late is not made here (the followed part reads them when an event needs them).
    if (!have.chains.has(c.name) || !seen || seen.length !== ruleCount(c)) return undefined;
    const byHandle = new Map<number, number>();
    for (let j = 0; j < seen.length; j++) {
      const h = seen[j]!.handle;
      if (!h) return undefined;
      byHandle.set(h, j);
    }
    const rules = own ?? seen.map((r, j) => isKnownAt(r, c, j) ? r : knownRuleAt(t, c, j, r.handle!, r.digest));
    chains.set(c.name, { family: t.family, table: t.name, name: c.name, desired: c, rules, byHandle, missing: new Set(), extras: new Map() });
  }
  const sets = new Map<string, FollowedSet | null>();
  for (const sc of t.sets ?? []) {
    const h = have.sets.get(sc.name);
    if (!h) return undefined;
    // The observation was clean, so a followed set holds exactly its desired elements (none can
    // have expired: such a set takes no timeouts, and nothing but commits adds to it).
    // A set followed for this very config and clean holds the same: its map is taken over, not made
    // again (100,000 elements' ids are ~100 ms of this thread at each read-back, and the monitor's
    // armed repair waits for the thread).
    const was = prev?.sets.get(sc.name);
    const want = !follows(sc) ? undefined : was && was.config === sc && was.differs.size === 0 ? was.want : wantOf(sc);
    sets.set(sc.name, want && want.size === h.elements.length
      ? { family: t.family, table: t.name, name: sc.name, config: sc, want, differs: new Map() } : null);
  }
  return { table: have.table, chains, rules: NO_RULES, desired: t, sets };
}

/**
 * A new desired state that differs from the one the followed tables were seeded for (or last
 * retargeted to) in set and map elements only, per table: such a table keeps what the kernel holds
 * and now differs from the new elements, so the event repair commits just the element ops.
 * O(elements) in memory, no read; a table whose desired object is the same costs nothing. A table
 * unknown stays so (an observation reads it). Returns the tables that differ in anything else
 * (chains, rules, set definitions, the elements of a set not followed), left as they were: the
 * caller makes them unknown. False (nothing changed here) when the tables themselves differ.
 */
export function retarget(owned: readonly OwnedTable[], desired: readonly TableConfig[]): OwnedTable[] | false {
  if (desired.length !== owned.length) return false;
  for (const [i, t] of desired.entries()) if (owned[i]!.family !== t.family || owned[i]!.name !== t.name) return false;
  const not: OwnedTable[] = [];
  const moves: Retarget[] = [];
  for (const [i, t] of desired.entries()) {
    const rec = owned[i]!;
    if (!rec.followed || rec.followed.desired === t) continue;
    const move = retargetTable(rec.followed, t);
    if (move) moves.push(move);
    else not.push(rec);
  }
  for (const { f, t, chains, sets, edits } of moves) {
    for (const [c, want] of chains) c.desired = want;
    f.desired = t;
    for (const [ms, sc, changed] of edits) retargetChanged(ms, sc, changed);
    for (const [ms, sc, want] of sets) retargetSet(ms, sc, want);
  }
  return not;
}

/** What retarget changes in one followed table, gathered before any of it is changed. */
interface Retarget {
  f: FollowedTable;
  t: TableConfig;
  chains: [FollowedChain, ChainConfig][];
  sets: [FollowedSet, SetConfig, Map<string, SetElement>][];
  edits: [FollowedSet, SetConfig, number[]][];
}

/** Followed table `f` moved to desired table `t`, when they differ in elements only (else undefined). */
function retargetTable(f: FollowedTable, t: TableConfig): Retarget | undefined {
  const move: Retarget = { f, t, chains: [], sets: [], edits: [] };
  const was = f.desired;
  if (f.chains.size !== t.chains.length || f.sets.size !== (t.sets?.length ?? 0)) return undefined;
  // The table itself changed (its flags, comment or protection): the pass's diff makes it, not an element move.
  if (was.protect !== t.protect || !!was.dormant !== !!t.dormant || (was.userdata ?? '') !== (t.userdata ?? '')) return undefined;
  for (const c of t.chains) {
    const have = f.chains.get(c.name);
    if (!have || !sameChain(have.desired, c)) return undefined;
    if (have.desired !== c) move.chains.push([have, c]);
  }
  for (const sc of t.sets ?? []) {
    const ms = f.sets.get(sc.name);
    if (ms === undefined) return undefined;
    if (ms === null) {
      // Not followed: it has to stay as it is (its previous desired state is the full pass's).
      const old = was.sets?.find((x) => x.name === sc.name);
      if (follows(sc) || !old || !sameUnfollowed(old, sc)) return undefined;
      continue;
    }
    if (!follows(sc) || setDefinitionKey(sc.set) !== setDefinitionKey(ms.config.set)) return undefined;
    if (sc === ms.config) continue;
    const changed = alignedChanges(ms.config.elements, sc.elements, ms.want);
    if (changed) move.edits.push([ms, sc, changed]);
    else move.sets.push([ms, sc, wantOf(sc)]);
  }
  return move;
}

/** A set's new desired elements, the same as before but a few changed or appended (alignedChanges): only those are looked at. */
function retargetChanged(ms: FollowedSet, sc: SetConfig, changed: readonly number[]): void {
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
function retargetSet(ms: FollowedSet, sc: SetConfig, want: Map<string, SetElement>): void {
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
function sameUnfollowed(old: SetConfig, sc: SetConfig): boolean {
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
function alignedChanges(before: readonly SetElement[], now: readonly SetElement[], want: ReadonlyMap<string, SetElement>): number[] | undefined {
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
function wantOf(sc: SetConfig): Map<string, SetElement> {
  const m = new Map<string, SetElement>();
  for (const e of sc.elements) m.set(elementId(e), e);
  return m;
}

/**
 * The same chain apart from the objects: definition, comment and every rule's key, in order. Where
 * both chains' rule digests are known and equal (a reload from the compile cache of what the keeper
 * holds), so are their rules: no rule is made or keyed for it (a key at 100,000 rules is seconds of
 * a reload).
 */
export function sameChain(a: TableConfig['chains'][number], b: TableConfig['chains'][number]): boolean {
  if (a === b) return true;
  if (a.name !== b.name || JSON.stringify(a.base ?? null) !== JSON.stringify(b.base ?? null) || (a.userdata ?? '') !== (b.userdata ?? '')) return false;
  if (a.rules.length !== b.rules.length) return false;
  const digest = knownChainDigest(a);
  if (digest !== undefined && digest === knownChainDigest(b)) return true;
  for (let j = 0; j < a.rules.length; j++) if (a.rules[j] !== b.rules[j] && desiredKey(a.rules[j]!) !== desiredKey(b.rules[j]!)) return false;
  return true;
}
