/**
 * SentRuleExprs: a commit's rule expressions as the addon sent them (CommitOptions.exprs), for the
 * compile cache's store after the daemon's start-up install (encodeRuleExprs, socket.ts).
 */
import { EncodedRuleOp, type Op } from './ops.js';
import type { Expr } from './expr.js';

/**
 * The expressions of a commit's rule ops as the addon sent them: each one's NFTA_RULE_EXPRESSIONS
 * attribute, the bytes encodeExprs gives for the same expressions (one encoder, native/encode.cc),
 * where it lies in the batch's bytes (`at`: per op, its start and end). Looked up by the expression
 * list itself, the op's `exprs` (the config's compiled rule's, src/keeper/plan.ts), where it and its
 * expressions are frozen: a list that could have changed since the commit, or that no op of it
 * sent, has none.
 */
export class SentRuleExprs {
  private byList: Map<readonly Expr[], number> | undefined;
  constructor(private readonly ops: readonly Op[], private readonly bytes: Buffer, private readonly at: Uint32Array) {}

  of(exprs: readonly Expr[]): Buffer | undefined {
    const i = (this.byList ??= this.index()).get(exprs);
    if (i === undefined || !exprs.every((e) => Object.isFrozen(e))) return undefined;
    return this.bytes.subarray(this.at[2 * i], this.at[2 * i + 1]);
  }

  /** Each frozen list a rule op sent, by the op's index (made at the first look-up, not at the commit). */
  private index(): Map<readonly Expr[], number> {
    const m = new Map<readonly Expr[], number>();
    for (let i = 0; i < this.ops.length; i++) {
      const op = this.ops[i]!;
      // (an EncodedRuleOp's exprs would make its rule: it came encoded, from the compile cache)
      if (op.object !== 'rule' || op.verb === 'delete' || op instanceof EncodedRuleOp || this.at[2 * i + 1]! <= this.at[2 * i]!) continue;
      if (Array.isArray(op.exprs) && Object.isFrozen(op.exprs)) m.set(op.exprs, i);
    }
    return m;
  }
}
