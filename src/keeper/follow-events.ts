/**
 * Following the monitor's events into the owned tables' followed part (OwnedTable.followed), so
 * that a foreign change costs what it changed instead of a dump of every owned rule. Every commit
 * that changed an owned table arrives as one monitor batch (its events up to NEWGEN), our own
 * commits included, and the kernel view (view.ts) hands each over in generation order:
 *
 * - a foreign DELRULE of a desired rule's handle marks that rule missing;
 * - a foreign NEWRULE is an extra rule (the desired list has no room for it); one that takes a
 *   handle just deleted in the same commit is a replace, and sits in that rule's place;
 * - an element event of a followed set says what the kernel now holds of each element it carries;
 * - our own commit's acknowledgements echo the handles of the rules it added (applyEcho; the
 *   commit's events then wake nobody, Monitor.skipOwn), or, where they do not, its events give
 *   them, in the order of its ops (planned by plan.ts: Expected).
 *
 * An event in a table that the followed part cannot follow (a table, chain or set event, an element
 * event of a set it does not follow, an element or a handle it does not know) makes that table
 * unknown, and only it: the others go on being followed and repaired from the events. What cannot be
 * told to a table (an overflow, a gap in the run of whole commits, a truncated batch, a commit of
 * our own socket that does not match its plan) makes them all unknown; the view says so.
 */
import { elementId, sameContent } from '../model/elements.js';
import { ruleAt } from '../model/desired.js';
import type { MonitorBatch, MonitorEvent } from '../netlink/events.js';
import type { SetElement } from '../netlink/objects.js';
import { knownRule } from './rule-key.js';
import type { Expected, FollowedChain, FollowedSet, FollowedTable, OwnedTable } from './owned-table.js';

export type FollowOutcome =
  /** Not followed (never seeded, or every table unknown since): the caller falls back. */
  | 'invalid'
  /** Already part of the seed, or changed nothing followed. */
  | 'ignored'
  /** Our own commit, as planned. */
  | 'own'
  /** A foreign commit, followed (where a table could not be, that table is unknown now). */
  | 'changed';

/** The record of an owned table by family and name. */
export type FindTable = (family: string, table: string) => OwnedTable | undefined;

/** The events stop following `rec`: it is unknown until an observation seeds it again. */
export function unfollow(rec: OwnedTable, why: string): void {
  rec.followed = undefined;
  rec.unknown ??= why;
}

/**
 * Follows a foreign commit's events, each into its table. A table with an event that cannot be
 * followed is made unknown, alone; returns why, for the first such table.
 */
export function followForeign(find: FindTable, events: readonly MonitorEvent[]): string | undefined {
  let lost: string | undefined;
  // Handles deleted in this commit: a NEWRULE of one of them in the same chain is a replace.
  const deleted = new Map<number, { c: FollowedChain; j: number }>();
  for (const e of events) {
    const rec = find(e.family, e.table);
    const f = rec?.followed;
    if (!f) continue;  // not an owned table followed now (another table, or one unknown already)
    const why = followEvent(f, e, deleted);
    if (why) {
      unfollow(rec!, why);
      lost ??= why;
    }
  }
  return lost;
}

/** One foreign event into its table; returns why it cannot be followed. */
function followEvent(f: FollowedTable, e: MonitorEvent, deleted: Map<number, { c: FollowedChain; j: number }>): string | undefined {
  if (e.type !== 'newrule' && e.type !== 'delrule') {
    if (anonymous(e)) return undefined;
    const ms = followedSetOf(f, e);
    if (ms) return followElements(ms, e);
    return `${e.type} ${e.family} ${e.table}${e.name ? ` ${e.name}` : ''} (the full pass plans that)`;
  }
  const c = e.name !== undefined ? f.chains.get(e.name) : undefined;
  if (!c) return `a rule event in chain ${e.family} ${e.table} ${e.name ?? '?'}, which the view does not hold`;
  const h = e.handle;
  if (!h) return `a ${e.type} event without a handle`;
  if (e.type === 'delrule') {
    const j = c.byHandle.get(h);
    if (j !== undefined) {
      c.byHandle.delete(h);
      c.missing.add(j);
      deleted.set(h, { c, j });
    } else if (c.extras.has(h)) {
      deleted.set(h, { c, j: c.extras.get(h)! });
      c.extras.delete(h);
    } else {
      return `rule handle ${h} deleted from ${c.name} is not one the view knows`;
    }
    return undefined;
  }
  if (c.byHandle.has(h) || c.extras.has(h)) return `rule handle ${h} added to ${c.name} twice`;
  // A handle deleted earlier in the same commit comes back only through a replace: same place.
  const d = deleted.get(h);
  c.extras.set(h, d?.c === c ? d.j : -1);
  return undefined;
}

/**
 * Follows our own commit, planned as `plan` (plan.ts), from its events; returns why it
 * cannot (the caller makes every table unknown: which one went otherwise cannot be told).
 */
export function followOwn(find: FindTable, plan: readonly Expected[] | undefined, b: MonitorBatch): string | undefined {
  if (!plan) return `a commit of our own socket (generation ${b.generation}) that the view did not plan`;
  const rulePlan = plan.filter((x) => !('element' in x));
  let elementsPlanned = plan.length - rulePlan.length;
  let k = 0;
  for (const e of b.events) {
    const f = find(e.family, e.table)?.followed;
    if (e.type !== 'newrule' && e.type !== 'delrule') {
      if (anonymous(e)) continue;
      const ms = f && followedSetOf(f, e);
      if (ms && elementsPlanned > 0) {
        // Our own element ops: the events say what the kernel holds now, as for a foreign commit.
        elementsPlanned -= e.elements?.length ?? 1;
        const why = followElements(ms, e);
        if (why) return why;
        continue;
      }
      return `our commit ${b.generation} holds a ${e.type} event the view did not plan`;
    }
    const x = rulePlan[k++];
    const c = e.name !== undefined ? f?.chains.get(e.name) : undefined;
    if (!x || 'element' in x || !c || c !== x.chain || !e.handle) return `our commit ${b.generation} does not match its plan`;
    if (e.type === 'delrule') {
      if (!('del' in x) || x.del !== e.handle || !c.extras.delete(e.handle)) return `our commit ${b.generation} deleted an unplanned rule`;
    } else {
      if (!('add' in x) || c.byHandle.has(e.handle) || c.extras.has(e.handle)) return `our commit ${b.generation} added an unplanned rule`;
      placeAdded(c, x.add, e.handle);
    }
  }
  if (k !== rulePlan.length) return `our commit ${b.generation} showed ${k} of ${rulePlan.length} planned rule events`;
  if (elementsPlanned !== 0) return `our commit ${b.generation} did not show its planned element events`;
  return undefined;
}

/**
 * Our commit planned as `plan` is in the kernel, and its acknowledgements echoed the handle of each
 * rule it added (by op index, NftConn.commit's `echo`): the followed tables take them, as they would
 * from the commit's events. False, with nothing changed, when the echo does not cover the plan
 * (element ops, a handle missing); a string (why) when it does not fit what is followed.
 */
export function applyEcho(plan: readonly Expected[], handles: ReadonlyMap<number, number>, generation: number): boolean | string {
  for (const x of plan) {
    if ('element' in x) return false;
    if ('add' in x && !(handles.get(x.op)! > 0)) return false;
  }
  for (const x of plan) {
    if ('del' in x) {
      if (x.chain.extras.delete(x.del)) continue;
      return `our commit ${generation} deleted rule handle ${x.del}, which the view did not hold`;
    }
    if (!('add' in x)) continue;
    const c = x.chain;
    const h = handles.get(x.op)!;
    if (c.byHandle.has(h) || c.extras.has(h)) return `our commit ${generation} added rule handle ${h}, which the view holds already`;
    placeAdded(c, x.add, h);
  }
  return true;
}

/**
 * Desired rule `j` of `c` is in the kernel at `handle` (our commit added it): a known rule there,
 * in the chain's one array (the table's rules see it too, and take it when they take what the
 * events followed). The rule it was before is kept when it is at that handle (planAfter's imagined
 * commit gives the old handle back).
 */
function placeAdded(c: FollowedChain, j: number, handle: number): void {
  if (c.rules[j]!.handle !== handle) c.rules[j] = knownRule({ family: c.family, name: c.table }, c, ruleAt(c.desired, j)!, handle);
  c.byHandle.set(handle, j);
  c.missing.delete(j);
}

/** Anonymous sets and maps (nft names them __set%d, __map%d) come and go with the rules that use them. */
function anonymous(e: MonitorEvent): boolean {
  return (e.type === 'newset' || e.type === 'delset' || e.type === 'newsetelem' || e.type === 'delsetelem')
    && /^__(set|map)\d+$/.test(e.name ?? '');
}

/** The followed set an element event is about, if it is one. */
function followedSetOf(f: FollowedTable, e: MonitorEvent): FollowedSet | undefined {
  if (e.type !== 'newsetelem' && e.type !== 'delsetelem') return undefined;
  return f.sets.get(e.name ?? '') ?? undefined;
}

/** Takes what an element event says the kernel now holds; returns why it cannot. */
function followElements(ms: FollowedSet, e: MonitorEvent): string | undefined {
  if (e.elementsMalformed || !e.elements || e.elements.length === 0) return `an element event of ${ms.name} without its elements`;
  for (const el of e.elements) {
    const id = elementId(el);
    const before = ms.differs.has(id) ? ms.differs.get(id)! : ms.want.get(id) ?? null;
    if (e.type === 'delsetelem') {
      if (before === null) return `an element deleted from ${ms.name} that the view does not know`;
      holds(ms, id, null);
    } else {
      // The kernel refuses (or ignores, without an event) adding an element it holds.
      if (before !== null) return `an element added to ${ms.name} that the view already holds`;
      holds(ms, id, el);
    }
  }
  return undefined;
}

/** The kernel holds `el` (or nothing) as the element `id` of `ms`. */
function holds(ms: FollowedSet, id: string, el: SetElement | null): void {
  const w = ms.want.get(id);
  const same = el === null ? w === undefined : w !== undefined && sameContent(w, el);
  if (same) ms.differs.delete(id);
  else ms.differs.set(id, el);
}
