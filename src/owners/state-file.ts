/**
 * The owners state file: every registered owner's spec, as JSON
 * `{ "version": 1, "folded"?: "<sha256>", "owners": { "<id>": { chains, jumps } } }`, replaced
 * atomically (src/base/atomic-file.ts), plus a journal beside it (`<file>.journal`): one line per group
 * of changes, appended and fdatasync'ed, so a registration costs one small durable append instead
 * of rewriting every owner. The journal is folded into the file when it outgrows it.
 *
 * A missing file is an empty set. Anything else that is not a valid state (unreadable, not a
 * regular file, not JSON, a wrong shape, a journal that is damaged or does not extend the file, an
 * owner the current config refuses) is an OwnersStateError: start-up stops before the kernel is
 * touched, because starting with fewer owners than were registered would collect their rules.
 */
import { sha256 } from '../base/sha256.js';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { io, writeFileAtomic } from '../base/atomic-file.js';
import { NotRegularFileError, readRegularFile } from '../base/regular-file.js';
import type { Config } from '../config/config.js';
import type { TableConfig } from '../model/desired.js';
import { NfkeeperError } from '../base/errors.js';
import type { OwnersConfig } from '../config/owners.js';
import { OwnerSpecError, compileOwner, type Owner, type OwnerSpec } from './spec.js';

export const STATE_VERSION = 1;

/** A state file or journal bigger than this is refused: well above what the owner limit (MAX_OWNERS) of big owners takes. */
export const MAX_STATE_BYTES = 256 << 20;

export class OwnersStateError extends NfkeeperError {
  override name = 'OwnersStateError';
  constructor(readonly file: string, reason: string) {
    super(`owners state ${file}: ${printable(reason)}; nfkeeper will not start with it (nothing was changed in the kernel). ` +
      'Restore the file, or fix what it names; deleting it unregisters every owner and collects their rules');
  }
}

/** `text` with control characters, and bytes that were not UTF-8, escaped: a damaged file's bytes never reach a terminal raw. */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\ufffd]/g, (c) => {
    const n = c.charCodeAt(0);
    return n < 0x100 ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u${n.toString(16)}`;
  });
}

/** The text of a state file or journal: a regular file, bounded; undefined when missing. */
function readState(file: string): string | undefined {
  try {
    return readRegularFile(file, MAX_STATE_BYTES).toString('utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' && !(e instanceof NotRegularFileError)) return undefined;
    throw new OwnersStateError(file, `cannot read: ${(e as Error).message}`);
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
  // No file: no owners (a journal without its file is stale: deleting the file unregisters everyone).
  const text = readState(file);
  if (text === undefined) return [];
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new OwnersStateError(file, `corrupt: not JSON (${(e as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new OwnersStateError(file, 'corrupt: not a JSON object');
  const { version, owners, folded } = v as { version?: unknown; owners?: unknown; folded?: unknown };
  if (version !== STATE_VERSION) throw new OwnersStateError(file, `unknown version ${JSON.stringify(version)} (this nfkeeper reads ${STATE_VERSION})`);
  if (typeof owners !== 'object' || owners === null || Array.isArray(owners)) throw new OwnersStateError(file, 'corrupt: "owners" is not an object');
  if (folded !== undefined && typeof folded !== 'string') throw new OwnersStateError(file, 'corrupt: "folded" is not a string');
  const specs = new Map<string, unknown>(Object.entries(owners));
  replayJournal(file, text, folded, specs);
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

/**
 * Replaces the whole state: the file is rewritten atomically, then the journal it now holds is
 * removed. The new file names the journal it folds in (`folded`: the base in that journal's
 * header): a crash before the unlink leaves a journal that a load then knows to be stale, so any
 * other journal that does not extend the file is damage, not staleness.
 */
export function saveOwners(file: string, owners: Iterable<Owner>): number {
  const text = ownersText(owners, journalBase(file));
  writeFileAtomic(file, text);
  // The journal is stale now (the file names it as folded): removing it only tidies up.
  try {
    io.unlinkSync(journalPathOf(file));
    fsyncDir(dirname(file));
  } catch { /* no journal, or left behind stale */ }
  return Buffer.byteLength(text);
}

/** The base named by the header of the journal beside `file`, if it has a readable one. */
function journalBase(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(journalPathOf(file), 'r');
  } catch {
    return undefined;
  }
  try {
    const buf = Buffer.alloc(256);
    const n = readSync(fd, buf, 0, buf.length, 0);
    const line = buf.subarray(0, n).toString('utf8').split('\n')[0]!;
    const base = (JSON.parse(line) as { base?: unknown }).base;
    return typeof base === 'string' ? base : undefined;
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function fsyncDir(dir: string): void {
  const d = io.openSync(dir, 'r');
  try { io.fsyncSync(d); } finally { io.closeSync(d); }
}

function ownersText(owners: Iterable<Owner>, folded: string | undefined): string {
  const sorted = [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const body: Record<string, unknown> = {};
  for (const o of sorted) body[o.id] = o.spec;
  return JSON.stringify({ version: STATE_VERSION, ...(folded ? { folded } : {}), owners: body }) + '\n';
}

/** The journal beside a state file. */
export function journalPathOf(file: string): string {
  return `${file}.journal`;
}

/** One change of a journal line: a spec put under an id, or an id removed. */
export type JournalChange = ['put', string, OwnerSpec] | ['delete', string];

/** A state file smaller than this is rewritten whole on every change, as it always was; the journal serves bigger ones. */
export const JOURNAL_FROM_BYTES = 64 * 1024;

const digest = (text: string) => sha256(text, 'hex');

/**
 * Applies the journal's lines, in order, to `specs`. Its first line names the file it extends
 * (`{"base": sha256 of the file}`), written whole with the journal (an atomic replace), so a
 * journal without a whole header is damaged. A journal whose base is the one the file says it
 * folded in (`folded`) is stale (the daemon crashed between folding it and removing it) and
 * ignored. A base that is neither is a journal that does not belong to this file (damaged, or the
 * file was replaced while a journal was pending): start-up stops, since replaying or ignoring it
 * could each bring back or lose acknowledged changes. A last line without its newline was torn by
 * a crash mid-append: never synced, so never acknowledged, and ignored.
 */
function replayJournal(file: string, fileText: string, folded: string | undefined, specs: Map<string, unknown>): void {
  const journal = journalPathOf(file);
  const text = readState(journal);
  if (text === undefined) return;
  const lines = text.split('\n');
  lines.pop();  // after the last newline: empty, or a torn append
  if (lines.length === 0) throw new OwnersStateError(journal, `corrupt: its header line is incomplete (${Buffer.byteLength(text)} bytes, no newline)`);
  let base: unknown;
  try {
    base = (JSON.parse(lines[0]!) as { base?: unknown }).base;
  } catch { /* checked below */ }
  if (typeof base !== 'string' || !/^[0-9a-f]{64}$/.test(base)) {
    throw new OwnersStateError(journal, 'corrupt: line 1 (byte 0) is not {"base": "<sha256 of the state file>"}');
  }
  if (base !== digest(fileText)) {
    if (base === folded) return;  // folded into the file already
    throw new OwnersStateError(journal, 'it does not extend the state file beside it (its base is neither the file\'s digest nor the journal the file ' +
      'folded in): the journal is damaged, or the file was replaced while changes were pending in it. Remove the journal to keep the file as it is');
  }
  // Where each line starts, in bytes, for the errors: a user cuts a journal at a byte, not a line.
  let at = Buffer.byteLength(lines[0]!) + 1;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const where = `line ${i + 1} (byte ${at})`;
    at += Buffer.byteLength(line) + 1;
    let changes: unknown;
    try {
      changes = JSON.parse(line);
    } catch (e) {
      throw new OwnersStateError(journal, `corrupt: ${where} is not JSON (${(e as Error).message})`);
    }
    if (!Array.isArray(changes)) throw new OwnersStateError(journal, `corrupt: ${where} is not a list of changes`);
    for (const c of changes) {
      if (Array.isArray(c) && c[0] === 'put' && typeof c[1] === 'string' && c.length === 3) specs.set(c[1], c[2]);
      else if (Array.isArray(c) && c[0] === 'delete' && typeof c[1] === 'string' && c.length === 2) specs.delete(c[1]);
      else throw new OwnersStateError(journal, `corrupt: ${where} holds a change that is neither ["put", id, spec] nor ["delete", id]`);
    }
  }
}

/**
 * A write of the state failed and what is on disk could not be put back to the owners before it
 * (the undo failed too): a restart might find the change. The registry takes no more changes.
 */
export class StateUncertainError extends NfkeeperError {
  override name = 'StateUncertainError';
}

/**
 * The daemon's writer of the state, called after the kernel committed a group (the registry answers
 * once this has resolved). A small state (under JOURNAL_FROM_BYTES) is rewritten whole and atomically
 * on every change. A big one gets a journal: the file is rewritten once, then each group of changes
 * is one appended line, written and fdatasync'ed before write() resolves; the journal is folded
 * into the file again once it has grown past the file's size (and 1 MiB), and when the daemon
 * stops. A write that fails leaves the disk as it was: a failed append is cut off again
 * (ftruncate, which needs no space), a failed replace is undone by the previous owners; only if
 * that undo fails too is StateUncertainError thrown.
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

  /** Records a group of changes that takes the owners from `before` to `after`, durably, or throws having changed nothing. */
  async write(changes: JournalChange[], before: readonly Owner[], after: readonly Owner[]): Promise<void> {
    if (this.fd === undefined && this.fileBytes < JOURNAL_FROM_BYTES) {
      this.replace(after, before);
      return;
    }
    // The file rewritten with `before` (the owners already durable): nothing on disk changes meaning.
    const fd = this.fd ?? this.start(before);
    const buf = Buffer.from(JSON.stringify(changes) + '\n', 'utf8');
    try {
      for (let off = 0; off < buf.length;) off += io.writeSync(fd, buf, off, buf.length - off);
      // Off the loop: a slow disk holds this group's answer, not the daemon's loop.
      await new Promise<void>((resolve, reject) => io.fdatasync(fd, (e) => (e ? reject(e) : resolve())));
    } catch (e) {
      // Part of the line (or all of it, unsynced) may be in the file: cut it off, so that neither a
      // restart nor the next append (which would follow a torn line) ever reads it.
      try {
        io.ftruncateSync(fd, this.bytes);
        io.fdatasyncSync(fd);
      } catch (undo) {
        this.close();
        throw new StateUncertainError(`the journal ${journalPathOf(this.file)} could not be appended to ` +
          `(${(e as Error).message}) nor cut back (${(undo as Error).message})`);
      }
      throw e;
    }
    this.bytes += buf.length;
  }

  /** The whole file replaced by `owners`; on failure, the file holds `previous` again or StateUncertainError is thrown. */
  private replace(owners: readonly Owner[], previous: readonly Owner[]): void {
    try {
      this.fileBytes = saveOwners(this.file, owners);
    } catch (e) {
      if (!(e as { replaced?: boolean }).replaced) throw e;
      // Renamed into place, but the directory's sync failed: the new file may or may not survive a crash.
      try {
        this.fileBytes = saveOwners(this.file, previous);
      } catch (undo) {
        throw new StateUncertainError(`the state file ${this.file} was replaced but not synced (${(e as Error).message}), ` +
          `and the previous owners could not be written back (${(undo as Error).message})`);
      }
      throw e;
    }
  }

  /** Changes go to the journal. */
  get journaling(): boolean {
    return this.fd !== undefined;
  }

  /** The journal has outgrown the file: time to fold() it in. */
  get due(): boolean {
    return this.fd !== undefined && this.bytes > Math.max(1 << 20, this.fileBytes);
  }

  /**
   * Rewrites the file with `owners` (atomically: the durable owners, so a failure at any step leaves
   * either the file and journal as they were or the file holding them all); the journal is gone after it.
   */
  fold(owners: Iterable<Owner>): void {
    this.close();
    this.fileBytes = saveOwners(this.file, owners);
    this.bytes = 0;
  }

  /** Closes the journal (the daemon stopping: fold first to leave one whole file). */
  close(): void {
    const fd = this.fd;
    this.fd = undefined;
    // The descriptor is released even when close reports an error, and every line in it was synced already.
    if (fd !== undefined) try { io.closeSync(fd); } catch { /* released */ }
  }

  /** A new journal on top of a freshly written file holding `owners`. */
  private start(owners: Iterable<Owner>): number {
    const path = journalPathOf(this.file);
    const text = ownersText(owners, journalBase(this.file));
    writeFileAtomic(this.file, text);
    this.fileBytes = Buffer.byteLength(text);
    const header = Buffer.from(JSON.stringify({ base: digest(text) }) + '\n');
    // Written whole under a temp name and renamed: a journal is never without its header.
    writeFileAtomic(path, header.toString());
    const fd = io.openSync(path, 'a', 0o600);
    this.bytes = header.length;
    return this.fd = fd;
  }
}
