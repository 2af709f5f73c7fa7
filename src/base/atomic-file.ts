/**
 * Durable replacement of a small file: write a temp file beside it, fsync
 * it, rename it over the old one, fsync the directory. A crash at any point
 * leaves either the old content or the new one under the name, never a mix;
 * at worst a stray temp file remains, which readers never look at (and which
 * removeStaleTemps takes away once its writer is gone).
 */
import { closeSync, fdatasync, fdatasyncSync, fsyncSync, ftruncateSync, openSync, readdirSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * The calls that change or sync a durable file, here and in src/owners/state-file.ts, made through this
 * object so that a test can make any one of them fail (test/owners/durability.test.ts fails the
 * Nth for every N); nothing else replaces them.
 */
export const io = { openSync, writeSync, fsyncSync, fdatasync, fdatasyncSync, ftruncateSync, renameSync, unlinkSync, closeSync };

/** The temp file a write of `file` goes through (one per process, so two writers never share one). */
export function tempPathOf(file: string): string {
  return join(dirname(file), `.${basename(file)}.tmp-${process.pid}`);
}

/**
 * Removes the temp files of `file` that a writer killed half-way left (their process is gone), so
 * that a daemon killed again and again in its writes does not fill the directory (a tmpfs: memory)
 * with them. A file whose process lives, or that cannot be removed, stays.
 */
export function removeStaleTemps(file: string): void {
  const prefix = `.${basename(file)}.tmp-`;
  let names: string[];
  try {
    names = readdirSync(dirname(file));
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(name.slice(prefix.length));
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || alive(pid)) continue;
    try { io.unlinkSync(join(dirname(file), name)); } catch { /* gone meanwhile, or not ours to remove */ }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * Replaces `file` with `text` (or its pieces in order), or throws. An error thrown before the rename leaves the old file as
 * it was (the temp file removed); one thrown after it (the directory's fsync) carries
 * `replaced: true`: the new content is under the name but may not survive a crash.
 * `durable: false` skips both fsyncs: a reader still never sees part of a write while the machine
 * runs, but after a crash the file may be empty or cut short; only for a file whose reader checks
 * it whole (a sealed cache) and can do without it.
 */
export function writeFileAtomic(file: string, text: string | Buffer | readonly Buffer[], mode = 0o600, o: { durable?: boolean } = {}): void {
  const durable = o.durable ?? true;
  const tmp = tempPathOf(file);
  const fd = io.openSync(tmp, 'w', mode);
  try {
    // Pieces are written one after the other (a big body and its trailer are not copied into one buffer first).
    for (const buf of typeof text === 'string' ? [Buffer.from(text, 'utf8')] : Buffer.isBuffer(text) ? [text] : text) {
      for (let off = 0; off < buf.length;) off += io.writeSync(fd, buf, off, buf.length - off);
    }
    if (durable) io.fsyncSync(fd);
    io.closeSync(fd);
  } catch (e) {
    try { io.closeSync(fd); } catch { /* closed above, or the close failed: either way gone */ }
    try { io.unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  try {
    io.renameSync(tmp, file);
  } catch (e) {
    try { io.unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  if (!durable) return;
  try {
    const dfd = io.openSync(dirname(file), 'r');
    try { io.fsyncSync(dfd); } finally { io.closeSync(dfd); }
  } catch (e) {
    throw Object.assign(e as Error, { replaced: true });
  }
}
