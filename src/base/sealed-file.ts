/**
 * A file the daemon keeps for itself and trusts on its next start (the restart record, the compile
 * cache): its body, then a line with the body's SHA-256, written atomically (temp, fsync, rename),
 * 0600 in a 0700 directory. Read back only when the file and its directory are this user's alone
 * and the digest matches: a file cut short or changed anywhere is not used.
 */
import { isAscii } from 'node:buffer';
import { existsSync, lstatSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { removeStaleTemps, writeFileAtomic } from './atomic-file.js';
import { sha256, sha256Hash } from './sha256.js';

/** Why a file or directory is not this process's user's alone (undefined: it is). */
export function notPrivate(path: string, kind: 'file' | 'directory'): string | undefined {
  const st = lstatSync(path);
  if (kind === 'file' ? !st.isFile() : !st.isDirectory()) return `${path} is not a ${kind}`;
  const uid = process.geteuid?.();
  if (uid !== undefined && st.uid !== uid) return `${path} belongs to uid ${st.uid}, not to this process's ${uid}`;
  if ((st.mode & 0o022) !== 0) return `${path} may be written by others (mode ${(st.mode & 0o777).toString(8)})`;
  return undefined;
}

/** The body of the sealed file `file` in `dir`, or why there is none to use. Never throws. */
export function readSealed(file: string, dir: string): { body: string } | { why: string } {
  const read = readSealedBytes(file, dir);
  if ('why' in read) return read;
  const body = read.bytes;
  // An ASCII body (nearly always) copied into a one-byte string as it is, without decoding UTF-8.
  return { body: isAscii(body) ? body.toString('latin1') : body.toString('utf8') };
}

/**
 * readSealed's body as its bytes (UTF-8), not decoded: a reader that needs only parts of a big
 * body at first (the compile cache's chains) decodes each when it needs it.
 */
export function readSealedBytes(file: string, dir: string): { bytes: Buffer } | { why: string } {
  let bytes: Buffer;
  try {
    const untrusted = notPrivate(dir, 'directory') ?? notPrivate(file, 'file');
    if (untrusted) return { why: `not trusted: ${untrusted}` };
    bytes = readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { why: code === 'ENOENT' ? `there is none (${file})` : `cannot read ${file}: ${(e as Error).message}` };
  }
  // The body, then a line with its SHA-256 (hashed as bytes: a big body is not decoded first).
  const end = bytes.lastIndexOf(0x0a, bytes.length - 2);
  const body = end < 0 ? bytes.subarray(0, 0) : bytes.subarray(0, end);
  const sum = end < 0 ? '' : bytes.subarray(end + 1).toString('latin1').trim();
  if (bytes[bytes.length - 1] !== 0x0a || sum !== sha256(body, 'hex')) return { why: `${file} is cut short or corrupt (its checksum does not match)` };
  return { bytes: body };
}

/**
 * Writes `body` sealed to `file`, making `dir` 0700 if missing; a body given in pieces (UTF-8) is
 * written as their concatenation, without copying them into one buffer first. Throws, also when the
 * directory is not this user's alone (a file there would not be read). `durable: false`: not
 * synced to disk (writeFileAtomic), for a file that is only a cache: what a crash leaves of it
 * fails its seal and is not used.
 */
export function writeSealed(file: string, dir: string, body: string | readonly Buffer[], o: { durable?: boolean } = {}): void {
  makeDir(dir);
  const untrusted = notPrivate(dir, 'directory');
  if (untrusted) throw new Error(untrusted);
  const pieces = typeof body === 'string' ? [Buffer.from(body, 'utf8')] : body;
  const sum = sha256Hash();
  for (const p of pieces) sum.update(p);
  removeStaleTemps(file);
  writeFileAtomic(file, [...pieces, Buffer.from(`\n${sum.digest('hex')}\n`, 'latin1')], 0o600, o);
}

/**
 * mkdir -p with the reason the kernel gave: Node's recursive mkdir reports a directory it could not
 * make under an existing parent (a read-only file system, say) as ENOENT, from its stat after the
 * failed mkdir; asked once more without recursion, mkdir says EROFS, EACCES or ENOSPC.
 */
function makeDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || !existsSync(dirname(dir))) throw e;
    mkdirSync(dir, { mode: 0o700 });
  }
}
