/**
 * What the keeper holds of the kernel in its owned tables, as one object: the KernelView, one
 * record per owned table (OwnedTable, owned-table.ts). Every repair path asks it whether it is the
 * kernel's state now, and plans from it; nothing else in the keeper keeps a copy of the kernel.
 *
 * It is fed by exactly three things:
 * - an observation (fromObservation; seed): a dump, a digest confirmation or an observation planned
 *   from the view itself that found the tables as desired, or, at a restart, such an observation an
 *   earlier keeper recorded at the generation the kernel is still at (record.ts);
 * - the echo of our own commit (followCommit for a full pass's batch, followEcho for a repair
 *   planned from the events), which the guard proves was the only commit since the observation;
 * - the monitor's events (follow, follow-events.ts): a foreign commit in an owned table is followed
 *   rule by rule and element by element, or makes that table unknown (an event it cannot follow),
 *   or every table (an overflow, a gap in the run of whole commits, a truncated batch).
 *
 * Its currency is per owned table (tableCurrency): exact at a generation, or unknown and why. The
 * view notes, per owned table, the last commit that changed it (an event in it, our echoed repair
 * of it; a truncated batch may have changed them all), and the monitor's run of whole commits
 * (MonitorProgress) proves that no other commit did. A table the events follow is exact at its
 * followed generation, its rules with it (settle: the handles, and where the events left it
 * otherwise than desired, the difference, taken when asked for); a table they lost is exact where
 * no commit changed it since its rules were exact, else confirmed by a digest dump of that table
 * alone, or read; an overflow or a gap
 * in the run, which cannot be told to a table, leaves every table to be confirmed. The event
 * repairs plan from the followed tables, those the events did not lose, while a full pass reads the
 * others.
 */
import type { TableConfig } from '../model/desired.js';
import type { Batch } from '../netlink/batch.js';
import type { CommitResult, NftConn } from '../netlink/conn.js';
import type { MonitorProgress } from '../netlink/events.js';
import type { ObservedTable } from '../netlink/objects.js';
import { DumpInterruptedError, NetlinkError } from '../base/errors.js';
import { canFollow, cleanRules, confirm, heldFits, revalidate, takeFollowed } from './known.js';
import { followCommit, readAddedChains } from './follow-commit.js';
import { unfollow } from './follow-events.js';
import { retarget } from './follow-seed.js';
import { DESIRED_CHANGED, FollowedView, runCovers, type Currency } from './followed-view.js';
import { tableKey, type OwnedTable, type TableRules } from './owned-table.js';

export { EVENTS_WAIT_MS, runCovers, type Currency } from './followed-view.js';
export { since } from './known.js';

/** The rules an observation plans from, per desired table: the records' own (OwnedTable.rules), not copies. */
export type HeldRules = ReadonlyMap<TableConfig, TableRules>;

/** Our last commit, sole but too big to echo: read at its generation by the next observation (see heldAt). */
interface Unechoed {
  generation: number;
  tables: readonly TableConfig[];
  observed: ObservedTable[];
  batch: Batch;
  previous?: HeldRules;
}

/** What an observation may plan from: the view's rules (undefined: read the kernel), and whether they were read now. */
export interface Held {
  /** The rules of the tables held; a table they do not hold, the observation reads. */
  known?: HeldRules;
  /** Confirmed by a read (digests, or the chains an unechoed commit wrote), not only by the generation or the events. */
  read: boolean;
}

export class KernelView extends FollowedView {
  private unechoed?: Unechoed;
  /**
   * Whether the view holds table `t` exact at `generation` (the kernel's now, or the monitor's
   * last): its rules were exact at G and either G is `generation`, or the events cover every commit
   * since and none of them changed this table. Else unknown, and why.
   */
  tableCurrency(t: TableConfig, generation: number, p = this.progressOf?.()): Currency {
    const rec = this.settled(t);
    if (!rec?.rules) return { exact: false, generation: rec?.rulesAt ?? 0, reason: 'no rules held' };
    const why = this.staleness(rec, rec.rulesAt, generation, p);
    return why ? { exact: false, generation: rec.rulesAt, reason: why } : { exact: true, generation };
  }

  /** Why rules of `rec` exact at `from` are not the kernel's at `to` by the generation and the events (undefined: they are). */
  private staleness(rec: OwnedTable, from: number, to: number, p: MonitorProgress | undefined): string | undefined {
    if (from === to) return undefined;
    if (!p || !this.progressOf || !runCovers(from, to, this.applied, p)) return `the events do not cover the commits after ${from}`;
    const at = this.lastChangeOf(rec);
    return at > from ? `commit ${at} changed it` : undefined;
  }

  /** The rules the view holds of `t` (undefined: an observation reads it). */
  rulesOf(t: { family: string; name: string }): TableRules | undefined {
    return this.settled(t)?.rules;
  }

  /** The generation the view's rules of `t` are exact at (undefined: it holds none). */
  rulesAtOf(t: { family: string; name: string }): number | undefined {
    const rec = this.settled(t);
    return rec?.rules ? rec.rulesAt : undefined;
  }

  /** The record of `t`, its rules having taken what the events followed (settle). */
  private settled(t: { family: string; name: string }): OwnedTable | undefined {
    const rec = this.find(t.family, t.name);
    if (rec) this.settle(rec);
    return rec;
  }

  /**
   * The rules an observation at `generation` may plan from instead of a dump, per table, and how
   * they were proved: the generation has not moved since they were exact; or the events prove no
   * commit since changed that table; or a digest dump of that table confirms them (a read). A table
   * proved none of these ways has its rules dropped: the observation reads it, and only it. A sole
   * commit of ours too big to echo is read first (the chains it added rules to), when nothing
   * changed the tables since. `readBack`: the safety net's read, which does not take the
   * generation's or the events' word. `read` is called for each read made. `once`: a digest dump a
   * commit interrupts proves nothing, not retried (the generation moved: see PassInput.endWhenMoved).
   */
  async heldAt(conn: NftConn, generation: number, tables: readonly TableConfig[], readBack: boolean, read: () => void,
    once = false): Promise<Held> {
    const unechoed = this.unechoed;
    this.unechoed = undefined;
    let readUnechoed = false;
    if (unechoed && (unechoed.generation === generation
      || (this.progressOf && await this.eventsCover(unechoed.generation, generation) && this.anyChangedAt <= unechoed.generation))) {
      readUnechoed = await this.readUnechoed(conn, unechoed, generation, read);
    }
    const trust = !readBack || readUnechoed;
    // A difference the events followed was found against the desired chains of then: a chain changed since has its table read.
    for (const t of tables) {
      const kt = this.rulesOf(t);
      if (kt && !heldFits(kt, t)) this.record(t).rules = undefined;
    }
    const have = tables.filter((t) => this.rulesOf(t));
    if (have.length === 0) return this.noRules();
    // Per table, from its rules' own generation: the events since then are waited for where one is behind.
    const behind = have.map((t) => this.find(t.family, t.name)!.rulesAt).filter((at) => at !== generation);
    if (trust && this.progressOf && behind.length > 0) await this.eventsCover(Math.min(...behind), generation);
    const p = this.progressOf?.();
    const stale = trust ? have.filter((t) => {
      const rec = this.find(t.family, t.name)!;
      return !rec.rules || this.staleness(rec, rec.rulesAt, generation, p) !== undefined;
    }) : have;
    if (stale.length === 0) {
      this.rulesNowAt(have, generation);
      return { known: this.heldOf(have), read: readUnechoed };
    }
    if (!conn.listRuleDigests) return this.noRules();
    const digests = conn as NftConn & Required<Pick<NftConn, 'listRuleDigests'>>;
    // A named set whose elements the followed table holds, exact now and clean for it, is not read.
    const held = this.progressOf && ((t: TableConfig, set: string) => this.exactAt(generation) && this.elementsDiffering(t.family, t.name, set) === 0);
    // A read that only observes (once) gives up at a commit the events bring after its generation
    // that may have changed a table it reads: the pass ends, and the repair waiting for it runs. A
    // neighbour's commits elsewhere do not end it (the read holds: below).
    const progress = this.progressOf;
    const moved = once && progress ? () => {
      const p = progress();
      return p.lastGeneration > generation && !stale.every((t) => this.untouched(t, generation, p.lastGeneration, p));
    } : undefined;
    const failed = new Set<TableConfig>();
    for (const t of stale) {
      const kt = this.rulesOf(t);
      try {
        if (kt && await revalidate(digests, t, kt, held, once, moved)) continue;
      } catch (e) {
        // The table, a chain or a set went while we read (ENOENT), or a commit interrupted the
        // digest dump (once): not as held, read it whole.
        if (!(e instanceof NetlinkError) || (e.errnoName !== 'ENOENT' && !(once && e instanceof DumpInterruptedError))) throw e;
      }
      failed.add(t);
    }
    const now = conn.generation();
    // A read that only observes (once), given up for a table a commit changed while it read (the
    // event repairs answer deletions meanwhile): it concluded nothing there, and the table keeps
    // the rules it had, at their own generation, which the events carry on from (as before it read).
    const kept = new Set<TableConfig>();
    if (now !== generation) {
      // Something committed while we read. The read holds at `generation` (and at `now`) for a
      // table the events prove no commit since `generation` changed (a neighbour committing to its
      // own table); a table a commit changed, or any table where the events cannot tell, is read whole.
      if (!progress || !(await this.eventsCover(generation, now))) return this.noRules();
      const p = progress();
      for (const t of stale) {
        if (this.untouched(t, generation, now, p)) continue;
        failed.add(t);
        if (once) kept.add(t);
      }
    }
    // Counted as a read where it confirmed a table (else the observation's dump is the read).
    if (failed.size < stale.length) read();
    for (const t of failed) if (!kept.has(t)) this.record(t).rules = undefined;
    if (failed.size === have.length) return kept.size > 0 ? { read: false } : this.noRules();
    this.rulesNowAt(have.filter((t) => !kept.has(t)), generation);
    // Read now (digests), unless some tables are held only by the generation or the events; the others the observation reads.
    return { known: this.heldOf(have.filter((t) => !failed.has(t))), read: stale.length === have.length };
  }

  /** The rules still held of `tables` are exact at `generation`. */
  private rulesNowAt(tables: readonly TableConfig[], generation: number): void {
    for (const t of tables) {
      const rec = this.find(t.family, t.name);
      if (rec?.rules) rec.rulesAt = generation;
    }
  }

  private heldOf(tables: readonly TableConfig[]): HeldRules {
    return new Map(tables.map((t) => [t, this.rulesOf(t)!]));
  }

  /** No rules to plan from: let them go before the dump decodes new ones. */
  private noRules(): Held {
    this.dropRules();
    return { read: false };
  }

  private dropRules(): void {
    for (const rec of this.all()) rec.rules = undefined;
  }

  /**
   * One generation per record: the rules of a table the events follow are exact at its followed
   * generation (followedAt). They share the followed part's arrays, so a chain the events hold as
   * desired is theirs as it is; a chain the events left otherwise than desired owes its list in
   * the kernel's order (a stand-in for each foreign rule) and the difference they followed
   * (known.ts, takeFollowed), made here when the rules are asked for, never per event. A table the
   * events lost after its rules' generation, and changed since, has its rules go (the next
   * observation reads it); one unchanged since keeps them, exact at the events' generation.
   */
  private settle(rec: OwnedTable): void {
    if (!rec.rules || !this.following) return;
    const at = rec.followed ? this.followedAt(rec) : this.generation;
    if (rec.rulesAt >= at) return;
    const changed = this.lastChangeOf(rec) > rec.rulesAt;
    if (rec.followed) {
      // Seeded after the rules' generation, the followed part holds what the events before its seed did.
      if ((changed || rec.seededAt > rec.rulesAt) && !takeFollowed(rec.rules, rec.followed)) {
        rec.rules = undefined;
        return;
      }
    } else if (changed) {
      rec.rules = undefined;
      return;
    } else if (rec.seededAt > rec.rulesAt && !runCovers(rec.rulesAt, at, this.applied, this.progressOf!())) {
      return;
    }
    rec.rulesAt = at;
  }

  /**
   * An observation at `generation` found `tables` as desired: a table planned from the view's own
   * rules (`known`) takes anew only the chains it compared; a table it read takes the rules read.
   */
  fromObservation(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[], known: HeldRules | undefined): void {
    const seen = new Set<OwnedTable>();
    for (const [i, t] of tables.entries()) {
      const rec = this.record(t);
      seen.add(rec);
      const kt = known?.get(t);
      if (kt && rec.rules === kt) {
        if (!confirm(kt, t)) rec.rules = undefined;
      } else {
        rec.rules = cleanRules(t, observed[i]);
      }
      rec.rulesAt = generation;
    }
    for (const rec of this.all()) if (!seen.has(rec)) rec.rules = undefined;
  }

  /**
   * A full pass committed `batch`: the rules of the tables it changed are not the kernel's any more
   * (until followCommit), and the events cannot follow those tables (it did not plan them; the rules
   * its echo leaves may seed them again, seedFromEcho). The other tables' rules stay exact at their
   * generation: the commit's events prove it did not change them (tableCurrency), or a digest dump.
   */
  committed(batch: Batch): void {
    // (indexed: run once per commit, unoptimised, for-of made an iterator result per op)
    const ops = batch.ops;
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!;
      const rec = this.find(op.family, op.object === 'table' ? op.name : op.table);
      if (!rec) continue;
      rec.rules = undefined;
      if (rec.followed) unfollow(rec, 'a full pass committed');
    }
  }

  /** A pass failed: what it planned from may not be the kernel's. */
  forgetRules(): void {
    this.dropRules();
  }

  /** An observation that does not plan from the view (a one-shot pass, or a caller that reads): it reads, and the view lets its rules go. */
  notHeld(): void {
    this.unechoed = undefined;
    this.dropRules();
  }

  /**
   * `batch`, planned from `observed` for `tables`, was committed as the only commit since (the
   * guard held and the generation moved by exactly one, to `generation`): the rules follow it, from
   * the handles `echoed` gives; a batch too big to echo has the chains it added rules to read, now
   * or (`defer`) by the next observation at that generation.
   */
  async followCommit(conn: NftConn, generation: number, tables: readonly TableConfig[], observed: ObservedTable[], batch: Batch,
    echoed: CommitResult | undefined, previous: HeldRules | undefined, defer: boolean, read: () => void): Promise<void> {
    if (echoed?.handles) {
      this.afterCommit(generation, { generation, tables, observed, batch, previous }, echoed, undefined, conn.portId);
    } else if (canFollow(batch, observed)) {
      const u = { generation, tables, observed, batch, previous };
      if (defer) this.unechoed = u;
      else await this.readUnechoed(conn, u, generation, read);
    }
  }

  /** The rules held exactly at `generation` for every table of `tables` (our commit followed). */
  rulesExactAt(generation: number, tables: readonly TableConfig[]): boolean {
    return tables.every((t) => this.rulesAtOf(t) === generation);
  }

  /** A pass begins: an unechoed commit is read by it or not at all. */
  passDone(): void {
    this.unechoed = undefined;
  }

  /** The rules after a sole commit too big to echo, from a read of the chains it added rules to (at `generation`). */
  private async readUnechoed(conn: NftConn, u: Unechoed, generation: number, read: () => void): Promise<boolean> {
    const chains = await readAddedChains(conn, u.batch, generation).catch(() => undefined);
    read();
    return !!chains && this.afterCommit(generation, u, undefined, chains, conn.portId);
  }

  private afterCommit(generation: number, u: Unechoed, echoed: CommitResult | undefined,
    read: Parameters<typeof followCommit>[5], portId: number | undefined): boolean {
    const previous = u.previous;
    const out = followCommit(u.tables, u.observed, u.batch, echoed, previous && ((t) => previous.get(t)), read, portId);
    if (!out) return false;
    for (const t of u.tables) {
      const rec = this.record(t);
      rec.rules = out.get(tableKey(t));
      rec.rulesAt = generation;
    }
    this.seedFromEcho(generation, u.tables);
    return true;
  }

  /**
   * A new desired state: a followed table keeps what the kernel holds when only its set and map
   * elements changed (retarget); one changed otherwise is unknown, alone (DESIRED_CHANGED), and
   * every table when the tables themselves changed, or a repair of ours is awaited. The rules stay
   * (an observation compares them).
   */
  desiredChanged(desired: readonly TableConfig[]): void {
    if (!this.progressOf) return;
    const lost = this.following && retarget(this.seeded, desired);
    if (lost && lost.length === 0) return;
    for (const rec of this.all()) this.settle(rec);  // before the followed tables go
    if (!lost || this.awaiting) this.invalidate(DESIRED_CHANGED);
    else for (const rec of lost) unfollow(rec, DESIRED_CHANGED);
  }

}
