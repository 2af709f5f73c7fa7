/**
 * The difference the view holds of an owned table, as the events followed it (OwnedTable.followed:
 * a desired rule missing, a foreign rule, a rule replaced in place, an element missing, foreign or
 * changed), written as a table's diff (TableDiff, table.ts) over the followed table itself (its
 * chains and handles, nothing decoded): what the event repairs plan (plan.ts, planFollowed), and
 * per chain what an observation over the view's rules takes as found (known.ts, takeFollowed;
 * diffTable's `held`), so that both repair paths plan the same values.
 */
import type { Rule } from '../netlink/objects.js';
import { ruleAt } from '../model/desired.js';
import type { Drift } from '../model/drift.js';
import type { ElementDiff } from '../model/elements.js';
import { planKnown, type MissingRun, type RuleEdit } from './chain-edit.js';
import type { HeldChainDiff, TableDiff } from './table.js';
import type { FollowedChain, FollowedTable } from './owned-table.js';

/**
 * The expressions of a kernel rule the view knows by its handle only (a foreign rule the events
 * followed). The planner deletes or replaces it by handle; where it would look into a rule (a set,
 * an object or a chain created again), it takes such a rule to use any of them.
 */
export const UNKNOWN_EXPRS: Rule['exprs'] = [];

/** heldEdit's map of foreign rules in a missing rule's place when the chain has none: never written. */
const NO_PLACES: ReadonlyMap<number, number> = new Map();

/** A chain's missing desired rules in order (one, the common case, without a spread and a sort). */
const missingInOrder = (c: FollowedChain): number[] =>
  c.missing.size === 0 ? [] : c.missing.size === 1 ? [c.missing.values().next().value!] : [...c.missing].sort(byNumber);
const byNumber = (x: number, y: number) => x - y;

/**
 * The difference the events followed in one table (the view's followed part), as diffTable gives a
 * observation's: over the followed table itself (its chains and handles, nothing decoded).
 */
export function diffHeld(held: FollowedTable): TableDiff {
  const diff: TableDiff = { drift: [], chains: new Map(), elements: new Map() };
  for (const c of held.chains.values()) {
    const d = chainDiffOf(c);
    if (!d) continue;
    diff.chains.set(c.name, d.diff);
    diff.drift.push(d.drift);
  }
  for (const ms of held.sets.values()) {
    if (!ms || ms.differs.size === 0) continue;
    const ops: ElementDiff = { add: [], delete: [], expired: 0 };
    for (const [id, k] of ms.differs) {
      if (k !== null) ops.delete.push(k);
      const w = ms.want.get(id);
      if (w) ops.add.push(w);
    }
    diff.elements.set(ms.name, ops);
    const what = ms.config.map ? 'map' : 'set';
    // A changed element is its delete and its add, in that order, in the same batch.
    const changed = ops.add.length + ops.delete.length - ms.differs.size;
    diff.drift.push({
      kind: 'elements-differ', family: ms.family, table: ms.table, set: ms.name,
      detail: `${what} ${ms.name}: ${ops.add.length} kernel elements to add, ${ops.delete.length} to delete` +
        `${changed > 0 ? ` (${changed} changed)` : ''}; repair from events: no element read`,
    });
  }
  return diff;
}

/**
 * The difference the events followed in one chain, as diffTable would give it for the chain (a
 * rules-differ drift with its edit), or undefined when the chain holds its desired rules. A value:
 * the full pass plans from it too, when the rules took a chain the events left otherwise than
 * desired (known.ts, takeFollowed).
 */
export function chainDiffOf(c: FollowedChain): HeldChainDiff | undefined {
  if (c.missing.size === 0 && c.extras.size === 0) return undefined;
  const want = c.desired;
  const missing = missingInOrder(c);
  return {
    diff: { chain: want, edit: heldEdit(c, missing) },
    drift: new ChainDrift(c.family, c.table, c.name, missing, missing.length > 0 ? ruleAt(want, missing[0]!)!.compiled : undefined,
      c.extras.size === 0 ? [] : [...c.extras], c.rules.length),
  };
}

/**
 * A chain's edit from what the followed table holds (chain-edit.ts, planKnown), over the few kernel
 * rules it names: each foreign rule deleted, or replaced by a missing rule whose place it took; the
 * other missing rules inserted after the kernel rule before their run, or after the one re-added
 * before them. The rule before a run is the chain's own known rule; a foreign rule, a stand-in.
 */
function heldEdit(c: FollowedChain, missing: readonly number[]): { edit: RuleEdit; rules: Rule[] } {
  const rules: Rule[] = [];
  const deleted: number[] = [];
  // desired j → the foreign rule's handle sitting in its place (none without foreign rules: the common deletion)
  const inPlace = c.extras.size === 0 ? NO_PLACES : new Map<number, number>();
  for (const [h, j] of c.extras) {
    if (j >= 0 && c.missing.has(j) && !inPlace.has(j)) (inPlace as Map<number, number>).set(j, h);
    else deleted.push(held(c, rules, h));
  }
  const runs: MissingRun[] = [];
  for (let k = 0; k < missing.length;) {
    const start = missing[k++]!;
    let end = start + 1;
    while (k < missing.length && missing[k] === end) {
      end++;
      k++;
    }
    const after = start > 0 ? rules.push(c.rules[start - 1]!) - 1 : undefined;
    const from = rules.length;
    for (let j = start; j < end; j++) {
      const h = inPlace.get(j);
      if (h !== undefined) held(c, rules, h);
    }
    runs.push(after !== undefined ? { start, end, after, from, to: rules.length } : { start, end, from, to: rules.length });
  }
  return { edit: planKnown(runs, deleted), rules };
}

/** The index in `rules` of a stand-in for the kernel rule at `handle` of chain `c` (its handle is all the edit uses). */
function held(c: FollowedChain, rules: Rule[], handle: number): number {
  return rules.push(standIn(c, handle)) - 1;
}

/** A kernel rule of chain `c` the view knows by its handle only (a foreign rule): see UNKNOWN_EXPRS. */
export function standIn(c: FollowedChain, handle: number): Rule {
  return { family: c.family, table: c.table, chain: c.name, handle, exprs: UNKNOWN_EXPRS };
}

/**
 * A chain's difference as the event repair planned it, from what it held then. The detail, in
 * words, is written when it is first read: by the repair's report, after the commit, not on the
 * way to it.
 */
class ChainDrift implements Drift {
  readonly kind = 'rules-differ';
  #detail: string | undefined;

  constructor(readonly family: Drift['family'], readonly table: string, readonly chain: string, private readonly missing: readonly number[],
    private readonly first: { text: string } | undefined, private readonly extras: readonly (readonly [number, number])[],
    private readonly desired: number) {}

  get detail(): string {
    return this.#detail ??= this.words();
  }

  set detail(v: string) {
    this.#detail = v;
  }

  private words(): string {
    const { missing, extras } = this;
    const parts: string[] = [];
    if (missing.length > 0) {
      parts.push(missing.length === 1 ? `rule ${missing[0]! + 1} (${this.first!.text}) is missing`
        : `${missing.length} rules are missing (first: rule ${missing[0]! + 1}, ${this.first!.text})`);
    }
    if (extras.length > 0) parts.push(`${extras.length} foreign rule${extras.length === 1 ? '' : 's'} (handle ${extras.map(([h]) => h).join(', ')})`);
    const replaced = extras.filter(([, j]) => j >= 0 && missing.includes(j)).length;
    const ops = extras.length + missing.length - replaced;
    const kept = this.desired - missing.length;
    return `${parts.join('; ')}; repair from events: ${kept} of ${kept + extras.length} kernel rules stay, ` +
      `${extras.length - replaced} deleted, ${missing.length - replaced} inserted, ${replaced} replaced (${ops} ops)`;
  }
}
