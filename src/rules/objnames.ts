/**
 * The words nft uses for each stateful object type (NFT_OBJECT_*): in a rule that uses one by
 * name (objref.ts) and in an object map's statement (keyed.ts).
 */
import { OBJ_TYPE, type ObjType } from '../netlink/objects.js';

/** How each object type is used in a rule: the words before the object's name. */
const USE: Record<ObjType, string> = {
  counter: 'counter name', quota: 'quota name', limit: 'limit name', synproxy: 'synproxy name',
  'ct helper': 'ct helper set', 'ct timeout': 'ct timeout set', 'ct expectation': 'ct expectation set',
  secmark: 'meta secmark set',
};

const TYPE_BY_NUMBER = new Map<number, ObjType>(Object.entries(OBJ_TYPE).map(([k, v]) => [v, k as ObjType]));

/** The words before an object's name in a rule that uses one of `type`: `counter name`, `ct helper set`. */
export function objrefUse(type: ObjType): string {
  return USE[type];
}

/** The IR's name of an NFT_OBJECT_* type, if it models it. */
export function objTypeName(type: number): ObjType | undefined {
  return TYPE_BY_NUMBER.get(type);
}
