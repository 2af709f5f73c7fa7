/**
 * The desired state of one owned table, as the config builds it and the keeper, the owners and
 * the one-shot commands consume it: its chains with their compiled rules, its sets and objects.
 */
import type { Family, Hex } from '../netlink/expr.js';
import type { ChainType, Hook, NftSet } from '../netlink/objects.js';
import type { CompiledRule } from '../rules/index.js';
import type { SetConfig } from './sets.js';
import type { ObjConfig } from './stateful-objects.js';

export interface ChainConfig {
  name: string;
  /** Base chains have all of type, hook and priority. */
  base?: { type: ChainType; hook: Hook; priority: number; policy: 'accept' | 'drop' };
  rules: { text: string; compiled: CompiledRule }[];
  /** NFTA_CHAIN_USERDATA: the chain's comment as nft encodes it. */
  userdata?: Hex;
}

export interface TableConfig {
  family: Family;
  name: string;
  protect: boolean;
  /** `flags dormant`: the table holds its chains unhooked (NFT_TABLE_F_DORMANT). */
  dormant?: boolean;
  /** NFTA_TABLE_USERDATA: the table's comment as nft encodes it. */
  userdata?: Hex;
  /** Named sets and maps, in the order they were written (the order nft creates them in). None: the table has none. */
  sets?: SetConfig[];
  /** Named stateful objects, in the order they were written. None: the table has none. */
  objects?: ObjConfig[];
  chains: ChainConfig[];
}

/** The rules of `tables`, counted chain by chain (a raw document's or a loaded config's). */
export function countRules(tables: readonly { chains: readonly { rules: readonly unknown[] }[] }[]): number {
  let n = 0;
  // A chain whose rules are made late (lateRules) is counted without making them.
  for (const t of tables) for (const c of t.chains) n += late.get(c)?.count ?? c.rules.length;
  return n;
}

/** A chain's rules made late: each when first asked for (ruleAt), all of them when the chain's rules are read. */
export interface LateRules {
  /** How many rules the chain has. */
  readonly count: number;
  /** Rule `j` (0 ≤ j < count), made alone if not made yet; the same object every time, and in the rules `all` gives. */
  ruleAt(j: number): ChainConfig['rules'][number];
  /** Every rule, each made once (those made by ruleAt are the ones held). */
  all(): ChainConfig['rules'];
  /**
   * Rule `j` encoded without making it (EncodedRule), where that is known (undefined: make it): a
   * rule with bound chains never is (their ops come from the rule).
   */
  encodedAt?(j: number): EncodedRule | undefined;
}

/**
 * A rule as a batch adds it, without its expressions made: `exprs` is the NFTA_RULE_EXPRESSIONS
 * attribute encodeExprs() gives for the rule's expressions, `userdata` the rule's.
 */
export interface EncodedRule {
  exprs: Buffer;
  userdata?: string;
  /** The rule's text (compiled.text), where it was kept: a plan prints it without making the rule. */
  text?: string;
  /** Its anonymous sets (compiled.sets), added before it; absent: none. */
  sets?: NftSet[];
}

/** The chains whose rules are not made yet (lateRules): not a key on the chain, which stays as compiled. */
const late = new WeakMap<object, LateRules>();

// One getter and setter for every late chain (the chain is `this`): kube-proxy's table has
// thousands of chains, and an accessor of their own would be closures and a hidden class per chain.
const LATE_RULES: PropertyDescriptor = {
  get(this: ChainConfig) {
    const l = late.get(this);
    // Only a late chain has this getter, and holdRules replaces it as it ends the lateness.
    if (l === undefined) throw new Error('the rules of a chain made late read through another object');
    const rules = l.all();
    madeRules(this, rules);
    return rules;
  },
  set(this: ChainConfig, rules: ChainConfig['rules']) {
    holdRules(this, rules);
  },
  enumerable: true,
  configurable: true,
};

/**
 * Chain `c` with rules made by `making` when first read (`c.rules`, also by a spread or a copy),
 * then held as an ordinary array; a rule asked for by its place (ruleAt) is made alone. A config
 * read back from the compile cache, whose restart onto a ruleset the restart record proves in sync
 * needs only how many rules each chain has, and whose first repair needs only the rule it puts
 * back. `making` must give `count` rules, compacted (src/model/compact.ts) as the compiler's are.
 * Rules made otherwise (a making run ahead of the first read) are held by madeRules.
 */
export function lateRules(c: ChainConfig, making: LateRules): void {
  late.set(c, making);
  Object.defineProperty(c, 'rules', LATE_RULES);
}

/** Late chain `c`'s rules, made otherwise than by reading them: checked against its count, then held. */
export function madeRules(c: ChainConfig, rules: ChainConfig['rules']): void {
  const count = late.get(c)?.count;
  if (rules.length !== count) throw new Error(`chain ${c.name}: ${rules.length} rules made, not ${count ?? 'late'}`);
  holdRules(c, rules);
}

/** The chain's rules as an ordinary array from now on: no longer late. */
function holdRules(c: ChainConfig, rules: ChainConfig['rules']): void {
  late.delete(c);
  Object.defineProperty(c, 'rules', { value: rules, writable: true, enumerable: true, configurable: true });
}

/** The chains appendRules made: the chain they extend and the rules after its own. */
const appended = new WeakMap<object, { base: ChainConfig; extra: ChainConfig['rules'] }>();

/**
 * Chain `base` with `extra` after its own rules (a dispatch chain with the owners' jumps): a new
 * chain object; made late, as `base` is, when `base`'s rules are not made yet, so that a restart
 * does not make them for the jumps' sake. appendedOf gives its parts back (the desired digest is
 * composed of them).
 */
export function appendRules(base: ChainConfig, extra: ChainConfig['rules']): ChainConfig {
  const out = {} as ChainConfig;
  const n = ruleCount(base);
  const made = rulesMade(base);
  // The fields in base's order, as a spread gives them, but without reading (making) base's rules.
  for (const key of Object.keys(base) as (keyof ChainConfig)[]) {
    if (key !== 'rules') out[key] = base[key] as never;
    else if (made) out.rules = base.rules.concat(extra);
    else lateRules(out, { count: n + extra.length, ruleAt: (j) => (j < n ? ruleAt(base, j)! : extra[j - n]!), all: () => base.rules.concat(extra) });
  }
  appended.set(out, { base, extra });
  return out;
}

/** The parts of a chain appendRules made. */
export function appendedOf(c: ChainConfig): { base: ChainConfig; extra: ChainConfig['rules'] } | undefined {
  return appended.get(c);
}

/** How many rules chain `c` has, without making them when they are made late (lateRules). */
export function ruleCount(c: Pick<ChainConfig, 'rules'>): number {
  return late.get(c)?.count ?? c.rules.length;
}

/** Whether chain `c`'s rules are made (false: lateRules will make them when first read). */
export function rulesMade(c: Pick<ChainConfig, 'rules'>): boolean {
  return !late.has(c);
}

/** Rule `j` of chain `c` (undefined past its end), made alone when the chain's rules are made late (lateRules). */
export function ruleAt(c: Pick<ChainConfig, 'rules'>, j: number): ChainConfig['rules'][number] | undefined {
  const l = late.get(c);
  if (l === undefined) return c.rules[j];
  return Number.isInteger(j) && j >= 0 && j < l.count ? l.ruleAt(j) : undefined;
}

/** Rule `j` of chain `c` encoded (LateRules.encodedAt), while the chain's rules are made late; else undefined. */
export function encodedRuleAt(c: Pick<ChainConfig, 'rules'>, j: number): EncodedRule | undefined {
  return late.get(c)?.encodedAt?.(j);
}

/** The text of rule `j` of chain `c` (its compiled.text): kept with its encoding (EncodedRule.text) while the chain's rules are made late, else the rule's own, made if need be. */
export function ruleTextAt(c: Pick<ChainConfig, 'rules'>, j: number): string {
  return encodedRuleAt(c, j)?.text ?? ruleAt(c, j)!.compiled.text;
}
