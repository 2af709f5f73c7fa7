/**
 * A batch is one kernel transaction: the operations queued here travel in a
 * single BATCH_BEGIN ... BATCH_END and take effect all together or not at
 * all. Verbs mirror nft's (add, create, insert, replace, delete, flush), and
 * each operation is checked when it is queued (validate.ts), so a malformed
 * one never reaches the kernel and its error names the op and the field.
 */
import type { Expr, Family } from './expr.js';
import type { Chain, NftObj, NftSet, Rule, SetElement, Table } from './objects.js';
import { validateOp } from './validate.js';

export type TableOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'table' }
  & Pick<Table, 'family' | 'name'> & Partial<Pick<Table, 'flags' | 'handle' | 'userdata'>>;
export type ChainOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'chain' }
  & Pick<Chain, 'family' | 'table' | 'name'> & Partial<Omit<Chain, 'family' | 'table' | 'name' | 'use'>>;
export type RuleOp = { verb: 'add' | 'insert' | 'replace' | 'delete'; object: 'rule' }
  & Pick<Rule, 'family' | 'table' | 'chain'> & Partial<Omit<Rule, 'family' | 'table' | 'chain'>>;
export type SetOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'set' }
  & Pick<NftSet, 'family' | 'table' | 'name'> & Partial<Omit<NftSet, 'family' | 'table' | 'name'>>;
export type ElementOp = {
  verb: 'add' | 'delete'; object: 'element'; family: Family; table: string; set: string;
  setId?: number; elements: SetElement[];
};

/** A named stateful object: add (or create) with its data, delete by name (or handle). */
export type ObjOp = { verb: 'add' | 'create' | 'delete'; object: 'obj' }
  & Pick<NftObj, 'family' | 'table' | 'name'> & { type: NftObj['type'] & string; handle?: number; userdata?: string; data?: NftObj['data'] };

export type Op = TableOp | ChainOp | RuleOp | SetOp | ElementOp | ObjOp;
export type Verb = Op['verb'];

/** A short nft-style description of an op, for error messages and logs. */
export function describeOp(op: Op): string {
  switch (op.object) {
    case 'table': return `${op.verb} table ${op.family} ${op.name}`;
    case 'chain': return `${op.verb} chain ${op.family} ${op.table} ${op.name}`;
    case 'rule': {
      const at = op.handle !== undefined ? ` handle ${op.handle}`
        : op.position !== undefined ? ` position ${op.position}`
        : op.positionId !== undefined ? ` position id ${op.positionId}` : '';
      return `${op.verb} rule ${op.family} ${op.table} ${op.chain}${at}`;
    }
    case 'set': return `${op.verb} set ${op.family} ${op.table} ${setName(op.name, op.id)}`;
    case 'element': return `${op.verb} element ${op.family} ${op.table} ${setName(op.set, op.setId)}`;
    case 'obj': return `${op.verb} ${op.type} ${op.family} ${op.table} ${op.name}`;
  }
}

/**
 * An anonymous set's name is a template the kernel fills in ('__set%d', '__map%d'); the real name
 * is known only once the commit is through, so a message says which kind and its batch id instead.
 */
function setName(name: string, id: number | undefined): string {
  if (!name.includes('%')) return name;
  return `(anonymous ${name.startsWith('__map') ? 'map' : 'set'}${id !== undefined ? `, set id ${id}` : ''})`;
}

/** Queues operations for one atomic commit. */
export class Batch {
  readonly ops: Op[] = [];

  /** Queues `op` after validating it; returns this for chaining. */
  push(op: Op): this {
    validateOp(op, this.ops.length);
    this.ops.push(op);
    return this;
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
