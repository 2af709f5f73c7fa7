/**
 * The restart record: what the daemon last held of its owned tables, kept in a file so that a
 * restarted daemon can adopt the installed ruleset without reading its rules back (a rule dump of
 * a long chain is quadratic in the kernel: it walks the chain from its head for every 32 KiB it
 * returns). It holds the boot, the namespace, the ruleset generation at which the view held the
 * owned tables exactly (those it did not are left out, and read at the next start), a digest of the
 * desired state it held them as, per chain the rules' handles and digests in order (what the
 * view's rules and the followed part are made of), and whether a read verified that (`verified`).
 * One not verified is what our own commit left (the install of a start from empty, written at
 * ready): a start that adopts it reads the tables back trustOwnCommitMs later, as the keeper that
 * committed would have, and then records them as verified.
 *
 * It is trusted only when all of these still hold: the same boot id, the same namespace (its
 * cookie, else its nsfs inode), the same generation (nothing committed anywhere in the namespace
 * since, nfkeeper's own commits included), the same desired state by digest, the same nfkeeper
 * version. Then the kernel holds exactly what was verified. Anything else, a record that is
 * missing, unreadable, cut short or corrupt (a SHA-256 of its body ends it), or a file or
 * directory another user could have written: the ordinary start-up (a dump, a diff, a repair), with
 * the reason logged. A record is never a reason to write to the kernel, or to fail a start.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { readSealed, writeSealed } from '../base/sealed-file.js';
import { sha256 } from '../base/sha256.js';
import { desiredDigest } from '../model/desired-digest.js';
import { ruleCount, type TableConfig } from '../model/desired.js';
import type { Family } from '../netlink/expr.js';
import type { NftConn } from '../netlink/conn.js';
import type { ObservedTable } from '../netlink/objects.js';
import { volatileSet } from './owned-table.js';
import { knownRuleAt } from './rule-key.js';
import type { KeeperState } from './state.js';

/**
 * The record's own format; a record of another format is not used. 2 added `verified`: a build of
 * format 1 refuses a record of 2 by its format, so it never adopts one not verified as if it were.
 * A record of format 1 was written only once a read verified it, and is read as such.
 */
const FORMAT = 2;
const VERIFIED_ONLY_FORMAT = 1;

export interface RecordOptions {
  /** The directory the record lives in (made 0700 if missing). */
  dir: string;
  /** nfkeeper's version: a record another version wrote is not used. */
  version: string;
  /** Where the boot id is read (the kernel's, unless a test says otherwise). */
  bootIdPath?: string;
}

/** The namespace a record was written in: its cookie where the kernel gives one, and its nsfs device and inode. */
export interface NetnsIdentity {
  cookie?: string;
  dev: number;
  ino: number;
}

export interface RecordedChain {
  name: string;
  /** The kernel handle of each desired rule, in chain order. */
  handles: number[];
  /** Each rule's digest as the kernel dumps it ('' where it was not known). */
  digests: string[];
}

export interface RecordedTable {
  family: Family;
  name: string;
  /** The table's kernel handle: a table deleted and made again has another. */
  handle?: number;
  chains: RecordedChain[];
}

export interface RestartRecord {
  format: number;
  version: string;
  bootId: string;
  netns: NetnsIdentity;
  generation: number;
  /** desiredDigest of the desired tables (owners merged in) the kernel was verified to hold. */
  desired: string;
  tables: RecordedTable[];
  /**
   * A read verified that the kernel holds these rules at this generation. False: our own commit,
   * the install's echo and derived handles, left them so (trusted, not read): a start that adopts
   * it arms the read-back as after a commit of its own.
   */
  verified: boolean;
  /**
   * How many starts adopted this record not verified (absent: none). Each is counted in the file
   * before its start-up pass, so a daemon killed before its read-back (a crash loop) still counts;
   * from MAX_UNVERIFIED_ADOPTIONS on the record is not used and the start reads its tables.
   */
  adoptions?: number;
}

/**
 * Starts that may adopt a record not verified: each owes a read-back trustOwnCommitMs after it,
 * which a daemon killed sooner never makes. Past this the claim is read, not trusted again.
 */
export const MAX_UNVERIFIED_ADOPTIONS = 2;

/** The file of the keeper of `tables` in the namespace `netns` (undefined: its own), in `dir`. */
export function recordPathOf(dir: string, netns: string | undefined, tables: readonly { family: string; name: string }[]): string {
  const key = sha256(`${netns ?? ''}\0${tables.map((t) => `${t.family} ${t.name}`).sort().join('\0')}`, 'hex').slice(0, 16);
  return join(dir, `restart-${key}.json`);
}

export function readBootId(path = '/proc/sys/kernel/random/boot_id'): string {
  return readFileSync(path, 'utf8').trim();
}

/** The namespace `conn` is in (its cookie) and the one `netns` names (or this process's). */
export function netnsIdentity(conn: NftConn, netns: string | undefined): NetnsIdentity {
  const st = statSync(netns ?? '/proc/self/ns/net');
  const cookie = conn.netnsCookie?.();
  return { ...(cookie !== undefined ? { cookie } : {}), dev: st.dev, ino: st.ino };
}

/** The record in `file`, or why there is none to use. Never throws. */
export function readRecord(file: string, dir: string): { record: RestartRecord } | { why: string } {
  const read = readSealed(file, dir);
  if ('why' in read) return read;
  let r: RestartRecord;
  try {
    r = JSON.parse(read.body) as RestartRecord;
  } catch (e) {
    return { why: `${file} is corrupt: ${(e as Error).message}` };
  }
  const shape = shapeProblem(r);
  if (shape) return { why: `${file} is corrupt: ${shape}` };
  return { record: r.format === VERIFIED_ONLY_FORMAT ? { ...r, verified: true } : r };
}

/** What is wrong with a parsed record's shape (undefined: nothing). */
function shapeProblem(r: RestartRecord): string | undefined {
  if (typeof r !== 'object' || r === null) return 'not an object';
  if (r.format !== FORMAT && r.format !== VERIFIED_ONLY_FORMAT) return `format ${String(r.format)}, not ${FORMAT}`;
  if (r.format === FORMAT && typeof r.verified !== 'boolean') return 'a field is missing';
  if (r.adoptions !== undefined && !(Number.isSafeInteger(r.adoptions) && r.adoptions >= 0)) return 'a field is malformed';
  if (typeof r.version !== 'string' || typeof r.bootId !== 'string' || typeof r.desired !== 'string') return 'a field is missing';
  if (!Number.isSafeInteger(r.generation) || typeof r.netns !== 'object' || r.netns === null || !Array.isArray(r.tables)) return 'a field is missing';
  for (const t of r.tables) {
    if (typeof t?.family !== 'string' || typeof t.name !== 'string' || !Array.isArray(t.chains)) return 'a table is malformed';
    for (const c of t.chains) {
      if (typeof c?.name !== 'string' || !Array.isArray(c.handles) || !Array.isArray(c.digests) || c.handles.length !== c.digests.length) return `chain ${String(c?.name)} is malformed`;
      if (!c.handles.every((h) => Number.isSafeInteger(h) && h > 0) || !c.digests.every((d) => typeof d === 'string')) return `chain ${c.name} is malformed`;
    }
  }
  return undefined;
}

/**
 * Why `r` does not describe the kernel now (undefined: it does, as far as the record can say): the
 * boot, the namespace, the generation, the desired state or the version differ.
 */
export function recordMismatch(r: RestartRecord, now: { version: string; bootId: string; netns: NetnsIdentity; generation: number; desired: () => string }): string | undefined {
  if (r.version !== now.version) return `it was written by nfkeeper ${r.version}, this is ${now.version}`;
  if (r.bootId !== now.bootId) return 'it is from another boot';
  const a = r.netns, b = now.netns;
  if (a.cookie !== undefined && b.cookie !== undefined ? a.cookie !== b.cookie : a.dev !== b.dev || a.ino !== b.ino) return 'it is from another network namespace';
  if (r.generation !== now.generation) return `the ruleset generation moved since it was written (${r.generation}, now ${now.generation}): something committed meanwhile`;
  if (r.desired !== now.desired()) return 'the desired state (config or owners) changed since it was written';
  return undefined;
}

/**
 * Writes `r` to `file` (temp, fsync, rename), making its directory 0700 if missing. Throws, also
 * when the directory is not this user's alone (a record there would not be read).
 */
export function writeRecord(file: string, dir: string, r: RestartRecord): void {
  writeSealed(file, dir, JSON.stringify(r));
}

/**
 * How often at most the record is written again while the daemon runs (it is also written at stop,
 * and at once when a read verifies what a record not verified held).
 */
const REWRITE_EVERY_MS = 300_000;

/**
 * The keeper's side of the record: adopt() before the start-up pass gives the view the rules the
 * record holds (the start-up pass then plans from them, as from any observation at the same
 * generation, and seeds the followed part from them), and for a record not verified starts the
 * wait for the read-back (trustedSince), as our own commit does; write() records what the view
 * holds exactly now, marked verified when a read verified it (no read-back of our own commit
 * pending), at once after the start-up pass, at most every REWRITE_EVERY_MS on the tick (at once
 * when it verifies what the file held unverified) and at stop, and not when the file holds it
 * already. Never while a pass runs: a read-back under way (compared by turns at a big chain) has
 * verified nothing yet.
 */
export class Recorder {
  /** What the file holds, as far as this process knows: its generation, the desired state it was held against, and whether a read verified it. */
  private held?: { generation: number; desired: readonly TableConfig[]; verified: boolean };
  /**
   * A write marked verified was tried since `held` was last set: the first such write (the first
   * after a read-back, or after a start that wrote nothing verified) goes at once, later ones (one
   * failed, say on a full disk) by REWRITE_EVERY_MS.
   */
  private verifiedTried = false;
  private writtenAt = -Infinity;
  private digestOf?: { desired: readonly TableConfig[]; digest: string };
  /**
   * The namespace the socket was opened in, taken at adopt(): the one the record is of. A write at
   * stop after the path was deleted or bound to another namespace still names this one.
   */
  private netns?: NetnsIdentity;

  constructor(private readonly k: KeeperState, private readonly o: RecordOptions, private readonly busy: () => boolean = () => false) {}

  /** The file of the owned tables now (a reload that changes them writes where the next start with that config looks). */
  private get file(): string {
    return recordPathOf(this.o.dir, this.k.options.netns, this.k.config.tables);
  }

  /** desiredDigest of the keeper's desired tables, once per desired state. */
  private digest(): string {
    const desired = this.k.desired;
    if (this.digestOf?.desired !== desired) this.digestOf = { desired, digest: desiredDigest(desired) };
    return this.digestOf.digest;
  }

  /**
   * Before the start-up pass, with the monitor anchored: if the record matches the kernel now, the
   * view holds each recorded table's rules at the record's generation, their chains and sets as
   * listed now (no rule read). Else, or for a table it cannot hold, the pass reads as it would have.
   */
  async adopt(): Promise<void> {
    const k = this.k;
    try {
      this.netns = netnsIdentity(k.sock!, k.options.netns);
    } catch (e) {
      k.log.info({ record: this.file, err: (e as Error).message }, 'the namespace could not be identified; no restart record is used or written');
      return;
    }
    const read = readRecord(this.file, this.o.dir);
    if ('why' in read) {
      k.log.info({ record: this.file, why: read.why }, 'restart record not used; the start-up reads the owned tables');
      return;
    }
    const r = read.record;
    let why: string | undefined;
    let held: TableConfig[] = [];
    try {
      const sock = k.sock!;
      why = recordMismatch(r, { version: this.o.version, bootId: readBootId(this.o.bootIdPath), netns: this.netns,
        generation: sock.generation(), desired: () => this.digest() });
      const adoptions = r.adoptions ?? 0;
      if (why === undefined && !r.verified && adoptions >= MAX_UNVERIFIED_ADOPTIONS) {
        why = `${adoptions} starts adopted it and none read it back (each ended within trustOwnCommitMs): its claim is read now`;
      }
      if (why === undefined) ({ why, held } = await this.seed(r));
      // Counted before the start-up pass: a start killed before its read-back still counts.
      if (why === undefined && !r.verified) {
        try {
          writeRecord(this.file, this.o.dir, { ...r, adoptions: adoptions + 1 });
        } catch (e) {
          k.view.forgetRules();
          why = `its adoption could not be counted: ${(e as Error).message}`;
        }
      }
    } catch (e) {
      why = `it could not be checked: ${(e as Error).message}`;
    }
    if (why !== undefined) {
      k.log.info({ record: this.file, why }, 'restart record not used; the start-up reads the owned tables');
      return;
    }
    this.held = { generation: r.generation, desired: k.desired, verified: r.verified };
    // What our own commit left and no read verified: read back trustOwnCommitMs from now, as after that commit.
    if (!r.verified) k.trustedSince = performance.now();
    k.readAt = r.verified ? r.generation : undefined;
    const rest = k.desired.filter((t) => !held.includes(t)).map((t) => `${t.family} ${t.name}`);
    k.log.info({ record: this.file, generation: r.generation, verified: r.verified, ...(rest.length ? { read: rest } : {}) },
      'restart record matches the kernel: the owned tables are adopted as recorded, without reading their rules');
  }

  /** The view's rules from `r`, for each desired table the record holds as the kernel lists it now. */
  private async seed(r: RestartRecord): Promise<{ why?: string; held: TableConfig[] }> {
    const k = this.k;
    const sock = k.sock!;
    const tables: TableConfig[] = [];
    const observed: ObservedTable[] = [];
    await Promise.all(k.desired.map(async (t) => {
      const rt = r.tables.find((x) => x.family === t.family && x.name === t.name);
      if (!rt) return;
      const [table, chains, sets] = await Promise.all([sock.getTable(t.family, t.name), sock.listChains({ family: t.family, table: t.name }),
        sock.listSets({ family: t.family, table: t.name })]);
      // The chains recorded are the ones listed, no other (a bound chain, say, is read as usual).
      if (!table || (rt.handle !== undefined && table.handle !== rt.handle) || chains.length !== rt.chains.length || !rt.chains.every((c) => chains.some((x) => x.name === c.name))) return;
      const o: ObservedTable = { family: t.family, name: t.name, table, chains: new Map(chains.map((c) => [c.name, c])), rules: new Map(),
        sets: new Map(sets.map((x) => [x.name, { set: x, elements: [] }])) };
      for (const c of rt.chains) {
        // Known rules of the desired chain of that name, placed by index (its rules not made for it):
        // the desired digest matched, so it is the chain recorded. Any other is left to the view to refuse.
        const dc = t.chains.find((x) => x.name === c.name);
        o.rules.set(c.name, dc !== undefined && ruleCount(dc) === c.handles.length
          ? c.handles.map((handle, i) => knownRuleAt(t, dc, i, handle, c.digests[i] || undefined))
          : c.handles.map((handle, i) => ({ family: t.family, table: t.name, chain: c.name, handle, exprs: [], ...(c.digests[i] ? { digest: c.digests[i] } : {}) })));
      }
      tables.push(t);
      observed.push(o);
    }));
    // The lists are of the recorded generation only if nothing committed while they were read.
    if (sock.generation() !== r.generation) return { why: 'the ruleset generation moved while the record was checked', held: [] };
    if (tables.length === 0) return { why: 'it holds none of the owned tables as the kernel lists them', held: [] };
    k.view.fromObservation(r.generation, tables, observed, undefined);
    const held = tables.filter((t) => k.view.rulesOf(t));
    return held.length === 0 ? { why: 'the view can hold none of its tables (anonymous sets, stateful objects)', held } : { held };
  }

  /**
   * What write() records at `generation`: the tables the view holds exactly there, and whether a
   * read verified each (undefined: none, nothing better than the file holds, or, not `due`, not verified).
   */
  private holding(generation: number, readAt: number | undefined, due: boolean, p: ReturnType<NonNullable<NonNullable<KeeperState['monitor']>['progress']>> | undefined):
    { generation: number; tables: RecordedTable[]; verified: boolean } | undefined {
    const k = this.k;
    const same = this.held?.generation === generation && this.held.desired === k.desired;
    if (same && (this.held!.verified || readAt === undefined)) return undefined;
    const tables: RecordedTable[] = [];
    let verified = readAt !== undefined;
    for (const t of k.desired) {
      const kt = k.view.rulesOf(t);
      // Exact now, and as desired: a difference the events followed (held) is not recorded.
      if (!kt?.observed.table || kt.held || !k.view.tableCurrency(t, generation, p).exact) continue;
      if (readAt === undefined || readAt > generation || !k.view.untouched(t, readAt, generation, p)) {
        if (!due) return undefined;  // written at once only as verified
        verified = false;
      }
      const chains = t.chains.map((c) => {
        const rules = kt.observed.rules.get(c.name) ?? [];
        // Verified against this very desired chain (a reload's new one is compared by the next observation first).
        // (ruleCount: a chain of the compile cache is not made for its count)
        return kt.verified.get(c.name) === c && rules.length === ruleCount(c) && rules.every((x) => x.handle)
          ? { name: c.name, handles: rules.map((x) => x.handle!), digests: rules.map((x) => x.digest ?? '') } : undefined;
      });
      if (chains.some((c) => !c) || kt.observed.chains.size !== t.chains.length) continue;
      // Each set's elements held as this desired set's (a volatile one's are read at every observation anyway).
      if ((t.sets ?? []).some((x) => !volatileSet(x.set) && kt.verifiedSets.get(x.name) !== x)) continue;
      tables.push({ family: t.family, name: t.name, handle: kt.observed.table.handle, chains: chains as RecordedChain[] });
    }
    // Nothing held exactly here (the events on their way): tried again at the next tick.
    if (tables.length === 0 || (same && !verified)) return undefined;
    return { generation, tables, verified };
  }

  /**
   * Records what the view holds exactly at the kernel's generation now (the events' last, where they
   * trail it), for every owned table it holds so (the others are read at the next start), verified
   * when a read verified it: a read found the desired state at `readAt` and, per table, no commit
   * changed it since (the generation, or the events: a neighbour's commits elsewhere leave it
   * verified, our own commit or another writer's in the table do not). `now`: at stop, not held
   * back by REWRITE_EVERY_MS. Never throws (a record not written costs the next start a read).
   */
  write(now = false): void {
    const k = this.k;
    const sock = k.sock;
    if (!sock || sock.closed || !this.netns || k.lastVerified === undefined || this.busy()) return;
    const readAt = k.readAt;
    const verifies = readAt !== undefined && !this.held?.verified && !this.verifiedTried;
    const due = now || performance.now() - this.writtenAt >= REWRITE_EVERY_MS;
    if (!due && !verifies) return;
    try {
      // The kernel's generation; where the view is not exact there because the events trail it by
      // a turn of the loop, the generation they reached (a restart adopts it only if the kernel is
      // still there).
      const p = k.view.follows ? k.monitor?.progress?.() : undefined;
      const kernelAt = sock.generation();
      let held = this.holding(kernelAt, readAt, due, p);
      if (held === undefined && p && p.lastGeneration < kernelAt) held = this.holding(p.lastGeneration, readAt, due, p);
      if (held === undefined) return;
      const { generation, tables, verified } = held;
      this.writtenAt = performance.now();
      if (verified) this.verifiedTried = true;
      writeRecord(this.file, this.o.dir, { format: FORMAT, version: this.o.version, bootId: readBootId(this.o.bootIdPath),
        netns: this.netns, generation, desired: this.digest(), tables, verified });
      this.held = { generation, desired: k.desired, verified };
      this.verifiedTried = false;
      k.log.debug({ record: this.file, generation, tables: tables.length, verified }, 'restart record written');
    } catch (e) {
      k.log.warn({ record: this.file, err: (e as Error).message }, 'could not write the restart record; the next start reads the owned tables');
    }
  }
}
