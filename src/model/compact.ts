/**
 * The desired rules in the form the keeper keeps them for its whole life: each rule's expression
 * list an exact-size frozen array, and identical expressions shared between rules (one frozen
 * object for every rule's `ip daddr 192.0.2.1` load and compare, its `return`). A compiled rule
 * built with push() carries a list with spare room, and every rule its own copy of expressions
 * most rules have in common: with many owned rules that was much of the daemon's heap.
 *
 * Frozen is also what lets the batch validation check a rule's expressions once (src/netlink/validate.ts),
 * and the event repairs re-add them as they are.
 */
import { rulesMade, type ChainConfig, type TableConfig } from './desired.js';
import type { Expr } from '../netlink/expr.js';


const EMPTY: never[] = Object.freeze([]) as never[];

/** Expressions seen once that a pool remembers at most (see ExprPool). */
const CANDIDATES = 4096;

/**
 * Identical expressions as one frozen object. An expression is a candidate when first seen and
 * shared from its second sighting on; candidates are forgotten CANDIDATES at a time. Keeping every
 * expression's key until the end of a load kept one for each expression no other rule has (a
 * rule per address: one each), live through the compile and garbage at the install's commit, the
 * start-up's peak. What that costs: an expression met again only after CANDIDATES others is one
 * more object, shared from then on.
 *
 * Found by a structural hash and compared field by field (sameExpr), not by a JSON key: building
 * and hashing a string per compiled expression was a large part of a big config's compile, and
 * its garbage. Equal here means the same fields in the same order with the same values, which is
 * what makes JSON.stringify equal: no two expressions a JSON key told apart are shared.
 */
export class ExprPool {
  /** By hash: the expression, or the few whose hashes collide. */
  private readonly shared = new Map<number, Expr | Expr[]>();
  private candidates = new Map<number, Expr | Expr[]>();
  /** The shared expressions themselves (sharedAt). */
  private readonly sharing = new Set<Expr>();
  /** The expressions of the rule knownRule compacted last. */
  last: readonly Expr[] = EMPTY;

  /** The structural hash the pool finds an expression by (tests look for a collision with it). */
  static hashOf(e: Expr): number {
    return hashOf(e, HASH_SEED);
  }

  /**
   * intern(e) for an expression of a rule whose predecessor had `p` at the same place: in a chain
   * of similar rules most are equal to it, and when `p` is shared, that is what intern would find
   * (nothing else equal is ever shared beside it), without hashing e, and without changing the pool.
   */
  internAt(e: Expr, p: Expr | undefined): Expr {
    return p !== undefined && this.sharing.has(p) && sameExpr(p, e) ? p : this.intern(e);
  }

  intern(e: Expr): Expr {
    const h = hashOf(e, HASH_SEED);
    const s = find(this.shared.get(h), e);
    if (s !== undefined) return s;
    const bucket = this.candidates.get(h);
    const c = find(bucket, e);
    if (c !== undefined) {
      if (bucket === c) this.candidates.delete(h);
      else (bucket as Expr[]).splice((bucket as Expr[]).indexOf(c), 1);
      put(this.shared, h, c);
      this.sharing.add(c);
      return c;
    }
    if (this.candidates.size >= CANDIDATES) this.candidates = new Map();
    // Frozen as they are: a frozen copy made by spreading gets a hidden class of its own.
    put(this.candidates, h, Object.freeze(e));
    return e;
  }
}

function find(bucket: Expr | Expr[] | undefined, e: Expr): Expr | undefined {
  if (bucket === undefined) return undefined;
  if (!Array.isArray(bucket)) return sameExpr(bucket, e) ? bucket : undefined;
  for (const x of bucket) if (sameExpr(x, e)) return x;
  return undefined;
}

function put(m: Map<number, Expr | Expr[]>, h: number, e: Expr): void {
  const b = m.get(h);
  if (b === undefined) m.set(h, e);
  else if (Array.isArray(b)) b.push(e);
  else m.set(h, [b, e]);
}

const HASH_SEED = 0x011c9dc5;
const FNV_PRIME = 0x01000193;
/**
 * Hashes are kept to 30 bits: a small integer in V8 (Smi), where a 32-bit one passed to or returned
 * from a call is a heap-allocated number half the time, and the pool hashes every expression of
 * every rule of a config.
 */
const SMI = 0x3fffffff;

/** FNV-1a-like over an expression's values in field order (the field names by length only: sameExpr compares them). */
function hashOf(v: unknown, h: number): number {
  switch (typeof v) {
    case 'number':
      return Math.imul(h ^ (v | 0) ^ ((v / 4294967296) | 0), FNV_PRIME) & SMI;
    case 'string':
      for (let i = 0; i < v.length; i++) h = Math.imul(h ^ v.charCodeAt(i), FNV_PRIME);
      return Math.imul(h ^ v.length, FNV_PRIME) & SMI;
    case 'boolean':
      return Math.imul(h ^ (v ? 3 : 5), FNV_PRIME) & SMI;
    case 'object': {
      if (v === null) return Math.imul(h ^ 7, FNV_PRIME) & SMI;
      let n = 0;
      if (Array.isArray(v)) for (let i = 0; i < v.length; i++) h = hashOf(v[i], Math.imul(h ^ n++, FNV_PRIME) & SMI);
      else for (const k in v) h = hashOf((v as Record<string, unknown>)[k], Math.imul(h ^ k.length ^ (n++ << 8), FNV_PRIME) & SMI);
      return Math.imul(h ^ n, FNV_PRIME) & SMI;
    }
    default:
      return Math.imul(h ^ 11, FNV_PRIME) & SMI;
  }
}

/**
 * The same fields in the same order, their values equal (strictly; objects and arrays by their
 * contents): an expression's JSON is then the same.
 */
export function sameExpr(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameExpr(a[i], b[i])) return false;
    return true;
  }
  // a's keys on a stack kept between calls (a nested comparison's above them, gone when it returns):
  // an array of keys per comparison was most of what interning a config's rules allocated
  const base = top;
  for (const k in a) KEYS[top++] = k;
  let i = base;
  let same = true;
  for (const k in b) {
    if (i === top || k !== KEYS[i] || !sameExpr((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) {
      same = false;
      break;
    }
    i++;
  }
  if (same) same = i === top;
  top = base;
  return same;
}

const KEYS: string[] = [];
let top = 0;

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
    // Rules made late (the compile cache's) are made compacted: not made here for nothing.
    if (!rulesMade(c)) continue;
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
  const last = shared.last;
  for (let i = 0; i < exprs.length; i++) exprs[i] = shared.internAt(compiled.exprs[i]!, last[i]);
  compiled.exprs = Object.freeze(exprs) as Expr[];
  shared.last = compiled.exprs;
  if (compiled.sets.length === 0) compiled.sets = EMPTY;
}

/**
 * A rule knownRule compacted, back from a copy that kept its expressions' sharing but not their
 * freezing (src/config/compile-cache.ts): the same frozen list of frozen expressions, the same empty
 * list of sets.
 */
export function asKnownRule(compiled: ChainConfig['rules'][number]['compiled']): void {
  const exprs = compiled.exprs;
  for (let i = 0; i < exprs.length; i++) if (!Object.isFrozen(exprs[i])) Object.freeze(exprs[i]);
  Object.freeze(exprs);
  if (compiled.sets.length === 0) compiled.sets = EMPTY;
}

/** Whether `a` is the frozen empty list knownRule gives a rule without sets. */
export const isNoSets = (a: unknown): boolean => a === EMPTY;
