/**
 * What a change notification holds, as the monitor (monitor.ts) delivers it: the events of one
 * kernel commit, and how far the monitor has read. NftWatch (conn.ts) speaks these too.
 */
import type { Family } from './expr.js';
import type { SetElement } from './objects.js';
import type { Op } from './ops.js';

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
   * The monitor's armed reaction (Monitor.arm) answered this batch before it was handed over:
   * reaction `reaction` (its index in arm()'s list) was committed, guarded by this batch's
   * generation, and the kernel echoed `handles` ([op index, handle] of each rule it added); or the
   * kernel refused it with `errno` (nothing changed). `committedNs`: receivedNs's clock when its
   * acknowledgements were read.
   */
  reacted?: ({ handles: [number, number][] } | { errno: number }) & { reaction: number; committedNs: number };
}

/** An event as a reaction names it (Monitor.arm): what tells it apart in a batch. */
export type EventKey = Pick<MonitorEvent, 'type' | 'family' | 'table' | 'name' | 'handle'>;

/**
 * What the monitor commits, without waking JavaScript first, when another writer's commit shows
 * exactly the events `on` (in order, compared by type, family, table, name and handle): `ops`, as
 * one batch guarded by that commit's generation (Monitor.arm). An undo names one element deletion
 * (a `delsetelem` of a set) and has no ops: it answers a commit whose events are one or more of it
 * (the kernel may send one deletion in several messages), and the monitor commits the deleted
 * elements back, as the kernel reported them, guarded the same way.
 */
export type Reaction = { on: readonly EventKey[]; ops: readonly Op[]; undo?: undefined } | { on: readonly [EventKey]; undo: true; ops?: undefined };

/** What the monitor has read, at once (Monitor.progress). */
export interface MonitorProgress {
  /** The last NEWGEN seen. */
  lastGeneration: number;
  /** The start of the run of commits seen whole up to lastGeneration, or 0. */
  runStart: number;
  /** Batches handed to onBatch so far (overflow reports included), up to lastGeneration. */
  delivered: number;
}

/**
 * A port id whose commits are our own: every one, or ([port, generation]) those up to that
 * generation, for a port our socket left (NftConn.onPortChange): after it, the port is another
 * socket's.
 */
export type IgnoredPort = number | readonly [port: number, upTo: number];

export interface MonitorOptions {
  netns?: string;
  /** Tables to watch; undefined watches everything. */
  tables?: { family: Family; name: string }[];
  /** Port ids whose commits are not worth a wake-up (our own socket's). */
  ignorePorts?: readonly IgnoredPort[];
  /** Deliver commits of ignorePorts too (foreign: false): the followed part takes its own handles from them. */
  ownCommits?: boolean;
  /** The socket's receive buffer in bytes; default 8 MiB (tests make it small to see ENOBUFS). */
  receiveBuffer?: number;
  /**
   * Receive nothing until subscribe(): the kernel builds no notification for this socket before
   * (a big commit's own events cost that commit). What commits came before is the caller's to prove.
   */
  subscribeLater?: boolean;
  /**
   * Joined, but its socket not read until the first progress(): what arrives waits in the receive
   * buffer (an overflow of it is reported then). For a caller that needs the events only to prove
   * something after a refusal (a one-shot apply's resend), so that a pass without one reads none.
   * An addon built before it reads at once.
   */
  unread?: boolean;
  onBatch: (batch: MonitorBatch) => void;
}
