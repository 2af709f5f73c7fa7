/**
 * The command line's stdout and stderr: write(2) to the file descriptor itself, and the process's
 * stream only once a write was not taken whole.
 *
 * Node's `process.stdout` (and `process.stderr`) is made on first use: for a pipe that loads
 * node:net and opens a libuv handle on the descriptor, for a terminal node:tty (which requires
 * node:net too); a command that prints a few lines pays for both and uses neither. So each write
 * goes to the descriptor with one write(2) while the descriptor takes it whole (a file, a
 * terminal, /dev/null, a pipe with room or in blocking mode, which waits for its reader). The
 * first write that is short or fails (a non-blocking pipe that is full: EAGAIN; a closed pipe:
 * EPIPE; a full disk: ENOSPC) hands the rest of that write, and every later one, to the stream for
 * good: it waits for a slow reader without blocking the event loop, keeps the order, and reports
 * an error as Node always has (an 'error' event no one handles: the error and exit 1).
 */
import { fstatSync, statSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';

export class FdOutput {
  private stream: NodeJS.WriteStream | undefined;

  constructor(readonly fd: 1 | 2) {}

  /** Writes `s` (UTF-8) after everything written before it. */
  write(s: string): void {
    if (this.stream === undefined) {
      let sent = 0;
      try {
        sent = writeSync(this.fd, s);
      } catch {
        // (none of it taken: the stream writes it, and reports the error if it is one)
      }
      if (sent === Buffer.byteLength(s)) return;
      this.stream = this.fd === 1 ? process.stdout : process.stderr;
      this.stream.write(sent === 0 ? s : Buffer.from(s).subarray(sent));
      return;
    }
    this.stream.write(s);
  }

  /**
   * Resolves once what went to the stream has reached the kernel (or the stream failed): a process
   * that exits before would leave a reader behind a pipe with part of its output. At once when no
   * stream was made: each write(2) was whole.
   */
  drained(): Promise<void> {
    const s = this.stream;
    if (s === undefined) return Promise.resolve();
    return new Promise((done) => {
      // After the ticks queued so far: a write that failed at once (EPIPE, ENOSPC) has destroyed
      // the stream and emits its error on the next tick, which must not be outrun by the exit.
      const end = () => setImmediate(done);
      if (s.destroyed || !s.writable) return end();
      s.once('error', end);
      s.write('', () => end());
    });
  }
}

export const stdout = new FdOutput(1);
export const stderr = new FdOutput(2);

/** Resolves once stdout's and stderr's streams, those that were made, have handed their writes to the kernel. */
export async function drained(): Promise<void> {
  await Promise.all([stdout.drained(), stderr.drained()]);
}

/** Whether file descriptor `fd` is /dev/null (the same character device). */
export function isDevNull(fd: number): boolean {
  try {
    const st = fstatSync(fd);
    return st.isCharacterDevice() && st.rdev === statSync('/dev/null').rdev;
  } catch {
    return false;
  }
}

/**
 * Whether file descriptor `fd` is a terminal, as `process.stdout.isTTY` says for 1. A terminal is a
 * character device: a pipe, a file, a socket or /dev/null is answered from fstat(2) alone, and
 * only another character device is asked with isatty(3), whose module (node:tty) loads node:net.
 */
export function isTerminal(fd: number): boolean {
  try {
    const st = fstatSync(fd);
    if (!st.isCharacterDevice() || st.rdev === statSync('/dev/null').rdev) return false;
  } catch {
    return false;
  }
  return (createRequire(import.meta.url)('node:tty') as typeof import('node:tty')).isatty(fd);
}
