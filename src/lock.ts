/**
 * One keeper per table: `run`, and the one-shot `apply` and `cleanup`, hold a lock for as long as
 * they live, taken before the kernel is touched; a second one is refused at start with a line
 * naming the holder's pid. Two locks, both released by the kernel when their holder dies (even by
 * kill -9), so none is ever stale:
 *  - per table, an abstract Unix socket `nfkeeper/table/<family>/<name>` bound in the target
 *    network namespace (abstract names live per namespace): two keepers of one table in one
 *    namespace, whatever their configs, sockets or state files;
 *  - the owners state file's `<state>.lock`, flock'ed (src/owners/state-lock.ts): two keepers
 *    writing one state file, even in different namespaces. The holder writes its pid into it.
 */
import { sha256 } from './base/sha256.js';
import { closeSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Server } from 'node:net';
import { NfkeeperError } from './base/errors.js';
import { lockCalls } from './netlink/unix.js';
import { KeeperLockedError, lockOwnersState, whileHeld } from './owners/state-lock.js';

export { KeeperLockedError, stateLockPathOf } from './owners/state-lock.js';

export interface KeeperLock {
  release(): void;
}

/** The abstract name locking a table (hashed when too long for sun_path). */
export function tableLockName(family: string, name: string): string {
  const plain = `nfkeeper/table/${family}/${name}`;
  return Buffer.byteLength(plain) <= 100 ? plain : `nfkeeper/table/${sha256(`${family}/${name}`, 'hex')}`;
}

/** A table's lock accepts (and closes) the connections asking who holds it from this long after it was taken (lockKeeper). */
export const DRAIN_AFTER_MS = 1000;

/**
 * Locks the tables in the namespace (undefined: this process's) and, when given, the state file.
 * Throws KeeperLockedError when another process holds one; releases what it took before throwing.
 */
export function lockKeeper(o: {
  netns?: string; tables: readonly { family: string; name: string }[]; stateFile?: string; drainAfterMs?: number;
  /**
   * The daemon's start: a lock another process holds is waited for, `ms` in all, before it is
   * refused (a one-shot apply, cleanup or gc holds them for seconds, another daemon for its life);
   * `holder` is told once for each lock waited for (what it locks, the holder's pid).
   */
  wait?: { ms: number; holder?: (what: string, pid: number | undefined) => void };
}): KeeperLock {
  const { bindAbstract: bind, abstractPeerPid: peerPid } = lockCalls();
  const servers: Server[] = [];
  // The tables' listening sockets no server drains yet, and the timer that will make their servers.
  const listening: number[] = [];
  let drainAt: NodeJS.Timeout | undefined;
  const fds: number[] = [];
  const release = () => {
    clearTimeout(drainAt);
    for (const s of servers.splice(0)) s.close();
    for (const fd of listening.splice(0)) closeSync(fd);
    for (const fd of fds.splice(0)) closeSync(fd);
  };
  const until = performance.now() + (o.wait?.ms ?? 0);
  try {
    if (bind && peerPid) {
      for (const t of o.tables) {
        const name = tableLockName(t.family, t.name);
        const what = `table ${t.family} ${t.name}${o.netns ? ` in ${o.netns}` : ''}`;
        let fd = bind(o.netns, name);
        if (fd === -98 /* EADDRINUSE */ && o.wait) {
          o.wait.holder?.(what, peerPid(o.netns, name));
          fd = whileHeld(fd, (r) => r === -98, () => bind(o.netns, name), until);
        }
        if (fd === -98) throw new KeeperLockedError(what, peerPid(o.netns, name));
        if (fd < 0) throw new NfkeeperError(`table ${t.family} ${t.name}: cannot take its lock (bind of an abstract socket: errno ${-fd})`);
        listening.push(fd);
      }
    }
    if (listening.length > 0) {
      // Connections (another keeper asking who holds it) are accepted and closed, so the backlog
      // (16, native/lock.cc) never fills: by servers made once the lock has been held a while.
      // Until then a contender's connection waits in the backlog and names our pid all the same
      // (SO_PEERCRED); a one-shot command is usually done by then and never loads node:net and
      // its server for it (~10 ms of CPU).
      drainAt = setTimeout(() => {
        drainAt = undefined;
        const { createServer } = createRequire(import.meta.url)('node:net') as typeof import('node:net');
        for (const fd of listening.splice(0)) {
          const server = createServer((c) => c.destroy());
          server.listen({ fd });
          server.unref();
          servers.push(server);
        }
      }, o.drainAfterMs ?? DRAIN_AFTER_MS);
      drainAt.unref();
    }
    if (o.stateFile !== undefined) {
      const wait = o.wait;
      const fd = lockOwnersState(o.stateFile, wait && { ms: Math.max(0, until - performance.now()), holder: (pid) => wait.holder?.(`the owners state ${o.stateFile}`, pid) });
      if (fd !== undefined) fds.push(fd);
    }
  } catch (e) {
    release();
    throw e;
  }
  return { release };
}
