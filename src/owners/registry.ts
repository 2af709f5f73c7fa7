/**
 * The registered owners. Changes are queued and applied in groups: every
 * change waiting when a group starts goes into one state-file write and one
 * guarded kernel batch (through Keeper.setOwners), so a thousand concurrent
 * PUTs cost a handful of writes and batches, not a thousand. A change is
 * answered only once it is durable on disk and committed in the kernel. If
 * the kernel refuses a group, the previous owners are put back (state file
 * and kernel) and every change of the group is refused with the reason.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../config/config.js';
import { NfkeeperError } from '../errors.js';
import { OwnersState, ownersTable, type JournalChange } from './state.js';
import { compileOwner, specKey, validateOwnerId, type Owner } from './spec.js';

/** The default owner limit: ten times the largest registration the tests and bench run. */
export const MAX_OWNERS = 10_000;

export type Apply = (owners: readonly Owner[]) => Promise<void>;

/** The kernel (or the state file) refused a change; nothing of it stayed. */
export class OwnerApplyError extends NfkeeperError {
  override name = 'OwnerApplyError';
  constructor(readonly refusal: unknown) {
    super(`the change was not applied, the previous owners stay in force: ${(refusal as Error).message ?? String(refusal)}`);
  }
}

/** A registration that would take all owners together past owners.limits; nothing of it was applied. */
export class OwnerLimitError extends NfkeeperError {
  override name = 'OwnerLimitError';
  constructor(readonly limit: 'rules' | 'bytes', readonly total: number, readonly max: number, readonly own: number) {
    super(`owners would hold ${total.toLocaleString('en-US')} ${limit} in all with this one (${own.toLocaleString('en-US')}), `
      + `past owners.limits.${limit} (${max.toLocaleString('en-US')}); remove or shrink an owner first`);
  }
}

type Change = { kind: 'put'; owner: Owner } | { kind: 'delete'; id: string };
interface Queued {
  change: Change;
  resolve: (r: { existed: boolean; changed: boolean }) => void;
  reject: (e: unknown) => void;
}

const byId = (a: Owner, b: Owner) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Where `id` is, or would go, in a list sorted by id. */
function indexOf(list: readonly Owner[], id: string): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid]!.id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * `sorted` with a group's changes (null: removed), as a new list made in one walk and allocated
 * once: a copy then spliced grew the copy again for an insertion (1,000 owners: 16 KiB a group).
 */
function applyStaged(sorted: readonly Owner[], staged: ReadonlyMap<string, Owner | null>): Owner[] {
  const changes = [...staged].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  let size = sorted.length;
  const at = changes.map(([id, owner]) => {
    const i = indexOf(sorted, id);
    const present = sorted[i]?.id === id;
    if (owner === null && present) size--;
    else if (owner !== null && !present) size++;
    return { i, present };
  });
  const out: Owner[] = new Array(size);
  let n = 0;
  let from = 0;
  changes.forEach(([, owner], k) => {
    const { i, present } = at[k]!;
    while (from < i) out[n++] = sorted[from++]!;
    if (present) from++;
    if (owner !== null) out[n++] = owner;
  });
  while (from < sorted.length) out[n++] = sorted[from++]!;
  return out;
}

export class OwnerRegistry {
  private owners = new Map<string, Owner>();
  /**
   * The same owners sorted by id: what the keeper is given (mergeOwners then needs no sort). A
   * group makes its next list from it by insertions and removals, and `owners` is changed in place
   * once the group is applied: copying the map and sorting for every registration was O(owners).
   */
  private sorted: readonly Owner[] = [];
  private queue: Queued[] = [];
  /** A drain loop is alive and will look at the queue again before it ends. */
  private working = false;
  private config: Config;
  private state?: OwnersState;
  /** Groups committed; a test and the logs use it to see the grouping. */
  groups = 0;
  /** Rules and bytes of the registered owners (Owner.rules, Owner.bytes), against owners.limits. */
  private total = { rules: 0, bytes: 0 };

  /** Registered owners at most; a PUT of a new id beyond it is refused (409). */
  readonly maxOwners: number;

  constructor(config: Config, owners: readonly Owner[], private readonly apply: Apply, options: { maxOwners?: number } = {}) {
    this.maxOwners = options.maxOwners ?? MAX_OWNERS;
    this.config = config;
    ownersTable(config);
    for (const o of owners) this.owners.set(o.id, o);
    this.sorted = [...this.owners.values()].sort(byId);
    for (const o of this.owners.values()) {
      this.total.rules += o.rules;
      this.total.bytes += o.bytes;
    }
  }

  /** Rules and bytes all registered owners hold. */
  get totals(): { rules: number; bytes: number } {
    return { ...this.total };
  }

  get stateFile(): string {
    return this.config.owners!.state;
  }

  list(): Owner[] {
    return [...this.sorted];
  }

  get(id: string): Owner | undefined {
    return this.owners.get(id);
  }

  /** No room for another owner, counting the new ones waiting in the queue. */
  get full(): boolean {
    const pending = new Set<string>();
    for (const q of this.queue) if (q.change.kind === 'put' && !this.owners.has(q.change.owner.id)) pending.add(q.change.owner.id);
    return this.owners.size + pending.size >= this.maxOwners;
  }

  get size(): number {
    return this.owners.size;
  }

  /** Folds the state journal into the file (the daemon stopping), so the file alone holds every owner. */
  close(): void {
    if (!this.state) return;
    try {
      if (this.state.journaling) this.state.compact(this.owners.values());
    } finally {
      this.state.close();
      this.state = undefined;
    }
  }

  /** Validates against the current config (throws OwnerSpecError, synchronously), then queues. */
  put(id: unknown, body: unknown): Promise<{ existed: boolean; changed: boolean }> {
    const { oc, table } = ownersTable(this.config);
    const owner = compileOwner(id, body, oc, table);
    return this.enqueue({ kind: 'put', owner });
  }

  remove(id: unknown): Promise<{ existed: boolean; changed: boolean }> {
    return this.enqueue({ kind: 'delete', id: validateOwnerId(id) });
  }

  /**
   * A reloaded config: the owners section must be unchanged (moving owners to another table or
   * socket takes a restart), and every owner must still compile against it. Throws otherwise.
   */
  checkConfig(next: Config): void {
    if (JSON.stringify(next.owners) !== JSON.stringify(this.config.owners)) {
      throw new NfkeeperError('the owners section changed; that takes a restart (the reload was rejected)');
    }
    const { oc, table } = ownersTable(next);
    for (const o of this.owners.values()) {
      try {
        compileOwner(o.id, o.spec, oc, table);
      } catch (e) {
        throw new NfkeeperError(`owner ${o.id} does not fit the new config: ${(e as Error).message} (the reload was rejected)`);
      }
    }
    this.config = next;
  }

  private enqueue(change: Change): Promise<{ existed: boolean; changed: boolean }> {
    return new Promise((resolve, reject) => {
      this.queue.push({ change, resolve, reject });
      if (!this.working) {
        this.working = true;
        void this.drain();
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      // Let the requests that arrive in the same turns join this group: a group no longer waits on a
      // dump (src/keeper/known.ts), so concurrent clients' requests, read over a few turns of the
      // loop, would otherwise each make a group (a kernel commit) of their own.
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
      while (this.queue.length > 0) {
        // The group's changes over the current owners, the last change of an id winning (null: deleted).
        const staged = new Map<string, Owner | null>();
        const now = (id: string) => (staged.has(id) ? staged.get(id) ?? undefined : this.owners.get(id));
        // Totals as the group's changes so far leave them: a put that would grow one past its limit
        // is refused here, alone, and the rest of the group goes on.
        let { rules, bytes } = this.total;
        const { limits } = this.config.owners!;
        const group: Queued[] = [];
        const results: { existed: boolean; changed: boolean }[] = [];
        for (const q of this.queue.splice(0)) {
          const { change } = q;
          if (change.kind === 'delete') {
            const had = now(change.id);
            if (had !== undefined) {
              staged.set(change.id, null);
              rules -= had.rules;
              bytes -= had.bytes;
            }
            group.push(q);
            results.push({ existed: had !== undefined, changed: had !== undefined });
            continue;
          }
          const { owner } = change;
          const had = now(owner.id);
          const r = rules - (had?.rules ?? 0) + owner.rules;
          const b = bytes - (had?.bytes ?? 0) + owner.bytes;
          // (only growth is refused: owners registered under a larger limit stay, and may shrink)
          if (r > limits.rules && r > rules) { q.reject(new OwnerLimitError('rules', r, limits.rules, owner.rules)); continue; }
          if (b > limits.bytes && b > bytes) { q.reject(new OwnerLimitError('bytes', b, limits.bytes, owner.bytes)); continue; }
          rules = r;
          bytes = b;
          staged.set(owner.id, owner);
          group.push(q);
          results.push({ existed: had !== undefined, changed: had === undefined || specKey(had.spec) !== specKey(owner.spec) });
        }
        if (!results.some((r) => r.changed)) {
          group.forEach((q, i) => q.resolve(results[i]!));
          continue;
        }
        const list = applyStaged(this.sorted, staged);
        const changes: JournalChange[] = group.map(({ change: c }) => (c.kind === 'put' ? ['put', c.owner.id, c.owner.spec] : ['delete', c.id]));
        let state: OwnersState;
        let durable: Promise<void>;
        try {
          if (!this.state) mkdirSync(dirname(this.stateFile), { recursive: true, mode: 0o700 });
          state = this.state ??= new OwnersState(this.stateFile);
          // Written before the kernel sees the change. A journal append's fdatasync runs while the
          // kernel commits; nothing is answered before both are done: an answered change is on disk
          // and in the kernel.
          durable = state.write(changes, this.owners.values(), list);
        } catch (e) {
          this.state?.close();
          this.state = undefined;
          const err = new OwnerApplyError(e);
          for (const q of group) q.reject(err);
          continue;
        }
        const [applied, synced] = await Promise.allSettled([this.apply(list), durable]);
        if (applied.status === 'fulfilled' && synced.status === 'fulfilled') {
          for (const [id, owner] of staged) {
            if (owner === null) this.owners.delete(id);
            else this.owners.set(id, owner);
          }
          this.sorted = list;
          this.total = { rules, bytes };
          this.groups++;
          if (state.due) {
            try {
              state.compact(list);
            } catch {
              // The journal still holds every change; compaction is tried again after the next group.
            }
          }
          group.forEach((q, i) => q.resolve(results[i]!));
          continue;
        }
        if (applied.status === 'fulfilled') {
          // On disk it may not be: take the kernel back to the previous owners too.
          await this.apply(this.sorted).catch(() => undefined);
        }
        // Undo the group on disk: the previous owners, whole (this is the rare path).
        try {
          state.compact(this.owners.values());
        } catch { /* the disk refuses; the error below says why the change failed */ }
        const err = new OwnerApplyError(applied.status === 'rejected' ? applied.reason : (synced as PromiseRejectedResult).reason);
        for (const q of group) q.reject(err);
      }
    } finally {
      // In the same turn as the loop's last look at the queue (a finally here, not a .finally() on
      // the promise): a caller answered by this drain may queue its next change before such a
      // callback runs, and would then wait for ever (in-process callers did; HTTP ones are slower).
      this.working = false;
    }
  }
}
