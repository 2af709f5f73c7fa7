/**
 * The owners state's lock: `<state>.lock`, flock'ed, with the holder's pid in it. Whoever holds it
 * is the one process that registers owners in that state (the daemon), or, for as long as it runs,
 * a one-shot that must see them stand still (apply, cleanup, and gc counting them as live ids).
 * Released by the kernel when its holder dies (even by kill -9), so it is never stale.
 */
import { closeSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { NfkeeperError } from '../base/errors.js';
import { lockCalls } from '../netlink/unix.js';

export class KeeperLockedError extends NfkeeperError {
  override name = 'KeeperLockedError';
  constructor(what: string, readonly pid: number | undefined) {
    super(`${what} is kept by another nfkeeper (${pid !== undefined && pid > 0 ? `pid ${pid}` : 'pid unknown'}); one keeper per table: stop it first`);
  }
}

/** The lock file beside a state file. */
export function stateLockPathOf(stateFile: string): string {
  return `${stateFile}.lock`;
}

/**
 * Takes the state's lock: its descriptor (close it to release), or undefined where none can be
 * held (an addon without flock; a read-only state disk, where every change is refused anyway).
 * Throws KeeperLockedError, naming the holder's pid, when another process holds it.
 */
export function lockOwnersState(stateFile: string): number | undefined {
  const addon = lockCalls();
  if (!addon.flockExclusive) return undefined;
  const path = stateLockPathOf(stateFile);
  let fd: number;
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    fd = openSync(path, 'a+', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EROFS') return undefined;
    throw new NfkeeperError(`owners state ${stateFile}: cannot open its lock ${path}: ${(e as Error).message}`);
  }
  const err = addon.flockExclusive(fd);
  if (err !== 0) {
    closeSync(fd);
    if (err === 11 /* EWOULDBLOCK */) {
      const pid = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
      throw new KeeperLockedError(`the owners state ${stateFile}`, Number.isFinite(pid) ? pid : undefined);
    }
    throw new NfkeeperError(`owners state ${stateFile}: cannot lock ${path}: errno ${err}`);
  }
  try {
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`);
  } catch { /* the pid is for the message only */ }
  return fd;
}
