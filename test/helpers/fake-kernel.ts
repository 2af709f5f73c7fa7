/**
 * An in-memory nf_tables for fast tests of the logic above the socket: a
 * ruleset with handles, a generation counter, atomic batches, events, and
 * refusals on demand. It implements NftHost, NftConn and NftWatch, so a
 * Keeper, a Reconciler or foreign GC run against it unchanged, the followed
 * part's repairs included: a watcher gets one record per committed batch
 * with its generation and progress (the run of whole commits, anchor,
 * skipOwn) as the addon's monitor hands them over; a commit can echo the
 * handles of its new rules and run inline (commitNow); digest dumps give the
 * addon's own rule digests (src/netlink/socket.ts ruleDigester, so the addon
 * is loaded for them, though no socket is opened).
 *
 * It copies what the kernel does for what nfkeeper uses, as measured on the
 * 6.18 kernel here (test/keeper/behaviour.ts runs the same suite against it
 * and against the kernel in a fresh namespace, to keep it that way):
 * - a batch is all or nothing; every op is tried, every refusal reported
 *   (the first as the error's opIndex, all in refusals), nothing changes;
 * - a stale expectGeneration is ERESTART before any op: GenerationMismatchError;
 * - the generation moves once per batch that changed something (re-adding an
 *   unchanged table changes nothing; re-adding a chain does);
 * - table handles count per namespace, chain/rule/set handles per table,
 *   and a refused batch's handles stay used;
 * - table `use` counts chains and named sets; chain `use` counts its rules
 *   and the jumps/gotos to it;
 * - an anonymous set lives and dies with the rule that looks it up;
 * - NFT_TABLE_F_OWNER: other ports get EPERM; the flag cannot be added to an
 *   existing table (EOPNOTSUPP) except to claim an orphan with owner|persist;
 *   closing the owner leaves a persist table as an orphan (flags 0x4) and
 *   deletes one without persist, without moving the generation;
 * - NAT statements outside nat chains, or reached through jumps from a base
 *   chain whose hook does not take them, are EOPNOTSUPP at the rule's op, and
 *   so is `fib … oif`/`oifname` after routing (output, postrouting);
 *   jumps to a missing chain ENOENT, to a base chain EOPNOTSUPP;
 * - deleting a chain with rules or references is EBUSY, anything missing ENOENT;
 * - a rule op's positionId names a rule added earlier in the batch, in the same
 *   chain (add after it, insert before it), as NFTA_RULE_POSITION_ID does;
 * - more elements than a set's size is ENFILE; adding an element the set holds
 *   changes nothing (no event, no generation move);
 * - events, in op order: new objects carry NLM_F_CREATE, an added rule also
 *   NLM_F_APPEND, a replace is a DELRULE and a NEWRULE of the same handle
 *   (both NLM_F_APPEND); a new rule neither first nor last in its chain names
 *   the rule before it (position, from the chain as the batch left it); one
 *   element event per element, carrying it; an anonymous set's DELSET follows
 *   the DELRULE of its rule; a table's deletion is its rules', then its named
 *   sets', then its chains' and its own;
 * - a watcher reads the commits after the committing turn of the event loop,
 *   as the monitor does when its socket is polled;
 * - a watcher's armed reactions (NftWatch.arm, native/monitor.cc React): the
 *   first commit after the arm's generation that touches a watched table, with
 *   every commit since seen whole, ends the arm; when it is another writer's
 *   and its events are exactly one reaction's `on`, in order (type, family,
 *   table, name and handle compared), that reaction's ops are committed on the
 *   armed connection, guarded by the commit's generation, before the record
 *   is handed over with `reacted` (an undo's: the deleted elements added back).
 * Not modelled: objects, flowtables, set timeouts, xt compat, loops
 * (ELOOP/EMLINK), and the committer's pid and comm (MonitorBatch.by).
 */
import { Batch } from '../../src/netlink/batch.js';
import { describeOp, type Op } from '../../src/netlink/ops.js';
import { commitArgs, ruleDigester } from '../../src/netlink/socket.js';
import type { CommitOptions, CommitResult, NftConn, NftHost, NftWatch } from '../../src/netlink/conn.js';
import type { Expr, Family } from '../../src/netlink/expr.js';
import type { EventKey, IgnoredPort, MonitorBatch, MonitorEvent, MonitorOptions, MonitorProgress, Reaction } from '../../src/netlink/events.js';
import { FAMILY } from '../../src/netlink/expr.js';
import { SET_F, TABLE_F, type Chain, type ChainDigests, type NftSet, type Rule, type SetElement, type Table } from '../../src/netlink/objects.js';
import { GenerationMismatchError, NetlinkError, SocketClosedError } from '../../src/base/errors.js';

const ERRNO = { EPERM: 1, ENOENT: 2, EBUSY: 16, EEXIST: 17, EINVAL: 22, ENFILE: 23, ERESTART: 85, EOPNOTSUPP: 95, ENOBUFS: 105 } as const;
export type ErrnoName = keyof typeof ERRNO;
const STRERROR: Record<number, string> = {
  1: 'Operation not permitted', 2: 'No such file or directory', 16: 'Device or resource busy', 17: 'File exists',
  22: 'Invalid argument', 23: 'Too many open files in system', 85: 'Interrupted system call should be restarted', 95: 'Operation not supported',
  105: 'No buffer space available',
};

interface FRule {
  handle: number;
  exprs: Expr[];
  userdata?: string;
  /** Anonymous sets this rule created and owns. */
  anon: string[];
  /** Its digest as a digest dump gives it ('' for none), made at the first such dump. */
  digest?: string;
}

/** nlmsg_flags of events: NLM_F_CREATE, NLM_F_APPEND. */
const F_CREATE = 0x400;
const F_APPEND = 0x800;
/**
 * A commit echoes its new rules' handles up to this many ops; a bigger one stands for an echo the
 * receive buffer cut (the addon's echoCut: committed, no handles), the path the keeper then reads.
 */
const ECHO_UP_TO = 1024;
/** commitNow runs batches up to this many ops (the addon's kInlineCommitUpTo messages). */
const INLINE_UP_TO = 64;
/** Events a monitor batch keeps (the addon's kMaxEventsPerBatch). */
const EVENTS_PER_BATCH = 256;

interface FChain {
  name: string;
  handle: number;
  type?: Chain['type'];
  hook?: Chain['hook'];
  priority?: number;
  policy?: 'accept' | 'drop';
  userdata?: string;
  rules: FRule[];
}

interface FSet {
  set: NftSet;
  elements: SetElement[];
}

interface FTable {
  family: Family;
  name: string;
  flags: number;
  owner?: number;
  handle: number;
  userdata?: string;
  /** Per-table handle generator for chains, rules and sets. */
  hgen: number;
  chains: Map<string, FChain>;
  sets: Map<string, FSet>;
}

class Refused extends Error {
  constructor(readonly errno: number) {
    super(STRERROR[errno]);
  }
}

/** A refusal to inject: the next commit(s) whose op matches get `errno` at that op. */
export interface Fault {
  errno: ErrnoName;
  /** Which op: an index, a predicate, or (default) the batch as a whole (ERESTART) / op 0. */
  op?: number | ((op: Op, index: number) => boolean);
  /** Only commits from this port. */
  portId?: number;
  /** How many commits to refuse; default 1. */
  times?: number;
}

const key = (family: string, name: string) => `${family} ${name}`;

/** ignorePorts as the addon takes them: port id → the last generation of ours from it (the wider of two). */
function ignoring(ports: readonly IgnoredPort[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const p of ports) {
    const [port, upTo] = typeof p === 'number' ? [p, Infinity] : p;
    m.set(port, Math.max(upTo, m.get(port) ?? -1));
  }
  return m;
}
/** The handles echoed for the ops `echo` names (CommitOptions.echo as a list). */
const echoedOf = (handles: ReadonlyMap<number, number>, echo: readonly number[]) => new Map([...handles].filter(([i]) => echo.includes(i)));
const clone = <T>(v: T): T => structuredClone(v);

export class FakeKernel implements NftHost {
  generation = 1;
  /** False: a kernel without NFT_TABLE_F_OWNER/persist, which refuses those flags (EOPNOTSUPP). */
  protectFlags = true;
  /** Every batch that reached the kernel, refused ones included: { portId, ops, ok }. */
  readonly log: { portId: number; ops: readonly Op[]; ok: boolean }[] = [];
  private tables = new Map<string, FTable>();
  private tableHandle = 0;
  private nextPort = 4000;
  private readonly watchers = new Set<FakeWatch>();
  private faults: Fault[] = [];
  private readonly livePorts = new Set<number>();
  /** Runs before each commit is processed (a neighbour committing between our read and our write). */
  beforeCommit?: (portId: number, ops: readonly Op[]) => void;
  /**
   * Handles the table's counter skips before the new rule of op `index` of a commit from `portId`:
   * a kernel that allocated otherwise than the batch's order says (src/netlink/handles.ts), which
   * the real one never does; for the keeper's check of derived handles.
   */
  skipHandles?: (portId: number, index: number) => number;

  connect(): FakeConn {
    const port = this.nextPort++;
    this.livePorts.add(port);
    return new FakeConn(this, port);
  }

  watch(options: Omit<MonitorOptions, 'netns'>): FakeWatch {
    const w = new FakeWatch(this, options);
    this.watchers.add(w);
    return w;
  }

  /** Injects a refusal. */
  refuse(fault: Fault): void {
    this.faults.push({ times: 1, ...fault });
  }

  /** The event sockets overflow (ENOBUFS): what the watchers had not read yet is lost, and they are told so. */
  overflow(): void {
    for (const w of this.watchers) w.overflow();
  }

  /**
   * A neighbour's commit, applied at once (like `nft -f` from another process), with its events
   * from `portId`. Throws the refusal.
   */
  tamper(ops: Batch | readonly Op[], portId = 1): void {
    this.apply(portId, ops instanceof Batch ? ops.ops : ops, undefined);
  }

  /** Connections not closed yet. */
  get openPorts(): number[] {
    return [...this.livePorts];
  }

  // ---- used by FakeConn / FakeWatch ----

  unwatch(w: FakeWatch): void {
    this.watchers.delete(w);
  }

  release(port: number): void {
    this.livePorts.delete(port);
    // The kernel releases owned tables when the owning socket closes; no generation move, no commit.
    for (const [k, t] of this.tables) {
      if (!(t.flags & TABLE_F.OWNER) || t.owner !== port) continue;
      if (t.flags & TABLE_F.PERSIST) {
        t.flags &= ~TABLE_F.OWNER;
        t.owner = undefined;
      } else this.tables.delete(k);
    }
  }

  dumpTables(family?: Family): Table[] {
    return [...this.tables.values()].filter((t) => !family || t.family === family).map((t) => this.tableOut(t));
  }

  dumpTable(family: Family, name: string): Table | undefined {
    const t = this.tables.get(key(family, name));
    return t && this.tableOut(t);
  }

  dumpChains(family: Family, table: string, name?: string): Chain[] {
    const t = this.tables.get(key(family, table));
    if (!t) return [];
    const out: Chain[] = [];
    for (const c of t.chains.values()) {
      if (name !== undefined && c.name !== name) continue;
      out.push({
        family, table, name: c.name, handle: c.handle, use: this.chainUse(t, c),
        ...(c.hook ? { type: c.type, hook: c.hook, priority: c.priority, policy: c.policy ?? 'accept', flags: 1 } : {}),
        ...(c.userdata ? { userdata: c.userdata } : {}),
      });
    }
    return out;
  }

  dumpRules(family: Family, table: string, chain?: string, digests = false): Rule[] {
    const t = this.tables.get(key(family, table));
    if (!t) return [];
    const out: Rule[] = [];
    for (const c of t.chains.values()) {
      if (chain !== undefined && c.name !== chain) continue;
      for (const r of c.rules) {
        const digest = digests ? this.digestOf(r) : '';
        out.push({
          family, table, chain: c.name, handle: r.handle,
          ...(r.userdata ? { userdata: r.userdata } : {}),
          exprs: dumped(r.exprs),
          ...(digest ? { digest } : {}),
        });
      }
    }
    return out;
  }

  /** Handles and digests per chain, in chain order (chains without rules left out). */
  dumpDigests(family: Family, table: string, chain?: string): ChainDigests[] {
    const t = this.tables.get(key(family, table));
    if (!t) return [];
    const out: ChainDigests[] = [];
    for (const c of t.chains.values()) {
      if ((chain !== undefined && c.name !== chain) || c.rules.length === 0) continue;
      out.push({ chain: c.name, handles: c.rules.map((r) => r.handle), digests: c.rules.map((r) => this.digestOf(r)) });
    }
    return out;
  }

  /** The addon's digest of the rule as a dump gives it: the one the kernel connection computes. */
  private digestOf(r: FRule): string {
    if (r.digest === undefined) {
      const digester = ruleDigester();
      if (!digester) throw new Error('the native addon has no ruleDigests: rebuild it (npm run build:native)');
      const exprs = dumped(r.exprs);
      r.digest = digester(exprs, Uint32Array.from([exprs.length, ...exprs.keys()]), [r.userdata])[0]!;
    }
    return r.digest;
  }

  dumpSets(family: Family, table: string): NftSet[] {
    const t = this.tables.get(key(family, table));
    return t ? [...t.sets.values()].map((s) => clone(s.set)) : [];
  }

  dumpElements(family: Family, table: string, set: string): SetElement[] {
    const s = this.tables.get(key(family, table))?.sets.get(set);
    return s ? clone(s.elements) : [];
  }

  /** Processes one batch: all ops or none. Returns the handle of each rule it added, inserted or replaced, by op index. */
  apply(portId: number, ops: readonly Op[], expectGeneration: number | undefined): Map<number, number> {
    this.beforeCommit?.(portId, ops);
    const fault = this.takeFault(portId, ops);
    if (fault?.errno === 'ERESTART' && fault.op === undefined) {
      this.log.push({ portId, ops, ok: false });
      // As the socket refines it: with a generation to blame, a GenerationMismatchError.
      throw expectGeneration !== undefined ? new GenerationMismatchError(expectGeneration) : refusal(ERRNO.ERESTART, -1, ops);
    }
    if (expectGeneration !== undefined && expectGeneration !== this.generation) {
      this.log.push({ portId, ops, ok: false });
      throw new GenerationMismatchError(expectGeneration);
    }
    const work = new Map([...this.tables].map(([k, t]) => [k, clone(t)]));
    const tx = new Tx(this, work, portId);
    const refusals: { opIndex: number; errno: number }[] = [];
    ops.forEach((op, i) => {
      try {
        if (fault && faultIndex(fault, ops) === i) throw new Refused(ERRNO[fault.errno]);
        tx.op(op, i);
      } catch (e) {
        if (!(e instanceof Refused)) throw e;
        refusals.push({ opIndex: i, errno: e.errno });
      }
    });
    this.log.push({ portId, ops, ok: refusals.length === 0 });
    if (refusals.length > 0) {
      // Handles handed out in a refused batch stay used (measured), in tables that were there before it.
      for (const [k, t] of work) {
        const before = this.tables.get(k);
        if (before && before.handle === t.handle) before.hgen = t.hgen;
      }
      const first = refusals[0]!;
      const err = refusal(first.errno, first.opIndex, ops);
      err.refusals = refusals.map((r) => ({
        opIndex: r.opIndex, errno: r.errno, errnoName: new NetlinkError('', r.errno, '').errnoName, description: describeOp(ops[r.opIndex]!),
      }));
      throw err;
    }
    if (!tx.changed) return tx.handles;
    this.tables = work;
    this.generation++;
    const generation = this.generation;
    const events = tx.finish();
    for (const w of this.watchers) w.receive(generation, events);
    return tx.handles;
  }

  allocTableHandle(): number {
    return ++this.tableHandle;
  }

  portLive(port: number | undefined): boolean {
    return port !== undefined && this.livePorts.has(port);
  }

  private takeFault(portId: number, ops: readonly Op[]): Fault | undefined {
    for (const f of this.faults) {
      if (f.portId !== undefined && f.portId !== portId) continue;
      if (f.errno !== 'ERESTART' || f.op !== undefined) {
        if (faultIndex(f, ops) < 0) continue;
      }
      if (--f.times! <= 0) this.faults = this.faults.filter((x) => x !== f);
      return f;
    }
    return undefined;
  }

  private tableOut(t: FTable): Table {
    const named = [...t.sets.values()].filter((s) => !(s.set.flags & SET_F.ANONYMOUS)).length;
    return {
      family: t.family, name: t.name, flags: t.flags, use: t.chains.size + named, handle: t.handle,
      ...(t.flags & TABLE_F.OWNER ? { owner: t.owner } : {}),
      ...(t.userdata ? { userdata: t.userdata } : {}),
    };
  }

  chainUse(t: FTable, c: FChain): number {
    let use = c.rules.length;
    for (const other of t.chains.values()) {
      for (const r of other.rules) for (const e of r.exprs) if (jumpTarget(e) === c.name) use++;
    }
    for (const s of t.sets.values()) for (const el of s.elements) if (el.chain === c.name) use++;
    return use;
  }
}

function faultIndex(f: Fault, ops: readonly Op[]): number {
  if (f.op === undefined) return ops.length > 0 ? 0 : -1;
  if (typeof f.op === 'number') return f.op < ops.length ? f.op : -1;
  return ops.findIndex(f.op);
}

/** The error the real socket throws for a refused batch (see refine() in socket.ts). */
function refusal(errno: number, opIndex: number, ops: readonly Op[]): NetlinkError {
  const e = new NetlinkError(opIndex >= 0 ? `operation ${opIndex}: ${STRERROR[errno]}` : STRERROR[errno]!, errno, 'commit', opIndex);
  const op = opIndex >= 0 ? ops[opIndex] : undefined;
  if (op) {
    e.description = describeOp(op);
    e.message = `${e.message} [${e.description}]`;
  }
  return e;
}

function jumpTarget(e: Expr): string | undefined {
  return e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') ? e.chain : undefined;
}

/** One transaction's working copy. */
class Tx {
  changed = false;
  /** The handle of each rule added, inserted or replaced, by op index (the commit's echo). */
  readonly handles = new Map<number, number>();
  private readonly events: MonitorEvent[] = [];
  /** NEWRULE events and their chains: their positions are known once the batch is through (finish). */
  private readonly newRules: { event: MonitorEvent; chain: FChain }[] = [];
  /** Sets created in this batch by NFTA_SET_ID. */
  private readonly ids = new Map<string, string>();
  /** Rules added in this batch by NFTA_RULE_ID, per chain. */
  private readonly ruleIds = new Map<FChain, Map<number, FRule>>();
  private index = 0;

  constructor(private readonly k: FakeKernel, private readonly tables: Map<string, FTable>, private readonly port: number) {}

  op(op: Op, index: number): void {
    this.index = index;
    switch (op.object) {
      case 'table': return this.table(op);
      case 'chain': return this.chain(op);
      case 'rule': return this.rule(op);
      case 'set': return this.set(op);
      case 'element': return this.element(op);
    }
  }

  /** The batch's events, each new rule's position filled in from where the batch left it. */
  finish(): MonitorEvent[] {
    for (const { event, chain } of this.newRules) {
      const i = chain.rules.findIndex((r) => r.handle === event.handle);
      if (i > 0 && i < chain.rules.length - 1) event.position = chain.rules[i - 1]!.handle;
    }
    return this.events;
  }

  private ev(type: MonitorEvent['type'], family: Family, table: string, name?: string, handle?: number,
    flags = type.startsWith('new') ? F_CREATE : 0, elements?: SetElement[]): MonitorEvent {
    this.changed = true;
    const e: MonitorEvent = {
      type, family, table, ...(name !== undefined ? { name } : {}), ...(handle !== undefined ? { handle } : {}), portId: this.port, flags,
      ...(elements ? { elements } : {}),
    };
    this.events.push(e);
    return e;
  }

  private find(family: Family, name: string, write: boolean): FTable {
    const t = this.tables.get(key(family, name));
    if (!t) throw new Refused(ERRNO.ENOENT);
    if (write && t.flags & TABLE_F.OWNER && t.owner !== this.port) throw new Refused(ERRNO.EPERM);
    return t;
  }

  private table(op: Extract<Op, { object: 'table' }>): void {
    const k = key(op.family, op.name);
    const t = this.tables.get(k);
    const flags = op.flags;
    if (flags !== undefined && flags & (TABLE_F.OWNER | TABLE_F.PERSIST) && !this.k.protectFlags) throw new Refused(ERRNO.EOPNOTSUPP);
    if (op.verb === 'add' || op.verb === 'create') {
      if (t) {
        if (t.flags & TABLE_F.OWNER && t.owner !== this.port) throw new Refused(ERRNO.EPERM);
        if (op.verb === 'create') throw new Refused(ERRNO.EEXIST);
        if (flags === undefined || flags === t.flags) return;  // nothing to change: no transaction
        const orphan = t.flags === TABLE_F.PERSIST;
        if (orphan && flags === (TABLE_F.OWNER | TABLE_F.PERSIST)) {
          t.flags = flags;
          t.owner = this.port;
          this.ev('newtable', op.family, op.name);
          return;
        }
        // Owner and persist can be neither added to nor removed from an existing table.
        if ((flags ^ t.flags) & (TABLE_F.OWNER | TABLE_F.PERSIST)) throw new Refused(ERRNO.EOPNOTSUPP);
        t.flags = flags;
        this.ev('newtable', op.family, op.name);
        return;
      }
      const nt: FTable = {
        family: op.family, name: op.name, flags: flags ?? 0, handle: this.k.allocTableHandle(), hgen: 0,
        chains: new Map(), sets: new Map(), ...(op.userdata ? { userdata: op.userdata } : {}),
      };
      if (nt.flags & TABLE_F.OWNER) nt.owner = this.port;
      this.tables.set(k, nt);
      this.ev('newtable', op.family, op.name);
      return;
    }
    const ft = this.find(op.family, op.name, true);
    if (op.verb === 'flush') {
      for (const c of ft.chains.values()) this.flushChain(ft, c);
      return;
    }
    // Deleting a table takes everything in it along: rules, named sets, chains (measured order).
    for (const c of ft.chains.values()) this.flushChain(ft, c);
    for (const s of ft.sets.values()) this.ev('delset', ft.family, ft.name, s.set.name);
    for (const c of ft.chains.values()) this.ev('delchain', ft.family, ft.name, c.name, c.handle);
    this.tables.delete(k);
    this.ev('deltable', op.family, op.name);
  }

  private chain(op: Extract<Op, { object: 'chain' }>): void {
    // (bound chains, `jump { … }`, are not modelled: the real kernel holds them)
    if (op.name === undefined) throw new Refused(ERRNO.EOPNOTSUPP);
    const t = this.find(op.family, op.table, true);
    const c = t.chains.get(op.name);
    if (op.verb === 'add' || op.verb === 'create') {
      if (c) {
        if (op.verb === 'create') throw new Refused(ERRNO.EEXIST);
        if (op.hook !== undefined && (op.hook !== c.hook || op.type !== c.type || op.priority !== c.priority)) {
          throw new Refused(ERRNO.EOPNOTSUPP);
        }
        if (op.hook === undefined && c.hook !== undefined && op.type !== undefined) throw new Refused(ERRNO.EOPNOTSUPP);
        if (op.policy !== undefined && c.hook !== undefined) c.policy = op.policy;
        this.ev('newchain', t.family, t.name, c.name, c.handle);  // an update is a transaction, even unchanged
        return;
      }
      const nc: FChain = {
        name: op.name, handle: ++t.hgen, rules: [],
        ...(op.hook !== undefined ? { type: op.type, hook: op.hook, priority: op.priority, policy: op.policy ?? 'accept' } : {}),
        ...(op.userdata ? { userdata: op.userdata } : {}),
      };
      t.chains.set(op.name, nc);
      this.ev('newchain', t.family, t.name, nc.name, nc.handle);
      return;
    }
    if (!c) throw new Refused(ERRNO.ENOENT);
    if (op.verb === 'flush') {
      this.flushChain(t, c);
      return;
    }
    if (this.k.chainUse(t, c) > 0) throw new Refused(ERRNO.EBUSY);
    t.chains.delete(c.name);
    this.ev('delchain', t.family, t.name, c.name, c.handle);
  }

  private flushChain(t: FTable, c: FChain): void {
    for (const r of c.rules) this.dropRule(t, c, r);
    c.rules = [];
  }

  private dropRule(t: FTable, c: FChain, r: FRule, flags = 0): void {
    this.ev('delrule', t.family, t.name, c.name, r.handle, flags);
    for (const s of r.anon) {
      t.sets.delete(s);
      this.ev('delset', t.family, t.name, s);
    }
  }

  private rule(op: Extract<Op, { object: 'rule' }>): void {
    if (op.chain === undefined) throw new Refused(ERRNO.EOPNOTSUPP);
    const t = this.find(op.family, op.table, true);
    const c = t.chains.get(op.chain);
    if (!c) throw new Refused(ERRNO.ENOENT);
    const at = (h: number) => {
      const i = c.rules.findIndex((r) => r.handle === h);
      if (i < 0) throw new Refused(ERRNO.ENOENT);
      return i;
    };
    // NFTA_RULE_POSITION_ID: a rule added earlier in this batch, in this chain.
    const atId = (id: number) => {
      const r = this.ruleIds.get(c)?.get(id);
      const i = r ? c.rules.indexOf(r) : -1;
      if (i < 0) throw new Refused(ERRNO.ENOENT);
      return i;
    };
    if (op.verb === 'delete') {
      const i = at(op.handle!);
      this.dropRule(t, c, c.rules[i]!);
      c.rules.splice(i, 1);
      return;
    }
    const exprs = (op.exprs ?? []).map((e) => this.resolve(t, e));
    for (const e of exprs) {
      const target = jumpTarget(e);
      if (target === undefined) continue;
      const to = t.chains.get(target);
      if (!to) throw new Refused(ERRNO.ENOENT);
      if (to.hook !== undefined) throw new Refused(ERRNO.EOPNOTSUPP);
    }
    const anon = exprs.flatMap((e) => (e.kind === 'lookup' && t.sets.get(e.set)!.set.flags & SET_F.ANONYMOUS ? [e.set] : []))
      .filter((s) => ![...t.chains.values()].some((ch) => ch.rules.some((r) => r.anon.includes(s))));
    const rule: FRule = { handle: 0, exprs, anon, ...(op.userdata ? { userdata: op.userdata } : {}) };
    let flags = F_CREATE;
    if (op.verb === 'replace') {
      const i = at(op.handle!);
      const old = c.rules[i]!;
      // measured: a DELRULE and a NEWRULE of the same handle (replace keeps it), both NLM_F_APPEND
      flags = F_APPEND;
      this.dropRule(t, c, { ...old, anon: old.anon.filter((s) => !anon.includes(s)) }, flags);
      rule.handle = old.handle;
      c.rules[i] = rule;
    } else {
      t.hgen += this.k.skipHandles?.(this.port, this.index) ?? 0;
      rule.handle = ++t.hgen;
      const anchor = op.position !== undefined ? at(op.position) : op.positionId !== undefined ? atId(op.positionId) : undefined;
      if (op.verb === 'add') {
        flags |= F_APPEND;
        c.rules.splice(anchor !== undefined ? anchor + 1 : c.rules.length, 0, rule);
      } else c.rules.splice(anchor ?? 0, 0, rule);
    }
    if (op.id !== undefined) {
      let ids = this.ruleIds.get(c);
      if (!ids) this.ruleIds.set(c, ids = new Map());
      ids.set(op.id, rule);
    }
    this.validate(t);
    this.handles.set(this.index, rule.handle);
    this.newRules.push({ event: this.ev('newrule', t.family, t.name, c.name, rule.handle, flags), chain: c });
  }

  /** A lookup names its set, or an anonymous one of this batch by id. */
  private resolve(t: FTable, e: Expr): Expr {
    if (e.kind !== 'lookup') return clone(e);
    const byId = e.setId !== undefined ? this.ids.get(`${key(t.family, t.name)} ${e.setId}`) : undefined;
    const name = byId ?? e.set;
    if (!t.sets.has(name)) throw new Refused(ERRNO.ENOENT);
    const { setId: _id, ...rest } = e;
    return { ...clone(rest), set: name };
  }

  /** NAT statements only where their base chain's type and hook allow them, through jumps too. */
  private validate(t: FTable): void {
    for (const base of t.chains.values()) {
      if (base.hook === undefined) continue;
      const seen = new Set<string>();
      const walk = (c: FChain) => {
        if (seen.has(c.name)) return;
        seen.add(c.name);
        for (const r of c.rules) {
          for (const e of r.exprs) {
            const dnat = (e.kind === 'nat' && e.type === 'dnat') || e.kind === 'redir';
            const snat = (e.kind === 'nat' && e.type === 'snat') || e.kind === 'masq';
            if ((dnat || snat) && base.type !== 'nat') throw new Refused(ERRNO.EOPNOTSUPP);
            if (dnat && base.hook !== 'prerouting' && base.hook !== 'output') throw new Refused(ERRNO.EOPNOTSUPP);
            if (snat && base.hook !== 'postrouting' && base.hook !== 'input') throw new Refused(ERRNO.EOPNOTSUPP);
            // nft_fib_validate: an output interface is known only before routing
            if (e.kind === 'fib' && (e.result === 'oif' || e.result === 'oifname') &&
              base.hook !== 'prerouting' && base.hook !== 'input' && base.hook !== 'forward') throw new Refused(ERRNO.EOPNOTSUPP);
            const to = jumpTarget(e);
            if (to !== undefined && t.chains.has(to)) walk(t.chains.get(to)!);
          }
        }
      };
      walk(base);
    }
  }

  private set(op: Extract<Op, { object: 'set' }>): void {
    const t = this.find(op.family, op.table, true);
    if (op.verb === 'add' || op.verb === 'create') {
      let name = op.name;
      if (name.includes('%d')) {
        let n = 0;
        while (t.sets.has(name.replace('%d', String(n)))) n++;
        name = name.replace('%d', String(n));
      } else if (t.sets.has(name)) {
        if (op.verb === 'create') throw new Refused(ERRNO.EEXIST);
        return;
      }
      const { elements, id, verb: _v, object: _o, ...rest } = op;
      const set: NftSet = { ...clone(rest), name, handle: ++t.hgen, flags: op.flags ?? 0, keyType: op.keyType ?? 0, keyLen: op.keyLen ?? 0 };
      if (set.size && (elements?.length ?? 0) > set.size) throw new Refused(ERRNO.ENFILE);
      const fs: FSet = { set, elements: [] };
      t.sets.set(name, fs);
      if (id !== undefined) this.ids.set(`${key(t.family, t.name)} ${id}`, name);
      this.ev('newset', t.family, t.name, name);
      this.addElements(t, fs, elements ?? []);
      return;
    }
    const s = t.sets.get(op.name);
    if (!s) throw new Refused(ERRNO.ENOENT);
    if (op.verb === 'flush') {
      for (const el of s.elements) this.ev('delsetelem', t.family, t.name, op.name, undefined, 0, [clone(el)]);
      s.elements = [];
      return;
    }
    const bound = [...t.chains.values()].some((c) => c.rules.some((r) => r.exprs.some((e) => e.kind === 'lookup' && e.set === op.name)));
    if (bound) throw new Refused(ERRNO.EBUSY);
    t.sets.delete(op.name);
    this.ev('delset', t.family, t.name, op.name);
  }

  private element(op: Extract<Op, { object: 'element' }>): void {
    const t = this.find(op.family, op.table, true);
    const name = (op.setId !== undefined ? this.ids.get(`${key(t.family, t.name)} ${op.setId}`) : undefined) ?? op.set;
    const s = t.sets.get(name);
    if (!s) throw new Refused(ERRNO.ENOENT);
    if (op.verb === 'add') return this.addElements(t, s, op.elements);
    for (const el of op.elements) {
      const i = s.elements.findIndex((x) => sameElement(x, el));
      if (i < 0) throw new Refused(ERRNO.ENOENT);
      const [gone] = s.elements.splice(i, 1);
      this.ev('delsetelem', t.family, t.name, name, undefined, 0, [clone(gone!)]);
    }
  }

  /** One event per element added; one the set holds already changes nothing. */
  private addElements(t: FTable, s: FSet, elements: readonly SetElement[]): void {
    for (const el of elements) {
      if (s.elements.some((x) => sameElement(x, el))) continue;
      if (s.set.size && s.elements.length >= s.set.size) throw new Refused(ERRNO.ENFILE);
      const added = { flags: 0, ...clone(el) };
      s.elements.push(added);
      this.ev('newsetelem', t.family, t.name, s.set.name, undefined, F_CREATE, [clone(added)]);
    }
  }
}

/** The same element of a set: key, key end and the interval-end flag. */
const sameElement = (a: SetElement, b: SetElement) => a.key === b.key && a.keyEnd === b.keyEnd && ((a.flags ?? 0) & 2) === ((b.flags ?? 0) & 2);

/** A rule's expressions as a dump gives them: lookups by the set's name, never by batch id. */
function dumped(exprs: readonly Expr[]): Expr[] {
  return exprs.map((e) => {
    if (e.kind !== 'lookup') return clone(e);
    const { setId: _id, ...rest } = e;
    return clone(rest);
  });
}

/** Each call yields to the event loop first, as the real socket's off-thread work does. */
const later = () => new Promise<void>((r) => setImmediate(r));

export class FakeConn implements NftConn {
  private isClosed = false;
  /** Dumps and commits waiting for their turn (the real socket's gate, held off-thread): commitNow gives way. */
  private busy = 0;

  constructor(readonly kernel: FakeKernel, readonly portId: number) {}

  get closed(): boolean {
    return this.isClosed;
  }

  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.kernel.release(this.portId);
  }

  generation(): number {
    this.check('generation');
    return this.kernel.generation;
  }

  async listTables(filter: { family?: Family } = {}): Promise<Table[]> {
    await this.ready('list tables');
    return this.kernel.dumpTables(filter.family);
  }

  async getTable(family: Family, name: string): Promise<Table | undefined> {
    await this.ready('list tables');
    return this.kernel.dumpTable(family, name);
  }

  async listChains(filter: { family: Family; table: string }): Promise<Chain[]> {
    await this.ready('list chains');
    return this.kernel.dumpChains(filter.family, filter.table);
  }

  async getChain(family: Family, table: string, name: string): Promise<Chain | undefined> {
    await this.ready('list chains');
    return this.kernel.dumpChains(family, table, name)[0];
  }

  async listRules(filter: { family: Family; table: string; chain?: string; digests?: boolean }): Promise<Rule[]> {
    await this.ready('list rules');
    return this.kernel.dumpRules(filter.family, filter.table, filter.chain, filter.digests);
  }

  async listRuleDigests(filter: { family: Family; table: string; chain?: string }): Promise<ChainDigests[]> {
    await this.ready('list rules');
    return this.kernel.dumpDigests(filter.family, filter.table, filter.chain);
  }

  async listSets(filter: { family: Family; table: string }): Promise<NftSet[]> {
    await this.ready('list sets');
    return this.kernel.dumpSets(filter.family, filter.table);
  }

  async listElements(filter: { family: Family; table: string; set: string }): Promise<SetElement[]> {
    await this.ready('list elements');
    return this.kernel.dumpElements(filter.family, filter.table, filter.set);
  }

  async commit(batch: Batch | readonly Op[], options: CommitOptions = {}): Promise<void | CommitResult> {
    this.check('commit');
    const { ops, gen } = commitArgs(batch, options);  // the socket's own checks
    if (ops.length === 0) return;
    await this.ready('commit');
    const handles = this.kernel.apply(this.portId, [...ops], gen);
    if (!options.echo) return undefined;
    // Some ops' echoes (a few): never cut.
    if (options.echo !== true) return { handles: echoedOf(handles, options.echo) };
    return ops.length <= ECHO_UP_TO ? { handles } : { echoCut: true };
  }

  commitNow(batch: Batch | readonly Op[], options: CommitOptions = {}): void | CommitResult | false {
    this.check('commit');
    const { ops, gen } = commitArgs(batch, options);
    if (ops.length === 0) return;
    if (ops.length > INLINE_UP_TO || this.busy > 0) return false;
    const handles = this.kernel.apply(this.portId, [...ops], gen);
    if (!options.echo) return undefined;
    return { handles: options.echo === true ? handles : echoedOf(handles, options.echo) };
  }

  /**
   * A watcher's armed reaction (FakeWatch.arm): `ops` committed at once, guarded by `generation`,
   * echoed; the errno of a refusal. Undefined, nothing sent, when the connection is closed or busy
   * with a dump or commit (the addon's gate, taken without waiting).
   */
  react(ops: readonly Op[], generation: number): { handles: [number, number][] } | { errno: number } | undefined {
    if (this.isClosed || this.busy > 0) return undefined;
    try {
      return { handles: [...this.kernel.apply(this.portId, ops, generation)] };
    } catch (e) {
      if (e instanceof GenerationMismatchError) return { errno: ERRNO.ERESTART };
      if (e instanceof NetlinkError) return { errno: e.errno };
      throw e;
    }
  }

  private check(operation: string): void {
    if (this.isClosed) throw new SocketClosedError(operation);
  }

  private async ready(operation: string): Promise<void> {
    this.check(operation);
    this.busy++;
    try {
      await later();
    } finally {
      this.busy--;
    }
    this.check(operation);
  }
}

/** One event of a reaction's `on` or of a commit, as the addon compares them (monitor.cc AppendTrigger). */
const triggerKey = (events: readonly EventKey[]) => JSON.stringify(events.map((e) => [e.type, e.family, e.table, e.name ?? '', e.handle ?? 0]));

/** What arm() made (the addon's reactions_, triggers_, armedGen_, armSock_). */
interface Armed {
  conn: FakeConn;
  generation: number;
  reactions: readonly Reaction[];
  /** Reaction index by triggerKey of its `on`. */
  triggers: Map<string, number>;
  /** The most events any reaction names: a longer commit is no reaction's. */
  most: number;
}

/**
 * A watcher as the addon's monitor is one (native/event.cc, EventBatcher; native/monitor.cc): it
 * reads each commit after the turn of the event loop that made it, keeps the events of watched
 * tables (and every table deletion), and hands over one record per commit that holds a foreign
 * event (or, with ownCommits, any watched event not skipped), with the run of whole commits it has
 * seen (since, progress) and how many records it handed over; an armed reaction answers a record
 * before it is handed over (arm).
 */
export class FakeWatch implements NftWatch {
  private tables: Set<string> | undefined;
  /** Port id → the last generation whose commits from it are ours (Infinity: all). */
  private ignore: Map<number, number>;
  private closed = false;
  /** Commits made but not read yet, in order; an overflow marker drops them. */
  private unread: ({ generation: number; events: MonitorEvent[] } | 'overflow')[] = [];
  private reading = false;
  /** Records of a read are being handed over: readNow() reads nothing (as the addon's). */
  private delivering = false;
  private lastGeneration = 0;
  private runStart = 0;
  /** The generation of the last commit with events for the watched tables (0: none seen). */
  private lastTouched = 0;
  private delivered = 0;
  private overflows = 0;
  private skip: number[] = [];
  /** The reactions arm() made, kept while paused; `live`: they answer the next commit. */
  private armedWith?: Armed;
  private live = false;

  constructor(private readonly kernel: FakeKernel, private readonly options: Omit<MonitorOptions, 'netns'>) {
    this.tables = options.tables && new Set(options.tables.map((t) => key(t.family, t.name)));
    this.ignore = ignoring(options.ignorePorts ?? []);
  }

  setFilter(tables: { family: Family; name: string }[] | undefined, ignorePorts: readonly IgnoredPort[] = []): void {
    this.tables = tables && new Set(tables.map((t) => key(t.family, t.name)));
    this.ignore = ignoring(ignorePorts);
  }

  close(): void {
    this.closed = true;
    this.disarm();
    this.unread = [];
    this.kernel.unwatch(this);
  }

  progress(): MonitorProgress {
    return { lastGeneration: this.lastGeneration, runStart: this.runStart, delivered: this.delivered };
  }

  /** Reads what there is now, handing its records over first (Monitor.readNow); not from inside onBatch. */
  readNow(): MonitorProgress {
    if (!this.delivering && this.unread.length > 0) this.read();
    return this.progress();
  }

  anchor(generation: number, overflowsSeen: number): void {
    if (generation === 0 || overflowsSeen !== this.overflows) return;
    if (this.runStart === 0 || this.runStart > generation + 1) this.runStart = generation + 1;
    if (generation > this.lastGeneration) this.lastGeneration = generation;
  }

  skipOwn(generation: number): void {
    // Only a commit still to come: one already read was handed over.
    if (generation > this.lastGeneration && this.skip.length < 64) this.skip.push(generation);
  }

  /**
   * Reactions to the next commit after `generation` that touches a watched table (Monitor.arm):
   * checked as the addon checks them (a TypeError for one it cannot read); false, nothing armed, when
   * closed, with no reactions, or with a connection that is not this kernel's.
   */
  arm(conn: NftConn, generation: number, reactions: readonly Reaction[]): boolean {
    this.disarm();
    if (this.closed || !(conn instanceof FakeConn) || conn.kernel !== this.kernel || conn.closed || reactions.length === 0) return false;
    const triggers = new Map<string, number>();
    let most = 0;
    reactions.forEach((r, i) => {
      const at = `arm: reaction ${i}`;
      if (r.undo) {
        if (r.on.length !== 1 || ((r as { ops?: readonly Op[] }).ops?.length ?? 0) !== 0) throw new TypeError(`${at}: an undo names one event (on) and no ops`);
        if (r.on[0]!.type !== 'delsetelem') throw new TypeError(`${at}: an undo answers an element deletion (delsetelem) only`);
      } else if (r.ops.length === 0 || r.on.length === 0) throw new TypeError(`${at}: needs events (on) and ops`);
      r.on.forEach((e, k) => {
        if (typeof e.type !== 'string' || typeof e.table !== 'string' || !(e.family in FAMILY.values)) {
          throw new TypeError(`${at}: event ${k} needs a type, a family and a table`);
        }
        if (e.handle !== undefined && !(Number.isSafeInteger(e.handle) && e.handle >= 0)) throw new TypeError(`${at}: event ${k} has a bad handle`);
      });
      const trigger = triggerKey(r.on);
      if (triggers.has(trigger)) throw new TypeError(`${at}: the same events as an earlier one`);
      triggers.set(trigger, i);
      most = Math.max(most, r.on.length);
      if (!r.undo) commitArgs(r.ops, {});  // what the addon could not encode
    });
    this.armedWith = { conn, generation, reactions, triggers, most };
    this.live = true;
    return true;
  }

  disarm(): void {
    this.live = false;
    this.armedWith = undefined;
  }

  pause(): void {
    this.live = false;
  }

  /** Armed again with what arm() made when no commit since its generation touched a watched table, every one seen whole. */
  resume(): boolean {
    const a = this.armedWith;
    this.live = !this.closed && !!a && !a.conn.closed && this.lastTouched <= a.generation && this.runStart !== 0 && this.runStart <= a.generation + 1;
    return this.live;
  }

  /** A commit that moved the generation, with all its events: read on a later turn of the loop. */
  receive(generation: number, events: MonitorEvent[]): void {
    this.unread.push({ generation, events });
    this.wake();
  }

  /** ENOBUFS: what was not read is lost; an overflow record is handed over instead. */
  overflow(): void {
    this.unread = ['overflow'];
    this.wake();
  }

  private wake(): void {
    if (this.reading || this.closed) return;
    this.reading = true;
    setImmediate(() => this.read());
  }

  /**
   * Reads everything there is, then hands the records over, progress() as it stands after the
   * read; an armed reaction answers its record just before it is handed over.
   */
  private read(): void {
    this.reading = false;
    if (this.closed) return;
    const done: { b: MonitorBatch; prevTouched: number }[] = [];
    for (const c of this.unread.splice(0)) {
      if (c === 'overflow') {
        this.runStart = 0;
        this.overflows++;
        this.delivered++;
        this.disarm();
        done.push({ b: { overflow: true, generation: 0, truncated: false, foreign: false, since: 0, events: [] }, prevTouched: 0 });
        continue;
      }
      const b = this.feed(c.generation, c.events);
      if (b) done.push(b);
    }
    this.delivering = true;
    try {
      for (const { b, prevTouched } of done) {
        if (this.closed) return;
        if (this.live) this.react(b, prevTouched);
        this.options.onBatch(b);
      }
    } finally {
      this.delivering = false;
    }
  }

  /** The armed reaction's answer to `b` (monitor.cc React), into b.reacted. */
  private react(b: MonitorBatch, prevTouched: number): void {
    const a = this.armedWith!;
    const undos = a.reactions.some((r) => r.undo);
    if (b.overflow || b.truncated || !b.foreign || (b.events.length > a.most && !undos)) return;
    // The first commit after the arm's generation that touches a watched table, every commit since seen whole.
    if (!b.since || b.since > a.generation + 1 || prevTouched > a.generation || b.generation <= a.generation) return;
    this.disarm();  // this commit ends the arm, answered or not
    let reaction = a.triggers.get(triggerKey(b.events));
    // An undo names one event and answers a commit of one or more of it.
    const one = triggerKey(b.events.slice(0, 1));
    if (reaction === undefined && undos && b.events.every((e) => triggerKey([e]) === one)) {
      const u = a.triggers.get(one);
      if (u !== undefined && a.reactions[u]!.undo) reaction = u;
    }
    if (reaction === undefined) return;
    const r = a.reactions[reaction]!;
    // An undo sends each deletion back as an addition of the same elements (as the kernel reported them).
    const ops: readonly Op[] = r.undo
      ? b.events.map((e) => ({ verb: 'add', object: 'element', family: e.family, table: e.table, set: e.name!, elements: e.elements! }))
      : r.ops;
    const outcome = a.conn.react(ops, b.generation);
    if (outcome) b.reacted = { ...outcome, reaction, committedNs: Number(process.hrtime.bigint()) };
  }

  /** One commit up to its NEWGEN: the record to hand over, if any, and the last commit before it that touched a watched table. */
  private feed(generation: number, all: readonly MonitorEvent[]): { b: MonitorBatch; prevTouched: number } | undefined {
    // The run of whole commits goes on only from the generation just before.
    if (generation > this.lastGeneration) {
      if (this.runStart === 0 || this.lastGeneration === 0 || generation !== this.lastGeneration + 1) this.runStart = generation + 1;
      this.lastGeneration = generation;
    }
    const skipped = this.skip.includes(generation);
    this.skip = this.skip.filter((g) => g > generation);
    const wanted = all.filter((e) => e.type === 'deltable' || !this.tables || this.tables.has(key(e.family, e.table)));
    if (wanted.length === 0) return undefined;
    const prevTouched = this.lastTouched;
    if (generation > this.lastTouched) this.lastTouched = generation;
    const foreign = wanted.some((e) => !(generation <= (this.ignore.get(e.portId) ?? -1)));
    if (!foreign && (!this.options.ownCommits || skipped)) return undefined;
    this.delivered++;
    return {
      b: {
        overflow: false, generation, truncated: wanted.length > EVENTS_PER_BATCH, foreign,
        since: this.runStart <= generation ? this.runStart : 0, receivedNs: Number(process.hrtime.bigint()),
        events: wanted.slice(0, EVENTS_PER_BATCH).map((e) => clone(e)),
      },
      prevTouched,
    };
  }
}
