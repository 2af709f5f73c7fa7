/**
 * Reading a file that must be a regular file (a config, an env file, a state file): opened without
 * blocking (O_NONBLOCK: a FIFO would block open() until a writer came, and the daemon's loop with
 * it), checked on the opened descriptor (so a path swapped between a stat and the open cannot slip
 * a FIFO or a device through), and read up to a bound (a device such as /dev/zero never ends).
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';

/** What a file that is not a regular file is, in the words of an error line. */
function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/** A path that names something other than a regular file, or one over the bound. */
export class NotRegularFileError extends Error {
  override name = 'NotRegularFileError';
  readonly code = 'EINVAL';
  /** What the path is instead (`a FIFO`), or the size over the bound. */
  constructor(message: string, readonly kind?: string, readonly size?: number) {
    super(message);
  }
}

/**
 * The bytes of the regular file `path`, at most `maxBytes`. Throws NotRegularFileError (message:
 * `it is a FIFO, not a regular file`, `larger than N bytes`) or the open's errno error (ENOENT…).
 */
export function readRegularFile(path: string, maxBytes: number): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new NotRegularFileError(`it is ${kindOf(st)}, not a regular file`, kindOf(st));
    if (st.size > maxBytes) throw new NotRegularFileError(`the file is ${st.size} bytes, larger than the ${maxBytes} it may have`, undefined, st.size);
    // Read to the end, not to the size the stat gave: a file still being written may have grown.
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      // The stat's size and one byte more (to see the end) the first time, then what growth brings.
      const buf = Buffer.allocUnsafe(Math.min(total === 0 ? st.size + 1 : 1 << 16, maxBytes + 1 - total));
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      total += n;
      if (total > maxBytes) throw new NotRegularFileError(`the file is larger than the ${maxBytes} bytes it may have`);
      chunks.push(n === buf.length ? buf : buf.subarray(0, n));
    }
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
  } finally {
    closeSync(fd);
  }
}
