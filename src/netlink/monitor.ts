/**
 * Change notifications from the NFNLGRP_NFTABLES multicast group. The addon
 * reads the socket when the event loop polls it (no reader thread: the
 * kernel's notification wakes this thread directly), filters in C++ and calls
 * back once per kernel commit that touched a watched table (or deleted any
 * table), so a storm of foreign changes elsewhere never runs JavaScript.
 */
import type { Family } from './expr.js';
import type { SetElement } from './objects.js';
import type { IgnoredPort, MonitorBatch, MonitorEvent, MonitorOptions, MonitorProgress, Reaction } from './events.js';
import type { NftConn } from './conn.js';
import { NftSocket, preencoded } from './socket.js';
import { loadAddon, type NativeMonitor } from './addon.js';

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
    options.receiveBuffer, options.subscribeLater ?? false, options.unread ?? false);
  }

  /**
   * Joins the change notifications (a monitor opened with subscribeLater; once subscribed, nothing
   * changes): commits after this reach it. The caller anchors with a generation read after this.
   * An addon built before it subscribed at open.
   */
  subscribe(): void {
    this.native.subscribe?.();
  }

  /**
   * What the monitor has read so far (no system call: what it has not read yet, it has not seen).
   * Opened unread: from the first call on, the socket is read (the next turn of the loop).
   */
  progress(): MonitorProgress {
    if (this.during) return this.during;
    const [lastGeneration, runStart, delivered] = this.native.progress();
    return { lastGeneration, runStart, delivered };
  }

  /**
   * progress() after reading, without blocking, what the socket holds now, its batches handed to
   * onBatch first: at the kernel's generation, or a commit or two behind one in progress, with no
   * turn of the loop. Inside onBatch (the batches of a wake-up still being handed over), or from an
   * addon built before it, progress() as it stands.
   */
  readNow(): MonitorProgress {
    if (this.during || !this.native.readNow || this.closedFlag) return this.progress();
    const [lastGeneration, runStart, delivered] = this.native.readNow();
    return { lastGeneration, runStart, delivered };
  }

  /**
   * Tells the monitor a generation read after it subscribed and after the caller handled
   * `overflowsSeen` overflow reports: every later commit reaches it whole, and progress().runStart
   * and the batches' `since` say so from then on (ignored if another overflow came meanwhile, and
   * before subscribe() of a monitor opened with subscribeLater: it has seen no commit).
   */
  anchor(generation: number, overflowsSeen: number): void {
    this.during = undefined;
    this.native.anchor(generation, overflowsSeen);
  }

  /**
   * The caller knows its own commit that made `generation` from the commit itself (the kernel's
   * echo of its new rules): that commit's batch, of ignored ports' events only, is neither handed
   * to onBatch nor counted in progress().delivered, so it wakes no JavaScript. Ignored for a
   * generation the monitor has read already (it was handed over) and by an addon built before it.
   */
  skipOwn(generation: number): void {
    this.native.skipOwn?.(generation);
  }

  /**
   * Hands the monitor reactions prepared by the caller (native/monitor.cc, Arm), valid while the
   * watched tables are as they were at `generation`. The first batch after `generation` that
   * touches a watched table (every commit since seen whole) ends the arm; when it is another
   * writer's and its events are exactly one reaction's `on`, that reaction's ops are committed on
   * `socket` (guarded by the batch's generation, echoed) before the batch is handed over with
   * `reacted`; an undo's commit adds back the elements its one element deletion removed. The monitor knows nothing of what the ops mean: which commits to answer, and how,
   * is the caller's. False (nothing armed) with no reactions, a socket other than an NftSocket, or
   * an addon built before it.
   */
  arm(socket: NftConn, generation: number, reactions: readonly Reaction[]): boolean {
    if (this.native.arm === undefined || this.closedFlag || !(socket instanceof NftSocket) || socket.closed) return false;
    return this.native.arm(socket.nativeSocket, generation,
      reactions.map((r) => (r.undo ? { on: r.on, undo: true } : { on: r.on, ops: r.ops, exprs: preencoded(r.ops) })));
  }

  /** Forgets the armed reactions (arm): every batch is JavaScript's to answer again. */
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

  setFilter(tables: { family: Family; name: string }[] | undefined, ignorePorts: readonly IgnoredPort[] = []): void {
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
