/**
 * The one-shot commands, without a loop: `nfkeeper cleanup` (remove the owned tables) and
 * `nfkeeper check`/`apply` (one pass through the same Reconciler as the daemon's).
 */
import type { Logger } from 'pino';
import type { Config } from '../config/config.js';
import type { TableConfig } from '../model/desired.js';
import { Batch } from '../netlink/batch.js';
import type { NftConn, NftHost, NftWatch } from '../netlink/conn.js';
import type { SentRuleExprs } from '../netlink/sent-exprs.js';
import { commitGuarded, type OpenProof } from '../netlink/guard.js';
// From their modules, not the owners' index: that brings the control API's HTTP server and client.
import { mergeOwners } from '../owners/merge.js';
import type { Owner } from '../owners/spec.js';
import { TableOwnedError, protectionOf, type TableDiff } from './table.js';
import type { Drift } from '../model/drift.js';
import { Reconciler, type Observation } from './reconciler.js';
import { KernelView } from './view.js';
import { heldProofFor, type ProofEntry } from './held-proof.js';

/**
 * Removes every table the config owns, in one batch. Returns what was removed. Guarded by the
 * generation its reads were made at, so a table read as ours and then taken over or created again
 * by another process is read again, never deleted unseen; with `proof` (the resend proof, opened at
 * the first refusal) a refusal by another table's commit is sent again as the guard proves it.
 */
export async function cleanup(sock: NftConn, config: Config, options: { proof?: OpenProof } = {}): Promise<string[]> {
  const tables = config.tables.map((t) => ({ family: t.family, name: t.name }));
  const open = options.proof;
  const r = await commitGuarded(sock, async () => {
    const batch = new Batch();
    const removed: string[] = [];
    for (const t of tables) {
      const table = await sock.getTable(t.family, t.name);
      if (table && protectionOf(table, sock.portId) === 'foreign-owner') {
        throw new TableOwnedError(t.family, t.name, table.owner ?? 0);
      }
      if (table) {
        batch.delete('table', t);
        removed.push(`${t.family} ${t.name}`);
      }
    }
    return { value: removed, batch };
  }, { attempts: 20, ...(open ? { proof: () => open(sock, tables) } : {}) });
  return r.value;
}

export interface CheckResult {
  /** What the first observation found, per desired table (owners merged in), with what repairs it (renderDrift's input). */
  drift: { table: TableConfig; drift: Drift[]; diff: TableDiff }[];
  /** Operations applied (0 for check). */
  ops: number;
  /** The kernel refused the protect flags: the tables were applied in repair mode. */
  protectUnsupported: boolean;
  /**
   * With options.proof: 'by-proof' the commit's rules were taken as held by the entry's proof (only
   * the handles' echoes asked); 'proved' its full echo proved every rule and the proof was kept
   * (for an entry stored after the commit: is kept by keepProof).
   */
  held?: 'by-proof' | 'proved';
  /** held 'proved' for an entry stored after the commit (no token yet): keeps the proof for the token its store gave. */
  keepProof?: (token: string) => boolean;
  /** With options.keepExprs: the rules' expressions as the commit sent them, for the compile cache's store after it. */
  sent?: SentRuleExprs;
}

/** A monitor's opener for apply's resend proof: NftHost's watch, or one that loads its module first. */
export type Watcher = (options: Parameters<NftHost['watch']>[0]) => NftWatch | Promise<NftWatch>;

/**
 * One pass without a loop: the drift, and (with apply) the repair, through the
 * same Reconciler as the daemon's passes (guard, retired tables, protect
 * fallback). A one-shot apply creates a protected table owned by its
 * short-lived socket, which leaves it an orphan for the next `run` to claim.
 */
export async function checkOnce(sock: NftConn, config: Config, apply: boolean, owners: readonly Owner[] = [],
  options: {
    retired?: { family: TableConfig['family']; name: string }[]; logger?: Logger;
    /** Given what the first observation found as soon as it is known: before apply's commit (CheckResult.drift). */
    found?: (drift: CheckResult['drift']) => void;
    /**
     * apply of a compile cache entry: where its proof (src/keeper/held-proof.ts) is kept; without a
     * token, an entry stored after the commit (CheckResult.keepProof). Not used with owners (their
     * rules are not the entry's), nor on a connection without kernel code to name.
     */
    proof?: ProofEntry;
    /**
     * apply: opens, at the first batch the generation refuses, the monitor whose events let a later
     * one refused by a neighbour's commit be sent again (tablesProof); it may be a promise (the
     * command line loads the monitor's module then: most applies are never refused). Without it, any
     * commit between the read and the commit refuses it.
     */
    watch?: Watcher;
    /** apply of a config it stores after the commit: the commit keeps its rules' expressions as sent (CheckResult.sent). */
    keepExprs?: boolean;
  } = {}): Promise<CheckResult> {
  // Registered owners are part of the desired state here too, or apply would collect them.
  const tables = mergeOwners(config.tables, config.owners, owners);
  // apply's resend proof, opened by the guard at the first refusal, not before the first read: a
  // member of the group makes the kernel build a notification of every op of our own commit
  // (10,000 NEWRULEs for a 10,000-rule install, ~10 % of a quiet apply's CPU).
  const watch = apply ? options.watch : undefined;
  const reconciler = new Reconciler(sock, { attempts: 20, log: options.logger, ...(watch ? { proof: tablesProof(watch) } : {}) });
  return checkWith(reconciler, sock, config, tables, apply, options);
}

/**
 * The guard's resend proof (GuardOptions.proof) for a writer that follows no events of its own:
 * `apply` (its Reconciler's view follows none), `cleanup`, and foreign GC, whose tables are other
 * programs'. The daemon's passes prove from the view they follow with
 * (FollowedView.unchangedSince); this is the same proof in a view of its own over `tables`, which
 * every plan reads, and the tables the refused batch lies in: a commit that named any of them since
 * the plan fails it.
 *
 * A monitor of `tables`, joined when the guard opens the proof (at the first refusal), anchored at a
 * generation read after joining, so before the next plan reads its generation; each plan's
 * generation anchors it again (`planned`: after an overflow, the next plan's resend has its proof).
 * Each batch it delivers goes to the view's follow(), which notes the tables a commit changed
 * (`setOwned`: noted for the proof, whoever manages them); the view seeds nothing (proofOnly).
 * It is opened unread: nothing reads its socket until a refusal asks for the proof, so a plan no
 * later commit refuses reads and decodes no notification (its own commit's included). Our own
 * commits are not delivered (ignorePorts): they precede the generation any later plan is read at.
 * Undefined where the watcher proves no run of commits (no progress or anchor): no resend then.
 */
export function tablesProof(watch: Watcher): OpenProof {
  return async (conn, tables) => {
    const refs = tables.map((t) => ({ family: t.family, name: t.name }));
    const view = new KernelView();
    const monitor = await watch({ tables: refs, ignorePorts: [conn.portId], unread: true, onBatch: (b) => view.follow(b, conn.portId) });
    if (!monitor.progress || !monitor.anchor) {
      monitor.close();
      return undefined;
    }
    // Right after the open (no turn of the loop, only the await's microtasks, so no batch delivered yet): every batch reaches follow().
    view.setOwned(refs);
    view.followEvents(monitor, () => false, true);
    monitor.anchor(conn.generation(), view.overflows);
    return {
      stillHolds: (planned, batch) => view.unchangedSince(planned, [...refs, ...batch.tables]),
      planned: (generation) => monitor.anchor!(generation, view.overflows),
      close: () => monitor.close(),
    };
  };
}

async function checkWith(reconciler: Reconciler, sock: NftConn, config: Config, tables: TableConfig[], apply: boolean,
  options: Parameters<typeof checkOnce>[4] & object): Promise<CheckResult> {
  // Every observation reads by digest (observeTable's adopt): a chain whose rules' digests are its
  // desired rules' is not decoded and keyed rule by rule, only one that differs (what check prints
  // for it is the same). Apply's commit is verified from its echo (PassInput.verifyByEcho), read
  // back by digest only where the echo does not prove it.
  if (apply) reconciler.retired = [...(options.retired ?? [])];
  const driftOf = (o: Observation) => tables.map((t, i) => ({ table: t, drift: o.drift[i]!, diff: o.diffs[i]! }));
  let first = true;
  const found = options.found;
  const onObservation = (o: Observation) => {
    if (first) found?.(driftOf(o));
    first = false;
  };
  const heldProof = apply && options.proof && !config.owners ? heldProofFor(options.proof, sock.kernelCode?.()) : undefined;
  let sent: SentRuleExprs | undefined;
  const keepExprs = apply && options.keepExprs === true;
  const r = await reconciler.once({ tables, readOnly: !apply, allowForeignOwner: !apply, adopt: true, verifyByEcho: apply,
    ...(found ? { onObservation } : {}), ...(heldProof ? { heldProof } : {}),
    ...(keepExprs ? { keepExprs, onCommitted: (_o: Observation, _n: number, _b: Batch, echoed: { exprs?: SentRuleExprs } | undefined) => { sent = echoed?.exprs ?? sent; } } : {}) });
  const held = heldProof?.wasUsed() && r.ops > 0 && r.trusted ? 'by-proof' : heldProof?.wasProved() ? 'proved' : undefined;
  return {
    drift: driftOf(r.first),
    ops: r.ops,
    protectUnsupported: !reconciler.protectSupported,
    ...(held ? { held } : {}),
    ...(held === 'proved' && options.proof?.token === undefined ? { keepProof: heldProof!.keep } : {}),
    ...(sent ? { sent } : {}),
  };
}
