/**
 * A batch is one kernel transaction: the operations queued here travel in a
 * single BATCH_BEGIN ... BATCH_END and take effect all together or not at
 * all. Verbs mirror nft's (add, create, insert, replace, delete, flush), and
 * each operation is checked when it is queued (validate.ts), so a malformed
 * one never reaches the kernel and its error names the op and the field.
 */
import type { Expr, Family } from './expr.js';
import type { Chain, NftObj, NftSet, Rule, SetElement, Table } from './objects.js';
import type { ChainOp, ElementOp, ObjOp, Op, RuleOp, SetOp, TableOp } from './ops.js';
import { validateOp } from './validate.js';

/** Queues operations for one atomic commit. */
export class Batch {
  readonly ops: Op[] = [];
  /** The next NFTA_RULE_ID a planner gives a rule of this batch: unique among its rules (kernels before 6.0 do not match the chain). */
  nextRuleId = 1;
  // The tables the ops lie in, noted as each op is queued: a walk over an install's 10,000 ops at
  // commit time ran once per process, in the interpreter (~5 ms of a one-shot apply's CPU).
  private readonly inTables = new Map<string, { family: Family; name: string }>();
  private readonly created = new Set<string>();
  private tableOtherwise = false;
  private lastFamily: string | undefined;
  private lastTable: string | undefined;

  /** Queues `op` after validating it; returns this for chaining. */
  push(op: Op): this {
    validateOp(op, this.ops.length);
    this.ops.push(op);
    const name = op.object === 'table' ? op.name : op.table;
    // A batch's ops come by table: a key made only where the table changes.
    if (name !== this.lastTable || op.family !== this.lastFamily) {
      this.lastFamily = op.family;
      this.lastTable = name;
      const key = `${op.family} ${name}`;
      if (!this.inTables.has(key)) this.inTables.set(key, { family: op.family, name });
    }
    if (op.object === 'table') {
      if (op.verb === 'create') this.created.add(`${op.family} ${op.name}`);
      else this.tableOtherwise = true;
    }
    return this;
  }

  /** The tables this batch's ops lie in (a table op's own table too), each once, in order of first op. */
  get tables(): Array<{ family: Family; name: string }> {
    return [...this.inTables.values()];
  }

  /**
   * Every op lies in a table the batch creates (`create table`), and no table is touched another
   * way (guard.ts commits such a batch without the generation).
   */
  get createsAll(): boolean {
    if (this.created.size === 0 || this.tableOtherwise) return false;
    for (const k of this.inTables.keys()) if (!this.created.has(k)) return false;
    return true;
  }

  add(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  add(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  add(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this;
  add(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  add(object: 'element', e: Omit<ElementOp, 'verb' | 'object'>): this;
  add(object: 'obj', o: Omit<ObjOp, 'verb' | 'object'>): this;
  add(object: Op['object'], o: object): this {
    return this.push({ ...o, verb: 'add', object } as Op);
  }

  create(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  create(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  create(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  create(object: 'table' | 'chain' | 'set', o: object): this {
    return this.push({ ...o, verb: 'create', object } as Op);
  }

  /** Inserts a rule before `position` (a handle), or at the start of the chain. */
  insert(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this {
    return this.push({ ...r, verb: 'insert', object });
  }

  /** Replaces the rule with `handle` in place. */
  replace(object: 'rule', r: Omit<RuleOp, 'verb' | 'object'>): this {
    return this.push({ ...r, verb: 'replace', object });
  }

  delete(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  delete(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  delete(object: 'rule', r: Omit<RuleOp, 'verb' | 'object' | 'exprs'> & { exprs?: Expr[] }): this;
  delete(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  delete(object: 'element', e: Omit<ElementOp, 'verb' | 'object'>): this;
  delete(object: 'obj', o: Omit<ObjOp, 'verb' | 'object' | 'data'>): this;
  delete(object: Op['object'], o: object): this {
    return this.push({ ...o, verb: 'delete', object } as Op);
  }

  /** flush table: every rule of its chains; flush chain: its rules; flush set: its elements. */
  flush(object: 'table', t: Omit<TableOp, 'verb' | 'object'>): this;
  flush(object: 'chain', c: Omit<ChainOp, 'verb' | 'object'>): this;
  flush(object: 'set', s: Omit<SetOp, 'verb' | 'object'>): this;
  flush(object: 'table' | 'chain' | 'set', o: object): this {
    return this.push({ ...o, verb: 'flush', object } as Op);
  }

  get length(): number {
    return this.ops.length;
  }
}
