/**
 * Statements that use a named stateful object of the table (nft's objref): `counter name "c"`,
 * `quota name "q"`, `limit name "l"`, `synproxy name "s"`, `ct helper set "ftp"`,
 * `ct timeout set "t"`, `ct expectation set "e"` and `meta secmark set "s"`. Each is one objref
 * expression naming the object and its type (NFT_OBJECT_*), as nft 1.0.6 sends it; the object
 * itself is declared in the table (src/config/stateful-objects.ts).
 */
import type { ObjrefExpr } from '../netlink/expr.js';
import { OBJ_TYPE, type ObjType } from '../netlink/objects.js';
import type { At, ExprStmt, MarkMapStmt } from './ast.js';
import { parseObjMap, type KeyedParser } from './keyed.js';
import { objTypeName, objrefUse } from './objnames.js';
import type { Cursor } from './statements.js';

const OBJ_NAME = /^[A-Za-z_.][A-Za-z0-9_./-]*$/;

/** The object type a statement starting at the cursor uses, if it is an objref statement. */
function objrefType(c: Cursor, word: string): { type: ObjType; words: number } | undefined {
  const t1 = c.peek(1), t2 = c.peek(2);
  const nameFollows = (t: typeof t1) => t.kind === 'string' || (t.kind === 'word' && OBJ_NAME.test(t.text));
  switch (word) {
    case 'counter': case 'quota': case 'limit': case 'synproxy':
      // `counter name tcp dport map { … }` is an object map: not this file's
      if (!c.isWord(t1, 'name') || !nameFollows(t2) || (t2.kind === 'word' && mapFollows(c, 3))) return undefined;
      return { type: word, words: 2 };
    case 'ct':
      if (!c.isWord(t1, 'helper', 'timeout', 'expectation') || !c.isWord(t2, 'set') || mapFollows(c, 3)) return undefined;
      if (t1.text === 'helper' && c.peek(3).kind !== 'string' && !(c.peek(3).kind === 'word' && OBJ_NAME.test(c.peek(3).text))) return undefined;
      return { type: `ct ${t1.text}` as ObjType, words: 3 };
    case 'meta':
      // meta secmark set "NAME": a name (quoted) is the object; a number would be the mark itself
      if (!c.isWord(t1, 'secmark') || !c.isWord(t2, 'set') || c.peek(3).kind !== 'string') return undefined;
      return { type: 'secmark', words: 3 };
    default: return undefined;
  }
}

/** The object type of an object-map statement at the cursor (`counter name tcp dport map @m`), if it is one. */
function objMapType(c: Cursor, word: string): { type: ObjType; words: number } | undefined {
  const t1 = c.peek(1), t2 = c.peek(2);
  switch (word) {
    case 'counter': case 'quota': case 'limit': case 'synproxy':
      return c.isWord(t1, 'name') && t2.kind === 'word' && mapFollows(c, 2) ? { type: word, words: 2 } : undefined;
    case 'ct':
      return c.isWord(t1, 'helper', 'timeout', 'expectation') && c.isWord(t2, 'set') && mapFollows(c, 3)
        ? { type: `ct ${t1.text}` as ObjType, words: 3 } : undefined;
    case 'meta':
      return c.isWord(t1, 'secmark') && c.isWord(t2, 'set') && mapFollows(c, 3) ? { type: 'secmark', words: 3 } : undefined;
    default: return undefined;
  }
}

/** Whether a `map` keyword follows the words from token k on (`name tcp dport map …`, `name ip saddr . tcp dport map …`). */
function mapFollows(c: Cursor, k: number): boolean {
  for (let i = k; i < k + 16; i++) {
    const t = c.peek(i);
    if (t.kind !== 'word') return false;
    if (t.text === 'map') return true;
  }
  return false;
}

/** An objref statement at the cursor (its first word `word`), or undefined when it is not one. */
export function parseObjrefStatement(c: Cursor & KeyedParser, word: string, at: At): ExprStmt | MarkMapStmt | undefined {
  const map = objMapType(c, word);
  if (map) {
    for (let i = 0; i < map.words; i++) c.next();
    return parseObjMap(c, map.type, at);
  }
  const use = objrefType(c, word);
  if (!use) return undefined;
  for (let i = 0; i < use.words; i++) c.next();
  const n = c.peek();
  if (n.kind !== 'string' && !(n.kind === 'word' && OBJ_NAME.test(n.text))) c.fail(n, `the name of a ${use.type} object`);
  if (n.text.length === 0 || Buffer.byteLength(n.text) > 255) c.fail(n, 'an object name of 1 to 255 bytes');
  c.next();
  const e: ObjrefExpr = { kind: 'objref', type: OBJ_TYPE[use.type], name: n.text };
  return { t: 'expr', exprs: [e], ...at };
}

/** The text nft lists for an objref of a named object, or undefined (an object map, or an unknown type). */
export function renderObjref(e: ObjrefExpr): string | undefined {
  if (e.name === undefined || e.type === undefined || e.set !== undefined) return undefined;
  const type = objTypeName(e.type);
  if (!type || e.name.includes('"')) return undefined;
  return `${objrefUse(type)} "${e.name}"`;
}

/** The objects (type and name) a rule's expressions use by name: the config checks that the table declares them. */
export function objectsUsed(exprs: readonly { kind: string }[]): { type: ObjType; name: string }[] {
  const out: { type: ObjType; name: string }[] = [];
  for (let i = 0; i < exprs.length; i++) {
    const e = exprs[i]!;
    if (e.kind !== 'objref') continue;
    const o = e as ObjrefExpr;
    const type = o.type !== undefined ? objTypeName(o.type) : undefined;
    if (type && o.name !== undefined) out.push({ type, name: o.name });
  }
  return out;
}
