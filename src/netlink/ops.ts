/**
 * The operations of a batch, one per kernel message (add, create, insert, replace, delete and
 * flush of tables, chains, rules, sets, elements and objects), and how an error names one.
 */
import type { Expr, Family } from './expr.js';
import type { Chain, NftObj, NftSet, Rule, SetElement, Table } from './objects.js';

export type TableOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'table' }
  & Pick<Table, 'family' | 'name'> & Partial<Pick<Table, 'flags' | 'handle' | 'userdata'>>;
/** A bound chain is added by id alone (flags BINDING, no name), and its rules by that id (chainId). */
export type ChainOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'chain' }
  & Pick<Chain, 'family' | 'table' | 'name'> & Partial<Omit<Chain, 'family' | 'table' | 'name' | 'use'>>;
export type BoundChainOp = Omit<ChainOp, 'name'> & { name?: undefined; id: number; flags: number };
export type RuleOp = { verb: 'add' | 'insert' | 'replace' | 'delete'; object: 'rule' }
  & Pick<Rule, 'family' | 'table' | 'chain'> & Partial<Omit<Rule, 'family' | 'table' | 'chain' | 'bound'>>;
export type BoundRuleOp = Omit<RuleOp, 'chain'> & { chain?: undefined; chainId: number };
export type SetOp = { verb: 'add' | 'create' | 'delete' | 'flush'; object: 'set' }
  & Pick<NftSet, 'family' | 'table' | 'name'> & Partial<Omit<NftSet, 'family' | 'table' | 'name'>>;
export type ElementOp = {
  verb: 'add' | 'delete'; object: 'element'; family: Family; table: string; set: string;
  setId?: number; elements: SetElement[];
};

/** A named stateful object: add (or create) with its data, delete by name (or handle). */
export type ObjOp = { verb: 'add' | 'create' | 'delete'; object: 'obj' }
  & Pick<NftObj, 'family' | 'table' | 'name'> & { type: NftObj['type'] & string; handle?: number; userdata?: string; data?: NftObj['data'] };

/**
 * A rule added at the end of its chain whose expressions come encoded already: `encoded` is the
 * NFTA_RULE_EXPRESSIONS attribute encodeExprs() gives for exactly the expressions `exprs` reads
 * (the compile cache's, checked when it was stored, src/config/compile-cache.ts). The encoder
 * copies the bytes and the batch's check does not walk the expressions again; `exprs` makes them
 * only when something reads it (a description, a follow-up compare), the same frozen list the
 * desired chain holds.
 */
export class EncodedRuleOp {
  // The same for every op: on the prototype (below), not in each of an install's 10,000 objects,
  // which live from the plan to the commit's follow-up and are copied by each scavenge meanwhile.
  declare readonly verb: 'add';
  declare readonly object: 'rule';
  // Fields a rule op may have, undefined: the encoder's hints find none of them set.
  declare readonly handle: undefined;
  declare readonly position: undefined;
  declare readonly id: undefined;
  declare readonly positionId: undefined;
  declare readonly chainId: undefined;
  declare readonly compat: undefined;
  declare readonly digest: undefined;
  constructor(readonly family: Family, readonly table: string, readonly chain: string, readonly encoded: Buffer,
    readonly userdata: string | undefined, private readonly exprsOf: (at: number) => Expr[], private readonly at: number) {}

  get exprs(): Expr[] {
    return this.exprsOf(this.at);
  }
}
for (const [k, value] of Object.entries({ verb: 'add', object: 'rule', handle: undefined, position: undefined, id: undefined,
  positionId: undefined, chainId: undefined, compat: undefined, digest: undefined })) {
  Object.defineProperty(EncodedRuleOp.prototype, k, { value, enumerable: true });
}

export type Op = TableOp | ChainOp | BoundChainOp | RuleOp | BoundRuleOp | SetOp | ElementOp | ObjOp;
export type Verb = Op['verb'];

/** A short nft-style description of an op, for error messages and logs. */
export function describeOp(op: Op): string {
  switch (op.object) {
    case 'table': return `${op.verb} table ${op.family} ${op.name}`;
    case 'chain': return `${op.verb} chain ${op.family} ${op.table} ${op.name ?? `(bound chain, chain id ${op.id})`}`;
    case 'rule': {
      const at = op.handle !== undefined ? ` handle ${op.handle}`
        : op.position !== undefined ? ` position ${op.position}`
        : op.positionId !== undefined ? ` position id ${op.positionId}` : '';
      return `${op.verb} rule ${op.family} ${op.table} ${op.chain ?? `(bound chain, chain id ${op.chainId})`}${at}`;
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
