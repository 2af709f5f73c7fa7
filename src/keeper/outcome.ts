/**
 * What the keeper's parts pass between them: why a repair runs (Cause), what it is asked
 * (RepairRequest) and what it answers (PassOutcome, RepairReport), and the one interface every
 * repair path implements (RepairPath).
 */
import type { Batch } from '../netlink/batch.js';
import type { Protection } from './table.js';
import type { Drift } from '../model/drift.js';
import type { ForeignChange } from './attribution.js';

export type Cause = 'startup' | 'event' | 'tick' | 'overflow' | 'reload' | 'owners' | 'manual';

/** Every cause, for the metrics' zero series; a Record so a new Cause not listed fails the typecheck. */
export const CAUSES: Record<Cause, true> = { startup: true, event: true, tick: true, overflow: true, reload: true, owners: true, manual: true };

/** A new config or owners change: not something a neighbour undid, so no fight and no foreign change answered. */
export const deliberate = (c: Cause): boolean => c === 'reload' || c === 'owners';

/**
 * A repair of what another writer undid: it counts toward the fight and answers the foreign changes
 * it repaired. Neither a deliberate change nor start-up's install, which puts back nothing anyone undid, is one.
 */
export const undoneByOthers = (c: Cause): boolean => !deliberate(c) && c !== 'startup';

/** The steps of the event→repair path, in order (KeeperOptions.trace). */
export type TraceMark = 'received' | 'event' | 'pass' | 'proved' | 'planned' | 'committed' | 'reported';

/** What one requested pass did; a refused pass rejects its request() instead. */
export interface PassOutcome {
  /** The cause the pass ran under (a deliberate request joining a queued one lends it its cause). */
  cause: Cause;
  /**
   * in-sync: nothing to do; repaired: committed and verified; deferred: the
   * fight back-off holds the repair back (a pass is scheduled); stopped: the
   * keeper stopped before the pass ran.
   */
  status: 'in-sync' | 'repaired' | 'deferred' | 'stopped';
  drift: Drift[];
  ops: number;
  attempts: number;
  generation?: number;
}

/** What a repair path answers (the scheduler adds the cause it ran under). */
export type Outcome = Omit<PassOutcome, 'cause'>;

/** What a repair path is asked to do. */
export interface RepairRequest {
  cause: Cause;
  /** When the need was detected (event arrival, tick): the repair's latency counts from here. */
  detectedAt: number;
  /** A read nobody asked for (seeding or checking the followed part): it reads, and commits nothing. */
  background?: boolean;
}

/**
 * One way of repairing: the event repair (synchronous, inside the monitor's callback), the
 * follow pass and the full pass. They differ in how they prove their view of the kernel is
 * current; undefined means this path has no proof (or lost a race) and the next one decides.
 */
export interface RepairPath<R extends Outcome | undefined | Promise<Outcome | undefined>, Q extends RepairRequest = RepairRequest> {
  attempt(req: Q): R;
}

export interface RepairReport {
  cause: Cause;
  drift: Drift[];
  ops: number;
  /** From detection (event arrival or tick) to the committed repair. */
  latencyMs: number;
  generation: number;
  attempts: number;
  /** What it committed, in nft words (a full pass: the drift it repaired). */
  opsText?: string[];
}

/** A repair planned from the followed part and committed, waiting to be reported (Reporter.later). */
export interface DoneRepair {
  drift: Drift[];
  ops: number;
  generation: number;
  cause: Cause;
  detectedAt: number;
  committedAt: number;
  /** It answered an event, which is counted with it. */
  event: boolean;
  /** What it committed (described when reported, off the repair path). */
  batch: Batch;
}

export interface KeeperStatus {
  ready: boolean;
  generation: number | undefined;
  fightLevel: number;
  lastRepair?: { at: string; cause: Cause; drift: string[]; latencyMs: number };
  lastError?: string;
  tables: { family: string; name: string; state: 'verified' | 'drifting' | 'unknown'; protection: Protection | 'unknown' }[];
  /** The last foreign changes to owned tables, newest first (Keeper.attribution has them all). */
  foreignChanges?: ForeignChange[];
}
