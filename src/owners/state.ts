/**
 * The owners state file: every registered owner's spec, as JSON
 * `{ "version": 1, "owners": { "<id>": { chains, jumps } } }`, replaced
 * atomically (src/atomic-file.ts), plus a journal beside it
 * (`<file>.journal`): one line per group of changes, appended and
 * fdatasync'ed, so a registration costs one small durable append instead of
 * rewriting every owner (issue 14). The journal is folded into the file
 * (compacted) when it outgrows it. A missing file is an empty set. Anything
 * else that is not a valid state (unreadable, not JSON, a wrong shape, an
 * owner the current config refuses) is an OwnersStateError: start-up stops
 * before the kernel is touched, because starting with fewer owners than were
 * registered would collect their rules.
 */
import { createHash } from 'node:crypto';
import { closeSync, fdatasync, fsyncSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { writeFileAtomic } from '../atomic-file.js';
import type { Config, TableConfig } from '../config/config.js';
import { NfkeeperError } from '../errors.js';
import type { OwnersConfig } from '../config/owners.js';
import { OwnerSpecError, compileOwner, type Owner, type OwnerSpec } from './spec.js';

export const STATE_VERSION = 1;

export class OwnersStateError extends NfkeeperError {
  override name = 'OwnersStateError';
  constructor(readonly file: string, reason: string) {
    super(`owners state ${file}: ${reason}; nfkeeper will not start with it (nothing was changed in the kernel). ` +
      'Restore the file, or fix what it names; deleting it unregisters every owner and collects their rules');
  }
}

/** The owners section and its table, resolved from a config that has one. */
export function ownersTable(config: Config): { oc: OwnersConfig; table: TableConfig } {
  const oc = config.owners;
  if (!oc) throw new NfkeeperError(`${config.file}: no owners section is configured`);
  const table = config.tables.find((t) => t.family === oc.family && t.name === oc.table)!;
  return { oc, table };
}

/** Reads and compiles the registered owners. */
export function loadOwners(config: Config, file = ownersTable(config).oc.state): Owner[] {
  const { oc, table } = ownersTable(config);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    // No file: no owners (a journal without its file is stale: deleting the file unregisters everyone).
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new OwnersStateError(file, `cannot read: ${(e as Error).message}`);
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new OwnersStateError(file, `corrupt: not JSON (${(e as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new OwnersStateError(file, 'corrupt: not a JSON object');
  const { version, owners } = v as { version?: unknown; owners?: unknown };
  if (version !== STATE_VERSION) throw new OwnersStateError(file, `unknown version ${JSON.stringify(version)} (this nfkeeper reads ${STATE_VERSION})`);
  if (typeof owners !== 'object' || owners === null || Array.isArray(owners)) throw new OwnersStateError(file, 'corrupt: "owners" is not an object');
  const specs = new Map<string, unknown>(Object.entries(owners));
  replayJournal(file, text, specs);
  const out: Owner[] = [];
  for (const [id, spec] of specs) {
    try {
      out.push(compileOwner(id, spec, oc, table));
    } catch (e) {
      if (e instanceof OwnerSpecError) throw new OwnersStateError(file, `owner ${JSON.stringify(id.slice(0, 80))}: ${e.message}`);
      throw e;
    }
  }
  return out;
}

/** Replaces the whole state: the file is rewritten atomically, then the journal it now holds is removed. */
export function saveOwners(file: string, owners: Iterable<Owner>): number {
  const text = ownersText(owners);
  writeFileAtomic(file, text);
  // A crash before the unlink leaves a journal whose changes the file already holds: replaying
  // them again gives the same owners (each id ends as its last change says).
  try {
    unlinkSync(journalPathOf(file));
    fsyncDir(dirname(file));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  return Buffer.byteLength(text);
}

function fsyncDir(dir: string): void {
  const d = openSync(dir, 'r');
  try { fsyncSync(d); } finally { closeSync(d); }
}

function ownersText(owners: Iterable<Owner>): string {
  const sorted = [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const body: Record<string, unknown> = {};
  for (const o of sorted) body[o.id] = o.spec;
  return JSON.stringify({ version: STATE_VERSION, owners: body }) + '\n';
}

/** The journal beside a state file. */
export function journalPathOf(file: string): string {
  return `${file}.journal`;
}

/** One change of a journal line: a spec put under an id, or an id removed. */
export type JournalChange = ['put', string, OwnerSpec] | ['delete', string];

/** A state file smaller than this is rewritten whole on every change, as it always was; the journal serves bigger ones. */
export const JOURNAL_FROM_BYTES = 64 * 1024;

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Applies the journal's lines, in order, to `specs`. Its first line names the file it extends
 * (`{"base": sha256 of the file}`): a journal whose file was since replaced (compacted, or edited
 * while nfkeeper was down) is stale and ignored. A last line without its newline was torn by a
 * crash mid-append: never made durable, so never acknowledged, and ignored.
 */
function replayJournal(file: string, fileText: string, specs: Map<string, unknown>): void {
  const journal = journalPathOf(file);
  let text: string;
  try {
    text = readFileSync(journal, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new OwnersStateError(journal, `cannot read: ${(e as Error).message}`);
  }
  const lines = text.split('\n');
  lines.pop();  // after the last newline: empty, or a torn append
  if (lines.length === 0) return;
  let base: unknown;
  try {
    base = (JSON.parse(lines[0]!) as { base?: unknown }).base;
  } catch { /* checked below */ }
  if (typeof base !== 'string') throw new OwnersStateError(journal, 'corrupt: line 1 is not {"base": "<sha256 of the state file>"}');
  if (base !== digest(fileText)) return;  // the file was replaced after this journal was started
  lines.forEach((line, i) => {
    if (i === 0) return;
    let changes: unknown;
    try {
      changes = JSON.parse(line);
    } catch (e) {
      throw new OwnersStateError(journal, `corrupt: line ${i + 1} is not JSON (${(e as Error).message})`);
    }
    if (!Array.isArray(changes)) throw new OwnersStateError(journal, `corrupt: line ${i + 1} is not a list of changes`);
    for (const c of changes) {
      if (Array.isArray(c) && c[0] === 'put' && typeof c[1] === 'string' && c.length === 3) specs.set(c[1], c[2]);
      else if (Array.isArray(c) && c[0] === 'delete' && typeof c[1] === 'string' && c.length === 2) specs.delete(c[1]);
      else throw new OwnersStateError(journal, `corrupt: line ${i + 1} holds a change that is neither ["put", id, spec] nor ["delete", id]`);
    }
  });
}

/**
 * The daemon's writer of the state. A small state (under JOURNAL_FROM_BYTES) is rewritten whole
 * and atomically on every change. A big one gets a journal: the file is rewritten once, then each
 * group of changes is one appended line (written at once; durable when the returned promise
 * resolves, after fdatasync), and the journal is folded into the file again once it has grown past
 * the file's size (and 1 MiB), and when the daemon stops.
 */
export class OwnersState {
  private fd?: number;
  private bytes = 0;
  private fileBytes: number;

  constructor(readonly file: string) {
    try {
      this.fileBytes = statSync(file).size;
    } catch {
      this.fileBytes = 0;
    }
  }

  /**
   * Records a group of changes that takes the owners from `before` to `after`. Resolves once it is
   * on disk. A whole rewrite happens before this returns; an append is written before it returns
   * and synced in the background (so the kernel commit can run meanwhile).
   */
  write(changes: JournalChange[], before: Iterable<Owner>, after: Iterable<Owner>): Promise<void> {
    if (this.fd === undefined && this.fileBytes < JOURNAL_FROM_BYTES) {
      this.fileBytes = saveOwners(this.file, after);
      return Promise.resolve();
    }
    const fd = this.fd ?? this.start(before);
    const buf = Buffer.from(JSON.stringify(changes) + '\n', 'utf8');
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off, buf.length - off);
    this.bytes += buf.length;
    return new Promise((resolve, reject) => fdatasync(fd, (e) => (e ? reject(e) : resolve())));
  }

  /** Changes go to the journal. */
  get journaling(): boolean {
    return this.fd !== undefined;
  }

  /** The journal has outgrown the file: time to compact(). */
  get due(): boolean {
    return this.fd !== undefined && this.bytes > Math.max(1 << 20, this.fileBytes);
  }

  /** Rewrites the file with `owners` (atomically); the journal is gone after it. */
  compact(owners: Iterable<Owner>): void {
    this.close();
    this.fileBytes = saveOwners(this.file, owners);
    this.bytes = 0;
  }

  /** Closes the journal (the daemon stopping: compact first to leave one whole file). */
  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  /** A new journal on top of a freshly written file holding `owners`. */
  private start(owners: Iterable<Owner>): number {
    const text = ownersText(owners);
    writeFileAtomic(this.file, text);
    this.fileBytes = Buffer.byteLength(text);
    const path = journalPathOf(this.file);
    const header = Buffer.from(JSON.stringify({ base: digest(text) }) + '\n');
    // Written whole under a temp name and renamed: a journal is never without its header.
    writeFileAtomic(path, header.toString());
    const fd = openSync(path, 'a', 0o600);
    this.bytes = header.length;
    return this.fd = fd;
  }
}
