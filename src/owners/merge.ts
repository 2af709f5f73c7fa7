/**
 * Owners become part of the keeper's desired state: their chains are added
 * to the owners table, their jump rules to its dispatch chains (after the
 * config's own rules, owners in id order). The keeper then reconciles that
 * table like any other, so owner chains are repaired when tampered with, and
 * whatever no registered owner claims is an extra chain or a foreign rule:
 * it goes in the same guarded batch (owned GC). ownedGarbage() says which
 * part of such a batch was owner garbage, for logs and metrics.
 */
import type { ChainConfig, TableConfig } from '../config/config.js';
import type { ObservedTable, Rule } from '../netlink/objects.js';
import type { Drift } from '../keeper/reconcile.js';
import type { OwnersConfig } from './config.js';
import { ownerOfRule, parseOwnerChain, type Owner } from './spec.js';

export function mergeOwners(tables: readonly TableConfig[], oc: OwnersConfig | undefined, owners: readonly Owner[]): TableConfig[] {
  if (!oc) return [...tables];
  // Usually in order already (the registry keeps ids as they come): sorting is then skipped.
  let inOrder = true;
  for (let i = 1; i < owners.length && inOrder; i++) inOrder = owners[i - 1]!.id < owners[i]!.id;
  const sorted = inOrder ? owners : [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  // Plain loops: this runs on every registration, over every owner.
  return tables.map((t) => {
    if (t.family !== oc.family || t.name !== oc.table) return t;
    const chains: ChainConfig[] = t.chains.map((c) => {
      if (!oc.dispatch.includes(c.name)) return c;
      const rules = c.rules.slice();
      for (const o of sorted) {
        const jumps = o.jumps.get(c.name);
        if (jumps) for (const r of jumps) rules.push(r);
      }
      return rules.length === c.rules.length ? c : { ...c, rules };
    });
    for (const o of sorted) for (const c of o.chains) chains.push(c);
    return { ...t, chains };
  });
}

/**
 * The registered ids, as owned GC asks them: the set is made at its first question. A registration
 * asks none (its batch takes nothing out of a chain), and making it was O(owners) a pass.
 */
export function ownerIdsOf(owners: readonly Owner[]): Pick<ReadonlySet<string>, 'has'> {
  let ids: Set<string> | undefined;
  return { has: (id) => (ids ??= new Set(owners.map((o) => o.id))).has(id) };
}

export interface OwnedGarbage {
  /** Owner chains (by kernel name) that no registered owner claims. */
  chains: { family: string; table: string; name: string; id: string }[];
  /** Rules tagged with an owner id that is not registered (outside those chains). */
  rules: { family: string; table: string; chain: string; id: string }[];
}

/**
 * What the kernel holds in owned tables, tagged for owners, that the desired
 * state does not claim: chains named o/<id>/… that are not desired, and rules
 * tagged with an id that is not registered. With `drift` (per table, from
 * diffTable), only the rules of chains that differ are read: a chain that
 * matches its desired rules holds no garbage, and reading every owner's tags
 * on every registration made it O(owners). With `removedBy` (the rules a drift's
 * in-place edit takes out, reconcile.ts rulesRemovedBy), only those are read.
 */
export function ownedGarbage(desired: readonly TableConfig[], observed: readonly ObservedTable[],
  registered: Pick<ReadonlySet<string>, 'has'>, drift?: readonly (readonly Drift[])[],
  removedBy?: (d: Drift) => readonly Rule[] | undefined): OwnedGarbage {
  const out: OwnedGarbage = { chains: [], rules: [] };
  observed.forEach((o, i) => {
    const differ = drift?.[i] && !drift[i]!.some((d) => d.chain === undefined)
      ? new Set(drift[i]!.map((d) => d.chain)) : undefined;
    // Every chain the desired state lacks is a chain-extra drift: with the drift, only those are looked at.
    const want = differ ? undefined : new Set(desired[i]?.chains.map((c) => c.name));
    const extra = differ ? drift![i]!.filter((d) => d.kind === 'chain-extra').map((d) => d.chain!) : o.chains.keys();
    const dead = new Set<string>();
    for (const name of extra) {
      if (want?.has(name)) continue;
      const parsed = parseOwnerChain(name);
      if (parsed) {
        dead.add(name);
        out.chains.push({ family: o.family, table: o.name, name, id: parsed.id });
      }
    }
    // A chain patched in place keeps desired rules only: what its edit takes out is all that can
    // be garbage (a registration's dispatch chain holds every owner's jump).
    const removed = new Map<string, readonly Rule[]>();
    if (differ && removedBy) {
      for (const d of drift![i]!) {
        const r = d.kind === 'rules-differ' ? removedBy(d) : undefined;
        if (r) removed.set(d.chain!, r);
      }
    }
    for (const [chain, all] of differ ? [...differ].map((c) => [c!, o.rules.get(c!) ?? []] as const) : o.rules) {
      if (dead.has(chain)) continue;
      for (const r of removed.get(chain) ?? all) {
        const id = ownerOfRule(r);
        if (id !== undefined && !registered.has(id)) out.rules.push({ family: o.family, table: o.name, chain, id });
      }
    }
  });
  return out;
}
