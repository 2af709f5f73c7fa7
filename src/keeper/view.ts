/**
 * What the keeper holds of the kernel in its owned tables, as one object: the KernelView. Every
 * repair path asks it whether it is the kernel's state now, and plans from it; nothing else in the
 * keeper keeps a copy of the kernel.
 *
 * It is fed by exactly three things:
 * - a look (fromLook; seed): a dump, a digest confirmation or a look planned from the view itself
 *   that found the tables as desired;
 * - the echo of our own commit (followCommit for a full pass's batch, learnCommit for a repair
 *   planned from the events), which the guard proves was the only commit since the look;
 * - the monitor's events (follow): a foreign commit in an owned table is followed rule by rule and
 *   element by element, or makes the followed content unknown (an overflow, a gap in the run of
 *   whole commits, a truncated batch, an event it cannot follow).
 *
 * Its currency is per owned table (tableCurrency): exact at a generation, or unknown and why. The
 * view notes, per owned table, the last commit that touched it (an event in it, our echoed repair
 * of it; a truncated batch touches them all), and the monitor's run of whole commits
 * (MonitorProgress) proves that no other commit did. A table untouched since its rules were exact
 * is exact now; a touched one is confirmed by a digest dump of that table alone, or read; an
 * overflow or a gap in the run, which cannot be told to a table, leaves every table to be confirmed.
 *
 * It holds the kernel in two shapes, both fed as above:
 * - the rules of each owned table (known.ts: per chain, each rule's handle with the desired rule
 *   it is), which a full pass plans from without a dump;
 * - per desired chain and followed set, the kernel handles and where the kernel differs (mirror.ts),
 *   which the event repairs plan from.
 * The rules take what the events followed (takeFollowed): a table touched since the rules were
 * exact takes the handles the followed content holds, where that holds it as desired, so a full
 * pass after a foreign change the events followed (and its repair) reads nothing.
 */
import type { TableConfig } from '../model/desired.js';
import type { Batch } from '../netlink/batch.js';
import type { CommitResult, NftConn } from '../netlink/conn.js';
import type { EventKey, MonitorBatch, MonitorProgress } from '../netlink/events.js';
import type { ObservedTable } from '../netlink/objects.js';
import { KnownState } from './known.js';
import { readAddedChains } from './follow-commit.js';
import { Mirror, type MirrorOutcome } from './mirror.js';
import type { Expected, MirrorPlan } from './mirror-plan.js';

/** The rules the view holds, as a look that plans from them sees them. */
export type { KnownState };

/**
 * How long a proof waits for the monitor to catch up with the kernel (it reads its socket when the
 * event loop polls) before the caller reads the kernel instead. A turn of the loop on a quiet
 * machine; a loaded one deschedules the process for milliseconds, and a full read costs far more.
 */
export const EVENTS_WAIT_MS = 100;

/** A content's currency (the followed content's, or one table's): exact at a generation, or unknown and why. */
export type Currency = { exact: true; generation: number } | { exact: false; generation: number; reason: string };

/** Our last commit, sole but too big to echo: read at its generation by the next look (see heldAt). */
interface Unechoed {
  generation: number;
  tables: readonly TableConfig[];
  observed: ObservedTable[];
  batch: Batch;
  previous?: KnownState;
}

/** What a look may plan from: the view's rules (undefined: read the kernel), and whether they were read now. */
export interface Held {
  /** The rules of the tables held (known.table(t)); a table they do not hold, the look reads. */
  known?: KnownState;
  /** Confirmed by a read (digests, or the chains an unechoed commit wrote), not only by the generation or the events. */
  read: boolean;
}

export class KernelView {
  /** The rules as a look or our own commit left them, exact at known.generation. */
  private known?: KnownState;
  private unechoed?: Unechoed;
  /** The followed content; undefined while the view follows no events (events off, or a one-shot pass). */
  private followed?: Mirror;
  private progressOf?: () => MonitorProgress;
  private stopped: () => boolean = () => false;
  /** The last generation whose commit touched an owned table (ours included), from the events. */
  private lastTouch = 0;
  /** The last generation whose commit touched every owned table at once (a truncated batch: which, unknown). */
  private touchedAll = 0;
  /**
   * Per owned table by family and name (no key string built per event: follow() runs on the
   * repair's path), the last generation whose commit touched it.
   */
  private owned = new Map<string, Map<string, { touched: number }>>();

  /**
   * From now on the view follows the monitor's batches (follow), whose progress proves it current.
   * Start this before the monitor is anchored: every batch after that must reach follow().
   */
  followEvents(progress: () => MonitorProgress, stopped: () => boolean): void {
    this.followed = new Mirror();
    this.progressOf = progress;
    this.stopped = stopped;
  }

  /** The view follows events (the mirror paths are possible at all). */
  get follows(): boolean {
    return this.followed !== undefined;
  }

  /** The owned tables (the monitor's filter): which batches touch them. */
  setOwned(tables: readonly { family: string; name: string }[]): void {
    const before = this.owned;
    this.owned = new Map();
    for (const t of tables) {
      let names = this.owned.get(t.family);
      if (!names) this.owned.set(t.family, names = new Map());
      // A table owned before keeps its touches; a new one has none the view knows of, and none matter:
      // its rules are held only from a look or our commit, after which the events' proof starts.
      names.set(t.name, before.get(t.family)?.get(t.name) ?? { touched: 0 });
    }
  }

  /** The last generation whose commit touched `t` (an owned table), or every owned table. */
  private touchedAt(t: { family: string; name: string }): number {
    return Math.max(this.touchedAll, this.owned.get(t.family)?.get(t.name)?.touched ?? this.lastTouch);
  }

  /** A commit at `generation` touched `t`. */
  private touch(family: string, table: string, generation: number): boolean {
    const o = this.owned.get(family)?.get(table);
    if (!o) return false;
    if (o.touched < generation) o.touched = generation;
    if (this.lastTouch < generation) this.lastTouch = generation;
    return true;
  }

  // ---- currency ----

  /** The followed content's state; undefined without events. */
  currency(): Currency | undefined {
    const m = this.followed;
    if (!m) return undefined;
    return m.valid ? { exact: true, generation: m.generation } : { exact: false, generation: m.generation, reason: m.invalidReason! };
  }

  /** The followed content is in force (seeded and nothing unfollowable since); whether it is current is exactAt's. */
  get valid(): boolean {
    return this.followed?.valid === true;
  }

  /** Why the followed content is not in force (undefined while it is, or without events). */
  get reason(): string | undefined {
    return this.followed?.invalidReason;
  }

  /** The generation the followed content was last exact at. */
  get generation(): number {
    return this.followed?.generation ?? 0;
  }

  /**
   * The followed content is the kernel's state at `generation` (just read, or the monitor's last):
   * exact at or before it, and the monitor saw every commit since whole, up to `generation`, each
   * batch followed, none of our own commits still expected.
   */
  exactAt(generation: number, p = this.progressOf?.()): boolean {
    return !!p && !!this.followed && followedExactAt(this.followed, generation, p);
  }

  /** The monitor trails the kernel (or our commit's events are still on their way): worth waiting for. */
  lagging(generation: number, p = this.progressOf!()): boolean {
    const m = this.followed;
    return !!m?.valid && (this.eventsLag(generation, p) || m.pending);
  }

  /**
   * True when no commit after `from` up to `to` touched an owned table: the monitor saw every commit
   * whole from `from + 1` on, up to `to` at least, every batch it delivered was followed, and none
   * of them after `from` touched an owned table.
   */
  untouched(from: number, to: number, p: MonitorProgress): boolean {
    return runCovers(from, to, this.followed!.applied, p) && this.lastTouch <= from;
  }

  /** untouched(), after waiting for the monitor to catch up with `to` as a repair does (EVENTS_WAIT_MS). */
  private async untouchedSince(from: number, to: number): Promise<boolean> {
    return await this.eventsCover(from, to) && this.lastTouch <= from;
  }

  /** The monitor has not seen `to` yet, or has batches on their way to follow(). */
  private eventsLag(to: number, p: MonitorProgress): boolean {
    return p.lastGeneration < to || p.delivered > this.followed!.applied;
  }

  /**
   * Per owned table of `tables`, whether the view holds it exact at `generation` (the kernel's now,
   * or the monitor's last): its rules were exact at G and either G is `generation`, or the events
   * cover every commit since and none of them touched this table. Else unknown, and why.
   */
  tableCurrency(t: TableConfig, generation: number, p = this.progressOf?.()): Currency {
    const known = this.known;
    if (!known?.table(t)) return { exact: false, generation: known?.generation ?? 0, reason: 'no rules held' };
    const why = this.staleness(t, known.generation, generation, p);
    return why ? { exact: false, generation: known.generation, reason: why } : { exact: true, generation };
  }

  /** Why rules of `t` exact at `from` are not the kernel's at `to` by the generation and the events (undefined: they are). */
  private staleness(t: TableConfig, from: number, to: number, p: MonitorProgress | undefined): string | undefined {
    if (from === to) return undefined;
    if (!p || !this.followed || !runCovers(from, to, this.followed.applied, p)) return `the events do not cover the commits after ${from}`;
    const at = this.touchedAt(t);
    return at > from ? `commit ${at} touched it` : undefined;
  }

  /**
   * The rules a look at `generation` may plan from instead of a dump, per table, and how they were
   * proved: the generation has not moved since they were exact; or the events prove no commit since
   * touched that table (the content moves to `generation`); or a digest dump of that table confirms
   * them (a read). A table proved none of these ways is dropped from the rules: the look reads it,
   * and only it. A sole commit of ours too big to echo is read first (the chains it added rules
   * to), when nothing touched the tables since. `readBack`: the safety net's read, which does not
   * take the generation's or the events' word. `read` is called for each read made.
   */
  async heldAt(conn: NftConn, generation: number, tables: readonly TableConfig[], readBack: boolean, read: () => void): Promise<Held> {
    const unechoed = this.unechoed;
    this.unechoed = undefined;
    let readUnechoed = false;
    if (unechoed && (unechoed.generation === generation
      || (this.followed && await this.untouchedSince(unechoed.generation, generation)))) {
      readUnechoed = await this.readUnechoed(conn, unechoed, generation, read);
    }
    const trust = !readBack || readUnechoed;
    this.takeFollowed();
    const known = this.known;
    const have = known?.held(tables) ?? [];
    if (!known || have.length === 0) {
      this.known = undefined;
      return { read: false };
    }
    let stale = have;
    if (trust && known.generation === generation) {
      stale = [];
    } else if (trust && this.followed && await this.eventsCover(known.generation, generation) && this.known === known) {
      const p = this.progressOf!();
      stale = have.filter((t) => this.staleness(t, known.generation, generation, p) !== undefined);
    }
    if (stale.length === 0) {
      known.advance(generation);
      return { known, read: readUnechoed };
    }
    const m = this.followed;
    // A named set whose elements the followed content holds, exact now and clean for it, is not read.
    const held = m && ((t: TableConfig, set: string) => this.exactAt(generation) && m.elementsDiffering(t.family, t.name, set) === 0);
    const failed = await known.revalidate(conn, generation, stale, held);
    // Counted as a read where it confirmed a table (else the look's dump is the read).
    if (failed && failed.length < stale.length) read();
    if (!failed || failed.length === have.length) {
      this.known = undefined;  // stale: let its rules go before the dump decodes new ones
      return { read: false };
    }
    // Read now (digests), unless some tables are held only by the events; the others the look reads.
    return { known, read: stale.length === have.length };
  }

  /**
   * The rules take what the events followed since they were exact: when the followed content is in
   * force at a later generation M and accounts for every commit from the rules' generation up to M
   * (it was seeded at or before that generation, and has followed or learnt every commit since; or
   * the monitor's run covers the commits in between), each table a commit touched meanwhile takes
   * the handles the events gave, where the kernel holds it as desired (else it is let go, and read
   * by the next look), and the rules are exact at M.
   */
  private takeFollowed(): void {
    const known = this.known;
    const m = this.followed;
    if (!known || !m?.valid || known.generation >= m.generation) return;
    const p = this.progressOf?.();
    if (m.seededAt > known.generation && !(p && runCovers(known.generation, m.generation, m.applied, p))) return;
    for (const t of known.heldTables()) {
      if (this.touchedAt(t) <= known.generation) continue;
      const held = m.asDesired(t.family, t.name);
      if (!held || !known.takeFollowed(held)) known.drop(t);
    }
    known.advance(m.generation);
  }

  /** The events cover every commit after `from` up to `to`, after waiting for the monitor to catch up with `to` (EVENTS_WAIT_MS). */
  private async eventsCover(from: number, to: number): Promise<boolean> {
    const progress = this.progressOf!;
    const waitUntil = performance.now() + EVENTS_WAIT_MS;
    while (this.eventsLag(to, progress()) && performance.now() < waitUntil && !this.stopped()) {
      await new Promise((r) => setImmediate(r));
    }
    return runCovers(from, to, this.followed!.applied, progress());
  }

  // ---- feeders: a look ----

  /**
   * A look at `generation` found `tables` as desired (learn): from `known` (the view's own rules,
   * planned from) only the chains it compared are learnt anew, and the tables it read besides are
   * taken as read; from a read of every table, the rules read.
   */
  fromLook(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[], known: KnownState | undefined): void {
    if (known && known === this.known) {
      if (!known.confirm(tables, observed)) this.known = undefined;
    } else this.known = KnownState.fromCleanLook(generation, tables, observed);
  }

  /**
   * The followed content from a look at `generation` that found every desired table as desired
   * (and the kernel still there): per chain the handles of the desired rules, per followed set its
   * elements. 'diverged': it was exact at that generation already and held otherwise (the safety
   * net's read-back found the events misled it). False: the look does not fit.
   */
  seed(desired: readonly TableConfig[], observed: readonly ObservedTable[], generation: number): 'seeded' | 'diverged' | false {
    const m = this.followed;
    if (!m) return false;
    const before = m.valid && m.generation === generation ? followedOf(m, desired) : undefined;
    if (!m.seed(desired, observed, generation)) return false;
    return before && JSON.stringify(before) !== JSON.stringify(followedOf(m, desired)) ? 'diverged' : 'seeded';
  }

  /** Overflow reports followed: the monitor's anchor wants them. */
  get overflows(): number {
    return this.followed?.overflows ?? 0;
  }

  // ---- feeders: our own commit ----

  /**
   * A full pass committed a batch: the rules the view held are not the kernel's any more (until
   * followCommit), and the followed content cannot follow the batch's events (it did not plan them).
   */
  committed(): void {
    this.known = undefined;
    this.followed?.invalidate('a full pass committed');
  }

  /** A pass failed: what it planned from may not be the kernel's. */
  forgetRules(): void {
    this.known = undefined;
  }

  /** A look that does not plan from the view (a one-shot pass, or a caller that reads): it reads, and the view lets its rules go. */
  notHeld(): void {
    this.unechoed = undefined;
    this.known = undefined;
  }

  /**
   * `batch`, planned from `observed` for `tables`, was committed as the only commit since (the
   * guard held and the generation moved by exactly one, to `generation`): the rules follow it, from
   * the handles `echoed` gives; a batch too big to echo has the chains it added rules to read, now
   * or (`defer`) by the next look at that generation.
   */
  async followCommit(conn: NftConn, generation: number, tables: readonly TableConfig[], observed: ObservedTable[], batch: Batch,
    echoed: CommitResult | undefined, previous: KnownState | undefined, defer: boolean, read: () => void): Promise<void> {
    this.known = undefined;
    if (echoed?.handles) {
      this.known = KnownState.afterSoleCommit(generation, tables, observed, batch, echoed, previous, undefined, conn.portId);
    } else if (KnownState.canFollow(batch, observed)) {
      const u = { generation, tables, observed, batch, previous };
      if (defer) this.unechoed = u;
      else await this.readUnechoed(conn, u, generation, read);
    }
  }

  /** A pass begins: an unechoed commit is read by it or not at all. */
  passDone(): void {
    this.unechoed = undefined;
  }

  /** The rules after a sole commit too big to echo, from a read of the chains it added rules to (at `generation`). */
  private async readUnechoed(conn: NftConn, u: Unechoed, generation: number, read: () => void): Promise<boolean> {
    const chains = await readAddedChains(conn, u.batch, generation).catch(() => undefined);
    read();
    this.known = chains && KnownState.afterSoleCommit(generation, u.tables, u.observed, u.batch, undefined, u.previous, chains, conn.portId);
    return this.known !== undefined;
  }

  /** Registers the events our repair producing `generation` must show (before committing it). */
  expect(generation: number, expected: Expected[]): void {
    this.followed!.expect(generation, expected);
  }

  /** The repair expected at `generation` was not committed. */
  forget(generation: number): void {
    this.followed?.forget(generation);
  }

  /**
   * Our repair expected at `generation` is in the kernel, its new rules' handles echoed: the
   * followed content is exact there, and that commit touched the owned tables. False: the echo does
   * not cover the plan; its events say it then.
   */
  learnCommit(generation: number, handles: ReadonlyMap<number, number>): boolean {
    const planned = this.followed!.expectedAt(generation);
    if (!planned || !this.followed!.learnCommit(generation, handles)) return false;
    for (const x of planned) {
      const on = 'element' in x ? x.element : x.chain;
      this.touch(on.family, on.table, generation);
    }
    return true;
  }

  // ---- feeders: events ----

  /** One batch the monitor delivered. `ownPort`: the keeper's commit socket. */
  follow(b: MonitorBatch, ownPort: number): MirrorOutcome {
    // An overflow lost commits: the monitor's run starts again (runStart), which the proofs check.
    if (!b.overflow) {
      if (b.truncated) {
        // Events were left out: any owned table may have been touched.
        this.touchedAll = Math.max(this.touchedAll, b.generation);
        this.lastTouch = Math.max(this.lastTouch, b.generation);
      }
      for (let i = 0; i < b.events.length; i++) this.touch(b.events[i]!.family, b.events[i]!.table, b.generation);
    }
    return this.followed ? this.followed.apply(b, ownPort) : 'invalid';
  }

  /** The followed content is not the kernel's state any more. */
  invalidate(reason: string): void {
    this.followed?.invalidate(reason);
  }

  /**
   * A new desired state: the followed content keeps what the kernel holds when only set and map
   * elements changed (retarget), else it is unknown; the rules stay (a look compares them).
   */
  desiredChanged(desired: readonly TableConfig[]): void {
    if (this.followed && !this.followed.retarget(desired)) {
      this.takeFollowed();  // before the followed content goes
      this.followed.invalidate('the desired state changed');
    }
  }

  // ---- planning from the followed content ----

  /** The repair of every difference the followed content holds, 'clean', or undefined when not a small edit. */
  plan(): MirrorPlan | 'clean' | undefined {
    return this.followed!.plan();
  }

  /** In force, nothing planned, the kernel as desired, at most `max` owned rules. */
  clean(max: number): boolean {
    return !!this.followed?.clean(max);
  }

  /** The handles of a chain's desired rules as followed (undefined: not in force, or not clean). */
  handlesOf(family: string, table: string, chain: string): readonly number[] | undefined {
    return this.followed?.handlesOf(family, table, chain);
  }

  /** How many elements of a followed set the kernel holds otherwise than desired. */
  elementsDiffering(family: string, table: string, set: string): number | undefined {
    return this.followed?.elementsDiffering(family, table, set);
  }

  /**
   * What the view would plan after another writer deleted the rule `on` names, alone, at the next
   * generation: the view is put back as it was (the monitor's armed reactions, arming.ts).
   */
  planAfter(on: EventKey, ownPort: number): MirrorPlan {
    return this.followed!.planAfter(on, ownPort);
  }

  /** The rules as last exact (tests: held against a dump of the kernel). */
  get rules(): KnownState | undefined {
    return this.known;
  }
}

/**
 * The events' proof, the one both kinds of content are held current by: the monitor saw every
 * commit whole from `from + 1` on, up to `to` at least, and every batch it delivered was followed
 * (`applied` of them).
 */
export function runCovers(from: number, to: number, applied: number, p: MonitorProgress): boolean {
  return p.delivered === applied && p.runStart !== 0 && p.runStart <= from + 1 && p.lastGeneration >= to && from <= to;
}

/**
 * The followed content is the kernel's state at `generation`: in force, none of our commits
 * awaited, and the monitor's run covers every commit from the one after the content was exact up
 * to `generation`, which is the last it saw.
 */
export function followedExactAt(m: Mirror, generation: number, p: MonitorProgress): boolean {
  return m.valid && !m.pending && p.lastGeneration === generation && runCovers(m.generation, generation, m.applied, p);
}

/** What the followed content holds, to compare before and after a read-back: handles per chain, differing elements per set. */
function followedOf(m: Mirror, desired: readonly TableConfig[]): unknown[] {
  return desired.flatMap((t) => [...t.chains.map((c) => m.handlesOf(t.family, t.name, c.name)),
    ...(t.sets ?? []).map((x) => m.elementsDiffering(t.family, t.name, x.name))]);
}
