/**
 * Change notifications from the NFNLGRP_NFTABLES multicast group. The addon
 * reads the socket when the event loop polls it (no reader thread: the
 * kernel's notification wakes this thread directly), filters in C++ and calls
 * back once per kernel commit that touched a watched table (or deleted any
 * table), so a storm of foreign changes elsewhere never runs JavaScript.
 */
import type { Family } from './expr.js';
import type { SetElement } from './objects.js';
import type { NativeMonitor } from './native.js';
import { loadAddon } from '../native.js';

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
  /** process.hrtime.bigint()'s clock (ns, as a number) when the monitor read the commit's last datagram. */
  receivedNs?: number;
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

  constructor(options: MonitorOptions) {
    const { NftMonitor } = loadAddon();
    this.native = new NftMonitor(options.netns, (b) => {
      if (!this.closedFlag) options.onBatch(b as MonitorBatch);
    }, toPairs(options.tables), options.ignorePorts ?? [], options.ownCommits ?? false,
    options.receiveBuffer);
  }

  /** What the monitor has read so far (no system call: what it has not read yet, it has not seen). */
  progress(): MonitorProgress {
    const [lastGeneration, runStart, delivered] = this.native.progress();
    return { lastGeneration, runStart, delivered };
  }

  /**
   * Tells the monitor a generation read after it subscribed and after the caller handled
   * `overflowsSeen` overflow reports: every later commit reaches it whole, and progress().runStart
   * and the batches' `since` say so from then on (ignored if another overflow came meanwhile).
   */
  anchor(generation: number, overflowsSeen: number): void {
    this.native.anchor(generation, overflowsSeen);
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
