/**
 * The one planner: per table, what is desired and what the kernel holds (a HeldTable) with their
 * difference (a TableDiff, table.ts) become the ops of one batch, in an order the kernel accepts
 * within one transaction (planTable). Every repair path plans so: the full pass from an
 * observation, read or the view's own rules (diffTable), the event repairs from the difference the
 * view followed (planFollowed; held-diff.ts); they differ only in how they prove the view is the
 * kernel's state. What the event repairs add is which events our own commit must show (Expected).
 * Chains are edited in place (chain-edit.ts: the fewest ops, or a flush and rewrite when that is
 * fewer).
 */
import type { Family } from '../netlink/expr.js';
import type { Batch } from '../netlink/batch.js';
import type { Expr } from '../netlink/expr.js';
import type { Rule } from '../netlink/objects.js';
import { TABLE_F } from '../netlink/objects.js';
import { EncodedRuleOp } from '../netlink/ops.js';
import { encodedRuleAt, ruleAt, ruleCount, type ChainConfig, type TableConfig } from '../model/desired.js';
import { objTypeName } from '../rules/objnames.js';
import { queueBound, type CompiledRule } from '../rules/compile.js';
import { deletable } from '../model/elements.js';
import type { RuleEdit } from './chain-edit.js';
import type { Drift } from '../model/drift.js';
import { objectKey, type TableDiff } from './table.js';
import { UNKNOWN_EXPRS, diffHeld } from './held-diff.js';
import type { Expected, FollowedTable } from './owned-table.js';

/**
 * What the planner reads of what the kernel holds in one table: the table (absent when it is
 * missing), its chains by name, and their rules, which it looks into only where a chain, set or
 * object is created again (for the rules that use it). A full pass gives the ObservedTable it
 * read; the followed part its own chains and no rules (it follows no such change).
 */
export interface HeldTable {
  table?: object;
  chains: ReadonlyMap<string, unknown>;
  rules: ReadonlyMap<string, readonly Rule[]>;
}

export interface PlanOptions {
  /** Table flags to create it with (protect mode). */
  tableFlags?: number;
  /**
   * Told of each rule op the plan writes into a chain (delete, replace, insert, add): its index in
   * the batch and the desired rule it puts there (none for a delete). From it the followed part knows
   * which events its own commit must show.
   */
  onRuleOp?: (chain: string, op: number, want: number | undefined) => void;
}

/** Repairs with more ops than this are left to the full pass (which weighs a rewrite, and runs big batches off-thread). */
export const FOLLOW_MAX_OPS = 64;
/** Repairs of more elements than this are left to the full pass (with FOLLOW_MAX_OPS rules, our own commit stays within the 256 events a monitor batch keeps, so the events can follow it). */
export const FOLLOW_MAX_ELEMENTS = 192;

export interface FollowPlan {
  batch: Batch;
  drift: Drift[];
  expected: Expected[];
}

/** The rules the planner reads where a chain, set or object is created again: the events follow no such change. */
export const NO_RULES: ReadonlyMap<string, readonly Rule[]> = new Map();

/**
 * The repair of every difference the followed `tables` hold, or 'clean', or undefined when it is
 * not a small edit (the full pass plans it).
 */
export function planFollowed(batch: Batch, tables: readonly FollowedTable[]): FollowPlan | 'clean' | undefined {
  let ops = 0;
  let elements = 0;
  for (const t of tables) {
    for (const c of t.chains.values()) {
      ops += c.extras.size + c.missing.size;
      if (ops > FOLLOW_MAX_OPS) return undefined;
    }
    for (const ms of t.sets.values()) {
      elements += ms ? ms.differs.size : 0;
      if (elements > FOLLOW_MAX_ELEMENTS) return undefined;
    }
  }
  if (ops === 0 && elements === 0) return 'clean';
  const drift: Drift[] = [];
  const expected: Expected[] = [];
  for (const held of tables) {
    const diff = diffHeld(held);
    if (diff.drift.length === 0) continue;
    drift.push(...diff.drift);
    planTable(batch, held.desired, held, diff, {
      onRuleOp: (chain, op, want) => {
        const c = held.chains.get(chain)!;
        const o = batch.ops[op]!;
        if (o.verb === 'delete' || o.verb === 'replace') expected.push({ del: (o as { handle: number }).handle, chain: c });
        if (want !== undefined) expected.push({ add: want, chain: c, op });
      },
    });
    for (const x of diff.drift) {
      const ed = x.kind === 'elements-differ' ? diff.elements.get(x.set!) : undefined;
      const ms = ed && held.sets.get(x.set!)!;
      for (let i = 0; ms && i < ed.add.length + ed.delete.length; i++) expected.push({ element: ms });
    }
  }
  return { batch, drift, expected };
}

/**
 * Appends to `batch` the operations that turn `have` into `want`, in an order
 * the kernel accepts within one transaction: table, missing chains, flushes,
 * deletions of chains that must go, then every rewritten chain's rules.
 */
export function planTable(batch: Batch, want: TableConfig, have: HeldTable, diff: TableDiff,
  options: PlanOptions = {}): void {
  const drifts = diff.drift;
  if (drifts.length === 0) return;
  const { family, name: table } = want;
  const rewrite = new Set<string>();
  const tableFlags = (options.tableFlags ?? 0) | (want.dormant ? TABLE_F.DORMANT : 0);
  // One walk of the drift sorts it by what it asks of the batch (an event repair's is one or two).
  let tableAgain = false;
  let tableFlagsOnly = false;
  let objectsToAdd = false;
  let setsToAdd = false;
  const recreate = new Set<string>();
  const extra: string[] = [];
  const setsAgain = new Set<string>();
  const objsAgain = new Set<string>();
  for (const x of drifts) {
    switch (x.kind) {
      case 'table-unprotected': case 'table-changed': tableAgain = true; break;
      case 'table-orphaned': case 'table-flags': tableFlagsOnly = true; break;
      case 'chain-changed': recreate.add(x.chain!); break;
      case 'chain-extra': extra.push(x.chain!); break;
      case 'set-changed': setsAgain.add(x.set!); setsToAdd = true; break;
      case 'set-missing': setsToAdd = true; break;
      case 'object-changed': objsAgain.add(objectKey(x.object!.type, x.object!.name)); objectsToAdd = true; break;
      case 'object-missing': objectsToAdd = true; break;
      default: break;
    }
  }
  if (tableAgain) {
    batch.delete('table', { family, name: table });
    have = { table: undefined, chains: new Map(), rules: new Map() };
  }
  if (!have.table) {
    // Observed absent: `create` (NLM_F_EXCL), refused if the table appeared since; a batch confined
    // to tables it so creates needs no generation check (commitGuarded), so a neighbour's commits to
    // its own tables cannot keep refusing it. Deleted and added again: `add`, guarded as before.
    const t = { family, name: table, ...(tableFlags ? { flags: tableFlags } : {}), ...(want.userdata ? { userdata: want.userdata } : {}) };
    if (tableAgain) batch.add('table', t);
    else batch.create('table', t);
    for (const c of want.chains) rewrite.add(c.name);
  } else if (tableFlagsOnly) {
    // Claiming an orphan: NEWTABLE with owner|persist on the existing table; its rules stay as they
    // are. Dormant toggled: NEWTABLE with every flag the table keeps (0 wakes an unowned one).
    batch.add('table', { family, name: table, flags: tableFlags });
  }
  // Sets created again: the kernel deletes no set a rule uses, so the chains whose rules use one are rewritten.
  if (setsAgain.size > 0 && have.table) {
    for (const c of want.chains) {
      if ((have.rules.get(c.name) ?? []).some((r) => usesSet(r.exprs, setsAgain))) rewrite.add(c.name);
    }
  }
  // Objects created again: likewise, the chains whose rules use one are rewritten first.
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
  const edited = new Map<string, { edit: RuleEdit; rules: readonly Rule[] }>();
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
      if (rules.some((r) => r.exprs === UNKNOWN_EXPRS
        || r.exprs.some((e) => e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') && e.chain !== undefined && recreate.has(e.chain)))) {
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
    if (e) emitRemovals(batch, family, table, c.name, e.rules, e.edit, options.onRuleOp);
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
  const addObjs = !have.table ? want.objects ?? [] : !objectsToAdd ? []
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
  const addSets = !have.table ? want.sets ?? [] : !setsToAdd ? []
    : (want.sets ?? []).filter((s) => drifts.some((x) => (x.kind === 'set-missing' || x.kind === 'set-changed') && x.set === s.name));
  for (const s of addSets) batch.add('set', { ...s.set, family, table, elements: s.elements });
  for (const x of drifts) {
    const ops = x.kind === 'elements-differ' ? diff.elements.get(x.set!) : undefined;
    if (ops && ops.add.length > 0) batch.add('element', { family, table, set: x.set!, elements: ops.add });
  }
  // The edited chains' placed rules first (each run's first rule, the replaces in place), then per
  // chain the rest: a rule placed by a batch id costs the kernel a walk of the batch up to that id.
  const rest = new Map<string, () => void>();
  for (const c of chains) {
    const e = edited.get(c.name);
    if (e && !rewrite.has(c.name) && !recreate.has(c.name)) rest.set(c.name, placeEdit(batch, family, table, c, e.rules, e.edit, options.onRuleOp));
  }
  for (const c of chains) {
    rest.get(c.name)?.();
    if (!rewrite.has(c.name) && !recreate.has(c.name)) continue;
    const n = ruleCount(c);
    const exprsAt = madeExprsOf(c);
    for (let j = 0; j < n; j++) appendRule(batch, family, table, c, j, exprsAt, options.onRuleOp);
  }
}

/** The expressions of chain `c`'s rule at a place, made if need be (EncodedRuleOp's, one per chain, not per rule). */
function madeExprsOf(c: ChainConfig): (at: number) => Expr[] {
  return (at) => ruleAt(c, at)!.compiled.exprs;
}

/** Appends desired rule `j` of chain `c` at the chain's end (with the anonymous sets it brings). */
function appendRule(batch: Batch, family: Family, table: string, c: ChainConfig, j: number, exprsAt: (at: number) => Expr[],
  onRuleOp?: PlanOptions['onRuleOp']): void {
  // A chain whose rules are made late (the compile cache's) is added from its rules' stored
  // encoding where it has one: its rules are made later, by whoever reads them.
  const x = encodedRuleAt(c, j);
  if (x !== undefined) {
    if (x.sets !== undefined) for (const s of x.sets) batch.add('set', { ...s, family, table });
    batch.push(new EncodedRuleOp(family, table, c.name, x.exprs, x.userdata, exprsAt, j));
  } else {
    const r = ruleAt(c, j)!;
    withSets(batch, family, table, r.compiled);
    // One literal, not batch.add's spread: once optimized, V8 gave every spread copy a hidden
    // class of its own (a map, descriptors and a property array per op, live from the plan to
    // the read-back). userdata undefined is the same as absent to the encoder.
    batch.push({ verb: 'add', object: 'rule', family, table, chain: c.name, exprs: r.compiled.exprs, userdata: r.compiled.userdata });
  }
  onRuleOp?.(c.name, batch.length - 1, j);
}

/**
 * A chain's edit, first phase (before chains are deleted): deletes by handle, and the rules a
 * replace would drop that jump somewhere, since the chain they jump to may go in this batch.
 */
function emitRemovals(batch: Batch, family: Family, table: string, chain: string, rules: readonly Rule[], edit: RuleEdit,
  onRuleOp?: PlanOptions['onRuleOp']): void {
  for (const x of edit.steps) {
    if (x.op !== 'delete' && !(x.op === 'replace' && jumps(rules[x.have]!))) continue;
    batch.delete('rule', { family, table, chain, handle: rules[x.have]!.handle! });
    onRuleOp?.(chain, batch.length - 1, undefined);
  }
}

/**
 * A chain's edit, second phase (after chains are added, since a new rule may jump to one). Its new
 * rules come in runs, each placed after the rule before it. Appended now: the replaces in place (by
 * handle) and each run's first rule, where the rule before it is (after a kept rule's handle or a
 * replaced rule's batch id; at the chain's head). Returned, to be appended after every chain's
 * first rules: the rest of each run, each after the run's first rule by its batch id, last to
 * second (each lands right after it), and the run at the chain's end appended in order.
 *
 * The kernel finds a batch id by walking the batch's transactions from the first
 * (nft_rule_lookup_byid) and a handle by walking the chain from its head (__nft_rule_lookup): each
 * rule placed after the one before it by id costs a walk to it, O(K²) for a run of K (a block
 * deleted from a long chain); after the run's first, early in the batch, each costs a few steps.
 */
function placeEdit(batch: Batch, family: Family, table: string, c: ChainConfig, rules: readonly Rule[], edit: RuleEdit,
  onRuleOp?: PlanOptions['onRuleOp']): () => void {
  const chain = c.name;
  // Once per edit and batch: the chain's rules take ids base + their index.
  const base = batch.nextRuleId;
  const count = ruleCount(c);
  batch.nextRuleId += count;
  // The new rules after the last rule that stays (kept, or replaced in place) are appended in order:
  // appending is the same place as after the one before, and finds nothing.
  let tail = count;
  for (let k = edit.steps.length - 1; k >= 0; k--) {
    const x = edit.steps[k]!;
    if (x.op === 'delete') continue;
    if (x.want !== tail - 1 || (x.op === 'replace' && !jumps(rules[x.have]!))) break;
    tail--;
  }
  // Each run's rules after its first, as desired rule indices: [first, second, …] per run.
  const runs: number[][] = [];
  let run: number[] | undefined;
  for (const x of edit.steps) {
    if (x.op === 'delete' || x.want >= tail) continue;
    const inPlace = x.op === 'replace' && !jumps(rules[x.have]!);
    if (!inPlace && run && x.after?.kind === 'new' && x.after.want === run[run.length - 1]) {
      run.push(x.want);
      continue;
    }
    run = undefined;
    const r = ruleAt(c, x.want)!.compiled;
    const userdata = r.userdata;
    const id = base + x.want;
    withSets(batch, family, table, r);
    // Literals of one shape, not spread copies (see planTable's adds).
    if (inPlace) {
      batch.push({ verb: 'replace', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, handle: rules[x.have]!.handle! });
    } else {
      if (!x.after) {
        batch.push({ verb: 'insert', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id });  // at the head of the chain
      } else if (x.after.kind === 'kept') {
        batch.push({ verb: 'add', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, position: rules[x.after.have]!.handle! });
      } else batch.push({ verb: 'add', object: 'rule', family, table, chain, exprs: r.exprs, userdata, id, positionId: base + x.after.want });
      runs.push(run = [x.want]);
    }
    onRuleOp?.(chain, batch.length - 1, x.want);
  }
  return () => {
    for (const r of runs) {
      const positionId = base + r[0]!;
      for (let k = r.length - 1; k >= 1; k--) {
        // The rules it puts back only: a chain whose rules are made late is not made for them.
        const x = ruleAt(c, r[k]!)!.compiled;
        withSets(batch, family, table, x);
        batch.push({ verb: 'add', object: 'rule', family, table, chain, exprs: x.exprs, userdata: x.userdata, id: base + r[k]!, positionId });
        onRuleOp?.(chain, batch.length - 1, r[k]!);
      }
    }
    if (tail === count) return;
    const exprsAt = madeExprsOf(c);
    for (let j = tail; j < count; j++) appendRule(batch, family, table, c, j, exprsAt, onRuleOp);
  };
}

/** The anonymous sets and the bound chain a rule comes with, before it. */
function withSets(batch: Batch, family: Family, table: string, r: CompiledRule): void {
  for (const s of r.sets) batch.add('set', { ...s, family, table });
  if (r.bound) queueBound(batch, r, { family, table });
}

/** Whether a rule jumps or goes to a chain. */
function jumps(rule: Rule): boolean {
  for (const e of rule.exprs) if (e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto')) return true;
  return false;
}

/** Whether a rule uses the named set (a lookup, a map, a dynset: any expression naming it). */
function usesSet(exprs: readonly Expr[], names: ReadonlySet<string>): boolean {
  if (exprs === UNKNOWN_EXPRS) return true;
  for (const e of exprs) {
    const set = (e as { set?: unknown }).set;
    if (typeof set === 'string' && names.has(set)) return true;
  }
  return false;
}

/** Whether a rule uses one of the objects (by objectKey): an objref by name, or an object map. */
function usesObject(exprs: readonly Expr[], keys: ReadonlySet<string>): boolean {
  if (exprs === UNKNOWN_EXPRS) return true;
  for (const e of exprs) {
    if (e.kind !== 'objref' || e.name === undefined || e.type === undefined) continue;
    const type = objTypeName(e.type);
    if (type && keys.has(objectKey(type, e.name))) return true;
  }
  return false;
}
