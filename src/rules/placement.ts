/**
 * Where a compiled rule may go: jumps to chains that exist, NAT statements in
 * the nat chains and hooks the kernel accepts them in. Checked for the
 * config's tables and for owners' chains alike.
 */
import type { ChainType, Hook, SetElement } from '../netlink/objects.js';
import type { CompiledRule } from './compile.js';

/** What the kernel would refuse at commit time, said before anything is sent. */
export function checkRulePlacement(rule: CompiledRule, hook: Hook | undefined, type: ChainType | undefined,
  chains: ReadonlySet<string>, scope = 'this table'): string | undefined {
  for (const e of rule.exprs) {
    if (e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') && e.chain && !chains.has(e.chain)) {
      return `${e.verdict} to chain '${e.chain}', which ${scope} does not define`;
    }
  }
  // regular chains: checked through the jumps from the base chains (checkChainGraph), as the kernel does
  return hook === undefined ? undefined : natPlacement(rule, hook, type);
}

function natPlacement(rule: CompiledRule, hook: Hook, type: ChainType | undefined): string | undefined {
  for (const e of rule.exprs) {
    const dnatLike = (e.kind === 'nat' && e.type === 'dnat') || e.kind === 'redir';
    const snatLike = (e.kind === 'nat' && e.type === 'snat') || e.kind === 'masq';
    if ((dnatLike || snatLike) && type !== 'nat') return 'NAT statements need a chain of type nat';
    if (dnatLike && hook !== 'prerouting' && hook !== 'output') {
      return 'dnat and redirect are only valid in prerouting and output chains';
    }
    if (snatLike && hook !== 'postrouting' && hook !== 'input') {
      return 'snat and masquerade are only valid in postrouting and input chains';
    }
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
 * (EOPNOTSUPP), and a NAT statement in a regular chain that a base chain of the wrong type or
 * hook reaches (EOPNOTSUPP). Chains no base chain reaches are not walked, as the kernel does not
 * walk them.
 *
 * Rules are added as they are compiled (`rule()`), while their expressions are still in the
 * CPU's cache. It still costs: on kube-proxy's 10,000-service file (31,000 chains, 64,000 rules)
 * the check adds 100-340 ms to a warm load of 0.8-0.9 s, mostly this second pass over every rule's
 * expressions beside checkRulePlacement's; folding the two passes into one is the next step.
 */
export class JumpGraph {
  /** Per chain: (rule index, target name) pairs, flat; a target '@NAME' is a named map's gotos. */
  private readonly edges: (number | string)[][] = [];
  private readonly anonymous = new Map<string, readonly SetElement[]>();
  private readonly natRules: CompiledRule[][] = [];
  private readonly natRuleIndex: number[][] = [];

  rule(chain: number, ruleIndex: number, rule: CompiledRule): void {
    for (const e of rule.exprs) {
      if (e.kind === 'immediate' && (e.verdict === 'jump' || e.verdict === 'goto') && e.chain !== undefined) {
        (this.edges[chain] ??= []).push(ruleIndex, e.chain);
      } else if (e.kind === 'lookup' && e.dreg !== undefined) {
        const anon = rule.sets.length > 0 ? rule.sets.find((x) => x.name === e.set) : undefined;
        if (anon) {
          // (anonymous set names repeat from rule to rule: keyed by chain and rule)
          const key = `@${chain}/${ruleIndex}/${e.set}`;
          this.anonymous.set(key, anon.elements ?? []);
          (this.edges[chain] ??= []).push(ruleIndex, key);
        } else (this.edges[chain] ??= []).push(ruleIndex, `@${e.set}`);
      } else if (e.kind === 'nat' || e.kind === 'redir' || e.kind === 'masq') {
        const list = (this.natRules[chain] ??= []);
        if (list[list.length - 1] !== rule) {
          list.push(rule);
          (this.natRuleIndex[chain] ??= []).push(ruleIndex);
        }
      }
    }
  }

  /** `chains`: the table's chains in order, as indexed in `rule()`; `maps`: its named maps' elements. */
  check(chains: readonly { name: string; base?: { type: ChainType; hook: Hook } }[],
    maps: ReadonlyMap<string, readonly SetElement[]>): GraphProblem[] {
    const n = chains.length;
    const index = new Map<string, number>();
    chains.forEach((c, i) => index.set(c.name, i));
    const mapTargets = new Map<string, readonly number[]>();
    const targetsOf = (name: string): readonly number[] => {
      if (name[0] !== '@') {
        const i = index.get(name);
        return i === undefined ? [] : [i];
      }
      let found = mapTargets.get(name);
      if (!found) {
        // A named verdict map (kube-proxy's service map: thousands of gotos) is walked once.
        const seen = new Set<number>();
        for (const el of this.anonymous.get(name) ?? maps.get(name.slice(1)) ?? []) {
          const i = (el.verdict === 'jump' || el.verdict === 'goto') && el.chain !== undefined ? index.get(el.chain) : undefined;
          if (i !== undefined) seen.add(i);
        }
        found = [...seen];
        mapTargets.set(name, found);
      }
      return found;
    };
    const problems: GraphProblem[] = [];
    const stamp = new Int32Array(n).fill(-1);
    const targets: number[][] = new Array(n);
    for (let ci = 0; ci < n; ci++) {
      const pairs = this.edges[ci];
      const out: number[] = [];
      targets[ci] = out;
      if (!pairs) continue;
      for (let k = 0; k < pairs.length; k += 2) {
        for (const t of targetsOf(pairs[k + 1] as string)) {
          // nft_verdict_init: a jump or goto to a base chain is refused, reached or not.
          if (chains[t]!.base && stamp[t] !== ci) {
            problems.push({ chain: ci, rule: pairs[k] as number, reason: `jumps to chain ${chains[t]!.name}, a base chain; the kernel refuses a jump or goto to a base chain` });
          }
          if (stamp[t] === ci) continue;
          stamp[t] = ci;
          out.push(t);
        }
      }
    }
    const ruleTo = (c: number, t: number): number => {
      const pairs = this.edges[c] ?? [];
      for (let k = 0; k < pairs.length; k += 2) if (targetsOf(pairs[k + 1] as string).includes(t)) return pairs[k] as number;
      return 0;
    };

    // Longest jump path below each chain, with loop detection (0 unseen, 1 on the path, 2 done).
    // Iterative, so a long (refused) line of jumps cannot overflow the JavaScript stack.
    const state = new Uint8Array(n);
    const height = new Int32Array(n);
    const loops = new Set<number>();
    const path: number[] = [];
    const next: number[] = [];
    const visit = (root: number): void => {
      path.push(root);
      next.push(0);
      state[root] = 1;
      while (path.length > 0) {
        const c = path[path.length - 1]!;
        const out = targets[c]!;
        const k = next[next.length - 1]!;
        if (k === out.length) {
          let h = 0;
          for (const t of out) if (height[t]! + 1 > h) h = height[t]! + 1;
          height[c] = h;
          state[c] = 2;
          path.pop();
          next.pop();
          continue;
        }
        next[next.length - 1] = k + 1;
        const t = out[k]!;
        if (state[t] === 1) {
          if (!loops.has(t)) {
            loops.add(t);
            const cycle = path.slice(path.indexOf(t)).map((i) => chains[i]!.name);
            problems.push({ chain: c, rule: ruleTo(c, t), reason: `jumps in a loop (${[...cycle, chains[t]!.name].join(' → ')}); the kernel refuses a loop a base chain reaches` });
          }
        } else if (state[t] === 0) {
          state[t] = 1;
          path.push(t);
          next.push(0);
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
        const deepest = targets[bi]!.reduce((a, t) => (height[t]! > height[a]! ? t : a), targets[bi]![0]!);
        problems.push({ chain: bi, rule: ruleTo(bi, deepest), reason: `its jumps nest ${height[bi]} chains deep; the kernel allows at most ${NFT_JUMP_STACK_SIZE - 1} below a base chain` });
      }
      let bit = bases.findIndex((b) => b.type === base.type && b.hook === base.hook);
      if (bit < 0) bit = bases.push({ type: base.type, hook: base.hook, name: chains[bi]!.name }) - 1;
      const mask = 1 << bit;
      stack.push(bi);
      while (stack.length > 0) {
        for (const t of targets[stack.pop()!]!) {
          if (reachedBy[t]! & mask) continue;
          reachedBy[t]! |= mask;
          stack.push(t);
        }
      }
    }
    this.natRules.forEach((rules, ci) => {
      if (chains[ci]!.base || !reachedBy[ci]) return;
      for (let bit = 0; bit < bases.length; bit++) {
        if (!(reachedBy[ci]! & (1 << bit))) continue;
        const { type, hook, name } = bases[bit]!;
        const k = rules.findIndex((r) => natPlacement(r, hook, type) !== undefined);
        if (k < 0) continue;
        problems.push({ chain: ci, rule: this.natRuleIndex[ci]![k]!, reason: `${natPlacement(rules[k]!, hook, type)} (reached by a jump from ${type} chain ${name}, hook ${hook})` });
        break;
      }
    });
    return problems;
  }
}
