/**
 * The one-shot commands, without a loop: `nfkeeper cleanup` (remove the owned tables) and
 * `nfkeeper check`/`apply` (one pass through the same Reconciler as the daemon's).
 */
import type { Logger } from 'pino';
import type { Config } from '../config/config.js';
import type { TableConfig } from '../model/desired.js';
import { Batch } from '../netlink/batch.js';
import type { NftConn, NftHost, NftWatch } from '../netlink/conn.js';
// From their modules, not the owners' index: that brings the control API's HTTP server and client.
import { mergeOwners } from '../owners/merge.js';
import type { Owner } from '../owners/spec.js';
import { TableOwnedError, protectionOf, type TableDiff } from './table.js';
import type { Drift } from '../model/drift.js';
import { Reconciler, type Observation } from './reconciler.js';
import { heldProofFor, type ProofEntry } from './held-proof.js';

/** Removes every table the config owns, in one batch. Returns what was removed. */
export async function cleanup(sock: NftConn, config: Config): Promise<string[]> {
  const batch = new Batch();
  const removed: string[] = [];
  for (const t of config.tables) {
    const table = await sock.getTable(t.family, t.name);
    if (table && protectionOf(table, sock.portId) === 'foreign-owner') {
      throw new TableOwnedError(t.family, t.name, table.owner ?? 0);
    }
    if (table) {
      batch.delete('table', { family: t.family, name: t.name });
      removed.push(`${t.family} ${t.name}`);
    }
  }
  await sock.commit(batch);
  return removed;
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
}

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
     * one refused by a neighbour's commit be sent again (followEventsOnce). Without it, any commit
     * between the read and the commit refuses it.
     */
    watch?: NftHost['watch'];
  } = {}): Promise<CheckResult> {
  // Registered owners are part of the desired state here too, or apply would collect them.
  const tables = mergeOwners(config.tables, config.owners, owners);
  // The monitor is opened at the first refusal, not before the first read: a member of the group
  // makes the kernel build a notification of every op of our own commit (10,000 NEWRULEs for a
  // 10,000-rule install, ~10 % of a quiet apply's CPU). Joined then, it proves the plans read after
  // it; the refused batch's plan, read before, is planned again (guard.ts).
  let monitor: NftWatch | undefined;
  let opened = false;
  const watch = apply ? options.watch : undefined;
  const reconciler = new Reconciler(sock, { attempts: 20, log: options.logger, ...(watch ? { onRefused: () => {
    if (opened) return;
    opened = true;
    monitor = followEventsOnce(sock, reconciler, [...tables, ...(options.retired ?? [])], watch);
  } } : {}) });
  // Each plan's generation, read after the join, anchors the monitor's run again: after an overflow
  // (the unread buffer filled under a storm) the next plan's resend has its proof (a no-op otherwise).
  const anchor = watch && ((generation: number) => monitor?.anchor!(generation, reconciler.view.overflows));
  try {
    return await checkWith(reconciler, sock, config, tables, apply, options, anchor);
  } finally {
    monitor?.close();
  }
}

/**
 * A one-shot pass's proof for the guard's resend, the daemon's (Reconciler's stillHolds,
 * FollowedView.unchangedSince): a monitor of the tables the pass owns (desired and retired), joined
 * now (at the first refusal), anchored at a generation read after joining, so before the next plan
 * reads its generation; each batch it delivers goes to the view's follow(), which notes the tables
 * a commit changed. It is opened unread: nothing reads its socket until a refusal asks for the proof
 * (progress()), so a plan no commit refuses reads and decodes no notification (its own commit's
 * included). The view seeds nothing from them (proofOnly): the pass ends after its commit. Our own
 * commits are not delivered (ignorePorts): they precede the generation any later plan is read at.
 * Undefined where the watcher proves no run of commits (no progress or anchor): no resend then.
 */
function followEventsOnce(sock: NftConn, reconciler: Reconciler, owned: readonly { family: TableConfig['family']; name: string }[],
  watch: NftHost['watch']): NftWatch | undefined {
  const view = reconciler.view;
  const refs = owned.map((t) => ({ family: t.family, name: t.name }));
  const monitor = watch({ tables: refs, ignorePorts: [sock.portId], unread: true, onBatch: (b) => view.follow(b, sock.portId) });
  if (!monitor.progress || !monitor.anchor) {
    monitor.close();
    return undefined;
  }
  // Synchronously after the open (no turn of the loop, so no batch delivered yet): every batch reaches follow().
  view.setOwned(refs);
  view.followEvents((now) => (now && monitor.readNow ? monitor.readNow() : monitor.progress!()), () => false, true);
  monitor.anchor(sock.generation(), view.overflows);
  return monitor;
}

async function checkWith(reconciler: Reconciler, sock: NftConn, config: Config, tables: TableConfig[], apply: boolean,
  options: Parameters<typeof checkOnce>[4] & object, anchor?: (generation: number) => void): Promise<CheckResult> {
  // Every observation reads by digest (observeTable's adopt): a chain whose rules' digests are its
  // desired rules' is not decoded and keyed rule by rule, only one that differs (what check prints
  // for it is the same). Apply's commit is verified from its echo (PassInput.verifyByEcho), read
  // back by digest only where the echo does not prove it.
  if (apply) reconciler.retired = [...(options.retired ?? [])];
  const driftOf = (o: Observation) => tables.map((t, i) => ({ table: t, drift: o.drift[i]!, diff: o.diffs[i]! }));
  let first = true;
  const found = options.found;
  const onObservation = (o: Observation) => {
    anchor?.(o.generation);
    if (first) found?.(driftOf(o));
    first = false;
  };
  const heldProof = apply && options.proof && !config.owners ? heldProofFor(options.proof, sock.kernelCode?.()) : undefined;
  const r = await reconciler.once({ tables, readOnly: !apply, allowForeignOwner: !apply, adopt: true, verifyByEcho: apply,
    ...(found || anchor ? { onObservation } : {}), ...(heldProof ? { heldProof } : {}) });
  const held = heldProof?.wasUsed() && r.ops > 0 && r.trusted ? 'by-proof' : heldProof?.wasProved() ? 'proved' : undefined;
  return {
    drift: driftOf(r.first),
    ops: r.ops,
    protectUnsupported: !reconciler.protectSupported,
    ...(held ? { held } : {}),
    ...(held === 'proved' && options.proof?.token === undefined ? { keepProof: heldProof!.keep } : {}),
  };
}
