/**
 * Durable replacement of a small file: write a temp file beside it, fsync
 * it, rename it over the old one, fsync the directory. A crash at any point
 * leaves either the old content or the new one under the name, never a mix;
 * at worst a stray temp file remains, which readers never look at.
 */
import { closeSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** The temp file a write of `file` goes through (one per process, so two writers never share one). */
export function tempPathOf(file: string): string {
  return join(dirname(file), `.${basename(file)}.tmp-${process.pid}`);
}

/**
 * Replaces `file` with `text`, or throws. An error thrown before the rename leaves the old file as
 * it was (the temp file removed); one thrown after it (the directory's fsync) carries
 * `replaced: true`: the new content is under the name but may not survive a crash.
 */
export function writeFileAtomic(file: string, text: string, mode = 0o600): void {
  const tmp = tempPathOf(file);
  const fd = openSync(tmp, 'w', mode);
  try {
    const buf = Buffer.from(text, 'utf8');
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off, buf.length - off);
    fsyncSync(fd);
    closeSync(fd);
  } catch (e) {
    try { closeSync(fd); } catch { /* closed above, or the close failed: either way gone */ }
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  try {
    renameSync(tmp, file);
  } catch (e) {
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  try {
    const dfd = openSync(dirname(file), 'r');
    try { fsyncSync(dfd); } finally { closeSync(dfd); }
  } catch (e) {
    throw Object.assign(e as Error, { replaced: true });
  }
}
