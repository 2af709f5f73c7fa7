/**
 * The kernel view's records and what the monitor's events keep of them (view.ts holds the whole
 * view; this is its part that follows the events): the owned tables by family and name, the last
 * commit that changed each, and the followed part of those an observation seeded
 * (OwnedTable.followed), moved by each batch in generation order (follow-events.ts), by the echo of
 * our own repair (followEcho), and planned from by the event repairs (plan: plan.ts,
 * planFollowed). The events follow while the monitor's run of whole commits holds (an overflow, a
 * gap or a truncated batch loses every table); an event that cannot be followed loses its table
 * alone.
 */
import type { TableConfig } from '../model/desired.js';
import { Batch } from '../netlink/batch.js';
import type { EventKey, MonitorBatch, MonitorProgress } from '../netlink/events.js';
import type { Family } from '../netlink/expr.js';
import type { ObservedTable } from '../netlink/objects.js';
import { followForeign, followOwn, applyEcho, unfollow, type FollowOutcome } from './follow-events.js';
import { seedTable } from './follow-seed.js';
import { planFollowed, type FollowPlan } from './plan.js';
import type { Expected, FollowedTable, OwnedTable } from './owned-table.js';

/**
 * How long a proof waits for the monitor to catch up with the kernel (it reads its socket when the
 * event loop polls) before the caller reads the kernel instead. A turn of the loop on a quiet
 * machine; a loaded one deschedules the process for milliseconds, and a full read costs far more.
 */
export const EVENTS_WAIT_MS = 100;

/**
 * Why a table is unknown after a desired change other than of its elements. Its full pass's echo
 * does not seed it again (owners' registrations come in runs: a seed at each would cost the
 * table's rules each time); the next clean observation, or the safety net's read-back after a run
 * of registrations, does.
 */
export const DESIRED_CHANGED = 'the desired state changed';

/** A currency (the followed tables', or one table's): exact at a generation, or unknown and why. */
export type Currency = { exact: true; generation: number } | { exact: false; generation: number; reason: string };

export class FollowedView {
  /** Per owned (or held) table by family and name (no key string built per event: follow() runs on the repair's path). */
  protected tables = new Map<string, Map<string, OwnedTable>>();
  /**
   * The events' progress; undefined while the view follows none (events off, or a one-shot pass).
   * `readNow`: after the monitor read what its socket holds now, its batches followed first (current).
   */
  protected progressOf?: (readNow?: boolean) => MonitorProgress;
  protected stopped: () => boolean = () => false;
  /** The events only prove tables unchanged (a one-shot pass's resend): nothing is seeded, no event repair planned. */
  private proofOnly = false;
  /** The generation the followed tables are exact at (with the proof, see exactAt). */
  generation = 0;
  /** The highest generation a table was seeded at (OwnedTable.seededAt): above `generation`, the events trail that seed. */
  private seededAhead = 0;
  /** Batches the monitor delivered that reached follow(), to match MonitorProgress.delivered. */
  protected applied = 0;
  /** Overflow reports among them (the monitor's anchor wants them). */
  overflows = 0;
  /** Why the events follow no table (undefined while they follow those seeded). */
  private lost: string | undefined = 'not seeded';
  /** The tables the events were seeded for, in the desired order. */
  protected seeded: OwnedTable[] = [];
  /** Our repairs not yet followed, by the generation they make: the events each must show. */
  private expected = new Map<number, Expected[]>();
  /** The last generation whose commit changed an owned table (ours included), from the events. */
  protected anyChangedAt = 0;
  /** The last generation whose commit may have changed every owned table (a truncated batch: which, unknown). */
  private allChangedAt = 0;

  protected readonly find = (family: string, name: string): OwnedTable | undefined => this.tables.get(family)?.get(name);

  protected record(t: { family: string; name: string }): OwnedTable {
    let names = this.tables.get(t.family);
    if (!names) this.tables.set(t.family, names = new Map());
    let rec = names.get(t.name);
    if (!rec) names.set(t.name, rec = { family: t.family as Family, name: t.name, owned: false, changedAt: 0, rulesAt: 0, seededAt: 0 });
    return rec;
  }

  protected *all(): Iterable<OwnedTable> {
    for (const names of this.tables.values()) yield* names.values();
  }

  /**
   * From now on the view follows the monitor's batches (follow), whose progress proves it current.
   * Start this before the monitor is anchored: every batch after that must reach follow().
   * `proofOnly`: a one-shot pass, which ends after its commit: the events serve only the guard's
   * resend (unchangedSince), never seeded (a seed costs a walk of every rule for nothing).
   * `monitor.readNow`, where it has one, is how current() reads the socket first.
   */
  followEvents(monitor: { progress?(): MonitorProgress; readNow?(): MonitorProgress }, stopped: () => boolean, proofOnly = false): void {
    this.progressOf = (now) => (now && monitor.readNow ? monitor.readNow() : monitor.progress!());
    this.stopped = stopped;
    this.proofOnly = proofOnly;
  }

  /**
   * The monitor's progress once it has read what its socket holds now, the batches in it followed:
   * the moment every proof is taken at (the follow pass's generation, unchangedSince's, eventsCover's).
   * Right after a refusal by the generation it is at least the generation that refused: that commit
   * queued its NEWGEN to the monitor before the kernel checked ours (both under the commit mutex).
   * Undefined without events.
   */
  current(): MonitorProgress | undefined {
    return this.progressOf?.(true);
  }

  /** The view follows events (the event repairs are possible at all). */
  get follows(): boolean {
    return this.progressOf !== undefined;
  }

  /** The owned tables (the monitor's filter): which batches change them. A table no longer owned goes. */
  setOwned(tables: readonly { family: string; name: string }[]): void {
    const owned = new Set(tables.map((t) => this.record(t)));
    for (const [family, names] of this.tables) {
      for (const [name, rec] of names) {
        // A new one has no changes the view knows of, and none matter: its rules are held only from
        // an observation or our commit, after which the events' proof starts.
        if (owned.has(rec)) rec.owned = true;
        else names.delete(name);
      }
      if (names.size === 0) this.tables.delete(family);
    }
    this.seeded = this.seeded.filter((r) => owned.has(r));
  }

  /** The last generation whose commit changed `rec`, or may have changed every owned table. */
  protected lastChangeOf(rec: OwnedTable): number {
    return Math.max(this.allChangedAt, rec.owned ? rec.changedAt : this.anyChangedAt);
  }

  /** A commit at `generation` changed table `family table`. */
  private noteChange(family: string, table: string, generation: number): void {
    const rec = this.find(family, table);
    if (!rec?.owned) return;
    if (rec.changedAt < generation) rec.changedAt = generation;
    if (this.anyChangedAt < generation) this.anyChangedAt = generation;
  }

  /** The generation the followed part of `rec` is exact at: the events', or its seed's while they trail it. */
  protected followedAt(rec: OwnedTable): number {
    return Math.max(this.generation, rec.seededAt);
  }

  /**
   * The followed tables' state: exact unless the events lost them, or one of them, or trail a table
   * seeded ahead of them (until they reach its seed); of table `t` alone, exact at its own followed
   * generation unless the events lost it. Undefined without events.
   */
  currency(t?: { family: string; name: string }): Currency | undefined {
    if (!this.progressOf) return undefined;
    if (t) {
      const rec = this.find(t.family, t.name);
      const at = rec ? this.followedAt(rec) : this.generation;
      const lost = this.lost ?? (rec?.followed ? undefined : rec?.unknown ?? 'not seeded');
      return lost === undefined ? { exact: true, generation: at } : { exact: false, generation: at, reason: lost };
    }
    const why = this.lost ?? this.seeded.find((r) => !r.followed)?.unknown
      ?? (this.seededAhead > this.generation ? `the events trail a table seeded at ${this.seededAhead}` : undefined);
    return why === undefined ? { exact: true, generation: this.generation } : { exact: false, generation: this.generation, reason: why };
  }

  /** The events follow (seeded, and no overflow, gap or mismatched commit of ours since), if not every table: the event repairs plan from those they do. */
  get following(): boolean {
    return this.progressOf !== undefined && this.lost === undefined;
  }

  /** The events follow every owned table seeded; whether they are current is exactAt's. */
  get valid(): boolean {
    return this.following && this.seeded.every((r) => r.followed !== undefined);
  }

  /** Why the events do not follow every table (undefined while they do, or without events). */
  get reason(): string | undefined {
    const c = this.currency();
    return c && !c.exact ? c.reason : undefined;
  }

  /**
   * The followed tables are the kernel's state at `generation` (just read, or the monitor's last):
   * exact at or before it, and the monitor saw every commit since whole, up to `generation`, each
   * batch followed, none of our own commits still expected.
   */
  exactAt(generation: number, p = this.progressOf?.()): boolean {
    return !!p && this.following && this.expected.size === 0 && p.lastGeneration === generation && runCovers(this.generation, generation, this.applied, p);
  }

  /** The monitor trails the kernel (or our commit's events are still on their way): worth waiting for. */
  private lagging(generation: number, p: MonitorProgress): boolean {
    return this.following && (this.eventsLag(generation, p) || this.expected.size > 0);
  }

  /**
   * True when no commit after `from` up to `to` changed an owned table: the monitor saw every commit
   * whole from `from + 1` on, up to `to` at least, every batch it delivered was followed, and none
   * of them after `from` changed an owned table.
   */
  unchanged(from: number, to: number, p: MonitorProgress): boolean {
    return runCovers(from, to, this.applied, p) && this.anyChangedAt <= from;
  }

  /**
   * untouchedSince once the monitor has passed `from`: waited for (turns of the loop, at most
   * EVENTS_WAIT_MS) only while it has not, so the proof of a resend is taken at the kernel's
   * generation or close to it, and the window in which another commit can refuse the resend is the
   * resend's own. Undefined: no such proof, or the monitor did not pass `from` (a resend guarded by
   * `from` again would be refused again).
   */
  async unchangedSince(from: number, tables: readonly { family: string; name: string }[]): Promise<number | undefined> {
    if (!this.progressOf) return undefined;
    const p = await this.caughtUp(from + 1);
    return p.lastGeneration > from ? this.untouchedSince(from, tables, p) : undefined;
  }

  /**
   * The generation the monitor saw last, having read what its socket holds (current), where the
   * events prove `tables` there as they were at `from`: it saw every commit after `from` whole, up
   * to at least `from`, every batch it delivered was followed, and none named one of these tables
   * (or left which unknown: a truncated batch). The commits after it come as batches still to
   * follow. Undefined: no such proof; a table not owned, whose changes the view does not note, has none.
   */
  untouchedSince(from: number, tables: readonly { family: string; name: string }[], p = this.current()): number | undefined {
    if (!p) return undefined;
    const to = p.lastGeneration;
    return runCovers(from, to, this.applied, p) && tables.every((t) => this.untouched(t, from, to, p)) ? to : undefined;
  }

  /**
   * No commit after `from` up to `to` changed table `t`: the monitor saw every commit in between
   * whole, and none of them named it (nor may have changed every owned table: a truncated batch).
   * A table not owned, whose changes the view does not note, has no such proof.
   */
  untouched(t: { family: string; name: string }, from: number, to: number, p = this.progressOf?.()): boolean {
    if (from === to) return true;
    const rec = this.find(t.family, t.name);
    return !!rec?.owned && !!p && runCovers(from, to, this.applied, p) && this.lastChangeOf(rec) <= from;
  }

  /** The monitor has not seen `to` yet, or has batches on their way to follow(). */
  protected eventsLag(to: number, p: MonitorProgress): boolean {
    return p.lastGeneration < to || p.delivered > this.applied;
  }

  /**
   * The monitor's progress once it has read what its socket holds now (current), waited for by turns
   * of the loop while it has not seen `to` or has batches on their way to follow() (at most
   * EVENTS_WAIT_MS, or until the keeper stops). The events' wait before every proof that needs them
   * at a generation.
   */
  private caughtUp(to: number): Promise<MonitorProgress> {
    return this.waitWhile((p) => this.eventsLag(to, p));
  }

  /**
   * caughtUp, and also while the events of our own commits are still expected (lagging): the follow
   * pass's wait before it proves the followed part at a generation it read from the kernel.
   */
  settledAt(generation: number): Promise<MonitorProgress> {
    return this.waitWhile((p) => this.lagging(generation, p));
  }

  /** The one wait for the events: turns of the loop while `lags` holds, at most EVENTS_WAIT_MS, or until the keeper stops. */
  private async waitWhile(lags: (p: MonitorProgress) => boolean): Promise<MonitorProgress> {
    const waitUntil = performance.now() + EVENTS_WAIT_MS;
    let p = this.current()!;
    while (lags(p) && performance.now() < waitUntil && !this.stopped()) {
      await new Promise((r) => setImmediate(r));
      p = this.current()!;
    }
    return p;
  }

  /** The events cover every commit after `from` up to `to`, after waiting for the monitor to catch up with `to` (caughtUp). */
  protected async eventsCover(from: number, to: number): Promise<boolean> {
    const p = await this.caughtUp(to);
    return runCovers(from, to, this.applied, p);
  }

  /**
   * The events follow `desired` from an observation at `generation` that found every desired table
   * as desired (and the kernel still there): per chain the desired rules at their handles (in the
   * array of the table's rules where they hold that chain at that generation), per
   * followed set its elements. 'diverged': a table was followed exact at that generation already
   * and held otherwise (the safety net's read-back found the events misled it). False: the
   * observation does not fit.
   */
  seed(desired: readonly TableConfig[], observed: readonly ObservedTable[], generation: number): 'seeded' | 'diverged' | false {
    if (!this.progressOf || this.proofOnly) return false;
    const before = this.following && this.generation === generation ? desired.map((t) => this.snapshot(t)) : undefined;
    // The tables' rules exact at that generation lend their chains' arrays: one per chain.
    const followed = desired.map((t, i) => {
      const rec = this.find(t.family, t.name);
      return seedTable(t, observed[i], rec?.rulesAt === generation ? rec.rules : undefined, rec?.followed);
    });
    if (followed.some((f) => !f)) return false;
    for (const rec of this.all()) rec.followed = undefined;
    this.seeded = desired.map((t, i) => this.followFrom(this.record(t), followed[i]!, generation));
    this.expected.clear();
    this.generation = generation;
    this.seededAhead = generation;
    this.lost = undefined;
    return before?.some((b, i) => b !== undefined && b !== this.snapshot(desired[i]!)) ? 'diverged' : 'seeded';
  }

  /**
   * Our full pass's commit made `generation`, the only commit since the observation it was planned
   * from, and the rules of `tables` follow it (its echo): where the events follow, have not gone
   * past it and await none of ours, the tables the commit let go (committed), and any other
   * unknown, are seeded again from those rules, in their arrays, at `generation` (their seededAt):
   * the events of the commits up to it in those tables, the commit's own included, are then in the
   * seed, and where the events trail the observation, the other tables follow the commits before
   * it as they come. Else they stay let go (the next clean observation seeds them): the events
   * follow nothing or went past the commit; a table the echo left no rules of, or a desired change
   * made unknown (DESIRED_CHANGED), stays let go alone.
   */
  protected seedFromEcho(generation: number, tables: readonly TableConfig[]): void {
    // Never seeded (the start-up's install from empty): every table's rules, exact at the commit,
    // seed the followed part as an observation at that generation would, with no read.
    if (this.seeded.length === 0) {
      if (!this.progressOf || this.expected.size > 0) return;
      const held = tables.map((t) => this.find(t.family, t.name));
      if (held.every((rec) => rec?.rules && rec.rulesAt === generation)) this.seed(tables, held.map((rec) => rec!.rules!.observed), generation);
      return;
    }
    if (!this.following || this.generation > generation || this.expected.size > 0 || tables.length !== this.seeded.length) return;
    const again: [OwnedTable, FollowedTable][] = [];
    for (const [i, t] of tables.entries()) {
      const rec = this.seeded[i]!;
      if (rec !== this.find(t.family, t.name)) return;
      if (rec.followed) {
        if (rec.followed.desired !== t) return;
        continue;
      }
      if (rec.unknown === DESIRED_CHANGED) continue;
      // A table the echo left no rules of (stateful objects, anonymous sets) stays let go: the next clean observation seeds it.
      const f = rec.rules && seedTable(t, rec.rules.observed, rec.rules);
      if (f) again.push([rec, f]);
    }
    for (const [rec, f] of again) this.followFrom(rec, f, generation);
    // At the observation, the other tables are exact at the commit too (it did not change them); trailing it, they follow on.
    if (this.generation >= generation - 1) this.generation = generation;
    else if (again.length > 0) this.seededAhead = Math.max(this.seededAhead, generation);
  }

  /** The events follow `rec` as `f` from `generation` on: the commits up to it are in the seed. */
  private followFrom(rec: OwnedTable, f: FollowedTable, generation: number): OwnedTable {
    rec.followed = f;
    rec.unknown = undefined;
    rec.seededAt = generation;
    return rec;
  }

  /** What the events hold of `t`, to compare before and after a read-back: handles per chain, differing elements per set. */
  private snapshot(t: TableConfig): string | undefined {
    if (!this.find(t.family, t.name)?.followed) return undefined;
    return JSON.stringify([...t.chains.map((c) => this.handlesOf(t.family, t.name, c.name)),
      ...(t.sets ?? []).map((x) => this.elementsDiffering(t.family, t.name, x.name))]);
  }

  /** A repair of ours is committed or on its way, its events not followed yet. */
  protected get awaiting(): boolean {
    return this.expected.size > 0;
  }

  /** Registers the events our repair producing `generation` must show (before committing it). */
  expect(generation: number, expected: Expected[]): void {
    this.expected.set(generation, expected);
  }

  /** The repair expected at `generation` was not committed. */
  forget(generation: number): void {
    this.expected.delete(generation);
  }

  /**
   * Our repair expected at `generation` is in the kernel, its new rules' handles echoed: the
   * followed tables are exact there, and that commit changed them. False: the echo does not cover
   * the plan, or the commit's events were followed already; its events say it then.
   */
  followEcho(generation: number, handles: ReadonlyMap<number, number>): boolean {
    const planned = this.expected.get(generation);
    if (!planned || !this.following || this.generation >= generation) return false;
    const took = applyEcho(planned, handles, generation);
    if (took === false) return false;
    this.expected.delete(generation);
    if (took !== true) {
      this.invalidate(took);
      return false;
    }
    this.generation = generation;
    for (const x of planned) {
      const on = 'element' in x ? x.element : x.chain;
      this.noteChange(on.family, on.table, generation);
    }
    return true;
  }

  /** One batch the monitor delivered. `ownPort`: the keeper's commit socket. */
  follow(b: MonitorBatch, ownPort: number): FollowOutcome {
    // An overflow lost commits: the monitor's run starts again (runStart), which the proofs check.
    if (!b.overflow) {
      if (b.truncated) {
        // Events were left out: any owned table may have been changed.
        this.allChangedAt = Math.max(this.allChangedAt, b.generation);
        this.anyChangedAt = Math.max(this.anyChangedAt, b.generation);
      }
      for (let i = 0; i < b.events.length; i++) this.noteChange(b.events[i]!.family, b.events[i]!.table, b.generation);
    }
    return this.progressOf ? this.apply(b, ownPort) : 'invalid';
  }

  /** follow()'s part that moves the followed tables (planAfter's too, which notes no change). */
  private apply(b: MonitorBatch, ownPort: number): FollowOutcome {
    this.applied++;
    if (b.overflow) {
      this.overflows++;
      this.invalidate('the event socket overflowed (ENOBUFS)');
      return 'invalid';
    }
    if (!this.following) return 'invalid';
    if (b.generation <= this.generation) return 'ignored';  // in the seed already
    if (b.truncated) return this.fail(`commit ${b.generation} had more events than a batch keeps`);
    if (!b.since || b.since > this.generation + 1) return this.fail(`the monitor did not see every commit between ${this.generation} and ${b.generation}`);
    const own = b.foreign === false && b.events.every((e) => e.portId === ownPort);
    // A table seeded at or after this commit holds it already (seedFromEcho, the events trailing).
    const find = b.generation <= this.seededAhead ? this.followingAt(b.generation) : this.find;
    if (own) {
      const plan = this.expected.get(b.generation);
      this.expected.delete(b.generation);
      if (plan) {
        const why = followOwn(find, plan, b);
        if (why) return this.fail(why);
      } else {
        // A full pass's commit (committed() let its tables go already): any other table it changed goes too.
        for (const e of b.events) {
          const rec = find(e.family, e.table);
          if (rec?.followed) unfollow(rec, `our commit ${b.generation}, which the view did not plan`);
        }
      }
    } else {
      followForeign(find, b.events);
    }
    this.generation = b.generation;
    return own ? 'own' : 'changed';
  }

  /** find, but a table seeded at or after `generation` is none of that commit's. */
  private followingAt(generation: number): (family: string, name: string) => OwnedTable | undefined {
    return (family, name) => {
      const rec = this.find(family, name);
      return rec && rec.seededAt < generation ? rec : undefined;
    };
  }

  private fail(why: string): FollowOutcome {
    this.invalidate(why);
    return 'invalid';
  }

  /** The events do not follow the kernel's state any more, in any table. */
  invalidate(reason: string): void {
    this.lost ??= reason;
    for (const rec of this.seeded) rec.followed = undefined;
    this.expected.clear();
  }

  /**
   * The repair of every difference the followed tables hold, 'clean', or undefined when not a small
   * edit or when a table the events lost is clean otherwise (a full pass reads it).
   */
  plan(): FollowPlan | 'clean' | undefined {
    const followed = [];
    let unknown = false;
    for (const rec of this.seeded) {
      if (rec.followed) followed.push(rec.followed);
      else unknown = true;
    }
    const plan = planFollowed(new Batch(), followed);
    return plan === 'clean' && (unknown || followed.length === 0) ? undefined : plan;
  }

  /** Every seeded table followed, nothing planned, the kernel as desired, at most `max` owned rules (no allocation). */
  clean(max: number): boolean {
    if (!this.following || this.expected.size > 0) return false;
    let rules = 0;
    for (const rec of this.seeded) {
      const f = rec.followed;
      if (!f) return false;
      for (const c of f.chains.values()) {
        rules += c.rules.length;
        if (c.missing.size > 0 || c.extras.size > 0 || rules > max) return false;
      }
      for (const ms of f.sets.values()) if (ms && ms.differs.size > 0) return false;
    }
    return true;
  }

  /** The events follow table `family table`. */
  followsTable(family: string, table: string): boolean {
    return this.following && this.find(family, table)?.followed !== undefined;
  }

  /** The handles of a chain's desired rules as followed (undefined: not followed, or not clean). */
  handlesOf(family: string, table: string, chain: string): readonly number[] | undefined {
    const c = this.following ? this.find(family, table)?.followed?.chains.get(chain) : undefined;
    return c && c.missing.size === 0 && c.extras.size === 0 ? c.rules.map((r) => r.handle!) : undefined;
  }

  /** How many elements of a followed set the kernel holds otherwise than desired. */
  elementsDiffering(family: string, table: string, set: string): number | undefined {
    const ms = this.following ? this.find(family, table)?.followed?.sets.get(set) : undefined;
    return ms ? ms.differs.size : undefined;
  }

  /**
   * Per owned rule, for the monitor's armed reactions (arming.ts): the deletion of the rule `on`
   * names alone by another writer is followed, planned (the view is clean, so the plan re-adds that
   * rule where it stood), and the view put back by taking the plan as committed with the rule's old
   * handle, its generation and count of followed batches restored. Throws, the events lost, if it
   * does not follow as it must.
   */
  planAfter(on: EventKey, ownPort: number): FollowPlan {
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
      if (!this.applyEchoAt(generation + 2, new Map([[add.op, on.handle!]]))) throw new Error('the view could not take the handle back');
      return plan;
    } catch (e) {
      this.invalidate(`arming the monitor: after a deletion of rule handle ${on.handle} in ${on.table} ${on.name}, ${(e as Error).message}`);
      throw e;
    } finally {
      this.generation = generation;
      this.applied = applied;
    }
  }

  /** followEcho without noting a change (planAfter's commit is imagined). */
  private applyEchoAt(generation: number, handles: ReadonlyMap<number, number>): boolean {
    const planned = this.expected.get(generation);
    this.expected.delete(generation);
    return !!planned && applyEcho(planned, handles, generation) === true;
  }
}

/**
 * The events' proof, the one both the rules and the followed tables are held current by: the
 * monitor saw every commit whole from `from + 1` on, up to `to` at least, and every batch it
 * delivered was followed (`applied` of them).
 */
export function runCovers(from: number, to: number, applied: number, p: MonitorProgress): boolean {
  return p.delivered === applied && p.runStart !== 0 && p.runStart <= from + 1 && p.lastGeneration >= to && from <= to;
}
