/**
 * The generation guard every writer shares: read the generation, let the
 * caller observe and plan from it, commit with expectGeneration, and on a
 * moved-on ruleset (GenerationMismatchError, nothing changed) start again
 * from a fresh read, a bounded number of times. A plan is therefore never
 * committed over a ruleset it did not see.
 *
 * One exception, as sound: a batch whose every op lies in tables it creates
 * (`create table`, NLM_F_EXCL) is sent without the generation. Chains, sets,
 * objects and rules belong to one table, so such a batch depends on nothing
 * but those tables' absence, which the kernel checks atomically (EEXIST, the
 * batch refused whole, planned again like a moved generation). Commits to
 * other tables meanwhile cannot refuse it.
 *
 * And where the caller follows the change notifications (GuardOptions.stillHolds): a batch refused
 * by the generation is sent again, unplanned, guarded by a later generation at which the caller
 * proves the tables it was planned from unchanged (no commit since the plan's generation named
 * them). A neighbour's commits to its own tables then refuse it only within the short window
 * between that proof and the commit, not within the whole read, plan and encode. A writer that
 * follows no notifications of its own (a one-shot command, the daemon's foreign GC) opens such a
 * proof at its first refusal (GuardOptions.proof).
 */
import { GenerationMismatchError, GenerationRetriesExhaustedError, NetlinkError } from '../base/errors.js';
import type { Batch } from './batch.js';
import type { Op } from './ops.js';
import type { CommitOptions, CommitResult, NftConn } from './conn.js';
import type { Family } from './expr.js';

export interface GuardedStep<T> {
  /** What to commit; none, or an empty batch, ends the loop without a commit. */
  batch?: Batch;
  /** Handed back in the outcome (the last step's). */
  value: T;
  /** Runs once this step's batch is in the kernel; with GuardOptions.echo or digests, with what the commit gave back. */
  committed?: (echoed?: CommitResult) => void;
}

export interface GuardedOutcome<T> {
  value: T;
  /** Reads of the generation, commits that went through included. */
  attempts: number;
  /** Operations committed, over every committed step. */
  ops: number;
  /** The generation the last step was planned from; with `trusted`, the one our commit produced. */
  generation: number;
  /** untilClean ended on trustSoleCommit, not on a clean plan. */
  trusted?: boolean;
}

export interface GuardOptions {
  /** At most this many reads (each followed by a plan and perhaps a commit). */
  attempts: number;
  /**
   * After a commit, plan again from a fresh read and return only once a plan
   * has nothing to commit: the keeper verifies its repair that way. Without
   * it the first commit ends the loop.
   */
  untilClean?: boolean;
  /**
   * With untilClean: after a commit, if the generation moved by exactly one, end as verified
   * without planning again. The guard proved the kernel was at the planned-from generation when
   * the batch applied atomically, and one step means ours was the only commit since, so the
   * kernel holds what the plan saw plus the batch; the read-back would cost as much as the
   * observation (every owned rule) for nothing. A caller must read back later as a safety net.
   */
  trustSoleCommit?: boolean;
  /** Called for each commit refused as stale, before the next attempt (a promise it returns waited for). */
  onMismatch?: (attempt: number) => unknown;
  /**
   * Another refusal the next plan avoids (the caller adjusted its planning,
   * e.g. dropped protect flags the kernel lacks): true plans again.
   */
  replan?: (e: unknown, batch: Batch) => boolean;
  /**
   * Commit with `echo` (the new rules' handles, given to the step's `committed`): always, or as it
   * says for each batch (CommitOptions.echo: every new rule's, or those of some ops).
   */
  echo?: boolean | ((batch: Batch) => boolean | readonly number[]);
  /** Commit with `digests` (each rule's digest of the bytes sent, given to the step's `committed`). */
  digests?: boolean;
  /** Commit with `exprs` (the rules' expressions as sent, given to the step's `committed`). */
  exprs?: boolean;
  /**
   * After a refusal by the generation: a generation after `planned` at which every table `batch`
   * was planned from is, provably, as it was at `planned` (the caller saw every commit since and
   * none named them), or undefined (no proof: plan again from a fresh read). The batch is then sent
   * again as it is, guarded by that generation.
   */
  stillHolds?: (planned: number, batch: Batch) => Promise<number | undefined>;
  /**
   * Instead of stillHolds, for a writer that follows no change notifications: opened at the first
   * refusal by the generation (a member of the group costs every commit of ours a notification per
   * op, so none before it is needed), then the stillHolds of every later refusal. It proves only
   * plans whose generation was read after it joined, so the refused plan is planned again; each
   * later plan's generation is given to `planned`. Closed when the loop ends.
   */
  proof?: () => ResendProof | undefined | Promise<ResendProof | undefined>;
}

/**
 * What proves a refused batch's tables unchanged since its plan (GuardOptions.stillHolds) for a
 * writer with no followed view of its own: a monitor of those tables, joined when it was opened.
 */
export interface ResendProof {
  stillHolds(planned: number, batch: Batch): Promise<number | undefined>;
  /** A plan's generation, read after the proof was opened (anchors the monitor's run again after an overflow). */
  planned(generation: number): void;
  close(): void;
}

/** Opens a ResendProof over `tables` (every table the writer's plans read) for commits on `conn`; undefined where the watcher proves nothing. */
export type OpenProof = (conn: NftConn, tables: readonly { family: Family; name: string }[]) => ResendProof | undefined | Promise<ResendProof | undefined>;

/** Sends of one planned batch at most, each refused by a neighbour's commit and proved unaffected by it. */
export const RESENDS_PER_PLAN = 50;

export async function commitGuarded<T>(conn: NftConn, plan: (generation: number, attempt: number) => Promise<GuardedStep<T>>,
  options: GuardOptions): Promise<GuardedOutcome<T>> {
  let ops = 0;
  let last: GenerationMismatchError | undefined;
  let proof: ResendProof | undefined;
  let opened = false;
  const open = options.proof;
  const stillHolds = options.stillHolds ?? (open && (async (planned: number, batch: Batch) => {
    if (opened) return proof?.stillHolds(planned, batch);
    // Joined now: it proves the plans read from here on, not this one.
    opened = true;
    proof = await open();
    return undefined;
  }));
  try {
    for (let attempt = 1; attempt <= options.attempts; attempt++) {
      const generation = conn.generation();
      proof?.planned(generation);
      const step = await plan(generation, attempt);
      if (!step.batch || step.batch.length === 0) return { value: step.value, attempts: attempt, ops, generation };
      const sent = await sendGuarded(conn, step.batch, generation, {
        echo: typeof options.echo === 'function' ? options.echo(step.batch) : options.echo,
        digests: options.digests, exprs: options.exprs, stillHolds, onMismatch: () => options.onMismatch?.(attempt), replan: options.replan,
      });
      if (sent.refused) last = sent.refused;
      if (sent.at === undefined) continue;
      const guardAt = sent.at;
      const echoed = sent.echoed;
      ops += step.batch.length;
      step.committed?.(echoed);
      if (!options.untilClean) return { value: step.value, attempts: attempt, ops, generation: guardAt };
      if (options.trustSoleCommit) {
        const after = conn.generation();
        if (after === guardAt + 1) return { value: step.value, attempts: attempt, ops, generation: after, trusted: true };
      }
    }
    throw new GenerationRetriesExhaustedError(options.attempts, last);
  } finally {
    proof?.close();
  }
}

export interface SendOptions {
  echo?: CommitOptions['echo'];
  digests?: boolean;
  exprs?: boolean;
  /** GuardOptions.stillHolds: a later generation the batch provably still holds at, for a resend. */
  stillHolds?: (planned: number, batch: Batch) => Promise<number | undefined>;
  /** Called for each refusal by the generation (or a table the batch creates appearing); a promise it returns is waited for. */
  onMismatch?: () => unknown;
  /** GuardOptions.replan: another refusal that a new plan avoids. */
  replan?: (e: unknown, batch: Batch) => boolean;
}

/**
 * One planned batch's send: guarded by `generation` (none for a batch that creates all its tables),
 * and after a refusal by the generation sent again as encoded, guarded by a later generation
 * stillHolds proves the plan at, at most RESENDS_PER_PLAN times. `at`: the generation it went through
 * at (undefined: refused, plan again; `refused`, the last refusal by the generation). Other errors
 * are thrown. Every writer that plans from a generation sends its batch so: the full pass through
 * commitGuarded, the follow pass from the events' generation.
 */
export async function sendGuarded(conn: NftConn, batch: Batch, generation: number, options: SendOptions = {}):
  Promise<{ at?: number; echoed?: CommitResult; refused?: GenerationMismatchError }> {
  const creates = batch.createsAll;
  // The generation the batch is guarded by: the plan's, or a later one at which it provably still holds (stillHolds).
  let guardAt = generation;
  let resent = 0;
  let refused: GenerationMismatchError | undefined;
  for (;;) {
    try {
      // A resend goes as it was encoded (recommit), so that the window between the proof of
      // guardAt and the kernel's check holds no encode; else (none kept) it is encoded again.
      const again = resent > 0 && conn.recommit ? await conn.recommit(batch, guardAt) : false;
      if (again !== false) return { at: guardAt, echoed: again || undefined, refused };
      const echoed = await conn.commit(batch, { ...(creates ? {} : { expectGeneration: guardAt }), ...(options.echo ? { echo: options.echo } : {}),
        ...(options.digests ? { digests: true } : {}), ...(options.exprs ? { exprs: true } : {}) });
      return { at: guardAt, echoed: echoed || undefined, refused };
    } catch (e) {
      if (e instanceof GenerationMismatchError || (creates && tableAppeared(e, batch.ops))) {
        if (e instanceof GenerationMismatchError) refused = e;
        // (waited for only where it returns a promise: a one-shot apply's monitor joins there, before the next plan's read)
        const told = options.onMismatch?.();
        if (told instanceof Promise) await told;
        if (e instanceof GenerationMismatchError && options.stillHolds && resent < RESENDS_PER_PLAN) {
          const at = await options.stillHolds(generation, batch);
          if (at !== undefined && at > guardAt) {
            guardAt = at;
            resent++;
            continue;  // only commits to other tables came in between: the plan stands
          }
        }
        return { refused };  // someone committed between our read and our write (or created our table): read again
      }
      if (options.replan?.(e, batch)) return { refused };
      throw e;
    }
  }
}

/** The kernel refused a `create table` of the batch: the table exists now (it appeared since the plan). */
function tableAppeared(e: unknown, ops: readonly Op[]): boolean {
  if (!(e instanceof NetlinkError) || e.errnoName !== 'EEXIST') return false;
  const op = ops[e.opIndex];
  return op?.object === 'table' && op.verb === 'create';
}
