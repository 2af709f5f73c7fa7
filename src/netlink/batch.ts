/**
 * A batch is one kernel transaction: the operations queued here travel in a
 * single BATCH_BEGIN ... BATCH_END and take effect all together or not at
 * all. Verbs mirror nft's (add, create, insert, replace, delete, flush), and
 * each operation is checked when it is queued, so a malformed one never
 * reaches the kernel and its error names the op and the field.
 */
import { InvalidOperationError } from '../errors.js';
import { EXPR_KINDS, type Expr, type Family } from './expr.js';
import type { Chain, NftSet, Rule, SetElement, Table } from './objects.js';

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

export type Op = TableOp | ChainOp | RuleOp | SetOp | ElementOp;
export type Verb = Op['verb'];

const FAMILIES = new Set<string>(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);
const KINDS = new Set<string>(EXPR_KINDS);
const VERBS: Record<Op['object'], readonly string[]> = {
  table: ['add', 'create', 'delete', 'flush'],
  chain: ['add', 'create', 'delete', 'flush'],
  rule: ['add', 'insert', 'replace', 'delete'],
  set: ['add', 'create', 'delete', 'flush'],
  element: ['add', 'delete'],
};
const HEX = /^(?:[0-9a-f]{2})*$/;
// NFT_NAME_MAXLEN is 256 including the terminating NUL.
const MAX_NAME = 255;

/** A short nft-style description of an op, for error messages and logs. */
export function describeOp(op: Op): string {
  switch (op.object) {
    case 'table': return `${op.verb} table ${op.family} ${op.name}`;
    case 'chain': return `${op.verb} chain ${op.family} ${op.table} ${op.name}`;
    case 'rule': {
      const at = op.handle !== undefined ? ` handle ${op.handle}`
        : op.position !== undefined ? ` position ${op.position}` : '';
      return `${op.verb} rule ${op.family} ${op.table} ${op.chain}${at}`;
    }
    case 'set': return `${op.verb} set ${op.family} ${op.table} ${op.name}`;
    case 'element': return `${op.verb} element ${op.family} ${op.table} ${op.set}`;
  }
}

/** Throws InvalidOperationError when `op` cannot be encoded. */
export function validateOp(op: Op, index: number): void {
  const fail = (field: string, reason: string): never => {
    throw new InvalidOperationError(index, field, reason);
  };
  if (typeof op !== 'object' || op === null) fail('op', 'must be an object');
  if (!(op.object in VERBS)) fail('object', `must be one of ${Object.keys(VERBS).join(', ')}`);
  if (!VERBS[op.object].includes(op.verb)) {
    fail('verb', `${op.object} takes ${VERBS[op.object].join(', ')}, not '${String(op.verb)}'`);
  }
  if (!FAMILIES.has(op.family)) fail('family', `unknown family '${String(op.family)}'`);
  const name = (field: string, v: unknown, required: boolean) => {
    if (v === undefined && !required) return;
    if (typeof v !== 'string' || v.length === 0) fail(field, 'must be a non-empty string');
    else if (Buffer.byteLength(v) > MAX_NAME) fail(field, `longer than ${MAX_NAME} bytes`);
    else if (v.includes('\0')) fail(field, 'contains a NUL byte');
  };
  const u32 = (field: string, v: unknown) => {
    if (v === undefined) return;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) fail(field, 'must be a u32');
  };
  const handle = (field: string, v: unknown) => {
    if (v === undefined) return;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) fail(field, 'must be a positive integer');
  };
  const hex = (field: string, v: unknown) => {
    if (v === undefined) return;
    if (typeof v !== 'string' || !HEX.test(v)) fail(field, 'must be lowercase hex bytes');
  };

  switch (op.object) {
    case 'table':
      name('name', op.name, true);
      u32('flags', op.flags);
      handle('handle', op.handle);
      hex('userdata', op.userdata);
      break;
    case 'chain':
      name('table', op.table, true);
      name('name', op.name, true);
      handle('handle', op.handle);
      if (op.hook !== undefined) {
        if (op.type === undefined) fail('type', 'a base chain needs a type');
        if (typeof op.priority !== 'number' || !Number.isInteger(op.priority)) {
          fail('priority', 'a base chain needs an integer priority');
        }
      }
      hex('userdata', op.userdata);
      break;
    case 'rule':
      name('table', op.table, true);
      name('chain', op.chain, true);
      handle('handle', op.handle);
      handle('position', op.position);
      hex('userdata', op.userdata);
      if ((op.verb === 'replace' || op.verb === 'delete') && op.handle === undefined) {
        fail('handle', `${op.verb} rule needs the rule's handle`);
      }
      if (op.verb !== 'delete') {
        if (!Array.isArray(op.exprs)) fail('exprs', 'must be an array of expressions');
        else validateExprs(op.exprs, (f, r) => fail(`exprs${f}`, r));
      }
      break;
    case 'set':
      name('table', op.table, true);
      name('name', op.name, true);
      u32('id', op.id);
      u32('flags', op.flags);
      if (op.verb === 'add' || op.verb === 'create') {
        u32('keyType', op.keyType);
        u32('keyLen', op.keyLen);
        if (op.keyLen === undefined) fail('keyLen', 'a new set needs a key length');
      }
      (op.elements ?? []).forEach((e, i) => validateElement(e, `elements[${i}]`, fail));
      break;
    case 'element':
      name('table', op.table, true);
      name('set', op.set, true);
      u32('setId', op.setId);
      if (!Array.isArray(op.elements)) fail('elements', 'must be an array');
      op.elements.forEach((e, i) => validateElement(e, `elements[${i}]`, fail));
      break;
  }
}

function validateElement(e: SetElement, at: string, fail: (f: string, r: string) => never): void {
  if (typeof e !== 'object' || e === null) fail(at, 'must be an object');
  for (const k of ['key', 'keyEnd', 'data', 'userdata'] as const) {
    const v = e[k];
    if (v !== undefined && (typeof v !== 'string' || !HEX.test(v))) fail(`${at}.${k}`, 'must be lowercase hex bytes');
  }
}

function validateExprs(exprs: readonly Expr[], fail: (field: string, reason: string) => never): void {
  // NFT_RULE_MAXEXPRS
  if (exprs.length > 128) fail('', 'a rule holds at most 128 expressions');
  exprs.forEach((e, i) => {
    if (typeof e !== 'object' || e === null || !KINDS.has(e.kind)) {
      fail(`[${i}].kind`, `unknown expression kind '${String((e as { kind?: unknown })?.kind)}'`);
    }
    for (const [k, v] of Object.entries(e)) {
      if (k === 'kind' || v === undefined) continue;
      if (typeof v === 'number' && !Number.isFinite(v)) fail(`[${i}].${k}`, 'must be a finite number');
      if (typeof v !== 'number' && typeof v !== 'string') fail(`[${i}].${k}`, 'must be a number or a string');
    }
  });
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
