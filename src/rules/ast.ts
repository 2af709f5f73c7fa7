/** The parsed form of a rule text, before dependencies, merging and linearization. */
import type { Field } from './fields.js';

/** Where a piece of the text is, for error messages. */
export interface At {
  col: number;
  raw: string;
}

/** One right-hand side value. Byte strings are hex in the field's kernel byte order. */
export type Elem =
  | ({ k: 'value'; hex: string } & At)
  | ({ k: 'prefix'; hex: string; plen: number } & At)
  | ({ k: 'range'; lo: string; hi: string } & At)
  /** An interface name ending in '*': the bytes before the star. */
  | ({ k: 'wildcard'; prefix: string } & At);

export type Rhs = Elem | ({ k: 'set'; elems: Elem[] } & At);

export type MatchOp = 'implicit' | 'eq' | 'neq';

export interface MatchStmt extends At {
  t: 'match';
  field: Field;
  op: MatchOp;
  opAt?: At;
  /** `& mask` before the operator (marks, ct state/status). */
  mask?: string;
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
  flags: number;
}

export interface MasqStmt extends At {
  t: 'masq' | 'redir';
  port?: PortRange;
  flags: number;
}

export interface MarkSetStmt extends At {
  t: 'markset';
  target: 'meta' | 'ct';
  value?: number;
  src?: 'meta' | 'ct';
  binop?: 'and' | 'or' | 'xor';
  operand?: number;
}

export type Stmt = MatchStmt | CounterStmt | VerdictStmt | NatStmt | MasqStmt | MarkSetStmt;

export interface RuleAst {
  stmts: Stmt[];
  comment?: string;
}
