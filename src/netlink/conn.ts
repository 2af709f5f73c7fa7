/**
 * The netlink surface the keeper, the reconciler and GC use, as interfaces:
 * NftConn is what a commit socket offers (NftSocket implements it), NftWatch
 * what a change monitor offers, and NftHost opens both in one network
 * namespace. The real kernel is kernelHost() (host.ts); tests can hand the same
 * modules an in-memory kernel (test/helpers/fake-kernel.ts).
 */
import type { Batch, Op } from './batch.js';
import type { Family } from './expr.js';
import type { MonitorOptions } from './monitor.js';
import type { Chain, NftSet, Rule, SetElement, Table } from './objects.js';

export interface CommitOptions {
  /** Refuse (GenerationMismatchError, nothing changed) unless the ruleset is still at this generation. */
  expectGeneration?: number;
}

/** What commitEchoed learnt: the kernel handle of each added, inserted or replaced rule, by op index. */
export interface CommitResult {
  handles: Map<number, number>;
}

export interface NftConn {
  /** Netlink port id: the owner of tables this connection creates in protect mode, and the pid of its events. */
  readonly portId: number;
  readonly closed: boolean;
  /** The ruleset generation id; moves on every commit by anyone that changed something. */
  generation(): number;
  listTables(filter?: { family?: Family }): Promise<Table[]>;
  getTable(family: Family, name: string): Promise<Table | undefined>;
  listChains(filter: { family: Family; table: string }): Promise<Chain[]>;
  getChain(family: Family, table: string, name: string): Promise<Chain | undefined>;
  listRules(filter: { family: Family; table: string; chain?: string }): Promise<Rule[]>;
  listSets(filter: { family: Family; table: string }): Promise<NftSet[]>;
  listElements(filter: { family: Family; table: string; set: string }): Promise<SetElement[]>;
  /**
   * One transaction: all operations or none. Refusals are a
   * GenerationMismatchError (stale expectGeneration) or a NetlinkError naming
   * the failing op's index.
   */
  commit(batch: Batch | readonly Op[], options?: CommitOptions): Promise<void>;
  /**
   * commit(), asking the kernel to echo the batch's new rules (NLM_F_ECHO) so the caller learns
   * their handles without a dump. Small batches only (up to 64 messages, those that ask for every
   * ack); a bigger one commits the same and resolves undefined. Optional: an in-memory kernel may
   * lack it, and callers then read back instead.
   */
  commitEchoed?(batch: Batch, options?: CommitOptions): Promise<CommitResult | undefined>;
  close(): void;
}

/** Change notifications as the keeper consumes them (Monitor implements it). */
export interface NftWatch {
  setFilter(tables: { family: Family; name: string }[] | undefined, ignorePorts?: number[]): void;
  close(): void;
}

/** Opens connections and monitors in one network namespace. */
export interface NftHost {
  connect(): NftConn;
  watch(options: Omit<MonitorOptions, 'netns'>): NftWatch;
}
