/**
 * Following our own commit into the rules (OwnedTable.rules): what the owned tables hold after a batch
 * that was provably the only commit since its plan's observation, from the batch's ops replayed
 * over the handles the observation saw, with the handles the kernel echoed for its new rules, or,
 * for a batch too big to echo, the handles and digests read of the chains it added rules to
 * (readAddedChains).
 */
import { ruleCount, type ChainConfig, type TableConfig } from '../model/desired.js';
import type { SetConfig } from '../model/sets.js';
import type { Batch } from '../netlink/batch.js';
import type { CommitResult, NftConn } from '../netlink/conn.js';
import type { Family } from '../netlink/expr.js';
import { SET_F, TABLE_F, type ChainDigests, type NftSet, type ObservedTable, type Rule, type Table } from '../netlink/objects.js';
import type { Op } from '../netlink/ops.js';
import { derivationOf, type Splice } from '../model/derivation.js';
import { knownRule, knownRuleAt, isKnownAt, hasKey } from './rule-key.js';
import { knownSets, objectsUnknown, tableKey, type TableRules } from './owned-table.js';

/**
 * The rules of `tables` after `batch`, planned from `observed` for them, was committed as the only
 * commit since (the generation moved from the planned-from one by exactly one); undefined where it
 * cannot be followed exactly. `echoed` gives the new rules' handles; without every one of them,
 * undefined. `previous`: the rules the observation planned from (their maps are then updated in place, so a
 * registration costs its own chains, not a pass over every owner's). `read`: for a batch too big
 * to echo, the handles and digests of the chains it added rules to, read at the commit's
 * generation (by table, then chain; see readAddedChains). `portId`: our socket, an owner flag's.
 */
export function followCommit(tables: readonly TableConfig[], observed: readonly ObservedTable[],
  batch: Batch, echoed: CommitResult | undefined, previous: ((t: TableConfig) => TableRules | undefined) | undefined,
  read: ReadonlyMap<string, ReadonlyMap<string, ChainDigests>> | undefined, portId: number | undefined): Map<string, TableRules> | undefined {
  if (!echoed && !read) return undefined;
  // Stateful objects are not known: a table that has them is read at each observation (objectsUnknown).
  const lost = new Set<string>();
  for (const [i, t] of tables.entries()) if (observed[i] && objectsUnknown(t, observed[i]!)) lost.add(tableKey(t));
  const anonymous = anonymousSetsHeld(echoed);
  const desiredTables = new Set(tables.map(tableKey));
  // Handles by chain, starting from what the plan saw.
  const handles = new Map<string, Map<string, number[]>>();
  // The last table's, at hand: a batch's ops come table by table (100,000 of one at an install).
  let last: { family: string; table: string; m: Map<string, number[]> } | undefined;
  const chainsOf = (family: string, table: string) => {
    if (last?.family === family && last.table === table) return last.m;
    let m = handles.get(`${family} ${table}`);
    if (!m) handles.set(`${family} ${table}`, m = new Map());
    last = { family, table, m };
    return m;
  };
  const seen = new Map<string, ObservedTable>(observed.map((o) => [tableKey(o), o]));
  const list = (family: string, table: string, chain: string): number[] | undefined => {
    const m = chainsOf(family, table);
    let l = m.get(chain);
    if (!l) {
      const o = seen.get(`${family} ${table}`);
      const rules = o?.rules.get(chain);
      if (!rules) return undefined;
      if (rules.some((r) => r.handle === undefined)) return undefined;
      m.set(chain, l = rules.map((r) => r.handle!));
    }
    return l;
  };
  const byId = new Map<number, number>();
  const replay = new Replay();
  const gone = new Set<number>();  // rule handles the batch deleted
  // Tables the batch created or claimed: the table as the kernel now holds it.
  const tablesNow = new Map<string, Table>();
  // Named sets the batch (re)created, with their definition; deleted ones map to null.
  const setsNow = new Map<string, NftSet | null>();
  // Chains whose rules changed only in the runs the merge reported (src/model/derivation.ts), over rules
  // that hold the earlier chain: their ops are replayed over those runs' handles (followSplices),
  // not over a list of every rule's handle (the dispatch chain holds one rule per owner).
  const spliced = new Map<string, Spliced>();
  for (const [i, t] of tables.entries()) {
    const kt = previous?.(t);
    const d = kt?.whole !== undefined && kt.observed === observed[i] ? derivationOf(t) : undefined;
    if (!d || d.from !== kt!.whole) continue;
    for (const [name, e] of d.edited) {
      const prev = kt!.observed.rules.get(name);
      if (kt!.verified.get(name) !== e.from || !prev || prev.length !== e.from.rules.length || read?.get(tableKey(t))?.has(name)) continue;
      spliced.set(`${tableKey(t)} ${name}`, { prev, splices: e.splices, ops: [] });
    }
  }
  // An op that cannot be followed loses its table alone: the next observation reads it, the other tables are followed.
  const followOp = (op: Op, index: number): boolean => {
    if (op.object === 'table') {
      const k = tableKey(op);
      if (op.verb !== 'add' && op.verb !== 'create') return false;  // a table recreated: read it
      const o = seen.get(k);
      if (!o) return false;
      const was = tablesNow.get(k) ?? o.table;
      const flags = op.flags ?? was?.flags ?? 0;
      if (flags & TABLE_F.OWNER && portId === undefined) return false;  // its owner is our socket: which one?
      tablesNow.set(k, {
        family: op.family, name: op.name, flags,
        ...(flags & TABLE_F.OWNER ? { owner: portId } : {}),
        ...(was?.userdata !== undefined ? { userdata: was.userdata } : op.userdata !== undefined ? { userdata: op.userdata } : {}),
      });
      return true;
    }
    if (op.object === 'set') {
      const k = `${op.family} ${op.table} ${op.name}`;
      if (op.verb === 'delete') {
        setsNow.set(k, null);
        return true;
      }
      // Anonymous sets are named by the kernel: a table that has them is not followed, unless the
      // echo proved their rules (anonymousSetsHeld): each set is then its rule's, and goes with it.
      if (op.flags === undefined || (op.verb !== 'add' && op.verb !== 'create')) return false;
      if (op.flags & SET_F.ANONYMOUS) return anonymous;
      setsNow.set(k, op as NftSet);
      return true;
    }
    if (op.object === 'obj') return false;  // stateful objects: as above
    if (op.object === 'element') return true;  // every named set holds its desired elements after the commit (below)
    // Bound chains (`jump { … }`) are named by the kernel: a commit that adds one is not followed.
    if (op.object === 'chain' && op.name === undefined) return false;
    if (op.object === 'rule' && op.chain === undefined) return false;
    if (op.object === 'chain') {
      const hk = `${op.family} ${op.table} ${op.name}`;
      if (spliced.has(hk)) {
        if (spliced.get(hk)!.ops.length > 0) return false;
        spliced.delete(hk);
      }
      const m = chainsOf(op.family, op.table);
      const cur = m.get(op.name);
      const existed = cur === undefined ? seen.get(`${op.family} ${op.table}`)?.rules.has(op.name) === true : cur !== DELETED;
      if (op.verb === 'add' || op.verb === 'create') {
        if (!existed) m.set(op.name, []);  // adding an existing chain changes none of its rules
      } else if (op.verb === 'flush') {
        if (!existed) return false;
        m.set(op.name, []);
      } else {
        m.set(op.name, DELETED);
      }
      return true;
    }
    if (read?.get(`${op.family} ${op.table}`)?.has(op.chain)) {
      if (op.verb === 'delete') gone.add(op.handle!);
      return true;  // its rules as read after the commit, below
    }
    const handle = op.verb === 'delete' ? undefined : echoed?.handles?.get(index);
    if (op.verb === 'delete') gone.add(op.handle!);
    else if (handle === undefined) return false;
    else if (op.id !== undefined) byId.set(op.id, handle);
    const h = spliced.size > 0 ? spliced.get(`${op.family} ${op.table} ${op.chain}`) : undefined;
    if (h) {
      h.ops.push({ op, handle });
      return true;
    }
    const l = list(op.family, op.table, op.chain);
    if (!l || l === DELETED || !replay.apply(l, op, handle, byId)) return false;
    return true;
  };
  // The op's table key, made again only when the table changes.
  let tk = '';
  let kf: string | undefined, kt: string | undefined;
  for (let index = 0; index < batch.ops.length; index++) {
    const op = batch.ops[index]!;
    if (op.object === 'table') {
      tk = tableKey(op);
      kf = undefined;
    } else if (op.family !== kf || op.table !== kt) {
      kf = op.family;
      kt = op.table;
      tk = `${kf} ${kt}`;
    }
    // A retired table deleted in the same batch is none of what is known.
    if (op.object === 'table' && !desiredTables.has(tk)) {
      if (op.verb === 'delete') continue;
      return undefined;
    }
    if (!lost.has(tk) && !followOp(op, index)) lost.add(tk);
  }
  replay.flush();
  for (const [tk, chains] of read ?? []) {
    const [family, table] = [tk.slice(0, tk.indexOf(' ')), tk.slice(tk.indexOf(' ') + 1)];
    for (const [chain, d] of chains) chainsOf(family, table).set(chain, d.handles.slice());
  }
  const out = new Map<string, TableRules>();
  // One table's rules after the batch; undefined: that table is read by the next observation.
  const tableAfter = (i: number, t: TableConfig): TableRules | undefined => {
    const o = observed[i];
    if (!o) return undefined;
    const tk = tableKey(t);
    if (tablesNow.has(tk)) o.table = tablesNow.get(tk);
    if (!o.table) return undefined;
    // Anonymous sets are named by the kernel and come with the rules that use them: not followed,
    // or (anonymousSetsHeld) left to those rules, which the known ones below carry with their sets.
    for (const [name, x] of o.sets) {
      if (!(x.set.flags & SET_F.ANONYMOUS)) continue;
      if (!anonymous) return undefined;
      o.sets.delete(name);
    }
    // The plan made every named set the desired one: created with its elements, its element
    // differences added and deleted, any other named set deleted. What the observation saw stays
    // only for a set the batch left alone (its definition; it had no element difference, or it
    // would be in the batch).
    for (const name of o.sets.keys()) {
      const now = setsNow.get(`${tk} ${name}`);
      if (now === null || (now === undefined && !(t.sets ?? []).some((x) => x.name === name))) o.sets.delete(name);
    }
    if (o.sets.size > (t.sets?.length ?? 0)) return undefined;
    const kt = previous?.(t);
    const reuse = kt?.observed === o;
    const verifiedSets = reuse ? kt!.verifiedSets : new Map<string, SetConfig>();
    const sets = knownSets(t, (n) => {
      const now = setsNow.get(`${tk} ${n}`);
      return now ?? (now === null ? undefined : o.sets.get(n)?.set);
    }, verifiedSets);
    if (!sets) return undefined;
    o.sets = sets;
    const m = chainsOf(t.family, t.name);
    const readHere = read?.get(tk);
    // The observation's maps are this pass's own (a dump, or the held rules the commit just
    // retired): changed in place, so a registration changes its own chains, not every owner's.
    const verified = reuse ? kt!.verified : new Map<string, ChainConfig>();
    // Derived from the table known whole (a registration): only the chains the derivation
    // changed need looking at, when the batch changed no other desired chain.
    const d = reuse && kt!.whole !== undefined ? derivationOf(t) : undefined;
    let visit: readonly ChainConfig[] = t.chains;
    if (d && d.from === kt!.whole) {
      const names = new Set(d.changed.map((c) => c.name));
      let inside = true;
      for (const [name, l] of m) if (l !== DELETED && !names.has(name)) inside = false;
      if (inside) visit = d.changed;
    }
    for (const c of visit) {
      let l = m.get(c.name);
      const h = spliced.get(`${tk} ${c.name}`);
      let regions: number[][] | undefined;
      if (h && l === undefined && h.ops.length > 0) {
        // Replayed over the runs' handles; where that cannot place an op, over the whole list as before.
        regions = replaySplices(h, byId);
        if (!regions) {
          l = h.prev.map((r) => r.handle!);
          const whole = new Replay();
          for (const { op, handle } of h.ops) if (!whole.apply(l, op, handle, byId)) return undefined;
          whole.flush();
        }
      }
      if (l === undefined && regions === undefined) {
        if (reuse && verified.get(c.name) === c) continue;  // unchanged, and known to hold c
        verified.set(c.name, c);
        const have = o.rules.get(c.name);
        if (!have || have.length !== c.rules.length) return undefined;
        if (have.some((r) => r.handle === undefined)) return undefined;
        // Decoded rules (the plan read this chain), or known ones of an earlier definition, give way to c's.
        if (have.length > 0 && (!hasKey(have[0]!) || have.some((r, j) => r.exprs !== c.rules[j]!.compiled.exprs))) {
          o.rules.set(c.name, c.rules.map((r, j) => knownRule(t, c, r, have[j]!.handle!, have[j]!.digest)));
        }
        continue;
      }
      verified.set(c.name, c);
      if (regions) {
        const copied = followSplices(t, c, h!.prev, regions, h!.splices, gone, undefined);
        if (!copied) return undefined;
        o.rules.set(c.name, copied);
        continue;
      }
      const n = ruleCount(c);
      if (l === undefined || l === DELETED || l.length !== n) return undefined;
      o.chains.set(c.name, { family: t.family, table: t.name, name: c.name, ...(c.base ?? {}), ...(c.userdata ? { userdata: c.userdata } : {}) });
      // Rules that stayed keep their known-rule objects (the dispatch chain holds one per owner) and
      // their order: one walk along the rules before, skipping the ones the batch deleted. A new one
      // is placed by index, the desired chain's rules not made for it (an install from the compile
      // cache encoded them without making them).
      const prev = o.rules.get(c.name) ?? [];
      const digests = readHere?.get(c.name)?.digests;
      let p = 0;
      const rules: Rule[] = new Array(n);
      for (let j = 0; j < n; j++) {
        while (p < prev.length && gone.has(prev[p]!.handle!)) p++;
        const kept = p < prev.length && prev[p]!.handle === l[j] ? prev[p++] : undefined;
        rules[j] = kept && isKnownAt(kept, c, j) ? kept : knownRuleAt(t, c, j, l[j]!, digests?.[j]);
      }
      o.rules.set(c.name, rules);
    }
    // What the batch deleted (and anything else not desired, which the plan deleted) goes. A
    // desired chain deleted and added again is no longer DELETED here.
    for (const [name, l] of m) {
      if (l === DELETED) {
        o.chains.delete(name);
        o.rules.delete(name);
        verified.delete(name);
      }
    }
    // Every desired chain is in o.chains now: as many as desired means nothing else is.
    if (o.chains.size !== t.chains.length) return undefined;
    return { observed: o, verified, verifiedSets, whole: t };
  };
  for (const [i, t] of tables.entries()) {
    if (lost.has(tableKey(t))) continue;
    const kt = tableAfter(i, t);
    if (kt) out.set(tableKey(t), kt);
  }
  return out;
}

/**
 * The echo proved every rule of the batch that looks up anonymous sets held as sent (its echoed
 * digest with those sets unnamed is the sent one's, CommitResult.unnamed; a one-shot apply's
 * verification): each such set is the one the batch created for that rule, with the elements the
 * batch gave it; or an earlier full echo of the same rules on this kernel proved it
 * (CommitResult.heldByProof, src/keeper/held-proof.ts). Without digests (the daemon's commits) never.
 */
function anonymousSetsHeld(echoed: CommitResult | undefined): boolean {
  if (echoed?.heldByProof) return true;
  const unnamed = echoed?.unnamed, held = echoed?.held;
  if (!unnamed || !held) return false;
  for (let i = 0; i < unnamed.length; i++) if (unnamed[i] !== undefined && held[i] !== unnamed[i]) return false;
  return true;
}

/** A chain the batch deleted, in followCommit's handles by chain. */
const DELETED: number[] = [];

/** A chain followCommit follows by its splices: its known rules before the batch, the splices, the batch's ops on it. */
interface Spliced {
  prev: readonly Rule[];
  splices: readonly Splice[];
  ops: { op: Extract<Op, { object: 'rule' }>; handle?: number }[];
}

/** One rule op applied to a chain's handle list (followCommit's replay); false when it does not fit the list. */
function applyRuleOp(l: number[], op: Extract<Op, { object: 'rule' }>, handle: number | undefined, byId: ReadonlyMap<number, number>): boolean {
  if (op.verb === 'delete') {
    const at = l.indexOf(op.handle!);
    if (at < 0) return false;
    l.splice(at, 1);
    return true;
  }
  if (handle === undefined) return false;
  if (op.verb === 'replace') return l.includes(op.handle!) && handle === op.handle;
  const anchor = op.position ?? (op.positionId !== undefined ? byId.get(op.positionId) : undefined);
  if (anchor === undefined && (op.position !== undefined || op.positionId !== undefined)) return false;
  if (anchor === undefined) {
    if (op.verb === 'add') l.push(handle);
    else l.unshift(handle);
    return true;
  }
  const at = l.indexOf(anchor);
  if (at < 0) return false;
  l.splice(op.verb === 'add' ? at + 1 : at, 0, handle);
  return true;
}

/**
 * applyRuleOp over a batch's ops in order, where the rules added one after another right after the
 * same rule (a run after its first, plan.ts placeEdit) go into the list together when the next op
 * is not one of them (flush): one walk and one move of the list for the run, not one per rule
 * (50,000 rules put back inside a 100,000-rule chain). `flush` before the lists are read.
 */
export class Replay {
  private l: number[] | undefined;
  private at = 0;
  private anchor = 0;
  private group: number[] = [];

  apply(l: number[], op: Extract<Op, { object: 'rule' }>, handle: number | undefined, byId: ReadonlyMap<number, number>): boolean {
    const after = op.verb === 'add' && handle !== undefined ? op.position ?? (op.positionId !== undefined ? byId.get(op.positionId) : undefined) : undefined;
    if (after !== undefined && this.l === l && after === this.anchor) {
      this.group.push(handle!);
      return true;
    }
    this.flush();
    if (after === undefined) return applyRuleOp(l, op, handle, byId);
    const at = l.indexOf(after);
    if (at < 0) return false;
    this.l = l;
    this.at = at;
    this.anchor = after;
    this.group.push(handle!);
    return true;
  }

  flush(): void {
    const l = this.l;
    if (!l) return;
    const g = this.group, n = g.length, from = this.at + 1, end = l.length;
    for (let k = 0; k < n; k++) l.push(0);
    l.copyWithin(from + n, from, end);
    // Each landed right after the anchor, so the last added comes first.
    for (let k = 0; k < n; k++) l[from + k] = g[n - 1 - k]!;
    this.l = undefined;
    this.group = [];
  }
}

/**
 * The handles of each splice's new rules, from replaying the batch's ops over each splice's own handles
 * (with the kept rule before it, which a new rule may be placed after): undefined when an op names
 * a rule outside every splice, or goes to a chain end no splice is at (the caller replays the whole list).
 */
function replaySplices(h: Spliced, byId: ReadonlyMap<number, number>): number[][] | undefined {
  const { prev, splices } = h;
  const locals = splices.map((x) => {
    const l: number[] = [];
    for (let i = Math.max(0, x.fromStart - 1); i < x.fromEnd; i++) l.push(prev[i]!.handle!);
    return l;
  });
  const before = splices.map((x) => (x.fromStart > 0 ? prev[x.fromStart - 1]!.handle! : undefined));
  const replay = new Replay();
  for (const { op, handle } of h.ops) {
    const named = op.verb === 'delete' || op.verb === 'replace' ? op.handle
      : op.position ?? (op.positionId !== undefined ? byId.get(op.positionId) : undefined);
    let k: number;
    if (named !== undefined) {
      k = locals.findIndex((l) => l.includes(named!));
    } else if (op.positionId !== undefined) {
      return undefined;
    } else {
      // At the chain's end (add) or head (insert): a splice must be there.
      k = op.verb === 'add' ? (splices[splices.length - 1]?.fromEnd === prev.length ? splices.length - 1 : -1) : (splices[0]?.fromStart === 0 ? 0 : -1);
    }
    if (k < 0 || !replay.apply(locals[k]!, op, handle, byId)) return undefined;
  }
  replay.flush();
  const out: number[][] = [];
  for (const [k, x] of splices.entries()) {
    const l = locals[k]!;
    // The kept rule before the splice stays first; what follows it is the splice's new run.
    if (before[k] !== undefined && l[0] !== before[k]) return undefined;
    const run = before[k] !== undefined ? l.slice(1) : l;
    if (run.length !== x.end - x.start) return undefined;
    out.push(run);
  }
  return out;
}

/**
 * A chain's known rules after a batch that changed only `splices` of it (src/model/derivation.ts): `prev` holds
 * the earlier chain's rules, `regions[k]` the handles of splice k's rules now. Outside the splices the
 * rules are the same desired objects at the same handles, copied; inside, as followCommit's walk
 * does. Undefined when what the batch deleted does not line up so.
 */
function followSplices(t: TableConfig, c: ChainConfig, prev: readonly Rule[], regions: readonly (readonly number[])[], splices: readonly Splice[],
  gone: ReadonlySet<number>, digests: readonly string[] | undefined): Rule[] | undefined {
  const out: Rule[] = new Array(c.rules.length);
  let p = 0;
  let j = 0;
  for (const [k, h] of splices.entries()) {
    if (h.start - j !== h.fromStart - p) return undefined;
    for (; j < h.start; j++) out[j] = prev[p++]!;
    const l = regions[k]!;
    for (; j < h.end; j++) {
      const handle = l[j - h.start]!;
      while (p < h.fromEnd && gone.has(prev[p]!.handle!)) p++;
      const kept = p < h.fromEnd && prev[p]!.handle === handle ? prev[p++] : undefined;
      const r = c.rules[j]!;
      out[j] = kept && hasKey(kept) && kept.exprs === r.compiled.exprs ? kept : knownRule(t, c, r, handle, digests?.[j]);
    }
    // What the splice took out of the chain: every rule the batch did not keep was deleted by it.
    for (; p < h.fromEnd; p++) if (!gone.has(prev[p]!.handle!)) return undefined;
  }
  if (c.rules.length - j !== prev.length - p) return undefined;
  for (; j < c.rules.length; j++) out[j] = prev[p++]!;
  return out;
}

/**
 * After a sole commit too big to echo its new rules' handles: the chains it added rules to, read
 * at `generation` (handles and digests, nothing decoded), for followCommit. A few chains are
 * dumped one by one, many with one dump of their table. Undefined when the kernel moved meanwhile.
 */
export async function readAddedChains(conn: NftConn, batch: Batch, generation: number):
  Promise<Map<string, Map<string, ChainDigests>> | undefined> {
  if (!conn.listRuleDigests) return undefined;
  const want = new Map<string, { family: Family; table: string; chains: Set<string> }>();
  for (const op of batch.ops) {
    // (a bound chain's rules come with the rule that jumps to it, in a named chain)
    if (op.object !== 'rule' || op.verb === 'delete' || op.chain === undefined) continue;
    const k = `${op.family} ${op.table}`;
    let w = want.get(k);
    if (!w) want.set(k, w = { family: op.family, table: op.table, chains: new Set() });
    w.chains.add(op.chain);
  }
  const out = new Map<string, Map<string, ChainDigests>>();
  for (const [k, w] of want) {
    const dumps = w.chains.size <= CHAIN_DUMPS_UP_TO
      ? (await Promise.all([...w.chains].map((chain) => conn.listRuleDigests!({ family: w.family, table: w.table, chain })))).flat()
      : (await conn.listRuleDigests({ family: w.family, table: w.table })).filter((d) => w.chains.has(d.chain));
    const m = new Map<string, ChainDigests>(dumps.map((d) => [d.chain, d]));
    for (const chain of w.chains) if (!m.has(chain)) m.set(chain, { chain, handles: [], digests: [] });
    out.set(k, m);
  }
  return conn.generation() === generation ? out : undefined;
}

/** Up to this many chains' rules are read one dump each after an unechoed commit; more, their table's dump. */
const CHAIN_DUMPS_UP_TO = 32;
