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

/** How often a wait for a lock tries it again. */
const LOCK_RETRY_MS = 50;

/**
 * A wait for a lock: `again` (one more try) every LOCK_RETRY_MS while its result says `held`,
 * until `until` (performance.now()); the last result. Blocks the thread: it is the daemon's start,
 * nothing else is to run yet, and no handler is set for SIGTERM or SIGINT before the daemon is
 * running, so either ends a waiting start at once.
 */
export function whileHeld<T>(result: T, held: (r: T) => boolean, again: () => T, until: number): T {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (held(result) && performance.now() < until) {
    Atomics.wait(pause, 0, 0, LOCK_RETRY_MS);
    result = again();
  }
  return result;
}

/**
 * Takes the state's lock: its descriptor (close it to release), or undefined where none can be
 * held (an addon without flock; a read-only state disk, where every change is refused anyway).
 * Throws KeeperLockedError, naming the holder's pid, when another process holds it: at once, or,
 * with `wait`, once it has held it for `wait.ms` more (the daemon's start: a one-shot `apply` or
 * `gc` holds it for seconds, another daemon for its life). `wait.holder` is told of the holder's pid
 * once, when the wait begins (whileHeld).
 */
export function lockOwnersState(stateFile: string, wait?: { ms: number; holder?: (pid: number | undefined) => void }): number | undefined {
  const flock = lockCalls().flockExclusive;
  if (!flock) return undefined;
  const path = stateLockPathOf(stateFile);
  let fd: number;
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    fd = openSync(path, 'a+', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EROFS') return undefined;
    throw new NfkeeperError(`owners state ${stateFile}: cannot open its lock ${path}: ${(e as Error).message}`);
  }
  const holder = () => {
    const pid = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
    return Number.isFinite(pid) ? pid : undefined;
  };
  const until = wait ? performance.now() + wait.ms : 0;
  let err = flock(fd);
  if (err === 11 /* EWOULDBLOCK */ && wait) {
    wait.holder?.(holder());
    err = whileHeld(err, (e) => e === 11, () => flock(fd), until);
  }
  if (err !== 0) {
    closeSync(fd);
    if (err === 11 /* EWOULDBLOCK */) throw new KeeperLockedError(`the owners state ${stateFile}`, holder());
    throw new NfkeeperError(`owners state ${stateFile}: cannot lock ${path}: errno ${err}`);
  }
  try {
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`);
  } catch { /* the pid is for the message only */ }
  return fd;
}
