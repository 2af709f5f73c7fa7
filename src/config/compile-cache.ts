/**
 * The compile cache: a compiled config (`run`'s and `apply`'s, one entry for both) kept in a file
 * in the cache directory (--cache-dir, persistent: it outlives a reboot, unlike the restart record), with
 * the trace of every input its compile read (src/base/compile-inputs.ts: the config and the files
 * it includes or lists as env files by digest, the directories its globs listed, the variables it
 * took, the interfaces it resolved in the target namespace, the system files it looked names up
 * in, the time zone where it asked), nfkeeper's version and a digest of its code. A load finds
 * the file, checks every input of the trace again (hashes the files, reads the variables, resolves
 * the names) and, all unchanged, gives the config the compile would give: the same objects (each
 * compiled rule made as the compiler makes it, its expressions shared and frozen as the compaction
 * leaves them), no rule compiled. Anything else (none, another version, an input changed, a file
 * cut short, corrupt or another user's): the ordinary compile, with the reason, and its result
 * stored for the next load. A cache is never a reason for an error.
 *
 * Beside it, a file of each rule's expressions encoded (encodeExprs' NFTA_RULE_EXPRESSIONS bytes,
 * checked as a batch checks them when stored; the addon's digest in the header): an install adds the
 * rules from those bytes (EncodedRuleOp) without making them first. Only an install reads it.
 *
 * What it stores is checked, when written, to be what its form gives back: plain data, no object
 * reached twice but the compaction's shared expressions, nothing frozen but those; a config with
 * anything else (a rule binding an anonymous chain, `jump { … }`) is compiled at every load.
 */
import { isAscii } from 'node:buffer';
import { closeSync, existsSync, linkSync, lstatSync, openSync, readdirSync, readFileSync, readSync, rmSync, unlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { deserialize, serialize } from 'node:v8';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { listing, pathKind, traced, type CompileInput } from '../base/compile-inputs.js';
import { readRegularFile } from '../base/regular-file.js';
import { tempPathOf } from '../base/atomic-file.js';
import { readSealedBytes, writeSealed } from '../base/sealed-file.js';
import { sha256, sha256Hash } from '../base/sha256.js';
import { u16le } from '../base/little-endian.js';
import { runNow, type Sliced } from '../base/sliced.js';
import { asKnownRule, isNoSets } from '../model/compact.js';
import { chainDigestsSteps, knownChainDigests } from '../model/desired-digest.js';
import type { DataType, SetConfig } from '../model/sets.js';
import { DATATYPES, datatypeById, type Datatype, type KeyType } from '../rules/datatypes.js';
import { lateRules, madeRules, rulesMade, type ChainConfig, type EncodedRule, type LateRules } from '../model/desired.js';
import { addonDigest, addonFileId, addonIdentity } from '../netlink/addon.js';
import { encodeRuleExprs } from '../netlink/socket.js';
import type { SentRuleExprs } from '../netlink/sent-exprs.js';
import type { Expr, Family } from '../netlink/expr.js';
import type { NftSet } from '../netlink/objects.js';
import { storedText, withRenderedText, type CompiledRule } from '../rules/compile.js';
import { localIsUtc } from '../rules/intvalues.js';
import { MAX_CONFIG_BYTES, loadConfig, type Config, type LoadOptions } from './config.js';
import { compileCachePathOf } from './cache-key.js';

export { compileCachePathOf, configKeyOf } from './cache-key.js';

/** The file's own format; a file of another format is not used (7: the serialized rest in base64; 8: no rule with anonymous sets encoded). */
const FORMAT = 9;

/**
 * The store's work on a big config, and the making of its rules from the cache, yield every this
 * many rules (src/base/sliced.ts): a slice well under runByTurns's turn, which gathers them by time.
 */
const SLICE = 256;

/**
 * The distinct expressions are stored this many to a line (the last line: the rest): a rule made
 * alone (ruleAt) parses the few lines its expressions are in, not all of them.
 */
const EXPRS_PER_LINE = 512;

export interface CompileCacheOptions {
  /** The directory the cache lives in (--cache-dir; made 0700 if missing). */
  dir: string;
  /** nfkeeper's version: a cache another version wrote is not used. */
  version: string;
  /** The namespace the config is compiled for (its interfaces); one file per namespace and config. */
  netns?: string;
  /**
   * A hit's rules are made late only where its entry could be removed (unremovable), else at the
   * load, where a failure is a miss: the daemon's, whose way out of a late making's failure is the
   * entry's removal (kept, every start would make it again and fail again).
   */
  lateOnlyIfRemovable?: boolean;
  /** Called before a miss compiles the config (apply turns V8's Maglev back on: src/base/heap.ts). */
  compiling?: () => void;
}

/** What a load did with the cache (`madeNow`: why a hit's rules were made at the load, not late). */
export type CacheUse =
  | { used: true; file: string; madeNow?: string; token?: string }
  | { used: false; file: string; why: string };

/** The cache's first line: what the compiled config was compiled from. */
interface Header {
  format: number;
  version: string;
  /** A digest of nfkeeper's code (codeDigest). */
  code: string;
  /** Node's version (its V8 writes the serialized part, and runs the compiler). */
  node: string;
  /** A digest of the native addon (addonDigest): its encoder wrote the rules' encoded expressions. */
  addon: string;
  /**
   * The addon file's identity when `addon` was taken (addonFileId): a load that finds the same
   * takes the digest as unchanged without hashing the file again; another, or none, hashes it.
   */
  addonFile?: string;
  /** The token the file of the rules' encoded expressions (encodedPathOf) begins with: that file is this one's. */
  encoded?: string;
  config: string;
  includePath: readonly string[];
  inputs: CompileInput[];
  /**
   * The digest of each chain of the config's tables, per table (chainDigestsSteps,
   * src/model/desired-digest.ts): a restart composes the desired digest the restart record is
   * compared with from them, owners merged in or not, without making the chains' rules.
   */
  chains: string[][];
}

/**
 * A rule as stored, a line of its own: its text and its expressions' indexes, and for the few with
 * sets or userdata, its sets (0: none) and userdata (0: none).
 */
type StoredRule = [string, number[]] | [string, number[], unknown[] | 0, string | 0];

/** A cache entry's name (compileCachePathOf), and a temp file's a store writes it through (tempPathOf). */
const ENTRY_NAME = /^compiled-[0-9a-f]{16}\.json$/;
/** A file beside an entry (besideFilesOf): removed with its entry, or once its entry is gone. */
const BESIDE_NAME = /^compiled-[0-9a-f]{16}\.(encoded|held)$/;
const ENTRY_TEMP = /^\.compiled-[0-9a-f]{16}\.(json|encoded|held)\.tmp-\d+$/;

/**
 * An entry no load read and no store wrote for this long is removed by the next store in its
 * directory. Read: its access time, which the kernel updates on a read at least daily (relatime, the
 * default); on a noatime mount an entry counts as used when stored, and one in use is stored again
 * by the compile after its removal.
 */
export const UNUSED_FOR_MS = 30 * 86_400_000;
/**
 * An entry this build cannot use (another version, format, code or Node) is removed once unused for
 * this long: not sooner, as two builds in use side by side (two installs, a before/after benchmark)
 * would otherwise remove each other's at every store.
 */
export const ANOTHER_BUILDS_AFTER_MS = 86_400_000;
/** A temp file of another entry is removed once its writer is gone and it was not written to for this long. */
export const TEMP_LEFT_FOR_MS = 3_600_000;

/**
 * Removes from the cache directory `dir` what no load will use again: entries not used (read by a load, or written) for UNUSED_FOR_MS, entries of another
 * build of nfkeeper not used for ANOTHER_BUILDS_AFTER_MS, and temp files a killed store left. Only
 * this user's regular files with names the cache writes: the directory may hold bin/'s V8 code
 * cache and Node's own too. A temp file is another process's write under way while its writer
 * lives or it grew recently (a writer in another pid namespace looks gone from here): left alone.
 * The names removed. Never throws (a cache).
 */
export function pruneCompileCache(dir: string, version: string, now = Date.now()): string[] {
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  const uid = process.geteuid?.();
  for (const name of names) {
    const entry = ENTRY_NAME.test(name);
    const beside = !entry && BESIDE_NAME.test(name);
    if (!entry && !beside && !ENTRY_TEMP.test(name)) continue;
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      if (!st.isFile() || (uid !== undefined && st.uid !== uid)) continue;
      const unused = now - Math.max(st.atimeMs, st.mtimeMs);
      // The files beside an entry live and go with it (a store writes the encoded rules first, so a
      // fresh one may wait for its entry: only one left an hour without it is an orphan).
      const stale = entry
        ? unused > UNUSED_FOR_MS || (unused > ANOTHER_BUILDS_AFTER_MS && !ofThisBuild(path, version))
        : beside
          ? now - st.mtimeMs > TEMP_LEFT_FOR_MS && !existsSync(join(dir, name.replace(/\.[a-z]+$/, '.json')))
          : now - st.mtimeMs > TEMP_LEFT_FOR_MS && !writerLives(name);
      if (!stale) continue;
      unlinkSync(path);
      removed.push(name);
      if (entry) {
        for (const f of besideFilesOf(path)) {
          try {
            unlinkSync(f);
            removed.push(basename(f));
          } catch {
            // none
          }
        }
      }
    } catch {
      // gone meanwhile, or not ours to remove
    }
  }
  return removed;
}

/** Whether the entry `path`'s header says this build wrote it (this format, version, code and Node). */
function ofThisBuild(path: string, version: string): boolean {
  const fd = openSync(path, 'r');
  try {
    // The header line, read until its end (its trace can be long), never the body.
    const chunk = Buffer.alloc(65_536);
    let head = Buffer.alloc(0);
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, head.length);
      const nl = chunk.subarray(0, n).indexOf(0x0a);
      head = Buffer.concat([head, chunk.subarray(0, nl < 0 ? n : nl)]);
      if (nl >= 0 || n === 0) break;
    }
    const h = JSON.parse(head.toString('utf8')) as Partial<Header>;
    return h.format === FORMAT && h.version === version && h.code === codeDigest() && h.node === process.version;
  } catch {
    return false;
  } finally {
    closeSync(fd);
  }
}

/** Whether the process a temp file's name ends with still runs (as removeStaleTemps asks). */
function writerLives(name: string): boolean {
  const pid = Number(name.slice(name.lastIndexOf('-') + 1));
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * The config `file` as loadConfig(file, options) gives it, from the cache when its every input is
 * unchanged, else compiled; then `store` keeps it (and says why not, if not), in slices the caller runs
 * (runNow, or runByTurns to let the event loop run between them). From the cache, its chains' rules
 * are made when first read, or by `make` in slices (the daemon: once ready). options.compiled is compactAsCompiled, as the daemon
 * loads: a rule from the cache is compacted already, and a compile that did not compact is not
 * stored (unfaithful). A compile's error is thrown as loadConfig throws it; the cache's own never are.
 */
export function loadConfigCached(file: string, options: LoadOptions, cache: CompileCacheOptions):
  { config: Config; cache: CacheUse; store?: (stored?: (token: string) => void, sent?: SentRuleExprs) => Sliced<string | undefined>; make?: () => Sliced<void>;
    keepTexts?: () => string | undefined; files?: FileDigests } {
  const path = compileCachePathOf(cache.dir, cache.netns, file);
  let why: string;
  try {
    const hit = fromCache(path, file, options, cache);
    if ('config' in hit) {
      // A reload after this one reuses its rules as depending on the entry's inputs.
      options.reuse?.fromCache(hit.config, hit.inputs);
      const kept = cache.lateOnlyIfRemovable ? unremovable(path) : undefined;
      const token = hit.token !== undefined ? { token: hit.token } : {};
      if (kept === undefined) {
        return { config: hit.config, cache: { used: true, file: path, ...token }, files: fileDigests(hit.inputs), make: hit.make,
          ...(hit.token !== undefined ? { keepTexts: () => keepTexts(path, cache.dir, hit.token!, hit.withTexts) } : {}) };
      }
      const e = unmadeRules(hit.make);
      if (e === undefined) return { config: hit.config, cache: { used: true, file: path, madeNow: kept }, files: fileDigests(hit.inputs) };
      why = `${path} could not be read back (${(e as Error).message}), and ${kept}`;
    } else {
      why = hit.why;
    }
  } catch (e) {
    why = `${path} is corrupt: ${(e as Error).message}`;
  }
  cache.compiling?.();
  const { value: config, inputs, unstable } = traced(() => loadConfig(file, options));
  return {
    config,
    cache: { used: false, file: path, why },
    ...(inputs ? { files: fileDigests(inputs) } : {}),
    // Stored when the caller has time (the daemon: once running); the config is not changed meanwhile.
    // `stored`: told the token the entry was stored with (what an apply's proof is kept for). `sent`:
    // the rules' expressions as a commit of this config sent them (the daemon's start-up install),
    // kept as they are instead of encoded again.
    store: function* (stored?: (token: string) => void, sent?: SentRuleExprs) {
      try {
        if (inputs === undefined) return `${unstable!.replace(/\0/g, ' ')} changed while the config was compiled`;
        const chains = yield* chainDigestsSteps(config.tables);
        const token = randomUUID();
        const addon = addonOf();
        const out = yield* serialise(config, { format: FORMAT, version: cache.version, code: codeDigest(), node: process.version, ...addon, config: file, includePath: options.includePath ?? [], inputs, chains, encoded: token }, sent);
        if ('why' in out) return out.why;
        // A cache: a crash costs one compile, not an fsync of every store. The encoded rules first:
        // a load between the two writes finds the previous cache's token, not this file's.
        writeSealed(encodedPathOf(path), cache.dir, [Buffer.from(token, 'latin1'), ...out.encoded], { durable: false });
        writeSealed(path, cache.dir, out.body, { durable: false });
        stored?.(token);
        // Bounded: a readdir and an lstat per file of the directory, a header read per entry a day unused.
        pruneCompileCache(cache.dir, cache.version);
        return undefined;
      } catch (e) {
        return (e as Error).message;
      }
    },
  };
}

/**
 * The entry's encoded rules written again with the texts a plan rendered from it (CachedRules.withTexts),
 * under the same token (the rules sent are the same bytes: a held-as-sent proof of the entry stands),
 * so that the next plan printed from it makes and renders no rule. Nothing where none was added;
 * why not where the write failed (a cache: the next plan renders them again). A store of another
 * entry meanwhile writes its own token, which this file then lacks: its rules are made, as without it.
 */
function keepTexts(path: string, dir: string, token: string, withTexts: () => Buffer[] | undefined): string | undefined {
  try {
    const pieces = withTexts();
    if (pieces === undefined || !tokenIs(encodedPathOf(path), token)) return undefined;
    writeSealed(encodedPathOf(path), dir, [Buffer.from(token, 'latin1'), ...pieces], { durable: false });
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

/** Whether the file at `path` begins with `token` (sealed files begin with their payload). */
function tokenIs(path: string, token: string): boolean {
  const fd = openSync(path, 'r');
  try {
    const b = Buffer.alloc(token.length);
    return readSync(fd, b, 0, b.length, 0) === b.length && b.toString('latin1') === token;
  } finally {
    closeSync(fd);
  }
}

/**
 * Why the entry `path` could not be removed now (undefined: it could), found by the calls a removal
 * needs on that file in that directory: a name for it made there (a hard link, refused as an unlink
 * is: a read-only file system, a directory not writable by this user, an immutable or append-only
 * file) and removed. The name is the entry's temp file's (tempPathOf): one a kill leaves there is
 * removed as a store's temp file is. Never throws.
 */
export function unremovable(path: string): string | undefined {
  const probe = tempPathOf(path);
  const said = (e: unknown) => `it cannot be removed (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}: ${dirname(path)})`;
  try {
    try {
      unlinkSync(probe);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    linkSync(path, probe);
    unlinkSync(probe);
    return undefined;
  } catch (e) {
    return said(e);
  }
}

/**
 * For an entry `file` that passed its seal but whose rules could not be made (`e`), a fault of
 * nfkeeper's own: the entry removed (kept, every command would meet it again), and what to say
 * (`removed` true: it was; else why not). The daemon's start (src/run.ts) and apply and check
 * (src/cli.ts) go this one way.
 */
export function removeUnreadable(file: string, e: unknown): { removed: boolean; said: string } {
  const what = `the compile cache ${file} could not be read back (${(e as Error).message})`;
  try {
    rmSync(file, { force: true });
    for (const beside of besideFilesOf(file)) rmSync(beside, { force: true });
    return { removed: true, said: `${what}; removed` };
  } catch (r) {
    return { removed: false, said: `${what}; it could not be removed (${(r as NodeJS.ErrnoException).code ?? (r as Error).message})` };
  }
}

/**
 * The fallback of a command that met such an entry (`file`, its rules unmade by `e`) and goes on
 * with the config compiled (the daemon's reload; apply and check): the entry removed, or why not
 * said (removeUnreadable), `say` told that first, then the config compiled by `compile`: through
 * the cache where the entry went (a miss, stored after as any miss), without it where it stayed (so
 * nothing is stored over a file that cannot be removed).
 */
export function compiledInstead<T>(file: string, e: unknown, say: (said: string) => void, compile: (throughCache: boolean) => T): T {
  const r = removeUnreadable(file, e);
  say(r.said);
  return compile(r.removed);
}

/** Why the entry's rules cannot all be made (`make`, as loadConfigCached gave it): the error, or undefined. */
export function unmadeRules(make: () => Sliced<void>): unknown {
  try {
    runNow(make());
    return undefined;
  } catch (e) {
    return e ?? new Error(String(e));
  }
}

function fromCache(path: string, file: string, options: LoadOptions, cache: CompileCacheOptions):
  { config: Config; inputs: CompileInput[]; make: () => Sliced<void>; withTexts: () => Buffer[] | undefined; token?: string } | { why: string } {
  const read = readSealedBytes(path, cache.dir);
  if ('why' in read) return read;
  const body = read.bytes;
  const nl = body.indexOf(0x0a);
  if (nl < 0) return { why: `${path} is corrupt: no header` };
  const h = JSON.parse(body.toString('utf8', 0, nl)) as Header;
  if (h.format !== FORMAT) return { why: `${path} is of format ${String(h.format)}, not ${FORMAT}` };
  if (h.version !== cache.version) return { why: `it was written by nfkeeper ${h.version}, this is ${cache.version}` };
  if (h.code !== codeDigest()) return { why: "it was written by another build of nfkeeper's code" };
  if (h.node !== process.version) return { why: `it was written under Node ${h.node}, this is ${process.version}` };
  if ((h.addonFile === undefined || h.addonFile !== addonFileId()) && h.addon !== addonDigest()) return { why: "it was written with another build of nfkeeper's native addon" };
  if (h.config !== file || JSON.stringify(h.includePath) !== JSON.stringify(options.includePath ?? [])) return { why: 'it is of another config file or include path' };
  if (!Array.isArray(h.inputs) || !Array.isArray(h.chains)) return { why: `${path} is corrupt: no inputs or digests` };
  const changed = changedInput(h.inputs, options);
  if (changed !== undefined) return { why: changed };
  const { config, make, withTexts } = deserialise(body.subarray(nl + 1), options, () => readEncoded(encodedPathOf(path), cache.dir, h.encoded));
  const chains = h.chains;
  if (chains.length !== config.tables.length || !config.tables.every((t, i) => Array.isArray(chains[i]) && chains[i]!.length === t.chains.length
    && chains[i]!.every((d) => typeof d === 'string' && /^[0-9a-f]{64}$/.test(d)))) return { why: `${path} is corrupt: its chain digests are not its chains'` };
  knownChainDigests(config.tables, chains);
  return { config, inputs: h.inputs, make, withTexts, ...(typeof h.encoded === 'string' ? { token: h.encoded } : {}) };
}

/** The addon's digest for a header, with the file's identity where the digest was taken of the file that has it. */
function addonOf(): Pick<Header, 'addon' | 'addonFile'> {
  const { digest, file } = addonIdentity();
  return file !== undefined ? { addon: digest, addonFile: file } : { addon: digest };
}

/**
 * The SHA-256 of each file the compile read whole (null: it could not be read), as the trace noted
 * it: the bytes compiled, or on a hit the bytes found equal to them. The daemon tells a change of
 * its config's files from a touch by these, without reading them again.
 */
export type FileDigests = ReadonlyMap<string, string | null>;

export function fileDigests(inputs: readonly CompileInput[]): FileDigests {
  const out = new Map<string, string | null>();
  for (const i of inputs) if (i.kind === 'file') out.set(i.path, i.sha256);
  return out;
}

/** The first input of `inputs` that is not as noted now, said in words (undefined: none). */
export function changedInput(inputs: readonly CompileInput[], options: LoadOptions): string | undefined {
  const environment = options.environment ?? process.env;
  for (const i of inputs) {
    switch (i.kind) {
      case 'file': {
        let now: string | null;
        try {
          // As the compile reads: never blocking on a FIFO swapped in.
          now = sha256(readRegularFile(i.path, MAX_CONFIG_BYTES), 'hex');
        } catch {
          now = null;
        }
        if (now !== i.sha256) return i.sha256 === null ? `${i.path} can be read now` : now === null ? `${i.path} cannot be read now` : `${i.path} changed`;
        break;
      }
      case 'path': {
        const is = pathKind(i.path);
        if (is !== i.is) return `${i.path} ${is === 'none' ? 'is gone' : is === 'dir' ? 'is a directory now' : i.is === 'none' ? 'exists now' : 'is no longer a directory'}`;
        break;
      }
      case 'dir': {
        const names = listing(i.path);
        if (JSON.stringify(names) !== JSON.stringify(i.names)) return `the directory ${i.path} lists other files now`;
        break;
      }
      case 'env': {
        const now = environment[i.name] ?? null;
        if (now !== i.value) return `the environment variable ${i.name} ${now === null ? 'is unset now' : i.value === null ? 'is set now' : 'has another value'}`;
        break;
      }
      case 'link': {
        const now = options.interfaces?.indexOf(i.name) ?? null;
        if (now !== i.index) return `the interface ${i.name} ${now === null ? 'is gone' : i.index === null ? 'exists now' : `has index ${now} now, not ${i.index}`}`;
        break;
      }
      case 'linkName': {
        const now = options.interfaces?.nameOf(i.index) ?? null;
        if (now !== i.name) return `the interface of index ${i.index} is ${now ?? 'gone'} now, not ${i.name ?? 'none'}`;
        break;
      }
      case 'utc': {
        if (localIsUtc(i.at ?? Date.now()) !== i.utc) return 'the local time zone changed';
        break;
      }
      default:
        return `an input of an unknown kind (${String((i as { kind: unknown }).kind)})`;
    }
  }
  return undefined;
}

/**
 * The cache's text of `config`, in UTF-8 pieces, made a slice at a time: the header line; the rules
 * as JSON lines, which are quick to read back: each chain's rule count, the distinct expressions
 * once, then per chain a line per rule, its expressions as indexes (StoredRule); the rest of the
 * config (tables, chains without their rules, sets, sections) by V8's serializer, which keeps
 * what JSON would not (a key with no value, an object reached twice), as it is after a newline,
 * to the end: read back from the file's bytes, not through a text and base64. Or why this form
 * would not give this config back. A rule's expressions that `sent` holds (a commit sent them) are
 * stored as sent; the others are encoded here.
 */
function* serialise(config: Config, header: Header, sent?: SentRuleExprs): Sliced<{ body: Buffer[]; encoded: Buffer[] } | { why: string }> {
  const why = yield* unfaithful(config);
  if (why) return { why };
  const ids = new Map<Expr, number>();
  const exprs: Expr[] = [];
  // Per chain its rule lines in pieces, and their length in bytes (a load skips a chain by it).
  const rules: { pieces: Buffer[]; bytes: number }[][] = [];
  // Per chain its rules encoded (encodedRules).
  const encoded: Buffer[] = [];
  for (const t of config.tables) {
    const chains: { pieces: Buffer[]; bytes: number }[] = [];
    rules.push(chains);
    for (const c of t.chains) {
      const out = { pieces: [] as Buffer[], bytes: 0 };
      chains.push(out);
      let lines = '';
      const flush = () => {
        const piece = Buffer.from(lines, 'utf8');
        out.pieces.push(piece);
        out.bytes += piece.length;
        lines = '';
      };
      // The previous rule's expressions and indexes: an expression that is the very object the
      // previous rule has at the same place (the compaction shares them) has its index, without a look-up.
      let prev: readonly Expr[] = [];
      let prevIds: number[] = [];
      const enc = new EncodedRules(c.rules.length);
      for (let ri = 0; ri < c.rules.length; ri++) {
        if (ri % SLICE === SLICE - 1) {
          flush();
          yield;
        }
        const r = c.rules[ri]!;
        const x = r.compiled;
        // Checked and encoded as a batch would (the check the batch then skips), or as a batch sent
        // them, with its anonymous sets (their ids are the config's, fixed at its compile); a rule
        // with bound chains is made when added.
        if (x.bound === undefined) enc.put(encodeRuleExprs(x.exprs, prev, sent), x.userdata, storedText(x), isNoSets(x.sets) ? undefined : x.sets);
        else enc.skip();
        const at = new Array<number>(x.exprs.length);
        for (let i = 0; i < x.exprs.length; i++) {
          const e = x.exprs[i]!;
          let id = e === prev[i] ? prevIds[i] : ids.get(e);
          if (id === undefined) {
            ids.set(e, id = exprs.length);
            exprs.push(e);
          }
          at[i] = id;
        }
        prev = x.exprs;
        prevIds = at;
        const stored: StoredRule = !isNoSets(x.sets) || x.userdata !== undefined ? [r.text, at, isNoSets(x.sets) ? 0 : x.sets, x.userdata ?? 0] : [r.text, at];
        lines += `\n${JSON.stringify(stored)}`;
      }
      flush();
      encoded.push(enc.done());
    }
  }
  const rest: Config = {
    ...config,
    tables: config.tables.map((t) => ({ ...t, ...(t.sets ? { sets: t.sets.map(storedSet) } : {}), chains: t.chains.map((c) => ({ ...c, rules: [] })) })),
  };
  // The payload's lines in pieces, each encoded as it is made: the big text is never one string,
  // nor copied into one buffer (writeSealed writes the pieces one after the other). After the rule
  // counts and the distinct expressions (EXPRS_PER_LINE a line), each chain is a line of the bytes
  // its rules take, then a line per rule: a load makes a rule only when it is first asked for
  // (lateRules, ruleAt), from its line and the lines of its expressions.
  const out: Buffer[] = [];
  const put = (text: string) => out.push(Buffer.from(text, 'utf8'));
  const exprLines = Math.ceil(exprs.length / EXPRS_PER_LINE);
  put(`${JSON.stringify(header)}\n${JSON.stringify(config.tables.map((t) => t.chains.map((c) => c.rules.length)))}\n${exprLines}`);
  for (let i = 0; i < exprs.length; i += EXPRS_PER_LINE) {
    put(`\n${JSON.stringify(exprs.slice(i, i + EXPRS_PER_LINE))}`);
    if ((i / EXPRS_PER_LINE) % 8 === 7) yield;
  }
  for (const chains of rules) {
    for (const x of chains) {
      put(`\n${x.bytes}`);
      out.push(...x.pieces);
    }
  }
  put('\n');
  out.push(serialize(rest));
  // The file of the rules' encoded expressions (read only by an install): each chain's, a line of
  // its length in bytes, the bytes.
  const enc: Buffer[] = [];
  for (const b of encoded) enc.push(Buffer.from(`\n${b.length}\n`, 'latin1'), b);
  return { body: out, encoded: enc };
}

/**
 * A chain's rules encoded, for an install that adds them without making them (EncodedRuleOp): per
 * rule in order, the length of its NFTA_RULE_EXPRESSIONS attribute (u16, little-endian; 0: not
 * stored, the rule is made to be added), the length of its userdata (u16), the length of its text
 * in UTF-8 (u16; 0: none kept), the length of its anonymous sets as JSON (u16; 0: none), the
 * attribute as encodeExprs() gave it for the rule's expressions, its userdata's bytes, its text,
 * its sets (the ops added before the rule, as the rule's line has them). The text is the rule's
 * rendering from the rule alone (storedText), kept where the compile's process rendered it already
 * (apply's plan, printed before the store; nothing is rendered for the store: the daemon's prints
 * no plan, nor an apply to /dev/null): an install's plan prints it without making the rule; where
 * none is kept, the rule is made for its text.
 */
class EncodedRules {
  private readonly parts: Buffer[] = [];
  private bytes = 0;
  constructor(private readonly n: number) {}

  put(exprs: Buffer, userdata: string | undefined, text: string | undefined, sets: readonly NftSet[] | undefined): void {
    const ud = userdata === undefined ? undefined : Buffer.from(userdata, 'hex');
    // (userdata that would not come back as the same text, say empty or not lowercase hex: the rule is made)
    if (exprs.length === 0 || exprs.length > 0xffff || (ud !== undefined && (ud.length === 0 || ud.length > 0xffff || ud.toString('hex') !== userdata))) return this.skip();
    // (sets too big for their length: the rule is made)
    const st = sets === undefined ? undefined : Buffer.from(JSON.stringify(sets), 'utf8');
    if (st !== undefined && st.length > 0xffff) return this.skip();
    const tx = keptTextBytes(text);
    const head = Buffer.allocUnsafe(ENCODED_HEAD);
    head.writeUInt16LE(exprs.length, 0);
    head.writeUInt16LE(ud?.length ?? 0, 2);
    head.writeUInt16LE(tx?.length ?? 0, 4);
    head.writeUInt16LE(st?.length ?? 0, 6);
    this.parts.push(head, exprs);
    if (ud) this.parts.push(ud);
    if (tx) this.parts.push(tx);
    if (st) this.parts.push(st);
    this.bytes += ENCODED_HEAD + exprs.length + (ud?.length ?? 0) + (tx?.length ?? 0) + (st?.length ?? 0);
  }

  skip(): void {
    this.parts.push(Buffer.alloc(ENCODED_HEAD));
    this.bytes += ENCODED_HEAD;
  }

  done(): Buffer {
    return this.n === 0 ? Buffer.alloc(0) : Buffer.concat(this.parts, this.bytes);
  }
}

/** The bytes before each rule's in EncodedRules: the lengths of its attribute, userdata, text and sets. */
const ENCODED_HEAD = 8;

/** A rule's text as EncodedRules keeps it; undefined: none kept (none, empty, too long for its length, or not UTF-8 that comes back as itself). */
function keptTextBytes(text: string | undefined): Buffer | undefined {
  if (text === undefined || text === '') return undefined;
  const tx = Buffer.from(text, 'utf8');
  return tx.length > 0xffff || tx.toString('utf8') !== text ? undefined : tx;
}

/** The files that live beside the entry `path` and go with it: its encoded rules, and what an apply's echo proved of them. */
export function besideFilesOf(path: string): string[] {
  return [encodedPathOf(path), heldProofPathOf(path)];
}

/** The file of what an apply's echo proved of the cache `path`'s rules (src/keeper/held-proof.ts), beside it; removed with it. */
export function heldProofPathOf(path: string): string {
  return path.replace(/\.json$/, '.held');
}

/** The file of the cache `path`'s rules encoded (EncodedRules), beside it. */
export function encodedPathOf(path: string): string {
  return path.replace(/\.json$/, '.encoded');
}

/** The bytes of the encoded rules' file after its token, when it is sealed, private and begins with `token`; else undefined. */
function readEncoded(path: string, dir: string, token: string | undefined): Buffer | undefined {
  if (token === undefined) return undefined;
  const read = readSealedBytes(path, dir);
  if ('why' in read) return undefined;
  const b = read.bytes;
  return b.length >= token.length && b.toString('latin1', 0, token.length) === token ? b.subarray(token.length) : undefined;
}

/**
 * The config of a cache's bytes after its header, and the work that makes its rules: each rule is
 * made when first asked for, alone (ruleAt), or with its chain's when they are read (lateRules),
 * or by that work (run a slice at a time once the daemon is ready), as the compiler makes it,
 * compacted as knownRule leaves it, once: whoever asks later gets the same object. A restart the
 * record proves in sync makes none before ready, and decodes none of their bytes; its first
 * repair makes the rule it puts back, from its line and the lines of its expressions. (A line is
 * decoded alone: a newline is never inside UTF-8's multi-byte sequences.)
 */
function deserialise(bytes: Buffer, options: LoadOptions, readEncoded: () => Buffer | undefined):
  { config: Config; make: () => Sliced<void>; withTexts: () => Buffer[] | undefined } {
  let at = 0;
  const line = (): Buffer => {
    const nl = bytes.indexOf(0x0a, at);
    if (nl < 0) throw new Error('the payload is malformed');
    const out = bytes.subarray(at, nl);
    at = nl + 1;
    return out;
  };
  const counts = JSON.parse(line().toString('utf8')) as number[][];
  if (!Array.isArray(counts) || !counts.every((cs) => Array.isArray(cs) && cs.every((n) => Number.isSafeInteger(n) && n >= 0))) throw new Error('the payload is malformed');
  const nExprLines = Number(line().toString('latin1'));
  if (!Number.isSafeInteger(nExprLines) || nExprLines < 0) throw new Error('the payload is malformed');
  const exprLines = Array.from({ length: nExprLines }, line);
  // Each chain's rule lines, skipped by their length in bytes (each line ends with a newline). The
  // chains are numbered across the tables (g); each index below is one array for all of them, not
  // objects per chain: kube-proxy's table has thousands of chains of a rule or two.
  const nChains = counts.reduce((s, cs) => s + cs.length, 0);
  const lines = new Uint32Array(2 * nChains);  // chain g's rule lines: from, to
  const first = new Uint32Array(nChains + 1);  // chain g's first rule, numbered across the chains
  let g = 0;
  for (const cs of counts) {
    for (const n of cs) {
      const nl = bytes.indexOf(0x0a, at);
      const len = nl < 0 ? NaN : decimal(bytes, at, nl);
      if (!(len >= 0) || nl + 1 + len > bytes.length) throw new Error('the payload is malformed');
      at = nl + 1;
      lines[2 * g] = at;
      lines[2 * g + 1] = at += len;
      first[g + 1] = first[g]! + n;
      g++;
    }
  }
  const config = deserialize(bytes.subarray(at)) as Config;
  if (!Array.isArray(config?.tables) || counts.length !== config.tables.length) throw new Error('the payload is malformed');
  // The distinct expressions, a line parsed when a rule first needs one of its expressions, each
  // frozen once (asKnownRule's per rule finds them so).
  const exprParts: (Expr[] | undefined)[] = new Array(nExprLines);
  const exprAt = (i: number): Expr | undefined => {
    const li = Math.floor(i / EXPRS_PER_LINE);
    if (!(li >= 0 && li < nExprLines)) return undefined;
    let part = exprParts[li];
    if (part === undefined) {
      part = JSON.parse(textOf(exprLines[li]!)) as Expr[];
      if (!Array.isArray(part) || (li < nExprLines - 1 ? part.length !== EXPRS_PER_LINE : part.length === 0 || part.length > EXPRS_PER_LINE)) {
        throw new Error('the payload is malformed');
      }
      for (let k = 0; k < part.length; k++) Object.freeze(part[k]!);
      exprParts[li] = part;
    }
    return part[i - li * EXPRS_PER_LINE];
  };
  const chains: ChainConfig[] = new Array(nChains);
  const families: Family[] = new Array(nChains);
  const rules = new CachedRules(bytes, lines, first, chains, families, exprAt, options, readEncoded);
  g = 0;
  config.tables.forEach((t, ti) => {
    for (const x of t.sets ?? []) {
      x.key = keyTypeOf(x.key as unknown as StoredKeyType);
      if (x.data?.kind === 'value') x.data.type = keyTypeOf(x.data.type as unknown as StoredKeyType);
    }
    if (counts[ti]!.length !== t.chains.length) throw new Error('the payload is malformed');
    for (let ci = 0; ci < t.chains.length; ci++, g++) {
      // (Its `rules`, an empty array as stored, turned into the accessor puts the chain object into
      // V8's dictionary mode: rebuilt with fast properties, the whole process was no cheaper.)
      const c = t.chains[ci]!;
      lateRules(c, new CachedChain(rules, g, counts[ti]![ci]!));
      chains[g] = c;
      families[g] = t.family;
    }
  });
  const make = function* (): Sliced<void> {
    for (let g = 0; g < nChains; g++) {
      const c = chains[g]!;
      if (rulesMade(c)) continue;
      const work = rules.steps(g);
      for (;;) {
        const r = work.next();
        // Read meanwhile: the read made the rest and holds the rules.
        if (rulesMade(c)) break;
        if (r.done) {
          madeRules(c, r.value);
          break;
        }
        yield;
      }
    }
    // Every chain's rules held by its chain now: nothing asks the index again.
    rules.forget();
  };
  return { config, make, withTexts: () => rules.withTexts() };
}

/** The rules of the cache's chain `g` while they are not made (lateRules): CachedRules' of that chain. */
class CachedChain implements LateRules {
  constructor(private readonly of: CachedRules, private readonly g: number, readonly count: number) {}

  ruleAt(j: number): ChainConfig['rules'][number] {
    return this.of.ruleAt(this.g, j);
  }

  all(): ChainConfig['rules'] {
    return runNow(this.of.steps(this.g));
  }

  encodedAt(j: number): EncodedRule | undefined {
    return this.of.encodedAt(this.g, j);
  }
}

/** Not a place: a rule the encoded rules' file has no bytes for (made to be added), in CachedRules' encoded offsets. */
const NO_BYTES = 0xffffffff;

/**
 * The rules of a cache's chains, each made once by whoever asks first (ruleAt), a chain's all
 * together by its steps, which run on from the first rule not made yet, a slice at a time or at
 * once (a read of the chain's rules). The chains are numbered across the tables (g) and their
 * rules across the chains (first[g] + j): every index is one typed array for the whole config.
 */
class CachedRules {
  /** Where each rule's line starts in `bytes`: chain g's found when a rule of it is first made (scanned[g] of them so far; n + 1: all, checked). */
  private starts: Uint32Array | undefined;
  private scanned: Uint32Array | undefined;
  /** The rules made, each in its place. */
  private made: ChainConfig['rules'] | undefined;
  /** Per chain, the rule its steps make next: every rule before it is made. */
  private next: Uint32Array | undefined;
  /** The encoded rules' file (read when an install first asks; null: not there, not this cache's or malformed), and where each rule's bytes are in it. */
  private encoded: Buffer | null | undefined;
  private encodedFrom: Uint32Array | undefined;

  constructor(private readonly bytes: Buffer, private readonly lines: Uint32Array, private readonly first: Uint32Array,
    private readonly chains: readonly ChainConfig[], private readonly families: readonly Family[],
    private readonly exprAt: (i: number) => Expr | undefined, private readonly options: LoadOptions,
    private readonly readEncoded: () => Buffer | undefined) {}

  /** Drops what only a chain not made yet needs (every chain's rules made): a daemon may hold its make work for ever. */
  forget(): void {
    this.made = this.starts = this.scanned = this.next = this.encodedFrom = undefined;
    this.encoded = null;
  }

  ruleAt(g: number, j: number): ChainConfig['rules'][number] {
    const made = this.made ??= new Array(this.first[this.chains.length]!);
    return made[this.first[g]! + j] ??= storedRule(this.lineOf(g, j), j, this.chains[g]!.name, this.families[g]!, this.exprAt, this.options);
  }

  /** The making of chain g's rules from the first not made yet, a slice at a time; gives them all. */
  * steps(g: number): Sliced<ChainConfig['rules']> {
    // A line is found in a fraction of a rule's making: a slice of many.
    while (!this.scan(g, 16 * SLICE)) yield;
    const next = this.next ??= new Uint32Array(this.chains.length);
    const f = this.first[g]!;
    const n = this.first[g + 1]! - f;
    while (next[g]! < n) {
      this.ruleAt(g, next[g]!);
      next[g]!++;
      if (next[g]! % SLICE === 0 && next[g]! < n) yield;
    }
    return n === 0 ? [] : this.made!.slice(f, f + n);
  }

  /** Rule j of chain g's line, the chain's lines scanned first. */
  private lineOf(g: number, j: number): string {
    this.scan(g, Infinity);
    const f = this.first[g]!;
    const end = f + j + 1 < this.first[g + 1]! ? this.starts![f + j + 1]! : this.lines[2 * g + 1]!;
    return textOf(this.bytes.subarray(this.starts![f + j]!, end - 1));
  }

  /** Finds up to `most` more of chain g's line starts; whether all are found (they must fill the chain's bytes: else it throws). */
  private scan(g: number, most: number): boolean {
    const scanned = this.scanned ??= new Uint32Array(this.chains.length);
    const f = this.first[g]!;
    const n = this.first[g + 1]! - f;
    let j = scanned[g]!;
    if (j === n + 1) return true;
    const starts = this.starts ??= new Uint32Array(this.first[this.chains.length]!);
    const end = this.lines[2 * g + 1]!;
    let at = j === 0 ? this.lines[2 * g]! : this.bytes.indexOf(0x0a, starts[f + j - 1]!) + 1;
    for (const stop = Math.min(n, j + most); j < stop; j++) {
      starts[f + j] = at;
      const nl = this.bytes.indexOf(0x0a, at);
      if (nl < 0 || nl >= end) throw new Error(`chain ${this.chains[g]!.name} is malformed`);
      at = nl + 1;
    }
    scanned[g] = j;
    if (j < n) return false;
    if (at !== end) throw new Error(`chain ${this.chains[g]!.name} is malformed`);
    scanned[g] = n + 1;
    return true;
  }

  /**
   * The encoded rules' file (after its token) with the texts of the rules made and rendered here
   * from the rule alone (storedText: a plan printed them) where the file kept none; undefined where
   * none is added. An entry stored by a process that printed no plan (the daemon, an apply to
   * /dev/null) keeps no texts, and every plan printed from it made and rendered each rule again.
   */
  withTexts(): Buffer[] | undefined {
    const b = this.encoded;
    const made = this.made;
    if (!b || !made) return undefined;
    const out: Buffer[] = [];
    let added = 0;
    let at = 0;
    for (let g = 0; g < this.chains.length; g++) {
      // Framed as readEncodedRules found it whole (else it is null).
      const nl = b.indexOf(0x0a, at + 1);
      const end = nl + 1 + decimal(b, at + 1, nl);
      const f = this.first[g]!;
      const n = this.first[g + 1]! - f;
      // A chain whose rules do not fill its bytes was never read from (readEncodedRules): as it is.
      let o = nl + 1;
      for (let j = 0; j < n && o + ENCODED_HEAD <= end; j++) o += ENCODED_HEAD + u16le(b, o) + u16le(b, o + 2) + u16le(b, o + 4) + u16le(b, o + 6);
      const whole = o === end;
      const parts: Buffer[] = [];
      let bytes = 0;
      let copied = nl + 1;  // the chain's bytes from here on are copied as they are
      o = nl + 1;
      for (let j = 0; whole && j < n; j++) {
        const len = u16le(b, o);
        const ud = u16le(b, o + 2);
        const next = o + ENCODED_HEAD + len + ud + u16le(b, o + 4) + u16le(b, o + 6);
        const r = made[f + j];
        const tx = len !== 0 && u16le(b, o + 4) === 0 && r !== undefined ? keptTextBytes(storedText(r.compiled)) : undefined;
        if (tx !== undefined) {
          // Before the rule, its head with the text's length, its attribute and userdata, the text; its sets follow.
          const head = Buffer.from(b.subarray(o, o + ENCODED_HEAD));
          head.writeUInt16LE(tx.length, 4);
          parts.push(b.subarray(copied, o), head, b.subarray(o + ENCODED_HEAD, o + ENCODED_HEAD + len + ud), tx);
          bytes += o - copied + ENCODED_HEAD + len + ud + tx.length;
          copied = o + ENCODED_HEAD + len + ud;
          added++;
        }
        o = next;
      }
      parts.push(b.subarray(copied, end));
      bytes += end - copied;
      out.push(Buffer.from(`\n${bytes}\n`, 'latin1'), ...parts);
      at = end;
    }
    return added > 0 ? out : undefined;
  }

  encodedAt(g: number, j: number): EncodedRule | undefined {
    const f = this.first[g]!;
    if (!(j >= 0 && j < this.first[g + 1]! - f)) return undefined;
    if (this.encoded === undefined) this.readEncodedRules();
    const enc = this.encoded;
    if (!enc) return undefined;
    const o = this.encodedFrom![f + j]!;
    if (o === NO_BYTES) return undefined;
    const len = u16le(enc, o);
    const ud = u16le(enc, o + 2);
    const tx = u16le(enc, o + 4);
    const st = u16le(enc, o + 6);
    const from = o + ENCODED_HEAD;
    const exprs = enc.subarray(from, from + len);
    const out: EncodedRule = ud === 0 ? { exprs } : { exprs, userdata: enc.toString('hex', from + len, from + len + ud) };
    if (tx !== 0) out.text = textOf(enc.subarray(from + len + ud, from + len + ud + tx));
    if (st !== 0) {
      const at = from + len + ud + tx;
      const sets = JSON.parse(textOf(enc.subarray(at, at + st))) as unknown;
      // (sealed with the entry: not what was stored only if the store wrote it wrong)
      if (!Array.isArray(sets) || sets.length === 0) throw new Error(`rule ${j + 1} of chain ${this.chains[g]!.name} is malformed`);
      out.sets = sets as NftSet[];
    }
    return out;
  }

  /**
   * The encoded rules' file (per chain a line of its length in bytes, then its rules as
   * EncodedRules has them) and where each rule's bytes are in it. A chain whose rules do not fill
   * its bytes has none; a file not framed so, or of other chains, none at all (the rules are made
   * to be added, as without it).
   */
  private readEncodedRules(): void {
    this.encoded = null;
    let b: Buffer | undefined;
    try {
      b = this.readEncoded();
    } catch {
      return;
    }
    if (b === undefined) return;
    const from = new Uint32Array(this.first[this.chains.length]!);
    let at = 0;
    for (let g = 0; g < this.chains.length; g++) {
      if (b[at] !== 0x0a) return;
      const nl = b.indexOf(0x0a, at + 1);
      const size = nl < 0 ? NaN : decimal(b, at + 1, nl);
      if (!(size >= 0) || nl + 1 + size > b.length) return;
      const end = nl + 1 + size;
      const f = this.first[g]!;
      const n = this.first[g + 1]! - f;
      let o = nl + 1;
      for (let j = 0; j < n && o + ENCODED_HEAD <= end; j++) {
        from[f + j] = u16le(b, o) === 0 ? NO_BYTES : o;
        o += ENCODED_HEAD + u16le(b, o) + u16le(b, o + 2) + u16le(b, o + 4) + u16le(b, o + 6);
      }
      if (o !== end) from.fill(NO_BYTES, f, f + n);
      at = end;
    }
    if (at !== b.length) return;
    this.encoded = b;
    this.encodedFrom = from;
  }
}

/**
 * The number written in decimal digits from `from` to `to` of `b` (NaN: none, or anything else
 * there). A length a chain's line gives, read without a string made per chain.
 */
function decimal(b: Buffer, from: number, to: number): number {
  if (to <= from || to - from > 15) return NaN;
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = b[i]! - 0x30;
    if (!(d >= 0 && d <= 9)) return NaN;
    n = n * 10 + d;
  }
  return n;
}

/** UTF-8 bytes as a string: an ASCII line (nearly always) copied into a one-byte string as it is, without decoding. */
const textOf = (b: Buffer): string => (isAscii(b) ? b.toString('latin1') : b.toString('utf8'));

/** Rule `ri` of a chain from its stored line (StoredRule), made as the compiler makes it. */
function storedRule(line: string, ri: number, chain: string, family: Family, exprAt: (i: number) => Expr | undefined, options: LoadOptions): ChainConfig['rules'][number] {
  const stored = JSON.parse(line) as StoredRule;
  if (!Array.isArray(stored) || typeof stored[0] !== 'string' || !Array.isArray(stored[1]) || (stored.length !== 2 && stored.length !== 4)) {
    throw new Error(`rule ${ri + 1} of chain ${chain} is malformed`);
  }
  const [text, idx] = stored;
  const list = new Array<Expr>(idx.length);
  for (let i = 0; i < list.length; i++) {
    const e = exprAt(idx[i]!);
    if (typeof e !== 'object') throw new Error(`rule ${ri + 1} of chain ${chain} names an expression not stored`);
    list[i] = e;
  }
  const sets = stored.length === 4 ? stored[2] : 0;
  const userdata = stored.length === 4 ? stored[3] : 0;
  const compiled = withRenderedText(list, sets === 0 ? [] : sets as CompiledRule['sets'], family, options.interfaces);
  if (userdata !== 0) compiled.userdata = userdata;
  asKnownRule(compiled);
  return { text, compiled };
}

/**
 * Why the form serialise writes would not give `config` back as it is (undefined: it would).
 * Everything is plain data (plain objects and arrays, strings, finite numbers, booleans, null),
 * each object reached once and none frozen, but: a compiled rule is the compiler's (exprs, sets,
 * text, userdata), its expressions frozen, shared between rules, in a frozen list, its sets the
 * shared empty list or its own; a set's datatypes are nft's (storedSet). In the rules (JSON) a key
 * always has a value; elsewhere (V8's) it may have none.
 */
export function* unfaithful(config: Config): Sliced<string | undefined> {
  const seen = new Set<object>();
  /**
   * Why `v` is not plain data (undefined: it is): the path below `v` to what is not, and what it
   * is; the caller says where `v` is. No text is made for what is plain (most of a big config).
   */
  const plain = (v: unknown, json: boolean): NotPlain | undefined => {
    switch (typeof v) {
      case 'string': case 'boolean': return undefined;
      case 'number': return Number.isFinite(v) && !Object.is(v, -0) ? undefined : { path: '', is: `is ${v}` };
      case 'undefined': return json ? { path: '', is: 'is a key with no value' } : undefined;
      case 'object': break;
      default: return { path: '', is: `is a ${typeof v}` };
    }
    if (v === null) return undefined;
    if (seen.has(v)) return { path: '', is: 'is an object reached twice' };
    seen.add(v);
    if (Object.isFrozen(v)) return { path: '', is: 'is frozen' };
    const isArray = Array.isArray(v);
    if (Object.getPrototypeOf(v) !== (isArray ? Array.prototype : Object.prototype)) return { path: '', is: 'is not plain data' };
    if (isArray) {
      for (let i = 0; i < v.length; i++) {
        if (!(i in v)) return { path: '', is: 'has a hole' };
        const w = plain(v[i], json);
        if (w) return w;
      }
      return undefined;
    }
    if (Object.getOwnPropertySymbols(v).length > 0) return { path: '', is: 'has a symbol key' };
    for (const k in v) {
      const w = plain((v as Record<string, unknown>)[k], json);
      if (w) return { path: `.${k}${w.path}`, is: w.is };
    }
    return undefined;
  };
  const said = (at: string, w: NotPlain | undefined): string | undefined => (w ? `${at}${w.path} ${w.is}` : undefined);
  const RULE_KEYS = 'exprs,sets,text';
  const exprSeen = new Set<Expr>();
  const top = Object.entries(config).filter(([k]) => k !== 'tables');
  for (const [k, v] of top) {
    const w = said(k, plain(v, false));
    if (w) return w;
  }
  if (Object.getPrototypeOf(config) !== Object.prototype || Object.getPrototypeOf(config.tables) !== Array.prototype) return 'the config is not plain data';
  for (const t of config.tables) {
    if (Object.getPrototypeOf(t) !== Object.prototype || Object.getPrototypeOf(t.chains) !== Array.prototype) return `table ${t.name} is not plain data`;
    for (const [k, v] of Object.entries(t)) {
      if (k === 'chains') continue;
      let stored: unknown = v;
      if (k === 'sets' && v !== undefined) {
        try {
          stored = t.sets!.map(storedSet);
        } catch (e) {
          return `table ${t.name}: ${(e as Error).message}`;
        }
      }
      const w = said(`table ${t.name}: ${k}`, plain(stored, false));
      if (w) return w;
    }
    for (const c of t.chains) {
      if (Object.getPrototypeOf(c) !== Object.prototype || Object.getPrototypeOf(c.rules) !== Array.prototype) return `chain ${c.name} is not plain data`;
      for (const [k, v] of Object.entries(c)) {
        if (k === 'rules') continue;
        const w = said(`chain ${c.name}: ${k}`, plain(v, false));
        if (w) return w;
      }
      const ruleAt = (ri: number) => `rule ${ri + 1} of chain ${c.name}`;
      let prev: readonly Expr[] = [];
      for (let ri = 0; ri < c.rules.length; ri++) {
        if (ri % SLICE === SLICE - 1) yield;
        const r = c.rules[ri]!;
        const x = r.compiled;
        if (Object.getPrototypeOf(r) !== Object.prototype || Object.keys(r).join() !== 'text,compiled' || typeof r.text !== 'string') return `${ruleAt(ri)}: not a rule as compiled`;
        const keys = Object.keys(x).join();
        if ((keys !== RULE_KEYS && keys !== `${RULE_KEYS},userdata`) || (x.userdata !== undefined && typeof x.userdata !== 'string')) {
          return `${ruleAt(ri)}: ${x.bound ? 'it binds an anonymous chain' : 'not a rule as compiled'}`;
        }
        if (!Object.isFrozen(x.exprs) || Object.getPrototypeOf(x.exprs) !== Array.prototype) return `${ruleAt(ri)}: its expressions are not compacted`;
        for (let i = 0; i < x.exprs.length; i++) {
          const e = x.exprs[i]!;
          // The very object the previous rule has at the same place was checked there.
          if (e === prev[i]) continue;
          if (!Object.isFrozen(e) || Object.getPrototypeOf(e) !== Object.prototype) return `${ruleAt(ri)}: an expression is not compacted`;
          if (exprSeen.has(e)) continue;
          exprSeen.add(e);
          // The expression's own fields: plain, not frozen below it.
          for (const f in e) {
            const w = plain((e as unknown as Record<string, unknown>)[f], true);
            if (w) return said(`${ruleAt(ri)}: ${f}`, w);
          }
        }
        prev = x.exprs;
        if (!isNoSets(x.sets)) {
          if (x.sets.length === 0) return `${ruleAt(ri)}: an empty list of sets not compacted`;
          const w = said(`${ruleAt(ri)}: sets`, plain(x.sets, true));
          if (w) return w;
        }
      }
    }
  }
  return undefined;
}

/** Where below a value something is not plain data (a path of keys, '' for the value itself), and what it is. */
interface NotPlain { path: string; is: string }

/** A datatype as stored: by its name, and an integer's or a string's by its length and byte order too. */
interface StoredDatatype { datatype: string; id?: number; len?: number; byteorder?: number }
type StoredKeyType = Omit<KeyType, 'parts'> & { parts: StoredDatatype[] };

/**
 * A set as stored: its key's and data's datatypes (nft's, each one object for the process's life,
 * with its parse and format) by reference; the rest as it is. Throws for a datatype not found
 * again by its reference.
 */
function storedSet(x: SetConfig): SetConfig {
  const out = { ...x, key: storedKeyType(x.key) } as unknown as SetConfig;
  if (x.data?.kind === 'value') out.data = { ...x.data, type: storedKeyType(x.data.type) } as unknown as DataType;
  return out;
}

function storedKeyType(k: KeyType): KeyType {
  const parts = k.parts.map((d): StoredDatatype => {
    const ref: StoredDatatype = DATATYPES.get(d.name) === d ? { datatype: d.name } : { datatype: d.name, id: d.id, len: d.len, byteorder: d.byteorder };
    if (datatypeOf(ref) !== d) throw new Error(`the datatype ${d.name} is not found again by its name`);
    return ref;
  });
  return { ...k, parts } as unknown as KeyType;
}

function datatypeOf(ref: StoredDatatype): Datatype | undefined {
  return ref.id === undefined ? DATATYPES.get(ref.datatype) : datatypeById(ref.id, ref.len, ref.byteorder);
}

function keyTypeOf(k: StoredKeyType): KeyType {
  return {
    ...k,
    parts: k.parts.map((ref) => {
      const d = datatypeOf(ref);
      if (d === undefined) throw new Error(`no datatype ${String(ref.datatype)}`);
      return d;
    }),
  };
}

let code: string | undefined;

/**
 * A digest of nfkeeper's code as it runs: in the bundle (dist/nfkeeper.script.js), the build id
 * its first line carries (scripts/bundle.mjs: a digest of the rest, the key bin/nfkeeper.js
 * already keeps V8's code cache under), read rather than hashed again (10-14 ms of every warm
 * apply); else every module file of its tree (dist/ as tsc left it, src/ under a test).
 * A compiler changed without a new version still does not read another's cache.
 */
export function codeDigest(): string {
  if (code !== undefined) return code;
  const self = fileURLToPath(import.meta.url);
  const ext = self.slice(self.lastIndexOf('.'));
  if (basename(self).startsWith('nfkeeper.')) return code = `bundle ${bundleId(self) ?? sha256(readFileSync(self), 'hex')}`;
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      if (d.isDirectory()) walk(join(dir, d.name));
      else if (d.name.endsWith(ext)) files.push(join(dir, d.name));
    }
  };
  walk(dirname(dirname(self)));
  const h = sha256Hash();
  for (const f of files.sort()) h.update(`${f.slice(f.lastIndexOf('/') + 1)}\0`).update(readFileSync(f));
  return code = h.digest('hex');
}

/** The build id on a bundle's first line (`// nfkeeper bundle <hex>`), if it has one. */
export function bundleId(file: string): string | undefined {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(64);
    const n = readSync(fd, head, 0, head.length, 0);
    return /^\/\/ nfkeeper bundle ([0-9a-f]{16,64})\n/.exec(head.toString('latin1', 0, n))?.[1];
  } finally {
    closeSync(fd);
  }
}
