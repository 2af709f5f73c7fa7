/**
 * The desired rules in the form the keeper keeps them for its whole life: each rule's expression
 * list an exact-size frozen array, and identical expressions shared between rules (one frozen
 * object for every rule's `ip daddr 192.0.2.1` load and compare, its `return`). A compiled rule
 * built with push() carries a list with spare room, and every rule its own copy of expressions
 * most rules have in common: with many owned rules that was much of the daemon's heap.
 *
 * Frozen is also what lets the batch validation check a rule's expressions once (src/netlink/validate.ts),
 * and the event mirror re-add them as they are.
 */
import type { ChainConfig, TableConfig } from './desired.js';
import type { Expr } from '../netlink/expr.js';


const EMPTY: never[] = Object.freeze([]) as never[];

/** Expressions seen once that a pool remembers at most (see ExprPool). */
const CANDIDATES = 4096;

/**
 * Identical expressions as one frozen object. An expression is a candidate when first seen and
 * shared from its second sighting on; candidates are forgotten CANDIDATES at a time. Keeping every
 * expression's JSON until the end of a load kept a key for each expression no other rule has (a
 * rule per address: one each), live through the compile and garbage at the install's commit, the
 * start-up's peak. What that costs: an expression met again only after CANDIDATES others is one
 * more object, shared from then on.
 */
export class ExprPool {
  private readonly shared = new Map<string, Expr>();
  private candidates = new Map<string, Expr>();

  intern(e: Expr): Expr {
    const key = JSON.stringify(e);
    const s = this.shared.get(key);
    if (s !== undefined) return s;
    const c = this.candidates.get(key);
    if (c !== undefined) {
      this.candidates.delete(key);
      this.shared.set(key, c);
      return c;
    }
    if (this.candidates.size >= CANDIDATES) this.candidates = new Map();
    // Frozen as they are: a frozen copy made by spreading gets a hidden class of its own.
    this.candidates.set(key, Object.freeze(e));
    return e;
  }
}

/** Compacts the compiled rules of `tables` in place (each compiled rule once: its frozen list says it was). */
export function compactRules(tables: readonly TableConfig[]): void {
  // Per call: expressions are shared within one desired state; an older one's go with it.
  const shared = new ExprPool();
  for (const t of tables) compactChains(t.chains, shared);
}

/**
 * Compacts the rules of `chains` in place, sharing expressions through `shared`. An owner's rules
 * are compacted once, when compiled (src/owners/spec.ts): a registration then need not walk every
 * other owner's rules to find them compacted already (a cost that grew with the owners).
 */
export function compactChains(chains: Iterable<Pick<ChainConfig, 'rules'>>, shared = new ExprPool()): void {
  for (const c of chains) {
    for (const r of c.rules) knownRule(r.compiled, shared);
  }
}

/** A loader's `compiled` hook that compacts each rule as it is compiled, sharing expressions across the config. */
export function compactAsCompiled(): (compiled: ChainConfig['rules'][number]['compiled']) => void {
  const shared = new ExprPool();
  return (compiled) => knownRule(compiled, shared);
}

/**
 * Compacts one compiled rule in place. The config compacts each rule as it compiles it: the
 * expressions a rule was compiled with then die young, instead of the whole file's worth being
 * promoted to the old generation and dropped only after the whole file.
 */
export function knownRule(compiled: ChainConfig['rules'][number]['compiled'], shared: ExprPool): void {
  // Compacted already (a rule kept from the previous config, an owner's rule, a config's rule): its
  // list is frozen. Not a WeakSet of the done ones: an entry a rule for the daemon's life.
  if (Object.isFrozen(compiled.exprs)) return;
  const exprs = new Array<Expr>(compiled.exprs.length);
  for (let i = 0; i < exprs.length; i++) exprs[i] = shared.intern(compiled.exprs[i]!);
  compiled.exprs = Object.freeze(exprs) as Expr[];
  if (compiled.sets.length === 0) compiled.sets = EMPTY;
}
