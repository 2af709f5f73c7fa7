/**
 * What a config's compile depends on besides its own code: every file it read (by a digest of its
 * bytes), every path it looked at and directory it listed (a glob's), every environment variable
 * it took a value from, every interface name it resolved to an index (and index to name), and
 * whether the local time zone was UTC where it asked. The readers note each input here as they
 * use it (also when their module caches the file: a note per use, not per read); while a compile
 * runs under traced(), the notes are its trace. The compile cache (src/config/compile-cache.ts)
 * stores the trace with the compiled config and uses it only when every input is as noted.
 *
 * Nothing is kept when no trace runs: a note is then one comparison.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { sha256 } from './sha256.js';

export type CompileInput =
  /** A file's bytes, by SHA-256 (null: it could not be read). */
  | { kind: 'file'; path: string; sha256: string | null }
  /** What a path is (a glob's existence and directory checks). */
  | { kind: 'path'; path: string; is: 'none' | 'dir' | 'other' }
  /** The names a directory lists (null: it could not be listed), in the order they were listed. */
  | { kind: 'dir'; path: string; names: string[] | null }
  /** An environment variable's value (null: unset). */
  | { kind: 'env'; name: string; value: string | null }
  /** An interface name's index in the target namespace (null: none has it). */
  | { kind: 'link'; name: string; index: number | null }
  /** An interface index's name there (null: none has it). */
  | { kind: 'linkName'; index: number; name: string | null }
  /** Whether the local time zone is UTC at an instant (null: whenever it was asked). */
  | { kind: 'utc'; at: number | null; utc: boolean };

let trace: Map<string, CompileInput> | undefined;
/** The inputs one rule's compile noted (recorded()), beside the trace. */
let record: CompileInput[] | undefined;
/** An input noted twice with two values in one compile: the trace describes no single state. */
let unstable: string | undefined;

/** Notes an input of the compile running under traced(); `make` is called only then. */
export function noteInput(make: () => CompileInput): void {
  if (trace === undefined && record === undefined) return;
  const input = make();
  record?.push(input);
  if (trace === undefined) return;
  const key = keyOf(input);
  const seen = trace.get(key);
  if (seen === undefined) trace.set(key, input);
  else if (unstable === undefined && JSON.stringify(seen) !== JSON.stringify(input)) unstable = key;
}

/** The key an input is known by: two inputs with one key are one thing, noted with a value each. */
export function keyOf(i: CompileInput): string {
  switch (i.kind) {
    case 'env': return `env\0${i.name}`;
    case 'link': return `link\0${i.name}`;
    case 'linkName': return `linkName\0${i.index}`;
    case 'utc': return `utc\0${i.at}`;
    default: return `${i.kind}\0${i.path}`;
  }
}

/**
 * Runs `f` with a trace of the inputs it notes. `inputs` is undefined when one was seen with two
 * values (a file changed while it was read): such a compile is not cached.
 */
export function traced<T>(f: () => T): { value: T; inputs?: CompileInput[]; unstable?: string } {
  const outer = trace;
  const outerUnstable = unstable;
  trace = new Map();
  unstable = undefined;
  try {
    const value = f();
    return unstable === undefined ? { value, inputs: [...trace.values()] } : { value, unstable };
  } finally {
    trace = outer;
    unstable = outerUnstable;
  }
}

/**
 * Runs `f` (one rule's compile) and gives the inputs it noted, as well as noting them in the trace
 * under way: what a later load checks before it reuses what `f` gave (src/config/rule-reuse.ts).
 */
export function recorded<T>(f: () => T): { value: T; inputs: CompileInput[] | undefined } {
  const outer = record;
  const inputs: CompileInput[] = [];
  record = inputs;
  try {
    const value = f();
    return { value, inputs: inputs.length > 0 ? inputs : undefined };
  } finally {
    record = outer;
    if (outer !== undefined) outer.push(...inputs);
  }
}

/** What `path` is now, as a 'path' input says it. */
export function pathKind(path: string): 'none' | 'dir' | 'other' {
  try {
    return statSync(path).isDirectory() ? 'dir' : 'other';
  } catch {
    return 'none';
  }
}

/** The names `dir` lists now (null: it cannot be listed), as a 'dir' input says them. */
export function listing(dir: string): string[] | null {
  try {
    return readdirSync(dir);
  } catch {
    return null;
  }
}

/** Notes a file read whole for the compile. */
export function noteFile(path: string, bytes: Uint8Array | string): void {
  noteInput(() => ({ kind: 'file', path, sha256: sha256(bytes, 'hex') }));
}

/**
 * The files systemFile reads: the only files a rule's compile notes (the loader notes the config's
 * own): port names, realms, and `meta skuid`/`skgid` names (rules/intvalues.ts).
 */
export const SYSTEM_FILES: ReadonlySet<string> = new Set(['/etc/services', '/etc/iproute2/rt_realms', '/etc/passwd', '/etc/group']);

const systemFiles = new Map<string, { text: string; digest?: string | null }>();

/**
 * A system file the compile looks names up in (/etc/services, /etc/passwd, …), as nft's libc
 * lookups read it: read once per process ('' when it cannot be read), noted at every use.
 */
export function systemFile(path: string): string {
  if (!SYSTEM_FILES.has(path)) throw new Error(`systemFile: ${path} is not one of SYSTEM_FILES`);
  let f = systemFiles.get(path);
  if (f === undefined) {
    let text: string | undefined;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      // no file: numbers only
    }
    f = text === undefined ? { text: '', digest: null } : { text };
    systemFiles.set(path, f);
  }
  const file = f;
  noteInput(() => ({ kind: 'file', path, sha256: file.digest !== undefined ? file.digest : (file.digest = sha256(file.text, 'hex')) }));
  return file.text;
}
