/**
 * Reading a file that must be a regular file (a config, an env file, a state file): opened without
 * blocking (O_NONBLOCK: a FIFO would block open() until a writer came, and the daemon's loop with
 * it), checked on the opened descriptor (so a path swapped between a stat and the open cannot slip
 * a FIFO or a device through), and read up to a bound (a device such as /dev/zero never ends).
 */
import { isAscii } from 'node:buffer';
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

/**
 * A config file's text from its bytes (the config, and a .nft config's includes). An ASCII file
 * (nft files nearly always are) is copied into a one-byte string as it is, without decoding UTF-8.
 * From EXTERN_APEX bytes on, Node makes such a string (latin1, and utf8 of ASCII bytes too) an
 * external one, outside V8's heap, and every rule text the read slices from it is a slice of an
 * external string, whose characters the config commands' Maglev code (no TurboFan, bin/) reads by
 * a slower path than a heap string's: the lexer took 3x as long over them
 * (docs/notes/2026-12-07-compile-speed.md). Such a file is decoded in pieces under that size,
 * joined: one heap string, flattened when first read (a second copy: ~20 ms more at 6 MB).
 */
export function fileText(bytes: Buffer): string {
  if (!isAscii(bytes)) return bytes.toString('utf8');
  if (bytes.length < EXTERN_APEX) return bytes.toString('latin1');
  let text = '';
  for (let at = 0; at < bytes.length; at += HEAP_PIECE) text += bytes.toString('latin1', at, Math.min(bytes.length, at + HEAP_PIECE));
  return text;
}

/** Node's src/string_bytes.cc: a one-byte string of this many bytes or more is made external. */
const EXTERN_APEX = 0xfbee9;
/** A piece of a big ASCII file decoded at once (under EXTERN_APEX). */
const HEAP_PIECE = 1 << 19;
