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
 * chains and the dispatch chains). Anything it cannot follow exactly (a
 * table or set operation, a batch too big to echo) drops it, and the next
 * pass reads the kernel as before.
 *
 * The rules it holds are compact: handle plus the desired rule's own
 * expressions, userdata and key (shared with the desired state, not copies),
 * so the decoded dump is not kept between passes (issue 14's memory target).
 */
import type { ChainConfig, TableConfig } from '../config/config.js';
import type { Batch } from '../netlink/batch.js';
import type { CommitResult } from '../netlink/conn.js';
import type { NftConn } from '../netlink/conn.js';
import type { ObservedTable, Rule } from '../netlink/objects.js';
import { desiredKey, hasKey, withKey } from './reconcile.js';

const tableKey = (t: { family: string; name: string }) => `${t.family} ${t.name}`;

interface KnownTable {
  observed: ObservedTable;
  /** The desired chain (by identity) each chain's rules were verified against. */
  verified: Map<string, ChainConfig>;
}

export class KnownState {
  private constructor(public generation: number, private readonly tables: Map<string, KnownTable>) {}

  /**
   * Whether the kernel, now at `generation`, still holds exactly what is known, read without
   * decoding a rule: the table's flags and object count, every base or empty chain, and one digest
   * dump of its rules (handles and digests, objects.ts Rule.digest) compared rule by rule. Yes
   * moves the known state to `generation`. A rule whose digest was never learnt (written by our
   * own commit since the last decoding read) makes it no, and the caller reads as before.
   */
  async revalidate(conn: NftConn, generation: number, tables: readonly TableConfig[]): Promise<boolean> {
    if (!conn.listRuleDigests) return false;
    for (const t of tables) {
      const kt = this.table(t);
      const known = kt?.observed.table;
      if (!kt || !known) return false;
      // One digest dump per chain: in a table of many chains (owners) the kernel's table-wide rule
      // dump costs several times the sum of per-chain ones (it walks the table's chains again for
      // every message buffer it fills; measured 2-3x at 1,000 chains), and these are answered inline.
      const names = [...kt.observed.chains.keys()];
      const perChain = names.length > CHAIN_DUMPS_FROM;
      const [table, dump] = await Promise.all([conn.getTable(t.family, t.name), perChain
        ? Promise.all(names.map((chain) => conn.listRuleDigests!({ family: t.family, table: t.name, chain }))).then((l) => l.flat())
        : conn.listRuleDigests({ family: t.family, table: t.name })]);
      // The table's use counts its chains, sets and stateful objects: only the known chains may be there.
      if (!table || table.flags !== known.flags || table.owner !== known.owner || table.use !== kt.observed.chains.size) return false;
      let withRules = 0;
      for (const { chain, handles, digests } of dump) {
        const rules = kt.observed.rules.get(chain);
        if (!rules || rules.length !== handles.length) return false;
        for (let i = 0; i < handles.length; i++) {
          const r = rules[i]!;
          if (r.handle !== handles[i] || !r.digest || r.digest !== digests[i]) return false;
        }
        withRules++;
      }
      const chains = [...kt.observed.chains.values()];
      if (withRules !== chains.filter((c) => (kt.observed.rules.get(c.name)?.length ?? 0) > 0).length) return false;
      // Rules say nothing of a chain's hook, or of an empty chain's existence: those few are read one by one.
      const look = chains.filter((c) => c.hook !== undefined || (kt.observed.rules.get(c.name)?.length ?? 0) === 0);
      const now = await Promise.all(look.map((c) => conn.getChain(t.family, t.name, c.name)));
      for (const [i, c] of look.entries()) {
        const n = now[i];
        if (!n || n.hook !== c.hook || n.type !== c.type || n.priority !== c.priority || (n.policy ?? 'accept') !== (c.policy ?? 'accept')) return false;
      }
    }
    if (conn.generation() !== generation) return false;  // something committed while we read
    this.generation = generation;
    return true;
  }

  /**
   * From a look that found no drift in `tables`: every chain holds exactly its desired rules, so
   * the decoded rules are replaced by compact ones (handle + the desired rule). Tables with
   * anonymous sets are not followed (their set names are the kernel's); undefined then.
   */
  static fromCleanLook(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[]): KnownState | undefined {
    const out = new Map<string, KnownTable>();
    for (const [i, t] of tables.entries()) {
      const o = observed[i];
      if (!o?.table || o.sets.size > 0) return undefined;
      const kt: KnownTable = { observed: { ...o, chains: new Map(o.chains), rules: new Map(), sets: new Map() }, verified: new Map() };
      for (const c of t.chains) {
        const have = o.rules.get(c.name) ?? [];
        if (have.length !== c.rules.length || have.some((r) => r.handle === undefined)) return undefined;
        kt.observed.rules.set(c.name, c.rules.map((r, j) => compactRule(t, c, r, have[j]!.handle!, have[j]!.digest)));
        kt.verified.set(c.name, c);
      }
      out.set(tableKey(t), kt);
    }
    return new KnownState(generation, out);
  }

  /**
   * After `batch`, planned from `observed` for `tables`, was committed as the only commit since
   * (the generation moved from the planned-from one to `generation`): the kernel holds `tables`
   * exactly. `echoed` gives the new rules' handles; without every one of them, undefined.
   */
  static afterSoleCommit(generation: number, tables: readonly TableConfig[], observed: readonly ObservedTable[],
    batch: Batch, echoed: CommitResult | undefined): KnownState | undefined {
    if (!echoed) return undefined;
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
    for (const [index, op] of batch.ops.entries()) {
      if (op.object === 'table' || op.object === 'set' || op.object === 'element') return undefined;
      if (op.object === 'chain') {
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
      const l = list(op.family, op.table, op.chain);
      if (!l || l === DELETED) return undefined;
      if (op.verb === 'delete') {
        const at = l.indexOf(op.handle!);
        if (at < 0) return undefined;
        l.splice(at, 1);
        continue;
      }
      const handle = echoed.handles.get(index);
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
    const out = new Map<string, KnownTable>();
    for (const [i, t] of tables.entries()) {
      const o = observed[i];
      if (!o?.table || o.sets.size > 0) return undefined;
      const m = chainsOf(t.family, t.name);
      // The look's maps are this pass's own (a dump, or the known state the commit just retired):
      // changed in place, so a registration touches its own chains, not every owner's.
      const verified = new Map<string, ChainConfig>();
      const want = new Set<string>();
      for (const c of t.chains) {
        want.add(c.name);
        verified.set(c.name, c);
        const l = m.get(c.name);
        if (l === undefined) {
          const have = o.rules.get(c.name);
          if (!have || have.length !== c.rules.length) return undefined;
          if (have.length === 0 || hasKey(have[0]!)) continue;  // compact already: from a known state
          // Decoded rules (the plan read this chain) give way to compact ones.
          if (have.some((r) => r.handle === undefined)) return undefined;
          o.rules.set(c.name, c.rules.map((r, j) => compactRule(t, c, r, have[j]!.handle!, have[j]!.digest)));
          continue;
        }
        if (l === DELETED || l.length !== c.rules.length) return undefined;
        o.chains.set(c.name, { family: t.family, table: t.name, name: c.name, ...(c.base ?? {}) });
        // Rules that stayed keep their compact objects (the dispatch chain holds one per owner).
        const before = new Map<number, Rule>();
        for (const r of o.rules.get(c.name) ?? []) if (r.handle !== undefined && hasKey(r)) before.set(r.handle, r);
        o.rules.set(c.name, c.rules.map((r, j) => {
          const kept = before.get(l[j]!);
          return kept && kept.exprs === r.compiled.exprs ? kept : compactRule(t, c, r, l[j]!);
        }));
      }
      // What the batch deleted (and anything else not desired, which the plan deleted) goes.
      for (const [name, l] of m) {
        if (l === DELETED && !want.has(name)) {
          o.chains.delete(name);
          o.rules.delete(name);
        }
      }
      if (o.chains.size !== want.size) return undefined;
      out.set(tableKey(t), { observed: o, verified });
    }    return new KnownState(generation, out);
  }

  /** The observation of `t` as known, and the desired chains its rules were verified against. */
  table(t: TableConfig): KnownTable | undefined {
    return this.tables.get(tableKey(t));
  }

  /** Every table of `tables` is known (and nothing else is needed). */
  covers(tables: readonly TableConfig[]): boolean {
    return tables.every((t) => this.tables.has(tableKey(t)));
  }
}

const DELETED: number[] = [];

/** From this many chains on, a table's rule digests are read chain by chain (see revalidate). */
const CHAIN_DUMPS_FROM = 64;

function compactRule(t: TableConfig, c: ChainConfig, r: ChainConfig['rules'][number], handle: number, digest?: string): Rule {
  const compiled = r.compiled;
  return withKey({
    family: t.family, table: t.name, chain: c.name, handle, exprs: compiled.exprs,
    ...(compiled.userdata !== undefined ? { userdata: compiled.userdata } : {}),
    ...(digest !== undefined ? { digest } : {}),
  }, desiredKey(r));
}
