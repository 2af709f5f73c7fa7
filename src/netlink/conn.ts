/**
 * The netlink surface the keeper, the reconciler and GC use, as interfaces:
 * NftConn is what a commit socket offers (NftSocket implements it), NftWatch
 * what a change monitor offers, and NftHost opens both in one network
 * namespace. The real kernel is kernelHost() (host.ts); tests can hand the same
 * modules an in-memory kernel (test/helpers/fake-kernel.ts).
 */
import type { KernelCode } from './kernel-code.js';
import type { Batch } from './batch.js';
import type { Op } from './ops.js';
import type { Family } from './expr.js';
import type { IgnoredPort, MonitorOptions, MonitorProgress, Reaction } from './events.js';
import type { Chain, ChainDigests, NftObj, NftSet, Rule, SetElement, Table } from './objects.js';
import type { SentRuleExprs } from './sent-exprs.js';

export interface CommitOptions {
  /** Refuse (GenerationMismatchError, nothing changed) unless the ruleset is still at this generation. */
  expectGeneration?: number;
  /**
   * Ask the kernel to echo the batch's new rules (NLM_F_ECHO) and resolve with their handles, so
   * the caller knows what it wrote without a dump; with `digests` too, with each echoed rule's
   * digest (held). Where the receive buffer cannot be made to hold every echo (no CAP_NET_ADMIN
   * past rmem_max, a receiveBufferLimit), the batch commits the same without handles; where the
   * kernel dropped echoes all the same (ENOBUFS after the batch went through), without handles and
   * with echoCut. An in-memory kernel that does not echo gives no handles either. A list of op
   * indices: only those ops' new rules are echoed (the handles of the others derived from them,
   * src/netlink/handles.ts).
   */
  echo?: boolean | readonly number[];
  /**
   * Resolve with each rule's digest (objects.ts Rule.digest) of the bytes the commit sent for it:
   * what a digest dump of that rule gives when the kernel holds it as sent. An in-memory kernel may
   * not compute them.
   */
  digests?: boolean;
  /**
   * Resolve with each rule's expressions as the commit sent them (CommitResult.exprs): what
   * encodeRuleExprs gives for them, without encoding them again (the compile cache's store after
   * the daemon's start-up install). An in-memory kernel, or an addon built before, gives none.
   */
  exprs?: boolean;
}

/** What a commit with `echo`, `digests` or `exprs` showed, by op index. */
export interface CommitResult {
  /** With echo, the kernel handle of each added, inserted or replaced rule (none: the echo did not fit, or was cut). */
  handles?: ReadonlyMap<number, number>;
  /**
   * With echo and digests, per op index, the digest of the rule the kernel echoed for it: what a
   * digest dump of it gives (equal to `digests` where the kernel holds the rule as sent); for a
   * rule that looks up anonymous sets, its digest with those sets unnamed (equal to `unnamed`).
   */
  held?: string[];
  /** The batch committed, but the kernel dropped some of its echoes (no handles). */
  echoCut?: true;
  /** With digests, each rule op's digest ('' for other ops and for rules without one). */
  digests?: string[];
  /**
   * With digests, per op index, for a rule without a digest because it looks up anonymous sets:
   * its digest with those sets unnamed (native/digest.h), what `held` gives for it where the
   * kernel holds it as sent, bound to the sets its batch created for it. Never a dump's digest.
   */
  unnamed?: (string | undefined)[];
  /**
   * Set by the caller, not the connection: the batch's rules are held as sent by proof, not by this
   * echo (an earlier full echo of the same compile cache entry on the same kernel build,
   * src/keeper/held-proof.ts); its rules that look up anonymous sets are then held with the sets
   * the batch created for them, as `unnamed` against `held` would have shown.
   */
  heldByProof?: true;
  /** With exprs: the rules' expressions as sent, by their expression lists (SentRuleExprs). */
  exprs?: SentRuleExprs;
}

/** A port id the connection left, and the last generation that can hold a commit of ours on it. */
export interface PortLeft {
  port: number;
  upTo: number;
}

export interface NftConn {
  /** Netlink port id: the owner of tables this connection creates in protect mode, and the pid of its events. */
  readonly portId: number;
  /**
   * Calls `f` with the new port id when the connection has moved to another one (NftSocket: the
   * socket replaced to end an interrupted dump, its old port taken meanwhile), before the call
   * that moved it settles: whoever keeps the id (the monitor's ignorePorts) takes the new one.
   * `left`: the old port, and the generation up to which its commits were ours (after it, the
   * port is the socket's that kept it).
   */
  onPortChange?(f: (portId: number, left: PortLeft) => void): void;
  readonly closed: boolean;
  /** The ruleset generation id; moves on every commit by anyone that changed something. */
  generation(): number;
  /**
   * The generation id when the connection is free now; undefined while a dump or commit holds it
   * (instead of waiting for it, as generation() does).
   */
  generationIfFree?(): number | undefined;
  /**
   * The namespace's cookie (SO_NETNS_COOKIE), unique among one boot's namespaces: what a restart
   * record names the namespace by. Undefined where the kernel or the connection has none.
   */
  netnsCookie?(): string | undefined;
  /**
   * The kernel code that translates this connection's batches (vmlinux's and the loaded netfilter
   * modules' build-ids, or the boot: src/netlink/kernel-code.ts): what an echo's proof that a batch
   * was held as sent holds for (src/keeper/held-proof.ts). Undefined where there is none to name
   * (an in-memory kernel).
   */
  kernelCode?(): KernelCode | undefined;
  listTables(filter?: { family?: Family }): Promise<Table[]>;
  getTable(family: Family, name: string): Promise<Table | undefined>;
  listChains(filter: { family: Family; table: string }): Promise<Chain[]>;
  getChain(family: Family, table: string, name: string): Promise<Chain | undefined>;
  /** With `digests`, each rule carries its digest (objects.ts Rule.digest) where the kernel connection computes them. */
  listRules(filter: { family: Family; table: string; chain?: string; digests?: boolean }): Promise<Rule[]>;
  /**
   * Handles and digests of a table's rules, without decoding them (µs per rule): how the keeper
   * confirms that rules it decoded before are still there, unchanged. Optional (an in-memory
   * kernel may lack it; callers then decode). With `once`, a dump a concurrent commit interrupts
   * throws DumpInterruptedError at once, not retried: for a caller that has no use for the ruleset
   * once it moved.
   */
  listRuleDigests?(filter: { family: Family; table: string; chain?: string; once?: boolean }): Promise<ChainDigests[]>;
  listSets(filter: { family: Family; table: string }): Promise<NftSet[]>;
  listElements(filter: { family: Family; table: string; set: string }): Promise<SetElement[]>;
  /** A table's named stateful objects. Optional (an in-memory kernel may lack it; tables with objects then cannot be kept). */
  listObjs?(filter: { family: Family; table: string }): Promise<NftObj[]>;
  /**
   * One transaction: all operations or none. Refusals are a
   * GenerationMismatchError (stale expectGeneration) or a NetlinkError naming
   * the failing op's index.
   */
  commit(batch: Batch | readonly Op[], options?: CommitOptions): Promise<void | CommitResult>;
  /**
   * commit() of a small batch at once, on this thread, without a promise: the outcome is returned,
   * a refusal thrown (the same errors). False, with nothing sent, when it cannot run so (a big
   * batch, or the connection busy with a dump or commit): commit() then. Optional (an in-memory
   * kernel may lack it).
   */
  commitNow?(batch: Batch | readonly Op[], options?: CommitOptions): void | CommitResult | false;
  /**
   * `batch`, which the kernel has just refused by its expectGeneration (commit()), sent again as it
   * was encoded (with its options), guarded by `generation` instead: nothing is encoded between
   * the caller's choice of the generation and the send. False, nothing sent, when the connection
   * does not keep that batch (another commit since): commit() it then. Optional.
   */
  recommit?(batch: Batch | readonly Op[], generation: number): Promise<void | CommitResult | false>;
  close(): void;
}

/** Change notifications as the keeper consumes them (Monitor implements it). */
export interface NftWatch {
  setFilter(tables: { family: Family; name: string }[] | undefined, ignorePorts?: readonly IgnoredPort[]): void;
  close(): void;
  /** What the watcher has seen (the kernel monitor has it; a watcher without it follows nothing). */
  progress?(): MonitorProgress;
  /** progress() after reading what the watcher's socket holds now, its batches delivered first (Monitor.readNow). */
  readNow?(): MonitorProgress;
  anchor?(generation: number, overflowsSeen: number): void;
  /**
   * Joins the change notifications of a watcher opened with `subscribeLater` (Monitor.subscribe).
   * Absent: the watcher was subscribed when opened.
   */
  subscribe?(): void;
  /** Our own commit that made `generation` is known already: its batch need not be delivered (Monitor.skipOwn). */
  skipOwn?(generation: number): void;
  /**
   * Reactions to another writer's next commit, committed by the watcher itself on `conn` when that
   * commit's events are exactly one reaction's (Monitor.arm). Optional: false, nothing armed, where
   * the watcher or the connection cannot (an in-memory kernel, an older addon).
   */
  arm?(conn: NftConn, generation: number, reactions: readonly Reaction[]): boolean;
  disarm?(): void;
  /** Answers nothing until resume() (Monitor.pause). */
  pause?(): void;
  /** Armed again with the last arm() if it still holds (Monitor.resume). */
  resume?(): boolean;
}

/** Opens connections and monitors in one network namespace. */
export interface NftHost {
  connect(): NftConn;
  watch(options: Omit<MonitorOptions, 'netns'>): NftWatch;
}
