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
import type { ObservedTable } from '../netlink/objects.js';
import type { OwnersConfig } from './config.js';
import { ownerOfRule, parseOwnerChain, type Owner } from './spec.js';

export function mergeOwners(tables: readonly TableConfig[], oc: OwnersConfig | undefined, owners: readonly Owner[]): TableConfig[] {
  if (!oc) return [...tables];
  const sorted = [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return tables.map((t) => {
    if (t.family !== oc.family || t.name !== oc.table) return t;
    const chains: ChainConfig[] = t.chains.map((c) => {
      if (!oc.dispatch.includes(c.name)) return c;
      const extra = sorted.flatMap((o) => o.jumps.get(c.name) ?? []);
      return extra.length === 0 ? c : { ...c, rules: [...c.rules, ...extra] };
    });
    for (const o of sorted) chains.push(...o.chains);
    return { ...t, chains };
  });
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
 * tagged with an id that is not registered.
 */
export function ownedGarbage(desired: readonly TableConfig[], observed: readonly ObservedTable[],
  registered: ReadonlySet<string>): OwnedGarbage {
  const out: OwnedGarbage = { chains: [], rules: [] };
  observed.forEach((o, i) => {
    const want = new Set(desired[i]?.chains.map((c) => c.name));
    const dead = new Set<string>();
    for (const name of o.chains.keys()) {
      const parsed = parseOwnerChain(name);
      if (parsed && !want.has(name)) {
        dead.add(name);
        out.chains.push({ family: o.family, table: o.name, name, id: parsed.id });
      }
    }
    for (const [chain, rules] of o.rules) {
      if (dead.has(chain)) continue;
      for (const r of rules) {
        const id = ownerOfRule(r);
        if (id !== undefined && !registered.has(id)) out.rules.push({ family: o.family, table: o.name, chain, id });
      }
    }
  });
  return out;
}
