/**
 * The desired state of one owned table, as the config builds it and the keeper, the owners and
 * the one-shot commands consume it: its chains with their compiled rules, its sets and objects.
 */
import type { Family, Hex } from '../netlink/expr.js';
import type { ChainType, Hook } from '../netlink/objects.js';
import type { CompiledRule } from '../rules/index.js';
import type { SetConfig } from './sets.js';
import type { ObjConfig } from './stateful-objects.js';

export interface ChainConfig {
  name: string;
  /** Base chains have all of type, hook and priority. */
  base?: { type: ChainType; hook: Hook; priority: number; policy: 'accept' | 'drop' };
  rules: { text: string; compiled: CompiledRule }[];
  /** NFTA_CHAIN_USERDATA: the chain's comment as nft encodes it. */
  userdata?: Hex;
}

export interface TableConfig {
  family: Family;
  name: string;
  protect: boolean;
  /** `flags dormant`: the table holds its chains unhooked (NFT_TABLE_F_DORMANT). */
  dormant?: boolean;
  /** NFTA_TABLE_USERDATA: the table's comment as nft encodes it. */
  userdata?: Hex;
  /** Named sets and maps, in the order they were written (the order nft creates them in). None: the table has none. */
  sets?: SetConfig[];
  /** Named stateful objects, in the order they were written. None: the table has none. */
  objects?: ObjConfig[];
  chains: ChainConfig[];
}

/** The rules of `tables`, counted chain by chain (a raw document's or a loaded config's). */
export function countRules(tables: readonly { chains: readonly { rules: readonly unknown[] }[] }[]): number {
  let n = 0;
  for (const t of tables) for (const c of t.chains) n += c.rules.length;
  return n;
}
