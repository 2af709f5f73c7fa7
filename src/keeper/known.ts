/**
 * The rules of an owned table (OwnedTable.rules): per chain, each rule's handle with the desired
 * rule it was found (or written) to be. They are exact at one generation only: taken from an
 * observation that found no drift, or from an observation plus the batch that was provably the only
 * commit since (the guard held and the generation moved by exactly one), with the handles the
 * kernel echoed for the batch's new rules (follow-commit.ts). A pass that finds the kernel still at
 * that generation, or the events prove unchanged since, plans from them with no dump, and compares
 * only the chains whose desired definition changed since (an owner registered or removed: its
 * chains and the dispatch chains). A table the events changed takes the handles they followed
 * (takeFollowed), or is confirmed by a digest dump of it alone (revalidate), or read. Named sets
 * and maps are held by their definition and the desired config's own element list (every named set
 * holds its desired elements after a clean observation or a sole commit); timeout and dynamic sets,
 * which the kernel changes without a commit, have their elements read at each observation. Anything
 * they cannot follow exactly (a table deleted or recreated, anonymous sets) drops them, and the
 * next observation reads that table.
 *
 * The rules are known rules (knownRule): handle plus the desired rule's own expressions, userdata
 * and key (shared with the desired state, not copies), so the decoded dump is not kept between passes.
 */
import { ruleCount, type ChainConfig, type TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import { diffElements, setDefinitionKey } from '../model/elements.js';
import type { Batch } from '../netlink/batch.js';
import type { NftConn } from '../netlink/conn.js';
import { ruleDigester } from '../netlink/socket.js';
import { desiredChainDigestsSteps } from './observe.js';
import { runByTurns, until } from '../base/sliced.js';
import { SET_F, type Chain, type NftSet, type ObservedTable, type Rule, type SetElement } from '../netlink/objects.js';
import { knownRule, knownRuleAt, isKnownAt, hasKey, sameKey } from './rule-key.js';
import { chainDiffOf, standIn } from './held-diff.js';
import { sameChain } from './follow-seed.js';
import { derivationOf, type Derivation } from '../model/derivation.js';
import { knownSets, objectsUnknown, volatileSet, type FollowedTable, type TableRules } from './owned-table.js';

/** Whether a named set's elements are vouched for by the events (exact now, and clean for that set). */
export type ElementsHeld = (t: TableConfig, set: string) => boolean;

/**
 * Whether the kernel still holds exactly the rules `kt` holds of `t`, read without decoding a rule:
 * its flags and object count, every base or empty chain, and one digest dump of its rules (handles
 * and digests, objects.ts Rule.digest) compared rule by rule. A rule whose digest was never read
 * (written by our own commit since the last decoding read) is decoded, its chain one dump, up to a
 * few chains; more make the table no. Named sets: their definitions with one set list; the
 * elements of each set that `elementsHeld` vouches for (the events, exact now) are not read, the
 * others' are read and compared with the desired ones: where they differ, the elements read become
 * the held ones (the observation then diffs them, no second read). A volatile set's are read by the
 * observation. Throws ENOENT when the table, a chain or a set went while it read; with `once`,
 * DumpInterruptedError when a commit interrupted its digest dump (not retried). False, not held,
 * as soon as `moved` says a commit came after the dump while its rules are compared by turns, or
 * before a set's elements would be read.
 */
export async function revalidate(conn: NftConn & Required<Pick<NftConn, 'listRuleDigests'>>, t: TableConfig, kt: TableRules,
  elementsHeld?: ElementsHeld, once = false, moved: () => boolean = () => false): Promise<boolean> {
  const known = kt.observed.table;
  if (!known) return false;
  const hasSets = kt.observed.sets.size > 0;
  // One digest dump per table (filtered by the kernel to it), never a round trip per chain: with
  // many owner chains the table's dump costs what the chain dumps together cost, without a
  // request and a promise per chain.
  const [table, dump, sets] = await Promise.all([conn.getTable(t.family, t.name), conn.listRuleDigests({ family: t.family, table: t.name, ...(once ? { once } : {}) }),
    hasSets ? conn.listSets({ family: t.family, table: t.name }) : []]);
  // The table's use counts its chains, sets and stateful objects: only the held chains and sets may be there.
  if (!table || table.flags !== known.flags || table.owner !== known.owner || table.use !== kt.observed.chains.size + kt.observed.sets.size) return false;
  // As read now (a table our own commit made was held without its handle, which the restart record keeps).
  kt.observed.table = table;
  let withRules = 0;
  const undigested: string[] = [];
  for (const { chain, handles, digests } of dump) {
    const rules = kt.observed.rules.get(chain);
    if (!rules || rules.length !== handles.length) return false;
    let digested = true;
    for (let i = 0; i < handles.length; i++) {
      const r = rules[i]!;
      if (r.handle !== handles[i] || (r.digest && r.digest !== digests[i])) return false;
      if (!r.digest) digested = false;
    }
    if (!digested) {
      const proved = await provedByDesired(t, chain, rules, handles, digests, moved);
      if (proved === undefined) return false;
      if (!proved) undigested.push(chain);
    }
    withRules++;
  }
  // Rules our own commit wrote (their digests unknown): their chains are decoded, one dump each,
  // and compared with what is held; the digests read are kept for the next time.
  if (undigested.length > UNDIGESTED_CHAINS_UP_TO) return false;
  for (const chain of undigested) {
    const rules = kt.observed.rules.get(chain)!;
    const now = await conn.listRules({ family: t.family, table: t.name, chain, digests: true });
    if (now.length !== rules.length) return false;
    for (let i = 0; i < now.length; i++) {
      const r = rules[i]!;
      if (now[i]!.handle !== r.handle || !now[i]!.digest) return false;
      if (r.digest) {
        if (r.digest !== now[i]!.digest) return false;
      } else if (!sameKey(r, now[i]!)) {
        return false;
      }
    }
    for (let i = 0; i < now.length; i++) rules[i]!.digest ??= now[i]!.digest;
  }
  const chains = [...kt.observed.chains.values()];
  if (withRules !== chains.filter((c) => (kt.observed.rules.get(c.name)?.length ?? 0) > 0).length) return false;
  // Rules say nothing of a chain's hook, or of an empty chain's existence: a few are read one by
  // one (a GETCHAIN is answered inline), many with one chain list.
  const toGet = chains.filter((c) => c.hook !== undefined || (kt.observed.rules.get(c.name)?.length ?? 0) === 0);
  let now: (Chain | undefined)[];
  if (toGet.length <= CHAIN_GETS_UP_TO) {
    now = await Promise.all(toGet.map((c) => conn.getChain(t.family, t.name, c.name)));
  } else {
    const listed = new Map((await conn.listChains({ family: t.family, table: t.name })).map((c) => [c.name, c]));
    now = toGet.map((c) => listed.get(c.name));
  }
  for (const [i, c] of toGet.entries()) {
    const n = now[i];
    if (!n || n.hook !== c.hook || n.type !== c.type || n.priority !== c.priority || (n.policy ?? 'accept') !== (c.policy ?? 'accept')) return false;
  }
  return !hasSets || await setsHold(conn, t, kt, sets, elementsHeld, moved);
}

/** revalidate's sets: the same definitions, and the held elements (vouched for by the events, or read). */
async function setsHold(conn: NftConn, t: TableConfig, kt: TableRules, sets: readonly NftSet[], elementsHeld: ElementsHeld | undefined,
  moved: () => boolean): Promise<boolean> {
  const named = sets.filter((x) => !(x.flags & SET_F.ANONYMOUS));
  if (named.length !== sets.length || named.length !== kt.observed.sets.size) return false;
  const read: Promise<void>[] = [];
  for (const x of named) {
    const k = kt.observed.sets.get(x.name);
    if (!k || setDefinitionKey(k.set) !== setDefinitionKey(x)) return false;
    const sc = kt.verifiedSets.get(x.name);
    if (!sc) continue;  // volatile: the observation reads it
    if (elementsHeld?.(t, x.name)) continue;
    // A commit since the read's generation changed the table (a deletion the event repairs answered
    // while this read ran): the read will not hold, and the set's elements are not read for it.
    if (moved()) return false;
    read.push(conn.listElements({ family: t.family, table: t.name, set: x.name }).then((els) => {
      const d = diffElements(sc.elements, els, sc.set);
      if (d.add.length === 0 && d.delete.length === 0) return;
      // Other elements than desired (a foreign change the events could not follow): what was read
      // is what the kernel holds, and the observation diffs it rather than read the whole table again.
      kt.observed.sets.set(x.name, { set: k.set, elements: els });
      kt.verifiedSets.delete(x.name);
    }));
  }
  await Promise.all(read);
  return true;
}

/**
 * An observation planned from `kt` found `t` as desired: the chains it compared (their desired
 * definition is another object than the one verified) hold exactly their desired rules now, in the
 * held rules' order and handles. O(chains), and O(rules) of those chains only. False: drop them.
 */
export function confirm(kt: TableRules, t: TableConfig): boolean {
  // Derived from the table held whole: only the chains it changed can be other objects (none, when it is that table).
  const from = since(kt, t);
  for (const c of from ? from.changed : t.chains) {
    if (kt.verified.get(c.name) === c) continue;
    const have = kt.observed.rules.get(c.name) ?? [];
    if (have.length !== c.rules.length || have.some((r) => r.handle === undefined)) return false;
    kt.observed.rules.set(c.name, c.rules.map((r, j) => knownRule(t, c, r, have[j]!.handle!, have[j]!.digest)));
    kt.verified.set(c.name, c);
  }
  if (from) for (const name of from.removed) kt.verified.delete(name);
  // A clean observation: the kernel holds t's chains and no other.
  kt.whole = kt.observed.chains.size === t.chains.length ? t : undefined;
  // Sets compared against another desired object (a reload): they hold its elements now.
  for (const s of t.sets ?? []) {
    if (volatileSet(s.set) || kt.verifiedSets.get(s.name) === s) continue;
    const have = kt.observed.sets.get(s.name);
    if (!have) return false;
    kt.observed.sets.set(s.name, { set: have.set, elements: s.elements });
    kt.verifiedSets.set(s.name, s);
  }
  return true;
}

/**
 * The events followed the table (exact at a later generation than `kt`): its rules take what they
 * followed. A chain the events hold as desired is held in the followed part's own array (shared,
 * not copied; where the rules held it in another array at the same handles, that one, with the
 * digests a read gave it, becomes the shared one). A chain the events left otherwise than desired holds,
 * in the kernel's order, the desired rules present and a stand-in for each foreign rule, with the
 * difference the events followed (kt.held); a followed set that differs holds what the kernel
 * holds: the observation plans from them, reading nothing. False when `kt` does not hold exactly
 * those chains: the caller drops it.
 */
export function takeFollowed(kt: TableRules, held: FollowedTable): boolean {
  const t = held.desired;
  if (kt.observed.chains.size !== t.chains.length) return false;
  kt.held = undefined;
  let clean = true;
  for (const c of t.chains) {
    const fc = held.chains.get(c.name);
    const prev = kt.observed.rules.get(c.name);
    if (!fc || !prev || !kt.observed.chains.has(c.name) || fc.rules.length !== c.rules.length) return false;
    const differs = chainDiffOf(fc);
    if (!differs) {
      if (prev !== fc.rules && sameRules(prev, fc.rules, c)) fc.rules = prev as Rule[];
      else if (prev !== fc.rules || kt.verified.get(c.name) !== c) asDesired(fc.rules, t, c);
      kt.observed.rules.set(c.name, fc.rules);
      kt.verified.set(c.name, c);
      continue;
    }
    // In the kernel's order: a foreign rule that took a desired rule's place (a replace) stands there, any other at the end.
    const rules: Rule[] = [];
    const inPlace = new Map<number, number>();
    const elsewhere: number[] = [];
    for (const [h, j] of fc.extras) {
      if (j >= 0 && fc.missing.has(j) && !inPlace.has(j)) inPlace.set(j, h);
      else elsewhere.push(h);
    }
    for (let j = 0; j < c.rules.length; j++) {
      if (fc.missing.has(j)) {
        const x = inPlace.get(j);
        if (x !== undefined) rules.push(standIn(fc, x));
        continue;
      }
      rules.push(fc.rules[j]!);
    }
    for (const h of elsewhere) rules.push(standIn(fc, h));
    kt.observed.rules.set(c.name, rules);
    (kt.held ??= new Map()).set(c.name, differs);
    kt.verified.delete(c.name);
    clean = false;
  }
  // A followed set holds its desired elements, but where the events say it differs; the events changed no other.
  for (const s of t.sets ?? []) {
    const ms = held.sets.get(s.name);
    if (!ms || (ms.differs.size === 0 && kt.verifiedSets.get(s.name) === s)) continue;
    const have = kt.observed.sets.get(s.name);
    if (!have) return false;
    if (ms.differs.size === 0) {
      kt.observed.sets.set(s.name, { set: have.set, elements: s.elements });
      kt.verifiedSets.set(s.name, s);
      continue;
    }
    const elements: SetElement[] = [];
    for (const [id, w] of ms.want) if (!ms.differs.has(id)) elements.push(w);
    for (const k of ms.differs.values()) if (k !== null) elements.push(k);
    kt.observed.sets.set(s.name, { set: have.set, elements });
    kt.verifiedSets.delete(s.name);
    clean = false;
  }
  kt.whole = clean ? t : undefined;
  return true;
}

/**
 * Whether the chains whose difference `kt` holds are still `t`'s: the desired chains it was found
 * against, or chains the same by every rule's key (a reload of the same chain), which it is moved
 * to. False: the caller drops `kt`, and the observation reads the table.
 */
export function heldFits(kt: TableRules, t: TableConfig): boolean {
  if (!kt.held) return true;
  for (const [name, d] of kt.held) {
    if (t.chains.includes(d.diff.chain)) continue;
    const c = t.chains.find((x) => x.name === name);
    if (!c || !sameChain(d.diff.chain, c)) return false;
    kt.held.set(name, { diff: { ...d.diff, chain: c }, drift: d.drift });
  }
  return true;
}

/**
 * Whether followCommit can follow `batch` from `observed` at all: chain and rule ops only, in
 * tables without anonymous sets (whose names are the kernel's). Checked before reading the chains
 * of a batch too big to echo, so that no read is spent on a batch it would give up on.
 */
export function canFollow(batch: Batch, observed: readonly ObservedTable[]): boolean {
  return observed.every((o) => [...o.sets.values()].every((x) => !(x.set.flags & SET_F.ANONYMOUS)))
    && batch.ops.every((op) => op.object === 'chain' || op.object === 'rule' || op.object === 'element'
      || (op.object === 'table' && (op.verb === 'add' || op.verb === 'create' || (op.verb === 'delete' && !observed.some((o) => o.family === op.family && o.name === op.name))))
      || (op.object === 'set' && (op.verb === 'delete' || (op.flags !== undefined && !(op.flags & SET_F.ANONYMOUS)))));
}

/**
 * How `t` was made from the table `kt` holds whole (src/model/derivation.ts), for diffTable's
 * `since`: undefined unless it was made from exactly that table.
 */
export function since(kt: TableRules | undefined, t: TableConfig): Derivation | undefined {
  if (kt?.whole === undefined) return undefined;
  // The very table held whole (a pass after a registration, when only the generation moved): nothing changed.
  if (kt.whole === t) return { from: t, changed: [], removed: [], edited: NO_EDITS };
  const d = derivationOf(t);
  return d?.from === kt.whole ? d : undefined;
}

/**
 * One table from an observation that found it as desired: every chain holds exactly its desired
 * rules, so the decoded rules are replaced by known ones (handle + the desired rule), and every
 * named set its desired elements (the config's own list stands for them). Undefined for a table
 * with anonymous sets (their names are the kernel's) or stateful objects.
 */
export function cleanRules(t: TableConfig, o: ObservedTable | undefined): TableRules | undefined {
  if (!o?.table || o.sets.size !== (t.sets?.length ?? 0) || objectsUnknown(t, o)) return undefined;
  const verifiedSets = new Map<string, SetConfig>();
  const sets = knownSets(t, (n) => o.sets.get(n)?.set, verifiedSets);
  if (!sets) return undefined;
  const kt: TableRules = { observed: { ...o, chains: new Map(o.chains), rules: new Map(), sets }, verified: new Map(), verifiedSets };
  for (const c of t.chains) {
    const have = o.rules.get(c.name) ?? [];
    if (have.length !== ruleCount(c) || have.some((r) => r.handle === undefined)) return undefined;
    // A rule the observation took by digest is a known rule already (the start-up's adoption): kept
    // as it is. The others are placed by index: a chain whose rules are made late (a restart the
    // record proves in sync) is not made for them.
    kt.observed.rules.set(c.name, have.map((h, j) => isKnownAt(h, c, j) ? h : knownRuleAt(t, c, j, h.handle!, h.digest)));
    kt.verified.set(c.name, c);
  }
  if (kt.observed.chains.size === t.chains.length) kt.whole = t;
  return kt;
}

const NO_EDITS: Derivation['edited'] = new Map();

/** Whether `a` holds the rules `b` holds, desired chain `c`'s at the same handles. O(rules), only where the two are not one array. */
function sameRules(a: readonly Rule[], b: readonly Rule[], c: ChainConfig): boolean {
  if (a.length !== b.length) return false;
  for (let j = 0; j < a.length; j++) if (a[j]!.handle !== b[j]!.handle || a[j]!.exprs !== c.rules[j]!.compiled.exprs || !hasKey(a[j]!)) return false;
  return true;
}

/** `rules` (by desired index) as known rules of `c` itself, in place: a reload's chain the same by every rule's key (retarget) has other objects. */
function asDesired(rules: Rule[], t: TableConfig, c: ChainConfig): void {
  for (let j = 0; j < rules.length; j++) {
    const r = c.rules[j]!;
    if (rules[j]!.exprs !== r.compiled.exprs) rules[j] = knownRule(t, c, r, rules[j]!.handle!, rules[j]!.digest);
  }
}


/** Up to this many chains with rules of unknown digest are decoded by revalidate (one dump each); more, a full read. */
const UNDIGESTED_CHAINS_UP_TO = 8;

/**
 * A chain whose known rules without a digest (our own commit's, their handles known from it) are
 * each the desired rule at its place, and the kernel's digests are those desired rules' (the
 * digests observeTable's adopt compares): its rules are proved without decoding them, and keep the
 * digests read. False where one differs or has none (a rule with anonymous sets): decoded. The
 * desired digests are made by turns of the event loop (at 100,000 rules, most of a second of this
 * thread, which an event would otherwise wait for); undefined, unproved, as soon as `moved` says a
 * commit came after the dump (the repair the event asked for waits for this pass to end), or when
 * the chain's rules moved meanwhile.
 */
async function provedByDesired(t: TableConfig, chain: string, rules: readonly Rule[], handles: readonly number[],
  digests: readonly string[], moved: () => boolean): Promise<boolean | undefined> {
  const c = t.chains.find((x) => x.name === chain);
  const ruleDigests = ruleDigester();
  if (!c || !ruleDigests || ruleCount(c) !== rules.length) return false;
  for (let i = 0; i < rules.length; i++) if (!rules[i]!.digest && !isKnownAt(rules[i]!, c, i)) return false;
  const want = (await runByTurns(until(desiredChainDigestsSteps([c], ruleDigests), moved)))?.get(chain);
  if (!want || rules.length !== handles.length) return undefined;
  for (let i = 0; i < rules.length; i++) if (rules[i]!.handle !== handles[i]) return undefined;
  for (let i = 0; i < rules.length; i++) if (!rules[i]!.digest && (!want[i] || want[i] !== digests[i])) return false;
  for (let i = 0; i < rules.length; i++) rules[i]!.digest ??= digests[i];
  return true;
}

/** Up to this many chains are fetched one GETCHAIN each; more take one chain list (as observeTable does). */
const CHAIN_GETS_UP_TO = 8;
