/**
 * The desired rules in the form the keeper keeps them for its whole life (issue 14's memory
 * target): each rule's expression list an exact-size frozen array, and identical expressions
 * shared between rules (one frozen object for every rule's `ip daddr 192.0.2.1` load and compare,
 * its `return`). A compiled rule built with push() carries a list with room for 17 entries, and
 * every rule its own copy of expressions most rules have in common: at 100,000 owned rules that
 * was 30 MB of the daemon's heap.
 *
 * Frozen is also what lets the batch validation check a rule's expressions once (src/netlink/validate.ts),
 * and the event mirror re-add them as they are.
 */
import type { ChainConfig, TableConfig } from '../config/config.js';
import type { Expr } from '../netlink/expr.js';


const EMPTY: never[] = Object.freeze([]) as never[];

/** Expressions seen once that a pool remembers at most (see ExprPool). */
const CANDIDATES = 4096;

/**
 * Identical expressions as one frozen object. An expression is a candidate when first seen and
 * shared from its second sighting on; candidates are forgotten CANDIDATES at a time. Every
 * expression's JSON kept until the end of a load was 13 MiB of the heap at 100,000 rules that each
 * match their own address (100,000 keys of expressions no other rule has), live through the
 * compile and garbage at the install's commit, the start-up's peak (issue 14). What that costs: an
 * expression met again only after CANDIDATES others is one more object, shared from then on.
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
    // Frozen as they are: a frozen copy made by spreading gets a hidden class of its own (~250 bytes).
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
 * other owner's rules to find them compacted already (1.7 ms a PUT at 1,000 owners).
 */
export function compactChains(chains: Iterable<Pick<ChainConfig, 'rules'>>, shared = new ExprPool()): void {
  for (const c of chains) {
    for (const r of c.rules) compactRule(r.compiled, shared);
  }
}

/** A loader's `compiled` hook that compacts each rule as it is compiled, sharing expressions across the config. */
export function compactAsCompiled(): (compiled: ChainConfig['rules'][number]['compiled']) => void {
  const shared = new ExprPool();
  return (compiled) => compactRule(compiled, shared);
}

/**
 * Compacts one compiled rule in place. The config compacts each rule as it compiles it (issue 14):
 * the expressions a rule was compiled with then die young, instead of 100,000 rules' worth (27 MB
 * at 100,000 rules) being promoted to the old generation and dropped only after the whole file.
 */
export function compactRule(compiled: ChainConfig['rules'][number]['compiled'], shared: ExprPool): void {
  // Compacted already (a rule kept from the previous config, an owner's rule, a config's rule): its
  // list is frozen. Not a WeakSet of the done ones: that was ~60 bytes a rule for the daemon's life.
  if (Object.isFrozen(compiled.exprs)) return;
  const exprs = new Array<Expr>(compiled.exprs.length);
  for (let i = 0; i < exprs.length; i++) exprs[i] = shared.intern(compiled.exprs[i]!);
  compiled.exprs = Object.freeze(exprs) as Expr[];
  if (compiled.sets.length === 0) compiled.sets = EMPTY;
}
