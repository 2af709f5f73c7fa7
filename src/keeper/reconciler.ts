/**
 * One guarded reconcile pass, the same for the daemon (Keeper.pass) and the
 * one-shot `nfkeeper check`/`apply`: observe the owned tables, diff them with
 * the desired state, plan one batch (retired tables and owner garbage
 * included) and commit it through commitGuarded, observing again after each
 * commit until an observation finds nothing to do. It also keeps what every pass
 * must remember: the tables a reload retired, and whether this kernel took
 * the protect-mode table flags.
 */
import type { Logger } from 'pino';
import { countRules, type TableConfig } from '../model/desired.js';
import { NetlinkError } from '../base/errors.js';
import type { KeeperMetrics } from '../base/metrics.js';
import { Batch } from '../netlink/batch.js';
import type { NftConn } from '../netlink/conn.js';
import type { Family } from '../netlink/expr.js';
import { commitGuarded, type OpenProof } from '../netlink/guard.js';
import { deriveHandles, echoPoints } from '../netlink/handles.js';
import type { ObservedTable } from '../netlink/objects.js';
import { ownedGarbage, type OwnedGarbage } from '../owners/merge.js';
import { PROTECT_FLAGS, diffTable, rulesRemovedBy, type TableDiff } from './table.js';
import { observeTable, writtenDigests, type WrittenDigests } from './observe.js';
import { planTable } from './plan.js';
import { noteTimedAdded, noteTimedSeen, type TimedSeen } from './timed-elements.js';
import type { Drift } from '../model/drift.js';
import { volatileSet } from './owned-table.js';
import { KernelView, since, type HeldRules } from './view.js';
import type { CommitResult } from '../netlink/conn.js';

export interface TableRef {
  family: Family;
  name: string;
}

/** One observation of the kernel: what it holds and how that differs from the desired state. */
export interface Observation {
  generation: number;
  observed: ObservedTable[];
  /** Per desired table, in the input's order: the drift (diffs[i].drift). */
  drift: Drift[][];
  /** Per desired table, in the input's order: the drift and what repairs it (planTable's input). */
  diffs: TableDiff[];
  /** Retired tables still in the kernel: deleted in the same batch as the rest. */
  retired: TableRef[];
  /** Every difference, the retired tables' included. */
  flat: Drift[];
  /** Unclaimed owner chains and tagged rules, when the input names the registered owner ids. */
  garbage?: OwnedGarbage;
  /** The view's rules this observation was taken from (read or not), when it was. */
  known?: HeldRules;
  /** This observation is the known state, not read (no dump, no digests): it proves no more than what that state came from. */
  unread?: boolean;
}

export interface PassInput {
  /** The desired tables, owners merged in. */
  tables: readonly TableConfig[];
  /** Registered owner ids when the config has an owners section: what they do not claim is garbage. */
  ownerIds?: Pick<ReadonlySet<string>, 'has'>;
  /** Observe and diff only (check): the first observation is the result. */
  readOnly?: boolean;
  /** A read-only caller may look at a table another live process owns. */
  allowForeignOwner?: boolean;
  /** The tables as observed, before the diff (which may refuse a table another process owns). */
  onObserved?: (observed: ObservedTable[]) => void;
  /** Every observation, after the diff. */
  onObservation?: (observation: Observation) => void;
  /**
   * For each observation that finds drift before anything was committed: how long
   * to hold the repair back (ms). More than 0 ends the pass 'deferred'.
   */
  holdBack?: (observation: Observation) => number;
  /** After each committed batch, with what the commit showed (CommitResult). */
  onCommitted?: (observation: Observation, ops: number, batch: Batch, echoed: CommitResult | undefined) => void;
  /** Commit with `exprs` (CommitOptions.exprs: the rules' expressions as sent, given to onCommitted). */
  keepExprs?: boolean;
  /** End without a read-back when the commit was provably the only one (commitGuarded's trustSoleCommit). */
  trustSoleCommit?: boolean;
  /**
   * Plan from the kernel view (src/keeper/view.ts) when it proves itself the kernel's state at the
   * generation read, instead of reading the tables: the daemon's passes. Off for one-shot callers.
   */
  useKnown?: boolean;
  /** Keep what a clean observation or a sole commit shows as the known state for later passes (default: useKnown). */
  keepKnown?: boolean;
  /**
   * With useKnown: the safety net's read-back of a trusted commit. The view's rules are confirmed by
   * reading the kernel (rule digests, chains, set definitions, elements unless the view's events
   * vouch for them) even at their own generation, decoding nothing; a full read only if that fails.
   */
  readBack?: boolean;
  /**
   * A sole commit too big to echo is taken in by the next observation at its generation (which then
   * counts as a read of what it wrote), not by this pass: the start-up's install of 100,000 rules
   * need not wait seconds for that read to say it is ready.
   */
  deferUnechoedRead?: boolean;
  /**
   * A one-shot apply: the commit is verified from its echo instead of a read-back, where the echo
   * proves it. The batch was the only commit since its observation (the guard's generation moved by
   * one), the kernel echoed every rule it added with the digest of what it holds
   * (CommitResult.held), each the digest of what was sent (rules without one, an anonymous set's,
   * prove nothing), and the view follows the batch over the observation (followCommit). Anything
   * else (another commit in between, an echo that did not fit or was cut, a rule held otherwise, a
   * commit the view cannot follow) reads the tables back as a pass without it does, and repairs
   * what that finds.
   */
  verifyByEcho?: boolean;
  /**
   * With verifyByEcho: what an earlier full echo proved (src/keeper/held-proof.ts). `held`: every
   * rule of `tables`, as a commit of this build sends it, was echoed held as sent by this kernel
   * build, so the commit asks only the echoes its handles are derived from (echoForHandles, as the
   * daemon's) and takes its rules as held; handles that do not derive read back as without the
   * echo, as do rules whose kernel code is no longer the proof's once the commit loaded it
   * (`confirmed`, asked after the commit). Else the commit asks the full echo, and `proved` is
   * called when it proved every rule of `tables` (the batch added or replaced each one, each echoed
   * held as sent, the view followed it).
   */
  heldProof?: { held: boolean; confirmed: () => boolean; proved: () => void };
  /**
   * A full read compares the kernel's rule digests with the desired rules' (observeTable's adopt)
   * and decodes only the chains that differ: the start-up onto a ruleset an earlier keeper wrote,
   * where nothing is known yet and every chain usually holds its desired rules.
   */
  adopt?: boolean;
  /**
   * With readOnly: end the pass, reading nothing more, when the view's rules were not confirmed and
   * the generation moved since the pass began (status 'moved'). The commit that moved it brings a
   * pass of its own (its event, or the tick finding the generation moved), which reads what this
   * one would have read; a read that only learns what is there (the followed part's seeding read)
   * need not read the whole kernel decoded first and hold the socket, and that pass, meanwhile.
   */
  endWhenMoved?: boolean;
}

export interface PassResult {
  /**
   * in-sync: nothing to do; repaired: committed and verified; deferred: held back; drift: found (readOnly);
   * moved: ended unread, the generation moved (endWhenMoved).
   */
  status: 'in-sync' | 'repaired' | 'deferred' | 'drift' | 'moved';
  /** The pass's first observation: what it found. */
  first: Observation;
  /** Drift of every observation before the first commit went through (what was undone). */
  found: Drift[];
  /** The wait holdBack asked for, when deferred. */
  waitMs?: number;
  ops: number;
  attempts: number;
  /** The generation of the last observation: verified when in-sync or repaired. */
  generation: number;
  /** Repaired and verified by our own commit being the only one, not by a read-back. */
  trusted?: boolean;
  /** The last observation was the known state (no dump): it proves no more than what that state came from. */
  fromKnown?: boolean;
}

export interface ReconcilerOptions {
  /** Reads (each perhaps followed by a commit) per pass. */
  attempts: number;
  metrics?: Pick<KeeperMetrics, 'dumps' | 'generationRetries'>;
  log?: Logger;
  /**
   * Remember which timed elements were installed (DiffOptions.timedSeen), so that one a reload adds is
   * installed and one that expired is not re-added: the daemon. One-shot callers remember nothing.
   */
  trackTimed?: boolean;
  /** What the kernel holds, kept between passes (the daemon's, which also follows the events); default a view of its own. */
  view?: KernelView;
  /**
   * Where the view follows no events (a one-shot apply): the resend proof the guard opens at a
   * pass's first refusal by the generation (GuardOptions.proof), over the pass's tables and the
   * retired ones. Without it, and without events, any commit between the read and the commit
   * refuses the batch, which is planned again.
   */
  proof?: OpenProof;
}

/**
 * What a commit that is not verified by its echo (the daemon's, which asks no digests) asks echoed:
 * only the new rules the others' handles are derived from (src/netlink/handles.ts), a few whatever
 * the batch's size (the start-up's install of 100,000 rules included), so that the known state
 * follows it without reading the chains back. A batch with no new rule to derive from echoes all
 * it has (its replaced rules, none).
 */
function echoForHandles(batch: Batch): true | readonly number[] {
  const points = echoPoints(batch.ops);
  return points.length > 0 ? points : true;
}

export class Reconciler {
  /** Tables a reload dropped from the config: deleted by the next pass that finds them. */
  retired: TableRef[] = [];
  /** False once the kernel refused the protect flags: repair mode from then on. */
  protectSupported = true;
  /** What the kernel holds, as the observations, our commits and the events left it (src/keeper/view.ts). */
  readonly view: KernelView;
  /** The timed elements seen installed (options.trackTimed). */
  private readonly timedSeen?: TimedSeen;

  constructor(readonly conn: NftConn, private readonly options: ReconcilerOptions) {
    if (options.trackTimed) this.timedSeen = new Map();
    this.view = options.view ?? new KernelView();
  }

  /** Enforce protect mode for this table: configured, and the kernel takes the flags. */
  protects(t: TableConfig): boolean {
    return t.protect && this.protectSupported;
  }

  /** `written`: the digests a commit of this pass wrote (a read-back after verifyByEcho could not verify). */
  async once(input: PassInput, written?: () => WrittenDigests): Promise<PassResult> {
    let first: Observation | undefined;
    const found: Drift[] = [];
    let committed = 0;
    let last: { observation: Observation; batch: Batch; echoed?: CommitResult } | undefined;
    // An observation by digest after our commit takes the digests of the rules it wrote from the commit.
    const keepKnown = input.keepKnown ?? input.useKnown ?? input.verifyByEcho;
    const byProof = input.verifyByEcho === true && input.heldProof?.held === true;
    // The commit's full echo proved every rule of the tables (heldProof.proved).
    let provedAll = false;
    type Step = { status: PassResult['status']; observation: Observation; waitMs?: number };
    const resend = this.options.proof;
    const r = await commitGuarded<Step>(this.conn, async (generation) => {
      const observation = await this.observe(input, generation, written?.());
      if (observation === undefined) return { value: { status: 'moved', observation: movedAt(generation) } };
      first ??= observation;
      input.onObservation?.(observation);
      if (observation.flat.length === 0) return { value: { status: committed > 0 ? 'repaired' : 'in-sync', observation } };
      if (input.readOnly) return { value: { status: 'drift', observation } };
      if (committed === 0) {
        found.push(...observation.flat);
        const waitMs = input.holdBack?.(observation) ?? 0;
        if (waitMs > 0) return { value: { status: 'deferred', observation, waitMs } };
      }
      const batch = new Batch();
      // A reload's removals travel in the same transaction as the rest.
      for (const t of observation.retired) batch.delete('table', t);
      input.tables.forEach((t, i) => planTable(batch, t, observation.observed[i]!, observation.diffs[i]!,
        this.protects(t) ? { tableFlags: PROTECT_FLAGS } : {}));
      return {
        value: { status: 'repaired', observation }, batch,
        committed: (echoed?: CommitResult) => {
          if (this.timedSeen) noteTimedAdded(this.timedSeen, batch);
          committed += batch.length;
          // An echo that does not prove the batch held as sent gives no handles to follow it by.
          // An echo that gave some rules' handles: every new rule's, derived from them where they
          // prove it (else none: the chains are read instead, followCommit's unechoed case).
          // Rules held by proof: the modules the commit loaded are the proof's (else read back).
          const confirmed = byProof && input.heldProof!.confirmed();
          if ((byProof || !input.verifyByEcho) && echoed?.handles) {
            echoed = { ...echoed, handles: deriveHandles(batch.ops, echoed.handles), ...(confirmed ? { heldByProof: true as const } : {}) };
          }
          const unproved = input.verifyByEcho && echoed?.handles && (byProof ? !confirmed : !heldAsSent(batch, echoed));
          last = { observation, batch, echoed: unproved ? { ...echoed, handles: undefined } : echoed };
          provedAll = !byProof && input.heldProof !== undefined && !!echoed?.handles && !unproved && committed === batch.length
            && addsEveryRule(batch, input.tables);
          written = echoed?.digests ? writtenLazily(batch, echoed.digests) : undefined;
          this.view.committed(batch);
          input.onCommitted?.(observation, batch.length, batch, echoed);
        },
      };
    }, {
      attempts: this.options.attempts,
      untilClean: true,
      trustSoleCommit: input.trustSoleCommit || input.verifyByEcho,
      onMismatch: () => this.options.metrics?.generationRetries.inc(),
      replan: (e, batch) => this.protectRefused(e, batch),
      // A neighbour's commit to its own table refused the batch: sent again where the events prove
      // the tables it was planned from (the retired ones too) unchanged since (guard.ts): the view's
      // events where it follows them (the daemon's), else a proof opened at the first refusal.
      ...(this.view.follows
        ? { stillHolds: (planned: number, batch: Batch) => this.view.unchangedSince(planned, [...input.tables, ...this.retired, ...batch.tables]) }
        : resend ? { proof: () => resend(this.conn, [...input.tables, ...this.retired]) } : {}),
      echo: byProof ? echoForHandles : input.verifyByEcho || (keepKnown ? echoForHandles : false),
      // Only where a read-back by digest may follow, or the echo is compared with them: not for a
      // caller that trusts a sole commit (the daemon, whose start-up install would hold 100,000
      // digests for nothing at its peak).
      // (Not where the rules are held by proof: nothing compares them.)
      digests: !byProof && input.adopt && !input.readOnly && (!input.trustSoleCommit || input.verifyByEcho),
      exprs: input.keepExprs,
    }).catch((e: unknown) => {
      this.view.forgetRules();
      throw e;
    });
    this.view.passDone();
    if (r.trusted && keepKnown && last) {
      // Our batch was the only commit since the observation it was planned from: the view follows
      // it. A batch whose echo did not fit or was cut: the chains it added rules to are read for
      // their handles (digests, nothing decoded), not every owner's; with deferUnechoedRead by the
      // next observation that finds the kernel still at this generation, not this pass. Not for
      // verifyByEcho, whose read-back compares the digests (below).
      await this.view.followCommit(this.conn, r.generation, input.tables, last.observation.observed, last.batch, last.echoed,
        last.observation.known, input.deferUnechoedRead === true || input.verifyByEcho === true, this.countRead);
    }
    if (r.trusted && input.verifyByEcho && !this.view.rulesExactAt(r.generation, input.tables)) {
      // The echo did not prove the commit: read it back, as a pass without it does.
      const again = await this.once({ ...input, verifyByEcho: false, holdBack: undefined, heldProof: undefined }, written);
      return { ...again, first: first!, found, ops: r.ops + again.ops, attempts: r.attempts + again.attempts,
        status: again.status === 'in-sync' ? 'repaired' : again.status };
    }
    if (provedAll && r.trusted) input.heldProof!.proved();
    const v = r.value;
    return { status: v.status, first: first ?? v.observation, found, waitMs: v.waitMs, ops: r.ops, attempts: r.attempts, generation: r.generation,
      ...(r.trusted ? { trusted: true } : {}), ...(v.observation.unread ? { fromKnown: true } : {}) };
  }

  /** Undefined: ended unread (endWhenMoved). */
  private async observe(input: PassInput, generation: number, written?: WrittenDigests): Promise<Observation | undefined> {
    const conn = this.conn;
    // What the view holds, if it proves itself the kernel's state now (view.ts, heldAt): by the
    // generation, by the events, or by a digest dump that decodes nothing. Else the tables are read.
    let known: HeldRules | undefined;
    let read = false;
    if (input.useKnown) ({ known, read } = await this.view.heldAt(conn, generation, input.tables, input.readBack === true, this.countRead,
      input.readOnly === true && input.endWhenMoved === true));
    else this.view.notHeld();
    // Per table: the view's rules where it holds them, else a read (only the tables it does not hold).
    const toRead = input.tables.filter((t) => !known?.get(t));
    if (input.readOnly && input.endWhenMoved && toRead.length > 0 && conn.generation() !== generation) return undefined;
    const reads = new Map(await Promise.all(toRead.map(async (t) => [t, await observeTable(conn, t.family, t.name, t.chains.map((c) => c.name),
      input.adopt ? t : undefined, written)] as const)));
    if (toRead.length > 0) this.options.metrics?.dumps.inc();
    const observed = input.tables.map((t) => reads.get(t) ?? known!.get(t)!.observed);
    // Sets the kernel changes without a commit (timeouts, the data path's adds): their elements, read now.
    await Promise.all(input.tables.flatMap((t, i) => reads.has(t) ? [] : (t.sets ?? []).filter((x) => volatileSet(x.set)).map(async (x) => {
      const o = observed[i]!;
      const have = o.sets.get(x.name);
      if (!have) return;  // not in the kernel (a reload added it): the diff says so
      o.sets.set(x.name, { set: have.set, elements: await conn.listElements({ family: t.family, table: t.name, set: x.name }) });
    })));
    input.onObserved?.(observed);
    // Only timed sets count here, and those are read at every observation (known or not).
    if (this.timedSeen) noteTimedSeen(this.timedSeen, input.tables, observed);
    const diffs = input.tables.map((t, i) => diffTable(t, observed[i]!,
      { protect: this.protects(t), portId: conn.portId, allowForeignOwner: input.allowForeignOwner, verified: known?.get(t)?.verified,
        verifiedSets: known?.get(t)?.verifiedSets, held: known?.get(t)?.held, timedSeen: this.timedSeen, since: since(known?.get(t), t) }));
    const drift = diffs.map((x) => x.drift);
    const retired = await this.retiredPresent();
    const flat = [...drift.flat(), ...retired.map((t): Drift => ({
      kind: 'table-retired', family: t.family, table: t.name, detail: `table ${t.family} ${t.name} is no longer in the config`,
    }))];
    const garbage = flat.length > 0 && input.ownerIds ? ownedGarbage(input.tables, observed, input.ownerIds, drift,
      (d) => rulesRemovedBy(diffs[input.tables.findIndex((t) => t.family === d.family && t.name === d.table)]!, d)) : undefined;
    // An observation from the view found it clean: only the chains compared again (their desired
    // definition changed) are taken anew, not every owner's rules.
    if (flat.length === 0 && (input.keepKnown ?? input.useKnown)) this.view.fromObservation(generation, input.tables, observed, known);
    // Unread: some tables were the view's, held by the generation or the events, not read now.
    const unread = !read && toRead.length < input.tables.length;
    return { generation, observed, drift, diffs, retired, flat, garbage, ...(known ? { known, unread } : {}) };
  }

  /** A read the view made for an observation (digests, or the chains a commit wrote). */
  private readonly countRead = () => this.options.metrics?.dumps.inc();

  private async retiredPresent(): Promise<TableRef[]> {
    if (this.retired.length === 0) return [];
    const present = [];
    for (const t of this.retired) if (await this.conn.getTable(t.family, t.name)) present.push(t);
    if (present.length === 0) this.retired = [];
    return present;
  }

  /** A kernel without NFT_TABLE_F_OWNER or persist refuses the flags: log once, keep repairing. */
  private protectRefused(e: unknown, batch: Batch): boolean {
    if (!(e instanceof NetlinkError) || e.errnoName !== 'EOPNOTSUPP' || !this.protectSupported) return false;
    const op = batch.ops[e.opIndex];
    if (op?.object !== 'table' || !('flags' in op) || !((op.flags ?? 0) & PROTECT_FLAGS)) return false;
    this.protectSupported = false;
    this.options.log?.warn({ table: `${op.family} ${op.name}` },
      'this kernel does not support owned persistent tables (NFT_TABLE_F_OWNER | persist); protect mode is off, repair mode stays');
    return true;
  }
}

/**
 * The kernel holds every rule `batch` added, inserted or replaced as the commit sent it: the echo
 * gave each one's digest (CommitResult.held), and it is the digest of the bytes sent, not empty. A
 * rule that looks up anonymous sets, by its digest with them unnamed (CommitResult.unnamed): the
 * sets it looks up are the ones the batch created for it, which the rule names by their batch ids.
 */
export function heldAsSent(batch: Batch, echoed: CommitResult): boolean {
  const { held, digests, unnamed } = echoed;
  if (!held || !digests) return false;
  // (indexed: entries() made a pair and an iterator result per op, 10,000 of each at an install)
  const ops = batch.ops;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (op.object !== 'rule' || op.verb === 'delete') continue;
    const sent = digests[i] || unnamed?.[i];
    if (!sent || held[i] !== sent) return false;
  }
  return true;
}

/**
 * `batch` added or replaced every rule of `tables` (a plan adds each desired rule at most once, so
 * as many rule ops as the tables have rules are all of them): what its echo proved covers any later
 * batch of the same tables' rules.
 */
function addsEveryRule(batch: Batch, tables: readonly TableConfig[]): boolean {
  let n = 0;
  for (const op of batch.ops) if (op.object === 'rule' && op.verb !== 'delete' && op.chain !== undefined) n++;
  return n === countRules(tables);
}

/** The digests a commit wrote, mapped by rule only when an observation reads them back (a commit
 * verified by its echo, most of them, never does). */
function writtenLazily(batch: Batch, digests: readonly string[]): () => WrittenDigests {
  let mapped: WrittenDigests | undefined;
  return () => (mapped ??= writtenDigests(batch, digests));
}

/** A pass's result when it ended unread (endWhenMoved): no table observed, nothing found. */
function movedAt(generation: number): Observation {
  return { generation, observed: [], drift: [], diffs: [], retired: [], flat: [] };
}
