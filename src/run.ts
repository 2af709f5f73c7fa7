/**
 * `nfkeeper run`: the daemon's wiring. Start-up is all or nothing: the
 * config, the owners state file, the namespace (and the privilege to use
 * it), the metrics listener and the control socket are all checked, and the
 * listeners bound, before the first write to the kernel; any failure there
 * throws (cli.ts prints one line and exits 2) with the kernel untouched.
 * After start-up, a fatal condition (the namespace gone or replaced, a
 * listener failing) stops every timer and listener and returns 2, so the
 * process always either runs or exits.
 */
import { existsSync, rmSync, statSync, watch } from 'node:fs';
import { readRegularFile } from './base/regular-file.js';
import { sha256 } from './base/sha256.js';
import { basename, dirname } from 'node:path';
import type { Server } from 'node:http';
import { getHeapStatistics } from 'node:v8';
import { enableCollections } from './base/heap.js';
import { MAX_CONFIG_BYTES, loadConfig, namespaceInterfaces, type Config } from './config/config.js';
import { ConfigError, NfkeeperError } from './base/errors.js';
import { EnvFileMissingError } from './config/env.js';
import { compiledInstead, fileDigests, loadConfigCached, removeUnreadable, unmadeRules, type FileDigests } from './config/compile-cache.js';
import { traced } from './base/compile-inputs.js';
import { runByTurns } from './base/sliced.js';
import { formatDuration } from './base/duration.js';
import { compactAsCompiled } from './model/compact.js';
import { RuleReuse } from './config/rule-reuse.js';
import { Keeper } from './keeper/keeper.js';
import { KeeperMetrics } from './base/metrics.js';
import { sendEvents, serveMetrics } from './keeper/http.js';
import { NftSocket } from './netlink/socket.js';
import type { SentRuleExprs } from './netlink/sent-exprs.js';
import { Notifier } from './systemd.js';
import { GcLoop } from './gc/daemon.js';
import { tablesProof } from './keeper/oneshot.js';
import { kernelHost } from './netlink/host.js';
import { loadOwners } from './owners/state-file.js';
import { OwnerRegistry } from './owners/registry.js';
import { serveControl, type ControlServer } from './owners/api.js';
import { parseOwnerChain, type Owner } from './owners/spec.js';
import type { Logger } from 'pino';
import { createDaemonLogger, type LogLevel } from './log.js';
import { ReloadStatusWriter } from './reload-status.js';
import { memoryTrimmer } from './netlink/unix.js';
import { lockKeeper } from './lock.js';

/** V8's heap shrinking by this much between two ticks (its memory reducer at work) trims the C heap. */
const TRIM_AFTER_SHRINK = 4 << 20;

export interface DaemonOptions {
  /** nfkeeper's version, for the nfkeeper_build_info metric. */
  version: string;
  config: string;
  /** Where a .nft config's includes are looked for before /etc (nft's -I). */
  includePath?: string[];
  netns?: string;
  intervalMs: number;
  /** HOST:PORT already parsed by the caller, or undefined for --no-metrics. */
  metrics?: string;
  events: boolean;
  logLevel: LogLevel;
  socket?: string;
  socketMode?: number;
  /** Owners and control-socket connections at most (defaults in src/owners/). */
  maxOwners?: number;
  /** Foreign changes remembered (Keeper's history); default 256. */
  history?: number;
  maxConnections?: number;
  /** How often the --netns path is checked against the namespace the sockets were opened in. */
  netnsCheckMs?: number;
  /** Where each reload's result is written, for `nfkeeper reload` (src/reload-status.ts). */
  reloadStatus?: string;
  /** How long start-up waits for an env file the config lists to appear (0: not at all). */
  envWaitMs?: number;
  /** Where the restart record is kept (src/keeper/record.ts); undefined: none. */
  recordDir?: string;
  /** Where the compile cache is kept (src/config/compile-cache.ts); undefined: none. */
  cacheDir?: string;
}

/** How often a missing env file is looked for at start-up. */
const ENV_POLL_MS = 500;

/** How long a starting daemon waits for the locks another process holds (lockKeeper). */
const LOCK_WAIT_MS = 15_000;

/** How long a stopping daemon waits for a compile cache store under way (100,000 rules: ~1-2 s). */
const STORE_ON_STOP_MS = 10_000;

/**
 * While starting, systemd is told every so often to extend its start time-out by this much
 * (EXTEND_TIMEOUT_USEC): a big install or an env-file wait takes longer than TimeoutStartSec,
 * but no single step of the start-up (the longest is the config's compile) comes near it.
 */
const EXTEND_START_MS = 60_000;

/**
 * Loads the config at start-up. An env file it lists that does not exist yet is waited for (on a
 * new node flannel writes its subnet.env only once it has a lease): one log line, systemd's STATUS,
 * a look every ENV_POLL_MS, for at most `waitMs`; then a clear failure. Any other error (and a
 * file that exists but is bad) fails at once. The process is not ready meanwhile: nothing is
 * listening yet, and systemd has no READY=1.
 */
async function loadWaitingForEnv(o: DaemonOptions, log: Logger, tell: (message: string) => void): Promise<ReturnType<typeof loadDaemonConfig>> {
  const waitMs = o.envWaitMs ?? 0;
  const t0 = performance.now();
  let logged = false;
  for (;;) {
    try {
      return loadDaemonConfig(o, log);
    } catch (e) {
      if (!(e instanceof EnvFileMissingError) || waitMs === 0) throw e;
      const missing = e;
      if (!logged) {
        logged = true;
        log.warn({ file: missing.path, listedAt: `${missing.file}:${missing.line}:${missing.column}`, waitMs },
          `waiting for the env file ${missing.path} the config lists (at most ${formatDuration(waitMs)}, --env-wait)`);
        tell(`STATUS=waiting for the env file ${missing.path}`);
      }
      while (!existsSync(missing.path)) {
        if (performance.now() - t0 >= waitMs) {
          throw new NfkeeperError(`${missing.file}:${missing.line}:${missing.column}: env.files: ${missing.path} did not appear within ${formatDuration(waitMs)} (--env-wait); nothing was written to the kernel`);
        }
        tell(`EXTEND_TIMEOUT_USEC=${EXTEND_START_MS * 1000}`);
        await new Promise((r) => setTimeout(r, ENV_POLL_MS));
      }
    }
  }
}

/**
 * The config compiled for the namespace, through the compile cache (src/config/compile-cache.ts)
 * when the daemon keeps one (--cache-dir), and the cache's work for once it runs
 * (`later`: the compiled config's store, or the making of the rules read from it). Throws the
 * compile's errors.
 */
function loadDaemonConfig(o: DaemonOptions, log: Logger, previous?: Config): {
  config: Config;
  /** What the load compiled, and took from `previous` instead (rule-reuse.ts); from the cache, neither. */
  rules: { compiled: number; reused: number };
  later?: () => Promise<void>; readBack?: () => string | undefined; files?: FileDigests;
  /** `later` is the compiled config's store (a stop waits for it), not the making of the cache's rules. */
  stores?: true;
  /** For the store (`later`): the start-up install's rules' expressions as sent (KeeperOptions.startupExprs). */
  sent?: (sent: SentRuleExprs) => void;
  /** From the cache: its entry, and its rules made a slice per turn (the error if they cannot be). */
  hit?: { file: string; madeWhole: () => Promise<unknown> };
} {
  // At a start too: what each rule's compile depended on is kept for the first reload.
  const reuse = new RuleReuse(previous);
  const options = { interfaces: namespaceInterfaces(o.netns), compiled: compactAsCompiled(), includePath: o.includePath, reuse };
  const counts = () => ({ compiled: reuse.compiledCount, reused: reuse.reused });
  if (o.cacheDir === undefined) {
    const { value: config, inputs } = traced(() => loadConfig(o.config, options));
    return { config, rules: counts(), ...(inputs ? { files: fileDigests(inputs) } : {}) };
  }
  const { config, cache, store, make, files } = loadConfigCached(o.config, options, { dir: o.cacheDir, version: o.version, netns: o.netns, lateOnlyIfRemovable: true });
  const rules = counts();
  if (cache.used) {
    log.info({ cache: cache.file, ...(cache.madeNow ? { why: cache.madeNow } : {}) },
      `compile cache matches every input: the config was not compiled${cache.madeNow ? '; its rules were made now, not once running' : ''}`);
    // Its rules, made when first read, are made a slice per turn once running: the first repair
    // after a restart does not make a big chain's on its way. Where they cannot be made, the entry
    // is removed (or why not is said).
    const madeWhole = async (): Promise<unknown> => {
      try {
        await runByTurns(make!());
        return undefined;
      } catch (e) {
        return e ?? new Error(String(e));
      }
    };
    return { config, rules, files, ...(make ? {
      hit: { file: cache.file, madeWhole },
      later: async () => {
        const e = await madeWhole();
        if (e !== undefined) throw new Error(unreadable(cache.file, e));
      },
      // A start that fails before ready may have failed reading a rule of these (a first pass that
      // diffs the kernel's tables): kept, every start would fail there again.
      readBack: () => {
        const e = unmadeRules(make);
        return e === undefined ? undefined : unreadable(cache.file, e);
      },
    } : {}) };
  }
  log.info({ cache: cache.file, why: cache.why }, 'compile cache not used; the config was compiled');
  // The start-up's install encoded every rule it added: the store keeps those bytes, not encoding them again.
  let sentByInstall: SentRuleExprs | undefined;
  return {
    config,
    rules,
    files,
    ...(store ? { sent: (s: SentRuleExprs) => { sentByInstall = s; } } : {}),
    stores: true,
    // A slice per turn of the event loop: a big config's store does not hold back a repair due meanwhile.
    later: async () => {
      const sent = sentByInstall;
      sentByInstall = undefined;
      const why = store ? await runByTurns(store(undefined, sent)) : 'nothing to store';
      if (why === undefined) log.info({ cache: cache.file }, 'compiled config stored in the compile cache');
      else log.info({ cache: cache.file, why }, 'compiled config not stored in the compile cache; the next start compiles it');
    },
  };
}

/**
 * Said of a compile cache entry whose rules could not be made (`e`), once removed. It passed its
 * seal, so this is a fault of ours: without it the next start compiles. Found removable at the load
 * (loadConfigCached's lateOnlyIfRemovable); if it is not now, the next start finds it so, makes its
 * rules at the load, fails there and compiles.
 */
function unreadable(file: string, e: unknown): string {
  return restartSaid(removeUnreadable(file, e));
}

function restartSaid(r: { removed: boolean; said: string }): string {
  return r.removed ? `${r.said}, the next start compiles the config`
    : `${r.said}; the next start finds that, makes its rules before it is ready, and compiles the config`;
}

/** The namespace a path names: its nsfs device and inode. */
interface NamespaceId { dev: number; ino: number }

function namespaceId(path: string): NamespaceId {
  const st = statSync(path);
  return { dev: st.dev, ino: st.ino };
}

/**
 * The ids of the owners whose chains the owners table holds now (a restart: the kernel kept them),
 * for the start-up isolation to keep in place; none when it cannot be read.
 */
async function heldOwners(keeper: Keeper, config: Config): Promise<Set<string>> {
  const ids = new Set<string>();
  if (!config.owners || !keeper.socket) return ids;
  try {
    for (const c of await keeper.socket.listChains({ family: config.owners.family, table: config.owners.table })) {
      const p = parseOwnerChain(c.name);
      if (p) ids.add(p.id);
    }
  } catch { /* no table yet, or unreadable: add every owner in halves */ }
  return ids;
}

/**
 * Opens a socket in the namespace and reads its generation: the namespace
 * exists, and this process may enter it and use nftables there. Returns the
 * namespace's identity, taken around the open so a path swapped meanwhile is
 * caught.
 */
function probeNamespace(netns: string | undefined): NamespaceId | undefined {
  let before: NamespaceId | undefined;
  if (netns !== undefined) {
    try {
      before = namespaceId(netns);
    } catch (e) {
      throw new NfkeeperError(`--netns ${netns}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such namespace (the path does not exist)' : (e as Error).message}`);
    }
  }
  const sock = new NftSocket({ netns });
  try {
    sock.generation();
  } finally {
    sock.close();
  }
  if (netns !== undefined) {
    const after = namespaceId(netns);
    if (after.dev !== before!.dev || after.ino !== before!.ino) throw new NfkeeperError(`--netns ${netns}: the path changed namespaces while nfkeeper opened it`);
  }
  return before;
}

/** Binds a listener; an address in use or refused is a one-line NfkeeperError naming the flag. */
async function bound<T>(what: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (e instanceof NfkeeperError) throw e;
    const why = code === 'EADDRINUSE' ? 'the address is in use (another nfkeeper?)'
      : code === 'EACCES' || code === 'EPERM' ? 'permission denied'
        : code === 'EADDRNOTAVAIL' ? 'no interface has that address'
          : code === 'ENOTFOUND' || code === 'EAI_AGAIN' ? 'the host name does not resolve'
            : code === 'ENOTDIR' || code === 'EEXIST' ? `a part of the path is not a directory (${(e as Error).message})`
            : (e as Error).message;
    throw new NfkeeperError(`${what}: cannot listen: ${why}`);
  }
}

export async function runDaemon(o: DaemonOptions): Promise<number> {
  // Big commits collect the JS garbage before encoding (src/base/heap.ts).
  enableCollections();
  const { logger: log, close: closeLog } = createDaemonLogger({ level: o.logLevel });
  const cleanups: (() => unknown)[] = [closeLog];
  // A SIGHUP during start-up (systemd's ExecReload, a probe that saw /readyz) is a reload once
  // running, not the default action that would end the daemon.
  let hupDuringStart = false;
  const earlyHup = () => { hupDuringStart = true; };
  process.on('SIGHUP', earlyHup);
  cleanups.push(() => process.off('SIGHUP', earlyHup));
  const cleanup = async () => {
    for (const c of cleanups.splice(0).reverse()) {
      try {
        await c();
      } catch (e) {
        log.warn({ err: (e as Error).message }, 'shutdown step failed');
      }
    }
  };

  // Everything below up to keeper.start() touches no kernel state.
  let keeper: Keeper;
  let registry: OwnerRegistry | undefined;
  let control: ControlServer | undefined;
  let server: Server | undefined;
  let config: Config;
  let nsId: NamespaceId | undefined;
  /** The config file and the files its last load included. */
  let files: string[] = [];
  const filesOf = (c: Config): string[] => [o.config, ...(c.includes ?? [])];
  // Regular files only, read without blocking (a FIFO swapped in must not stall the loop in open()).
  // What the files hold, by digest: equal digests, equal bytes (a big config's text is not decoded
  // and kept only to be compared). `known`: the digests the load took of the bytes it compiled (a
  // file written since then is a change, and a big config is not read and hashed a second time).
  const textOf = (known?: FileDigests): string | undefined => {
    try {
      return files.map((f) => known?.get(f) ?? sha256(readRegularFile(f, MAX_CONFIG_BYTES), 'hex')).join(' ');
    } catch (e) {
      // Mid-swap (the next event will tell), or not a regular file any more: said, the old config stays.
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') {
        log.error({ err: (e as Error).message, file: o.config }, 'config reload rejected; keeping the old one');
      }
      return undefined;
    }
  };
  let loadedText: string | undefined;
  const metrics = new KeeperMetrics(true, { version: o.version });
  const systemd = new Notifier();
  // What start-up says to systemd is advice: a refusal is logged, and start-up carries on.
  const tell = (message: string) => {
    try {
      systemd.notify(message);
    } catch (e) {
      log.debug({ err: (e as Error).message, message }, 'sd_notify failed');
    }
  };
  // The start-up may outlast TimeoutStartSec (an env file's wait, a big install): extended as it goes.
  const extend = () => tell(`EXTEND_TIMEOUT_USEC=${EXTEND_START_MS * 1000}`);
  extend();
  const extendTimer = systemd.socket ? setInterval(extend, EXTEND_START_MS / 4) : undefined;
  /** Work that waits until the daemon is running. */
  const afterReady: (() => void)[] = [];
  /** The compile cache's store under way (a start's that compiled, a reload's): a stop waits for it. */
  let storing: Promise<void> | undefined;
  const store = (later: () => Promise<void>) => {
    const p = later().catch((e: unknown) => fatal((e as Error).message));
    storing = p;
    void p.finally(() => { if (storing === p) storing = undefined; });
  };
  let started!: () => void;
  let failedToStart!: (e: unknown) => void;
  /** Whether the compile cache's rules, when the config came from it, can all be made (why not, removed). */
  let readBack: (() => string | undefined) | undefined;
  const ready = new Promise<void>((resolve, reject) => { started = resolve; failedToStart = reject; });
  ready.catch(() => undefined);
  try {
    // The namespace first: iif/oif names in the config resolve there.
    nsId = probeNamespace(o.netns);
    let later: (() => Promise<void>) | undefined;
    let digests: FileDigests | undefined;
    let sent: ((s: SentRuleExprs) => void) | undefined;
    let stores: true | undefined;
    ({ config, later, readBack, files: digests, sent, stores } = await loadWaitingForEnv(o, log, tell));
    // The compile cache is written once the daemon is running, not before it is ready.
    if (later) {
      const work = later;
      afterReady.push(stores ? () => store(work) : () => void work().catch((e: unknown) => fatal((e as Error).message)));
    }
    files = filesOf(config);
    loadedText = textOf(digests);
    extend();
    // One keeper per table and per state file, held until exit (released last: cleanups run in reverse).
    // A one-shot apply, cleanup or gc holds these locks for seconds: the daemon waits for them rather
    // than exit (another daemon, holding them for its life, still refuses this one, LOCK_WAIT_MS later).
    const lock = lockKeeper({ netns: o.netns, tables: config.tables, stateFile: config.owners?.state, wait: {
      ms: LOCK_WAIT_MS,
      holder: (what, pid) => log.info({ lock: what, holder: pid, waitMs: LOCK_WAIT_MS }, 'locked by another nfkeeper; waiting for it'),
    } });
    cleanups.push(() => lock.release());
    // A stop, or a fatal error, lets the compile cache's store under way end first (STORE_ON_STOP_MS
    // at most; the keeper and the sockets are closed by then): a daemon stopped right after a start
    // that compiled leaves its entry, and its next start does not compile again.
    cleanups.push(async () => {
      let timer: NodeJS.Timeout | undefined;
      if (storing) await Promise.race([storing, new Promise((r) => { timer = setTimeout(r, STORE_ON_STOP_MS); })]);
      clearTimeout(timer);
    });
    // The owners come before the first pass: starting without them would collect their rules.
    const owners: Owner[] = config.owners ? loadOwners(config) : [];
    keeper = new Keeper({ config, netns: o.netns, intervalMs: o.intervalMs, events: o.events, logger: log, metrics, owners, history: o.history,
      ...(o.recordDir !== undefined ? { record: { dir: o.recordDir, version: o.version } } : {}), ...(sent ? { startupExprs: sent } : {}) });
    keeper.on('error', () => undefined);  // logged by the keeper; the loop carries on
    const k = keeper;
    registry = config.owners ? new OwnerRegistry(config, owners, (next) => k.setOwners(next), {
      maxOwners: o.maxOwners, logger: log, onRefused: (r) => metrics.ownersRefused.set(r.length),
    }) : undefined;
    const reg = registry;
    // Last out (cleanups run in reverse): after the control socket closed, fold the state journal into the file.
    if (reg) cleanups.push(() => reg.close());
    const cfg = config;
    if (o.metrics) {
      const spec = o.metrics;
      server = await bound(`--metrics ${spec}`, () => serveMetrics(k, spec));
      const s = server;
      cleanups.push(() => s.close());
    }
    const socketPath = o.socket ?? config.owners?.socket;
    if (socketPath) {
      control = await bound(`control socket ${socketPath}`, () => serveControl({
        path: socketPath, registry: reg, logger: log, mode: o.socketMode, ready, maxConnections: o.maxConnections, events: (req, res) => sendEvents(k.attribution, req, res),
        status: async () => ({
          ...k.status(),
          ...(cfg.owners && reg ? {
            owners: { registered: reg.size, table: `${cfg.owners.family} ${cfg.owners.table}`, dispatch: cfg.owners.dispatch, totals: reg.totals, limits: cfg.owners.limits,
              refused: reg.refusedOwners() },
            ownedGc: {
              found: await counterByKind(metrics.ownedGcFound),
              collected: await counterByKind(metrics.ownedGcCollected),
            },
          } : {}),
        }),
      }));
      const c = control;
      cleanups.push(() => c.close());
    }
    // The first write to the kernel. stop() is safe on a keeper whose start failed half-way
    // (its sockets are closed, its timers never set).
    cleanups.push(() => k.stop());
    tell(`STATUS=installing ${config.tables.length} tables`);
    await keeper.start();
    if (!keeper.isReady()) {
      // The kernel refused the start-up batch. Not for one owner's sake: the config alone, then the
      // owners without the ones it refuses (OwnerRegistry.isolate). The config itself refused is a
      // failed start-up (exit 2), as a config the kernel refuses is for `apply`.
      const why = () => keeper.status().lastError ?? 'the start-up pass failed';
      if (!registry || registry.size === 0) throw new NfkeeperError(`the kernel refused the config: ${why()}; nothing was changed in the kernel`);
      try {
        await registry.isolate(await heldOwners(keeper, config));
      } catch (e) {
        throw new NfkeeperError(`the kernel refused the config, even without any owner: ${(e as Error).message}`);
      }
    }
    started();
  } catch (e) {
    clearInterval(extendTimer);
    // The failure may be the compile cache's (a rule of it read by the first pass): said with it.
    const bad = readBack?.();
    const err = bad === undefined ? e : new NfkeeperError(`${(e as Error).message}; ${bad}`);
    if (bad !== undefined) log.fatal({ err: (e as Error).message }, bad);
    failedToStart(err);
    await cleanup();
    throw err;
  }
  clearInterval(extendTimer);

  // From here on the daemon runs until a signal or a fatal condition ends it.
  let finish!: (error?: NfkeeperError) => void;
  const done = new Promise<NfkeeperError | undefined>((resolve) => { finish = resolve; });
  const fatal = (msg: string, extra: Record<string, unknown> = {}) => {
    log.fatal(extra, `${msg}; exiting (the rules stay in place)`);
    finish(new NfkeeperError(`${msg}; exited (the rules stay in place)`));
  };

  const gcLoop = config.gc && config.gc.foreign.length > 0 && (config.gc.live || registry)
    ? new GcLoop({ gc: config.gc, netns: o.netns, logger: log, metrics,
      ...(registry ? ((r) => ({ liveIds: () => r.liveIds(), exclusive: <T>(fn: () => Promise<T>) => r.exclusive(fn) }))(registry) : {}),
      proof: tablesProof(kernelHost(o.netns).watch) })
    : undefined;
  if (gcLoop) {
    gcLoop.start();
    cleanups.push(() => gcLoop.stop());
  }
  server?.on('error', (e) => fatal('the metrics listener failed', { err: e.message }));
  control?.server.on('error', (e) => fatal('the control socket failed', { err: e.message }));

  // A namespace deleted under the daemon (or its path bound to a new one) is
  // kept by nobody: exit, so a supervisor restarts the daemon against the new one.
  if (o.netns !== undefined && nsId) {
    const path = o.netns;
    const id = nsId;
    const every = o.netnsCheckMs ?? Math.max(100, Math.min(o.intervalMs, 2000));
    const check = () => {
      let now: NamespaceId;
      try {
        now = namespaceId(path);
      } catch (e) {
        fatal(`the network namespace ${path} is gone`, { netns: path, err: (e as Error).message });
        return;
      }
      if (now.dev !== id.dev || now.ino !== id.ino) {
        fatal(`${path} now names another network namespace than the one nfkeeper keeps`, { netns: path, was: id.ino, now: now.ino });
      }
    };
    if (every === o.intervalMs) {
      // On the keeper's own tick: a timer of its own woke the idle daemon a second time each
      // second, some milliseconds after the tick (bench/idle.ts counts the wake-ups).
      const k = keeper;
      k.on('tick', check);
      cleanups.push(() => k.off('tick', check));
    } else {
      const timer = setInterval(check, every);
      cleanups.push(() => clearInterval(timer));
    }
  }

  // The watchdog is fed from the loop itself, so a stalled loop stops feeding it.
  let lastFed = 0;
  if (systemd.watchdogMs !== undefined) {
    const every = systemd.watchdogMs;
    keeper.on('tick', () => {
      const now = Date.now();
      if (now - lastFed >= every / 2) {
        lastFed = now;
        systemd.notify('WATCHDOG=1');
      }
    });
    if (every < o.intervalMs) {
      log.warn({ watchdogMs: every * 2, intervalMs: o.intervalMs }, 'WatchdogSec is shorter than the check interval');
    }
  }

  // Memory back to the system once V8 has shrunk its heap after a burst (the start-up read-back
  // of a big config, a registration storm): its collector's worker threads leave what they used
  // in glibc arenas of their own, which nothing else gives back.
  // One heap-statistics read a tick; the trim runs only after a shrink.
  const trimMemory = memoryTrimmer();
  if (trimMemory) {
    let lastHeap = getHeapStatistics().total_heap_size;
    keeper.on('tick', () => {
      const heap = getHeapStatistics().total_heap_size;
      if (heap < lastHeap - TRIM_AFTER_SHRINK) trimMemory();
      lastHeap = heap;
    });
  }

  const status = o.reloadStatus ? new ReloadStatusWriter(o.reloadStatus) : undefined;
  const report = (ok: boolean, why: string, error?: string) => {
    try {
      status?.report(ok, why, error);
    } catch (e) {
      log.warn({ err: (e as Error).message, file: o.reloadStatus }, 'could not write the reload status');
    }
  };
  /**
   * Every rejected reload, whoever refused it (the loader, the daemon's checks, the kernel): the
   * status file first, then the log line, so whoever reads the line finds the file written.
   */
  const rejected = (why: string, e: unknown) => {
    metrics.reloadFailed.set(1);
    report(false, why, (e as Error).message);
    // Ours (the config, the checks, the kernel's refusal) said by its message; anything else with its stack.
    log.error({ err: e instanceof NfkeeperError ? e.message : e, why }, 'config reload rejected; keeping the old one');
  };
  /** The config the last load gave (the start's, then each reload's): the next reload reuses its compiled rules. */
  let lastLoaded: Config | undefined = config;
  /** Set below: the files a reload read are watched from then on. */
  let configLoaded: (next: Config, digests?: FileDigests) => void = () => undefined;
  // Reloads reach the keeper in the order they came: one from the compile cache waits for its rules
  // (below), and a reload after it waits for that.
  let reloads = Promise.resolve();
  let stopped = false;
  cleanups.push(() => { stopped = true; });
  const reload = (why: string) => {
    reloads = reloads.then(() => reloadNow(why)).catch((e: unknown) => fatal(`a config reload failed: ${(e as Error).message}`));
  };
  const reloadNow = async (why: string) => {
    let next: Config;
    let rules: { compiled: number; reused: number };
    let later: (() => Promise<void>) | undefined;
    let digests: FileDigests | undefined;
    try {
      // An empty file is a write caught half-way (truncated, not yet written), far more often than
      // a wish to drop every table: that takes a file with a comment in it.
      if (statSync(o.config).size === 0) throw new ConfigError(o.config, 1, 1, 'the file is empty (being written?); a config with no tables needs at least a comment');
      let loaded = loadDaemonConfig(o, log, lastLoaded);
      // From the compile cache, the keeper gets the config once its rules are all made (a turn at a
      // time): one that cannot be made (the entry passed its seal: a fault of ours) is met here, not
      // by the keeper's passes or a repair. The entry is removed (or why not is said), the config
      // compiled, and the reload goes on with that, as apply does.
      for (let tries = 0; loaded.hit; tries++) {
        const e = await loaded.hit.madeWhole();
        if (e === undefined) break;
        // A second hit that fails (stored again meanwhile) compiles without the cache.
        loaded = compiledInstead(loaded.hit.file, e, (said) => log.warn({ why }, `${said}; the config was compiled`),
          (throughCache) => loadDaemonConfig(throughCache && tries === 0 ? o : { ...o, cacheDir: undefined }, log, lastLoaded));
      }
      if (stopped) return;
      ({ config: next, files: digests, rules } = loaded);
      // The next reload reuses this one's rules, whether or not the kernel takes it (a rule's reuse depends on its context, not on that).
      lastLoaded = next;
      later = loaded.hit ? undefined : loaded.later;
    } catch (e) {
      rejected(why, e);
      return;
    }
    try {
      registry?.checkConfig(next);
      if (!registry && next.owners) throw new NfkeeperError('an owners section was added; that takes a restart (the reload was rejected)');
    } catch (e) {
      rejected(why, e);
      return;
    }
    gcLoop?.setConfig(next.gc);
    configLoaded(next, digests);
    // With owners, in the registry's turn: one the new config makes the kernel refuse is left out, not the reload.
    (registry ? registry.reconfigure(next, (c, owners) => keeper.setConfig(c, owners)) : keeper.setConfig(next)).then(() => {
      report(true, why);
      log.info({ why, rules }, 'config reloaded');
    }, (e) => rejected(why, new NfkeeperError(`the kernel refused the new config; the old one stays in force: ${(e as Error).message}`)))
      // The compile cache's store once the keeper has the config (kept or refused, as before): run
      // beside the reload's pass, its turns (a whole config encoded again) held the pass back, and
      // the repairs waiting for it.
      .finally(() => { if (later && !stopped) store(later); });
  };
  const onHup = () => reload('SIGHUP');
  process.on('SIGHUP', onHup);
  cleanups.push(() => process.off('SIGHUP', onHup));
  process.off('SIGHUP', earlyHup);
  if (hupDuringStart) reload('SIGHUP during start-up');
  // Watch the directories, not the files: editors replace files and a Kubernetes ConfigMap swaps a
  // symlink, and both would orphan a watch on the file itself. A .nft config's included files are
  // watched with it (the ones its last load read).
  // The text as loaded, not as found once the watches are set: a file written while the first
  // pass ran would otherwise be taken as already read and never reloaded.
  let lastText = loadedText;
  let debounce: NodeJS.Timeout | undefined;
  const changed = () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      const text = textOf();
      if (text === undefined || text === lastText) return;
      lastText = text;
      reload('file changed');
    }, 200);
  };
  const watchers = new Map<string, ReturnType<typeof watch>>();
  const rewatch = () => {
    for (const dir of new Set(files.map((f) => dirname(f)))) {
      if (watchers.has(dir)) continue;
      const watcher = watch(dir, (_event, name) => {
        if (name && !String(name).startsWith('..') && !files.some((f) => dirname(f) === dir && basename(f) === String(name))) return;
        changed();
      });
      watcher.on('error', (e) => log.warn({ err: e.message, dir }, 'config watch failed; SIGHUP still reloads'));
      watchers.set(dir, watcher);
    }
  };
  rewatch();
  changed();  // anything written between the load and the watches
  configLoaded = (next, digests) => {
    files = filesOf(next);
    rewatch();
    lastText = textOf(digests);
  };
  cleanups.push(() => { for (const w of watchers.values()) w.close(); clearTimeout(debounce); });

  const stop = (sig: NodeJS.Signals) => {
    log.info({ signal: sig }, 'stopping; rules stay in place');
    finish();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  cleanups.push(() => { process.off('SIGTERM', stop); process.off('SIGINT', stop); });

  // Ready only once the signal handlers are in: a SIGHUP sent on the word "running" (by a test, or by
  // systemd's ExecReload) would otherwise meet the default action and end the daemon.
  log.info({ tables: config.tables.map((t) => `${t.family} ${t.name}`), metrics: o.metrics ?? null, socket: control?.path ?? null,
    owners: registry ? registry.size : null }, 'nfkeeper running');
  systemd.notify(`READY=1\nSTATUS=verified ${config.tables.length} tables\nMAINPID=${process.pid}`);
  for (const f of afterReady) setImmediate(f);

  const error = await done;
  systemd.notify('STOPPING=1');
  await cleanup();
  // cli.ts prints a fatal error as its one line on stderr and exits 2.
  if (error) throw error;
  return 0;
}

async function counterByKind(c: KeeperMetrics['ownedGcFound']): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await c.get()).values) out[String(v.labels.kind)] = v.value;
  return out;
}
