/**
 * A desired table made from an earlier one by changing a few of its chains (an owner registered or
 * removed: its chains, and its jumps in the dispatch chains; src/owners/merge.ts), and exactly
 * which. A pass whose known state (src/keeper/known.ts) holds the earlier table verified whole then compares,
 * plans and follows only those chains, and in a dispatch chain only the rules that changed: a
 * registration costs its owner, not a walk of every owner's chains and jumps.
 *
 * What a derivation says is a fact about two config objects, not about the kernel: every chain of
 * `table` not in `changed` is the same object, at the same place among the others, as in `from`;
 * the chains of `from` that `table` lacks are `removed`; a dispatch chain in `changed` holds the
 * rules of its `from` chain, the same objects in the same order, outside its splices.
 */
import type { ChainConfig, TableConfig } from './desired.js';

/**
 * One run of a chain's rules that changed: rules [fromStart, fromEnd) of the earlier chain gave way
 * to rules [start, end) of the new one (either run may be empty). Splices are in chain order and
 * do not touch one another's runs.
 */
export interface Splice {
  fromStart: number;
  fromEnd: number;
  start: number;
  end: number;
}

export interface Derivation {
  from: TableConfig;
  /** Chains of the new table that are not `from`'s objects (new, replaced, or edited dispatch chains), in table order. */
  changed: readonly ChainConfig[];
  /** Names of `from`'s chains the new table lacks. */
  removed: readonly string[];
  /** Per changed chain made from one of `from`'s by replacing runs of rules: that chain and the runs. */
  edited: ReadonlyMap<string, { from: ChainConfig; splices: readonly Splice[] }>;
}

const derivations = new WeakMap<TableConfig, Derivation>();

/** Records that `table` was made from `d.from` as `d` says (see the module comment). */
export function derive(table: TableConfig, d: Derivation): void {
  derivations.set(table, d);
}

/** How `table` was made from an earlier table, when known; only for the same table's sets and comment. */
export function derivationOf(table: TableConfig): Derivation | undefined {
  const d = derivations.get(table);
  if (!d) return undefined;
  const f = d.from;
  if (f.family !== table.family || f.name !== table.name || f.sets !== table.sets || f.userdata !== table.userdata || f.protect !== table.protect) return undefined;
  return d;
}
