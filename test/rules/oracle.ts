/**
 * The oracle harness: the same rules go into one namespace through the nft
 * CLI and into another through compileRule + one nfkeeper batch; then both
 * are dumped with our socket and listed with `nft list table`.
 */
import { Batch, open, type Expr, type Family, type NftSet, type Rule, type SetElement } from '../../src/index.js';
import {
  compileRule, interfaceTable, queueRule, setContentKey, type CompiledRule, type SetResolver,
} from '../../src/rules/index.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { SET_F } from '../../src/netlink/objects.js';

export const TABLE = 'nfk';
/** Base chains by the corpus' chain labels' full names (short names like fwd are nft keywords). */
export const CHAIN_NAME: Record<string, string> = {
  pre: 'nat_pre', out: 'nat_out', in: 'nat_in', post: 'nat_post', fwd: 'filter_fwd',
};
export const BASE_CHAINS: Record<string, { type: 'nat' | 'filter'; hook: 'prerouting' | 'output' | 'input' | 'postrouting' | 'forward'; priority: number }> = {
  nat_pre: { type: 'nat', hook: 'prerouting', priority: -100 },
  nat_out: { type: 'nat', hook: 'output', priority: -100 },
  nat_in: { type: 'nat', hook: 'input', priority: 100 },
  nat_post: { type: 'nat', hook: 'postrouting', priority: 100 },
  filter_fwd: { type: 'filter', hook: 'forward', priority: 0 },
};

export interface OracleInput { text: string; chain: string }

export interface Side {
  rule: Rule;
  sets: SetResolver;
  /** The sets this rule's lookups use, with their elements. */
  used: { set: NftSet; elements: SetElement[] }[];
  /** The line `nft list table` printed for the rule (counter values dropped). */
  line: string;
}

export interface OracleResult {
  input: OracleInput;
  compiled: CompiledRule;
  nft: Side;
  nfk: Side;
}

export const INTERFACES = interfaceTable({ lo: 1 });

function jumpTargets(rules: CompiledRule[]): string[] {
  const out = new Set<string>();
  for (const r of rules) for (const e of r.exprs) if (e.kind === 'immediate' && e.chain) out.add(e.chain);
  // verdict maps jump from their elements
  for (const r of rules) for (const s of r.sets) for (const e of s.elements ?? []) if (e.chain) out.add(e.chain);
  return [...out].sort();
}

async function dump(ns: Netns, family: Family): Promise<{ byChain: Map<string, Rule[]>; sets: Map<string, { set: NftSet; elements: SetElement[] }> }> {
  const sock = open({ netns: ns.path });
  try {
    const rules = await sock.listRules({ family, table: TABLE });
    const byChain = new Map<string, Rule[]>();
    for (const r of rules) {
      if (!byChain.has(r.chain)) byChain.set(r.chain, []);
      byChain.get(r.chain)!.push(r);
    }
    const sets = new Map<string, { set: NftSet; elements: SetElement[] }>();
    for (const s of await sock.listSets({ family, table: TABLE })) {
      sets.set(s.name, { set: s, elements: await sock.listElements({ family, table: TABLE, set: s.name }) });
    }
    return { byChain, sets };
  } finally {
    sock.close();
  }
}

/** Rule lines of `nft list table`, by chain, with counter values removed. */
export function listedLines(ns: Netns, family: Family): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let chain: string | undefined;
  for (const raw of ns.exec('nft', ['list', 'table', family, TABLE]).split('\n')) {
    const line = raw.trim();
    const m = /^chain (\S+) \{$/.exec(line);
    if (m) { chain = m[1]!; out.set(chain, []); continue; }
    if (!chain || line === '' || line === '}' || /^type \S+ hook /.test(line)) continue;
    out.get(chain)!.push(line.replace(/counter packets \d+ bytes \d+/g, 'counter'));
  }
  return out;
}

function side(rule: Rule | undefined, sets: Map<string, { set: NftSet; elements: SetElement[] }>, line: string | undefined): Side {
  if (!rule) throw new Error('rule missing from the dump');
  const used = rule.exprs.filter((e): e is Extract<Expr, { kind: 'lookup' }> => e.kind === 'lookup')
    .map((l) => sets.get(l.set)).filter((x): x is { set: NftSet; elements: SetElement[] } => x !== undefined);
  return { rule, sets: (name) => sets.get(name), used, line: line ?? '<missing>' };
}

/**
 * Adds `inputs` to a fresh `family` table in two namespaces (nft CLI; nfkeeper batch) and
 * returns, per input in order, what each side holds. Both namespaces are removed on return.
 */
export interface OracleOptions {
  /**
   * nft commands run right after `add table` in both namespaces, before the chains (named sets and
   * maps, as `add set|map FAMILY nfk NAME { … }`). The rules are compiled against the sets as the
   * kernel lists them from nft's namespace (the CompileContext.sets contract), and nfkeeper's
   * namespace gets those same NftSet objects in its batch.
   */
  setup?: string[];
}

export async function runOracle(family: Family, inputs: OracleInput[], opts: OracleOptions = {}): Promise<OracleResult[]> {
  const a = createNetns(`nft-${family}`);
  let b: Netns | undefined;
  try {
    // named sets first: nft defines them, the compiler is given them as the kernel reports them
    let named: NftSet[] = [];
    if (opts.setup?.length) {
      a.nft([`add table ${family} ${TABLE}`, ...opts.setup].join('\n') + '\n');
      const sock = open({ netns: a.path });
      try {
        named = await sock.listSets({ family, table: TABLE });
      } finally {
        sock.close();
      }
    }
    const sets = new Map(named.map((s) => [s.name, s]));
    let setId = 1;
    const compiled = inputs.map((i) => {
      const c = compileRule(i.text, {
        family, table: TABLE, chain: i.chain, setIdBase: setId, interfaces: INTERFACES, ...(named.length ? { sets } : {}),
      });
      setId += c.sets.length;
      return c;
    });
    const targets = jumpTargets(compiled);
    b = createNetns(`nfk-${family}`);
    // namespace A: the nft CLI
    const script = [`add table ${family} ${TABLE}`];
    for (const [name, c] of Object.entries(BASE_CHAINS)) {
      script.push(`add chain ${family} ${TABLE} ${name} { type ${c.type} hook ${c.hook} priority ${c.priority}; }`);
    }
    for (const t of targets) script.push(`add chain ${family} ${TABLE} ${t}`);
    for (const i of inputs) script.push(`add rule ${family} ${TABLE} ${i.chain} ${i.text}`);
    a.nft(script.join('\n') + '\n');
    // namespace B: nfkeeper, one batch
    const batch = new Batch();
    batch.add('table', { family, name: TABLE });
    for (const s of named) {
      const { handle: _h, ...rest } = s;
      batch.add('set', { ...rest, id: setId++ });
    }
    for (const [name, c] of Object.entries(BASE_CHAINS)) {
      batch.add('chain', { family, table: TABLE, name, type: c.type, hook: c.hook, priority: c.priority });
    }
    for (const t of targets) batch.add('chain', { family, table: TABLE, name: t });
    inputs.forEach((i, k) => queueRule(batch, compiled[k]!, { family, table: TABLE, chain: i.chain }));
    const sock = open({ netns: b.path });
    try {
      await sock.commit(batch);
    } finally {
      sock.close();
    }
    const [da, db] = [await dump(a, family), await dump(b, family)];
    const [la, lb] = [listedLines(a, family), listedLines(b, family)];
    const seen = new Map<string, number>();
    return inputs.map((input, k) => {
      const n = seen.get(input.chain) ?? 0;
      seen.set(input.chain, n + 1);
      return {
        input, compiled: compiled[k]!,
        nft: side(da.byChain.get(input.chain)?.[n], da.sets, la.get(input.chain)?.[n]),
        nfk: side(db.byChain.get(input.chain)?.[n], db.sets, lb.get(input.chain)?.[n]),
      };
    });
  } finally {
    a.remove();
    b?.remove();
  }
}

/** Expressions with counter values dropped and each lookup's set replaced by its contents. */
export function comparable(exprs: readonly Expr[], sets: SetResolver): unknown[] {
  return exprs.map((e) => {
    if (e.kind === 'counter') return { kind: 'counter' };
    // the kernel dumps a dynset's timeout and flags as 0 when none were sent, its statements' counts as 0;
    // a meter's set (the rule's own) by its shape
    if (e.kind === 'dynset') {
      const { setId: _id, exprs, ...rest } = e;
      const s = sets(e.set, e.setId);
      return {
        ...rest, timeout: e.timeout || undefined, flags: e.flags || undefined,
        exprs: exprs?.map((x) => (x.kind === 'counter' ? { kind: 'counter' } : x)),
        meter: s && s.set.flags & SET_F.ANONYMOUS ? setShape(s) : undefined,
      };
    }
    if (e.kind === 'lookup') {
      const s = sets(e.set, e.setId);
      const { setId: _id, ...rest } = e;
      return { ...rest, set: s ? setContentKey(s.set, s.elements) : `unresolved ${e.set}` };
    }
    return e;
  });
}

/** A set as the kernel holds it, without its name and handle; elements sorted. */
export function setShape(s: { set: NftSet; elements: SetElement[] }): unknown {
  const { flags, keyType, keyLen, size, userdata, fieldLen } = s.set;
  const elements = [...s.elements].map((e) => ({ key: e.key, keyEnd: e.keyEnd, flags: e.flags ?? 0, userdata: e.userdata }))
    .sort((x, y) => (x.key! < y.key! ? -1 : x.key! > y.key! ? 1 : 0));
  return { flags, keyType, keyLen, size, userdata, fieldLen, elements };
}
