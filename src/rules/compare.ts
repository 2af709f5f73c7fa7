/**
 * Structural comparison of rules, the reconciler's notion of "the same rule":
 * the canonical JSON of the expressions, leaving out counter values, handles,
 * set names and batch ids, with each anonymous set lookup replaced by the
 * set's contents (flags, key type and length, sorted elements). Optional
 * attributes the kernel fills in on its own (a nat expression's max
 * registers and MAP_IPS/PROTO_SPECIFIED flags) are normalised first, so IR
 * written by hand, compiled here, or dumped from the kernel compare alike.
 */
import { NAT_RANGE, type Expr, type Hex } from '../netlink/expr.js';
import { SET_F, type BoundChain, type NftSet, type SetElement } from '../netlink/objects.js';
import { boundChainOf, type SetResolver } from './render.js';
import { withoutState } from './stateful.js';

type RuleLike = { exprs: readonly Expr[]; userdata?: Hex; sets?: readonly NftSet[]; bound?: readonly BoundChain<RuleLike>[] };

function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  const o = v as Record<string, unknown>;
  return '{' + Object.keys(o).filter((k) => o[k] !== undefined).sort()
    .map((k) => JSON.stringify(k) + ':' + canonical(o[k])).join(',') + '}';
}

/** The contents of a set as the comparison sees them. */
export function setContentKey(set: NftSet, elements: readonly SetElement[]): string {
  const els = elements.map((e) => canonical({
    key: e.key, keyEnd: e.keyEnd, flags: e.flags ?? 0, data: e.data, verdict: e.verdict, chain: e.chain, objref: e.objref,
  })).sort();
  return canonical({
    flags: set.flags, keyType: set.keyType, keyLen: set.keyLen, dataType: set.dataType, dataLen: set.dataLen, objType: set.objType,
    elements: els,
  });
}

/** Resolves a compiled rule's own anonymous sets: by batch-local id, else by name. */
export function compiledSetResolver(rule: { sets: readonly NftSet[] }): SetResolver {
  return (name, setId) => {
    const s = rule.sets.find((x) => (setId !== undefined ? x.id === setId : x.name === name));
    return s ? { set: s, elements: s.elements ?? [] } : undefined;
  };
}

function resolverFor(rule: RuleLike, sets?: SetResolver): SetResolver | undefined {
  if (sets) return sets;
  return rule.sets ? compiledSetResolver({ sets: rule.sets }) : undefined;
}

function normalize(e: Expr, sets: SetResolver | undefined, bound: RuleLike['bound']): unknown {
  switch (e.kind) {
    // a jump to a bound chain (`jump { … }`) is the chain's rules, by their keys (its name or batch id is no part of it)
    case 'immediate': {
      const b = e.dreg === 0 ? boundChainOf(bound, e) : undefined;
      if (!b) return e.chainId !== undefined ? { ...e, chainId: undefined, chain: `unresolved-binding:${e.chainId}` } : e;
      return { kind: 'immediate', dreg: 0, verdict: e.verdict, binding: b.rules.map((r) => ruleKey(r, sets)) };
    }
    case 'counter': return { kind: 'counter' };
    case 'lookup': {
      const found = sets?.(e.set, e.setId);
      let set: string;
      if (found && found.set.flags & SET_F.ANONYMOUS) set = 'anon:' + setContentKey(found.set, found.elements);
      else if (found) set = '@' + found.set.name;
      else set = e.set.startsWith('__set') ? `anon-unresolved:${e.set}:${e.setId ?? ''}` : '@' + e.set;
      return { kind: 'lookup', sreg: e.sreg, dreg: e.dreg, flags: e.flags ?? 0, set };
    }
    case 'nat': {
      let flags = e.flags ?? 0;
      if (e.regAddrMin !== undefined) flags |= NAT_RANGE.MAP_IPS;
      if (e.regProtoMin !== undefined) flags |= NAT_RANGE.PROTO_SPECIFIED;
      return {
        ...e, flags: flags || undefined,
        regAddrMax: e.regAddrMax ?? e.regAddrMin, regProtoMax: e.regProtoMax ?? e.regProtoMin,
      };
    }
    case 'masq':
    case 'redir': {
      let flags = e.flags ?? 0;
      if (e.regProtoMin !== undefined) flags |= NAT_RANGE.PROTO_SPECIFIED;
      return { ...e, flags: flags || undefined, regProtoMax: e.regProtoMax ?? e.regProtoMin };
    }
    case 'objref': {
      // an anonymous object map, by its contents (its name is the kernel's)
      if (e.set === undefined) return e;
      const found = sets?.(e.set, e.setId);
      if (found && found.set.flags & SET_F.ANONYMOUS) return { kind: 'objref', sreg: e.sreg, set: 'anon:' + setContentKey(found.set, found.elements) };
      return { ...e, setId: undefined };
    }
    // the kernel dumps a dynset's timeout and flags as 0 when none were sent
    // (and the flag that it sent its statements as a list, NFT_DYNSET_F_EXPR, never); the statements' state is the kernel's
    case 'dynset': return {
      ...e, timeout: e.timeout || undefined, flags: (e.flags ?? 0) & ~2 || undefined, setId: undefined,
      exprs: e.exprs?.length ? e.exprs.map(withoutState) : undefined,
    };
    case 'bitwise': return { ...e, op: e.op ?? 'bool' };
    // a store may not carry NFTA_EXTHDR_FLAGS (EINVAL), yet the kernel dumps it as 0; nor a strip
    // (`reset tcp option`, neither register) its offset and len
    case 'exthdr': {
      const strip = e.dreg === undefined && e.sreg === undefined;
      return { ...e, flags: e.flags || undefined, offset: strip ? e.offset || undefined : e.offset, len: strip ? e.len || undefined : e.len };
    }
    default: return e;
  }
}

/**
 * The structural key of a rule. Anonymous set lookups are resolved with
 * `sets` (for kernel rules: from listSets/listElements), or, for a
 * CompiledRule, with its own `sets`.
 */
export function ruleKey(rule: RuleLike, sets?: SetResolver): string {
  const r = resolverFor(rule, sets);
  return canonical({ exprs: rule.exprs.map((e) => normalize(e, r, rule.bound)), userdata: rule.userdata ?? '' });
}

export function rulesEqual(a: RuleLike, b: RuleLike, setsA?: SetResolver, setsB?: SetResolver): boolean {
  return ruleKey(a, setsA) === ruleKey(b, setsB);
}

/** A SetResolver over dumped sets and their elements (e.g. from listSets + listElements). */
export function setResolver(sets: readonly { set: NftSet; elements: SetElement[] }[]): SetResolver {
  const byName = new Map(sets.map((s) => [s.set.name, s]));
  return (name) => byName.get(name);
}
