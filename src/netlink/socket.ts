/**
 * NftSocket: a netfilter netlink connection in one network namespace. It
 * reads the generation id, dumps tables, chains, rules and sets with the
 * filters in the kernel request, and commits batches, optionally guarded by
 * the generation they were computed from. Dumps and commits run off the JS
 * thread; generation() is a synchronous round trip of a few microseconds.
 */
import { kernelCode, type KernelCode } from './kernel-code.js';
import { COLLECT_BEFORE_OPS, collectGarbage } from '../base/heap.js';
import { DumpInterruptedError, GenerationMismatchError, NetlinkError, PrivilegeError, SocketClosedError } from '../base/errors.js';
import { Batch } from './batch.js';
import { EncodedRuleOp, describeOp, type BoundRuleOp, type Op, type RuleOp } from './ops.js';
import { validateOp, validateRuleExprs } from './validate.js';
import type { Expr, Family } from './expr.js';
import { loadAddon, type Addon, type NativeCommitResult, type NativeSocket } from './addon.js';
import type { Chain, ChainDigests, NftObj, NftSet, Rule, SetElement, Table } from './objects.js';
import type { CommitOptions, CommitResult, NftConn, PortLeft } from './conn.js';
import { SentRuleExprs } from './sent-exprs.js';

export interface OpenOptions {
  /** A network namespace file such as /run/netns/NAME or /proc/PID/ns/net; default: this process's. */
  netns?: string;
  /**
   * Upper bound in bytes for the socket's kernel receive buffer. By default it
   * grows so that every message of a batch could be acknowledged (about 1.5 KiB
   * per message), which also leaves room for one error per message. Batches of
   * more than 64 messages, and any batch whose acknowledgements would not fit,
   * ask the kernel for errors only, which still decides the outcome exactly and
   * names every failing op.
   */
  receiveBufferLimit?: number;
}

export type { CommitOptions } from './conn.js';

// A dump interrupted by a concurrent commit (NLM_F_DUMP_INTR) is retried this
// often before DumpInterruptedError. nft retries without bound; a bound keeps
// a reader from spinning forever against a writer that commits faster than
// one dump takes, and the keeper's next pass tries again anyway.
const DUMP_ATTEMPTS = 32;
const EPERM = 1;
const ENOENT = 2;
const EBADF = 9;
const ERESTART = 85;

export function open(options: OpenOptions = {}): NftSocket {
  return new NftSocket(options);
}

export class NftSocket implements NftConn {
  readonly netns: string | undefined;
  private readonly native: NativeSocket;
  private interrupted = 0;
  /** The ops of the last commit refused by its generation, which the addon keeps encoded (recommit). */
  private refused: readonly Op[] | undefined;
  /** The port id last seen, and who is told when it moves (onPortChange). */
  private port: number;
  private portWatchers: ((portId: number, left: PortLeft) => void)[] = [];

  constructor(options: OpenOptions = {}) {
    if (options.netns !== undefined && (typeof options.netns !== 'string' || options.netns === '')) {
      throw new TypeError('netns must be a path to a network namespace file');
    }
    const limit = options.receiveBufferLimit;
    if (limit !== undefined && (!Number.isInteger(limit) || limit < 4096 || limit > 0x7fffffff)) {
      throw new TypeError('receiveBufferLimit must be an integer number of bytes, at least 4096');
    }
    const { NftSocket: Native } = loadAddon();
    try {
      this.native = new Native(options.netns, limit !== undefined ? { receiveBufferLimit: limit } : undefined);
    } catch (e) {
      if (e instanceof NetlinkError && e.errno === ENOENT && options.netns !== undefined) {
        throw new NetlinkError(`network namespace ${options.netns}: no such namespace (the path does not exist)`, ENOENT, 'open');
      }
      throw privilege(e, 'open', `network namespace ${options.netns ?? '(own)'}`);
    }
    this.netns = options.netns;
    this.port = this.native.portId;
  }

  /**
   * The socket's netlink port id. The addon replaces the socket to end an interrupted dump, on
   * the same port id; only if another socket took that port meanwhile does this change.
   */
  get portId(): number {
    return this.native.portId;
  }

  onPortChange(f: (portId: number, left: PortLeft) => void): void {
    this.portWatchers.push(f);
  }

  /**
   * After a dump the kernel interrupted (the addon may have replaced the socket): tells of a new
   * port, and up to which generation the old one's commits were ours. None of ours on it came after
   * the replacement, so the generation now bounds them; another socket's commit on the old port
   * after it is that socket's (one in the moment between the replacement and this read is taken
   * as ours, as a forked child's on the shared socket before it always was).
   */
  private portMoved(): void {
    const now = this.native.portId;
    if (now === this.port) return;
    // The socket is free unless another call of ours was queued behind the dump: then wait for it.
    const left = { port: this.port, upTo: this.native.generation(true) ?? this.native.generation()! };
    this.port = now;
    for (const f of this.portWatchers) f(now, left);
  }

  /**
   * Dumps the kernel flagged NLM_F_DUMP_INTR (the ruleset changed while they
   * ran) on this socket. Each was thrown away and retried; none was returned.
   */
  get dumpsInterrupted(): number {
    return this.interrupted;
  }

  /**
   * Rule dumps of one table the kernel flagged interrupted and taken all the same: the socket
   * watched the commits while the dump ran, and none of them named the table.
   */
  get dumpsTakenInterrupted(): number {
    return this.native.dumpsTakenInterrupted ?? 0;
  }

  get closed(): boolean {
    return this.native.closed;
  }

  close(): void {
    this.native.close();
  }

  generation(): number {
    this.check('generation');
    try {
      return this.native.generation()!;
    } catch (e) {
      throw privilege(e, 'generation', 'reading the nftables generation');
    }
  }

  generationIfFree(): number | undefined {
    this.check('generation');
    try {
      return this.native.generation(true);
    } catch (e) {
      throw privilege(e, 'generation', 'reading the nftables generation');
    }
  }

  netnsCookie(): string | undefined {
    this.check('netnsCookie');
    return this.native.netnsCookie?.();
  }

  kernelCode(): KernelCode {
    return (systemCode ??= kernelCode());
  }

  listTables(filter: { family?: Family } = {}): Promise<Table[]> {
    return this.dump<Table>('table', filter.family);
  }

  async getTable(family: Family, name: string): Promise<Table | undefined> {
    return (await this.dump<Table>('table', family, name, undefined, true))[0];
  }

  /** The kernel ignores a table filter on chain dumps; the addon applies it before decoding. */
  listChains(filter: { family: Family; table: string }): Promise<Chain[]> {
    return this.dump<Chain>('chain', filter.family, filter.table);
  }

  async getChain(family: Family, table: string, name: string): Promise<Chain | undefined> {
    return (await this.dump<Chain>('chain', family, table, name, true))[0];
  }

  /** Rules of one table, or of one chain, in order; filtered by the kernel. */
  async listRules(filter: { family: Family; table: string; chain?: string; digests?: boolean }): Promise<Rule[]> {
    const rules = await this.dump<Rule>('rule', filter.family, filter.table, filter.chain, false, filter.digests ? 1 : 0);
    for (const r of rules) {
      const compat = inferCompat(r);
      if (compat) r.compat = compat;
    }
    return rules;
  }

  async listRuleDigests(filter: { family: Family; table: string; chain?: string; once?: boolean }): Promise<ChainDigests[]> {
    const raw = await this.dump<[string, (number | string)[]]>('rule', filter.family, filter.table, filter.chain, false, 2,
      filter.once === true ? 1 : DUMP_ATTEMPTS);
    return raw.map(([chain, flat]) => {
      const handles: number[] = new Array(flat.length >> 1);
      const digests: string[] = new Array(flat.length >> 1);
      for (let i = 0; i < flat.length; i += 2) {
        handles[i >> 1] = flat[i] as number;
        digests[i >> 1] = flat[i + 1] as string;
      }
      return { chain, handles, digests };
    });
  }

  listSets(filter: { family: Family; table: string }): Promise<NftSet[]> {
    return this.dump<NftSet>('set', filter.family, filter.table);
  }

  listObjs(filter: { family: Family; table: string }): Promise<NftObj[]> {
    return this.dump<NftObj>('obj', filter.family, filter.table);
  }

  /**
   * A set's elements. A hash set dumped while the kernel resizes it (after
   * many adds) can list some elements twice and leave as many out (the
   * table walk starts over and the dump's skip count no longer fits), with
   * no NLM_F_DUMP_INTR: a dump with a repeated element is such a view, so it
   * is thrown away and read again, after a pause that lets the resize end.
   */
  async listElements(filter: { family: Family; table: string; set: string }): Promise<SetElement[]> {
    for (let attempt = 1; ; attempt++) {
      const els = await this.dump<SetElement>('element', filter.family, filter.table, filter.set);
      if (!repeatsAnElement(els)) return els;
      this.interrupted++;
      if (attempt >= DUMP_ATTEMPTS) throw new DumpInterruptedError('list set elements (a resize of the set)', attempt);
      await new Promise((r) => setTimeout(r, Math.min(100, 5 * attempt)));
    }
  }

  /**
   * Commits the operations as one transaction. On refusal nothing changed and
   * the error says why: a GenerationMismatchError for a stale
   * expectGeneration, else a NetlinkError with the failing op's index.
   */
  async commit(batch: Batch | readonly Op[], options: CommitOptions = {}): Promise<void | CommitResult> {
    this.check('commit');
    const { ops, gen } = commitArgs(batch, options);
    if (ops.length === 0) return;
    // The encoder's buffer and the JS garbage must not add up (src/base/heap.ts): the daemon collects first.
    if (ops.length >= COLLECT_BEFORE_OPS) collectGarbage();
    this.refused = undefined;
    let r;
    try {
      r = await this.native.commit(ops, gen, echoArg(options.echo), ops.length <= PREENCODE_UP_TO ? preencoded(ops) : encodedAlready(ops),
        options.digests === true, encodeHints(ops), options.exprs === true);
    } catch (e) {
      throw this.refusal(refine(e, ops, gen), ops);
    }
    // Without room in the receive buffer for every echo, or with echoes dropped, no handles.
    return commitResult(r, ops);
  }

  async recommit(batch: Batch | readonly Op[], generation: number): Promise<void | CommitResult | false> {
    this.check('commit');
    const { ops } = commitArgs(batch, {});
    // The addon keeps the last batch refused by its generation; only if it is this one (no commit since).
    if (this.refused !== ops || this.native.recommit === undefined) return false;
    this.refused = undefined;
    const pending = this.native.recommit(generation);
    if (pending === false) return false;
    let r;
    try {
      r = await pending;
    } catch (e) {
      throw this.refusal(refine(e, ops, generation), ops);
    }
    return commitResult(r, ops);
  }

  commitNow(batch: Batch | readonly Op[], options: CommitOptions = {}): void | CommitResult | false {
    this.check('commit');
    const { ops, gen } = commitArgs(batch, options);
    if (ops.length === 0) return;
    const native = this.native;
    if (native.commitNow === undefined) return false;
    this.refused = undefined;
    let r;
    try {
      r = native.commitNow(ops, gen, echoArg(options.echo), ops.length <= PREENCODE_UP_TO ? preencoded(ops) : encodedAlready(ops),
        options.digests === true, encodeHints(ops), options.exprs === true);
    } catch (e) {
      throw this.refusal(refine(e, ops, gen), ops);
    }
    if (r === false) return false;
    return commitResult(r, ops);
  }

  /** The addon's socket, for Monitor.arm (which commits on it). */
  get nativeSocket(): NativeSocket {
    return this.native;
  }

  /** A commit of `ops` refused with `e`: by its generation, the addon keeps it for recommit. */
  private refusal(e: unknown, ops: readonly Op[]): unknown {
    this.refused = e instanceof GenerationMismatchError ? ops : undefined;
    return e;
  }

  private check(operation: string): void {
    if (this.native.closed) throw new SocketClosedError(operation);
  }

  private async dump<T>(kind: 'table' | 'chain' | 'rule' | 'set' | 'element' | 'obj', family?: Family,
    table?: string, name?: string, single = false, ruleMode: 0 | 1 | 2 = 0, attempts = DUMP_ATTEMPTS): Promise<T[]> {
    this.check(`list ${kind}s`);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.native.dump(kind, family, table, name, single, false, ruleMode) as T[];
      } catch (e) {
        // Only the addon's mark counts, not any EINTR: a view that mixes two
        // rulesets is never returned.
        if (e instanceof NetlinkError && (e as { dumpInterrupted?: boolean }).dumpInterrupted === true) {
          this.interrupted++;
          this.portMoved();
          if (attempt < attempts) continue;
          throw new DumpInterruptedError(`list ${kind}s`, attempt);
        }
        // Closed while the dump waited for the socket.
        if (e instanceof NetlinkError && e.errno === EBADF && this.native.closed) {
          throw new SocketClosedError(`list ${kind}s`);
        }
        throw privilege(e, `list ${kind}s`, `listing ${kind}s`);
      }
    }
  }
}

/**
 * Small batches (repairs) take the expressions of a rule that cannot change, a frozen array of
 * frozen expressions (the keeper's desired rules, src/model/compact.ts), encoded once: the event repairs
 * re-add the same rules on every repair, and encoding them field by field through N-API was the
 * larger part of a small commit's own time. A bounded cache (oldest out first): big batches
 * (installs, rewrites) never enter it, and after a reload the old rules age out.
 */
const PREENCODE_UP_TO = 64;
const PREENCODED_MAX = 1024;
const encodedExprs = new Map<readonly Expr[], Buffer>();

export function preencoded(ops: readonly Op[]): (Buffer | undefined)[] | undefined {
  let out: (Buffer | undefined)[] | undefined;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (op instanceof EncodedRuleOp) {
      (out ??= new Array<Buffer | undefined>(ops.length))[i] = op.encoded;
      continue;
    }
    if (op.object !== 'rule' || op.verb === 'delete' || !Array.isArray(op.exprs)) continue;
    let b = encodedExprs.get(op.exprs);
    if (b === undefined) {
      if (!Object.isFrozen(op.exprs) || !op.exprs.every((e) => Object.isFrozen(e))) continue;
      try {
        b = loadAddon().encodeExprs(op.exprs);
      } catch {
        continue;  // the commit's own encoding says what is wrong, naming the op
      }
      if (encodedExprs.size >= PREENCODED_MAX) encodedExprs.delete(encodedExprs.keys().next().value!);
      encodedExprs.set(op.exprs, b);
    }
    (out ??= new Array<Buffer | undefined>(ops.length))[i] = b;
  }
  return out;
}

/** The bytes of the ops that come encoded (EncodedRuleOp), by op index; undefined when none does. */
function encodedAlready(ops: readonly Op[]): (Buffer | undefined)[] | undefined {
  let out: (Buffer | undefined)[] | undefined;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (op instanceof EncodedRuleOp) (out ??= new Array<Buffer | undefined>(ops.length))[i] = op.encoded;
  }
  return out;
}

/**
 * A rule's expressions checked as a batch checks them (validateOp) and encoded as a commit encodes
 * them: the NFTA_RULE_EXPRESSIONS attribute an EncodedRuleOp carries. `previous`: the expressions
 * checked just before (the same frozen object at the same place is not checked again). Throws the
 * check's or the encoder's error.
 */
export function encodeRuleExprs(exprs: readonly Expr[], previous?: readonly Expr[], sent?: SentRuleExprs): Buffer {
  // Sent by a commit: checked by its batch when queued (validateOp, this same check) and unchangeable since.
  const b = sent?.of(exprs);
  if (b !== undefined) return b;
  validateRuleExprs(exprs, previous);
  return loadAddon().encodeExprs(exprs);
}

/**
 * encodeHints' bits of an op's word (native/encode.h): PLAIN, a rule op with none of the fields
 * AT_SAME_PLACE calls 'absent'; SAME_PLACE, a plain rule added at the end of the chain the rule op
 * before it went to. The other bits: where the op's expression ids start.
 */
const SAME_PLACE = 0x8000_0000, PLAIN = 0x4000_0000, IDS_AT = 0x3fff_ffff;

/**
 * Each field of a rule op, by what a rule added at SAME_PLACE may hold of it: 'place', equal to the
 * op before's (the encoder takes it from there); 'read', anything (the encoder reads it all the
 * same); 'unread', anything (no encoder reads it); 'absent', nothing (the encoder does not read it
 * for such a rule). Typed over every field of a rule op: a field added to one must be placed here.
 */
export const AT_SAME_PLACE: Readonly<Record<keyof RuleOp | keyof BoundRuleOp, 'place' | 'read' | 'unread' | 'absent'>> = {
  verb: 'place', object: 'place', family: 'place', table: 'place', chain: 'place',
  exprs: 'read', userdata: 'read', digest: 'unread',
  handle: 'absent', position: 'absent', id: 'absent', positionId: 'absent', chainId: 'absent', compat: 'absent',
};
const ABSENT = (Object.keys(AT_SAME_PLACE) as (keyof typeof AT_SAME_PLACE)[]).filter((k) => AT_SAME_PLACE[k] === 'absent');

type ListedOp = RuleOp | BoundRuleOp;
const listed = (op: Op): op is ListedOp => op.object === 'rule' && op.verb !== 'delete';

/** `op` has none of the fields that place a rule otherwise than at the end or the start of its chain by name (nor compat). */
function plain(op: ListedOp): boolean {
  for (let f = 0; f < ABSENT.length; f++) if ((op as Partial<Record<string, unknown>>)[ABSENT[f]!] !== undefined) return false;
  return true;
}

/** A plain `op` is a rule added at the end of the chain the rule op `prev` went to. */
const atSamePlace = (op: ListedOp, prev: ListedOp): boolean =>
  op.verb === 'add' && op.chain !== undefined && op.chain === prev.chain && op.table === prev.table && op.family === prev.family;

/**
 * What the addon's encoder (native/encode.h, EncodeBatch's hints) need not read through N-API, one
 * word per op, then ids: PLAIN, that a rule op has none of the fields AT_SAME_PLACE calls 'absent'
 * (most have none; each read of a missing field costs as much as of a present one); SAME_PLACE,
 * that the plain op is a rule added where the rule op before it went (atSamePlace), whose verb,
 * object, family, table and chain it then takes from there; and for a rule op with expressions,
 * where in the array their ids start. An id names one expression object
 * of the batch, by identity: the encoder encodes the first expression of an id and copies its bytes
 * wherever the id comes again. The keeper's desired rules share identical expressions (one frozen
 * object, src/model/compact.ts), with the rule before them in a long chain and across chains in a
 * table of many small ones (kube-proxy's), and their fields one by one were most of an install's encoding.
 */
export function encodeHints(ops: readonly Op[]): Uint32Array {
  let n = 0;
  for (let k = 0; k < ops.length; k++) {
    const op = ops[k]!;
    if (listed(op) && !(op instanceof EncodedRuleOp) && Array.isArray(op.exprs)) n += op.exprs.length;
  }
  const out = new Uint32Array(ops.length + n);
  const ids = new Map<Expr, number>();
  let at = ops.length;
  // The rule op just before, and where its ids are (-1: none; its expressions at the same place have them).
  let prev: ListedOp | undefined, prevAt = -1;
  for (let k = 0; k < ops.length; k++) {
    const op = ops[k]!;
    if (!listed(op)) {
      prev = undefined;
      prevAt = -1;
      continue;
    }
    let word = !plain(op) ? 0 : prev !== undefined && atSamePlace(op, prev) ? SAME_PLACE | PLAIN : PLAIN;
    // (the bytes of an encoded op are copied as they are: no ids, and its expressions are not made)
    const a = op instanceof EncodedRuleOp ? undefined : op.exprs;
    if (Array.isArray(a) && at <= IDS_AT) {
      word |= at;
      const b = prev !== undefined && prevAt >= 0 ? prev.exprs : undefined;
      for (let i = 0; i < a.length; i++) {
        const e = a[i]!;
        let id = b !== undefined && i < b.length && b[i] === e ? out[prevAt + i]! : ids.get(e);
        if (id === undefined) ids.set(e, id = ids.size + 1);
        out[at + i] = id;
      }
      prevAt = at;
      at += a.length;
    } else prevAt = -1;
    out[k] = word;
    prev = op;
  }
  return out;
}

/**
 * Each rule's digest (Rule.digest) from the bytes a commit would write for it, '' where there is
 * none: the addon's ruleDigests (its arguments are described there).
 */
export type RuleDigester = NonNullable<Addon['ruleDigests']>;

/** The addon's rule digests, or undefined from an addon built before them. */
export function ruleDigester(): RuleDigester | undefined {
  return loadAddon().ruleDigests;
}

function repeatsAnElement(els: readonly SetElement[]): boolean {
  const seen = new Set<string>();
  for (const e of els) {
    const id = e.keyEnd === undefined && !e.flags ? e.key ?? '' : `${e.key}/${e.keyEnd ?? ''}/${e.flags}`;
    if (seen.has(id)) return true;
    seen.add(id);
  }
  return false;
}

/** The addon's echo argument: every new rule's (true), some ops' (their indices), or none. */
function echoArg(echo: CommitOptions['echo']): boolean | readonly number[] {
  return Array.isArray(echo) ? echo : echo === true;
}

function commitResult(r: void | NativeCommitResult, ops: readonly Op[]): CommitResult | undefined {
  if (!r || (!r.handles && !r.digests && !r.exprs)) return undefined;
  let handles: Map<number, number> | undefined;
  if (r.handles) {
    handles = new Map();
    for (let i = 0; i + 1 < r.handles.length; i += 2) handles.set(r.handles[i]!, r.handles[i + 1]!);
  }
  return { ...(handles ? { handles } : {}), ...(r.held ? { held: r.held } : {}),
    ...(r.echoCut ? { echoCut: true } : {}), ...(r.digests ? { digests: r.digests } : {}), ...(r.unnamed ? { unnamed: r.unnamed } : {}),
    ...(r.exprs && r.exprsAt?.length === 2 * ops.length ? { exprs: new SentRuleExprs(ops, r.exprs, r.exprsAt) } : {}) };
}

/** A commit's checked arguments: ops validated unless a Batch did it when they were queued, the generation a u32. */
export function commitArgs(batch: Batch | readonly Op[], options: CommitOptions): { ops: readonly Op[]; gen: number | undefined } {
  const ops = batch instanceof Batch ? batch.ops : batch;
  if (!(batch instanceof Batch)) ops.forEach(validateOp);
  const gen = options.expectGeneration;
  if (gen !== undefined && (!Number.isInteger(gen) || gen < 0 || gen > 0xffffffff)) {
    throw new TypeError('expectGeneration must be a u32');
  }
  return { ops, gen };
}

// NFT_RULE_COMPAT_F_INV
const COMPAT_F_INV = 1;

/**
 * NFTA_RULE_COMPAT is never dumped, yet xt matches such as `tcp` refuse to
 * load without it (EINVAL), so a decoded iptables-nft rule could not be
 * replayed. iptables-nft derives it from `-p`, which the rule holds as
 * `meta l4proto` (or the IPv4 protocol byte) compared with eq or neq; derive
 * it back the same way, for rules that carry xt expressions.
 */
function inferCompat(rule: Rule): Rule['compat'] {
  if (!rule.exprs.some((e) => e.kind === 'match' || e.kind === 'target')) return undefined;
  for (let i = 0; i + 1 < rule.exprs.length; i++) {
    const load = rule.exprs[i]!;
    const cmp = rule.exprs[i + 1]!;
    if (cmp.kind !== 'cmp' || (cmp.op !== 'eq' && cmp.op !== 'neq') || cmp.data.length !== 2) continue;
    const isProto = (load.kind === 'meta' && load.key === 'l4proto' && load.dreg === cmp.sreg)
      || (rule.family === 'ip' && load.kind === 'payload' && load.base === 'network' && load.offset === 9
        && load.len === 1 && load.dreg === cmp.sreg);
    if (isProto) return { proto: parseInt(cmp.data, 16), flags: cmp.op === 'neq' ? COMPAT_F_INV : 0 };
  }
  return { proto: 0, flags: 0 };
}

/** EPERM becomes a PrivilegeError that names the missing privilege. */
function privilege(e: unknown, operation: string, what: string): unknown {
  return e instanceof NetlinkError && e.errno === EPERM && !(e instanceof PrivilegeError) ? new PrivilegeError(operation, what) : e;
}

function refine(e: unknown, ops: readonly Op[], gen: number | undefined): unknown {
  if (!(e instanceof NetlinkError)) return e;
  if (e.errno === EPERM && e.opIndex === -1) return privilege(e, 'commit', 'committing a batch');
  if (e.errno === ERESTART && e.opIndex === -1 && gen !== undefined) {
    return new GenerationMismatchError(gen);
  }
  if (e.errno === EBADF && /closed/.test(e.message)) return new SocketClosedError('commit');
  const op = e.opIndex >= 0 ? ops[e.opIndex] : undefined;
  if (op) {
    e.description = describeOp(op);
    e.message = `${e.message} [${e.description}]`;
  }
  const raw = (e as { refusals?: { opIndex: number; errno: number; message?: string }[] }).refusals;
  if (raw) {
    e.refusals = raw.map((r) => ({
      ...r,
      errnoName: new NetlinkError('', r.errno, '').errnoName,
      description: r.opIndex >= 0 && ops[r.opIndex] ? describeOp(ops[r.opIndex]!) : undefined,
    }));
  }
  return e;
}

/** One a process: vmlinux and the boot do not change under it (the modules are read when asked). */
let systemCode: KernelCode | undefined;
