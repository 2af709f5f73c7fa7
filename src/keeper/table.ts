/**
 * The steps of a full pass over the tables nfkeeper owns: observe them (observeTable: kernel-
 * filtered dumps of a table's chains, rules, sets and objects; adoptRules: the rules an earlier
 * keeper wrote, recognised by their digests), compare with the desired state structurally
 * (diffTable), and plan one batch (planTable) that recreates what is missing and edits each chain
 * that differs in place, in order (plan.ts: the fewest ops, or a flush and rewrite when that is
 * fewer). observeTable and adoptRules read the kernel; diffTable returns what planTable needs as
 * a value (TableDiff: each differing chain with its edit, each set's element ops), and rule keys
 * are cached on the rule objects. Reconciler.once() (reconciler.ts) drives them under the
 * generation guard.
 */
import * as cryptoModule from 'node:crypto';
import { createHash } from 'node:crypto';
import type { Expr, Family, Hex } from '../netlink/expr.js';
import { Batch } from '../netlink/batch.js';
import type { Chain, ChainDigests, NftObj, NftSet, ObservedTable, Rule, SetElement, Table } from '../netlink/objects.js';
import { objectBlock, objectDefinitionKey } from '../config/stateful-objects.js';
import { objTypeName } from '../rules/objnames.js';
import { SET_F, TABLE_F, indexByChain } from '../netlink/objects.js';
import { NfkeeperError } from '../base/errors.js';
import type { NftConn } from '../netlink/conn.js';
import { ruleDigester, type RuleDigester } from '../netlink/socket.js';
import type { ChainConfig, TableConfig } from '../config/config.js';
import { commentOf, renderRule, ruleKey, type SetResolver } from '../rules/index.js';
import { planChain, planHunks, type ChainEdit } from './plan.js';
import type { Derivation } from '../model/derivation.js';
import type { Drift, DriftKind } from '../model/drift.js';
import { declarationText, elementTexts, typesOf, type SetConfig } from '../config/sets.js';
import { deletable, diffElements, elementId, sameElementFields, setDefinitionKey, type ElementDiff } from '../model/elements.js';

/** A chain a chain-missing or rules-differ drift names, as diffTable found it. */
export interface ChainDiff {
  /** The desired chain. */
  chain: ChainConfig;
  /** For rules-differ: the edit planned over the kernel rules it indexes. */
  edit?: { edit: ChainEdit; rules: Rule[] };
}

/** What diffTable found in one table: the drift, and what planTable needs to repair it. */
export interface TableDiff {
  drift: Drift[];
  /** By chain name: each chain a chain-missing or rules-differ drift names. */
  chains: Map<string, ChainDiff>;
  /** By set name: the element operations of each elements-differ drift. */
  elements: Map<string, ElementDiff>;
}

/** Up to this many desired chains are fetched one GETCHAIN each (µs, inline); more take one chain list. */
const CHAIN_GETS_UP_TO = 8;
/** Up to this many wanted chains in a table of mostly unwanted ones are dumped chain by chain. */
const CHAIN_DUMPS_UP_TO = 64;

/**
 * Dumps what nfkeeper needs to see of one owned table: one rule dump and one
 * set dump per table (the kernel filters both by table) and the chains. Chain
 * dumps are not filtered by the kernel (they walk every chain of the family,
 * which grows with the node), so a table with a few desired chains fetches
 * those one by one, and the table's use count (chains plus named sets) tells
 * whether there is anything else; only then is the family's chain list read.
 * A table with many desired chains (owners) reads the chain list once instead
 * of a round trip per chain. A table that holds far more chains than desired
 * is read the other way round: its chain list, then only the desired chains'
 * rules.
 */
export async function observeTable(sock: NftConn, family: Family, name: string,
  expectedChains: readonly string[] = [], adopt?: TableConfig, written?: WrittenDigests): Promise<ObservedTable> {
  const out: ObservedTable = { family, name, chains: new Map(), rules: new Map(), sets: new Map() };
  out.table = await sock.getTable(family, name);
  if (!out.table) return out;
  const byDigest = adopt !== undefined && sock.listRuleDigests !== undefined && ruleDigester() !== undefined;
  let chains: Chain[];
  let rules: Rule[];
  let sets: NftSet[];
  // Stateful objects: one dump of the table's (filtered by the kernel), beside the others.
  const objs = sock.listObjs?.({ family, table: name });
  if (out.table.use !== undefined && out.table.use > 2 * expectedChains.length + 64) {
    // Mostly chains we do not want (owners removed while we were down, say): those go whole, with
    // their rules, so read only the wanted chains' rules. Dumping the rules of many dead owner
    // chains costs far more than deleting them.
    [chains, sets] = await Promise.all([sock.listChains({ family, table: name }), sock.listSets({ family, table: name })]);
    const wanted = new Set(expectedChains);
    const present = chains.filter((c) => wanted.has(c.name));
    rules = byDigest ? await adoptRules(sock, adopt!, present.map((c) => c.name), written)
      : present.length <= CHAIN_DUMPS_UP_TO
        ? (await Promise.all(present.map((c) => sock.listRules({ family, table: name, chain: c.name, digests: true })))).flat()
        : await sock.listRules({ family, table: name, digests: true });
  } else if (expectedChains.length > CHAIN_GETS_UP_TO) {
    [chains, rules, sets] = await Promise.all([
      sock.listChains({ family, table: name }),
      byDigest ? adoptRules(sock, adopt!, undefined, written) : sock.listRules({ family, table: name, digests: true }),
      sock.listSets({ family, table: name }),
    ]);
  } else {
    let found: (Chain | undefined)[];
    [found, rules, sets] = await Promise.all([
      Promise.all(expectedChains.map((c) => sock.getChain(family, name, c))),
      byDigest ? adoptRules(sock, adopt!, undefined, written) : sock.listRules({ family, table: name, digests: true }),
      sock.listSets({ family, table: name }),
    ]);
    chains = found.filter((c): c is Chain => c !== undefined);
    const named = sets.filter((x) => !(x.flags & SET_F.ANONYMOUS)).length;
    const objects = objs ? (await objs).length : 0;
    if (out.table.use === undefined || out.table.use !== chains.length + named + objects) {
      chains = await sock.listChains({ family, table: name });  // something we did not ask for is there
    }
  }
  if (objs) out.objs = new Map((await objs).map((o) => [objectKey(o.type, o.name), o]));
  indexByChain(chains, rules, out);
  const referenced = new Set<string>();
  for (const r of rules) for (const e of r.exprs) if (e.kind === 'lookup' || (e.kind === 'objref' && e.set !== undefined)) referenced.add(e.set!);
  await Promise.all(sets.map(async (x) => {
    // Elements matter for comparing the anonymous sets rules use, and a named set's are desired state.
    const named = !(x.flags & SET_F.ANONYMOUS);
    const elements = named || referenced.has(x.name) ? await sock.listElements({ family, table: name, set: x.name }) : [];
    out.sets.set(x.name, { set: x, elements });
  }));
  return out;
}

/**
 * The rules of `t`'s table (or of `only` its chains) for a look that adopts what an earlier keeper
 * wrote (the start-up pass): one digest dump, nothing decoded, and each desired chain whose rules'
 * digests (RuleDigest, of the bytes a commit would write for them: addon ruleDigests) are the
 * kernel's, in order, is taken as holding exactly its desired rules (compact rules with their
 * handles, as the known state keeps them). Only the other chains are decoded, one dump each or
 * one of the table: those that differ (a rule changed, added or deleted, other userdata), rules
 * without a digest (anonymous sets), and chains not desired. The diff then sees what a full read
 * would have shown it.
 */
async function adoptRules(sock: NftConn, t: TableConfig, only?: readonly string[], written?: WrittenDigests): Promise<Rule[]> {
  const ruleDigests = ruleDigester()!;
  const family = t.family;
  const dumps = only === undefined ? await sock.listRuleDigests!({ family, table: t.name })
    : only.length <= CHAIN_DUMPS_UP_TO ? (await Promise.all(only.map((chain) => sock.listRuleDigests!({ family, table: t.name, chain })))).flat()
      : await sock.listRuleDigests!({ family, table: t.name }).then((ds) => {
        const wanted = new Set(only);
        return ds.filter((d) => wanted.has(d.chain));
      });
  const desired = new Map(t.chains.map((c) => [c.name, c]));
  const out: Rule[] = [];
  const decode: string[] = [];
  // The desired chains the kernel holds as many rules of: their digests, compared with the kernel's.
  const check = dumps.filter((d) => desired.get(d.chain)?.rules.length === d.handles.length);
  const same = sameDigests(check, (d) => desired.get(d.chain)!.rules, ruleDigests, written);
  for (const d of dumps) {
    const c = desired.get(d.chain);
    if (!same.has(d)) {
      decode.push(d.chain);
      continue;
    }
    for (let i = 0; i < d.handles.length; i++) out.push(compactRule(t, c!, c!.rules[i]!, d.handles[i]!, d.digests[i]));
  }
  if (decode.length === 0) return out;
  const decoded = decode.length <= CHAIN_DUMPS_UP_TO
    ? (await Promise.all(decode.map((chain) => sock.listRules({ family, table: t.name, chain, digests: true })))).flat()
    : await sock.listRules({ family, table: t.name, digests: true }).then((rs) => {
      const want = new Set(decode);
      return rs.filter((r) => want.has(r.chain));
    });
  return out.concat(decoded);
}

/**
 * The kernel's chains (`dumps`) whose digests are, rule by rule, those of their desired rules
 * (`rulesOf`, as many). The desired digests are made DIGESTS_PER_CALL rules at a time (a few
 * chains in one call, a big chain in slices) and compared at once: made in one call, every rule's
 * digest string and the expression index that made them were alive together, promoted to the old
 * generation in the middle of a restart's adoption, where its peak was.
 */
function sameDigests(dumps: readonly ChainDigests[], rulesOf: (d: ChainDigests) => ChainConfig['rules'],
  ruleDigests: RuleDigester, written?: WrittenDigests): Set<ChainDigests> {
  const differ = new Set<ChainDigests>();
  let group: { d: ChainDigests; from: number; rules: ChainConfig['rules'] }[] = [];
  let size = 0;
  const flush = () => {
    const mine = desiredDigests(group.map((g) => g.rules), ruleDigests, written);
    for (const [k, { d, from }] of group.entries()) {
      const want = mine[k]!;
      for (let i = 0; i < want.length; i++) {
        if (want[i] === '' || want[i] !== d.digests[from + i]) {
          differ.add(d);
          break;
        }
      }
    }
    group = [];
    size = 0;
  };
  for (const d of dumps) {
    const rules = rulesOf(d);
    for (let from = 0; from < rules.length; from += DIGESTS_PER_CALL) {
      const slice = from === 0 && rules.length <= DIGESTS_PER_CALL ? rules : rules.slice(from, from + DIGESTS_PER_CALL);
      if (size + slice.length > DIGESTS_PER_CALL) flush();
      group.push({ d, from, rules: slice });
      size += slice.length;
    }
  }
  if (group.length > 0) flush();
  return new Set(dumps.filter((d) => !differ.has(d)));
}

/** Desired rules digested per ruleDigests call by sameDigests. */
const DIGESTS_PER_CALL = 4096;

/**
 * The digests a commit computed from the bytes it sent for the rules it wrote (CommitOptions.digests),
 * by the expression list it was given: a look after that commit, in the same pass, takes a desired
 * rule's digest from there when the rule's expressions are that very list (and its userdata the
 * same) instead of encoding the rule again.
 */
export type WrittenDigests = ReadonlyMap<readonly Expr[], { userdata?: Hex; digest: string }>;

/** The digests of `batch`'s rules as its commit gave them (`digests`, per op index). */
export function writtenDigests(batch: Batch, digests: readonly string[]): WrittenDigests {
  const out = new Map<readonly Expr[], { userdata?: Hex; digest: string }>();
  batch.ops.forEach((op, i) => {
    // '' too: a rule without a digest (an anonymous set) has none however often it is encoded.
    if (op.object === 'rule' && op.exprs && digests[i] !== undefined) out.set(op.exprs, { userdata: op.userdata, digest: digests[i]! });
  });
  return out;
}

/**
 * The digests of desired rules (per chain) as a dump of them would give them: those a commit of
 * this pass wrote from `written`, the others encoded here, each distinct expression object once
 * (the keeper's desired rules share identical expressions, src/model/compact.ts: at 100,000 rules
 * of five expressions, about 100,000 to encode instead of 500,000).
 */
function desiredDigests(chains: readonly ChainConfig['rules'][], ruleDigests: RuleDigester, written?: WrittenDigests): string[][] {
  let total = 0;
  for (const rules of chains) total += rules.length;
  const all = new Array<string>(total);
  // The rules to encode here, and where their digests go in `all`.
  const encode: ChainConfig['rules'][number][] = [];
  const slots: number[] = [];
  let p = 0;
  for (const rules of chains) {
    for (const r of rules) {
      const w = written?.get(r.compiled.exprs);
      if (w !== undefined && w.userdata === r.compiled.userdata) all[p] = w.digest;
      else {
        encode.push(r);
        slots.push(p);
      }
      p++;
    }
  }
  if (encode.length > 0) {
    const index = new Map<Expr, number>();
    const exprs: Expr[] = [];
    let size = 0;
    for (const r of encode) size += 1 + r.compiled.exprs.length;
    const flat = new Uint32Array(size);
    const userdata: (string | undefined)[] = [];
    let at = 0;
    for (const r of encode) {
      const list = r.compiled.exprs;
      flat[at++] = list.length;
      for (const e of list) {
        let i = index.get(e);
        if (i === undefined) index.set(e, i = exprs.push(e) - 1);
        flat[at++] = i;
      }
      userdata.push(r.compiled.userdata);
    }
    const got = ruleDigests(exprs, flat, userdata);
    for (let k = 0; k < slots.length; k++) all[slots[k]!] = got[k]!;
  }
  let from = 0;
  return chains.map((rules) => all.slice(from, from += rules.length));
}

/**
 * A rule known to be `r` of desired chain `c` at `handle`, without a decoded copy: the desired
 * rule's own expressions and userdata (shared with the desired state), and the desired rule itself
 * for its key, computed when a diff first asks (a registration's new rules are compared with
 * nothing, and hashing their canonical form was a third of what a registration allocated). The
 * known state and the start-up's adoption by digests keep their rules so.
 */
export function compactRule(t: TableConfig, c: ChainConfig, r: ChainConfig['rules'][number], handle: number, digest?: string): Rule {
  const compiled = r.compiled;
  const rule: Rule = {
    family: t.family, table: t.name, chain: c.name, handle, exprs: compiled.exprs,
    ...(compiled.userdata !== undefined ? { userdata: compiled.userdata } : {}),
    ...(digest !== undefined ? { digest } : {}),
  };
  Object.defineProperty(rule, DESIRED, { value: r, configurable: true, writable: true });
  return rule;
}

/**
 * The key rules are compared by: a SHA-256 of the rule's canonical form (ruleKey), 44 characters
 * instead of the canonical JSON's hundreds. Desired rules keep theirs for as long as the config
 * lives (and the known state shares it), so the JSON would be a large part of a big config's heap;
 * a collision would take a SHA-256 collision.
 */
const sha256 = (s: string): string => (hashOnce ? hashOnce('sha256', s, 'base64') : createHash('sha256').update(s).digest('base64'));
// crypto.hash (Node 20.12+): one call, no Hash object.
const hashOnce = (cryptoModule as { hash?: (alg: string, data: string, enc: 'base64') => string }).hash;

function compactKey(rule: { exprs: readonly Expr[]; userdata?: Hex }, resolve?: SetResolver): string {
  return sha256(ruleKey(rule, resolve));
}

// ruleKey resolves a compiled rule's anonymous sets by their batch-local ids itself. The key is kept
// on the rule object (a hidden, non-enumerable property): a registration looks up every owner's
// jump in the dispatch chain, and a property read costs a fraction of a WeakMap lookup.
const KEY = Symbol('nfkeeper.ruleKey');
// A compact rule's desired rule (compactRule): its key is that rule's.
const DESIRED = Symbol('nfkeeper.desiredRule');
type Keyed = { [KEY]?: string; [DESIRED]?: ChainConfig['rules'][number] };
function keep(o: object, key: string): string {
  Object.defineProperty(o, KEY, { value: key, configurable: true, writable: true });
  return key;
}
function cachedDesiredKey(rule: ChainConfig['rules'][number]): string {
  return (rule as Keyed)[KEY] ?? keep(rule, compactKey(rule.compiled));
}

/** A desired rule's structural key (computed once per compiled rule). */
export const desiredKey = cachedDesiredKey;

// Keys of kernel rules known without decoding them (src/keeper/known.ts): the same string as the
// desired rule's, so comparing them is a pointer compare.

/** The key of a rule known without decoding it (compactRule, withKey); undefined for a decoded one. */
function knownKey(rule: Rule): string | undefined {
  const k = (rule as Keyed)[KEY];
  if (k !== undefined) return k;
  const d = (rule as Keyed)[DESIRED];
  return d === undefined ? undefined : cachedDesiredKey(d);
}

/** `rule` with its structural key recorded; diffTable then never computes it. */
export function withKey(rule: Rule, key: string): Rule {
  keep(rule, key);
  return rule;
}

/**
 * Whether `rules` are compact rules (compactRule) of exactly `want`'s rules, in order: what
 * comparing their keys would find equal (a compact rule's key is its desired rule's), without
 * computing one. A rule given a key of its own (withKey) is not taken so.
 */
function holdsDesired(rules: readonly Rule[], want: ChainConfig['rules']): boolean {
  if (rules.length !== want.length) return false;
  for (let j = 0; j < rules.length; j++) {
    const r = rules[j] as Keyed;
    if (r[DESIRED] !== want[j] || r[KEY] !== undefined) return false;
  }
  return true;
}

/** Whether `rule` is known without decoding (compactRule, withKey): its key needs no canonical form of its own. */
export function hasKey(rule: Rule): boolean {
  return (rule as Keyed)[DESIRED] !== undefined || (rule as Keyed)[KEY] !== undefined;
}

/**
 * Whether a decoded kernel rule is the known rule `known` (which carries its key, see withKey).
 * For rules without anonymous sets (the known state's tables have none).
 */
export function sameKey(known: Rule, decoded: Rule): boolean {
  const k = knownKey(known);
  return k !== undefined && k === compactKey({ exprs: decoded.exprs, userdata: decoded.userdata });
}

function baseMatches(want: ChainConfig['base'], have: Chain): boolean {
  if (!want) return have.hook === undefined;
  return have.type === want.type && have.hook === want.hook && have.priority === want.priority
    && (have.policy ?? 'accept') === want.policy;
}

/** Protect mode: the table is tied to our socket (NFT_TABLE_F_OWNER) and outlives it (persist). */
export const PROTECT_FLAGS = TABLE_F.OWNER | TABLE_F.PERSIST;

/** Another live process's socket owns a table we are configured to own. */
export class TableOwnedError extends NfkeeperError {
  override name = 'TableOwnedError';
  constructor(readonly family: Family, readonly table: string, readonly portId: number) {
    super(`table ${family} ${table} is owned by another live process (netlink port id ${portId}), ` +
      'perhaps a running nfkeeper; refusing to fight it. Stop that process first: the table then stays as an ' +
      'orphan, which `nfkeeper cleanup` can remove or a new `nfkeeper run` can claim');
  }
}

export interface DiffOptions {
  /** Enforce protect mode for this table (already reduced to what the kernel supports). */
  protect?: boolean;
  /** Our commit socket's port id: the owner a protected table must have. */
  portId?: number;
  /** Read-only callers (check) may look at a table another live process owns. */
  allowForeignOwner?: boolean;
  /**
   * Chains whose kernel rules are known to equal this desired chain (by identity; see
   * src/keeper/known.ts): not compared again. A chain whose desired definition is another object
   * is compared as usual.
   */
  verified?: ReadonlyMap<string, ChainConfig>;
  /** Named sets whose elements are known to be this desired set's (by identity): their elements are not compared. */
  verifiedSets?: ReadonlyMap<string, SetConfig>;
  /**
   * Timed elements (a timeout or expires in the config) this process has seen installed, per
   * `family table set`: one of those missing has expired and is left to the kernel; a timed element
   * missing that is not here is installed (a reload or the start-up added it). Without it (one-shot
   * check/apply, which remember nothing) every missing timed element counts as expired.
   */
  armed?: ArmedTimed;
  /**
   * The desired table was made from `since.from` (src/model/derivation.ts), and the kernel is known to hold
   * exactly that table (every chain verified, no other chain: the caller checks): only the chains
   * the derivation changed are compared, and a dispatch chain only in its changed runs of rules.
   */
  since?: Derivation;
}

/** See DiffOptions.armed: element ids by `family table set`. */
export type ArmedTimed = Map<string, Set<string>>;

const NONE_ARMED: ReadonlySet<string> = new Set();

export type Protection = 'protected' | 'orphaned' | 'unprotected' | 'foreign-owner' | 'missing';

export function protectionOf(table: Table | undefined, portId?: number): Protection {
  if (!table) return 'missing';
  if (table.flags & TABLE_F.OWNER) return table.owner === portId ? 'protected' : 'foreign-owner';
  return table.flags & TABLE_F.PERSIST ? 'orphaned' : 'unprotected';
}

/** Every difference between what a table should hold and what it holds, with what repairs it. */
export function diffTable(want: TableConfig, have: ObservedTable, options: DiffOptions = {}): TableDiff {
  const d = (kind: DriftKind, detail: string, chain?: string, actual?: string[]): Drift =>
    ({ kind, family: want.family, table: want.name, chain, detail, actual });
  const drifts: Drift[] = [];
  const out: TableDiff = { drift: drifts, chains: new Map(), elements: new Map() };
  if (!have.table) {
    drifts.push(d('table-missing', `table ${want.family} ${want.name} is missing`));
    return out;
  }
  const protection = protectionOf(have.table, options.portId);
  if (protection === 'foreign-owner' && !options.allowForeignOwner) throw new TableOwnedError(want.family, want.name, have.table.owner ?? 0);
  if (options.protect && protection === 'orphaned') {
    drifts.push(d('table-orphaned', `table ${want.family} ${want.name} is an orphan; claiming it`));
  } else if (options.protect && protection === 'unprotected') {
    // The owner flag cannot be set on an existing table (EOPNOTSUPP): recreate it, atomically.
    return { ...out, drift: [d('table-unprotected', `table ${want.family} ${want.name} is not protected; recreating it owned`)] };
  }
  if ((have.table.userdata ?? '') !== (want.userdata ?? '')) {
    // NEWTABLE does not update a table's userdata (the kernel takes only its flags): recreate it, atomically.
    return { ...out, drift: [d('table-changed', `table ${want.family} ${want.name} has comment ${quoteComment(have.table.userdata)}, want ` +
      `${quoteComment(want.userdata)}; recreating it`)] };
  }
  if (((have.table.flags & TABLE_F.DORMANT) !== 0) !== (want.dormant === true)) {
    const what = `table ${want.family} ${want.name} is ${want.dormant ? 'active, want dormant' : 'dormant, want active'}`;
    // The kernel changes no flag of a table its owner holds (EOPNOTSUPP): recreate it, atomically.
    if (protection === 'protected') return { ...out, drift: [d('table-changed', `${what}; recreating it (an owned table's flags cannot change)`)] };
    // Otherwise NEWTABLE toggles dormant in place (the kernel unhooks or hooks the chains).
    drifts.push(d('table-flags', what));
  }
  const resolve: SetResolver = (n) => have.sets.get(n);
  drifts.push(...diffObjects(want, have));
  drifts.push(...diffSets(want, have, out.elements, options.armed, options.verifiedSets));
  let present = 0;  // desired chains the kernel holds: when that is all it holds, there is no extra chain
  const since = options.since;
  for (const c of since ? since.changed : want.chains) {
    if (options.verified?.get(c.name) === c) {
      present++;
      continue;
    }
    const chain = have.chains.get(c.name);
    if (chain) present++;
    if (!chain) {
      out.chains.set(c.name, { chain: c });
      drifts.push(d('chain-missing', `chain ${c.name} is missing`, c.name));
      continue;
    }
    if (!baseMatches(c.base, chain)) {
      drifts.push(d('chain-changed', `chain ${c.name} has ${describeBase(chain)}, want ${describeWant(c.base)}`, c.name));
      continue;
    }
    if ((chain.userdata ?? '') !== (c.userdata ?? '')) {
      drifts.push(d('chain-changed', `chain ${c.name} has comment ${quoteComment(chain.userdata)}, want ${quoteComment(c.userdata)}`, c.name));
      continue;
    }
    const rules = have.rules.get(c.name) ?? [];
    // Every kernel rule known to be the desired rule at its place (the start-up's adoption by
    // digests): equal, without a key. Comparing keys would hash every desired rule's canonical form
    // and keep the key on it for the daemon's life: seconds and megabytes of a big restart.
    if (holdsDesired(rules, c.rules)) continue;
    const keys = kernelKeys(rules, resolve);
    const setsOf = (j: number) => c.rules[j]!.compiled.sets.length;
    const hunks = since?.edited.get(c.name);
    let detail: string | undefined;
    let edit: ChainEdit | undefined;
    if (hunks && options.verified?.get(c.name) === hunks.from && rules.length === hunks.from.rules.length) {
      // The kernel holds hunks.from's rules: only the runs that changed are compared and planned.
      edit = planHunks(keys, rules.length, (j) => cachedDesiredKey(c.rules[j]!), c.rules.length, hunks.hunks, setsOf);
      if (edit) detail = describeHunks(c, rules, edit, resolve);
    }
    if (!edit) {
      const wantKeys = c.rules.map(cachedDesiredKey);
      detail = compareRules(c, rules, keys, wantKeys, resolve);
      if (detail) edit = planChain(keys, rules.length, wantKeys, setsOf);
    }
    if (detail && edit) {
      if (edit.steps.some((x) => x.op !== 'insert' && rules[x.have]!.handle === undefined)) edit.rewrite = true;
      const drift = d('rules-differ', `${detail}; ${describeEdit(edit, rules.length, c.rules.length)}`, c.name);
      // Rendering every kernel rule costs as much as the dump; only `check` wants it.
      let actual: string[] | undefined;
      Object.defineProperty(drift, 'actual', {
        enumerable: true, configurable: true,
        get: () => actual ??= rules.map((r) => safeRender(r, want.family, resolve)),
        set: (v: string[]) => { actual = v; },
      });
      out.chains.set(c.name, { chain: c, edit: { edit, rules } });
      drifts.push(drift);
    }
  }
  if (since) {
    // The kernel holds exactly since.from's chains: the only extra ones are those the derivation removed.
    for (const name of since.removed) if (have.chains.has(name)) drifts.push(d('chain-extra', `chain ${name} is not in the config`, name));
  } else if (present !== have.chains.size) {
    const wanted = new Set(want.chains.map((c) => c.name));
    for (const name of have.chains.keys()) {
      if (!wanted.has(name)) drifts.push(d('chain-extra', `chain ${name} is not in the config`, name));
    }
  }
  const wantedSets = new Set((want.sets ?? []).map((x) => x.name));
  for (const [name, { set }] of have.sets) {
    if (!(set.flags & SET_F.ANONYMOUS) && !wantedSets.has(name)) {
      drifts.push({ ...d('set-extra', `${set.flags & SET_F.MAP ? 'map' : 'set'} ${name} is not in the config`), set: name });
    }
  }
  return out;
}

/** Objects are named per type: a counter and a quota may both be called c. */
export const objectKey = (type: NftObj['type'], name: string): string => `${String(type)} ${name}`;

/**
 * Stateful objects, when the look read them: one missing is created, one whose configuration
 * (not its state: packets, bytes, quota used) differs is created again (rules that use it are
 * rewritten in the same batch, since the kernel deletes no object in use), one not desired is
 * deleted. An object as desired is never touched, so its counters go on counting.
 */
function diffObjects(want: TableConfig, have: ObservedTable): Drift[] {
  if (!have.objs) return [];
  const out: Drift[] = [];
  const d = (kind: DriftKind, type: NftObj['type'], name: string, detail: string): Drift =>
    ({ kind, family: want.family, table: want.name, object: { type, name }, detail });
  const wanted = new Set<string>();
  for (const o of want.objects ?? []) {
    const k = objectKey(o.type, o.name);
    wanted.add(k);
    const h = have.objs.get(k);
    if (!h) out.push(d('object-missing', o.type, o.name, `${o.type} ${o.name} is missing`));
    else if (objectDefinitionKey(h) !== objectDefinitionKey(o.obj)) {
      out.push(d('object-changed', o.type, o.name, `${o.type} ${o.name} is defined differently (${objectBlock(h, want.family) ?? 'a form nfkeeper cannot write'}); creating it again`));
    }
  }
  for (const [k, h] of have.objs) {
    if (!wanted.has(k)) out.push(d('object-extra', h.type, h.name, `${typeof h.type === 'string' ? h.type : `object of type ${h.type}`} ${h.name} is not in the config`));
  }
  return out;
}

/** Whether a rule uses one of the objects (by objectKey): an objref by name, or an object map. */
function usesObject(exprs: readonly Expr[], keys: ReadonlySet<string>): boolean {
  for (const e of exprs) {
    if (e.kind !== 'objref' || e.name === undefined || e.type === undefined) continue;
    const type = objTypeName(e.type);
    if (type && keys.has(objectKey(type, e.name))) return true;
  }
  return false;
}


/**
 * Sets and maps: missing ones are created with their elements; one whose
 * definition differs is created again (rules that use it are rewritten in
 * the same batch, since the kernel keeps a set that a rule uses); one whose
 * elements differ gets element adds and deletes only. A constant set cannot
 * take element changes, so it is created again.
 */
function diffSets(want: TableConfig, have: ObservedTable, elements: Map<string, ElementDiff>, armed?: ArmedTimed,
  verifiedSets?: ReadonlyMap<string, SetConfig>): Drift[] {
  const out: Drift[] = [];
  for (const s of want.sets ?? []) {
    const what = s.map ? 'map' : 'set';
    const d = (kind: DriftKind, detail: string): Drift => ({ kind, family: want.family, table: want.name, set: s.name, detail });
    const h = have.sets.get(s.name);
    if (!h || h.set.flags & SET_F.ANONYMOUS) {
      out.push(d('set-missing', `${what} ${s.name} is missing`));
      continue;
    }
    if (setDefinitionKey(h.set) !== setDefinitionKey(s.set)) {
      out.push(d('set-changed', `${what} ${s.name} is defined differently (${describeSetDiff(h.set, s.set)}); creating it again`));
      continue;
    }
    const known = verifiedSets?.get(s.name);
    if (known === s) continue;  // known to hold exactly these elements
    // Known to hold another desired object's elements, the same ones (a reload that left this set alone).
    if (known && h.elements === known.elements && sameElementList(known.elements, s.elements)) continue;
    const diff = diffElements(s.elements, h.elements, s.set,
      armed ? armed.get(`${want.family} ${want.name} ${s.name}`) ?? NONE_ARMED : undefined);
    if (diff.add.length === 0 && diff.delete.length === 0) continue;
    if (s.set.flags & SET_F.CONSTANT) {
      out.push(d('set-changed', `constant ${what} ${s.name} holds other elements; a constant set is created again`));
      continue;
    }
    const drift = d('elements-differ', `${what} ${s.name}: ${diff.add.length} kernel elements to add, ${diff.delete.length} to delete${diff.expired ? ` (${diff.expired} with a timeout are gone: expired, left to the kernel)` : ''}`);
    elements.set(s.name, diff);
    out.push(drift);
  }
  return out;
}

/** The same elements in the same order, compared field by field (a reload's new objects for an unchanged set). */
function sameElementList(a: readonly SetElement[], b: readonly SetElement[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!sameElementFields(a[i]!, b[i]!)) return false;
  return true;
}

function describeSetDiff(have: NftSet, want: NftSet): string {
  const fields = ['flags', 'keyType', 'keyLen', 'dataType', 'dataLen', 'policy', 'size', 'timeout', 'gcInterval', 'fieldLen', 'userdata', 'exprs'] as const;
  const diff = fields.filter((f) => JSON.stringify(have[f] ?? null) !== JSON.stringify(want[f] ?? null));
  return diff.map((f) => `${f} ${JSON.stringify(have[f] ?? null)}, want ${JSON.stringify(want[f] ?? null)}`).join('; ');
}

/** Whether a rule uses the named set (a lookup, a map, a dynset: any expression naming it). */
function usesSet(exprs: readonly Expr[], names: ReadonlySet<string>): boolean {
  for (const e of exprs) {
    const set = (e as { set?: unknown }).set;
    if (typeof set === 'string' && names.has(set)) return true;
  }
  return false;
}

/**
 * For a rules-differ drift of `diff` patched in place: the kernel rules its edit takes out
 * (deleted or replaced); the rest stay, as desired rules. Undefined when the chain is rewritten whole.
 */
export function rulesRemovedBy(diff: TableDiff, drift: Drift): Rule[] | undefined {
  const e = drift.kind === 'rules-differ' ? diff.chains.get(drift.chain!)?.edit : undefined;
  if (!e || e.edit.rewrite) return undefined;
  const out: Rule[] = [];
  for (const x of e.edit.steps) if (x.op !== 'insert') out.push(e.rules[x.have]!);
  return out;
}

/** Kernel rule keys by index, each computed once and only when asked for. */
function kernelKeys(rules: readonly Rule[], resolve: SetResolver): (i: number) => string {
  const keys: (string | undefined)[] = new Array(rules.length);
  return (i) => keys[i] ??= knownKey(rules[i]!) ?? compactKey({ exprs: rules[i]!.exprs, userdata: rules[i]!.userdata }, resolve);
}

function describeEdit(edit: ChainEdit, have: number, want: number): string {
  if (edit.rewrite) return `repair: flush and re-add ${want} rules (${edit.rewriteOps} ops; an edit would take ${edit.editOps})`;
  let del = 0;
  let ins = 0;
  let rep = 0;
  for (const x of edit.steps) {
    if (x.op === 'delete') del++;
    else if (x.op === 'insert') ins++;
    else rep++;
  }
  const kept = want - ins - rep;
  return `repair: ${kept} of ${have} kernel rules stay, ${del} deleted, ${ins} inserted, ${rep} replaced (${edit.editOps} ops)`;
}

function compareRules(c: ChainConfig, rules: Rule[], haveKey: (i: number) => string, wantKeys: readonly string[],
  resolve: SetResolver): string | undefined {
  // Kernel rules are keyed only up to the first difference here; the edit plan keys the rest.
  for (let i = 0; i < Math.max(rules.length, wantKeys.length); i++) {
    if (i >= rules.length) return `rule ${i + 1} (${c.rules[i]!.compiled.text}) is missing`;
    const have = haveKey(i);
    if (have === wantKeys[i]) continue;
    if (i >= wantKeys.length) return `foreign rule at ${i + 1}: ${safeRender(rules[i]!, undefined, resolve)}`;
    const wantedElsewhere = wantKeys.indexOf(have);
    if (wantedElsewhere >= 0) return `rule order differs at ${i + 1}: want '${c.rules[i]!.compiled.text}'`;
    return `rule ${i + 1} differs: have '${safeRender(rules[i]!, undefined, resolve)}', want '${c.rules[i]!.compiled.text}'`;
  }
  return undefined;
}

/** compareRules' first difference for a hunk plan (planHunks): at the first rule the edit takes out or puts in. */
function describeHunks(c: ChainConfig, rules: Rule[], edit: ChainEdit, resolve: SetResolver): string | undefined {
  const x = edit.steps[0];
  if (!x) return undefined;
  if (x.op === 'insert') return `rule ${x.want + 1} (${c.rules[x.want]!.compiled.text}) is missing`;
  if (x.op === 'replace') return `rule ${x.want + 1} differs: have '${safeRender(rules[x.have]!, undefined, resolve)}', want '${c.rules[x.want]!.compiled.text}'`;
  return `foreign rule at ${x.have + 1}: ${safeRender(rules[x.have]!, undefined, resolve)}`;
}

function safeRender(r: { exprs: Expr[]; userdata?: Hex; family?: Family }, family: Family | undefined,
  resolve: SetResolver): string {
  try {
    return renderRule(r, family ?? r.family ?? 'ip', resolve);
  } catch {
    return `<${r.exprs.length} expressions>`;
  }
}

function describeBase(c: Chain): string {
  return c.hook ? `type ${c.type} hook ${c.hook} priority ${c.priority} policy ${c.policy ?? 'accept'}` : 'no hook';
}

function describeWant(b: ChainConfig['base']): string {
  return b ? `type ${b.type} hook ${b.hook} priority ${b.priority} policy ${b.policy}` : 'no hook';
}

/** Options for planning a table's repair. */
export interface PlanOptions {
  /** Table flags to create it with (protect mode). */
  tableFlags?: number;
}

/**
 * Appends to `batch` the operations that turn `have` into `want`, in an order
 * the kernel accepts within one transaction: table, missing chains, flushes,
 * deletions of chains that must go, then every rewritten chain's rules.
 */
export function planTable(batch: Batch, want: TableConfig, have: ObservedTable, diff: TableDiff,
  options: PlanOptions = {}): void {
  const drifts = diff.drift;
  if (drifts.length === 0) return;
  const { family, name: table } = want;
  const rewrite = new Set<string>();
  const tableFlags = (options.tableFlags ?? 0) | (want.dormant ? TABLE_F.DORMANT : 0);
  const flags = tableFlags ? { flags: tableFlags } : {};
  if (drifts.some((x) => x.kind === 'table-unprotected' || x.kind === 'table-changed')) {
    batch.delete('table', { family, name: table });
    have = { ...have, table: undefined, chains: new Map(), rules: new Map(), sets: new Map() };
  }
  const tableUserdata = want.userdata ? { userdata: want.userdata } : {};
  if (!have.table) {
    batch.add('table', { family, name: table, ...flags, ...tableUserdata });
    for (const c of want.chains) rewrite.add(c.name);
  } else if (drifts.some((x) => x.kind === 'table-orphaned' || x.kind === 'table-flags')) {
    // Claiming an orphan: NEWTABLE with owner|persist on the existing table; its rules stay as they
    // are. Dormant toggled: NEWTABLE with every flag the table keeps (0 wakes an unowned one).
    batch.add('table', { family, name: table, flags: tableFlags });
  }
  const recreate = new Set(drifts.filter((x) => x.kind === 'chain-changed').map((x) => x.chain!));
  const extra = drifts.filter((x) => x.kind === 'chain-extra').map((x) => x.chain!);
  // Sets created again: the kernel deletes no set a rule uses, so the chains whose rules use one are rewritten.
  const setsAgain = new Set(drifts.filter((x) => x.kind === 'set-changed').map((x) => x.set!));
  if (setsAgain.size > 0 && have.table) {
    for (const c of want.chains) {
      if ((have.rules.get(c.name) ?? []).some((r) => usesSet(r.exprs, setsAgain))) rewrite.add(c.name);
    }
  }
  // Objects created again: likewise, the chains whose rules use one are rewritten first.
  const objsAgain = new Set(drifts.filter((x) => x.kind === 'object-changed').map((x) => objectKey(x.object!.type, x.object!.name)));
  if (objsAgain.size > 0 && have.table) {
    for (const c of want.chains) {
      if ((have.rules.get(c.name) ?? []).some((r) => usesObject(r.exprs, objsAgain))) rewrite.add(c.name);
    }
  }
  // The desired chains to visit below: every one, or, when the table stays and no chain or set is
  // created again, only those a drift names (in table order, as diffTable found them): a
  // registration among 1,000 owners plans its own chain and the dispatch chain, not 1,002.
  let chains: readonly ChainConfig[] = want.chains;
  if (have.table && recreate.size === 0 && setsAgain.size === 0 && objsAgain.size === 0) {
    const named: ChainConfig[] = [];
    let all = true;  // every such drift came with its chain
    for (const x of drifts) {
      if (x.kind !== 'chain-missing' && x.kind !== 'rules-differ') continue;
      const c = diff.chains.get(x.chain!)?.chain;
      if (c) named.push(c);
      else all = false;
    }
    if (all) chains = named;
  }
  // Chains patched in place: their kept rules keep handles and counters.
  const edited = new Map<string, { edit: ChainEdit; rules: Rule[] }>();
  for (const x of drifts) {
    if (x.kind !== 'chain-missing' && x.kind !== 'rules-differ') continue;
    const e = x.kind === 'rules-differ' && have.table ? diff.chains.get(x.chain!)?.edit : undefined;
    if (e && !e.edit.rewrite && have.chains.has(x.chain!) && !rewrite.has(x.chain!)) edited.set(x.chain!, e);
    else rewrite.add(x.chain!);
  }

  // A chain recreated in place cannot be deleted while a rule jumps to it (EBUSY): the desired
  // chains holding such rules are rewritten in the same batch (foreign ones go as extras).
  if (recreate.size > 0 && have.table) {
    const wantedChains = new Set(want.chains.map((c) => c.name));
    for (const [name, rules] of have.rules) {
      if (!wantedChains.has(name) || rewrite.has(name)) continue;
      if (rules.some((r) => r.exprs.some((e) => e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto')
        && e.chain !== undefined && recreate.has(e.chain)))) {
        rewrite.add(name);
        edited.delete(name);
      }
    }
  }

  // Flush and delete rules first, so no rule still jumps to a chain we delete or recreate.
  for (const c of chains) {
    if (have.table && (rewrite.has(c.name) || recreate.has(c.name)) && have.chains.has(c.name)) {
      batch.flush('chain', { family, table, name: c.name });
    }
    const e = edited.get(c.name);
    if (e) emitEdit(batch, family, table, c, e.rules, e.edit, 'remove');
  }
  for (const name of extra) batch.flush('chain', { family, table, name });
  // Element deletes and set deletes before chain deletes: a map's element may jump to a chain that goes.
  for (const x of drifts) {
    const ops = x.kind === 'elements-differ' ? diff.elements.get(x.set!) : undefined;
    if (ops && ops.delete.length > 0) batch.delete('element', { family, table, set: x.set!, elements: ops.delete.map(deletable) });
  }
  for (const x of drifts) {
    if (x.kind === 'set-extra' || (x.kind === 'set-changed' && have.table)) batch.delete('set', { family, table, name: x.set! });
  }
  for (const x of drifts) {
    if (x.kind === 'object-extra' || (x.kind === 'object-changed' && have.table)) {
      if (typeof x.object!.type === 'string') batch.delete('obj', { family, table, type: x.object!.type, name: x.object!.name });
    }
  }
  for (const name of recreate) batch.delete('chain', { family, table, name });
  for (const name of extra) batch.delete('chain', { family, table, name });
  // Objects before the rules (and map elements) that use them.
  const addObjs = !have.table ? want.objects ?? []
    : (want.objects ?? []).filter((o) => drifts.some((x) => (x.kind === 'object-missing' || x.kind === 'object-changed')
      && x.object!.type === o.type && x.object!.name === o.name));
  for (const o of addObjs) {
    batch.add('obj', { family, table, name: o.name, type: o.type, data: o.obj.data, ...(o.obj.userdata !== undefined ? { userdata: o.obj.userdata } : {}) });
  }
  // Chains exist before any rule jumps to them.
  for (const c of chains) {
    if (!have.table || !have.chains.has(c.name) || recreate.has(c.name)) {
      batch.add('chain', { family, table, name: c.name, ...(c.base ?? {}), ...(c.userdata ? { userdata: c.userdata } : {}) });
      rewrite.add(c.name);
    }
  }
  // Sets after the chains their verdict elements jump to, before the rules that use them.
  const addSets = !have.table ? want.sets ?? []
    : (want.sets ?? []).filter((s) => drifts.some((x) => (x.kind === 'set-missing' || x.kind === 'set-changed') && x.set === s.name));
  for (const s of addSets) batch.add('set', { ...s.set, family, table, elements: s.elements });
  for (const x of drifts) {
    const ops = x.kind === 'elements-differ' ? diff.elements.get(x.set!) : undefined;
    if (ops && ops.add.length > 0) batch.add('element', { family, table, set: x.set!, elements: ops.add });
  }
  for (const c of chains) {
    const e = edited.get(c.name);
    if (e && !rewrite.has(c.name) && !recreate.has(c.name)) emitEdit(batch, family, table, c, e.rules, e.edit, 'add');
    if (!rewrite.has(c.name) && !recreate.has(c.name)) continue;
    for (const r of c.rules) {
      for (const s of r.compiled.sets) batch.add('set', { ...s, family, table });
      // One literal, not batch.add's spread: once optimized, V8 gave every spread copy a hidden
      // class of its own (a map, descriptors and a property array per op, live from the plan to
      // the read-back). userdata undefined is the same as absent to the encoder.
      batch.push({ verb: 'add', object: 'rule', family, table, chain: c.name, exprs: r.compiled.exprs, userdata: r.compiled.userdata });
    }
  }
}

// NFTA_RULE_ID must be unique among a batch's rules (kernels before 6.0 do not match the chain).
const nextRuleId = new WeakMap<Batch, number>();

const ruleIds = new WeakMap<ChainEdit, number>();

/**
 * Appends a chain's edit in two phases. 'remove' (before chains are deleted):
 * deletes by handle, and the rules a replace would drop that jump somewhere,
 * since the chain they jump to may go in this batch. 'add' (after chains are
 * added, since a new rule may jump to one): replaces by handle, and adds placed
 * after a kept rule's handle or after a rule added earlier by its batch id.
 */
function emitEdit(batch: Batch, family: Family, table: string, c: ChainConfig, rules: readonly Rule[], edit: ChainEdit,
  phase: 'remove' | 'add'): void {
  const chain = c.name;
  const jumps = (i: number) => rules[i]!.exprs.some((e) => e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto'));
  if (phase === 'remove') {
    for (const x of edit.steps) {
      if (x.op === 'delete' || (x.op === 'replace' && jumps(x.have))) batch.delete('rule', { family, table, chain, handle: rules[x.have]!.handle! });
    }
    return;
  }
  let base = ruleIds.get(edit);
  if (base === undefined) {
    base = nextRuleId.get(batch) ?? 1;
    nextRuleId.set(batch, base + c.rules.length);
    ruleIds.set(edit, base);
  }
  for (const x of edit.steps) {
    if (x.op === 'delete') continue;
    const r = c.rules[x.want]!.compiled;
    for (const s of r.sets) batch.add('set', { ...s, family, table });
    // Literals of one shape, not spread copies (see planTable's adds).
    const id = base + x.want;
    const userdata = r.userdata;
    if (x.op === 'replace' && !jumps(x.have)) {
      batch.push({ verb: 'replace', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, handle: rules[x.have]!.handle! });
    } else if (!x.after) {
      batch.push({ verb: 'insert', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id });  // at the head of the chain
    } else if (x.after.kind === 'kept') {
      batch.push({ verb: 'add', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, position: rules[x.after.have]!.handle! });
    } else batch.push({ verb: 'add', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, positionId: base + x.after.want });
  }
}

/** Drift as nft text, for `nfkeeper check`. */
export function renderDrift(want: TableConfig, diff: TableDiff): string[] {
  const out: string[] = [];
  for (const x of diff.drift) {
    out.push(`# ${x.family} ${x.table}: ${x.detail}`);
    if (x.kind === 'table-missing' || x.kind === 'table-unprotected' || x.kind === 'table-changed') {
      if (x.kind === 'table-changed') out.push(`- delete table ${want.family} ${want.name}`);
      const comment = commentOf(want.userdata);
      out.push(`+ add table ${want.family} ${want.name}${comment !== undefined ? ` { comment ${JSON.stringify(comment)}; }` : ''}`);
      for (const o of want.objects ?? []) out.push(objectText(want, o.obj));
      for (const s of want.sets ?? []) out.push(...setText(want, s));
      for (const c of want.chains) out.push(...chainText(want, c));
    } else if (x.kind === 'set-missing' || x.kind === 'set-changed') {
      const s = want.sets!.find((y) => y.name === x.set)!;
      if (x.kind === 'set-changed') out.push(`- delete ${s.map ? 'map' : 'set'} ${want.family} ${want.name} ${s.name}`);
      out.push(...setText(want, s));
    } else if (x.kind === 'elements-differ') {
      const s = want.sets!.find((y) => y.name === x.set)!;
      const ops = diff.elements.get(s.name);
      if (ops && ops.delete.length) out.push(`- delete element ${want.family} ${want.name} ${s.name} { ${elementsText(s.set, ops.delete)} }`);
      if (ops && ops.add.length) out.push(`+ add element ${want.family} ${want.name} ${s.name} { ${elementsText(s.set, ops.add)} }`);
    } else if (x.kind === 'set-extra') {
      out.push(`- delete ${x.detail.startsWith('map ') ? 'map' : 'set'} ${want.family} ${want.name} ${x.set}`);
    } else if (x.kind === 'chain-missing' || x.kind === 'chain-changed') {
      out.push(...chainText(want, want.chains.find((c) => c.name === x.chain)!));
    } else if (x.kind === 'rules-differ') {
      const c = want.chains.find((ch) => ch.name === x.chain)!;
      const e = diff.chains.get(c.name)?.edit;
      if (e && !e.edit.rewrite) {
        out.push(...editText(want, c, x.actual ?? [], e.rules, e.edit));
        continue;
      }
      out.push(`+ flush chain ${want.family} ${want.name} ${c.name}`);
      for (const line of x.actual ?? []) out.push(`- ${line}`);
      for (const r of c.rules) out.push(`+ add rule ${want.family} ${want.name} ${c.name} ${r.compiled.text}`);
    } else if (x.kind === 'chain-extra') {
      out.push(`- delete chain ${want.family} ${want.name} ${x.chain}`);
    } else if (x.kind === 'object-missing' || x.kind === 'object-changed') {
      const o = want.objects!.find((y) => y.type === x.object!.type && y.name === x.object!.name)!;
      if (x.kind === 'object-changed') out.push(`- delete ${o.type} ${want.family} ${want.name} ${o.name}`);
      out.push(objectText(want, o.obj));
    } else if (x.kind === 'object-extra') {
      out.push(`- delete ${typeof x.object!.type === 'string' ? x.object!.type : 'object'} ${want.family} ${want.name} ${x.object!.name}`);
    }
  }
  return out;
}

/** A chain's edit as nft commands; a rule placed after one added just before it says so. */
function editText(t: TableConfig, c: ChainConfig, actual: readonly string[], rules: readonly Rule[], edit: ChainEdit): string[] {
  const at = `${t.family} ${t.name} ${c.name}`;
  return edit.steps.map((x) => {
    if (x.op === 'delete') return `- delete rule ${at} handle ${rules[x.have]!.handle}  # ${actual[x.have] ?? ''}`;
    const text = c.rules[x.want]!.compiled.text;
    if (x.op === 'replace') return `~ replace rule ${at} handle ${rules[x.have]!.handle} ${text}  # was ${actual[x.have] ?? ''}`;
    if (!x.after) return `+ insert rule ${at} ${text}`;
    if (x.after.kind === 'kept') return `+ add rule ${at} position ${rules[x.after.have]!.handle} ${text}`;
    return `+ add rule ${at} ${text}  # after rule ${x.after.want + 1} of the chain, added above`;
  });
}

/** An object as an `add` command: `add quota ip t q { over 100 mbytes }`. */
function objectText(t: TableConfig, o: NftObj): string {
  const block = objectBlock(o, t.family) ?? `${String(o.type)} ${o.name}`;
  const sp = block.indexOf(` ${o.name} `);
  return `+ add ${block.slice(0, sp)} ${t.family} ${t.name}${block.slice(sp)}`;
}

/** A set's declaration and elements as `add set|map` and `add element` commands. */
function setText(t: TableConfig, s: SetConfig): string[] {
  const what = s.map ? 'map' : 'set';
  const out = [`+ add ${what} ${t.family} ${t.name} ${s.name} ${declarationText({ ...s.decl, elements: undefined })}`];
  if (s.elements.length > 0) out.push(`+ add element ${t.family} ${t.name} ${s.name} { ${elementsText(s.set, s.elements)} }`);
  return out;
}

/** Elements as nft texts; an rbtree piece that is no whole interval is shown as its raw keys. */
function elementsText(set: NftSet, elements: readonly SetElement[]): string {
  const types = typesOf(set);
  const texts = types ? elementTexts(types.key, types.data, (set.flags & SET_F.INTERVAL) !== 0, elements, false, set.family) : undefined;
  if (texts) return texts.join(', ');
  return elements.map((e) => `# key ${e.key}${e.keyEnd ? ` key-end ${e.keyEnd}` : ''}${(e.flags ?? 0) & 1 ? ' (interval end)' : ''}`).join(', ');
}

function chainText(t: TableConfig, c: ChainConfig): string[] {
  const comment = commentOf(c.userdata);
  const spec = c.base || comment !== undefined
    ? ` {${c.base ? ` type ${c.base.type} hook ${c.base.hook} priority ${c.base.priority}; policy ${c.base.policy};` : ''}` +
      `${comment !== undefined ? ` comment ${JSON.stringify(comment)};` : ''} }` : '';
  return [`+ add chain ${t.family} ${t.name} ${c.name}${spec}`,
    ...c.rules.map((r) => `+ add rule ${t.family} ${t.name} ${c.name} ${r.compiled.text}`)];
}

/** A table's or chain's comment (its userdata, NFTNL_UDATA_*_COMMENT) for drift details. */
function quoteComment(userdata: Hex | undefined): string {
  if (!userdata) return 'none';
  const c = commentOf(userdata);
  return c === undefined ? `userdata ${userdata}` : JSON.stringify(c);
}

/**
 * Keeps `armed` (DiffOptions.armed) for `tables` after a look: the desired timed elements found in
 * the kernel are armed, and those no longer desired are forgotten (desired again later, they are
 * installed again).
 */
export function armTimed(armed: ArmedTimed, tables: readonly TableConfig[], observed: readonly ObservedTable[]): void {
  const keep = new Set<string>();
  for (const [i, t] of tables.entries()) {
    for (const s of t.sets ?? []) {
      if (!(s.set.flags & SET_F.TIMEOUT)) continue;
      const k = `${t.family} ${t.name} ${s.name}`;
      const timed = s.elements.filter((e) => e.timeout !== undefined || e.expiration !== undefined);
      if (timed.length === 0) continue;
      keep.add(k);
      const old = armed.get(k);
      const present = new Set((observed[i]?.sets.get(s.name)?.elements ?? []).map(elementId));
      const now = new Set<string>();
      for (const e of timed) {
        const id = elementId(e);
        if (old?.has(id) || present.has(id)) now.add(id);
      }
      armed.set(k, now);
    }
  }
  for (const k of armed.keys()) if (!keep.has(k)) armed.delete(k);
}

/** After a commit of `batch`: the timed elements it added (with their set, or to it) are armed. */
export function armCommitted(armed: ArmedTimed, batch: Batch): void {
  for (const op of batch.ops) {
    if (op.verb !== 'add' && op.verb !== 'create') continue;
    let k: string;
    let els: readonly SetElement[] | undefined;
    if (op.object === 'element') [k, els] = [`${op.family} ${op.table} ${op.set}`, op.elements];
    else if (op.object === 'set') [k, els] = [`${op.family} ${op.table} ${op.name}`, op.elements];
    else continue;
    if (!els) continue;
    for (const e of els) {
      if (e.timeout === undefined && e.expiration === undefined) continue;
      let a = armed.get(k);
      if (!a) armed.set(k, a = new Set());
      a.add(elementId(e));
    }
  }
}
