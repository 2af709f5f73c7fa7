/**
 * The addon's calls outside netfilter, for the daemon's other folders: a Unix socket's peer
 * (SO_PEERCRED), the abstract-socket and flock locks, sd_notify, and malloc_trim.
 */
import { loadAddon, type Addon } from './addon.js';

/** SO_PEERCRED of a connected Unix socket; a number is the errno. */
export function peerCred(fd: number): { pid: number; uid: number; gid: number } | number {
  return loadAddon().peerCred(fd);
}

/** The calls src/lock.ts takes its locks with (each absent from an addon built before it). */
export function lockCalls(): Pick<Addon, 'bindAbstract' | 'abstractPeerPid' | 'flockExclusive'> {
  return loadAddon();
}

/** Sends `message` to the systemd notification socket at `socketPath`: 0, or the errno. */
export function sdNotify(socketPath: string, message: string): number {
  return loadAddon().sdNotify(socketPath, message);
}

/** malloc_trim(0) (true: memory went back to the system), or undefined from an addon built before it. */
export function memoryTrimmer(): (() => boolean) | undefined {
  return loadAddon().trimMemory;
}
