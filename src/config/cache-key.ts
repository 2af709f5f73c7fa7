/**
 * Which file of the compile cache (src/config/compile-cache.ts) holds a config: a module of its
 * own, without the cache's imports, so that a command that only asks whether there is one (check)
 * loads none of them.
 */
import { realpathSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';

/**
 * The cache file of the config `config` compiled for the namespace `netns`, in `dir`: one per
 * config however its path is written (`./c.yaml`, `/etc/x/c.yaml`, through a symlinked directory),
 * keyed by its absolute path with its directories' symlinks resolved. A config that is itself a
 * symlink keeps its own name as the key, not its target's: the link is what the operator configured
 * (a ConfigMap's `config.yaml`, a `current` link), its target is content, which the trace hashes,
 * so a link switched to another target reuses its one entry rather than adding one per target.
 */
export function compileCachePathOf(dir: string, netns: string | undefined, config: string): string {
  return join(dir, `compiled-${nameHash(`${netns ?? ''}\0${configKeyOf(config)}`)}.json`);
}

/**
 * 64 bits of `key` as 16 hex digits (cyrb53's mixing, both 32-bit halves kept). Not node:crypto's
 * SHA-256: loading node:crypto (some twenty of Node's modules) was a tenth of what a check of a
 * small config cost where the directory holds another config's big entry, only to name the file.
 * The name only finds an entry: what it holds is checked against the config (its header names the
 * config file, its trace every input, the namespace's interfaces among them), so two keys of one
 * name would cost a compile, never a wrong config.
 */
function nameHash(key: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (h2 >>> 0).toString(16).padStart(8, '0') + (h1 >>> 0).toString(16).padStart(8, '0');
}

/** The config path a cache entry is keyed by (compileCachePathOf). */
export function configKeyOf(config: string): string {
  const abs = resolve(config);
  try {
    return join(realpathSync(dirname(abs)), basename(abs));
  } catch {
    // (a directory that does not exist: the compile says so; the key is only the path made absolute)
    return abs;
  }
}

/**
 * An entry smaller than this holds a config that compiles about as fast as it loads (the code
 * digest, the trace's checks): under about 180 rules (an entry takes about 180 bytes a rule). Measured
 * whole-process, a check reading the entry against one compiling: 1.11-1.14x the CPU at 10 rules,
 * 0.93-1.07x at 30-100, 0.96-0.97x at 200, 0.85-0.87x at 360 (docs/notes/2026-12-06-mends.md).
 */
export const WORTH_READING_FROM_BYTES = 32 * 1024;

/**
 * Whether `dir` holds an entry for the config worth reading (a file by the name, of at least
 * WORTH_READING_FROM_BYTES; not checked further).
 */
export function hasCompileCacheEntry(dir: string, netns: string | undefined, config: string): boolean {
  try {
    const st = statSync(compileCachePathOf(dir, netns, config), { throwIfNoEntry: false });
    return st !== undefined && st.isFile() && st.size >= WORTH_READING_FROM_BYTES;
  } catch {
    return false;
  }
}
