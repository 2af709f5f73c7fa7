/**
 * Change notifications from the NFNLGRP_NFTABLES multicast group. The addon
 * reads the socket when the event loop polls it (no reader thread: the
 * kernel's notification wakes this thread directly), filters in C++ and calls
 * back once per kernel commit that touched a watched table (or deleted any
 * table), so a storm of foreign changes elsewhere never runs JavaScript.
 */
import type { Family } from './expr.js';
import type { SetElement } from './objects.js';
import type { Op } from './batch.js';
import type { NftConn } from './conn.js';
import { NftSocket, preencoded } from './socket.js';
import { loadAddon, type NativeMonitor } from './addon.js';

export interface MonitorEvent {
  type: 'newtable' | 'deltable' | 'newchain' | 'delchain' | 'newrule' | 'delrule' | 'newset'
    | 'delset' | 'newsetelem' | 'delsetelem' | 'newobj' | 'delobj' | 'newflowtable' | 'delflowtable';
  family: Family;
  table: string;
  /** The chain of a rule event; the name of a chain or set. */
  name?: string;
  handle?: number;
  /** nlmsg_pid of the committing socket. */
  portId: number;
  /** nlmsg_flags: a rule event carries its request's NLM_F_REPLACE (0x100) / NLM_F_APPEND (0x800). */
  flags?: number;
  /** Rule events: NFTA_RULE_POSITION, the handle of the rule before it (add and replace only). */
  position?: number;
  /**
   * Element events (newsetelem, delsetelem): the elements added or deleted, as a dump gives them
   * (key, key end, flags, data or verdict and chain, timeout, expiration, userdata). The kernel
   * notifies one element per event.
   */
  elements?: SetElement[];
  /** An element event whose element list could not be read (its elements are unknown). */
  elementsMalformed?: boolean;
}

/** nlmsg_flags bits of rule events. */
export const NLM_F = { REPLACE: 0x100, APPEND: 0x800 } as const;

export interface MonitorBatch {
  /** Events were lost (ENOBUFS): the receiver must resync from a dump. */
  overflow: boolean;
  /** The generation the commit produced (NFT_MSG_NEWGEN). */
  generation: number;
  /** More than 256 events in one commit; the rest were dropped. */
  truncated: boolean;
  /** Holds an event from a port not in ignorePorts (always, unless ownCommits). */
  foreign?: boolean;
  /**
   * The first generation of the unbroken run of commits the monitor has seen whole up to this
   * one (every NEWGEN, no overflow), or 0: a commit in [since, generation] that was not delivered
   * touched no watched table.
   */
  since?: number;
  events: MonitorEvent[];
  /**
   * The task that committed it, from the commit's NFT_MSG_NEWGEN: NFTA_GEN_PROC_PID (its pid in the
   * kernel's initial pid namespace, the thread's) and NFTA_GEN_PROC_NAME (its comm, at most 15
   * bytes). Absent when the kernel did not say.
   */
  by?: { pid: number; comm?: string };
  /** process.hrtime.bigint()'s clock (ns, as a number) when the monitor read the commit's last datagram. */
  receivedNs?: number;
  /**
   * The monitor's armed repair (Monitor.arm) answered this batch before it was handed over: it
   * committed the re-add of the deleted rule after `position` (0: at the head), guarded by this
   * batch's generation, and the kernel gave the rule `handle` (0: not echoed); or the kernel
   * refused it with `errno` (nothing changed). `committedNs`: receivedNs's clock when its
   * acknowledgements were read.
   */
  repaired?: ({ handle: number } | { errno: number }) & { position: number; committedNs: number };
}

/** What the monitor has read, at once (Monitor.progress). */
export interface MonitorProgress {
  /** The last NEWGEN seen. */
  lastGeneration: number;
  /** The start of the run of commits seen whole up to lastGeneration, or 0. */
  runStart: number;
  /** Batches handed to onBatch so far (overflow reports included), up to lastGeneration. */
  delivered: number;
}

export interface MonitorOptions {
  netns?: string;
  /** Tables to watch; undefined watches everything. */
  tables?: { family: Family; name: string }[];
  /** Port ids whose commits are not worth a wake-up (our own socket's). */
  ignorePorts?: number[];
  /** Deliver commits of ignorePorts too (foreign: false): a mirror learns its own handles from them. */
  ownCommits?: boolean;
  /** The socket's receive buffer in bytes; default 8 MiB (tests make it small to see ENOBUFS). */
  receiveBuffer?: number;
  onBatch: (batch: MonitorBatch) => void;
}

export class Monitor {
  private readonly native: NativeMonitor;
  private closedFlag = false;
  /** progress() as the addon handed it over with the batch being delivered, until anchor(). */
  private during: MonitorProgress | undefined;

  constructor(options: MonitorOptions) {
    const { NftMonitor } = loadAddon();
    this.native = new NftMonitor<MonitorBatch>(options.netns, (b, lastGeneration, runStart, delivered) => {
      if (this.closedFlag) return;
      // While onBatch runs, progress() is what the addon handed over with the batch: nothing is read meanwhile.
      this.during = { lastGeneration, runStart, delivered };
      try {
        options.onBatch(b);
      } finally {
        this.during = undefined;
      }
    }, toPairs(options.tables), options.ignorePorts ?? [], options.ownCommits ?? false,
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

function toPairs(tables: { family: Family; name: string }[] | undefined): [string, string][] | null {
  return tables ? tables.map((t) => [t.family, t.name]) : null;
}
