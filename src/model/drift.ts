/**
 * Drift: one way an owned table in the kernel differs from its desired state, as the keeper's
 * diff finds it (src/keeper/table.ts) and as owners' garbage, the metrics and the logs read it.
 */
import type { Family } from '../netlink/expr.js';
import type { NftObj } from '../netlink/objects.js';

export type DriftKind =
  | 'table-missing' | 'table-retired' | 'table-orphaned' | 'table-unprotected' | 'table-changed' | 'table-flags' | 'chain-missing' | 'chain-changed' | 'rules-differ' | 'chain-extra'
  | 'set-extra' | 'set-missing' | 'set-changed' | 'elements-differ' | 'object-missing' | 'object-changed' | 'object-extra';
/** Every drift kind, for the metrics' zero series; a Record so a new kind not listed fails the typecheck. */
export const DRIFT_KINDS: Record<DriftKind, true> = {
  'table-missing': true, 'table-retired': true, 'table-orphaned': true, 'table-unprotected': true, 'table-changed': true, 'table-flags': true, 'chain-missing': true,
  'chain-changed': true, 'rules-differ': true, 'chain-extra': true, 'set-extra': true,
  'set-missing': true, 'set-changed': true, 'elements-differ': true, 'object-missing': true, 'object-changed': true, 'object-extra': true,
};

export interface Drift {
  kind: DriftKind;
  family: Family;
  table: string;
  chain?: string;
  /** For set-extra, set-missing, set-changed and elements-differ: the set's (or map's) name. */
  set?: string;
  /** For object-missing, object-changed and object-extra: the object's type and name (`counter c`). */
  object?: { type: NftObj['type']; name: string };
  /** What differs, in words: "rule 2 missing", "foreign rule at 1: ...". */
  detail: string;
  /** For rules-differ: the chain's rules as the kernel holds them, rendered. */
  actual?: string[];
}
