/**
 * Who changed an owned table. Every foreign commit's NFT_MSG_NEWGEN names the task that made it
 * (its pid in the kernel's initial pid namespace and its comm); this module turns that into what an
 * operator knows (the executable, command line, parent, and from its cgroup the systemd unit, the
 * container and the Kubernetes pod), keeps the last foreign changes in a bounded ring with the
 * repair that answered each, counts them by a bounded set of names, and hands each change and
 * repair to whoever follows them (`nfkeeper events --follow`).
 *
 * /proc is read once per foreign change, after the repair was committed: a process that has exited
 * by then (a short-lived `nft` often has) is reported with the kernel's pid and name only, and a pid
 * whose /proc entry now names another program is said to be reused, never taken for the committer.
 */
import { closeSync, openSync, readSync, readlinkSync } from 'node:fs';
import type { MonitorBatch, MonitorEvent } from '../netlink/events.js';
import type { KeeperMetrics } from '../base/metrics.js';

/** The process that committed a foreign change, as far as it could be found out. */
export interface Committer {
  /** NFTA_GEN_PROC_PID: the committing thread's id in the kernel's initial pid namespace (0: not said). */
  pid: number;
  /** NFTA_GEN_PROC_NAME: its comm (at most 15 bytes). */
  comm?: string;
  /** From /proc at event time; absent when `unresolved` says why. */
  exe?: string;
  cmdline?: string;
  parent?: { pid: number; comm?: string };
  /** Its cgroup path, and what that path names. */
  cgroup?: string;
  unit?: string;
  container?: { id: string; runtime?: string };
  pod?: string;
  /** Why /proc told nothing (or not everything): the process had exited, the pid is reused, ... */
  unresolved?: string;
}

/** What a cgroup path names, from the path alone. */
export interface CgroupOwner {
  unit?: string;
  container?: { id: string; runtime?: string };
  pod?: string;
}

export interface RepairAnswer {
  /** The generation the repair's commit made. */
  generation: number;
  cause: string;
  /** What it committed, in nft words (or the drift it repaired, when a full pass did). */
  ops: string[];
  latencyMs: number;
}

export interface ForeignChange {
  at: string;
  generation: number;
  by: Committer;
  /** The owned tables it touched ("ip nfkeeper"). */
  tables: string[];
  /** The commit's events for the owned tables, in nft words. */
  what: string[];
  /** More events than the monitor keeps per commit: `what` is the start. */
  truncated?: boolean;
  /** The repair that answered it, once one did. */
  repair?: RepairAnswer;
}

/** One line of `nfkeeper events`: a foreign change, or a repair (with the generations it answered). */
export type AttributionEvent =
  | ({ type: 'change' } & ForeignChange)
  | ({ type: 'repair'; at: string; answered: number[] } & RepairAnswer);

export interface AttributionOptions {
  /** Foreign changes kept (the ring); default 256. */
  history?: number;
  /** Distinct comm label values the metrics keep before counting the rest as `other`; default 10. */
  commLabels?: number;
  metrics?: KeeperMetrics;
  /** Tests: another /proc. */
  procRoot?: string;
  /**
   * Whether this process sees the kernel's initial pid namespace (where the NEWGEN's pid lives).
   * Default: read from /proc/self/ns/pid.
   */
  initialPidNamespace?: boolean;
}

export const DEFAULT_HISTORY = 256;
export const DEFAULT_COMM_LABELS = 10;
/** The inode of the initial pid namespace: fixed by the kernel (PROC_PID_INIT_INO). */
const PROC_PID_INIT_INO = 0xEFFFFFFC;
const CMDLINE_MAX = 512;

export class Attribution {
  readonly capacity: number;
  private readonly ring: (ForeignChange | undefined)[];
  /** Next slot to write; `size` of the ring's slots hold changes. */
  private next = 0;
  private size = 0;
  /** Changes not answered by a repair yet, oldest first (a few: each repair answers all before it). */
  private pending: ForeignChange[] = [];
  private readonly followers = new Set<(e: AttributionEvent) => void>();
  private readonly labels: CommLabels;
  private readonly procRoot: string;
  readonly initialPidNamespace: boolean;
  /**
   * The committer of the batch being answered, set before its repair (a reference, nothing read) and
   * cleared by note(): a fight raised by that repair names it too.
   */
  arriving: MonitorBatch['by'];
  /** The last committers looked up in full, by pid (a few; see resolve). */
  private readonly lately = new Map<number, Committer>();

  constructor(private readonly options: AttributionOptions = {}) {
    this.capacity = Math.max(1, Math.floor(options.history ?? DEFAULT_HISTORY));
    this.ring = new Array(this.capacity);
    this.labels = new CommLabels(options.commLabels ?? DEFAULT_COMM_LABELS);
    this.procRoot = options.procRoot ?? '/proc';
    this.initialPidNamespace = options.initialPidNamespace ?? inInitialPidNamespace();
  }

  /**
   * A foreign commit touched the watched tables: who made it and what it did to `owned` tables
   * ("family name"), remembered, counted and told to followers. Undefined when none of its events
   * is for an owned table (a deletion of another table reaches the keeper too).
   */
  note(b: MonitorBatch, owned: ReadonlySet<string>): ForeignChange | undefined {
    const what: string[] = [];
    const tables: string[] = [];
    for (const e of b.events) {
      const t = `${e.family} ${e.table}`;
      if (!owned.has(t)) continue;
      if (!tables.includes(t)) tables.push(t);
      what.push(describeEvent(e));
    }
    this.arriving = undefined;
    if (what.length === 0) return undefined;
    const by = this.resolve(b.by?.pid ?? 0, b.by?.comm);
    const change: ForeignChange = { at: new Date().toISOString(), generation: b.generation, by, tables, what };
    if (b.truncated) change.truncated = true;
    this.ring[this.next] = change;
    this.next = (this.next + 1) % this.capacity;
    if (this.size < this.capacity) this.size++;
    // Unanswered changes are bounded like the ring: a repair that never comes does not grow them.
    if (this.pending.length >= this.capacity) this.pending.shift();
    this.pending.push(change);
    const comm = this.labels.of(by.comm);
    for (const t of tables) this.options.metrics?.foreignChanges.inc({ table: t, comm });
    this.tell({ type: 'change', ...change });
    return change;
  }

  /** The changes a repair is about to answer (for its log line): those not answered yet, up to `generation`. */
  unanswered(generation: number): readonly ForeignChange[] {
    return this.pending.filter((c) => c.generation < generation);
  }

  /** A repair committed at `r.generation`: it answers every change before it not answered yet. */
  answered(r: RepairAnswer): ForeignChange[] {
    const answered: ForeignChange[] = [];
    const left: ForeignChange[] = [];
    for (const c of this.pending) (c.generation < r.generation ? answered : left).push(c);
    if (answered.length === 0) return answered;
    this.pending = left;
    for (const c of answered) c.repair = r;
    this.tell({ type: 'repair', at: new Date().toISOString(), answered: answered.map((c) => c.generation), ...r });
    return answered;
  }

  /** The committers of the last `n` changes (newest first), one entry per process. */
  committers(n = 5): Committer[] {
    const seen = new Map<string, Committer>();
    const a = this.arriving;
    if (a) seen.set(`${a.pid}/${a.comm ?? ''}`, a.comm !== undefined ? { pid: a.pid, comm: a.comm } : { pid: a.pid });
    for (const c of this.recent(this.capacity)) {
      const key = `${c.by.pid}/${c.by.comm ?? ''}`;
      if (!seen.has(key)) seen.set(key, c.by);
      if (seen.size >= n) break;
    }
    return [...seen.values()];
  }

  /** A fight level was raised against the committers of the recent changes: counted by their names. */
  fightRaised(against: readonly Committer[]): void {
    const names = new Set(against.map((c) => this.labels.of(c.comm)));
    if (names.size === 0) names.add('unknown');
    for (const comm of names) this.options.metrics?.fightRaises.inc({ comm });
  }

  /** The last `n` changes, newest first. */
  recent(n: number): ForeignChange[] {
    const out: ForeignChange[] = [];
    for (let i = 1; i <= Math.min(n, this.size); i++) out.push(this.ring[(this.next - i + this.capacity) % this.capacity]!);
    return out;
  }

  get length(): number {
    return this.size;
  }

  /** Calls `f` with each change and repair from now on; returns the unsubscribe. */
  follow(f: (e: AttributionEvent) => void): () => void {
    this.followers.add(f);
    return () => this.followers.delete(f);
  }

  private tell(e: AttributionEvent): void {
    for (const f of this.followers) {
      try {
        f(e);
      } catch {
        // A follower's failure (a closed stream) is its own; the others still hear.
      }
    }
  }

  /**
   * The committer as /proc shows it now (see resolveCommitter). A process that commits again (a
   * peer in a fight, a controller's resync) costs one read: its comm, still the kernel's, and the
   * rest as found the first time (a pid reused under the same name in between is not told apart).
   */
  resolve(pid: number, comm: string | undefined): Committer {
    const known = this.lately.get(pid);
    if (known !== undefined && known.comm === comm && comm !== undefined
      && readText(`${this.procRoot}/${pid}/comm`) === `${comm}\n`) return known;
    const by = resolveCommitter(pid, comm, { procRoot: this.procRoot, initialPidNamespace: this.initialPidNamespace });
    if (by.unresolved === undefined) {
      if (this.lately.size >= 16) this.lately.delete(this.lately.keys().next().value!);
      this.lately.set(pid, by);
    }
    return by;
  }
}

/**
 * What /proc says about `pid` (the kernel's NEWGEN pid) now. Nothing is taken from a /proc entry
 * whose comm is not the kernel's `comm` (the pid was reused, or its owner renamed itself), nor from
 * a /proc of another pid namespace than the kernel's initial one.
 */
export function resolveCommitter(pid: number, comm: string | undefined,
  o: { procRoot?: string; initialPidNamespace?: boolean } = {}): Committer {
  const by: Committer = comm !== undefined ? { pid, comm } : { pid };
  if (pid <= 0) {
    by.unresolved = 'the kernel did not say which process committed';
    return by;
  }
  if (o.initialPidNamespace === false) {
    by.unresolved = 'this process is not in the initial pid namespace, where the kernel\'s pid is (hostPID)';
    return by;
  }
  const dir = `${o.procRoot ?? '/proc'}/${pid}`;
  const nowComm = readText(`${dir}/comm`)?.replace(/\n$/, '');
  if (nowComm === undefined) {
    by.unresolved = 'the process had exited before it could be looked up';
    return by;
  }
  if (comm !== undefined && nowComm !== comm) {
    by.unresolved = `pid ${pid} is now '${nowComm}': reused, or the process renamed itself`;
    return by;
  }
  try {
    by.exe = readlinkSync(`${dir}/exe`);
  } catch {
    // A kernel thread or a process we may not look into: the rest still says something.
  }
  const cmdline = readText(`${dir}/cmdline`);
  if (cmdline) {
    const text = cmdline.replace(/\0+$/, '').split('\0').join(' ');
    by.cmdline = text.length > CMDLINE_MAX ? `${text.slice(0, CMDLINE_MAX)}…` : text;
  }
  const stat = readText(`${dir}/stat`);
  // "pid (comm) state ppid ...": the comm may hold spaces and parentheses, the last ')' ends it.
  const ppid = stat ? Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) : NaN;
  if (ppid > 0) {
    const parentComm = readText(`${o.procRoot ?? '/proc'}/${ppid}/comm`)?.replace(/\n$/, '');
    by.parent = parentComm !== undefined ? { pid: ppid, comm: parentComm } : { pid: ppid };
  }
  const cgroupText = readText(`${dir}/cgroup`);
  const path = cgroupText !== undefined ? cgroupPath(cgroupText) : undefined;
  if (path !== undefined) {
    by.cgroup = path;
    Object.assign(by, cgroupOwner(path));
  }
  // Gone between the first read and the last: what was read may be a mix of two processes.
  if (readText(`${dir}/comm`) === undefined) {
    return { ...(comm !== undefined ? { pid, comm } : { pid }), unresolved: 'the process exited while it was looked up' };
  }
  return by;
}

/**
 * The path of /proc/PID/cgroup that says most: the unified hierarchy's ("0::"), else the named
 * systemd hierarchy's, else the first controller's that is not the root.
 */
export function cgroupPath(text: string): string | undefined {
  let unified: string | undefined, systemd: string | undefined, other: string | undefined;
  for (const line of text.split('\n')) {
    const a = line.indexOf(':');
    const b = line.indexOf(':', a + 1);
    if (a < 0 || b < 0) continue;
    const controllers = line.slice(a + 1, b);
    const path = line.slice(b + 1);
    if (line.startsWith('0::')) unified = path;
    else if (controllers === 'name=systemd') systemd = path;
    else if (other === undefined && path !== '/') other = path;
  }
  for (const p of [unified, systemd, other]) if (p !== undefined && p !== '/' && p !== '') return p;
  return unified ?? systemd;
}

const CONTAINER_SCOPE = /^(docker|cri-containerd|crio|libpod)-([0-9a-f]{64})\.scope$/;
const RUNTIME: Record<string, string> = { docker: 'docker', 'cri-containerd': 'containerd', crio: 'cri-o', libpod: 'podman' };
/** The cgroupfs drivers' parents: the container id is the segment under them. */
const CGROUPFS_PARENT: Record<string, string> = { docker: 'docker', libpod_parent: 'podman' };
const POD = /^(?:kubepods-(?:besteffort-|burstable-|guaranteed-)?)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$/;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * What a cgroup path names: the systemd unit (the innermost .service or .scope that is not a
 * container's), the container (docker, containerd, CRI-O and podman scopes of the systemd driver;
 * docker's and podman's cgroupfs parents; a bare id under a Kubernetes pod) and the pod's UID.
 */
export function cgroupOwner(path: string): CgroupOwner {
  const out: CgroupOwner = {};
  const segments = path.split('/').filter((s) => s !== '' && s !== '..');
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i]!;
    const scope = CONTAINER_SCOPE.exec(s);
    if (scope) {
      out.container = { id: scope[2]!, runtime: RUNTIME[scope[1]!] };
      continue;
    }
    const pod = POD.exec(s);
    if (pod) {
      out.pod = pod[1]!.replace(/_/g, '-');
      continue;
    }
    if (HEX64.test(s) && i > 0) {
      const parent = segments[i - 1]!;
      if (CGROUPFS_PARENT[parent] !== undefined) out.container = { id: s, runtime: CGROUPFS_PARENT[parent] };
      else if (out.pod !== undefined) out.container = { id: s };
      continue;
    }
    const lib = /^libpod-([0-9a-f]{64})$/.exec(s);
    if (lib && segments[i - 1] === 'libpod_parent') {
      out.container = { id: lib[1]!, runtime: 'podman' };
      continue;
    }
    if (/\.(service|scope)$/.test(s) && !/^(?:libpod|crio)-conmon-/.test(s)) out.unit = s;
  }
  return out;
}

/** The short form of a committer for a log line: pid, comm and what it runs in. */
export function who(c: Committer): Record<string, unknown> {
  const w: Record<string, unknown> = { pid: c.pid };
  if (c.comm !== undefined) w.comm = c.comm;
  if (c.pod !== undefined) w.pod = c.pod;
  if (c.container !== undefined) w.container = c.container.runtime ? `${c.container.runtime}:${c.container.id.slice(0, 12)}` : c.container.id.slice(0, 12);
  if (c.unit !== undefined) w.unit = c.unit;
  if (c.unresolved !== undefined) w.unresolved = c.unresolved;
  return w;
}

/** One line of `nfkeeper events` and `status`: who, when, what (and the repair). */
export function changeText(c: ForeignChange): string {
  const w = who(c.by);
  const where = [w.pod && `pod ${w.pod}`, w.container && `container ${w.container}`, w.unit && `unit ${w.unit}`].filter(Boolean).join(', ');
  const name = `${c.by.comm ?? '?'}[${c.by.pid || '?'}]${where ? ` (${where})` : ''}`;
  const repair = c.repair ? `; repaired at generation ${c.repair.generation} in ${c.repair.latencyMs.toFixed(3)} ms` : '';
  return `${c.at} generation ${c.generation} by ${name}: ${c.what.join('; ')}${c.truncated ? '; ...' : ''}${repair}`;
}

export function eventText(e: AttributionEvent): string {
  if (e.type === 'change') {
    const { type: _t, ...c } = e;
    return `change ${changeText(c)}`;
  }
  return `repair ${e.at} generation ${e.generation} (${e.cause}, ${e.latencyMs.toFixed(3)} ms) answered ${e.answered.join(', ')}: ${e.ops.join('; ')}`;
}

/**
 * An event in nft's words, as `nft monitor` begins its line (a rule's expressions are not in the
 * event the keeper keeps: the rule is named by its handle). Elements are shown by their key bytes.
 */
export function describeEvent(e: MonitorEvent): string {
  const del = e.type.startsWith('del');
  const verb = del ? 'delete' : 'add';
  const at = `${e.family} ${e.table}`;
  switch (e.type) {
    case 'newtable': case 'deltable': return `${verb} table ${at}`;
    case 'newchain': case 'delchain': return `${verb} chain ${at} ${e.name ?? '?'}`;
    case 'newrule': case 'delrule': {
      const flags = e.flags ?? 0;
      const v = del ? 'delete' : flags & 0x100 ? 'replace' : flags & 0x800 ? 'add' : 'insert';
      return `${v} rule ${at} ${e.name ?? '?'}${e.handle !== undefined ? ` handle ${e.handle}` : ''}`;
    }
    case 'newset': case 'delset': return `${verb} set ${at} ${e.name ?? '?'}`;
    case 'newsetelem': case 'delsetelem': {
      const keys = (e.elements ?? []).map((x) => `0x${x.key ?? ''}${x.keyEnd !== undefined ? `-0x${x.keyEnd}` : ''}`);
      return `${verb} element ${at} ${e.name ?? '?'} { ${keys.join(', ')} }`;
    }
    case 'newobj': case 'delobj': return `${verb} object ${at}`;
    case 'newflowtable': case 'delflowtable': return `${verb} flowtable ${at}`;
  }
}

/**
 * Label values for process names, bounded: the first `max` distinct names get their own, later ones
 * are `other` (a counter's series cannot be renamed later, so the first come keep theirs).
 */
export class CommLabels {
  private readonly names = new Set<string>();

  constructor(private readonly max: number) {}

  of(comm: string | undefined): string {
    if (comm === undefined || comm === '') return 'unknown';
    if (this.names.has(comm)) return comm;
    if (this.names.size >= this.max) return 'other';
    this.names.add(comm);
    return comm;
  }
}

/** One buffer for every /proc read: a file there has no size to fstat, and these are small. */
const procBuffer = Buffer.alloc(8192);

/** A /proc file's text (its first 8 KiB: a cmdline longer than that is cut anyway), or undefined. */
function readText(path: string): string | undefined {
  let fd;
  try {
    fd = openSync(path, 'r');
    const n = readSync(fd, procBuffer, 0, procBuffer.length, null);
    return procBuffer.toString('utf8', 0, n);
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function inInitialPidNamespace(): boolean {
  try {
    return readlinkSync('/proc/self/ns/pid') === `pid:[${PROC_PID_INIT_INO}]`;
  } catch {
    return false;
  }
}
