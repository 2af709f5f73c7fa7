/** The parsed form of a rule text, before dependencies, merging and linearization. */
import type { Expr, StatefulExpr } from '../netlink/expr.js';
import type { ObjType } from '../netlink/objects.js';
import type { Field } from './fields.js';

/** Where a piece of the text is, for error messages. */
export interface At {
  col: number;
  raw: string;
}

/** One right-hand side value. Byte strings are hex in the field's kernel byte order. */
export type Elem =
  /** `full`: written as a full-length prefix (10.0.0.1/32): alone a value, but in a set it makes the set an interval set, as in nft. */
  | ({ k: 'value'; hex: string; full?: true } & At)
  | ({ k: 'prefix'; hex: string; plen: number } & At)
  | ({ k: 'range'; lo: string; hi: string } & At)
  /** An interface name ending in '*': the bytes before the star. */
  | ({ k: 'wildcard'; prefix: string } & At);

export type Rhs = Elem | ({ k: 'set'; elems: Elem[] } & At);

export type MatchOp = 'implicit' | 'eq' | 'neq' | 'lt' | 'gt' | 'lte' | 'gte';

export interface MatchStmt extends At {
  t: 'match';
  field: Field;
  op: MatchOp;
  opAt?: At;
  /** `& mask` before the operator (marks, ct state/status). */
  mask?: string;
  /** With `mask`: the bitwise's xor (`mark | C`: mask ~C, xor C). */
  xor?: string;
  rhs: Rhs;
}

export interface CounterStmt extends At {
  t: 'counter';
  packets?: number;
  bytes?: number;
}

export interface VerdictStmt extends At {
  t: 'verdict';
  verdict: 'accept' | 'drop' | 'return' | 'jump' | 'goto';
  chain?: string;
  /** A chain binding (`jump { … }`): the rules of the anonymous chain, instead of `chain`. */
  binding?: RuleAst[];
}

export interface PortRange extends At {
  lo: number;
  hi?: number;
}

export interface NatAddr extends At {
  v6: boolean;
  lo: string;
  hi?: string;
}

export interface NatStmt extends At {
  t: 'nat';
  type: 'snat' | 'dnat';
  family?: 'ip' | 'ip6';
  familyAt?: At;
  addr?: NatAddr;
  port?: PortRange;
  /** `snat/dnat to KEY map @m | map { k : addr [. port], … }`: the target comes from a map. */
  map?: NatMap;
  /**
   * `… : KEY map { k : port, … }`: the port comes from a map of its own, after an address or an
   * address map (`dnat to tcp dport map { … } : tcp dport map { … }`); `map` then maps to addresses only.
   */
  portMap?: NatMap;
  /** `ip addr . port to …` (nft's STMT_NAT_F_CONCAT): the target is an address . port concatenation. */
  concat?: At;
  /** `ip prefix to … map …` (NF_NAT_RANGE_NETMAP): the address range maps prefix to prefix. */
  netmap?: At;
  flags: number;
}

export interface MasqStmt extends At {
  t: 'masq' | 'redir';
  port?: PortRange;
  /** `redirect to :KEY map { k : port, … }`: the port comes from a map. */
  map?: NatMap;
  flags: number;
}

export interface MarkSetStmt extends At {
  t: 'markset';
  target: 'meta' | 'ct';
  value?: number;
  src?: 'meta' | 'ct';
  binop?: 'and' | 'or' | 'xor';
  operand?: number;
  /** `… << N` / `… >> N` after the source (and its binop): a bitwise shift. */
  shift?: { op: 'lshift' | 'rshift'; n: number };
}

export type Stmt = MatchStmt | CounterStmt | VerdictStmt | NatStmt | MasqStmt | MarkSetStmt | KeyedStmt | DynsetStmt
  | MarkMapStmt | DupMapStmt
  | ExprStmt;

/** A statement given as the expressions nft emits for it. */
export interface ExprStmt extends At {
  t: 'expr';
  exprs: Expr[];
  /** The network protocol it needs (in inet nft adds `meta nfproto` for it). */
  l3?: 'ip' | 'ip6';
  /** The transport protocol it needs (nft adds `meta l4proto` for it). */
  l4?: number;
  /** Nothing may follow it. */
  terminal?: boolean;
  /** A plain `reject`: in inet after an ip/ip6 match nft uses that protocol's port-unreachable. */
  defaultReject?: boolean;
  /** Its dependencies go right before it, not at the head of the rule (payload statements). */
  depHere?: boolean;
  /** Needs a transport protocol match before it (tproxy). */
  needsL4?: boolean;
}

export interface RuleAst {
  stmts: Stmt[];
  comment?: string;
}

// ---- keys, set references and maps (src/rules/keyed.ts) ---------------------

/** A key that is not a packet field: a number generator or a hash, a 32-bit integer in host order. */
export type Gen =
  | { g: 'numgen'; mode: 'inc' | 'random'; mod: number; offset?: number }
  | { g: 'jhash'; of: KeyPart[]; mod: number; seed?: number; offset?: number }
  | { g: 'symhash'; mod: number; offset?: number };

/** One part of a (possibly concatenated) key: `ip daddr`, `th dport`, `numgen inc mod 2`. */
export type KeyPart = ({ p: 'field'; field: Field; /** `ip6 saddr and ::ffff map …`: the address masked first. */ mask?: string }
  | { p: 'gen'; gen: Gen }) & At;

export type MapVerdict = 'accept' | 'drop' | 'return' | 'continue' | 'jump' | 'goto';

/** What a map element maps to: a verdict (vmap) or NAT target values (address [. port]). */
export type MapData =
  | ({ d: 'verdict'; verdict: MapVerdict; chain?: string } & At)
  | ({ d: 'value'; parts: Elem[] } & At)
  /** An object map's element: the name of the table's object (`80 : "c80"`). */
  | ({ d: 'obj'; name: string } & At);

/** One element of an anonymous set or map: a value per key part, and the data of a map. */
export interface KeyElem extends At {
  parts: Elem[];
  /** `* : data`: a map's catch-all element (no key). */
  catchall?: true;
  data?: MapData;
}

/** What a key is looked up in: a named set or map, an anonymous one, or (a generator) one value. */
export type SetRhs =
  | ({ k: 'named'; name: string } & At)
  | ({ k: 'anon'; elems: KeyElem[] } & At)
  | ({ k: 'value'; elem: Elem } & At);

/**
 * A match or verdict map whose key is a concatenation, a generator, or whose right-hand side is a
 * named set: `ip daddr @s`, `ip daddr . tcp dport { … }`, `… vmap { … }`, `numgen inc mod 2 0`.
 */
export interface KeyedStmt extends At {
  t: 'keyed';
  key: KeyPart[];
  op: MatchOp;
  opAt?: At;
  /** A verdict map: the lookup's result is the verdict. */
  vmap: boolean;
  rhs: SetRhs;
}

export interface NatMap extends At {
  key: KeyPart[];
  rhs: Extract<SetRhs, { k: 'named' | 'anon' }>;
  /** Set by the compiler's evaluation: a transport protocol is known here, so ports may be mapped. */
  l4Known?: boolean;
}

/** `add @set { KEY [timeout T] }` / `update @set { … }`: the packet path adds the key to a named set. */
export interface DynsetStmt extends At {
  t: 'dynset';
  op: 'add' | 'update';
  set: Extract<SetRhs, { k: 'named' }>;
  key: KeyPart[];
  /** Milliseconds. */
  timeout?: number;
  timeoutAt?: At;
  /** The key as written when it holds constants (`ip saddr . 22`): `key` then holds its fields only. */
  keyItems?: (KeyPart | DynsetConst)[];
  /** `: DATA` (a map): expressions (`ip daddr`, `ip saddr . tcp dport`), or one constant of the map's data type. */
  data?: KeyPart[] | DynsetConst;
  /** The statements the element added gets (`limit rate 10/second`, `counter`). */
  stmts?: StatefulExpr[];
  stmtsAt?: At;
  /** `meter NAME [size N] { … }`: `set` names the set the rule makes for itself. */
  meter?: { size?: number };
}

/** A value in a dynset's key or data, of the type of the set's part at its place. */
export type DynsetConst = { constant: string } & At;

/** `meta/ct mark set numgen …|jhash …|symhash …` or `… set KEY map { k : mark, … } | map @m`. */
export interface MarkMapStmt extends At {
  t: 'markmap';
  target: 'meta' | 'ct';
  /** `ct zone set KEY map { k : N }`: the ct zone (16 bits) instead of the mark. */
  zone?: true;
  /** `counter name KEY map @m` and friends: the named object of this type the key maps to, instead of a mark. */
  obj?: ObjType;
  /** `ip daddr set KEY map { … }`: the header field the map's result is stored into, instead of a mark. */
  store?: Field;
  key: KeyPart[];
  /** Absent: the generator's value itself. */
  rhs?: Extract<SetRhs, { k: 'named' | 'anon' }>;
}

/** `dup to KEY map { k : address, … } | map @m [device NAME]`: the copy's destination from a map. */
export interface DupMapStmt extends At {
  t: 'dupmap';
  key: KeyPart[];
  rhs: Extract<SetRhs, { k: 'named' | 'anon' }>;
  /** The output interface's index (`device NAME`). */
  dev?: number;
}
