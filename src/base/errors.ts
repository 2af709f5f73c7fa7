/**
 * Errors are values a user can act on: one class per kind, each carrying what
 * failed and where. The native addon builds every kernel failure from
 * NetlinkError (handed to it at load time); the socket wrapper refines that
 * into the subclasses below.
 */
import { constants } from 'node:os';

const ERRNO_NAMES = new Map<number, string>();
for (const [name, value] of Object.entries(constants.errno)) {
  if (!ERRNO_NAMES.has(value)) ERRNO_NAMES.set(value, name);
}
// Node's table lacks this one; the kernel returns it for a stale batch generation.
ERRNO_NAMES.set(85, 'ERESTART');
// 95 is both ENOTSUP and EOPNOTSUPP on Linux; the kernel (and nft) say EOPNOTSUPP.
ERRNO_NAMES.set(95, 'EOPNOTSUPP');

export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}

export class NfkeeperError extends Error {
  override name = 'NfkeeperError';
}

/** A refusal reported in the same batch, beyond the first. */
export interface Refusal {
  opIndex: number;
  errno: number;
  errnoName: string;
  message?: string;
  description?: string;
}

/** The kernel (or the socket) refused: errno, the operation, and for batches which op. */
export class NetlinkError extends NfkeeperError {
  override name = 'NetlinkError';
  readonly errno: number;
  readonly errnoName: string;
  /** "open", "generation", "list rules", "commit", ... */
  readonly operation: string;
  /** Index of the failing operation in the batch; -1 when not one op's fault. */
  readonly opIndex: number;
  /** The failing op in nft words, e.g. "add rule ip nat POSTROUTING". */
  description?: string;
  refusals?: Refusal[];

  constructor(message: string, errno: number, operation: string, opIndex = -1) {
    super(message);
    this.errno = errno;
    this.errnoName = errnoName(errno);
    this.operation = operation;
    this.opIndex = opIndex;
  }
}

/** The batch carried a generation id that is no longer current; nothing was changed. */
export class GenerationMismatchError extends NetlinkError {
  override name = 'GenerationMismatchError';
  readonly expected: number;
  constructor(expected: number) {
    super(`the ruleset moved on since generation ${expected}; nothing was changed`, 85, 'commit', -1);
    this.expected = expected;
  }
}

/** A guarded commit met a moved-on generation on every attempt: the ruleset kept changing between read and commit. */
export class GenerationRetriesExhaustedError extends NfkeeperError {
  override name = 'GenerationRetriesExhaustedError';
  constructor(readonly attempts: number, readonly last?: GenerationMismatchError) {
    super(`gave up after ${attempts} attempts: the ruleset kept changing between read and commit`);
  }
}

/**
 * Every attempt at a dump was interrupted by a concurrent change to the
 * ruleset (the kernel flagged it NLM_F_DUMP_INTR), so no consistent view was
 * read. errno is EINTR.
 */
export class DumpInterruptedError extends NetlinkError {
  override name = 'DumpInterruptedError';
  readonly attempts: number;
  constructor(operation: string, attempts: number) {
    super(`${operation}: interrupted by a concurrent change to the ruleset on all ${attempts} attempts`, 4, operation, -1);
    this.attempts = attempts;
  }
}

/**
 * The kernel said EPERM: this process lacks a privilege. The message names it
 * (root, or CAP_NET_ADMIN for nftables and CAP_SYS_ADMIN to enter another
 * network namespace) instead of a bare "Operation not permitted".
 */
export class PrivilegeError extends NetlinkError {
  override name = 'PrivilegeError';
  constructor(operation: string, what: string) {
    super(`${what}: permission denied; ${PrivilegeError.needed(operation)}`, 1, operation, -1);
  }
  static needed(operation: string): string {
    const uid = process.geteuid?.();
    const who = uid === undefined || uid === 0 ? 'this process' : `uid ${uid}`;
    return operation === 'open'
      ? `${who} may not enter that network namespace: run nfkeeper as root, or with CAP_SYS_ADMIN and CAP_NET_ADMIN`
      : `${who} may not use nftables: run nfkeeper as root, or with CAP_NET_ADMIN (in the target namespace)`;
  }
}

/** A method was called on a closed socket or monitor. */
export class SocketClosedError extends NetlinkError {
  override name = 'SocketClosedError';
  constructor(operation: string) {
    super(`${operation}: the socket is closed`, 9, operation, -1);
  }
}

/** An operation was malformed when queued; nothing reached the kernel. */
export class InvalidOperationError extends NfkeeperError {
  override name = 'InvalidOperationError';
  readonly opIndex: number;
  readonly field: string;
  constructor(opIndex: number, field: string, reason: string) {
    super(`operation ${opIndex}: ${field}: ${reason}`);
    this.opIndex = opIndex;
    this.field = field;
  }
}

/** A configuration file is invalid; nothing was changed in the kernel. */
export class ConfigError extends NfkeeperError {
  override name = 'ConfigError';
  readonly file: string;
  readonly line: number;
  readonly column: number;
  readonly reason: string;
  /** Every error found in the file, this one first (the loader checks all rules and chains before it throws). */
  all: ConfigError[] = [this];
  constructor(file: string, line: number, column: number, reason: string) {
    super(`${file}:${line}:${column}: ${reason}`);
    this.file = file;
    this.line = line;
    this.column = column;
    this.reason = reason;
  }
}

/**
 * A rule text was refused: malformed, or outside what the rule language
 * supports. Nothing was compiled; `column` (1-based) and `token` say where,
 * `expected` what would have been accepted there.
 */
export class RuleSyntaxError extends NfkeeperError {
  override name = 'RuleSyntaxError';
  readonly text: string;
  readonly column: number;
  readonly token: string;
  readonly expected: string;
  constructor(text: string, column: number, token: string, expected: string, reason?: string) {
    const where = token === '' ? 'at the end of the rule' : `at column ${column}, '${token}'`;
    const caret = ' '.repeat(Math.max(0, column - 1)) + '^'.repeat(Math.max(1, Math.min(token.length, 80)));
    super(`${reason ?? 'syntax error'} ${where}: expected ${expected}\n  ${text}\n  ${caret}`);
    this.text = text;
    this.column = column;
    this.token = token;
    this.expected = expected;
  }
}

/**
 * The native addon could not be loaded: which file, and when a shared library
 * is missing, which one and the package that provides it. One line, no stack.
 */
export class AddonLoadError extends NfkeeperError {
  override name = 'AddonLoadError';
  /** The addon file that was tried last. */
  readonly path: string;
  /** The shared library the dynamic loader could not find, e.g. "libnftnl.so.11". */
  readonly library?: string;

  constructor(message: string, path: string, library?: string) {
    super(message);
    this.path = path;
    this.library = library;
  }
}
