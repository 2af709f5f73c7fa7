/**
 * The registered owners. Changes are queued and applied in groups: every
 * change waiting when a group starts goes into one guarded kernel batch
 * (through Keeper.setOwners) and one state-file write, so a thousand
 * concurrent PUTs cost a handful of batches and writes, not a thousand.
 *
 * The order is the durability contract (docs/owners.md): the kernel first,
 * then the disk, then the answer. A change the kernel refuses never reaches
 * the disk (refused: 422; a group of several is retried change by change, so
 * the refusal lands on the change that caused it). A change the disk refuses
 * is taken back out of the kernel (503). A change is answered only once it is
 * committed and durable; a crash before that loses an unanswered change
 * (start-up derives the kernel's owners from the disk), never brings back a
 * refused one.
 */
import { mkdirSync } from 'node:fs';
import type { Logger } from 'pino';
import { dirname } from 'node:path';
import type { Config } from '../config/config.js';
import { NfkeeperError } from '../base/errors.js';
import { OwnersState, StateUncertainError, ownersTable, type JournalChange } from './state-file.js';
import { compileOwner, specKey, validateOwnerId, type Owner } from './spec.js';

/** A refused owner is tried again after this, doubling up to REFUSED_RETRY_MAX_MS. */
export const REFUSED_RETRY_MS = 5_000;
export const REFUSED_RETRY_MAX_MS = 5 * 60_000;

/** A registered owner the kernel refuses now (found at start-up): kept on disk and listed, not installed, retried. */
export interface RefusedOwner {
  id: string;
  reason: string;
  since: string;
  retries: number;
}

/** The default owner limit: ten times the largest registration the tests and bench run. */
export const MAX_OWNERS = 10_000;

export type Apply = (owners: readonly Owner[]) => Promise<void>;

/** The kernel refused a change; nothing of it stayed. */
export class OwnerApplyError extends NfkeeperError {
  override name = 'OwnerApplyError';
  constructor(readonly refusal: unknown, what = 'the change was not applied') {
    super(`${what}, the previous owners stay in force: ${(refusal as Error).message ?? String(refusal)}`);
  }
}

/** The state file could not be written: the change was taken back out of the kernel (or, if the disk's state is uncertain, no change is taken). */
export class OwnerStateWriteError extends OwnerApplyError {
  override name = 'OwnerStateWriteError';
  constructor(refusal: unknown) {
    super(refusal, refusal instanceof StateUncertainError
      ? 'the owners state on disk is uncertain after a failed write; no change is taken until nfkeeper is restarted'
      : 'the change could not be written to the owners state file and was taken back');
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
 * once: a copy then spliced grew the copy again for an insertion.
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
  /** Changes of a group the kernel refused, applied one by one to find which one it refuses. */
  private alone: Queued[] = [];
  /** The group being applied: taken from the queue, in `owners` only once the kernel and the disk have it. */
  private inFlight: readonly Queued[] = [];
  /** A failed write left the disk's state unknown (StateUncertainError): every change is refused. */
  private uncertain?: StateUncertainError;
  /** Registered owners the kernel refuses (isolate()), left out of what it is given until a retry takes. */
  private refused = new Map<string, RefusedOwner & { delayMs: number; timer?: NodeJS.Timeout }>();
  /** Refused owners whose retry is due. */
  private retries: string[] = [];
  /** Work to run in the queue's turn (exclusive: a reloaded config, a legacy gc pass), before the next group. */
  private turns: (() => Promise<void>)[] = [];
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

  private readonly log?: Logger;
  private readonly onRefused?: (refused: readonly RefusedOwner[]) => void;
  private readonly retryMs: number;

  constructor(config: Config, owners: readonly Owner[], private readonly apply: Apply, options: {
    maxOwners?: number; logger?: Logger; onRefused?: (refused: readonly RefusedOwner[]) => void; retryMs?: number;
  } = {}) {
    this.maxOwners = options.maxOwners ?? MAX_OWNERS;
    this.log = options.logger;
    this.onRefused = options.onRefused;
    this.retryMs = options.retryMs ?? REFUSED_RETRY_MS;
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

  /**
   * The ids foreign GC counts as live: the registered owners and every registration queued or in
   * flight (its commit is in the kernel before `list()` has it, after the state file's write).
   */
  liveIds(): string[] {
    const ids = new Set(this.sorted.map((o) => o.id));
    for (const q of [...this.inFlight, ...this.alone, ...this.queue]) if (q.change.kind === 'put') ids.add(q.change.owner.id);
    return [...ids];
  }

  /** No room for another owner, counting the new ones waiting in the queue. */
  get full(): boolean {
    const pending = new Set<string>();
    for (const q of [...this.alone, ...this.queue]) if (q.change.kind === 'put' && !this.owners.has(q.change.owner.id)) pending.add(q.change.owner.id);
    return this.owners.size + pending.size >= this.maxOwners;
  }

  get size(): number {
    return this.owners.size;
  }

  /** The registered owners the kernel refuses, by id. */
  refusedOwners(): RefusedOwner[] {
    return [...this.refused.values()].map(({ id, reason, since, retries }) => ({ id, reason, since, retries }));
  }

  /**
   * The start-up pass was refused: which owner does the kernel refuse? First the config with the
   * owners the kernel holds already (`held`, by id: a restart), so none of them is taken out to be
   * added back; refused, the config alone (its refusal is thrown: nothing of owners can fix it), so
   * the node's own rules are in at once. Then the other owners in halves (bisect). Runs before the
   * control socket serves requests.
   */
  async isolate(held: ReadonlySet<string> = new Set()): Promise<void> {
    let accepted = this.sorted.filter((o) => held.has(o.id));
    try {
      await this.apply(accepted);
    } catch (e) {
      if (accepted.length === 0) throw e;
      accepted = [];
      await this.apply(accepted);
    }
    await this.bisect(accepted);
  }

  /**
   * The owners added to what the kernel holds in halves, each half that takes kept, each refused one
   * split again, down to the owners refused alone, which stay registered but are left out and
   * retried with back-off. Every step is one guarded batch; the set installed only grows.
   */
  private async bisect(accepted: Owner[] = []): Promise<void> {
    const taken = new Set(accepted.map((o) => o.id));
    const all = taken.size === 0 ? this.sorted : this.sorted.filter((o) => !taken.has(o.id));
    const chunks: Owner[][] = all.length > 1 ? [all.slice(0, all.length >> 1), all.slice(all.length >> 1)] : [all.slice()];
    while (chunks.length > 0) {
      const chunk = chunks.shift()!;
      if (chunk.length === 0) continue;
      const next = [...accepted, ...chunk].sort(byId);
      try {
        await this.apply(next);
        accepted = next;
        for (const o of chunk) this.unrefuse(o.id);
      } catch (e) {
        if (chunk.length === 1) this.refuse(chunk[0]!.id, e);
        else chunks.unshift(chunk.slice(0, chunk.length >> 1), chunk.slice(chunk.length >> 1));
      }
    }
  }

  /**
   * A reloaded config (checked by checkConfig) to enforce with the owners, in the queue's turn so no
   * group is applied meanwhile. `setConfig` installs a config with a list of owners, or restores the
   * previous config and owners and throws. Refused with the owners: the config alone (refused: the
   * reload is rejected, the old config and owners stay), then the owners in halves as at start-up,
   * so an owner the new config makes the kernel refuse is left out and reported, not the others.
   */
  reconfigure(next: Config, setConfig: (config: Config, owners: readonly Owner[]) => Promise<void>): Promise<void> {
    return this.exclusive(() => this.reconfigureNow(next, setConfig));
  }

  /**
   * Runs `fn` in the queue's turn: no group is applied, and so no change answered, until it settles.
   * liveIds() asked inside it holds every owner answered before it returns (and those queued
   * meanwhile). Foreign GC's iptables-legacy pass runs its save, plan and restore here: x_tables has
   * no generation that a registration's commit would move to refuse a restore planned without it.
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.turns.push(() => fn().then(resolve, reject));
      this.kick();
    });
  }

  private async reconfigureNow(next: Config, setConfig: (config: Config, owners: readonly Owner[]) => Promise<void>): Promise<void> {
    try {
      await setConfig(next, this.installable(this.sorted));
      this.config = next;
      // A new config may be what the refused owners needed: each is tried again now, not at its back-off.
      for (const id of this.refused.keys()) this.retries.push(id);
      return;
    } catch (e) {
      if (this.installable(this.sorted).length === 0) throw e;
      this.log?.warn({ err: (e as Error).message }, 'the kernel refuses the new config with the owners; trying it alone, then the owners in halves');
    }
    try {
      await setConfig(next, []);
    } catch (e) {
      throw new NfkeeperError(`the kernel refuses the new config, even without any owner: ${(e as Error).message}`);
    }
    this.config = next;
    await this.bisect();
  }

  /** Leaves `id` out of what the kernel is given, and tries it again later. */
  private refuse(id: string, e: unknown): void {
    const reason = (e as Error).message ?? String(e);
    const was = this.refused.get(id);
    const delayMs = was ? Math.min(was.delayMs * 2, REFUSED_RETRY_MAX_MS) : this.retryMs;
    const r = { id, reason, since: was?.since ?? new Date().toISOString(), retries: was ? was.retries + 1 : 0, delayMs,
      timer: setTimeout(() => this.retrySoon(id), delayMs).unref() };
    clearTimeout(was?.timer);
    this.refused.set(id, r);
    this.log?.error({ owner: id, reason, retries: r.retries, retryInMs: delayMs }, 'the kernel refuses a registered owner; it is left out, the rest is installed');
    this.onRefused?.(this.refusedOwners());
  }

  private unrefuse(id: string): void {
    const r = this.refused.get(id);
    if (!r) return;
    clearTimeout(r.timer);
    this.refused.delete(id);
    this.onRefused?.(this.refusedOwners());
  }

  private retrySoon(id: string): void {
    this.retries.push(id);
    this.kick();
  }

  /** What the kernel is given: `list` less the refused owners (but those in `trying`). */
  private installable(list: readonly Owner[], trying?: ReadonlySet<string> | ReadonlyMap<string, unknown>): readonly Owner[] {
    if (this.refused.size === 0) return list;
    return list.filter((o) => !this.refused.has(o.id) || trying?.has(o.id));
  }

  /** Folds the state journal into the file (the daemon stopping), so the file alone holds every owner. */
  close(): void {
    for (const r of this.refused.values()) clearTimeout(r.timer);
    if (!this.state) return;
    try {
      if (this.state.journaling) this.state.fold(this.owners.values());
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
   * socket takes a restart), and every owner must still compile against it. Throws otherwise;
   * reconfigure() then enforces it.
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
  }

  private enqueue(change: Change): Promise<{ existed: boolean; changed: boolean }> {
    return new Promise((resolve, reject) => {
      this.queue.push({ change, resolve, reject });
      this.kick();
    });
  }

  /** Starts a drain loop unless one is alive: it looks at every queue again before it ends. */
  private kick(): void {
    if (this.working) return;
    this.working = true;
    void this.drain();
  }

  private async drain(): Promise<void> {
    try {
      // Let the requests that arrive in the same turns join this group: a group no longer waits on a
      // dump (src/keeper/known.ts), so concurrent clients' requests, read over a few turns of the
      // loop, would otherwise each make a group (a kernel commit) of their own.
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
      while (this.queue.length > 0 || this.alone.length > 0 || this.retries.length > 0 || this.turns.length > 0) {
        this.inFlight = [];
        if (this.alone.length === 0 && this.turns.length > 0) {
          await this.turns.shift()!();
          continue;
        }
        if (this.alone.length === 0 && this.retries.length > 0) {
          const id = this.retries.shift()!;
          if (!this.refused.has(id) || !this.owners.has(id)) continue;
          try {
            await this.apply(this.installable(this.sorted, new Set([id])));
            this.unrefuse(id);
            this.log?.info({ owner: id }, 'a refused owner was taken by the kernel this time; it is installed');
          } catch (e) {
            this.refuse(id, e);
          }
          continue;
        }
        const taken = this.alone.length > 0 ? [this.alone.shift()!] : this.queue.splice(0);
        this.inFlight = taken;
        if (this.uncertain) {
          const err = new OwnerStateWriteError(this.uncertain);
          for (const q of taken) q.reject(err);
          continue;
        }
        // The group's changes over the current owners, the last change of an id winning (null: deleted).
        const staged = new Map<string, Owner | null>();
        const now = (id: string) => (staged.has(id) ? staged.get(id) ?? undefined : this.owners.get(id));
        // Totals as the group's changes so far leave them: a put that would grow one past its limit
        // is refused here, alone, and the rest of the group goes on.
        let { rules, bytes } = this.total;
        const { limits } = this.config.owners!;
        const group: Queued[] = [];
        const results: { existed: boolean; changed: boolean }[] = [];
        for (const q of taken) {
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
        // The kernel first: what it refuses is never written.
        try {
          // A refused owner changed by this group is tried with its change.
          await this.apply(this.installable(list, staged));
        } catch (e) {
          if (group.length > 1) {
            // Which change does it refuse? Each alone, in order: the others go in, the culprit gets the 422.
            this.alone.unshift(...group);
            continue;
          }
          const err = new OwnerApplyError(e);
          for (const q of group) q.reject(err);
          continue;
        }
        // Then the disk; answered only once it is durable there too.
        const changes: JournalChange[] = group.map(({ change: c }) => (c.kind === 'put' ? ['put', c.owner.id, c.owner.spec] : ['delete', c.id]));
        try {
          if (!this.state) mkdirSync(dirname(this.stateFile), { recursive: true, mode: 0o700 });
          this.state ??= new OwnersState(this.stateFile);
          await this.state.write(changes, this.sorted, list);
        } catch (e) {
          if (e instanceof StateUncertainError) this.uncertain = e;
          this.state?.close();
          this.state = undefined;
          // Not on disk, so not kept: the kernel goes back to the owners that are.
          await this.apply(this.installable(this.sorted)).catch(() => undefined);
          const err = new OwnerStateWriteError(e);
          for (const q of group) q.reject(err);
          continue;
        }
        for (const [id, owner] of staged) {
          if (owner === null) this.owners.delete(id);
          else this.owners.set(id, owner);
          this.unrefuse(id);
        }
        this.sorted = list;
        this.total = { rules, bytes };
        this.groups++;
        if (this.state.due) {
          try {
            this.state.fold(list);
          } catch {
            // The journal still holds every change (or the new file does); the fold is tried again after the next group.
          }
        }
        group.forEach((q, i) => q.resolve(results[i]!));
      }
    } finally {
      // In the same turn as the loop's last look at the queue (a finally here, not a .finally() on
      // the promise): a caller answered by this drain may queue its next change before such a
      // callback runs, and would then wait for ever (in-process callers did; HTTP ones are slower).
      this.working = false;
      this.inFlight = [];
    }
  }
}
