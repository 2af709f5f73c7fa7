/**
 * The one identity the keeper compares rules by: a SHA-256 of a rule's canonical form (ruleKey),
 * kept on the rule object once computed. The key is the definition; a rule digest (Rule.digest,
 * native/digest.cc: userdata and every expression's name and attributes, counters' data left out)
 * is a proof of equality where a kernel rule and its desired rule both have one: equal digests
 * mean equal keys, so the key need not be computed. Different digests prove nothing (the key
 * normalises what the kernel fills in on its own), nor does a missing one (an anonymous set's
 * rule): those are compared by key. A kernel rule known to be its desired rule (a known rule:
 * adopted by digest, remembered by the known state, or decoded and proved by its digest) carries
 * that rule's key, so comparing it is a pointer compare.
 */
import { sha256 } from '../base/sha256.js';
import type { Expr, Hex } from '../netlink/expr.js';
import type { Rule } from '../netlink/objects.js';
import { ruleAt, type ChainConfig, type TableConfig } from '../model/desired.js';
import { ruleKey, type SetResolver } from '../rules/index.js';

// ruleKey resolves a compiled rule's anonymous sets by their batch-local ids itself. The key is kept
// on the rule object (a hidden, non-enumerable property): a registration looks up every owner's
// jump in the dispatch chain, and a property read costs a fraction of a WeakMap lookup.
const KEY = Symbol('nfkeeper.ruleKey');
// A known rule's desired rule (knownRule): its key is that rule's.
const DESIRED = Symbol('nfkeeper.desiredRule');
/**
 * A rule known to be `r` of desired chain `c` at `handle`, without a decoded copy: the desired
 * rule's own expressions and userdata (shared with the desired state, not copies), and the desired
 * rule itself for its key, computed when a diff first asks (a registration's new rules are compared
 * with nothing, so hashing their canonical form would be work and garbage for no use). The known
 * state and the start-up's adoption by digests keep their rules so.
 */
export function knownRule(t: Pick<TableConfig, 'family' | 'name'>, c: Pick<ChainConfig, 'name'>, r: ChainConfig['rules'][number], handle: number, digest?: string): Rule {
  return new KnownRule(t.family, t.name, c.name, handle, digest, r, undefined, 0);
}

/**
 * knownRule of desired chain `c`'s rule at `at`, the rule looked up when its expressions, userdata
 * or key are first asked for: a chain whose rules are made late (lateRules) is not made for rules
 * only counted and placed (a restart the record proves in sync).
 */
export function knownRuleAt(t: Pick<TableConfig, 'family' | 'name'>, c: ChainConfig, at: number, handle: number, digest?: string): Rule {
  return new KnownRule(t.family, t.name, c.name, handle, digest, undefined, c, at);
}

/** Whether `rule` is a known rule of desired rule `at` of `c`, told without making `c`'s rules when it was placed there (knownRuleAt). */
export function isKnownAt(rule: Rule, c: ChainConfig, at: number): boolean {
  if (rule instanceof KnownRule && rule.of === c) return rule.at === at;
  return hasKey(rule) && rule.exprs === ruleAt(c, at)!.compiled.exprs;
}

/**
 * One class for every known rule (a class: the same shape for all, and no property defined per
 * object): its expressions and userdata are its desired rule's, read through it.
 */
class KnownRule implements Rule {
  constructor(readonly family: Rule['family'], readonly table: string, readonly chain: string, public handle: number, public digest: string | undefined,
    private desired: ChainConfig['rules'][number] | undefined, readonly of: ChainConfig | undefined, readonly at: number) {}

  get [DESIRED](): ChainConfig['rules'][number] {
    return this.desired ??= ruleAt(this.of!, this.at)!;
  }

  set [DESIRED](r: ChainConfig['rules'][number]) {
    this.desired = r;
  }

  get exprs(): Expr[] {
    return this[DESIRED].compiled.exprs;
  }

  get userdata(): Hex | undefined {
    return this[DESIRED].compiled.userdata;
  }
}

/**
 * The key rules are compared by: a SHA-256 of the rule's canonical form (ruleKey), 44 characters
 * instead of the canonical JSON's hundreds. Desired rules keep theirs for as long as the config
 * lives (and the known state shares it), so the JSON would be a large part of a big config's heap;
 * a collision would take a SHA-256 collision.
 */
export function hashedKey(rule: Parameters<typeof ruleKey>[0], resolve?: SetResolver): string {
  return sha256(ruleKey(rule, resolve), 'base64');
}

type Keyed = { [KEY]?: string; [DESIRED]?: ChainConfig['rules'][number] };
function keep(o: object, key: string): string {
  Object.defineProperty(o, KEY, { value: key, configurable: true, writable: true });
  return key;
}
function cachedDesiredKey(rule: ChainConfig['rules'][number]): string {
  return (rule as Keyed)[KEY] ?? keep(rule, hashedKey(rule.compiled));
}

/** A desired rule's structural key (computed once per compiled rule). */
export const desiredKey = cachedDesiredKey;

// Keys of kernel rules known without decoding them (src/keeper/known.ts): the same string as the
// desired rule's, so comparing them is a pointer compare.

/** The key of a rule known without decoding it (knownRule, withKey); undefined for a decoded one. */
export function knownKey(rule: Rule): string | undefined {
  const k = (rule as Keyed)[KEY];
  if (k !== undefined) return k;
  const d = (rule as Keyed)[DESIRED];
  return d === undefined ? undefined : cachedDesiredKey(d);
}

/** `rule` with its structural key recorded; diffTable then never computes it. */
export function withKey(rule: Rule, key: string): Rule {
  keep(rule, key);
  return rule;
}

/**
 * `rule`, a decoded kernel rule whose digest is desired rule `r`'s (both non-empty, see the
 * header), recorded as that rule: its key is `r`'s, and diffTable takes it as equal without one.
 */
export function provedAs(rule: Rule, r: ChainConfig['rules'][number]): Rule {
  Object.defineProperty(rule, DESIRED, { value: r, configurable: true, writable: true });
  return rule;
}

/**
 * Whether the kernel's `rules` are `want`'s rules, place by place: a rule known to be its desired
 * rule (knownRule, provedAs) without a key, any other by its key (`keys`, kernelKeys) against the
 * desired rule's. A rule given a key of its own (withKey) is compared by that key.
 */
export function sameRules(rules: readonly Rule[], want: ChainConfig['rules'], keys: (i: number) => string): boolean {
  if (rules.length !== want.length) return false;
  for (let j = 0; j < rules.length; j++) {
    const r = rules[j] as Keyed;
    if (r[DESIRED] === want[j] && r[KEY] === undefined) continue;
    if (keys(j) !== cachedDesiredKey(want[j]!)) return false;
  }
  return true;
}

/** Whether `rule` is known without decoding (knownRule, withKey): its key needs no canonical form of its own. */
export function hasKey(rule: Rule): boolean {
  return rule instanceof KnownRule || (rule as Keyed)[DESIRED] !== undefined || (rule as Keyed)[KEY] !== undefined;
}

/**
 * Whether a decoded kernel rule is the known rule `known` (which carries its key, see withKey).
 * For rules without anonymous sets (the known state's tables have none).
 */
export function sameKey(known: Rule, decoded: Rule): boolean {
  const k = knownKey(known);
  return k !== undefined && k === hashedKey({ exprs: decoded.exprs, userdata: decoded.userdata, bound: decoded.bound });
}

/** Kernel rule keys by index, each computed once and only when asked for. */
export function kernelKeys(rules: readonly Rule[], resolve: SetResolver): (i: number) => string {
  const keys: (string | undefined)[] = new Array(rules.length);
  return (i) => keys[i] ??= knownKey(rules[i]!) ?? hashedKey({ exprs: rules[i]!.exprs, userdata: rules[i]!.userdata, bound: rules[i]!.bound }, resolve);
}
