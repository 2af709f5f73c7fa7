/**
 * Owners become part of the keeper's desired state: their chains are added
 * to the owners table, their jump rules to its dispatch chains (after the
 * config's own rules, owners in id order). The keeper then reconciles that
 * table like any other, so owner chains are repaired when tampered with, and
 * whatever no registered owner claims is an extra chain or a foreign rule:
 * it goes in the same guarded batch (owned GC). ownedGarbage() says which
 * part of such a batch was owner garbage, for logs and metrics.
 */
import { appendRules, ruleCount, type ChainConfig, type TableConfig } from '../model/desired.js';
import type { ObservedTable, Rule } from '../netlink/objects.js';
import type { Drift } from '../model/drift.js';
import type { OwnersConfig } from '../config/owners.js';
import { derive, type Splice } from '../model/derivation.js';
import { ownerOfRule, parseOwnerChain, type Owner } from './spec.js';

export function mergeOwners(tables: readonly TableConfig[], oc: OwnersConfig | undefined, owners: readonly Owner[]): TableConfig[] {
  if (!oc) return [...tables];
  const prev = lastMerge.get(tables);
  const again = prev?.oc === oc ? mergeAgain(prev, owners) : undefined;
  const m = again ?? mergeAll(oc, owners);
  lastMerge.set(tables, m);
  return tables.map((t) => {
    if (t.family !== oc.family || t.name !== oc.table) return t;
    // The previous merge's table, when this one copied its runs: the new table is derived from it
    // (src/model/derivation.ts), so a pass compares and follows only the chains that changed.
    const from = again && prev!.out?.chains.length === prev!.chains.length + t.chains.length ? prev!.out : undefined;
    const changed: ChainConfig[] = [];
    const edited = new Map<string, { from: ChainConfig; splices: Splice[] }>();
    const dispatch = oc.dispatch;
    // The config's chain `c` (at `i`), with the owners' jumps when it is a dispatch chain.
    const config = (c: ChainConfig, i: number): ChainConfig => {
      const k = dispatch.indexOf(c.name);
      const was = from?.chains[i];
      if (k < 0) {
        if (was !== undefined && was !== c) changed.push(c);
        return c;
      }
      // A dispatch chain whose jumps did not change stays the same object.
      if (was !== undefined && was.name === c.name && again!.splices[k]!.length === 0) return was;
      const now = m.jumps[k]!.rules.length === 0 ? c : appendRules(c, m.jumps[k]!.rules);
      if (was === undefined) return now;
      changed.push(now);
      if (was.name === c.name) {
        const at = ruleCount(c);
        edited.set(c.name, { from: was, splices: again!.splices[k]!.map((h) => ({ fromStart: h.fromStart + at, fromEnd: h.fromEnd + at, start: h.start + at, end: h.end + at })) });
      }
      return now;
    };
    const chains: ChainConfig[] = new Array(t.chains.length + m.chains.length);
    t.chains.forEach((c, i) => { chains[i] = config(c, i); });
    for (let x = 0; x < m.chains.length; x++) chains[t.chains.length + x] = m.chains[x]!;
    const out = { ...t, chains };
    m.out = out;
    if (from) {
      const added = new Set<string>();
      for (const c of again!.added) {
        changed.push(c);
        added.add(c.name);
      }
      derive(out, { from, changed, removed: again!.removed.filter((n) => !added.has(n)), edited });
    }
    return out;
  });
}

type Rules = ChainConfig['rules'];

/**
 * The owners' part of a merge, for one config's tables: the owners' chains in id order, and each
 * dispatch chain's (oc.dispatch order) jump rules, with where each owner's start (`at[i]`; at[n]
 * is the end). A registration changes one owner: the next merge copies the others' runs from here
 * instead of asking every owner for its chains and jumps again, which costs several times the
 * copying.
 */
interface Merged {
  oc: OwnersConfig;
  owners: readonly Owner[];
  chains: ChainConfig[];
  chainAt: Int32Array;
  jumps: { rules: Rules; at: Int32Array }[];
  /** The owners table mergeOwners made from this merge last. */
  out?: TableConfig;
}

/**
 * A merge made from the previous one (mergeAgain), and how it differs: the chains of the owners it
 * added (in id order), the chain names of those it took out, and per dispatch chain the runs of
 * jump rules that changed (indices among the owners' jumps, without the config's own rules).
 */
interface MergedAgain extends Merged {
  added: ChainConfig[];
  removed: string[];
  splices: Splice[][];
}
const lastMerge = new WeakMap<readonly TableConfig[], Merged>();

/** A merge's pieces: runs [i0, i1) of the previous merge's owners, copied, and owners asked anew. */
type Piece = Owner | { i0: number; i1: number };

/**
 * The merge of `owners` from its pieces, every array allocated once at its size (pushing would grow
 * each of them several times, O(owners) garbage per registration).
 */
function build(oc: OwnersConfig, owners: readonly Owner[], pieces: readonly Piece[], prev: Merged | undefined,
  nChains: number, nJumps: readonly number[]): Merged {
  const K = oc.dispatch.length;
  const chains: ChainConfig[] = new Array(nChains);
  const chainAt = new Int32Array(owners.length + 1);
  const jumps = oc.dispatch.map((_, k) => ({ rules: new Array(nJumps[k]!) as Rules, at: new Int32Array(owners.length + 1) }));
  let c = 0;
  let o = 0;
  const jc = new Int32Array(K);
  for (const p of pieces) {
    if ('i0' in p) {
      const { i0, i1 } = p;
      const base = c - prev!.chainAt[i0]!;
      for (let x = prev!.chainAt[i0]!; x < prev!.chainAt[i1]!; x++) chains[c++] = prev!.chains[x]!;
      for (let k = 0; k < K; k++) {
        const pj = prev!.jumps[k]!;
        const j = jumps[k]!;
        const jbase = jc[k]! - pj.at[i0]!;
        for (let x = pj.at[i0]!; x < pj.at[i1]!; x++) j.rules[jc[k]!++] = pj.rules[x]!;
        for (let i = i0 + 1, n = o; i <= i1; i++) j.at[++n] = pj.at[i]! + jbase;
      }
      for (let i = i0 + 1; i <= i1; i++) chainAt[++o] = prev!.chainAt[i]! + base;
      continue;
    }
    for (const ch of p.chains) chains[c++] = ch;
    chainAt[++o] = c;
    for (let k = 0; k < K; k++) {
      const rules = p.jumps.get(oc.dispatch[k]!);
      const j = jumps[k]!;
      if (rules) for (const r of rules) j.rules[jc[k]!++] = r;
      j.at[o] = jc[k]!;
    }
  }
  return { oc, owners, chains, chainAt, jumps };
}

/** Every owner asked again (the first merge, another config, owners not in id order). */
function mergeAll(oc: OwnersConfig, owners: readonly Owner[]): Merged {
  // Usually in order already (the registry keeps them sorted): sorting is then skipped.
  let inOrder = true;
  for (let i = 1; i < owners.length && inOrder; i++) inOrder = owners[i - 1]!.id < owners[i]!.id;
  const sorted = inOrder ? owners : [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  let nChains = 0;
  const nJumps = oc.dispatch.map(() => 0);
  for (const o of sorted) {
    nChains += o.chains.length;
    oc.dispatch.forEach((d, k) => { nJumps[k]! += o.jumps.get(d)?.length ?? 0; });
  }
  return build(oc, sorted, sorted, undefined, nChains, nJumps);
}

/**
 * `owners` against the previous merge's: runs of the same objects are copied (pointers, no owner
 * touched), the others asked. Undefined when `owners` is not in id order (an added owner out of
 * place among its neighbours; the runs kept are in order, being the previous merge's).
 */
function mergeAgain(prev: Merged, owners: readonly Owner[]): MergedAgain | undefined {
  const P = prev.owners;
  const oc = prev.oc;
  const K = oc.dispatch.length;
  const pieces: Piece[] = [];
  let nChains = 0;
  const nJumps = oc.dispatch.map(() => 0);
  const added: ChainConfig[] = [];
  const removed: string[] = [];
  const splices: Splice[][] = oc.dispatch.map(() => []);
  // A run of prev's jumps [from, fromEnd) gave way to this merge's [start, end): one splice, or the
  // last one grown when it ends where this one starts (an owner replaced or neighbours changed).
  const splice = (k: number, fromStart: number, fromEnd: number, start: number, end: number) => {
    if (fromStart === fromEnd && start === end) return;
    const hs = splices[k]!;
    const last = hs[hs.length - 1];
    if (last && last.fromEnd === fromStart && last.end === start) {
      last.fromEnd = fromEnd;
      last.end = end;
    } else {
      hs.push({ fromStart, fromEnd, start, end });
    }
  };
  let i = 0;
  let j = 0;
  while (i < P.length || j < owners.length) {
    const i0 = i;
    while (i < P.length && j < owners.length && P[i] === owners[j]) { i++; j++; }
    if (i > i0) {
      pieces.push({ i0, i1: i });
      nChains += prev.chainAt[i]! - prev.chainAt[i0]!;
      for (let k = 0; k < K; k++) nJumps[k]! += prev.jumps[k]!.at[i]! - prev.jumps[k]!.at[i0]!;
    }
    if (i >= P.length && j >= owners.length) break;
    const a = P[i];
    const b = owners[j];
    if (a !== undefined && (b === undefined || a.id < b.id)) {
      // Removed.
      for (const c of a.chains) removed.push(c.name);
      for (let k = 0; k < K; k++) splice(k, prev.jumps[k]!.at[i]!, prev.jumps[k]!.at[i + 1]!, nJumps[k]!, nJumps[k]!);
      i++;
      continue;
    }
    // Added (b before a), or put anew under a's id.
    if ((j > 0 && !(owners[j - 1]!.id < b!.id)) || (j + 1 < owners.length && !(b!.id < owners[j + 1]!.id))) return undefined;
    const replaced = a !== undefined && a.id === b!.id;
    pieces.push(b!);
    nChains += b!.chains.length;
    for (const c of b!.chains) added.push(c);
    if (replaced) for (const c of a.chains) removed.push(c.name);
    for (let k = 0; k < K; k++) {
      const n = b!.jumps.get(oc.dispatch[k]!)?.length ?? 0;
      const pj = prev.jumps[k]!;
      splice(k, pj.at[i]!, replaced ? pj.at[i + 1]! : pj.at[i]!, nJumps[k]!, nJumps[k]! + n);
      nJumps[k]! += n;
    }
    if (replaced) i++;
    j++;
  }
  return { ...build(oc, owners, pieces, prev, nChains, nJumps), added, removed, splices };
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
 * in-place edit takes out, table.ts rulesRemovedBy), only those are read.
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
