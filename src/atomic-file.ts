/**
 * Durable replacement of a small file: write a temp file beside it, fsync
 * it, rename it over the old one, fsync the directory. A crash at any point
 * leaves either the old content or the new one under the name, never a mix;
 * at worst a stray temp file remains, which readers never look at.
 */
import { close, closeSync, fsync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** The temp file a write of `file` goes through (one per process, so two writers never share one). */
export function tempPathOf(file: string): string {
  return join(dirname(file), `.${basename(file)}.tmp-${process.pid}`);
}

export function writeFileAtomic(file: string, text: string, mode = 0o600): void {
  const tmp = tempPathOf(file);
  const fd = openSync(tmp, 'w', mode);
  try {
    const buf = Buffer.from(text, 'utf8');
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off, buf.length - off);
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  closeSync(fd);
  renameSync(tmp, file);
  const dfd = openSync(dirname(file), 'r');
  try { fsyncSync(dfd); } finally { closeSync(dfd); }
}

/**
 * writeFileAtomic with its two fsyncs off the main thread: the temp file is written before this
 * returns, synced in the background, renamed over `file` on the main thread (only if `stillWanted()`
 * says so then: a whole rewrite made meanwhile wins), and the directory synced. Resolves once the
 * new content is durable under the name; rejects (the temp file removed) if it was not put there.
 * The owners state uses it so that a small state's rewrite is synced while the kernel commits.
 */
export function writeFileAtomicInBackground(file: string, text: string, stillWanted: () => boolean, mode = 0o600): Promise<void> {
  const tmp = `${tempPathOf(file)}.next`;
  const fd = openSync(tmp, 'w', mode);
  try {
    const buf = Buffer.from(text, 'utf8');
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off, buf.length - off);
  } catch (e) {
    closeSync(fd);
    try { unlinkSync(tmp); } catch { /* already gone */ }
    throw e;
  }
  const dropTemp = () => { try { unlinkSync(tmp); } catch { /* already gone */ } };
  return new Promise<void>((resolve, reject) => {
    fsync(fd, (e) => {
      closeSync(fd);
      if (e) {
        dropTemp();
        reject(e);
        return;
      }
      if (!stillWanted()) {
        dropTemp();
        reject(new Error(`${file}: replaced by another write before this one was renamed into place`));
        return;
      }
      let dfd: number;
      try {
        renameSync(tmp, file);
        dfd = openSync(dirname(file), 'r');
      } catch (e2) {
        dropTemp();
        reject(e2);
        return;
      }
      fsync(dfd, (e3) => close(dfd, () => (e3 ? reject(e3) : resolve())));
    });
  });
}
