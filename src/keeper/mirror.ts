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
 * The repair of a mirror that differs is then exactly the difference, planned
 * by the one planner (planTable) over the mirror's view (mirror-plan.ts):
 * delete each extra rule by handle, re-add each missing rule after the rule
 * before it (NFTA_RULE_POSITION, or NFTA_RULE_POSITION_ID when that one is
 * re-added in the same batch), or replace an extra that sits in a missing
 * rule's place.
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
 * The mirror is only trusted with a proof that it is the kernel's state (made
 * by the kernel view, view.ts: followedExactAt): the monitor saw every commit
 * since the mirror was exact (its run of whole commits, see MonitorBatch.since
 * and Monitor.progress), each one that touched an owned table was applied, and
 * nothing happened that the mirror cannot follow. Anything else invalidates it and the keeper falls back to a full
 * observe: an overflow (ENOBUFS), a gap in the generations, a truncated batch,
 * a table, chain or set event in an owned table, an element event of a set it
 * does not follow, an element it does not know, a handle it does not know, a
 * commit of our own socket it did not plan. The repair commit is
 * guarded by the generation the proof was made at, so a race with another
 * writer is refused by the kernel and also ends in a full observe.
 */
import type { TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import { elementId, sameContent, setDefinitionKey } from '../model/elements.js';
import { Batch } from '../netlink/batch.js';
import type { EventKey, MonitorBatch, MonitorEvent } from '../netlink/events.js';
import type { ObservedTable, SetElement } from '../netlink/objects.js';
import { follows, retargetChanged, retargetSet, sameChain, sameUnfollowed, seedView, alignedChanges, wantOf, tableKey as key } from './mirror-seed.js';
import { planMirror, type Expected, type MirrorChain, type MirrorPlan, type MirrorSet, type MirrorTable } from './mirror-plan.js';

export type MirrorOutcome =
  /** Not in force (never seeded, or invalidated): the caller falls back. */
  | 'invalid'
  /** Already part of the seed, or touched nothing the mirror holds. */
  | 'ignored'
  /** Our own commit, as planned. */
  | 'own'
  /** A foreign commit, followed. */
  | 'changed';

/** One owned table as the events left it, the kernel holding it as desired (Mirror.asDesired). */
export interface FollowedTable {
  desired: TableConfig;
  /** The kernel handles of a desired chain's rules, in order. */
  handles(chain: string): Float64Array | undefined;
  /** Whether the events follow this set's elements. */
  followsSet(set: string): boolean;
}

export class Mirror {
  /** The kernel generation the mirror is exact at (with the proof, see exactAt). */
  generation = 0;
  /** The generation of the look it was seeded from: every commit after it, up to `generation`, it followed or learnt. */
  seededAt = 0;
  /** Batches the monitor delivered that reached apply(), to match Monitor.progress().delivered. */
  applied = 0;
  /** Overflow reports among them (Monitor.anchor wants it). */
  overflows = 0;
  /** Why the mirror is not in force, or undefined while it is. */
  invalidReason: string | undefined = 'not seeded';
  /** Per owned table: the table as the seed's look read it, and its desired chains as the kernel holds them. */
  private tables = new Map<string, MirrorTable>();
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
    const view = seedView(desired, observed);
    if (!view) return false;
    const { tables, sets } = view;
    this.tables = tables;
    this.sets = sets;
    this.desiredTables = new Map(desired.map((t) => [key(t.family, t.name), t]));
    this.unfollowed.clear();
    for (const t of desired) for (const sc of t.sets ?? []) if (sets.get(key(t.family, t.name))?.get(sc.name) === null) this.unfollowed.set(`${key(t.family, t.name)} ${sc.name}`, sc);
    this.desired = new Map();
    for (const t of desired) for (const c of t.chains) this.desired.set(`${key(t.family, t.name)} ${c.name}`, c);
    this.expected.clear();
    this.generation = generation;
    this.seededAt = generation;
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
      const have = this.tables.get(k)?.chains;
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
    for (const [ms, sc, changed] of edits) retargetChanged(ms, sc, changed);
    for (const [ms, sc, want] of sets) retargetSet(ms, sc, want);
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
    return sameUnfollowed(old, sc);
  }

  /** Whether the mirror follows this set's elements from the events (see UNFOLLOWED_SET_FLAGS). */
  static follows(sc: SetConfig): boolean {
    return follows(sc);
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
    const c = this.valid ? this.tables.get(key(family, table))?.chains.get(chain) : undefined;
    return c && c.missing.size === 0 && c.extras.size === 0 ? Array.from(c.handles) : undefined;
  }

  /**
   * Table `family table` as followed, when in force and the kernel holds it as desired (no rule
   * missing or foreign, no followed set differing): its desired table, its desired chains with the
   * kernel handles of their rules, and which of its sets are followed (the others no event changed).
   */
  asDesired(family: string, table: string): FollowedTable | undefined {
    if (!this.valid) return undefined;
    const k = key(family, table);
    const mt = this.tables.get(k);
    const desired = this.desiredTables.get(k);
    const named = this.sets.get(k);
    if (!mt || !desired || !named) return undefined;
    for (const c of mt.chains.values()) if (c.missing.size > 0 || c.extras.size > 0) return undefined;
    for (const ms of named.values()) if (ms && ms.differs.size > 0) return undefined;
    return { desired, handles: (name) => mt.chains.get(name)?.handles, followsSet: (name) => !!named.get(name) };
  }

  /** A commit of ours is expected (its events or echo not taken yet): the mirror is not exact until it is. */
  get pending(): boolean {
    return this.expected.size > 0;
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

  /** What our commit producing `generation` was planned to do (undefined: none expected). */
  expectedAt(generation: number): readonly Expected[] | undefined {
    return this.expected.get(generation);
  }

  /** The commit expected at `generation` did not happen. */
  forget(generation: number): void {
    this.expected.delete(generation);
  }

  /**
   * Per owned rule, for the monitor's armed reactions (arming.ts): the deletion of the rule `on`
   * names alone by another writer is applied, planned (the mirror is clean, so the plan re-adds that
   * rule where it stood), and the mirror put back by taking the plan as committed with the rule's
   * old handle, its generation and count of applied batches restored. Throws, invalidated, if it
   * does not follow as it must.
   */
  planAfter(on: EventKey, ownPort: number): MirrorPlan {
    const { generation, applied } = this;
    const deleted: MonitorBatch = {
      overflow: false, truncated: false, foreign: true, generation: generation + 1, since: generation + 1,
      events: [{ ...on, portId: 0 }],
    };
    try {
      const plan = this.apply(deleted, ownPort) === 'changed' ? this.plan() : undefined;
      const add = typeof plan === 'object' && plan.expected.length === 1 ? plan.expected[0]! : undefined;
      if (typeof plan !== 'object' || !add || !('add' in add)) throw new Error('the plan is not one rule re-added');
      this.expect(generation + 2, plan.expected);
      if (!this.learnCommit(generation + 2, new Map([[add.op, on.handle!]]))) throw new Error('the mirror could not take the handle back');
      return plan;
    } catch (e) {
      this.invalidate(`arming the monitor: after a deletion of rule handle ${on.handle} in ${on.table} ${on.name}, ${(e as Error).message}`);
      throw e;
    } finally {
      this.generation = generation;
      this.applied = applied;
    }
  }

  /**
   * The repair of every difference the mirror holds, or 'clean', or undefined when it is not
   * a small edit (the full pass plans it): planned by the one planner over the mirror's view.
   */
  plan(): MirrorPlan | 'clean' | undefined {
    return planMirror(new Batch(), { tables: this.tables, sets: this.sets, desiredTables: this.desiredTables, desired: this.desiredOf });
  }

  /** In force, with nothing planned, the kernel as desired, and at most `max` owned rules (no allocation). */
  clean(max: number): boolean {
    if (!this.valid || this.expected.size > 0) return false;
    let rules = 0;
    for (const { chains } of this.tables.values()) {
      for (const c of chains.values()) {
        rules += c.handles.length;
        if (c.missing.size > 0 || c.extras.size > 0 || rules > max) return false;
      }
    }
    for (const named of this.sets.values()) for (const ms of named.values()) if (ms && ms.differs.size > 0) return false;
    return true;
  }

  private readonly desiredOf = (c: MirrorChain) => this.desired.get(c.key)!;

  private fail(why: string): MirrorOutcome {
    this.invalidate(why);
    return 'invalid';
  }

  private chainOf(e: MonitorEvent): MirrorChain | string {
    const chains = this.tables.get(key(e.family, e.table))?.chains;
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
