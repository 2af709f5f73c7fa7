/**
 * A mirror of what the kernel holds in the owned chains, kept from the
 * monitor's events, so that a foreign change costs what it changed instead
 * of a dump of every owned rule.
 *
 * The mirror is seeded from a look that found the owned tables exactly as
 * desired: per desired chain, the kernel handle of each desired rule, in
 * order. From then on every commit that touched an owned table arrives as one
 * monitor batch (its events up to NEWGEN), our own commits included, and is
 * applied in generation order:
 *
 * - a foreign DELRULE of a desired rule's handle marks that rule missing;
 * - a foreign NEWRULE is an extra rule (the desired list has no room for it);
 *   one that takes a handle just deleted in the same commit is a replace, and
 *   sits in that rule's place;
 * - our own commit's acknowledgements echo the handles of the rules it added
 *   (learnCommit(); the commit's events then wake nobody, Monitor.skipOwn), or,
 *   where they do not, its events give them, in the order of its ops (planned
 *   here, see expect()).
 *
 * The repair of a mirror that differs is then exactly the difference: delete
 * each extra rule by handle, re-add each missing rule after the rule before
 * it (NFTA_RULE_POSITION, or NFTA_RULE_POSITION_ID when that one is re-added
 * in the same batch), or replace an extra that sits in a missing rule's place.
 *
 * Named sets and maps whose elements only commits change (not interval,
 * timeout, dynamic or constant ones: the kernel expires and the data path adds
 * elements without a commit, and interval elements come in pieces) are
 * followed too, per element: the mirror keeps the desired elements by identity
 * (elementId, the config's own objects) and where the kernel differs from
 * them (an element missing, or the kernel's element where it is foreign or
 * holds other data), learnt from the elements the events carry, our own
 * commits' included. Their repair is exactly the element ops of that
 * difference (a changed element is a delete and an add), and a desired change
 * that changes only elements (retarget) is planned the same way, neither
 * reading the set.
 *
 * The mirror is only trusted with a proof that it is the kernel's state: the
 * monitor saw every commit since the mirror was exact (its run of whole
 * commits, see MonitorBatch.since and Monitor.progress), each one that touched
 * an owned table was applied, and nothing happened that the mirror cannot
 * follow. Anything else invalidates it and the keeper falls back to a full
 * observe: an overflow (ENOBUFS), a gap in the generations, a truncated batch,
 * a table, chain or set event in an owned table, an element event of a set it
 * does not follow, an element it does not know, a handle it does not know, a
 * commit of our own socket it did not plan. The repair commit is
 * guarded by the generation the proof was made at, so a race with another
 * writer is refused by the kernel and also ends in a full observe.
 */
import type { TableConfig } from '../config/config.js';
import type { SetConfig } from '../config/sets.js';
import { deletable, elementId, sameContent, sameElementFields, setDefinitionKey } from '../model/elements.js';
import { Batch } from '../netlink/batch.js';
import type { MonitorBatch, MonitorEvent, MonitorProgress } from '../netlink/events.js';
import type { Expr } from '../netlink/expr.js';
import { SET_F, type ObservedTable, type SetElement } from '../netlink/objects.js';
import { desiredKey } from './table.js';
import type { Drift } from '../model/drift.js';

/** Repairs with more ops than this are left to the full pass (which weighs a rewrite, and runs big batches off-thread). */
export const MIRROR_MAX_OPS = 64;
/** Repairs of more elements than this are left to the full pass (with MIRROR_MAX_OPS rules, our own commit stays within the 256 events a monitor batch keeps, so the mirror can follow it). */
export const MIRROR_MAX_ELEMENTS = 192;

/**
 * Sets whose elements change without a commit, or come in pieces, and object maps (whose element
 * events the monitor does not decode the object of): their element events turn the mirror off.
 */
const UNFOLLOWED_SET_FLAGS = SET_F.INTERVAL | SET_F.TIMEOUT | SET_F.EVAL | SET_F.CONSTANT | SET_F.OBJECT;

/** One owned named set or map whose elements the mirror follows. */
interface MirrorSet {
  family: TableConfig['family'];
  table: string;
  name: string;
  config: SetConfig;
  /** The desired elements by identity: the config's own objects, not copies. */
  want: Map<string, SetElement>;
  /** Where the kernel differs from `want`: its element (foreign, or other data), or null where it lacks a wanted one. */
  differs: Map<string, SetElement | null>;
}

/** One desired chain as the kernel holds it. */
interface MirrorChain {
  family: TableConfig['family'];
  table: string;
  name: string;
  /** The chain's key in Mirror.desired, made once. */
  key: string;
  /** handles[j]: the kernel handle of desired rule j, 0 while it is missing. */
  handles: Float64Array;
  /** Desired index by kernel handle, for the rules present. */
  byHandle: Map<number, number>;
  /** Desired rules missing from the kernel. */
  missing: Set<number>;
  /** Foreign rules in the chain: handle → the desired rule whose place it took (a replace), or -1. */
  extras: Map<number, number>;
  /** Frozen copies of the expressions of the desired rules re-added so far (frozenExprs). */
  frozen?: Map<number, Expr[]>;
}

/**
 * What an own commit's events must show, in order: DELRULE of a handle, or NEWRULE of desired rule j;
 * and (in any order) one element event per planned element op.
 */
type Expected = { del: number; chain: MirrorChain } | { add: number; chain: MirrorChain; op: number } | { element: MirrorSet };

export interface MirrorPlan {
  batch: Batch;
  drift: Drift[];
  expected: Expected[];
}

export type MirrorOutcome =
  /** Not in force (never seeded, or invalidated): the caller falls back. */
  | 'invalid'
  /** Already part of the seed, or touched nothing the mirror holds. */
  | 'ignored'
  /** Our own commit, as planned. */
  | 'own'
  /** A foreign commit, followed. */
  | 'changed';

const key = (family: string, table: string) => `${family} ${table}`;
/** plan()'s map of extras in a missing rule's place when the chain has no extras: never written. */
const NO_PLACES = new Map<number, number>();
/** A chain's missing desired rules in order (one, the common case, without a spread and a sort). */
const missingInOrder = (c: MirrorChain): number[] =>
  c.missing.size === 0 ? [] : c.missing.size === 1 ? [c.missing.values().next().value!] : [...c.missing].sort(byNumber);
const byNumber = (x: number, y: number) => x - y;

export class Mirror {
  /** The kernel generation the mirror is exact at (with the proof, see exactAt). */
  generation = 0;
  /** Batches the monitor delivered that reached apply(), to match Monitor.progress().delivered. */
  applied = 0;
  /** Overflow reports among them (Monitor.anchor wants it). */
  overflows = 0;
  /** Why the mirror is not in force, or undefined while it is. */
  invalidReason: string | undefined = 'not seeded';
  private tables = new Map<string, Map<string, MirrorChain>>();
  /** Per owned table, its named sets: followed ones, and null for those whose element events turn the mirror off. */
  private sets = new Map<string, Map<string, MirrorSet | null>>();
  /** The desired chains the seed was made from: the rules plan() re-adds. */
  private desired = new Map<string, TableConfig['chains'][number]>();
  private expected = new Map<number, Expected[]>();

  get valid(): boolean {
    return this.invalidReason === undefined;
  }

  invalidate(reason: string): void {
    if (this.invalidReason === undefined) this.invalidReason = reason;
    this.tables.clear();
    this.sets.clear();
    this.expected.clear();
  }

  /**
   * Seeds from a look that found every desired table as desired, at `generation` (read before
   * the look, and again after it, unchanged). Returns false when the look does not fit.
   */
  seed(desired: readonly TableConfig[], observed: readonly ObservedTable[], generation: number): boolean {
    const tables = new Map<string, Map<string, MirrorChain>>();
    const sets = new Map<string, Map<string, MirrorSet | null>>();
    for (const [i, t] of desired.entries()) {
      const have = observed[i];
      if (!have?.table || have.family !== t.family || have.name !== t.name) return false;
      if (have.chains.size !== t.chains.length) return false;
      const chains = new Map<string, MirrorChain>();
      for (const c of t.chains) {
        const rules = have.rules.get(c.name);
        if (!have.chains.has(c.name) || !rules || rules.length !== c.rules.length) return false;
        const handles = new Float64Array(rules.length);
        const byHandle = new Map<number, number>();
        for (let j = 0; j < rules.length; j++) {
          const h = rules[j]!.handle;
          if (!h) return false;
          handles[j] = h;
          byHandle.set(h, j);
        }
        chains.set(c.name, { family: t.family, table: t.name, name: c.name, key: `${key(t.family, t.name)} ${c.name}`, handles, byHandle, missing: new Set(), extras: new Map() });
      }
      tables.set(key(t.family, t.name), chains);
      const named = new Map<string, MirrorSet | null>();
      for (const sc of t.sets ?? []) {
        const h = have.sets.get(sc.name);
        if (!h) return false;
        // The look was clean, so a followed set holds exactly its desired elements (none can have
        // expired: such a set takes no timeouts, and nothing but commits adds to it).
        const want = Mirror.follows(sc) ? wantOf(sc) : undefined;
        named.set(sc.name, want && want.size === h.elements.length
          ? { family: t.family, table: t.name, name: sc.name, config: sc, want, differs: new Map() } : null);
      }
      sets.set(key(t.family, t.name), named);
    }
    this.tables = tables;
    this.sets = sets;
    this.desiredTables = new Map(desired.map((t) => [key(t.family, t.name), t]));
    this.unfollowed.clear();
    for (const t of desired) for (const sc of t.sets ?? []) if (sets.get(key(t.family, t.name))?.get(sc.name) === null) this.unfollowed.set(`${key(t.family, t.name)} ${sc.name}`, sc);
    this.desired = new Map();
    for (const t of desired) for (const c of t.chains) this.desired.set(`${key(t.family, t.name)} ${c.name}`, c);
    this.expected.clear();
    this.generation = generation;
    this.invalidReason = undefined;
    return true;
  }

  /**
   * A new desired state that differs from the one the mirror was seeded for (or last retargeted to)
   * in set and map elements only: the mirror keeps what the kernel holds and now differs from the
   * new elements, so plan() commits just the element ops. O(elements) in memory, no read. False
   * (nothing changed here) when anything else differs: tables, chains, rules, set definitions, or
   * the elements of a set it does not follow; the caller invalidates then.
   */
  retarget(desired: readonly TableConfig[]): boolean {
    if (!this.valid || desired.length !== this.tables.size) return false;
    const chains: [string, TableConfig['chains'][number]][] = [];
    const sets: [MirrorSet, SetConfig, Map<string, SetElement>][] = [];
    const edits: [MirrorSet, SetConfig, number[]][] = [];
    for (const t of desired) {
      const k = key(t.family, t.name);
      const have = this.tables.get(k);
      const named = this.sets.get(k);
      const was = this.desiredTables.get(k);
      if (!have || !named || !was || have.size !== t.chains.length || named.size !== (t.sets?.length ?? 0)) return false;
      if (was.protect !== t.protect || (was.userdata ?? '') !== (t.userdata ?? '')) return false;
      for (const c of t.chains) {
        const ck = `${k} ${c.name}`;
        const old = this.desired.get(ck);
        if (!old || !have.has(c.name) || !sameChain(old, c)) return false;
        if (old !== c) chains.push([ck, c]);
      }
      for (const sc of t.sets ?? []) {
        const ms = named.get(sc.name);
        if (ms === undefined) return false;
        if (ms === null) {
          // Not followed: it has to stay as it is (its previous desired state is the full pass's).
          if (Mirror.follows(sc) || !this.unfollowedSame(k, sc)) return false;
          continue;
        }
        if (!Mirror.follows(sc) || setDefinitionKey(sc.set) !== setDefinitionKey(ms.config.set)) return false;
        if (sc === ms.config) continue;
        const changed = alignedChanges(ms.config.elements, sc.elements, ms.want);
        if (changed) edits.push([ms, sc, changed]);
        else sets.push([ms, sc, wantOf(sc)]);
      }
    }
    for (const [ck, c] of chains) this.desired.set(ck, c);
    for (const t of desired) this.desiredTables.set(key(t.family, t.name), t);
    for (const [ms, sc, changed] of edits) {
      // The same elements in the same order but a few (a generator's next output): only those are looked at.
      for (const i of changed) {
        const w = sc.elements[i]!;
        const id = elementId(w);
        const k = ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
        ms.want.set(id, w);
        if (k !== null && sameContent(w, k)) ms.differs.delete(id);
        else ms.differs.set(id, k);
      }
      ms.config = sc;
    }
    for (const [ms, sc, want] of sets) {
      // What the kernel holds: the old desired elements where they did not differ.
      const kernel = (id: string) => ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
      const differs = new Map<string, SetElement | null>();
      for (const [id, w] of want) {
        const k = kernel(id);
        if (k === null || !sameContent(w, k)) differs.set(id, k);
      }
      for (const id of ms.want.keys()) {
        if (want.has(id)) continue;
        const k = kernel(id);
        if (k !== null) differs.set(id, k);
      }
      for (const [id, k] of ms.differs) if (k !== null && !want.has(id) && !ms.want.has(id)) differs.set(id, k);
      ms.config = sc;
      ms.want = want;
      ms.differs = differs;
    }
    this.unfollowed.clear();
    for (const t of desired) for (const sc of t.sets ?? []) if (this.sets.get(key(t.family, t.name))?.get(sc.name) === null) this.unfollowed.set(`${key(t.family, t.name)} ${sc.name}`, sc);
    return true;
  }

  /** The desired config of each set the mirror does not follow, to tell a reload that leaves it alone. */
  private unfollowed = new Map<string, SetConfig>();
  /** The desired tables the mirror was seeded for or retargeted to. */
  private desiredTables = new Map<string, TableConfig>();

  private unfollowedSame(tableKey: string, sc: SetConfig): boolean {
    const old = this.unfollowed.get(`${tableKey} ${sc.name}`);
    if (!old) return false;
    if (old === sc) return true;
    if (setDefinitionKey(old.set) !== setDefinitionKey(sc.set) || old.elements.length !== sc.elements.length) return false;
    return old.elements.every((e, i) => elementId(e) === elementId(sc.elements[i]!) && sameContent(e, sc.elements[i]!)
      && e.timeout === sc.elements[i]!.timeout && e.expiration === sc.elements[i]!.expiration);
  }

  /** Whether the mirror follows this set's elements from the events (see UNFOLLOWED_SET_FLAGS). */
  static follows(sc: SetConfig): boolean {
    return (sc.set.flags & UNFOLLOWED_SET_FLAGS) === 0;
  }

  /** How many elements of a followed set the kernel holds otherwise than desired (tests, bench). */
  elementsDiffering(family: string, table: string, set: string): number | undefined {
    const ms = this.valid ? this.sets.get(key(family, table))?.get(set) : undefined;
    return ms ? ms.differs.size : undefined;
  }

  /**
   * The handles the mirror holds, per chain, for a cross-check against a read (undefined when
   * not in force or not clean).
   */
  handlesOf(family: string, table: string, chain: string): readonly number[] | undefined {
    const c = this.valid ? this.tables.get(key(family, table))?.get(chain) : undefined;
    return c && c.missing.size === 0 && c.extras.size === 0 ? Array.from(c.handles) : undefined;
  }

  /**
   * True when the mirror is the kernel's state at `generation` (just read): the monitor has seen
   * that generation, every commit since the mirror was exact was seen whole, and every batch it
   * delivered was applied.
   */
  exactAt(generation: number, p: MonitorProgress): boolean {
    return this.valid && p.lastGeneration === generation && p.delivered === this.applied
      && p.runStart !== 0 && p.runStart <= this.generation + 1 && this.generation <= generation && this.expected.size === 0;
  }

  /**
   * The monitor has not caught up with `generation` yet (its thread, or the delivery of a batch to
   * this thread, trails the kernel): worth waiting for, unlike the other reasons exactAt fails.
   */
  lagging(generation: number, p: MonitorProgress): boolean {
    return this.valid && (p.lastGeneration < generation || p.delivered > this.applied || this.expected.size > 0);
  }

  /** Applies one delivered batch. `ownPort` is the keeper's commit socket. */
  apply(b: MonitorBatch, ownPort: number): MirrorOutcome {
    this.applied++;
    if (b.overflow) {
      this.overflows++;
      this.invalidate('the event socket overflowed (ENOBUFS)');
      return 'invalid';
    }
    if (!this.valid) return 'invalid';
    if (b.generation <= this.generation) return 'ignored';  // in the seed already
    if (b.truncated) return this.fail(`commit ${b.generation} had more events than a batch keeps`);
    if (!b.since || b.since > this.generation + 1) {
      return this.fail(`the monitor did not see every commit between ${this.generation} and ${b.generation}`);
    }
    const own = b.foreign === false && b.events.every((e) => e.portId === ownPort);
    const why = own ? this.applyOwn(b) : this.applyForeign(b.events);
    if (why) return this.fail(why);
    this.generation = b.generation;
    return own ? 'own' : 'changed';
  }

  /** Registers the events our commit producing `generation` must show (before committing it). */
  expect(generation: number, expected: Expected[]): void {
    this.expected.set(generation, expected);
  }

  /**
   * Our commit expected at `generation` is in the kernel, and its acknowledgements echoed the handle
   * of each rule it added (by op index, NftConn.commit's `echo`): the mirror takes them now, as it
   * would from the commit's events, which the caller then need not have delivered (Monitor.skipOwn).
   * The guard held at the generation before, where the mirror was exact, so the commit was exactly
   * the plan. False, with nothing changed, when the echo does not cover the plan (element ops, a
   * handle missing) or the commit's events were applied already: the events say it then.
   */
  learnCommit(generation: number, handles: ReadonlyMap<number, number>): boolean {
    const plan = this.expected.get(generation);
    if (!plan || !this.valid || this.generation >= generation) return false;
    for (const x of plan) {
      if ('element' in x) return false;
      if ('add' in x && !(handles.get(x.op)! > 0)) return false;
    }
    this.expected.delete(generation);
    for (const x of plan) {
      if ('del' in x) {
        if (x.chain.extras.delete(x.del)) continue;
        this.fail(`our commit ${generation} deleted rule handle ${x.del}, which the mirror did not hold`);
        return false;
      }
      if (!('add' in x)) continue;
      const c = x.chain;
      const h = handles.get(x.op)!;
      if (c.byHandle.has(h) || c.extras.has(h)) {
        this.fail(`our commit ${generation} added rule handle ${h}, which the mirror holds already`);
        return false;
      }
      c.handles[x.add] = h;
      c.byHandle.set(h, x.add);
      c.missing.delete(x.add);
    }
    this.generation = generation;
    return true;
  }

  /** The commit expected at `generation` did not happen. */
  forget(generation: number): void {
    this.expected.delete(generation);
  }

  /**
   * The repair of every difference the mirror holds, or 'clean', or undefined when it is not
   * a small edit (the full pass plans it).
   */
  plan(): MirrorPlan | 'clean' | undefined {
    const batch = new Batch();
    const drift: Drift[] = [];
    const expected: Expected[] = [];
    let ops = 0;
    let nextId = 1;
    for (const chains of this.tables.values()) {
      for (const c of chains.values()) {
        if (c.missing.size === 0 && c.extras.size === 0) continue;
        ops += c.extras.size + c.missing.size;
        if (ops > MIRROR_MAX_OPS) return undefined;
        drift.push(this.describe(c));
      }
    }
    let elements = 0;
    for (const named of this.sets.values()) {
      for (const ms of named.values()) {
        if (!ms || ms.differs.size === 0) continue;
        elements += ms.differs.size;
        if (elements > MIRROR_MAX_ELEMENTS) return undefined;
      }
    }
    if (drift.length === 0 && elements === 0) return 'clean';
    for (const chains of this.tables.values()) {
      for (const c of chains.values()) {
        if (c.missing.size === 0 && c.extras.size === 0) continue;
        // desired j → the extra handle sitting in its place (none without extras: the common deletion)
        const inPlace = c.extras.size === 0 ? NO_PLACES : new Map<number, number>();
        for (const [h, j] of c.extras) {
          if (j >= 0 && c.missing.has(j) && !inPlace.has(j)) {
            inPlace.set(j, h);
            continue;
          }
          batch.push({ verb: 'delete', object: 'rule', family: c.family, table: c.table, chain: c.name, handle: h });
          expected.push({ del: h, chain: c });
        }
        // desired j → the batch id of its re-add, for the next one's position (one missing rule needs none)
        const ids = c.missing.size > 1 ? new Map<number, number>() : undefined;
        for (const j of missingInOrder(c)) {
          const r = this.rule(c, j);
          for (const st of r.sets) batch.add('set', { ...st, family: c.family, table: c.table });
          const id = nextId++;
          ids?.set(j, id);
          const exprs = this.frozenExprs(c, j, r.exprs);
          const h = inPlace.get(j);
          // Whole op literals, one shape each: spreading them together cost more than the rest of the plan.
          if (h !== undefined) {
            batch.push({ verb: 'replace', object: 'rule', family: c.family, table: c.table, chain: c.name, exprs, userdata: r.userdata, id, handle: h });  // same place, same handle
            expected.push({ del: h, chain: c }, { add: j, chain: c, op: batch.length - 1 });
            continue;
          }
          const after = j === 0 ? 0 : c.handles[j - 1]!;
          if (j === 0) batch.push({ verb: 'insert', object: 'rule', family: c.family, table: c.table, chain: c.name, exprs, userdata: r.userdata, id });  // at the head of the chain
          else if (after > 0) batch.push({ verb: 'add', object: 'rule', family: c.family, table: c.table, chain: c.name, exprs, userdata: r.userdata, id, position: after });
          else batch.push({ verb: 'add', object: 'rule', family: c.family, table: c.table, chain: c.name, exprs, userdata: r.userdata, id, positionId: ids!.get(j - 1)! });  // after the one re-added just before
          expected.push({ add: j, chain: c, op: batch.length - 1 });
        }
      }
    }
    for (const named of this.sets.values()) {
      for (const ms of named.values()) {
        if (!ms || ms.differs.size === 0) continue;
        const del: SetElement[] = [];
        const add: SetElement[] = [];
        for (const [id, k] of ms.differs) {
          if (k !== null) del.push(deletable(k));
          const w = ms.want.get(id);
          if (w) add.push(w);
        }
        // A changed element is its delete and its add, in that order, in the same batch.
        const where = { family: ms.family, table: ms.table, set: ms.name };
        if (del.length > 0) batch.delete('element', { ...where, elements: del });
        if (add.length > 0) batch.add('element', { ...where, elements: add });
        for (let i = 0; i < del.length + add.length; i++) expected.push({ element: ms });
        const what = ms.config.map ? 'map' : 'set';
        const changed = del.length + add.length - ms.differs.size;
        drift.push({
          kind: 'elements-differ', family: ms.family, table: ms.table, set: ms.name,
          detail: `${what} ${ms.name}: ${add.length} kernel elements to add, ${del.length} to delete` +
            `${changed > 0 ? ` (${changed} changed)` : ''}; repair from events: no element read`,
        });
      }
    }
    return { batch, drift, expected };
  }

  /** In force, with nothing planned, the kernel as desired, and at most `max` owned rules (no allocation). */
  clean(max: number): boolean {
    if (!this.valid || this.expected.size > 0) return false;
    let rules = 0;
    for (const chains of this.tables.values()) {
      for (const c of chains.values()) {
        rules += c.handles.length;
        if (c.missing.size > 0 || c.extras.size > 0 || rules > max) return false;
      }
    }
    for (const named of this.sets.values()) for (const ms of named.values()) if (ms && ms.differs.size > 0) return false;
    return true;
  }

  /**
   * A frozen copy of desired rule j's expressions, made the first time it is re-added: a frozen
   * array of frozen expressions is checked once (validate.ts), not on every repair that re-adds it.
   */
  private frozenExprs(c: MirrorChain, j: number, exprs: readonly Expr[]): Expr[] {
    let f = c.frozen?.get(j);
    if (!f) {
      // The keeper's desired rules are frozen already (src/model/compact.ts); others get a frozen copy.
      f = Object.isFrozen(exprs) && exprs.every((e) => Object.isFrozen(e)) ? exprs as Expr[]
        : Object.freeze(exprs.map((e) => Object.freeze(Object.assign({}, e)))) as Expr[];  // not a spread: see src/model/compact.ts
      (c.frozen ??= new Map()).set(j, f);
    }
    return f;
  }

  private rule(c: MirrorChain, j: number) {
    return this.desired.get(c.key)!.rules[j]!.compiled;
  }

  /** The chain's difference as plan() repairs it; its words are written when read (ChainDrift). */
  private describe(c: MirrorChain): Drift {
    const missing = missingInOrder(c);
    return new ChainDrift(c.family, c.table, c.name, missing, missing.length > 0 ? this.rule(c, missing[0]!) : undefined,
      c.extras.size === 0 ? [] : [...c.extras], c.handles.length);
  }

  private fail(why: string): MirrorOutcome {
    this.invalidate(why);
    return 'invalid';
  }

  private chainOf(e: MonitorEvent): MirrorChain | string {
    const chains = this.tables.get(key(e.family, e.table));
    if (!chains) return '';  // not an owned table
    const c = e.name !== undefined ? chains.get(e.name) : undefined;
    return c ?? `a rule event in chain ${e.family} ${e.table} ${e.name ?? '?'}, which the mirror does not hold`;
  }

  /** Anonymous sets and maps (nft names them __set%d, __map%d) come and go with the rules that use them. */
  private static anonymous(e: MonitorEvent): boolean {
    return (e.type === 'newset' || e.type === 'delset' || e.type === 'newsetelem' || e.type === 'delsetelem')
      && /^__(set|map)\d+$/.test(e.name ?? '');
  }

  /** The followed set an element event is about, if it is one. */
  private followedSetOf(e: MonitorEvent): MirrorSet | undefined {
    if (e.type !== 'newsetelem' && e.type !== 'delsetelem') return undefined;
    return this.sets.get(key(e.family, e.table))?.get(e.name ?? '') ?? undefined;
  }

  /** Takes what an element event says the kernel now holds; returns why it cannot. */
  private learnElements(ms: MirrorSet, e: MonitorEvent): string | undefined {
    if (e.elementsMalformed || !e.elements || e.elements.length === 0) return `an element event of ${ms.name} without its elements`;
    for (const el of e.elements) {
      const id = elementId(el);
      const before = ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
      if (e.type === 'delsetelem') {
        if (before === null) return `an element deleted from ${ms.name} that the mirror does not know`;
        this.holds(ms, id, null);
      } else {
        // The kernel refuses (or ignores, without an event) adding an element it holds.
        if (before !== null) return `an element added to ${ms.name} that the mirror already holds`;
        this.holds(ms, id, el);
      }
    }
    return undefined;
  }

  /** The kernel holds `el` (or nothing) as the element `id` of `ms`. */
  private holds(ms: MirrorSet, id: string, el: SetElement | null): void {
    const w = ms.want.get(id);
    const same = el === null ? w === undefined : w !== undefined && sameContent(w, el);
    if (same) ms.differs.delete(id);
    else ms.differs.set(id, el);
  }

  /** Follows a foreign commit; returns why it cannot. */
  private applyForeign(events: readonly MonitorEvent[]): string | undefined {
    const deleted = new Map<number, number>();  // handle deleted in this commit → its desired index
    for (const e of events) {
      if (e.type !== 'newrule' && e.type !== 'delrule') {
        if (!this.tables.has(key(e.family, e.table))) continue;  // e.g. another table deleted
        if (Mirror.anonymous(e)) continue;
        const ms = this.followedSetOf(e);
        if (ms) {
          const why = this.learnElements(ms, e);
          if (why) return why;
          continue;
        }
        return `${e.type} ${e.family} ${e.table}${e.name ? ` ${e.name}` : ''} (the full pass plans that)`;
      }
      const c = this.chainOf(e);
      if (c === '') continue;
      if (typeof c === 'string') return c;
      const h = e.handle;
      if (!h) return `a ${e.type} event without a handle`;
      if (e.type === 'delrule') {
        const j = c.byHandle.get(h);
        if (j !== undefined) {
          c.byHandle.delete(h);
          c.handles[j] = 0;
          c.missing.add(j);
          deleted.set(h, j);
        } else if (c.extras.has(h)) {
          deleted.set(h, c.extras.get(h)!);
          c.extras.delete(h);
        } else {
          return `rule handle ${h} deleted from ${c.name} is not one the mirror knows`;
        }
      } else {
        if (c.byHandle.has(h) || c.extras.has(h)) return `rule handle ${h} added to ${c.name} twice`;
        // A handle deleted earlier in the same commit comes back only through a replace: same place.
        const j = deleted.get(h);
        c.extras.set(h, j ?? -1);
      }
    }
    return undefined;
  }

  /** Follows our own commit as planned; returns why it cannot. */
  private applyOwn(b: MonitorBatch): string | undefined {
    const plan = this.expected.get(b.generation);
    this.expected.delete(b.generation);
    if (!plan) return `a commit of our own socket (generation ${b.generation}) that the mirror did not plan`;
    const rulePlan = plan.filter((x) => !('element' in x));
    let elementsPlanned = plan.length - rulePlan.length;
    let k = 0;
    for (const e of b.events) {
      if (e.type !== 'newrule' && e.type !== 'delrule') {
        if (Mirror.anonymous(e)) continue;
        const ms = this.followedSetOf(e);
        if (ms && elementsPlanned > 0) {
          // Our own element ops: the events say what the kernel holds now, as for a foreign commit.
          elementsPlanned -= e.elements?.length ?? 1;
          const why = this.learnElements(ms, e);
          if (why) return why;
          continue;
        }
        return `our commit ${b.generation} holds a ${e.type} event the mirror did not plan`;
      }
      const x = rulePlan[k++];
      const c = this.chainOf(e);
      if (!x || 'element' in x || typeof c === 'string' || c !== x.chain || !e.handle) return `our commit ${b.generation} does not match its plan`;
      if (e.type === 'delrule') {
        if (!('del' in x) || x.del !== e.handle || !c.extras.delete(e.handle)) return `our commit ${b.generation} deleted an unplanned rule`;
      } else {
        if (!('add' in x) || c.byHandle.has(e.handle) || c.extras.has(e.handle)) return `our commit ${b.generation} added an unplanned rule`;
        c.handles[x.add] = e.handle;
        c.byHandle.set(e.handle, x.add);
        c.missing.delete(x.add);
      }
    }
    if (k !== rulePlan.length) return `our commit ${b.generation} showed ${k} of ${rulePlan.length} planned rule events`;
    if (elementsPlanned !== 0) return `our commit ${b.generation} did not show its planned element events`;
    return undefined;
  }
}

/**
 * A chain's difference as the mirror planned its repair, from what it held then. The detail, in
 * words, is written when it is first read: by the repair's report, after the commit, not on the
 * way to it.
 */
class ChainDrift implements Drift {
  readonly kind = 'rules-differ';
  #detail: string | undefined;

  constructor(readonly family: Drift['family'], readonly table: string, readonly chain: string, private readonly missing: readonly number[],
    private readonly first: { text: string } | undefined, private readonly extras: readonly (readonly [number, number])[],
    private readonly desired: number) {}

  get detail(): string {
    return this.#detail ??= this.words();
  }

  set detail(v: string) {
    this.#detail = v;
  }

  private words(): string {
    const { missing, extras } = this;
    const parts: string[] = [];
    if (missing.length > 0) {
      parts.push(missing.length === 1 ? `rule ${missing[0]! + 1} (${this.first!.text}) is missing`
        : `${missing.length} rules are missing (first: rule ${missing[0]! + 1}, ${this.first!.text})`);
    }
    if (extras.length > 0) parts.push(`${extras.length} foreign rule${extras.length === 1 ? '' : 's'} (handle ${extras.map(([h]) => h).join(', ')})`);
    const replaced = extras.filter(([, j]) => j >= 0 && missing.includes(j)).length;
    const ops = extras.length + missing.length - replaced;
    const kept = this.desired - missing.length;
    return `${parts.join('; ')}; repair from events: ${kept} of ${kept + extras.length} kernel rules stay, ` +
      `${extras.length - replaced} deleted, ${missing.length - replaced} inserted, ${replaced} replaced (${ops} ops)`;
  }
}

/**
 * When `now` is `before` with some elements changed in place and some appended (none removed, no
 * identity moved), the indexes in `now` of those changed or appended; else undefined. O(elements)
 * comparisons, no map built: a reload from the same generator with one element changed.
 */
function alignedChanges(before: readonly SetElement[], now: readonly SetElement[], want: ReadonlyMap<string, SetElement>): number[] | undefined {
  if (now.length < before.length) return undefined;
  const changed: number[] = [];
  for (let i = 0; i < before.length; i++) {
    const o = before[i]!;
    const n = now[i]!;
    // The same fields: the common case, 100,000 times per reload (no id string built for it).
    if (sameElementFields(o, n)) continue;
    if (elementId(o) !== elementId(n)) return undefined;
    if (!sameContent(o, n) || (o.userdata ?? '') !== (n.userdata ?? '')) changed.push(i);
  }
  const added = new Set<string>();
  for (let i = before.length; i < now.length; i++) {
    const id = elementId(now[i]!);
    if (want.has(id) || added.has(id)) return undefined;  // a duplicate: the general path dedupes it
    added.add(id);
    changed.push(i);
  }
  return changed;
}

/** A set's desired elements by identity (the config's objects). */
function wantOf(sc: SetConfig): Map<string, SetElement> {
  const m = new Map<string, SetElement>();
  for (const e of sc.elements) m.set(elementId(e), e);
  return m;
}

/** The same chain apart from the objects: definition, comment and every rule's key, in order. */
function sameChain(a: TableConfig['chains'][number], b: TableConfig['chains'][number]): boolean {
  if (a === b) return true;
  if (a.name !== b.name || JSON.stringify(a.base ?? null) !== JSON.stringify(b.base ?? null) || (a.userdata ?? '') !== (b.userdata ?? '')) return false;
  if (a.rules.length !== b.rules.length) return false;
  for (let j = 0; j < a.rules.length; j++) if (a.rules[j] !== b.rules[j] && desiredKey(a.rules[j]!) !== desiredKey(b.rules[j]!)) return false;
  return true;
}
