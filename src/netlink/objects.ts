/**
 * Kernel objects as dumps return them and as operations carry them. Field
 * names follow the NFTA_* attributes they come from.
 */
import type { Expr, Family, Hex, StatefulExpr, Verdict } from './expr.js';

export type Hook = 'prerouting' | 'input' | 'forward' | 'output' | 'postrouting' | 'ingress' | 'egress';
export type ChainType = 'filter' | 'nat' | 'route';

/** NFT_TABLE_F_* flags. Persist (0x4) is newer than these machines' UAPI headers. */
export const TABLE_F = { DORMANT: 0x1, OWNER: 0x2, PERSIST: 0x4 } as const;

/** NFT_SET_* flags. */
export const SET_F = {
  ANONYMOUS: 0x1, CONSTANT: 0x2, INTERVAL: 0x4, MAP: 0x8, TIMEOUT: 0x10, EVAL: 0x20,
  OBJECT: 0x40, CONCAT: 0x80, EXPR: 0x100,
} as const;

/** NFT_SET_ELEM_* flags. */
export const SET_ELEM_F = { INTERVAL_END: 0x1, CATCHALL: 0x2 } as const;

export interface Table {
  family: Family;
  name: string;
  /** NFTA_TABLE_FLAGS */
  flags: number;
  /** NFTA_TABLE_USE: chains, sets and objects that reference the table. */
  use?: number;
  handle?: number;
  /** NFTA_TABLE_OWNER: port id of the owning socket when flags has OWNER. */
  owner?: number;
  userdata?: Hex;
}

export interface Chain {
  family: Family;
  table: string;
  name: string;
  handle?: number;
  /** NFTA_CHAIN_USE: references to the chain: its own rules plus the jumps and gotos to it (6.x). */
  use?: number;
  /** Base chains only. */
  type?: ChainType;
  hook?: Hook;
  priority?: number;
  policy?: 'accept' | 'drop';
  device?: string;
  /** NFT_CHAIN_* flags: BINDING (0x4) for a chain bound to the rule that jumps to it. */
  flags?: number;
  /** NFTA_CHAIN_ID: on add, a batch-local id by which rules and jumps of the same batch name it. */
  id?: number;
  userdata?: Hex;
}

/** NFT_CHAIN_* flags. */
export const CHAIN_F = { BASE: 0x1, HW_OFFLOAD: 0x2, BINDING: 0x4 } as const;

/**
 * An anonymous chain bound to a rule (`jump { … }`, NFT_CHAIN_BINDING): it lives and dies with the
 * rule and the kernel refuses any change to it. A compiled rule's carries the batch id its jump
 * names (`chainId`); a dumped rule's the name the kernel gave it (`__chain%d`).
 */
export interface BoundChain<R> {
  id?: number;
  name?: string;
  rules: R[];
}

export interface Rule {
  family: Family;
  table: string;
  chain: string;
  /** NFTA_RULE_HANDLE: unique in the table, assigned by the kernel. */
  handle?: number;
  /** NFTA_RULE_POSITION: on add, the handle to add after; on insert, before. */
  position?: number;
  /** NFTA_RULE_ID: on add, insert or replace, a batch-local id that a later op's positionId can name. */
  id?: number;
  /** NFTA_RULE_POSITION_ID: on add, the id of a rule added earlier in the batch to add after; on insert, before. */
  positionId?: number;
  /** NFTA_RULE_CHAIN_ID: on add, the batch id of the chain (a bound one) instead of `chain`. */
  chainId?: number;
  /** The chains its jumps are bound to (`jump { … }`), with their rules: read from a dump by the keeper. */
  bound?: BoundChain<Rule>[];
  /** NFTA_RULE_USERDATA: TLVs; nft keeps its `comment` here (NFTNL_UDATA_RULE_COMMENT). */
  userdata?: Hex;
  exprs: Expr[];
  /**
   * NFTA_RULE_COMPAT: the l4 protocol that xt matches such as `tcp` rely on.
   * The kernel never dumps it; listRules() derives it, as iptables-nft does,
   * from the rule's `meta l4proto` comparison when the rule holds xt expressions.
   */
  compat?: { proto: number; flags?: number };
  /**
   * Dumps asked for digests only: a 128-bit digest (hex) of what the rule's structural key
   * depends on (userdata, each expression's name and data, counters' data left out); absent for
   * rules that look up an anonymous set, whose key depends on its elements. Equal digests, equal keys.
   */
  digest?: string;
}

/** One chain's rules as a digest dump gives them: handles and digests in chain order ('' = none). */
export interface ChainDigests {
  chain: string;
  handles: number[];
  digests: string[];
}

export interface SetElement {
  key?: Hex;
  keyEnd?: Hex;
  /** NFT_SET_ELEM_* */
  flags?: number;
  data?: Hex;
  verdict?: Verdict;
  chain?: string;
  userdata?: Hex;
  /** NFTA_SET_ELEM_TIMEOUT, ms: the element's own lifetime. */
  timeout?: number;
  /** NFTA_SET_ELEM_EXPIRATION, ms: time left; on add, nft's `expires`. The kernel counts it down. */
  expiration?: number;
  /** NFTA_SET_ELEM_OBJREF: in an object map, the name of the object the key maps to. */
  objref?: string;
  /** NFTA_SET_ELEM_EXPR(ESSIONS): the element's counter, limit, quota (a set's expressions: every element has them). */
  exprs?: StatefulExpr[];
}

export interface NftSet {
  family: Family;
  table: string;
  name: string;
  handle?: number;
  /** NFTA_SET_ID: batch-local id by which a lookup in the same batch refers to the set. */
  id?: number;
  flags: number;
  keyType: number;
  keyLen: number;
  dataType?: number;
  dataLen?: number;
  policy?: number;
  /** NFTA_SET_DESC_SIZE */
  size?: number;
  /**
   * NFTA_SET_DESC_CONCAT: the byte length of each part of a concatenated key (nft sends it for
   * every concatenation; the kernel needs it for concatenated interval sets and dumps it back).
   */
  fieldLen?: number[];
  timeout?: number;
  /** NFTA_SET_GC_INTERVAL, ms */
  gcInterval?: number;
  /** NFTA_SET_OBJ_TYPE: an object map's (flags OBJECT) NFT_OBJECT_* type. */
  objType?: number;
  userdata?: Hex;
  /** NFTA_SET_EXPR(ESSIONS): what each element gets (`set s { …; counter; }`); with two, flags has EXPR. */
  exprs?: StatefulExpr[];
  /** On add only: elements created with the set. */
  elements?: SetElement[];
}

/** NFT_OBJECT_* by the IR's name of each stateful object type it models. */
export const OBJ_TYPE = {
  counter: 1, quota: 2, 'ct helper': 3, limit: 4, 'ct timeout': 7, secmark: 8, 'ct expectation': 9, synproxy: 10,
} as const;
export type ObjType = keyof typeof OBJ_TYPE;

/**
 * A named stateful object (NFTA_OBJ_*). `data` holds its NFTA_<TYPE>_* attributes by the names
 * native/object.cc gives them: counter packets, bytes; quota bytes, consumed, flags; limit rate,
 * unit, burst, type, flags; ct helper name, l3proto, l4proto; ct expectation l3proto, l4proto,
 * dport, timeout, size; synproxy mss, wscale, flags; secmark ctx; ct timeout l3proto, l4proto and
 * policy (NFTA_CT_TIMEOUT_DATA: the timeouts in seconds, one per state of the protocol, in the
 * kernel's order). A dump of a type the IR does not model gives its number as `type` and no data.
 */
export interface NftObj {
  family: Family;
  table: string;
  name: string;
  type: ObjType | number;
  handle?: number;
  /** NFTA_OBJ_USE: rules and set elements referring to it (dumps only). */
  use?: number;
  userdata?: Hex;
  data: Record<string, number | string | readonly number[]>;
}

/**
 * What one observation of a table found: its chains, their rules in kernel order,
 * and its sets with the elements rules look up. The keeper's observe fills
 * it; diff, plan and owned GC read it.
 */
export interface ObservedTable {
  family: Family;
  name: string;
  table?: Table;
  chains: Map<string, Chain>;
  /** Rules by chain, in kernel order. */
  rules: Map<string, Rule[]>;
  sets: Map<string, { set: NftSet; elements: SetElement[] }>;
  /** Its named stateful objects, when the observation read them (a table whose config has none and a connection that cannot list them: not read). */
  objs?: Map<string, NftObj>;
}

/**
 * Files a table's dump by chain: every chain with its (possibly empty) rule
 * list, in dump order. Rules of a chain missing from `chains` (it went
 * between the two dumps) still get a list.
 */
export function indexByChain(chains: readonly Chain[], rules: readonly Rule[],
  into: { chains: Map<string, Chain>; rules: Map<string, Rule[]> }): void {
  let bound: Map<string, Rule[]> | undefined;
  for (const c of chains) {
    if (c.flags !== undefined && c.flags & CHAIN_F.BINDING) {
      (bound ??= new Map()).set(c.name, []);
      continue;
    }
    into.chains.set(c.name, c);
    into.rules.set(c.name, []);
  }
  for (const r of rules) {
    let list = bound?.get(r.chain) ?? into.rules.get(r.chain);
    if (!list) into.rules.set(r.chain, list = []);
    list.push(r);
  }
  if (bound) bindChains(into.rules, bound);
}

/**
 * A bound chain (flags BINDING) is part of the rule that jumps to it, not a chain of the table:
 * each rule of `rules` that jumps to one of `bound` gets it, with its rules, in Rule.bound.
 */
export function bindChains(rules: ReadonlyMap<string, readonly Rule[]>, bound: ReadonlyMap<string, Rule[]>): void {
  for (const list of rules.values()) {
    for (const r of list) {
      for (const e of r.exprs) {
        if (e.kind !== 'immediate' || e.chain === undefined) continue;
        const b = bound.get(e.chain);
        if (b) (r.bound ??= []).push({ name: e.chain, rules: b });
      }
    }
  }
}

/**
 * The chains `rules` jump to that `known` does not hold: where a bound chain (`jump { … }`) may be
 * when the chains were read one by one.
 */
export function jumpTargetsOutside(rules: ReadonlyMap<string, readonly Rule[]>, known: ReadonlyMap<string, unknown>): string[] {
  const out = new Set<string>();
  for (const list of rules.values()) {
    for (const r of list) {
      for (const e of r.exprs) {
        if (e.kind === 'immediate' && e.chain !== undefined && !known.has(e.chain) && !r.bound?.some((b) => b.name === e.chain)) out.add(e.chain);
      }
    }
  }
  return [...out];
}
