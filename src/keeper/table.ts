/**
 * What differs between a table as desired and as the kernel holds it, with what repairs each
 * difference as a value (TableDiff: each differing chain with its edit, each set's element ops) for
 * the planner (plan.ts), found by comparing an observation (diffTable: read, or the view's own
 * rules; a chain whose difference the view followed from the events is taken as found,
 * held-diff.ts), and the protection of an owned table. Rule keys: rule-key.ts; reading the table:
 * observe.ts.
 */
import type { Expr, Family, Hex } from '../netlink/expr.js';
import type { Chain, NftObj, NftSet, ObservedTable, Rule, SetElement, Table } from '../netlink/objects.js';
import { SET_F, TABLE_F } from '../netlink/objects.js';
import { objectBlock, objectDefinitionKey } from '../model/stateful-objects.js';
import { NfkeeperError } from '../base/errors.js';
import type { ChainConfig, TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import { commentOf, renderRule, type SetResolver } from '../rules/index.js';
import { planChain, planSplices, type ChainEdit, type RuleEdit } from './chain-edit.js';
import type { Derivation } from '../model/derivation.js';
import type { Drift, DriftKind } from '../model/drift.js';
import { diffElements, sameElementFields, setDefinitionKey, type ElementDiff } from '../model/elements.js';
import { desiredKey, kernelKeys, sameRules } from './rule-key.js';
import type { TimedSeen } from './timed-elements.js';
/** A chain a chain-missing or rules-differ drift names, as diffTable found it. */
export interface ChainDiff {
  /** The desired chain. */
  chain: ChainConfig;
  /** For rules-differ: the edit planned over the kernel rules it indexes. */
  edit?: { edit: RuleEdit; rules: readonly Rule[] };
}

/** One chain's difference as the view holds it (held-diff.ts, chainDiffOf): planned as diffTable's own. */
export interface HeldChainDiff {
  diff: ChainDiff;
  drift: Drift;
}

/** What diffTable found in one table: the drift, and what planTable needs to repair it. */
export interface TableDiff {
  drift: Drift[];
  /** By chain name: each chain a chain-missing or rules-differ drift names. */
  chains: Map<string, ChainDiff>;
  /** By set name: the element operations of each elements-differ drift. */
  elements: Map<string, ElementDiff>;
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
  timedSeen?: TimedSeen;
  /**
   * The desired table was made from `since.from` (src/model/derivation.ts), and the kernel is known to hold
   * exactly that table (every chain verified, no other chain: the caller checks): only the chains
   * the derivation changed are compared, and a dispatch chain only in its changed runs of rules.
   */
  since?: Derivation;
  /**
   * Chains whose difference the view holds (the events followed it: TableRules.held), for the
   * desired chain it was found against: taken as found, the kernel's rules not compared again.
   */
  held?: ReadonlyMap<string, HeldChainDiff>;
}

/** See DiffOptions.timedSeen: element ids by `family table set`. */
const NONE_SEEN: ReadonlySet<string> = new Set();

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
  drifts.push(...diffSets(want, have, out.elements, options.timedSeen, options.verifiedSets));
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
    const held = options.held?.get(c.name);
    if (held?.diff.chain === c) {
      out.chains.set(c.name, held.diff);
      drifts.push(held.drift);
      continue;
    }
    const rules = have.rules.get(c.name) ?? [];
    const keys = kernelKeys(rules, resolve);
    // Every kernel rule the desired rule at its place: those known to be (adopted by digest, or
    // decoded and proved by their digests) without a key, only the others by key. Comparing keys
    // would hash every desired rule's canonical form and keep the key on it for the daemon's life:
    // seconds and megabytes of a big restart.
    if (sameRules(rules, c.rules, keys)) continue;
    const setsOf = (j: number) => c.rules[j]!.compiled.sets.length;
    const splices = since?.edited.get(c.name);
    let detail: string | undefined;
    let edit: ChainEdit | undefined;
    if (splices && options.verified?.get(c.name) === splices.from && rules.length === splices.from.rules.length) {
      // The kernel holds splices.from's rules: only the runs that changed are compared and planned.
      edit = planSplices(keys, rules.length, (j) => desiredKey(c.rules[j]!), c.rules.length, splices.splices, setsOf);
      if (edit) detail = describeSplices(c, rules, edit, resolve);
    }
    if (!edit) {
      const wantKeys = c.rules.map(desiredKey);
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
 * Stateful objects, when the observation read them: one missing is created, one whose configuration
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
/**
 * Sets and maps: missing ones are created with their elements; one whose
 * definition differs is created again (rules that use it are rewritten in
 * the same batch, since the kernel keeps a set that a rule uses); one whose
 * elements differ gets element adds and deletes only. A constant set cannot
 * take element changes, so it is created again.
 */
function diffSets(want: TableConfig, have: ObservedTable, elements: Map<string, ElementDiff>, timedSeen?: TimedSeen,
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
      timedSeen ? timedSeen.get(`${want.family} ${want.name} ${s.name}`) ?? NONE_SEEN : undefined);
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

/** compareRules' first difference for a splice plan (planSplices): at the first rule the edit takes out or puts in. */
function describeSplices(c: ChainConfig, rules: Rule[], edit: ChainEdit, resolve: SetResolver): string | undefined {
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

/** A table's or chain's comment (its userdata, NFTNL_UDATA_*_COMMENT) for drift details. */
function quoteComment(userdata: Hex | undefined): string {
  if (!userdata) return 'none';
  const c = commentOf(userdata);
  return c === undefined ? `userdata ${userdata}` : JSON.stringify(c);
}
