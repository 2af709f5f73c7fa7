/**
 * The native addon: the shapes of what it exports, and its loader. Only src/netlink/ loads it
 * (other folders use the typed calls in this folder: unix.ts, link.ts, socket.ts).
 *
 * Finds and loads the native addon, once, and hands it the error class it
 * builds kernel failures from. Where it looks, first hit wins:
 *   1. $NFKEEPER_ADDON (another build, e.g. scripts/sanitize.sh's AddressSanitizer one);
 *   2. build/Release/nfkeeper.node, a build from source (a checkout, or an
 *      install for which no prebuilt addon fitted);
 *   3. prebuilds/<platform>-<arch>/nfkeeper.<libc>.node, shipped in the npm
 *      package with libnftnl and libmnl beside it (scripts/prebuild.mjs).
 * A failure is one AddonLoadError line naming the missing library and the
 * package that has it, never the dynamic loader's stack.
 */
import { createRequire } from 'node:module';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { basename, dirname, join } from 'node:path';
import { AddonLoadError, NetlinkError } from '../base/errors.js';
import { sha256 } from '../base/sha256.js';

/** What a commit resolves with (NativeSocket.commit). */
export interface NativeCommitResult {
  /** Per echoed rule, its op index and handle, one after the other. */
  handles?: Float64Array;
  held?: string[];
  echoCut?: true;
  digests?: string[];
  unnamed?: (string | undefined)[];
  /** With keepExprs: the batch's bytes as sent; op i's expressions attribute is exprs[exprsAt[2i] .. exprsAt[2i + 1]] (none: equal). */
  exprs?: Buffer;
  exprsAt?: Uint32Array;
}

export interface NativeSocket {
  readonly portId: number;
  readonly closed: boolean;
  /** Rule dumps of one table the kernel flagged interrupted and taken all the same (native/dump.cc: Confirm); absent from an addon built before it. */
  readonly dumpsTakenInterrupted?: number;
  close(): void;
  generation(ifFree?: boolean): number | undefined;
  /** SO_NETNS_COOKIE as a decimal string; undefined where the kernel lacks it. Absent from an older addon. */
  netnsCookie?(): string | undefined;
  dump(kind: 'table' | 'chain' | 'rule' | 'set' | 'element' | 'obj', family?: string, table?: string,
    name?: string, single?: boolean, objects?: boolean, ruleMode?: 0 | 1 | 2): Promise<unknown[]>;
  /**
   * exprBytes: per op index, that rule's expressions as encodeExprs() gave them, or undefined
   * (encoded now). digests: the result holds, per op index, the digest of the rule the op writes,
   * from the bytes sent ('' for other ops). An addon built before that ignores it. With echo and
   * digests, held: per op index, the digest of the rule the kernel echoed for it; unnamed: per op
   * index, a sent rule's digest with its anonymous sets unnamed (CommitResult.unnamed). echoCut: the
   * batch committed but the kernel dropped echoes (a full receive buffer): no handles. hints: what
   * the encoder need not read again (socket.ts, encodeHints); an addon built before ignores them.
   * echo: true, or the op indices whose new rules are echoed (an addon built before echoes all).
   * keepExprs: the result holds the batch's bytes as sent and where each rule op's
   * NFTA_RULE_EXPRESSIONS attribute lies in them (exprs, exprsAt); an addon built before gives none.
   */
  commit(ops: readonly unknown[], generation?: number, echo?: boolean | readonly number[],
    exprBytes?: readonly (Buffer | undefined)[], digests?: boolean, hints?: Uint32Array, keepExprs?: boolean): Promise<void | NativeCommitResult>;
  /** commit() of a small batch on this thread, or false (not small, or the socket busy): nothing sent. Absent from an older addon. */
  /** The last batch the kernel refused by its generation, sent again guarded by `generation`; false: none kept. Absent before it. */
  recommit?(generation: number): Promise<void | NativeCommitResult> | false;
  commitNow?(ops: readonly unknown[], generation?: number, echo?: boolean | readonly number[],
    exprBytes?: readonly (Buffer | undefined)[], digests?: boolean, hints?: Uint32Array, keepExprs?: boolean): void | NativeCommitResult | false;
}

export interface NativeMonitor {
  close(): void;
  setFilter(tables: [string, string][] | null, ignorePorts: readonly (number | readonly [number, number])[]): void;
  progress(): [number, number, number];
  /** Reads what the socket holds now, hands its batches over, then progress(). Absent from an addon built before it. */
  readNow?(): [number, number, number];
  anchor(generation: number, overflowsSeen: number): void;
  /** Joins the nftables group (a monitor opened with subscribeLater). Absent from an addon built before it, which subscribes at open. */
  subscribe?(): void;
  /** Absent from an addon built before it. */
  skipOwn?(generation: number): void;
  /** Absent from an addon built before it (Monitor.arm). exprs: as commit's exprBytes, per reaction. */
  arm?(socket: NativeSocket, generation: number,
    reactions: readonly { on: readonly unknown[]; ops?: readonly unknown[]; undo?: boolean; exprs?: readonly (Buffer | undefined)[] }[]): boolean;
  disarm?(): void;
  pause?(): void;
  resume?(): boolean;
  ref(): void;
  unref(): void;
}

export interface Addon {
  NftSocket: new (netns?: string, options?: { receiveBufferLimit?: number }) => NativeSocket;
  /**
   * onBatch: each batch as one record, with progress() as it stands while onBatch runs. `Batch` is
   * MonitorBatch (monitor.ts), named there so that this file imports nothing of netlink/.
   */
  NftMonitor: new <Batch>(netns: string | undefined,
    onBatch: (batch: Batch, lastGeneration: number, runStart: number, delivered: number) => void,
    tables: [string, string][] | null, ignorePorts: readonly (number | readonly [number, number])[], ownCommits?: boolean,
    receiveBuffer?: number, subscribeLater?: boolean, unread?: boolean) => NativeMonitor;
  init(errorClass: typeof NetlinkError): void;
  sdNotify(socketPath: string, message: string): number;
  /** SO_PEERCRED of a connected Unix socket; a number is the errno. */
  peerCred(fd: number): { pid: number; uid: number; gid: number } | number;
  /** The namespace's network interfaces (RTM_GETLINK); a number is the errno. */
  links(netns?: string): { index: number; name: string }[] | number;
  /** A rule's NFTA_RULE_EXPRESSIONS attribute as a commit encodes it (src/netlink/socket.ts caches it). */
  encodeExprs(exprs: readonly unknown[]): Buffer;
  /**
   * Each rule's digest (objects.ts Rule.digest) from the bytes a commit would write for it, '' where
   * there is none. `exprs`: the distinct expressions (each encoded once); `rules`: per rule, its
   * expression count, then their indexes into `exprs`; `userdata`: per rule. Absent from an addon
   * built before it.
   */
  ruleDigests?(exprs: readonly unknown[], rules: Uint32Array, userdata: readonly (string | undefined)[]): string[];
  /**
   * A listening Unix socket bound to the abstract `name` in the namespace (src/lock.ts): its fd, or
   * -errno. Absent from an addon built before it, as are the two below.
   */
  bindAbstract?(netns: string | undefined, name: string): number;
  /** The pid of the process listening on the abstract `name` in the namespace, or -errno. */
  abstractPeerPid?(netns: string | undefined, name: string): number;
  /** flock(fd, LOCK_EX | LOCK_NB): 0, or the errno. */
  flockExclusive?(fd: number): number;
  /** malloc_trim(0): true if memory went back to the system. Absent from an addon built before it. */
  trimMemory?(): boolean;
}

const HERE = dirname(fileURLToPath(import.meta.url));
/** The project (or installed package) root: this file sits in src/netlink/ or dist/netlink/, or is bundled into dist/nfkeeper.script.js. */
export const PROJECT_ROOT = basename(HERE) === 'netlink' ? join(HERE, '..', '..') : join(HERE, '..');

/**
 * "glibc" or "musl": the C library this Node runs on, read from the files mapped into this process
 * (/proc/self/maps: musl's loader is its libc, ld-musl-ARCH.so.1; glibc's is libc.so.6). A
 * diagnostic report says it too (musl Nodes report no glibc version), and is what is asked where
 * /proc cannot be read, but a report is ~4 ms of CPU, most of an installed package's search for
 * its prebuilt addon.
 */
let libcFound: 'glibc' | 'musl' | undefined;
export function libc(): 'glibc' | 'musl' {
  if (libcFound) return libcFound;
  let maps: string | undefined;
  try {
    maps = readFileSync('/proc/self/maps', 'latin1');
  } catch {
    // (no /proc: the report below)
  }
  return libcFound = (maps !== undefined ? libcOfMaps(maps) : undefined) ?? libcOfReport();
}

/** The C library named by the files of /proc/self/maps' text, if one is. */
export function libcOfMaps(maps: string): 'glibc' | 'musl' | undefined {
  // (a library replaced on disk since it was mapped is listed with " (deleted)")
  if (/\/(ld-musl-|libc\.musl-)[^/\s]*( \(deleted\))?$/m.test(maps)) return 'musl';
  if (/\/libc\.so\.6( \(deleted\))?$/m.test(maps)) return 'glibc';
  return undefined;
}

function libcOfReport(): 'glibc' | 'musl' {
  // (the report's header is all this needs: its network part is the slow one; a report the
  // operator asks for later keeps their setting)
  const report = process.report as (NodeJS.ProcessReport & { excludeNetwork?: boolean }) | undefined;
  const excluded = report?.excludeNetwork;
  if (report && excluded !== undefined) report.excludeNetwork = true;
  try {
    const header = (report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
    return header?.glibcVersionRuntime ? 'glibc' : 'musl';
  } finally {
    if (report && excluded !== undefined) report.excludeNetwork = excluded;
  }
}

/** The prebuilt addon for this platform, architecture and C library (it may not exist). */
export function prebuildPath(root = PROJECT_ROOT): string {
  return join(root, 'prebuilds', `${process.platform}-${process.arch}`, `nfkeeper.${libc()}.node`);
}

/** The addon file loadAddon() would load, or undefined when there is none. */
export function addonPath(env: NodeJS.ProcessEnv = process.env, root = PROJECT_ROOT): string | undefined {
  if (env.NFKEEPER_ADDON) return env.NFKEEPER_ADDON;
  // (a build from source first: the prebuilt one is named by its C library)
  const built = join(root, 'build', 'Release', 'nfkeeper.node');
  if (existsSync(built)) return built;
  const prebuilt = prebuildPath(root);
  return existsSync(prebuilt) ? prebuilt : undefined;
}

// The shared libraries the addon needs at run time, and the package that
// ships each. The so-version of libnftnl is part of Debian's package name.
const LIBRARY_PACKAGES: [RegExp, (m: RegExpMatchArray) => string][] = [
  [/^libnftnl\.so\.(\d+)$/, (m) => `apt-get install libnftnl${m[1]} (Fedora: dnf install libnftnl; Alpine: apk add libnftnl)`],
  [/^libmnl\.so\.(\d+)$/, (m) => `apt-get install libmnl${m[1]} (Fedora: dnf install libmnl; Alpine: apk add libmnl)`],
  [/^libstdc\+\+\.so\.(\d+)$/, (m) => `apt-get install libstdc++${m[1]} (Fedora: dnf install libstdc++; Alpine: apk add libstdc++)`],
  [/^libgcc_s\.so\.(\d+)$/, (m) => `apt-get install libgcc-s${m[1]} (Fedora: dnf install libgcc; Alpine: apk add libgcc)`],
];

/** Turns the dynamic loader's message into one line a node's operator can act on. */
export function explainLoadFailure(path: string, message: string): AddonLoadError {
  const first = message.split('\n')[0]!;
  const missing = /([^\s:/]+\.so(?:\.[\d.]+)?): cannot open shared object file/.exec(first)?.[1];
  if (missing) {
    const hint = LIBRARY_PACKAGES.map(([re, f]) => [re.exec(missing), f] as const).find(([m]) => m);
    return new AddonLoadError(`${missing} not found: ${hint ? hint[1](hint[0]!) : 'install the package that provides it'}` +
      ` (needed by ${path})`, path, missing);
  }
  const version = /version [`']([^`']+)' not found/.exec(first)?.[1];
  if (version) {
    return new AddonLoadError(`${path} needs ${version}, newer than this system's; ` +
      "reinstall with 'npm rebuild nfkeeper --build-from-source' (needs libnftnl-dev, libmnl-dev, pkg-config, g++)", path);
  }
  const symbol = /undefined symbol: (\S+)/.exec(first)?.[1];
  if (symbol) {
    return new AddonLoadError(`${path} does not match the libnftnl/libmnl installed (undefined symbol ${symbol}); ` +
      "reinstall nfkeeper, or rebuild it with 'npm rebuild nfkeeper --build-from-source'", path);
  }
  const detail = first.startsWith(path) ? first.slice(path.length).replace(/^:\s*/, '') : first;
  return new AddonLoadError(`the native addon ${path} cannot be loaded (${detail}); reinstall nfkeeper, ` +
    "or rebuild it with 'npm rebuild nfkeeper --build-from-source'", path);
}

let addon: Addon | undefined;

export function loadAddon(): Addon {
  if (addon) return addon;
  const path = addonPath();
  if (!path) {
    throw new AddonLoadError(`no native addon for ${process.platform}-${process.arch} (${libc()}): neither a prebuilt one ` +
      `(${prebuildPath()}) nor a build from source; run 'npm rebuild nfkeeper --build-from-source' ` +
      '(needs libnftnl-dev, libmnl-dev, pkg-config and g++), or in a checkout \'npm run build:native\'', prebuildPath());
  }
  if (!existsSync(path)) {
    throw new AddonLoadError(`the native addon ${path} does not exist` +
      (process.env.NFKEEPER_ADDON ? ' (from NFKEEPER_ADDON)' : ''), path);
  }
  const require = createRequire(import.meta.url);
  let loaded: Addon;
  try {
    loaded = require(path) as Addon;
  } catch (e) {
    throw explainLoadFailure(path, (e as Error).message);
  }
  if (typeof loaded?.init !== 'function' || typeof loaded.NftSocket !== 'function') {
    throw new AddonLoadError(`${path} is not nfkeeper's native addon (it exports no NftSocket)`, path);
  }
  loaded.init(NetlinkError);
  addon = loaded;
  return addon;
}

let digest: string | undefined;
/** The addon file's identity when first asked (fileIdNow), and whether `digest` was taken of the file that has it. */
let fileId: { id: string | undefined } | undefined;
let digestOfFileId = false;

/**
 * The SHA-256 of the addon file loadAddon() loads (hex): what its encoder wrote is another build's
 * when this differs (the compile cache keeps encoded rules). Loads the addon.
 */
export function addonDigest(): string {
  if (digest !== undefined) return digest;
  const id = addonFileId();
  digest = sha256(readFileSync(addonPath()!), 'hex');
  digestOfFileId = id !== undefined && fileIdNow() === id;
  return digest;
}

/**
 * The addon file loadAddon() loads, as the file system identifies it (fileIdNow), taken once, when
 * first asked. A file that has it still is the file whose digest (addonDigest) was taken with it:
 * a write changes its modification and change times, a replacement its inode or change time, and
 * no system call sets the change time back (only the clock set back could, to the tick). What the
 * compile cache checks first instead of hashing the ~0.6 MB addon at every load. Loads the addon.
 */
export function addonFileId(): string | undefined {
  if (fileId !== undefined) return fileId.id;
  loadAddon();
  return (fileId = { id: fileIdNow() }).id;
}

/** addonDigest() and, where that digest was taken of the file addonFileId() names, that identity. */
export function addonIdentity(): { digest: string; file?: string } {
  const d = addonDigest();
  return digestOfFileId ? { digest: d, file: addonFileId()! } : { digest: d };
}

/** The addon file's device, inode, size, modification and change times (ns) now; undefined if it cannot be statted. */
function fileIdNow(): string | undefined {
  const st = statSync(addonPath()!, { bigint: true, throwIfNoEntry: false });
  return st && `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}
