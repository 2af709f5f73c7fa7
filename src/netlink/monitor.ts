/**
 * Change notifications from the NFNLGRP_NFTABLES multicast group. The addon
 * reads the socket when the event loop polls it (no reader thread: the
 * kernel's notification wakes this thread directly), filters in C++ and calls
 * back once per kernel commit that touched a watched table (or deleted any
 * table), so a storm of foreign changes elsewhere never runs JavaScript.
 */
import type { Family } from './expr.js';
import type { SetElement } from './objects.js';
import type { MonitorBatch, MonitorEvent, MonitorOptions, MonitorProgress } from './events.js';
import type { NativeMonitor } from './native.js';
import type { Op } from './ops.js';
import type { NftConn } from './conn.js';
import { NftSocket, preencoded } from './socket.js';
import { loadAddon } from '../native.js';

export class Monitor {
  private readonly native: NativeMonitor;
  private closedFlag = false;
  /** progress() as the addon handed it over with the batch being delivered (one-event batches), until anchor(). */
  private during: MonitorProgress | undefined;

  constructor(options: MonitorOptions) {
    const { NftMonitor } = loadAddon();
    // A batch of one event without elements comes as the call's arguments (fromArgs), any other as one flat array.
    this.native = new NftMonitor(options.netns, ((flat: unknown, generation: number, foreign: boolean, since: number,
      receivedNs: number, type: MonitorEvent['type'], family: Family, table: string, name: string | undefined,
      handle: number | undefined, portId: number, flags: number, position: number | undefined,
      lastGeneration: number, runStart: number, delivered: number, repaired: number | undefined, repairPosition: number,
      repairedNs: number, pid: number | undefined, comm: string | undefined) => {
      if (this.closedFlag) return;
      if (typeof flat !== 'boolean') {
        options.onBatch(fromFlat(flat as unknown[]));
        return;
      }
      const e: MonitorEvent = { type, family, table } as MonitorEvent;
      if (name !== undefined) e.name = name;
      if (handle !== undefined) e.handle = handle;
      e.portId = portId;
      e.flags = flags;
      if (position !== undefined) e.position = position;
      // While onBatch runs, progress() is what the addon handed over with the batch: nothing is read meanwhile.
      this.during = { lastGeneration, runStart, delivered };
      try {
        const b: MonitorBatch = { overflow: false, generation, truncated: flat, foreign, since, receivedNs, events: [e] };
        // The last two arguments: an addon built before them passes neither.
        if ((pid !== undefined && pid > 0) || comm !== undefined) b.by = comm !== undefined ? { pid: pid ?? 0, comm } : { pid: pid! };
        if (repaired !== undefined) {
          b.repaired = repaired >= 0 ? { handle: repaired, position: repairPosition, committedNs: repairedNs }
            : { errno: -repaired, position: repairPosition, committedNs: repairedNs };
        }
        options.onBatch(b);
      } finally {
        this.during = undefined;
      }
    }) as (batch: unknown) => void, toPairs(options.tables), options.ignorePorts ?? [], options.ownCommits ?? false,
    options.receiveBuffer);
  }

  /** What the monitor has read so far (no system call: what it has not read yet, it has not seen). */
  progress(): MonitorProgress {
    if (this.during) return this.during;
    const [lastGeneration, runStart, delivered] = this.native.progress();
    return { lastGeneration, runStart, delivered };
  }

  /**
   * Tells the monitor a generation read after it subscribed and after the caller handled
   * `overflowsSeen` overflow reports: every later commit reaches it whole, and progress().runStart
   * and the batches' `since` say so from then on (ignored if another overflow came meanwhile).
   */
  anchor(generation: number, overflowsSeen: number): void {
    this.during = undefined;
    this.native.anchor(generation, overflowsSeen);
  }

  /**
   * The caller learnt its own commit that made `generation` from the commit itself (the kernel's
   * echo of its new rules): that commit's batch, of ignored ports' events only, is neither handed
   * to onBatch nor counted in progress().delivered, so it wakes no JavaScript. Ignored for a
   * generation the monitor has read already (it was handed over) and by an addon built before it.
   */
  skipOwn(generation: number): void {
    this.native.skipOwn?.(generation);
  }

  /**
   * Decides the repair of one foreign rule deletion before it happens (native/monitor.cc, Arm); a socket other than an NftSocket arms nothing:
   * `ops[i]` re-adds the rule whose handle is `handles[i]` where it stands, valid while the watched
   * tables are as they were at `generation`. A batch that is exactly one foreign DELRULE of one of
   * those handles, with nothing else touching a watched table since `generation`, is answered by
   * committing that op on `socket` (guarded by the batch's generation, echoed) before the batch is
   * handed over with `repaired`; after a success the monitor stays armed at the repair's generation
   * (its own commit's events are skipped, see skipOwn). Any other batch leaves the arm stale. False
   * (nothing armed) with an addon built before it.
   */
  arm(socket: NftConn, generation: number, ops: readonly Op[], handles: readonly number[]): boolean {
    if (this.native.arm === undefined || this.closedFlag || !(socket instanceof NftSocket) || socket.closed) return false;
    return this.native.arm(socket.nativeSocket, generation, ops, handles, preencoded(ops));
  }

  /** Forgets the armed repair (arm): every batch is JavaScript's to answer again. */
  disarm(): void {
    this.native.disarm?.();
  }

  /** Answers nothing until resume(), which can take up what arm() made (cheaper than arming again). */
  pause(): void {
    this.native.pause?.();
  }

  /**
   * Armed again with what arm() made, if that still holds (no commit since its generation touched
   * a watched table, every one seen whole): true. False: arm() again.
   */
  resume(): boolean {
    return this.native.resume?.() ?? false;
  }

  setFilter(tables: { family: Family; name: string }[] | undefined, ignorePorts: number[] = []): void {
    this.native.setFilter(toPairs(tables), ignorePorts);
  }

  /** Lets the process exit while the monitor is open. */
  unref(): this {
    this.native.unref();
    return this;
  }

  ref(): this {
    this.native.ref();
    return this;
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  close(): void {
    this.closedFlag = true;
    this.native.close();
  }
}

/**
 * The batch the addon hands over as one flat array of primitives (native/monitor.cc, Deliver): the
 * objects are built here, where a literal is cheap, rather than in C++, where every named property
 * set internalized its key again. Layout: overflow, generation, truncated, foreign, since,
 * receivedNs, event count; per event: type, family, table, name, handle, portId, flags, position,
 * elementsMalformed, element count; per element: key, keyEnd, flags, data, verdict, chain, timeout,
 * expiration, userdata; after the events, the committer's pid and comm. Absent values are undefined,
 * and absent keys stay absent in the objects.
 */
export function fromFlat(v: unknown[]): MonitorBatch {
  const events: MonitorEvent[] = new Array(v[6] as number);
  let k = 7;
  for (let i = 0; i < events.length; i++) {
    // Keys in the order the addon set them before (a rule event: type, family, table, name, handle, portId, flags, position).
    const e = { type: v[k], family: v[k + 1], table: v[k + 2] } as MonitorEvent;
    if (v[k + 3] !== undefined) e.name = v[k + 3] as string;
    if (v[k + 4] !== undefined) e.handle = v[k + 4] as number;
    e.portId = v[k + 5] as number;
    e.flags = v[k + 6] as number;
    if (v[k + 7] !== undefined) e.position = v[k + 7] as number;
    if (v[k + 8] === true) e.elementsMalformed = true;
    const n = v[k + 9] as number;
    k += 10;
    if (n > 0) {
      const els: SetElement[] = new Array(n);
      for (let j = 0; j < n; j++, k += 9) {
        const x: SetElement = {};
        if (v[k] !== undefined) x.key = v[k] as string;
        if (v[k + 1] !== undefined) x.keyEnd = v[k + 1] as string;
        x.flags = v[k + 2] as number;
        if (v[k + 3] !== undefined) x.data = v[k + 3] as string;
        if (v[k + 4] !== undefined) x.verdict = v[k + 4] as SetElement['verdict'];
        if (v[k + 5] !== undefined) x.chain = v[k + 5] as string;
        if (v[k + 6] !== undefined) x.timeout = v[k + 6] as number;
        if (v[k + 7] !== undefined) x.expiration = v[k + 7] as number;
        if (v[k + 8] !== undefined) x.userdata = v[k + 8] as string;
        els[j] = x;
      }
      e.elements = els;
    }
    events[i] = e;
  }
  const b: MonitorBatch = {
    overflow: v[0] as boolean, generation: v[1] as number, truncated: v[2] as boolean, foreign: v[3] as boolean,
    since: v[4] as number, receivedNs: v[5] as number, events,
  };
  // After the events: who committed (an addon built before it ends the array before them).
  const pid = v[k] as number | undefined, comm = v[k + 1] as string | undefined;
  if ((pid !== undefined && pid > 0) || comm !== undefined) b.by = comm !== undefined ? { pid: pid ?? 0, comm } : { pid: pid! };
  return b;
}

function toPairs(tables: { family: Family; name: string }[] | undefined): [string, string][] | null {
  return tables ? tables.map((t) => [t.family, t.name]) : null;
}
