/**
 * Where a compiled rule may go: jumps to chains that exist (plain, and in
 * anonymous verdict maps), and every expression in the hooks and chain types
 * the kernel's validate callback takes it in. Checked for the config's tables
 * and for owners' chains alike.
 */
import type { Expr, Family } from '../netlink/expr.js';
import { FIB_F } from '../netlink/expr.js';
import type { ChainType, Hook, SetElement } from '../netlink/objects.js';
import type { CompiledRule } from './compile.js';

/**
 * Every place a rule jumps or goes to a chain: its immediate verdicts and the elements of its
 * anonymous verdict maps. `named` is called for each lookup of a named verdict map, whose
 * elements are the table's, not the rule's. The one walk of a rule's verdict positions: the
 * checks here, the jump graph and owners' confinement and renaming all go through it.
 */
export function forEachJump(rule: CompiledRule, jump: (verdict: 'jump' | 'goto', chain: string, levels: number) => void,
  named?: (set: string) => void, levels = 1): void {
  // (indexed: an iterator per rule, in every rule of a config)
  for (let i = 0; i < rule.exprs.length; i++) {
    const e = rule.exprs[i]!;
    if (e.kind === 'immediate') {
      if ((e.verdict === 'jump' || e.verdict === 'goto') && e.chain !== undefined) jump(e.verdict, e.chain, levels);
    } else if (e.kind === 'lookup' && e.dreg !== undefined) {
      const anon = rule.sets.length > 0 ? rule.sets.find((x) => x.name === e.set && x.id === e.setId) : undefined;
      if (anon) {
        for (const el of anon.elements ?? []) {
          if ((el.verdict === 'jump' || el.verdict === 'goto') && el.chain !== undefined) jump(el.verdict, el.chain, levels);
        }
      } else named?.(e.set);
    }
  }
  // a bound chain's rules (`jump { … }`) jump from where the rule is, one level of the jump stack deeper
  if (rule.bound) for (const b of rule.bound) for (const r of b.rules) forEachJump(r, jump, named, levels + 1);
}

/** The rule's expressions and its bound chains' rules' (`jump { … }`, which run where the rule does). */
function exprsOf(rule: CompiledRule): readonly Expr[] {
  if (!rule.bound) return rule.exprs;
  return [...rule.exprs, ...rule.bound.flatMap((b) => b.rules.flatMap((r) => r.exprs))];
}

/**
 * `rule` with each jump or goto target renamed by `rename` (plain verdicts and anonymous verdict
 * maps alike); the same object when nothing changes.
 */
export function renameJumps(rule: CompiledRule, rename: (chain: string) => string | undefined): CompiledRule {
  let exprs: Expr[] | undefined;
  rule.exprs.forEach((e, i) => {
    if (e.kind !== 'immediate' || e.chain === undefined) return;
    const to = rename(e.chain);
    if (to === undefined) return;
    (exprs ??= rule.exprs.slice())[i] = { ...e, chain: to };
  });
  let sets: CompiledRule['sets'] | undefined;
  rule.sets.forEach((x, i) => {
    let elements: SetElement[] | undefined;
    (x.elements ?? []).forEach((el, k) => {
      if (el.chain === undefined) return;
      const to = rename(el.chain);
      if (to === undefined) return;
      (elements ??= x.elements!.slice())[k] = { ...el, chain: to };
    });
    if (elements) (sets ??= rule.sets.slice())[i] = { ...x, elements };
  });
  return exprs || sets ? { ...rule, exprs: exprs ?? rule.exprs, sets: sets ?? rule.sets } : rule;
}

/** What the kernel would refuse at commit time, said before anything is sent. */
export function checkRulePlacement(rule: CompiledRule, hook: Hook | undefined, type: ChainType | undefined,
  chains: ReadonlySet<string>, scope = 'this table', family?: Family): string | undefined {
  let problem: string | undefined;
  forEachJump(rule, (verdict, chain) => {
    if (problem === undefined && !chains.has(chain)) problem = undefinedChain(verdict, chain, scope);
  });
  if (problem !== undefined) return problem;
  // regular chains: checked through the jumps from the base chains (checkChainGraph), as the kernel does
  return hook === undefined ? undefined : hookPlacement(rule, hook, type, family);
}

function undefinedChain(verdict: string, chain: string, scope: string): string {
  return `${verdict} to chain '${chain}', which ${scope} does not define`;
}

const ALL: readonly Hook[] = ['prerouting', 'input', 'forward', 'output', 'postrouting'];
const hooks = (...h: Hook[]): ReadonlySet<Hook> => new Set(h);
const BEFORE_ROUTING = hooks('prerouting', 'input', 'forward');
const AFTER_ROUTING = hooks('forward', 'output', 'postrouting');

/** An expression the kernel takes only in some hooks (and chain types): its validate callback. */
export interface Restriction {
  /** The statement or match as nft writes it. */
  what: string;
  hooks: ReadonlySet<Hook>;
  /** The chain type it needs (nft_chain_validate_chaintype). */
  type?: ChainType;
  /** The table families it is taken in, when not every one. */
  families?: ReadonlySet<Family>;
  /** Said instead of listing `hooks` (kept as the NAT messages were). */
  says?: string;
}

const R = {
  reject: { what: 'reject', hooks: hooks('prerouting', 'input', 'forward', 'output') },
  xfrmIn: { what: 'ipsec in', hooks: BEFORE_ROUTING },
  xfrmOut: { what: 'ipsec out', hooks: AFTER_ROUTING },
  secpath: { what: 'meta ipsec', hooks: BEFORE_ROUTING },
  sdif: { what: 'meta sdif and sdifname', hooks: hooks('input', 'forward') },
  pkttype: { what: 'meta pkttype set', hooks: hooks('prerouting') },
  osf: { what: 'osf', hooks: BEFORE_ROUTING, families: new Set<Family>(['ip', 'inet']) },
  synproxy: { what: 'synproxy', hooks: hooks('input', 'forward') },
  socket: { what: 'socket', hooks: hooks('prerouting', 'input', 'output') },
  tproxy: { what: 'tproxy', hooks: hooks('prerouting') },
  fibOif: { what: 'fib … oif and oifname', hooks: BEFORE_ROUTING },
  fibIifType: { what: 'fib … iif type', hooks: BEFORE_ROUTING },
  fibOifType: { what: 'fib … oif type', hooks: AFTER_ROUTING },
  rtMtu: { what: 'rt mtu', hooks: AFTER_ROUTING },
  dnat: { what: 'dnat and redirect', hooks: hooks('prerouting', 'output'), type: 'nat', says: 'dnat and redirect are only valid in prerouting and output chains' },
  snat: { what: 'snat', hooks: hooks('postrouting', 'input'), type: 'nat', says: 'snat is only valid in postrouting and input chains' },
  masq: { what: 'masquerade', hooks: hooks('postrouting'), type: 'nat', says: 'masquerade is only valid in postrouting chains' },
} satisfies Record<string, Restriction>;

/**
 * The kernel's hook and chain-type restriction of an expression (the validate callbacks of
 * nft_reject, nft_xfrm, nft_meta, nft_osf, nft_synproxy, nft_socket, nft_tproxy, nft_fib, nft_rt,
 * nft_nat, nft_masq and nft_redir), or undefined when it runs anywhere. The same in the ip, ip6
 * and inet families for the hooks a config can name (inet adds ingress for reject and pkttype),
 * but for osf, which an ip6 table refuses in any hook.
 */
export function restrictionOf(e: Expr): Restriction | undefined {
  switch (e.kind) {
    case 'reject': return R.reject;
    case 'xfrm': return e.dir === 0 ? R.xfrmIn : R.xfrmOut;
    case 'meta':
      if (e.dreg !== undefined) return e.key === 'ipsec' ? R.secpath : e.key === 'sdif' || e.key === 'sdifname' ? R.sdif : undefined;
      return e.key === 'pkttype' ? R.pkttype : undefined;
    case 'osf': return R.osf;
    case 'synproxy': return R.synproxy;
    case 'socket': return R.socket;
    case 'tproxy': return R.tproxy;
    case 'fib':
      if (e.result !== 'type') return R.fibOif;
      return e.flags & FIB_F.IIF ? R.fibIifType : e.flags & FIB_F.OIF ? R.fibOifType : undefined;
    case 'rt': return e.key === 'mtu' ? R.rtMtu : undefined;
    case 'nat': return e.type === 'dnat' ? R.dnat : R.snat;
    case 'redir': return R.dnat;
    case 'masq': return R.masq;
    default: return undefined;
  }
}

function hookList(h: ReadonlySet<Hook>): string {
  const l = ALL.filter((x) => h.has(x));
  return l.length === 1 ? l[0]! : `${l.slice(0, -1).join(', ')} and ${l[l.length - 1]}`;
}

/** Why the kernel refuses `rule` in a `type` chain on `hook`, or undefined when it takes it. */
function hookPlacement(rule: CompiledRule, hook: Hook, type: ChainType | undefined, family: Family | undefined): string | undefined {
  for (const e of exprsOf(rule)) {
    const r = restrictionOf(e);
    if (r === undefined) continue;
    if (r.families && family !== undefined && !r.families.has(family)) return `${r.what} is not valid in an ${family} table (only in ${[...r.families].join(' and ')})`;
    if (r.type !== undefined && type !== r.type) return r.type === 'nat' ? 'NAT statements need a chain of type nat' : `${r.what} needs a chain of type ${r.type}`;
    if (!r.hooks.has(hook)) return r.says ?? `${r.what} is only valid in ${hookList(r.hooks)} chains`;
  }
  return undefined;
}

/** NFT_JUMP_STACK_SIZE: the kernel refuses (EMLINK) a chain reached at this many jumps from a base chain. */
export const NFT_JUMP_STACK_SIZE = 16;

export interface GraphProblem {
  /** Index of the chain and of its rule the problem is said at. */
  chain: number;
  rule: number;
  reason: string;
}

/**
 * A table's jump graph, for what the kernel's commit-time validation (nf_tables_validate)
 * refuses, walked from every base chain through jumps, gotos and verdict maps: a loop (EMLINK
 * once it passes the stack), a chain 16 jumps deep (EMLINK), a jump to a base chain
 * (EOPNOTSUPP), and a statement the kernel restricts (restrictionOf: NAT, reject, socket, …) in
 * a regular chain that a base chain of the wrong type or hook reaches (EOPNOTSUPP). Chains no base chain reaches are not walked, as the kernel does not
 * walk them.
 *
 * `rule()` is the one pass over a rule's expressions: it says what checkRulePlacement says and
 * appends the rule's edges to flat arrays of chain indices (an anonymous verdict map's gotos
 * resolved there and then); `check()` turns them into one adjacency array and walks numbers.
 * Kube-proxy's 10,000-service file (31,000 chains, 64,000 rules, 34,000 jumps, 33,000 map
 * elements) is the case this is shaped for: an array per chain (62,000 small arrays, most of
 * them promoted by the young-generation collector) cost more than all the walking.
 */
export class JumpGraph {
  private readonly index = new Map<string, number>();
  /** Edges as they come: from chain, to chain, the rule that jumps. */
  private readonly edgeFrom: number[] = [];
  private readonly edgeTo: number[] = [];
  private readonly edgeRule: number[] = [];
  /** Levels of the jump stack an edge takes: 1, or 2 from a bound chain's rule (`jump { … }`). */
  private readonly edgeLevels: number[] = [];
  /** Chains with a chain binding: entering it is a level of the stack, jumps or not. */
  private readonly binds = new Set<number>();
  /** Named maps rules take verdicts from: chain, rule, map name. */
  private readonly mapFrom: number[] = [];
  private readonly mapRule: number[] = [];
  private readonly mapName: string[] = [];
  /** Rules with an expression the kernel restricts (restrictionOf), a chain's one after another: chain, rule index, rule. */
  private readonly limitedChain: number[] = [];
  private readonly limitedIndex: number[] = [];
  private readonly limitedRule: CompiledRule[] = [];
  /** Which chain last added each target: dedupes a chain's edges while its rules come in. */
  private readonly stamp: Int32Array;

  /** `chains`: the table's chain names in the order `rule()` and `check()` index them. */
  constructor(chains: readonly string[], private readonly scope = 'this table', private readonly family?: Family) {
    chains.forEach((name, i) => this.index.set(name, i));
    this.stamp = new Int32Array(chains.length).fill(-1);
  }

  /**
   * Records rule `ruleIndex` of chain `chain` (a chain's rules one after another) and says what
   * the kernel would refuse about it alone, as checkRulePlacement does.
   */
  rule(chain: number, ruleIndex: number, rule: CompiledRule, hook: Hook | undefined, type: ChainType | undefined): string | undefined {
    this.at = chain;
    this.atRule = ruleIndex;
    this.problem = undefined;
    if (rule.bound) this.binds.add(chain);
    forEachJump(rule, this.onJump, this.onNamedMap);
    if (this.problem !== undefined) return this.problem;
    if (!exprsOf(rule).some((e) => restrictionOf(e) !== undefined)) return undefined;
    this.limitedChain.push(chain);
    this.limitedIndex.push(ruleIndex);
    this.limitedRule.push(rule);
    // regular chains: checked through the jumps from the base chains (check()), as the kernel does
    return hook === undefined ? undefined : hookPlacement(rule, hook, type, this.family);
  }

  // The rule rule() walks, and forEachJump's callbacks for it, made once (not two closures a rule).
  private at = 0;
  private atRule = 0;
  private problem: string | undefined;
  private readonly onJump = (verdict: 'jump' | 'goto', to: string, levels: number): void => {
    if (this.problem !== undefined) return;
    const t = this.index.get(to);
    if (t === undefined) this.problem = undefinedChain(verdict, to, this.scope);
    else this.edge(this.at, t, this.atRule, levels);
  };
  private readonly onNamedMap = (set: string): void => {
    this.mapFrom.push(this.at);
    this.mapRule.push(this.atRule);
    this.mapName.push(set);
  };

  private edge(chain: number, t: number, ruleIndex: number, levels = 1): void {
    // (a deeper edge from a binding is kept beside a plain one to the same chain: check() keeps the deeper)
    if (this.stamp[t] === chain && levels === 1) return;
    this.stamp[t] = chain;
    this.edgeFrom.push(chain);
    this.edgeTo.push(t);
    this.edgeRule.push(ruleIndex);
    this.edgeLevels.push(levels);
  }

  /** `chains`: the table's chains, indexed as in the constructor; `maps`: its named maps' elements. */
  check(chains: readonly { name: string; base?: { type: ChainType; hook: Hook } }[],
    maps: ReadonlyMap<string, readonly SetElement[]>): GraphProblem[] {
    const n = chains.length;
    // A named verdict map's gotos (kube-proxy's service map: thousands) are edges of each chain
    // that looks it up; a map's elements are resolved once.
    const from = this.edgeFrom.slice();
    const to = this.edgeTo.slice();
    const via = this.edgeRule.slice();
    const lv = this.edgeLevels.slice();
    const resolved = new Map<string, number[]>();
    for (let k = 0; k < this.mapName.length; k++) {
      const name = this.mapName[k]!;
      let ts = resolved.get(name);
      if (!ts) {
        ts = [];
        for (const el of maps.get(name) ?? []) {
          const t = elementTarget(el, this.index);
          if (t !== undefined) ts.push(t);
        }
        resolved.set(name, ts);
      }
      for (const t of ts) {
        from.push(this.mapFrom[k]!);
        to.push(t);
        via.push(this.mapRule[k]!);
        lv.push(1);
      }
    }
    // One adjacency array (CSR): chain c's targets are target[first[c] .. first[c + 1]), each once.
    const first = new Int32Array(n + 1);
    for (const f of from) first[f + 1]!++;
    for (let c = 0; c < n; c++) first[c + 1]! += first[c]!;
    const fill = first.slice(0, n);
    const target = new Int32Array(to.length);
    const targetRule = new Int32Array(to.length);
    const targetLevels = new Uint8Array(to.length);
    for (let k = 0; k < to.length; k++) {
      const at = fill[from[k]!]!++;
      target[at] = to[k]!;
      targetRule[at] = via[k]!;
      targetLevels[at] = lv[k]!;
    }
    const stamp = new Int32Array(n).fill(-1);
    const kept = new Int32Array(n);
    const end = new Int32Array(n);
    for (let c = 0; c < n; c++) {
      let w = first[c]!;
      for (let k = first[c]!; k < first[c + 1]!; k++) {
        if (stamp[target[k]!] === c) {
          if (targetLevels[k]! > targetLevels[kept[target[k]!]!]!) targetLevels[kept[target[k]!]!] = targetLevels[k]!;
          continue;
        }
        stamp[target[k]!] = c;
        kept[target[k]!] = w;
        target[w] = target[k]!;
        targetLevels[w] = targetLevels[k]!;
        targetRule[w++] = targetRule[k]!;
      }
      end[c] = w;
    }
    const ruleTo = (c: number, t: number): number => {
      for (let k = first[c]!; k < end[c]!; k++) if (target[k] === t) return targetRule[k]!;
      return 0;
    };
    const problems: GraphProblem[] = [];
    for (let c = 0; c < n; c++) {
      // nft_verdict_init: a jump or goto to a base chain is refused, reached or not.
      for (let k = first[c]!; k < end[c]!; k++) {
        const t = target[k]!;
        if (chains[t]!.base) problems.push({ chain: c, rule: targetRule[k]!, reason: `jumps to chain ${chains[t]!.name}, a base chain; the kernel refuses a jump or goto to a base chain` });
      }
    }

    // Longest jump path below each chain, with loop detection (0 unseen, 1 on the path, 2 done).
    // Iterative, so a long (refused) line of jumps cannot overflow the JavaScript stack.
    const state = new Uint8Array(n);
    const height = new Int32Array(n);
    const loops = new Set<number>();
    const path: number[] = [];
    const next: number[] = [];
    const visit = (root: number): void => {
      path.push(root);
      next.push(first[root]!);
      state[root] = 1;
      while (path.length > 0) {
        const c = path[path.length - 1]!;
        const k = next[next.length - 1]!;
        if (k === end[c]) {
          let h = this.binds.has(c) ? 1 : 0;
          for (let j = first[c]!; j < end[c]!; j++) if (height[target[j]!]! + targetLevels[j]! > h) h = height[target[j]!]! + targetLevels[j]!;
          height[c] = h;
          state[c] = 2;
          path.pop();
          next.pop();
          continue;
        }
        next[next.length - 1] = k + 1;
        const t = target[k]!;
        if (state[t] === 1) {
          if (!loops.has(t)) {
            loops.add(t);
            const cycle = path.slice(path.indexOf(t)).map((i) => chains[i]!.name);
            problems.push({ chain: c, rule: targetRule[k]!, reason: `jumps in a loop (${[...cycle, chains[t]!.name].join(' → ')}); the kernel refuses a loop a base chain reaches` });
          }
        } else if (state[t] === 0) {
          state[t] = 1;
          path.push(t);
          next.push(first[t]!);
        }
      }
    };

    // Which (type, hook) of base chains reach each chain: a bit per pair.
    const reachedBy = new Uint16Array(n);
    const bases: { type: ChainType; hook: Hook; name: string }[] = [];
    const stack: number[] = [];
    for (let bi = 0; bi < n; bi++) {
      const base = chains[bi]!.base;
      if (!base) continue;
      if (state[bi] === 0) visit(bi);
      if (height[bi]! >= NFT_JUMP_STACK_SIZE) {
        let deepest = target[first[bi]!]!;
        for (let k = first[bi]!; k < end[bi]!; k++) if (height[target[k]!]! > height[deepest]!) deepest = target[k]!;
        problems.push({ chain: bi, rule: ruleTo(bi, deepest), reason: `its jumps nest ${height[bi]} chains deep; the kernel allows at most ${NFT_JUMP_STACK_SIZE - 1} below a base chain` });
      }
      let bit = bases.findIndex((b) => b.type === base.type && b.hook === base.hook);
      if (bit < 0) bit = bases.push({ type: base.type, hook: base.hook, name: chains[bi]!.name }) - 1;
      const mask = 1 << bit;
      stack.push(bi);
      while (stack.length > 0) {
        const c = stack.pop()!;
        for (let k = first[c]!; k < end[c]!; k++) {
          const t = target[k]!;
          if (reachedBy[t]! & mask) continue;
          reachedBy[t]! |= mask;
          stack.push(t);
        }
      }
    }
    // A regular chain's restricted rules, against each (type, hook) that reaches it: the first that fails.
    for (let k = 0; k < this.limitedChain.length;) {
      const ci = this.limitedChain[k]!;
      let last = k;
      while (last < this.limitedChain.length && this.limitedChain[last] === ci) last++;
      if (!chains[ci]!.base && reachedBy[ci]) {
        find: for (let bit = 0; bit < bases.length; bit++) {
          if (!(reachedBy[ci]! & (1 << bit))) continue;
          const { type, hook, name } = bases[bit]!;
          for (let j = k; j < last; j++) {
            const reason = hookPlacement(this.limitedRule[j]!, hook, type, this.family);
            if (reason === undefined) continue;
            problems.push({ chain: ci, rule: this.limitedIndex[j]!, reason: `${reason} (reached by a jump from ${type} chain ${name}, hook ${hook})` });
            break find;
          }
        }
      }
      k = last;
    }
    return problems;
  }
}

/** The chain a verdict map element jumps or goes to, when the table defines it. */
function elementTarget(el: SetElement, index: ReadonlyMap<string, number>): number | undefined {
  return (el.verdict === 'jump' || el.verdict === 'goto') && el.chain !== undefined ? index.get(el.chain) : undefined;
}
