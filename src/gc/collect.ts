/**
 * Foreign garbage collection: in tables other tools manage (iptables-nft's
 * `ip nat`, ...), find rules tagged with an owner id that is no longer live,
 * and the chains that only such rules reach, and remove them in one batch
 * guarded by the generation they were found at.
 *
 * Safety rules, each enforced here:
 * - untagged rules, and rules tagged with a live id (or a not-yet-expired
 *   one), are never deleted on their own;
 * - a chain is deleted only if it is a regular chain, every rule that jumps
 *   or gotos to it is itself garbage, none of its rules carries a tag that is
 *   not garbage, and the kernel's reference count matches the references seen
 *   (so a verdict map or anything unseen that points at it keeps it);
 * - a stale view never commits: the batch carries expectGeneration. Refused by a commit to a
 *   table it did not read (a neighbour's, under `proof`), the same batch is sent again guarded by a
 *   later generation where the monitor proves that no commit since the scan named a table the scan
 *   read (every foreign table configured) or the batch touches; a commit that named one (a CNI
 *   plugin adding to a chain it deletes) makes it scan again.
 */
import { readFileSync } from 'node:fs';
import { writeFileAtomic } from '../base/atomic-file.js';
import { NfkeeperError } from '../base/errors.js';
import { Batch } from '../netlink/batch.js';
import type { Family } from '../netlink/expr.js';
import { indexByChain, type Chain, type Rule } from '../netlink/objects.js';
import type { NftConn } from '../netlink/conn.js';
import { commitGuarded, type OpenProof } from '../netlink/guard.js';
import { commentOf, renderRule, xtComments } from '../rules/index.js';
import { tagMatcher, type ForeignTable } from '../config/gc.js';

export interface GarbageRule {
  family: Family;
  table: string;
  chain: string;
  handle: number;
  /** The rule as nft text. */
  text: string;
  /** Why it goes. */
  why: string;
}

export interface GarbageChain {
  family: Family;
  table: string;
  name: string;
  /** Its rules as nft text, in order; they go with it. */
  rules: string[];
  /** Why it goes. */
  why: string;
}

/** What one id leaves behind. */
export interface Garbage {
  id: string;
  owner?: string;
  /** Rules in chains that stay (jumps into the id's chains, tagged rules); deleted by handle. */
  rules: GarbageRule[];
  /** Chains reached only from garbage; flushed and deleted. */
  chains: GarbageChain[];
}

export interface ScanResult {
  generation: number;
  /** Collectable now, by id. */
  garbage: Garbage[];
  /** Ids tagged in the kernel, not live, still inside the grace period. */
  pending: { id: string; missingForMs: number }[];
  /** Every tagged id seen in the kernel. */
  seen: Set<string>;
}

/**
 * When each non-live id was first seen missing. Lives in the daemon's
 * memory; the one-shot command can keep it in a state file.
 */
export class GraceTracker {
  readonly firstMissing = new Map<string, number>();

  constructor(entries?: Iterable<[string, number]>) {
    if (entries) for (const [k, v] of entries) this.firstMissing.set(k, v);
  }

  /** Records the ids missing now; forgets ids that came back or are gone from the kernel. */
  update(missing: Iterable<string>, now: number): void {
    const m = new Set(missing);
    for (const id of this.firstMissing.keys()) if (!m.has(id)) this.firstMissing.delete(id);
    for (const id of m) if (!this.firstMissing.has(id)) this.firstMissing.set(id, now);
  }

  missingFor(id: string, now: number): number {
    const t = this.firstMissing.get(id);
    return t === undefined ? 0 : now - t;
  }

  /** A state file: { "firstMissing": { id: epoch-ms } }. A missing file is an empty tracker; a corrupt one an error. */
  static load(file: string): GraceTracker {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new GraceTracker();
      throw new NfkeeperError(`gc state ${file}: cannot read: ${(e as Error).message}`);
    }
    try {
      const v = JSON.parse(text) as { firstMissing?: Record<string, unknown> };
      const entries = Object.entries(v.firstMissing ?? {});
      if (entries.some(([, t]) => typeof t !== 'number' || !Number.isFinite(t))) throw new Error('timestamps must be numbers');
      return new GraceTracker(entries as [string, number][]);
    } catch (e) {
      throw new NfkeeperError(`gc state ${file}: corrupt (${(e as Error).message}); remove it to start the grace periods afresh`);
    }
  }

  /** Writes the state atomically: temp file, fsync, rename, fsync of the directory. */
  save(file: string): void {
    writeFileAtomic(file, JSON.stringify({ firstMissing: Object.fromEntries(this.firstMissing) }) + '\n');
  }
}

export interface ScanOptions {
  foreign: readonly ForeignTable[];
  live: ReadonlySet<string>;
  /**
   * Ids live now besides `live`, asked again at each scan (once its reads are done) and before a
   * refused batch is sent again (once the proof has answered): the daemon's registered owners, which a
   * registration adds while a pass runs.
   */
  liveIds?: () => Iterable<string>;
  graceMs: number;
  tracker: GraceTracker;
  now?: number;
}

interface TableView {
  family: Family;
  table: string;
  /** Every configured tag of this table (one table may be listed once per owner). */
  owners: ForeignTable[];
  chains: Map<string, Chain>;
  rules: Map<string, Rule[]>;
}

function jumpTargets(r: Rule): string[] {
  const out: string[] = [];
  for (const e of r.exprs) {
    if (e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') && e.chain) out.push(e.chain);
  }
  return out;
}

/** Every tag comment a rule carries: nft's userdata comment and iptables-nft's xt comment matches. */
export function ruleTags(r: Rule): string[] {
  const c = commentOf(r.userdata);
  return [...(c !== undefined ? [c] : []), ...xtComments(r)];
}

async function observe(sock: NftConn, owners: ForeignTable[]): Promise<TableView> {
  const { family, table } = owners[0]!;
  const [chains, rules] = await Promise.all([
    sock.listChains({ family, table }),
    sock.listRules({ family, table }),
  ]);
  const view: TableView = { family, table, owners, chains: new Map(), rules: new Map() };
  indexByChain(chains, rules, view);
  return view;
}

/** The rules and chains of one foreign table, as a backend (netlink, iptables-legacy-save) sees them. */
export interface GcTableView<R extends { chain: string }> {
  family: Family;
  table: string;
  /** Every configured tag of this table (one table may be listed once per owner). */
  owners: ForeignTable[];
  /** By name; `base` chains are never collected; `use`, when known, is the kernel's reference count. */
  chains: Map<string, { base: boolean; use?: number }>;
  /** By chain, in order. */
  rules: Map<string, R[]>;
}

/** What a backend's rule offers the garbage finder. */
export interface GcRuleModel<R> {
  /** Every tag comment the rule carries. */
  tags(r: R): string[];
  /** The chains it jumps or gotos to. */
  targets(r: R): string[];
  /** The single address the rule matches as its source (`-s X/32`, `ip saddr X`), if it has one. */
  sourceAddress(r: R): string | undefined;
  /**
   * When the rule is exactly one of the CNI firewall plugin's per-address rules
   * (`-d X/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, `-s X/32 -j ACCEPT`), X.
   */
  firewallAddress(r: R): string | undefined;
}

/** The chain the CNI firewall plugin keeps its untagged per-address rules in (filter table). */
export const CNI_FIREWALL_CHAIN = 'CNI-FORWARD';

/** One id's garbage, in a backend's own rule type. */
export interface FoundGarbage<R> {
  id: string;
  owner?: string;
  /** Garbage rules in chains that stay, with their view and why they go. */
  rules: { view: GcTableView<R & { chain: string }>; rule: R; why: string }[];
  /** Garbage chains with all their rules, in order, and why they go. */
  chains: { view: GcTableView<R & { chain: string }>; name: string; rules: R[]; why: string }[];
}

/**
 * The garbage rules of every safety rule above, for any backend: tags and
 * the grace clocks first (pass 1), then chains reached only from garbage, to
 * a fixpoint (pass 2). Pure: it reads the views and updates the tracker.
 */
export function findGarbage<R extends { chain: string }>(views: readonly GcTableView<R>[], model: GcRuleModel<R>,
  o: Omit<ScanOptions, 'foreign'>): { garbage: FoundGarbage<R>[]; pending: ScanResult['pending']; seen: Set<string> } {
  const now = o.now ?? Date.now();
  // Pass 1: tags. Which ids appear, which are missing from the live set.
  const seen = new Set<string>();
  const tagged = new Map<R, string[]>();
  const tagText = new Map<R, string>();
  const ownerOf = new Map<string, string | undefined>();
  for (const v of views) {
    const matchers = v.owners.map((f) => ({ owner: f.owner, m: tagMatcher(f) }));
    for (const list of v.rules.values()) {
      for (const r of list) {
        const ids: string[] = [];
        for (const c of model.tags(r)) {
          for (const { owner, m } of matchers) {
            const id = m.match(c);
            if (id === undefined) continue;
            ids.push(id);
            if (!tagText.has(r)) tagText.set(r, c);
            if (!ownerOf.has(id)) ownerOf.set(id, owner);
            break;
          }
        }
        if (ids.length === 0) continue;
        tagged.set(r, ids);
        for (const id of ids) seen.add(id);
      }
    }
  }
  const missing = [...seen].filter((id) => !o.live.has(id));
  o.tracker.update(missing, now);
  const expired = new Set(missing.filter((id) => o.graceMs <= 0 || o.tracker.missingFor(id, now) >= o.graceMs));
  const pending = missing.filter((id) => !expired.has(id)).map((id) => ({ id, missingForMs: o.tracker.missingFor(id, now) }));

  const byId = new Map<string, FoundGarbage<R>>();
  const entry = (id: string): FoundGarbage<R> => {
    let g = byId.get(id);
    const owner = ownerOf.get(id);
    if (!g) byId.set(id, g = { id, ...(owner !== undefined ? { owner } : {}), rules: [], chains: [] });
    return g;
  };
  // A rule is garbage on its own when every id it is tagged with has expired.
  const isDeadTagged = (r: R) => {
    const ids = tagged.get(r);
    return ids !== undefined && ids.every((id) => expired.has(id));
  };
  const isLiveTagged = (r: R) => tagged.has(r) && !isDeadTagged(r);
  const tagWhy = (r: R, id: string) => `tag ${JSON.stringify(tagText.get(r))}: ${id} is not live${o.graceMs > 0 ? ` for ${Math.round(o.tracker.missingFor(id, now) / 1000)}s (grace ${Math.round(o.graceMs / 1000)}s)` : ''}`;

  // The CNI firewall plugin's per-address rules carry no tag. One is X's when a dead id's tagged
  // rule (bridge's masquerade jump) has X as its one source address, and no rule of a live or
  // pending id names X (the address may have been handed out again).
  const deadAddr = new Map<string, { id: string; where: string }>();
  const liveAddr = new Set<string>();
  for (const v of views) {
    for (const list of v.rules.values()) {
      for (const r of list) {
        if (!tagged.has(r)) continue;
        const a = model.sourceAddress(r);
        if (a === undefined) continue;
        if (isDeadTagged(r)) {
          if (!deadAddr.has(a)) deadAddr.set(a, { id: tagged.get(r)![0]!, where: `${v.family} ${v.table} ${r.chain}` });
        } else liveAddr.add(a);
      }
    }
  }

  for (const v of views) {
    const garbageRules = new Map<R, { id: string; why: string }>();
    for (const list of v.rules.values()) {
      for (const r of list) if (isDeadTagged(r)) garbageRules.set(r, { id: tagged.get(r)![0]!, why: tagWhy(r, tagged.get(r)![0]!) });
    }
    for (const r of v.rules.get(CNI_FIREWALL_CHAIN) ?? []) {
      if (v.table !== 'filter' || tagged.has(r)) continue;
      const a = model.firewallAddress(r);
      const dead = a === undefined ? undefined : deadAddr.get(a);
      if (!dead || liveAddr.has(a!)) continue;
      garbageRules.set(r, { id: dead.id, why: `CNI firewall rule for ${a}, the source address of ${dead.id}'s tagged rule in ${dead.where}; no live or pending id's rule names it` });
    }

    // References into each chain.
    const refs = new Map<string, R[]>();
    for (const list of v.rules.values()) {
      for (const r of list) for (const t of model.targets(r)) {
        let l = refs.get(t);
        if (!l) refs.set(t, l = []);
        l.push(r);
      }
    }

    // Pass 2: chains reached only from garbage, to a fixpoint.
    const garbageChains = new Map<string, { id: string; why: string }>();
    for (let changed = true; changed;) {
      changed = false;
      for (const [name, chain] of v.chains) {
        if (garbageChains.has(name) || chain.base) continue;
        const from = refs.get(name) ?? [];
        if (from.length === 0 || !from.every((r) => garbageRules.has(r))) continue;
        const own = v.rules.get(name) ?? [];
        if (own.some(isLiveTagged)) continue;
        // The kernel counts the chain's own rules plus every jump/goto to it;
        // a reference we did not see (a verdict map element, ...) keeps it.
        if (chain.use !== undefined && chain.use !== own.length + from.length) continue;
        const id = garbageRules.get(from[0]!)!.id;
        const why = `reached only from garbage (${[...new Set(from.map((r) => r.chain))].join(', ')})`;
        garbageChains.set(name, { id, why });
        for (const r of own) if (!garbageRules.has(r)) garbageRules.set(r, { id, why: `in garbage chain ${name}` });
        changed = true;
      }
    }
    for (const [r, { id, why }] of garbageRules) {
      if (!garbageChains.has(r.chain)) entry(id).rules.push({ view: v, rule: r, why });
    }
    for (const [name, { id, why }] of garbageChains) entry(id).chains.push({ view: v, name, rules: v.rules.get(name) ?? [], why });
  }
  const garbage = [...byId.values()].sort((a, b) => a.id.localeCompare(b.id));
  return { garbage, pending, seen };
}

/** The address in `payload(network, offset) == X` when it compares the whole field (no mask): ip/ip6 saddr or daddr. */
function addressAt(exprs: Rule['exprs'], i: number, family: Family, field: 'saddr' | 'daddr'): string | undefined {
  const p = exprs[i];
  const c = exprs[i + 1];
  const v6 = family === 'ip6';
  const at = v6 ? (field === 'saddr' ? 8 : 24) : (field === 'saddr' ? 12 : 16);
  const len = v6 ? 16 : 4;
  if (p?.kind !== 'payload' || p.base !== 'network' || p.offset !== at || p.len !== len || p.dreg === undefined) return undefined;
  if (c?.kind !== 'cmp' || c.op !== 'eq' || c.sreg !== p.dreg || c.data.length !== len * 2) return undefined;
  const b = Buffer.from(c.data, 'hex');
  // The URL parser writes an IPv6 address in its canonical compressed form, as iptables-save does.
  return v6 ? new URL(`http://[${[...Array(8).keys()].map((k) => b.readUInt16BE(k * 2).toString(16)).join(':')}]`).hostname.slice(1, -1) : [...b].join('.');
}

/** xt_conntrack_mtinfo3 with only --ctstate RELATED,ESTABLISHED (match_flags 1, invert 0, state_mask 6). */
function isCtRelatedEstablished(e: Rule['exprs'][number]): boolean {
  if (e.kind !== 'match' || e.name !== 'conntrack' || e.rev !== 3) return false;
  const b = Buffer.from(e.info, 'hex');
  return b.length >= 152 && b.readUInt16LE(146) === 1 && b.readUInt16LE(148) === 0 && b.readUInt16LE(150) === 6;
}

const NFT_MODEL: GcRuleModel<Rule> = {
  tags: ruleTags,
  targets: jumpTargets,
  sourceAddress: (r) => {
    for (let i = 0; i < r.exprs.length; i++) {
      const a = addressAt(r.exprs, i, r.family, 'saddr');
      if (a !== undefined) return a;
    }
    return undefined;
  },
  firewallAddress: (r) => {
    // What iptables-nft makes of the plugin's two rules; counters do not count.
    const e = r.exprs.filter((x) => x.kind !== 'counter');
    const accept = e.length > 0 && e[e.length - 1]!.kind === 'immediate' && (e[e.length - 1] as { verdict?: string }).verdict === 'accept';
    if (!accept) return undefined;
    if (e.length === 3) return addressAt(e, 0, r.family, 'saddr');
    if (e.length === 4 && isCtRelatedEstablished(e[2]!)) return addressAt(e, 0, r.family, 'daddr');
    return undefined;
  },
};

/** The ids live now: `live`, and those `liveIds` gives at this moment. */
export function liveOf(o: Pick<ScanOptions, 'live' | 'liveIds'>): ReadonlySet<string> {
  return o.liveIds ? new Set([...o.live, ...o.liveIds()]) : o.live;
}

/** Finds what can be collected now. Reads the generation first; the dumps follow it. */
export async function scan(sock: NftConn, o: ScanOptions, generation = sock.generation()): Promise<ScanResult> {
  const byTable = new Map<string, ForeignTable[]>();
  for (const f of o.foreign) {
    const k = `${f.family} ${f.table}`;
    byTable.set(k, [...(byTable.get(k) ?? []), f]);
  }
  const views: TableView[] = [];
  for (const owners of byTable.values()) {
    if (!(await sock.getTable(owners[0]!.family, owners[0]!.table))) continue;
    views.push(await observe(sock, owners));
  }
  // The live ids asked after the reads, not before: a registration queued while they ran is live for
  // this plan (from here to the commit only promise jobs run, so none can come unseen in between).
  const live = liveOf(o);
  const found = findGarbage(views.map((v) => ({
    ...v, chains: new Map([...v.chains].map(([name, c]) => [name, { base: c.hook !== undefined, use: c.use }])),
  })), NFT_MODEL, { ...o, live });
  // Rendering is for people; a rule it cannot show must not block its collection.
  const render = (r: Rule) => {
    try {
      return renderRule(r, r.family);
    } catch (e) {
      return `<unrenderable: ${(e as Error).message}>`;
    }
  };
  const garbage = found.garbage.map((g): Garbage => ({
    id: g.id, ...(g.owner !== undefined ? { owner: g.owner } : {}),
    rules: g.rules.map(({ view, rule: r, why }) => {
      if (r.handle === undefined) throw new NfkeeperError(`rule in ${view.family} ${view.table} ${r.chain} has no handle`);
      return { family: view.family, table: view.table, chain: r.chain, handle: r.handle, text: render(r), why };
    }),
    chains: g.chains.map((c) => ({ family: c.view.family, table: c.view.table, name: c.name, rules: c.rules.map(render), why: c.why })),
  }));
  return { generation, garbage, pending: found.pending, seen: found.seen };
}

/** One batch: delete the garbage rules by handle, flush every garbage chain, then delete them. */
export function planBatch(garbage: readonly Garbage[]): Batch {
  const b = new Batch();
  for (const g of garbage) for (const r of g.rules) b.delete('rule', { family: r.family, table: r.table, chain: r.chain, handle: r.handle });
  const chains = garbage.flatMap((g) => g.chains);
  for (const c of chains) b.flush('chain', { family: c.family, table: c.table, name: c.name });
  for (const c of chains) b.delete('chain', { family: c.family, table: c.table, name: c.name });
  return b;
}

/** Garbage as nft text, grouped by id. */
export function renderGarbage(garbage: readonly Garbage[]): string[] {
  const out: string[] = [];
  for (const g of garbage) {
    out.push(`# id ${g.id}${g.owner ? ` (owner ${g.owner})` : ''}`);
    for (const r of g.rules) out.push(`# ${r.why}`, `delete rule ${r.family} ${r.table} ${r.chain} handle ${r.handle} # ${r.text}`);
    for (const c of g.chains) {
      out.push(`# ${c.why}`, `delete chain ${c.family} ${c.table} ${c.name} {`);
      for (const t of c.rules) out.push(`\t${t}`);
      out.push('}');
    }
  }
  return out;
}

export interface CollectResult extends ScanResult {
  /** Operations committed (0 in a dry run or when nothing was found). */
  ops: number;
  collected: boolean;
  attempts: number;
}

const MAX_ATTEMPTS = 5;

/**
 * Scans and, unless dryRun, collects in one generation-guarded batch. On a
 * concurrent change (GenerationMismatchError) it scans again, up to 5 times;
 * with `proof`, a refusal by a commit that named none of the foreign tables
 * is sent again instead (the guard's resend, GuardOptions.proof).
 */
export async function collect(sock: NftConn, o: ScanOptions & { dryRun?: boolean; proof?: OpenProof }): Promise<CollectResult> {
  const open = o.proof;
  // Every table the scan reads, absent ones too: which rules are garbage depends on all of them (an
  // address a live id's rule names in one keeps the firewall rule of another).
  const tables = [...new Map(o.foreign.map((f) => [`${f.family} ${f.table}`, { family: f.family, name: f.table }])).values()];
  const liveNow = () => liveOf(o);
  let planned: readonly Garbage[] = [];
  const r = await commitGuarded(sock, async (generation) => {
    const s = await scan(sock, o, generation);
    planned = s.garbage;
    if (o.dryRun || s.garbage.length === 0) return { value: s };
    return { value: s, batch: planBatch(s.garbage) };
  }, {
    attempts: MAX_ATTEMPTS,
    ...(open ? {
      proof: async () => {
        const p = await open(sock, tables);
        // An id that became live since the scan (an owner registered meanwhile) is scanned again, never
        // collected as planned: asked once the proof has answered (it may wait for the loop), so that a
        // registration queued during that wait is seen too.
        const becameLive = () => {
          const live = liveNow();
          return planned.some((x) => live.has(x.id));
        };
        return p && { ...p, stillHolds: async (g: number, b: Batch) => {
          const at = await p.stillHolds(g, b);
          return o.liveIds && becameLive() ? undefined : at;
        } };
      },
    } : {}),
  });
  return { ...r.value, ops: r.ops, collected: r.ops > 0, attempts: r.attempts };
}
