/**
 * Reading one owned table from the kernel for a full pass: kernel-filtered dumps of its chains,
 * rules, sets and objects (observeTable), and, at start-up, the rules an earlier keeper wrote,
 * recognised by their digests without decoding them (adoptRules). The result is the held state
 * diffTable (table.ts) compares with the desired one.
 */
import type { Expr, Family, Hex } from '../netlink/expr.js';
import type { Batch } from '../netlink/batch.js';
import type { Chain, ChainDigests, NftSet, ObservedTable, Rule } from '../netlink/objects.js';
import { CHAIN_F, SET_F, bindChains, indexByChain, jumpTargetsOutside } from '../netlink/objects.js';
import type { NftConn } from '../netlink/conn.js';
import { ruleDigester, type RuleDigester } from '../netlink/socket.js';
import { ruleAt, type ChainConfig, type TableConfig } from '../model/desired.js';
import { runNow, type Sliced } from '../base/sliced.js';
import { knownRule, provedAs } from './rule-key.js';
import { objectKey } from './table.js';

/** Up to this many desired chains are fetched one GETCHAIN each (µs, inline); more take one chain list. */
const CHAIN_GETS_UP_TO = 8;
/** Up to this many wanted chains in a table of mostly unwanted ones are dumped chain by chain. */
const CHAIN_DUMPS_UP_TO = 64;

/**
 * Dumps what nfkeeper needs to see of one owned table: one rule dump and one
 * set dump per table (the kernel filters both by table) and the chains. Chain
 * dumps are not filtered by the kernel (they walk every chain of the family,
 * which grows with the node), so a table with a few desired chains fetches
 * those one by one, and the table's use count (chains plus named sets) tells
 * whether there is anything else; only then is the family's chain list read.
 * A table with many desired chains (owners) reads the chain list once instead
 * of a round trip per chain. A table that holds far more chains than desired
 * is read the other way round: its chain list, then only the desired chains'
 * rules.
 */
export async function observeTable(sock: NftConn, family: Family, name: string,
  expectedChains: readonly string[] = [], adopt?: TableConfig, written?: WrittenDigests): Promise<ObservedTable> {
  const out: ObservedTable = { family, name, chains: new Map(), rules: new Map(), sets: new Map() };
  out.table = await sock.getTable(family, name);
  if (!out.table) return out;
  const byDigest = adopt !== undefined && sock.listRuleDigests !== undefined && ruleDigester() !== undefined;
  let chains: Chain[];
  let rules: Rule[];
  let sets: NftSet[];
  // Stateful objects: one dump of the table's (filtered by the kernel), beside the others.
  const objs = sock.listObjs?.({ family, table: name });
  if (out.table.use !== undefined && out.table.use > 2 * expectedChains.length + 64) {
    // Mostly chains we do not want (owners removed while we were down, say): those go whole, with
    // their rules, so read only the wanted chains' rules. Dumping the rules of many dead owner
    // chains costs far more than deleting them.
    [chains, sets] = await Promise.all([sock.listChains({ family, table: name }), sock.listSets({ family, table: name })]);
    const wanted = new Set(expectedChains);
    const present = chains.filter((c) => wanted.has(c.name));
    rules = byDigest ? await adoptRules(sock, adopt!, present.map((c) => c.name), written)
      : present.length <= CHAIN_DUMPS_UP_TO
        ? (await Promise.all(present.map((c) => sock.listRules({ family, table: name, chain: c.name, digests: true })))).flat()
        : await sock.listRules({ family, table: name, digests: true });
  } else if (expectedChains.length > CHAIN_GETS_UP_TO) {
    [chains, rules, sets] = await Promise.all([
      sock.listChains({ family, table: name }),
      byDigest ? adoptRules(sock, adopt!, undefined, written) : sock.listRules({ family, table: name, digests: true }),
      sock.listSets({ family, table: name }),
    ]);
  } else {
    let found: (Chain | undefined)[];
    [found, rules, sets] = await Promise.all([
      Promise.all(expectedChains.map((c) => sock.getChain(family, name, c))),
      byDigest ? adoptRules(sock, adopt!, undefined, written) : sock.listRules({ family, table: name, digests: true }),
      sock.listSets({ family, table: name }),
    ]);
    chains = found.filter((c): c is Chain => c !== undefined);
    const named = sets.filter((x) => !(x.flags & SET_F.ANONYMOUS)).length;
    const objects = objs ? (await objs).length : 0;
    if (out.table.use === undefined || out.table.use !== chains.length + named + objects) {
      chains = await sock.listChains({ family, table: name });  // something we did not ask for is there
    }
  }
  if (objs) out.objs = new Map((await objs).map((o) => [objectKey(o.type, o.name), o]));
  indexByChain(chains, rules, out);
  // Bound chains (`jump { … }`) the reads above left out (chains got one by one, rules dumped by
  // chain): read with the rules that jump to them. Only where a rule jumps to a chain not read.
  const outside = jumpTargetsOutside(out.rules, out.chains);
  if (outside.length > 0) {
    const bound = new Map<string, Rule[]>();
    await Promise.all(outside.map(async (chain) => {
      const c = await sock.getChain(family, name, chain);
      if (!c || c.flags === undefined || !(c.flags & CHAIN_F.BINDING)) return;
      const known = out.rules.get(chain);
      bound.set(chain, known ?? await sock.listRules({ family, table: name, chain, digests: true }));
      out.rules.delete(chain);
    }));
    if (bound.size > 0) bindChains(out.rules, bound);
    for (const list of bound.values()) rules = rules.concat(list);
  }
  const referenced = new Set<string>();
  for (const r of rules) for (const e of r.exprs) if (e.kind === 'lookup' || (e.kind === 'objref' && e.set !== undefined)) referenced.add(e.set!);
  await Promise.all(sets.map(async (x) => {
    // Elements matter for comparing the anonymous sets rules use, and a named set's are desired state.
    const named = !(x.flags & SET_F.ANONYMOUS);
    const elements = named || referenced.has(x.name) ? await sock.listElements({ family, table: name, set: x.name }) : [];
    out.sets.set(x.name, { set: x, elements });
  }));
  return out;
}

/**
 * The rules of `t`'s table (or of `only` its chains) for an observation that adopts what an earlier
 * keeper wrote (the start-up pass): one digest dump, nothing decoded, and each desired chain whose
 * rules' digests (RuleDigest, of the bytes a commit would write for them: addon ruleDigests) are
 * the kernel's, in order, is taken as holding exactly its desired rules (known rules with their
 * handles, as the known state keeps them). Only the other chains are decoded, one dump each or
 * one of the table: those that differ (a rule changed, added or deleted, other userdata), rules
 * without a digest (anonymous sets), and chains not desired. The diff then sees what a full read
 * would have shown it.
 */
async function adoptRules(sock: NftConn, t: TableConfig, only?: readonly string[], written?: WrittenDigests): Promise<Rule[]> {
  const ruleDigests = ruleDigester()!;
  const family = t.family;
  const dumping = only === undefined ? sock.listRuleDigests!({ family, table: t.name })
    : only.length <= CHAIN_DUMPS_UP_TO ? Promise.all(only.map((chain) => sock.listRuleDigests!({ family, table: t.name, chain }))).then((ds) => ds.flat())
      : sock.listRuleDigests!({ family, table: t.name }).then((ds) => {
        const wanted = new Set(only);
        return ds.filter((d) => wanted.has(d.chain));
      });
  // The desired rules' digests are made while the kernel dumps (its walk of a long chain takes
  // seconds, and runs off this thread), for every desired chain the dump may hold.
  const desired = new Map(t.chains.map((c) => [c.name, c]));
  const wantedChains = only === undefined ? t.chains : only.map((c) => desired.get(c)).filter((c) => c !== undefined);
  let want: ReturnType<typeof desiredChainDigests>;
  try {
    want = desiredChainDigests(wantedChains, ruleDigests, written);
  } catch (e) {
    // A desired rule that cannot be made (a compile cache entry's): the dump ended first, so none
    // is left to fail unheard once the caller closes the socket.
    await dumping.catch(() => undefined);
    throw e;
  }
  const dumps = await dumping;
  const out: Rule[] = [];
  const decode: string[] = [];
  // The desired chains the kernel holds as many rules of, their digests the kernel's in order, are
  // taken as they are; the others are decoded, and their desired digests kept to prove what matches.
  const differ = new Map<string, readonly string[]>();
  for (const d of dumps) {
    const c = desired.get(d.chain);
    const w = want.get(d.chain);
    if (c === undefined || w === undefined || !sameList(w, d.digests)) {
      // Rules deleted and nothing else (the desired digests in order, some left out): the rest are
      // known rules as well, and the diff puts back the missing ones without a decoded read.
      const kept = c !== undefined && w !== undefined ? keptOf(w, d.digests) : undefined;
      if (kept) {
        for (let i = 0; i < kept.length; i++) out.push(knownRule(t, c!, ruleAt(c!, kept[i]!)!, d.handles[i]!, d.digests[i]));
        continue;
      }
      if (w !== undefined) differ.set(d.chain, w);
      decode.push(d.chain);
      continue;
    }
    for (let i = 0; i < d.handles.length; i++) out.push(knownRule(t, c, ruleAt(c, i)!, d.handles[i]!, d.digests[i]));
  }
  if (decode.length === 0) return out;
  const decoded = decode.length <= CHAIN_DUMPS_UP_TO
    ? (await Promise.all(decode.map((chain) => sock.listRules({ family, table: t.name, chain, digests: true })))).flat()
    : await sock.listRules({ family, table: t.name, digests: true }).then((rs) => {
      const wanted = new Set(decode);
      return rs.filter((r) => wanted.has(r.chain));
    });
  // A decoded rule whose digest is its desired rule's is that rule (rule-key.ts): the diff
  // computes keys only for the others (anonymous sets, rules that differ). By the decoded rule's
  // own digest, so a change between the two dumps is seen.
  let chain: string | undefined;
  let wantOf: readonly string[] | undefined;
  let i = 0;
  for (const r of decoded) {
    if (r.chain !== chain) {
      chain = r.chain;
      wantOf = differ.get(chain);
      i = 0;
    }
    const w = wantOf?.[i];
    if (w && r.digest === w) provedAs(r, desired.get(chain)!.rules[i]!);
    i++;
  }
  return out.concat(decoded);
}

/**
 * Where `have` is `want` with some left out, the index in `want` of each of `have`'s digests (none
 * of them ''); else undefined. Equal digests are the same rule, so the first fit is as good as any.
 */
function keptOf(want: readonly string[], have: readonly string[]): number[] | undefined {
  if (have.length >= want.length) return undefined;
  const kept = new Array<number>(have.length);
  let j = 0;
  for (let i = 0; i < have.length; i++) {
    const h = have[i]!;
    if (h === '') return undefined;
    while (j < want.length && want[j] !== h) j++;
    if (j === want.length) return undefined;
    kept[i] = j++;
  }
  return kept;
}

/** The same digests in the same order, none of them '' (a rule without a digest is decoded). */
function sameList(want: readonly string[], have: readonly string[]): boolean {
  if (want.length !== have.length) return false;
  for (let i = 0; i < want.length; i++) if (want[i] === '' || want[i] !== have[i]) return false;
  return true;
}

/**
 * Each of `chains`' desired rules' digests, by chain name, made DIGESTS_PER_CALL rules at a time (a
 * few chains in one call, a big chain in slices): the expression index a call builds lives for
 * that call only; what stays is one digest string per rule.
 */
export function desiredChainDigests(chains: readonly Pick<ChainConfig, 'name' | 'rules'>[], ruleDigests: RuleDigester,
  written?: WrittenDigests): Map<string, string[]> {
  return runNow(desiredChainDigestsSteps(chains, ruleDigests, written));
}

/** desiredChainDigests a call of ruleDigests at a time (src/base/sliced.ts). */
export function* desiredChainDigestsSteps(chains: readonly Pick<ChainConfig, 'name' | 'rules'>[], ruleDigests: RuleDigester,
  written?: WrittenDigests): Sliced<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  let group: { all: string[]; from: number; rules: ChainConfig['rules'] }[] = [];
  let size = 0;
  const flush = () => {
    const mine = desiredDigests(group.map((g) => g.rules), ruleDigests, written);
    for (const [k, { all, from }] of group.entries()) {
      const got = mine[k]!;
      for (let i = 0; i < got.length; i++) all[from + i] = got[i]!;
    }
    group = [];
    size = 0;
  };
  for (const c of chains) {
    const all = new Array<string>(c.rules.length);
    out.set(c.name, all);
    for (let from = 0; from < c.rules.length; from += DIGESTS_PER_CALL) {
      const slice = from === 0 && c.rules.length <= DIGESTS_PER_CALL ? c.rules : c.rules.slice(from, from + DIGESTS_PER_CALL);
      if (size + slice.length > DIGESTS_PER_CALL) {
        flush();
        yield;
      }
      group.push({ all, from, rules: slice });
      size += slice.length;
    }
  }
  if (group.length > 0) flush();
  return out;
}

/** Desired rules digested per ruleDigests call by desiredChainDigests. */
const DIGESTS_PER_CALL = 4096;

/**
 * The digests a commit computed from the bytes it sent for the rules it wrote (CommitOptions.digests),
 * by the expression list it was given: an observation after that commit, in the same pass, takes a
 * desired rule's digest from there when the rule's expressions are that very list (and its userdata
 * the same) instead of encoding the rule again.
 */
export type WrittenDigests = ReadonlyMap<readonly Expr[], { userdata?: Hex; digest: string }>;

/** The digests of `batch`'s rules as its commit gave them (`digests`, per op index). */
export function writtenDigests(batch: Batch, digests: readonly string[]): WrittenDigests {
  const out = new Map<readonly Expr[], { userdata?: Hex; digest: string }>();
  batch.ops.forEach((op, i) => {
    // '' too: a rule without a digest (an anonymous set) has none however often it is encoded.
    if (op.object === 'rule' && op.exprs && digests[i] !== undefined) out.set(op.exprs, { userdata: op.userdata, digest: digests[i]! });
  });
  return out;
}

/**
 * The digests of desired rules (per chain) as a dump of them would give them: those a commit of
 * this pass wrote from `written`, the others encoded here, each distinct expression object once
 * (the keeper's desired rules share identical expressions, src/model/compact.ts: at 100,000 rules
 * of five expressions, about 100,000 to encode instead of 500,000).
 */
function desiredDigests(chains: readonly ChainConfig['rules'][], ruleDigests: RuleDigester, written?: WrittenDigests): string[][] {
  let total = 0;
  for (const rules of chains) total += rules.length;
  const all = new Array<string>(total);
  // The rules to encode here, and where their digests go in `all`.
  const encode: ChainConfig['rules'][number][] = [];
  const slots: number[] = [];
  let p = 0;
  for (const rules of chains) {
    for (const r of rules) {
      const w = written?.get(r.compiled.exprs);
      if (w !== undefined && w.userdata === r.compiled.userdata) all[p] = w.digest;
      else {
        encode.push(r);
        slots.push(p);
      }
      p++;
    }
  }
  if (encode.length > 0) {
    const index = new Map<Expr, number>();
    const exprs: Expr[] = [];
    let size = 0;
    for (const r of encode) size += 1 + r.compiled.exprs.length;
    const flat = new Uint32Array(size);
    const userdata: (string | undefined)[] = [];
    let at = 0;
    for (const r of encode) {
      const list = r.compiled.exprs;
      flat[at++] = list.length;
      for (const e of list) {
        let i = index.get(e);
        if (i === undefined) index.set(e, i = exprs.push(e) - 1);
        flat[at++] = i;
      }
      userdata.push(r.compiled.userdata);
    }
    const got = ruleDigests(exprs, flat, userdata);
    for (let k = 0; k < slots.length; k++) all[slots[k]!] = got[k]!;
  }
  let from = 0;
  return chains.map((rules) => all.slice(from, from += rules.length));
}
