/**
 * One owned table as the kernel view (view.ts) holds it: the one record of what the kernel holds
 * there, fed by an observation, the echo of our own commit and the monitor's events, and exact at a
 * generation or unknown, per table. It holds the kernel in two shapes that share one identity of a
 * rule (a kernel handle standing for a desired rule of a desired chain), and for a chain the kernel
 * holds as desired one array of known rules (knownRule):
 *
 * - `rules`: per chain each rule's handle with the desired rule it is, in the kernel's order, which
 *   an observation plans from without a dump (known.ts; after our own commit, follow-commit.ts);
 * - `followed`: per desired chain the known rule of each desired rule by desired index (the rules'
 *   own array where they hold that chain), the desired rules missing, the rules the kernel holds
 *   that are not desired, and per followed set where its elements differ, which the events move rule
 *   by rule and element by element (follow-events.ts) and the event repairs plan from (plan.ts,
 *   planFollowed).
 *
 * The rules take what the followed part holds when events changed the table, when they are asked
 * for (view.ts settle; known.ts takeFollowed): its array, and where the events left it otherwise than desired, a stand-in for
 * each foreign rule and the difference they followed, which the observation plans from. So both say
 * the same of the kernel; the rules can be exact while the followed part is unknown (our full
 * pass's commit is followed by its echo into the rules, not by events).
 */
import type { ChainConfig, TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import type { Family } from '../netlink/expr.js';
import { SET_F, type NftSet, type ObservedTable, type Rule, type SetElement, type Table } from '../netlink/objects.js';
import type { HeldTable } from './plan.js';
import type { HeldChainDiff } from './table.js';

export const tableKey = (t: { family: string; name: string }) => `${t.family} ${t.name}`;

export interface OwnedTable {
  family: Family;
  name: string;
  /** In the owned set (the monitor's filter): the events say which commits changed it. */
  owned: boolean;
  /** The last generation whose commit changed it (an event in it, our echoed repair of it). */
  changedAt: number;
  /** Its rules, exact at `rulesAt`; undefined: not held, an observation reads the table. */
  rules?: TableRules;
  /** The generation its rules are exact at (moved by an observation, our full pass's echo, and the events: followed, its followed generation once asked for). */
  rulesAt: number;
  /**
   * What the events follow of it, exact at the view's followed generation (or, while the events
   * trail its seed, at `seededAt`); undefined: unknown (`unknown` says why).
   */
  followed?: FollowedTable;
  /** The generation its followed part was seeded at: a commit at or before it is in the seed, its events not followed. */
  seededAt: number;
  /** Why the events do not follow it (undefined while they do, or before an observation seeded them). */
  unknown?: string;
}

/** A table's rules as an observation or our own commit left them. */
export interface TableRules {
  observed: ObservedTable;
  /** The desired chain (by identity) each chain's rules were verified against. */
  verified: Map<string, ChainConfig>;
  /**
   * The desired set (by identity) whose elements each named set holds: observed.sets has that
   * config's own element list for it, not a decoded copy. A volatile set (see volatileSet) is never
   * here: its elements are read at each observation.
   */
  verifiedSets: Map<string, SetConfig>;
  /**
   * The desired table (by identity) every chain of which is in `verified` as that table's own
   * object, the kernel holding no other chain: a pass for a table derived from it (src/model/derivation.ts)
   * compares only the chains the derivation changed. Undefined when not known so.
   */
  whole?: TableConfig;
  /**
   * Chains the events left otherwise than desired (a rule missing, a foreign rule), with the
   * difference they followed, for the observation to plan from (diffTable's `held`). Their rules
   * hold the desired rules present at their handles and a stand-in for each foreign rule
   * (UNKNOWN_EXPRS).
   */
  held?: Map<string, HeldChainDiff>;
}

/** A table as the events follow it: what the planner reads of it (chains, no rules) and its followed sets. */
export interface FollowedTable extends HeldTable {
  table: Table;
  chains: Map<string, FollowedChain>;
  rules: ReadonlyMap<string, readonly Rule[]>;
  /** The desired table it was seeded for (or last retargeted to). */
  desired: TableConfig;
  /** Its named sets: followed ones, and null for those whose element events make the table unknown. */
  sets: Map<string, FollowedSet | null>;
}

/** One desired chain as the kernel holds it. */
export interface FollowedChain {
  family: Family;
  table: string;
  name: string;
  /** The desired chain: the rules a repair re-adds. */
  desired: ChainConfig;
  /**
   * rules[j]: desired rule j as the kernel holds it (a known rule: its handle), unless `missing`
   * has j (then the handle it had). The table's rules (TableRules) hold this very array for a
   * chain they hold as desired: one array of handles per chain, which the events move in place.
   */
  rules: Rule[];
  /** Desired index by kernel handle, for the rules present. */
  byHandle: Map<number, number>;
  /** Desired rules missing from the kernel. */
  missing: Set<number>;
  /** Foreign rules in the chain: handle → the desired rule whose place it took (a replace), or -1. */
  extras: Map<number, number>;
}

/** One owned named set or map whose elements the events follow. */
export interface FollowedSet {
  family: Family;
  table: string;
  name: string;
  config: SetConfig;
  /** The desired elements by identity: the config's own objects, not copies. */
  want: Map<string, SetElement>;
  /** Where the kernel differs from `want`: its element (foreign, or other data), or null where it lacks a wanted one. */
  differs: Map<string, SetElement | null>;
}

/**
 * What our own commit's events must show, in order: DELRULE of a handle, or NEWRULE of desired rule
 * j; and (in any order) one element event per planned element op.
 */
export type Expected = { del: number; chain: FollowedChain } | { add: number; chain: FollowedChain; op: number } | { element: FollowedSet };

/**
 * Sets whose elements the kernel changes without a commit, so that no generation or event vouches
 * for them: timeouts expire, and a dynamic set's elements are added (and updated) by the data path.
 * The rules hold their definition but an observation reads their elements (one element dump of that
 * set, not of the table). Interval sets change only by commits and are held like plain ones.
 */
export const volatileSet = (s: NftSet): boolean => (s.flags & (SET_F.TIMEOUT | SET_F.EVAL)) !== 0;

/**
 * Sets whose elements change without a commit, or come in pieces, and object maps (whose element
 * events the monitor does not decode the object of): their element events make the table unknown.
 */
const UNFOLLOWED_SET_FLAGS = SET_F.INTERVAL | SET_F.TIMEOUT | SET_F.EVAL | SET_F.CONSTANT | SET_F.OBJECT;

/** Whether the events follow this set's elements (see UNFOLLOWED_SET_FLAGS). */
export function follows(sc: SetConfig): boolean {
  return (sc.set.flags & UNFOLLOWED_SET_FLAGS) === 0;
}

/** What an observation of a held table needs of each desired set: its definition, and its elements unless volatile. */
export function knownSets(t: TableConfig, defs: (name: string) => NftSet | undefined, verifiedSets: Map<string, SetConfig>):
  ObservedTable['sets'] | undefined {
  const sets: ObservedTable['sets'] = new Map();
  for (const s of t.sets ?? []) {
    const set = defs(s.name);
    if (!set) return undefined;
    if (volatileSet(s.set)) {
      verifiedSets.delete(s.name);
      sets.set(s.name, { set, elements: [] });  // read at each observation (Reconciler.observe)
    } else {
      verifiedSets.set(s.name, s);
      sets.set(s.name, { set, elements: s.elements });
    }
  }
  return sets;
}

/**
 * Stateful objects are not held: their configuration can be changed in place (NEWOBJ with the
 * update flag) without changing the table's use count, so a table that has or wants any is read at
 * each observation.
 */
export function objectsUnknown(t: TableConfig, o: ObservedTable): boolean {
  return (t.objects?.length ?? 0) > 0 || (o.objs?.size ?? 0) > 0;
}
