/**
 * What the keeper knows its tables hold between passes, without reading
 * them: per table, the chains and, per chain, each rule's handle with the
 * desired rule it was found (or written) to be. It is exact at one
 * generation only: taken from a look that found no drift, or from a look
 * plus the batch that was provably the only commit since (the guard held and
 * the generation moved by exactly one), with the handles the kernel echoed
 * for the batch's new rules. A pass that finds the kernel still at that
 * generation plans from it, with no dump, and compares only the chains whose
 * desired definition changed since (an owner registered or removed: its
 * chains and the dispatch chains). A batch too big to echo is followed by
 * reading the handles and digests of the chains it added rules to. Named sets
 * and maps are known by their definition and the desired config's own element
 * list (every named set holds its desired elements after a clean look or a
 * sole commit); timeout and dynamic sets, which the kernel changes without a
 * commit, have their elements read at each look. Anything it cannot follow
 * exactly (a table deleted or recreated, anonymous sets) drops it, and the
 * next pass reads the kernel as before.
 *
 * The rules it holds are known rules (knownRule): handle plus the desired rule's own
 * expressions, userdata and key (shared with the desired state, not copies),
 * so the decoded dump is not kept between passes.
 */
import type { ChainConfig, TableConfig } from '../config/config.js';
import type { SetConfig } from '../config/sets.js';
import { diffElements, setDefinitionKey } from '../model/elements.js';
import type { Batch } from '../netlink/batch.js';
import type { CommitResult } from '../netlink/conn.js';
import type { NftConn } from '../netlink/conn.js';
import type { Family } from '../netlink/expr.js';
import type { MonitorBatch, MonitorProgress } from '../netlink/events.js';
import { NetlinkError } from '../base/errors.js';
import { SET_F, TABLE_F, type Chain, type ChainDigests, type NftSet, type ObservedTable, type Rule, type Table } from '../netlink/objects.js';
import { knownRule, hasKey, sameKey } from './rule-key.js';
import { derivationOf, type Derivation, type Hunk } from '../model/derivation.js';
import type { Op } from '../netlink/ops.js';

const tableKey = (t: { family: string; name: string }) => `${t.family} ${t.name}`;

interface KnownTable {
  observed: ObservedTable;
  /** The desired chain (by identity) each chain's rules were verified against. */
  verified: Map<string, ChainConfig>;
  /**
   * The desired set (by identity) whose elements each named set holds: observed.sets has that
   * config's own element list for it, not a decoded copy. A volatile set (see volatileSet) is never
   * here: its elements are read at each look.
   */
  verifiedSets: Map<string, SetConfig>;
  /**
   * The desired table (by identity) every chain of which is in `verified` as that table's own
   * object, the kernel holding no other chain: a pass for a table derived from it (src/model/derivation.ts)
   * compares only the chains the derivation changed. Undefined when not known so.
   */
  whole?: TableConfig;
}

/**
 * Sets whose elements the kernel changes without a commit, so that no generation or event vouches
 * for them: timeouts expire, and a dynamic set's elements are added (and updated) by the data path.
 * The known state holds their definition but reads their elements at each look (one element dump
 * of that set, not of the table). Interval sets change only by commits and are known like plain ones.
 */
export const volatileSet = (s: NftSet): boolean => (s.flags & (SET_F.TIMEOUT | SET_F.EVAL)) !== 0;

/** What a look of a known table needs of each desired set: its definition, and its elements unless volatile. */
function knownSets(t: TableConfig, defs: (name: string) => NftSet | undefined, verifiedSets: Map<string, SetConfig>):
  ObservedTable['sets'] | undefined {
  const sets: ObservedTable['sets'] = new Map();
  for (const s of t.sets ?? []) {
    const set = defs(s.name);
    if (!set) return undefined;
    if (volatileSet(s.set)) {
      verifiedSets.delete(s.name);
      sets.set(s.name, { set, elements: [] });  // read at each look (Reconciler.look)
    } else {
      verifiedSets.set(s.name, s);
      sets.set(s.name, { set, elements: s.elements });
    }
  }
  return sets;
}

/**
 * Stateful objects are not part of the known state: their configuration can be changed in place
 * (NEWOBJ with the update flag) without touching the table's use count, so a table that has or
 * wants any is read at each look.
 */
function objectsUnknown(t: TableConfig, o: ObservedTable): boolean {
  return (t.objects?.length ?? 0) > 0 || (o.objs?.size ?? 0) > 0;
}

export class KnownState {
  private constructor(public generation: number, private readonly tables: Map<string, KnownTable>) {}

  /**
   * Whether the kernel, now at `generation`, still holds exactly what is known, read without
   * decoding a rule: the table's flags and object count, every base or empty chain, and one digest
   * dump of its rules (handles and digests, objects.ts Rule.digest) compared rule by rule. Yes
   * moves the known state to `generation`. A rule whose digest was never learnt (written by our
   * own commit since the last decoding read) makes it no, and the caller reads as before. Named
   * sets: their definitions with one set list per table; the elements of each set that
   * `elementsHeld` vouches for (the event mirror, exact at `generation`) are not read, the others'
   * are read and compared with the desired ones: where they differ, the elements read become the
   * known ones (the look then diffs them, no second read). A volatile set's are read by the look.
   */
  async revalidate(conn: NftConn, generation: number, tables: readonly TableConfig[],
    elementsHeld?: (t: TableConfig, set: string) => boolean): Promise<boolean> {
    if (!conn.listRuleDigests) return false;
    try {
      return await this.revalidateTables(conn, generation, tables, elementsHeld);
    } catch (e) {
      // The table, a chain or a set went while we read (ENOENT): not as known, read it whole.
      if (e instanceof NetlinkError && e.errnoName === 'ENOENT') return false;
      throw e;
    }
  }

  private async revalidateTables(conn: NftConn, generation: number, tables: readonly TableConfig[],
    elementsHeld?: (t: TableConfig, set: string) => boolean): Promise<boolean> {
    for (const t of tables) {
      const kt = this.table(t);
      const known = kt?.observed.table;
      if (!kt || !known) return false;
      const hasSets = kt.observed.sets.size > 0;
      // One digest dump per table (filtered by the kernel to it), never a round trip per chain: with
      // many owner chains the table's dump costs what the chain dumps together cost, without a
      // request and a promise per chain.
      const [table, dump, sets] = await Promise.all([conn.getTable(t.family, t.name), conn.listRuleDigests!({ family: t.family, table: t.name }),
        hasSets ? conn.listSets({ family: t.family, table: t.name }) : []]);
      // The table's use counts its chains, sets and stateful objects: only the known chains and sets may be there.
      if (!table || table.flags !== known.flags || table.owner !== known.owner || table.use !== kt.observed.chains.size + kt.observed.sets.size) return false;
      let withRules = 0;
      const undigested: string[] = [];
      for (const { chain, handles, digests } of dump) {
        const rules = kt.observed.rules.get(chain);
        if (!rules || rules.length !== handles.length) return false;
        let learnt = true;
        for (let i = 0; i < handles.length; i++) {
          const r = rules[i]!;
          if (r.handle !== handles[i] || (r.digest && r.digest !== digests[i])) return false;
          if (!r.digest) learnt = false;
        }
        if (!learnt) undigested.push(chain);
        withRules++;
      }
      // Rules our own commit wrote (their digests unknown): their chains are decoded, one dump each,
      // and compared with what is known; the digests are learnt for the next time.
      if (undigested.length > UNDIGESTED_CHAINS_UP_TO) return false;
      for (const chain of undigested) {
        const rules = kt.observed.rules.get(chain)!;
        const now = await conn.listRules({ family: t.family, table: t.name, chain, digests: true });
        if (now.length !== rules.length) return false;
        for (let i = 0; i < now.length; i++) {
          const r = rules[i]!;
          if (now[i]!.handle !== r.handle || !now[i]!.digest) return false;
          if (r.digest) {
            if (r.digest !== now[i]!.digest) return false;
          } else if (!sameKey(r, now[i]!)) {
            return false;
          }
        }
        for (let i = 0; i < now.length; i++) rules[i]!.digest ??= now[i]!.digest;
      }
      const chains = [...kt.observed.chains.values()];
      if (withRules !== chains.filter((c) => (kt.observed.rules.get(c.name)?.length ?? 0) > 0).length) return false;
      // Rules say nothing of a chain's hook, or of an empty chain's existence: a few are read one by
      // one (a GETCHAIN is answered inline), many with one chain list.
      const look = chains.filter((c) => c.hook !== undefined || (kt.observed.rules.get(c.name)?.length ?? 0) === 0);
      let now: (Chain | undefined)[];
      if (look.length <= CHAIN_GETS_UP_TO) {
        now = await Promise.all(look.map((c) => conn.getChain(t.family, t.name, c.name)));
      } else {
        const listed = new Map((await conn.listChains({ family: t.family, table: t.name })).map((c) => [c.name, c]));
        now = look.map((c) => listed.get(c.name));
      }
      for (const [i, c] of look.entries()) {
        const n = now[i];
        if (!n || n.hook !== c.hook || n.type !== c.type || n.priority !== c.priority || (n.policy ?? 'accept') !== (c.policy ?? 'accept')) return false;
      }
      if (hasSets && !(await this.setsHold(conn, t, kt, sets, elementsHeld))) return false;
    }
    if (conn.generation() !== generation) return false;  // something committed while we read
    this.generation = generation;
    return true;
  }

  /** revalidate's sets: the same definitions, and the known elements (from the mirror, or read). */
  private async setsHold(conn: NftConn, t: TableConfig, kt: KnownTable, sets: readonly NftSet[],
    elementsHeld?: (t: TableConfig, set: string) => boolean): Promise<boolean> {
    const named = sets.filter((x) => !(x.flags & SET_F.ANONYMOUS));
    if (named.length !== sets.length || named.length !== kt.observed.sets.size) return false;
    const read: Promise<void>[] = [];
    for (const x of named) {
      const k = kt.observed.sets.get(x.name);
      if (!k || setDefinitionKey(k.set) !== setDefinitionKey(x)) return false;
      const sc = kt.verifiedSets.get(x.name);
      if (!sc) continue;  // volatile: the look reads it
      if (elementsHeld?.(t, x.name)) continue;
      read.push(conn.listElements({ family: t.family, table: t.name, set: x.name }).then((els) => {
        const d = diffElements(sc.elements, els, sc.set);
        if (d.add.length === 0 && d.delete.length === 0) return;
        // Other elements than desired (a foreign change the mirror could not follow): what was read
        // is what the kernel holds, and the look diffs it, rather than reading the whole table again.
        kt.observed.sets.set(x.name, { set: k.set, elements: els });
        kt.verifiedSets.delete(x.name);
      }));
    }
    await Promise.all(read);
    return true;
  }

  /**
   * From a look that found no drift in `tables`: every chain holds exactly its desired rules, so
   * the decoded rules are replaced by known ones (handle + the desired rule), and every named set
   * its desired elements (the config's own list stands for them). Tables with anonymous sets are
   * not followed (their set names are the kernel's); undefined then.
   */
  static fromCleanLook(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[]): KnownState | undefined {
    const out = new Map<string, KnownTable>();
    for (const [i, t] of tables.entries()) {
      const o = observed[i];
      if (!o?.table || o.sets.size !== (t.sets?.length ?? 0) || objectsUnknown(t, o)) return undefined;
      const verifiedSets = new Map<string, SetConfig>();
      const sets = knownSets(t, (n) => o.sets.get(n)?.set, verifiedSets);
      if (!sets) return undefined;
      const kt: KnownTable = { observed: { ...o, chains: new Map(o.chains), rules: new Map(), sets }, verified: new Map(), verifiedSets };
      for (const c of t.chains) {
        const have = o.rules.get(c.name) ?? [];
        if (have.length !== c.rules.length || have.some((r) => r.handle === undefined)) return undefined;
        // A rule the look took by digest is a known rule already (the start-up's adoption): kept as it is.
        kt.observed.rules.set(c.name, c.rules.map((r, j) => {
          const h = have[j]!;
          return h.exprs === r.compiled.exprs && hasKey(h) ? h : knownRule(t, c, r, h.handle!, h.digest);
        }));
        kt.verified.set(c.name, c);
      }
      if (kt.observed.chains.size === t.chains.length) kt.whole = t;
      out.set(tableKey(t), kt);
    }
    return new KnownState(generation, out);
  }

  /**
   * After `batch`, planned from `observed` for `tables`, was committed as the only commit since
   * (the generation moved from the planned-from one to `generation`): the kernel holds `tables`
   * exactly. `echoed` gives the new rules' handles; without every one of them, undefined.
   * `previous`: the known state the look came from (its maps are then updated in place, so a
   * registration costs its own chains, not a pass over every owner's). `read`: for a batch too big
   * to echo, the handles and digests of the chains it added rules to, read at `generation` (by
   * table, then chain; see rulesAddedTo).
   */
  static afterSoleCommit(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[],
    batch: Batch, echoed: CommitResult | undefined, previous?: KnownState,
    read?: ReadonlyMap<string, ReadonlyMap<string, ChainDigests>>, portId?: number): KnownState | undefined {
    if (!echoed && !read) return undefined;
    for (const [i, t] of tables.entries()) if (observed[i] && objectsUnknown(t, observed[i]!)) return undefined;
    const desiredTables = new Set(tables.map(tableKey));
    // Handles by chain, starting from what the plan saw.
    const handles = new Map<string, Map<string, number[]>>();
    const chainsOf = (family: string, table: string) => {
      let m = handles.get(`${family} ${table}`);
      if (!m) handles.set(`${family} ${table}`, m = new Map());
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
    const gone = new Set<number>();  // rule handles the batch deleted
    // Tables the batch created or claimed: the table as the kernel now holds it.
    const tablesNow = new Map<string, Table>();
    // Named sets the batch (re)created, with their definition; deleted ones map to null.
    const setsNow = new Map<string, NftSet | null>();
    // Chains whose rules changed only in the runs the merge reported (src/model/derivation.ts), over a known state
    // that holds the earlier chain: their ops are replayed over those runs' handles (followHunks),
    // not over a list of every rule's handle (the dispatch chain holds one rule per owner).
    const hunked = new Map<string, Hunked>();
    for (const [i, t] of tables.entries()) {
      const kt = previous?.table(t);
      const d = kt?.whole !== undefined && kt.observed === observed[i] ? derivationOf(t) : undefined;
      if (!d || d.from !== kt!.whole) continue;
      for (const [name, e] of d.edited) {
        const prev = kt!.observed.rules.get(name);
        if (kt!.verified.get(name) !== e.from || !prev || prev.length !== e.from.rules.length || read?.get(tableKey(t))?.has(name)) continue;
        hunked.set(`${tableKey(t)} ${name}`, { prev, hunks: e.hunks, ops: [] });
      }
    }
    for (const [index, op] of batch.ops.entries()) {
      if (op.object === 'table') {
        const k = tableKey(op);
        // A retired table deleted in the same batch is none of what is known.
        if (!desiredTables.has(k)) {
          if (op.verb === 'delete') continue;
          return undefined;
        }
        if (op.verb !== 'add' && op.verb !== 'create') return undefined;  // a table recreated: read it
        const o = seen.get(k);
        if (!o) return undefined;
        const was = tablesNow.get(k) ?? o.table;
        const flags = op.flags ?? was?.flags ?? 0;
        if (flags & TABLE_F.OWNER && portId === undefined) return undefined;  // its owner is our socket: which one?
        tablesNow.set(k, {
          family: op.family, name: op.name, flags,
          ...(flags & TABLE_F.OWNER ? { owner: portId } : {}),
          ...(was?.userdata !== undefined ? { userdata: was.userdata } : op.userdata !== undefined ? { userdata: op.userdata } : {}),
        });
        continue;
      }
      if (op.object === 'set') {
        const k = `${op.family} ${op.table} ${op.name}`;
        if (op.verb === 'delete') {
          setsNow.set(k, null);
          continue;
        }
        // Anonymous sets are named by the kernel: a table that has them is not followed.
        if (op.flags === undefined || op.flags & SET_F.ANONYMOUS) return undefined;
        if (op.verb === 'add' || op.verb === 'create') setsNow.set(k, op as NftSet);
        else return undefined;
        continue;
      }
      // Stateful objects are not known: a table that has them is read at each look (objectsUnknown).
      if (op.object === 'obj') return undefined;
      if (op.object === 'element') continue;  // every named set holds its desired elements after the commit (below)
      if (op.object === 'chain') {
        const hk = `${op.family} ${op.table} ${op.name}`;
        if (hunked.has(hk)) {
          if (hunked.get(hk)!.ops.length > 0) return undefined;
          hunked.delete(hk);
        }
        const m = chainsOf(op.family, op.table);
        const cur = m.get(op.name);
        const existed = cur === undefined ? seen.get(`${op.family} ${op.table}`)?.rules.has(op.name) === true : cur !== DELETED;
        if (op.verb === 'add' || op.verb === 'create') {
          if (!existed) m.set(op.name, []);  // adding an existing chain changes none of its rules
        } else if (op.verb === 'flush') {
          if (!existed) return undefined;
          m.set(op.name, []);
        } else {
          m.set(op.name, DELETED);
        }
        continue;
      }
      if (read?.get(`${op.family} ${op.table}`)?.has(op.chain)) {
        if (op.verb === 'delete') gone.add(op.handle!);
        continue;  // its rules as read after the commit, below
      }
      const h = hunked.size > 0 ? hunked.get(`${op.family} ${op.table} ${op.chain}`) : undefined;
      if (h) {
        if (op.verb === 'delete') {
          gone.add(op.handle!);
          h.ops.push({ op });
          continue;
        }
        const handle = echoed?.handles?.get(index);
        if (handle === undefined) return undefined;
        if (op.id !== undefined) byId.set(op.id, handle);
        h.ops.push({ op, handle });
        continue;
      }
      const l = list(op.family, op.table, op.chain);
      if (!l || l === DELETED) return undefined;
      if (op.verb === 'delete') {
        const at = l.indexOf(op.handle!);
        if (at < 0) return undefined;
        l.splice(at, 1);
        gone.add(op.handle!);
        continue;
      }
      const handle = echoed?.handles?.get(index);
      if (handle === undefined) return undefined;
      if (op.id !== undefined) byId.set(op.id, handle);
      if (op.verb === 'replace') {
        const at = l.indexOf(op.handle!);
        if (at < 0 || handle !== op.handle) return undefined;
        continue;
      }
      const anchor = op.position ?? (op.positionId !== undefined ? byId.get(op.positionId) : undefined);
      if (anchor === undefined && (op.position !== undefined || op.positionId !== undefined)) return undefined;
      if (anchor === undefined) {
        if (op.verb === 'add') l.push(handle);
        else l.unshift(handle);
        continue;
      }
      const at = l.indexOf(anchor);
      if (at < 0) return undefined;
      l.splice(op.verb === 'add' ? at + 1 : at, 0, handle);
    }
    for (const [tk, chains] of read ?? []) {
      const [family, table] = [tk.slice(0, tk.indexOf(' ')), tk.slice(tk.indexOf(' ') + 1)];
      for (const [chain, d] of chains) chainsOf(family, table).set(chain, d.handles.slice());
    }
    const out = new Map<string, KnownTable>();
    for (const [i, t] of tables.entries()) {
      const o = observed[i];
      if (!o) return undefined;
      const tk = tableKey(t);
      if (tablesNow.has(tk)) o.table = tablesNow.get(tk);
      if (!o.table) return undefined;
      // Anonymous sets are named by the kernel and come with the rules that use them: not followed.
      for (const x of o.sets.values()) if (x.set.flags & SET_F.ANONYMOUS) return undefined;
      // The plan made every named set the desired one: created with its elements, its element
      // differences added and deleted, any other named set deleted. What the look saw stays only for
      // a set the batch left alone (its definition; it had no element difference, or it would be in the batch).
      for (const name of o.sets.keys()) {
        const now = setsNow.get(`${tk} ${name}`);
        if (now === null || (now === undefined && !(t.sets ?? []).some((x) => x.name === name))) o.sets.delete(name);
      }
      if (o.sets.size > (t.sets?.length ?? 0)) return undefined;
      const kt = previous?.table(t);
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
      // The look's maps are this pass's own (a dump, or the known state the commit just retired):
      // changed in place, so a registration touches its own chains, not every owner's.
      const verified = reuse ? kt!.verified : new Map<string, ChainConfig>();
      // Derived from the table known whole (a registration): only the chains the derivation
      // changed need looking at, when the batch touched no other desired chain.
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
        const h = hunked.get(`${tk} ${c.name}`);
        let regions: number[][] | undefined;
        if (h && l === undefined && h.ops.length > 0) {
          // Replayed over the runs' handles; where that cannot place an op, over the whole list as before.
          regions = replayHunks(h, byId);
          if (!regions) {
            l = h.prev.map((r) => r.handle!);
            for (const { op, handle } of h.ops) if (!applyRuleOp(l, op, handle, byId)) return undefined;
          }
        }
        if (l === undefined && regions === undefined) {
          if (reuse && verified.get(c.name) === c) continue;  // untouched, and known to hold c
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
          const copied = followHunks(t, c, h!.prev, regions, h!.hunks, gone, undefined);
          if (!copied) return undefined;
          o.rules.set(c.name, copied);
          continue;
        }
        if (l === undefined || l === DELETED || l.length !== c.rules.length) return undefined;
        o.chains.set(c.name, { family: t.family, table: t.name, name: c.name, ...(c.base ?? {}), ...(c.userdata ? { userdata: c.userdata } : {}) });
        // Rules that stayed keep their known-rule objects (the dispatch chain holds one per owner) and
        // their order: one walk along the rules before, skipping the ones the batch deleted.
        const prev = o.rules.get(c.name) ?? [];
        const digests = readHere?.get(c.name)?.digests;
        let p = 0;
        const handles = l;
        o.rules.set(c.name, c.rules.map((r, j) => {
          while (p < prev.length && gone.has(prev[p]!.handle!)) p++;
          const kept = p < prev.length && prev[p]!.handle === handles[j] ? prev[p++] : undefined;
          return kept && hasKey(kept) && kept.exprs === r.compiled.exprs ? kept : knownRule(t, c, r, handles[j]!, digests?.[j]);
        }));
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
      out.set(tk, { observed: o, verified, verifiedSets, whole: t });
    }
    return new KnownState(generation, out);
  }

  /**
   * A look planned from this state found `tables` as desired: the chains it compared (their desired
   * definition is another object than the one verified) hold exactly their desired rules now, in
   * the known rules' order and handles. O(chains), and O(rules) of those chains only.
   */
  confirm(tables: readonly TableConfig[]): boolean {
    for (const t of tables) {
      const kt = this.table(t);
      if (!kt) return false;
      // Derived from the table known whole: only the chains it changed can be other objects (none, when it is that table).
      const from = this.since(t);
      for (const c of from ? from.changed : t.chains) {
        if (kt.verified.get(c.name) === c) continue;
        const have = kt.observed.rules.get(c.name) ?? [];
        if (have.length !== c.rules.length || have.some((r) => r.handle === undefined)) return false;
        kt.observed.rules.set(c.name, c.rules.map((r, j) => knownRule(t, c, r, have[j]!.handle!, have[j]!.digest)));
        kt.verified.set(c.name, c);
      }
      if (from) for (const name of from.removed) kt.verified.delete(name);
      // A clean look: the kernel holds t's chains and no other.
      kt.whole = kt.observed.chains.size === t.chains.length ? t : undefined;
      // Sets compared against another desired object (a reload): they hold its elements now.
      for (const s of t.sets ?? []) {
        if (volatileSet(s.set) || kt.verifiedSets.get(s.name) === s) continue;
        const have = kt.observed.sets.get(s.name);
        if (!have) return false;
        kt.observed.sets.set(s.name, { set: have.set, elements: s.elements });
        kt.verifiedSets.set(s.name, s);
      }
    }
    return true;
  }

  /**
   * The kernel moved to `generation` without touching the known tables (proven by the events, see
   * OwnedTouches.untouched): what is known holds there too, and nothing needs reading.
   */
  advance(generation: number): void {
    this.generation = generation;
  }

  /**
   * Whether afterSoleCommit can follow `batch` from `observed` at all: chain and rule ops only, in
   * tables without sets (whose anonymous set names are the kernel's). Checked before reading the
   * chains of a batch too big to echo, so that no read is spent on a batch it would give up on.
   */
  static canFollow(batch: Batch, observed: readonly ObservedTable[]): boolean {
    return observed.every((o) => [...o.sets.values()].every((x) => !(x.set.flags & SET_F.ANONYMOUS)))
      && batch.ops.every((op) => op.object === 'chain' || op.object === 'rule' || op.object === 'element'
        || (op.object === 'table' && (op.verb === 'add' || op.verb === 'create' || (op.verb === 'delete' && !observed.some((o) => o.family === op.family && o.name === op.name))))
        || (op.object === 'set' && (op.verb === 'delete' || (op.flags !== undefined && !(op.flags & SET_F.ANONYMOUS)))));
  }

  /** The observation of `t` as known, and the desired chains its rules were verified against. */
  table(t: TableConfig): KnownTable | undefined {
    return this.tables.get(tableKey(t));
  }

  /**
   * How `t` was made from the table this state holds whole (src/model/derivation.ts), for diffTable's `since`:
   * undefined unless it was made from exactly that table.
   */
  since(t: TableConfig): Derivation | undefined {
    const kt = this.table(t);
    if (kt?.whole === undefined) return undefined;
    // The very table held whole (a pass after a registration, when only the generation moved): nothing changed.
    if (kt.whole === t) return { from: t, changed: [], removed: [], edited: NO_EDITS };
    const d = derivationOf(t);
    return d?.from === kt.whole ? d : undefined;
  }

  /** Every table of `tables` is known (and nothing else is needed). */
  covers(tables: readonly TableConfig[]): boolean {
    return tables.every((t) => this.tables.has(tableKey(t)));
  }
}

const DELETED: number[] = [];
const NO_EDITS: Derivation['edited'] = new Map();

/** A chain afterSoleCommit follows by its hunks: its known rules before the batch, the hunks, the batch's ops on it. */
interface Hunked {
  prev: readonly Rule[];
  hunks: readonly Hunk[];
  ops: { op: Extract<Op, { object: 'rule' }>; handle?: number }[];
}

/** One rule op applied to a chain's handle list (afterSoleCommit's replay); false when it does not fit the list. */
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
 * The handles of each hunk's new rules, from replaying the batch's ops over each hunk's own handles
 * (with the kept rule before it, which a new rule may be placed after): undefined when an op names
 * a rule outside every hunk, or goes to a chain end no hunk is at (the caller replays the whole list).
 */
function replayHunks(h: Hunked, byId: ReadonlyMap<number, number>): number[][] | undefined {
  const { prev, hunks } = h;
  const locals = hunks.map((x) => {
    const l: number[] = [];
    for (let i = Math.max(0, x.fromStart - 1); i < x.fromEnd; i++) l.push(prev[i]!.handle!);
    return l;
  });
  const before = hunks.map((x) => (x.fromStart > 0 ? prev[x.fromStart - 1]!.handle! : undefined));
  for (const { op, handle } of h.ops) {
    const named = op.verb === 'delete' || op.verb === 'replace' ? op.handle
      : op.position ?? (op.positionId !== undefined ? byId.get(op.positionId) : undefined);
    let k: number;
    if (named !== undefined) {
      k = locals.findIndex((l) => l.includes(named!));
    } else if (op.positionId !== undefined) {
      return undefined;
    } else {
      // At the chain's end (add) or head (insert): a hunk must be there.
      k = op.verb === 'add' ? (hunks[hunks.length - 1]?.fromEnd === prev.length ? hunks.length - 1 : -1) : (hunks[0]?.fromStart === 0 ? 0 : -1);
    }
    if (k < 0 || !applyRuleOp(locals[k]!, op, handle, byId)) return undefined;
  }
  const out: number[][] = [];
  for (const [k, x] of hunks.entries()) {
    const l = locals[k]!;
    // The kept rule before the hunk stays first; what follows it is the hunk's new run.
    if (before[k] !== undefined && l[0] !== before[k]) return undefined;
    const run = before[k] !== undefined ? l.slice(1) : l;
    if (run.length !== x.end - x.start) return undefined;
    out.push(run);
  }
  return out;
}

/**
 * A chain's known rules after a batch that changed only `hunks` of it (src/model/derivation.ts): `prev` holds
 * the earlier chain's rules, `regions[k]` the handles of hunk k's rules now. Outside the hunks the
 * rules are the same desired objects at the same handles, copied; inside, as afterSoleCommit's walk
 * does. Undefined when what the batch deleted does not line up so.
 */
function followHunks(t: TableConfig, c: ChainConfig, prev: readonly Rule[], regions: readonly (readonly number[])[], hunks: readonly Hunk[],
  gone: ReadonlySet<number>, digests: readonly string[] | undefined): Rule[] | undefined {
  const out: Rule[] = new Array(c.rules.length);
  let p = 0;
  let j = 0;
  for (const [k, h] of hunks.entries()) {
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
    // What the hunk took out of the chain: every rule the batch did not keep was deleted by it.
    for (; p < h.fromEnd; p++) if (!gone.has(prev[p]!.handle!)) return undefined;
  }
  if (c.rules.length - j !== prev.length - p) return undefined;
  for (; j < c.rules.length; j++) out[j] = prev[p++]!;
  return out;
}

/**
 * After a sole commit too big to echo its new rules' handles: the chains it added rules to, read
 * at `generation` (handles and digests, nothing decoded), for afterSoleCommit. A few chains are
 * dumped one by one, many with one dump of their table. Undefined when the kernel moved meanwhile.
 */
export async function readAddedChains(conn: NftConn, batch: Batch, generation: number):
  Promise<Map<string, Map<string, ChainDigests>> | undefined> {
  if (!conn.listRuleDigests) return undefined;
  const want = new Map<string, { family: Family; table: string; chains: Set<string> }>();
  for (const op of batch.ops) {
    if (op.object !== 'rule' || op.verb === 'delete') continue;
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

/** Up to this many chains with rules of unknown digest are decoded by revalidate (one dump each); more, a full read. */
const UNDIGESTED_CHAINS_UP_TO = 8;

/** Up to this many chains are fetched one GETCHAIN each; more take one chain list (as observeTable does). */
const CHAIN_GETS_UP_TO = 8;

/**
 * Which commits touched the owned tables, from the monitor's batches: the proof that lets a pass
 * keep what is known when only the generation moved (a commit in another table), with
 * no read at all. The monitor delivers every commit that touched a watched table (and every table
 * deletion); with its progress (the run of commits it saw whole, and how many batches it handed
 * over) a pass can tell that no commit since the known generation touched an owned table.
 */
export class OwnedTouches {
  /** Batches noted: every one the monitor delivered, to compare with MonitorProgress.delivered. */
  noted = 0;
  /** The last generation whose commit touched an owned table (ours included), as far as noted. */
  lastTouch = 0;
  /** Owned table names by family (no key string built per event: note() runs on the repair's path). */
  private owned = new Map<string, Set<string>>();

  /** The owned tables (the monitor's filter). */
  setOwned(tables: readonly { family: string; name: string }[]): void {
    this.owned = new Map();
    for (const t of tables) {
      let names = this.owned.get(t.family);
      if (!names) this.owned.set(t.family, names = new Set());
      names.add(t.name);
    }
  }

  note(b: MonitorBatch): void {
    this.noted++;
    // An overflow lost commits: the monitor's run starts again (runStart), which the proof checks.
    if (b.overflow) return;
    let touched = b.truncated;
    for (let i = 0; !touched && i < b.events.length; i++) touched = this.owned.get(b.events[i]!.family)?.has(b.events[i]!.table) === true;
    if (touched) this.lastTouch = Math.max(this.lastTouch, b.generation);
  }

  /** Our own commit that made `generation` touched an owned table, learnt without its batch (Monitor.skipOwn). */
  touched(generation: number): void {
    this.lastTouch = Math.max(this.lastTouch, generation);
  }

  /**
   * True when no commit after `from` up to `to` (the kernel's generation now) touched an owned
   * table: the monitor saw every commit whole from `from + 1` on, up to `to` at least, and every
   * batch it handed over was noted, none touching an owned table after `from`.
   */
  untouched(from: number, to: number, p: MonitorProgress): boolean {
    return p.delivered === this.noted && p.runStart !== 0 && p.runStart <= from + 1 && p.lastGeneration >= to
      && this.lastTouch <= from && from <= to;
  }

  /** The monitor has not caught up with `to` yet (its thread, or the delivery to this one, trails the kernel). */
  lagging(to: number, p: MonitorProgress): boolean {
    return p.lastGeneration < to || p.delivered > this.noted;
  }
}
