/**
 * Change notifications from the NFNLGRP_NFTABLES multicast group. The addon
 * filters them on its own thread and calls back once per kernel commit that
 * touched a watched table (or deleted any table), so a storm of foreign
 * changes elsewhere never wakes JavaScript.
 */
import type { Family } from './expr.js';
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
}

export interface MonitorBatch {
  /** Events were lost (ENOBUFS): the receiver must resync from a dump. */
  overflow: boolean;
  /** The generation the commit produced (NFT_MSG_NEWGEN). */
  generation: number;
  /** More than 256 events in one commit; the rest were dropped. */
  truncated: boolean;
  events: MonitorEvent[];
}

export interface MonitorOptions {
  netns?: string;
  /** Tables to watch; undefined watches everything. */
  tables?: { family: Family; name: string }[];
  /** Port ids whose commits are not worth a wake-up (our own socket's). */
  ignorePorts?: number[];
  onBatch: (batch: MonitorBatch) => void;
}

export class Monitor {
  private readonly native: NativeMonitor;
  private closedFlag = false;

  constructor(options: MonitorOptions) {
    const { NftMonitor } = loadAddon();
    this.native = new NftMonitor(options.netns, (b) => {
      if (!this.closedFlag) options.onBatch(b as MonitorBatch);
    }, toPairs(options.tables), options.ignorePorts ?? []);
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
