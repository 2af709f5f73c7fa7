/**
 * plainTables, the loader's check of an nft file's document without zod, against zod itself
 * (CONFIG_SCHEMA): whatever it accepts, zod accepts with the same data; what it does not accept
 * goes to zod, which words the errors. Documents from the nft reader on peer files, then the
 * same documents with one value or key changed at random to something the schema may refuse.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { CONFIG_SCHEMA, plainTables } from '../../src/config/config.js';
import { readNftFile } from '../../src/config/nftfile.js';
import { calico, kubeProxy } from '../helpers/peers/index.js';

const docs = [kubeProxy({ services: 20 }).text, kubeProxy({ services: 5, family: 'ip6' }).text, calico().text]
  .map((text) => readNftFile(text, 'peer.nft').raw);
// A YAML table leaves out the lists it has none of (sets, maps, objects): the schema's defaults.
const yamlDoc = parse(readFileSync(new URL('../../examples/flannel.yaml', import.meta.url), 'utf8')) as { tables: Record<string, unknown>[] };

/** zod's data with its undefined-valued keys left out (plainTables does not write them). */
function defined(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(defined);
  if (typeof x !== 'object' || x === null) return x;
  return Object.fromEntries(Object.entries(x).filter(([, v]) => v !== undefined).map(([k, v]) => [k, defined(v)]));
}

const seen = { plain: 0, zod: 0 };

function agrees(raw: unknown): boolean {
  const plain = plainTables(raw);
  const zod = CONFIG_SCHEMA.safeParse(raw);
  if (plain === undefined) {
    seen.zod++;
    return true;
  }
  seen.plain++;
  expect(zod.success).toBe(true);
  expect(defined(plain)).toEqual(defined(zod.data));
  return true;
}

// values the schema refuses somewhere, and some it takes
const ODD_VALUES: unknown[] = [undefined, null, '', 'x y', 'a'.repeat(129), 'a'.repeat(256), 'ok', 'ip', 'arp', 'nat',
  'srcnat + 5', 'srcnat ++ 5', 'postrouting', 'ingress', 'drop', 'reject', 0, -1, 1.5, 2147483647, 2147483648, -2147483649,
  NaN, true, [], ['rule'], [1], {}, { name: 'x' },
  // a set's fields: its flags, policy, size and lengths
  'a'.repeat(64), 'a'.repeat(65), 'a'.repeat(512), 'a'.repeat(513), 'a/b.c-d_1', 'interval', 'performance', 'memory', '1h',
  ['interval'], ['interval', 'timeout'], ['interval', 'bogus'], [undefined], [''], ['a'.repeat(4096)], ['a'.repeat(4097)],
  // (a list with a hole: zod refuses it, and Array.prototype.every would skip it)
  [, 'interval'], 1, 4294967295, 4294967296, false, [{ name: 'c1', type: 'counter' }], [{ name: 'c1', type: 'bogus' }]];
const odd = fc.constantFrom<unknown>(...ODD_VALUES);
const SET_KEYS_TRIED = ['name', 'type', 'typeof', 'flags', 'timeout', 'gc-interval', 'size', 'policy', 'auto-merge', 'comment',
  'statements', 'elements', 'extra'];

describe('plainTables: the nft document check without zod', () => {
  it("accepts the nft reader's documents of peer files, as zod does", () => {
    for (const raw of docs) {
      expect(plainTables(raw)).toBeDefined();
      agrees(raw);
    }
  });

  it('accepts a YAML table without sets, maps or objects, as zod does with its defaults', () => {
    expect(yamlDoc.tables[0]).not.toHaveProperty('sets');
    expect(plainTables(yamlDoc)?.tables[0]).toMatchObject({ sets: [], maps: [], objects: [] });
    agrees(yamlDoc);
    const noChains = { tables: [{ family: 'ip', name: 't' }] };
    expect(plainTables(noChains)?.tables[0]?.chains).toEqual([]);
    agrees(noChains);
  });

  it('never accepts what zod refuses, nor gives other data: one value or key changed at random', () => {
    fc.assert(fc.property(fc.nat(), fc.nat(), fc.nat(), fc.constantFrom('table', 'chain', 'set', 'top'), odd,
      fc.constantFrom('family', 'name', 'protect', 'comment', 'sets', 'maps', 'objects', 'chains', 'type', 'hook', 'priority', 'policy',
        'rules', 'elements', 'timeout', 'size', 'flags', 'extra', 'gc', 'owners', 'env',
        'typeof', 'gc-interval', 'auto-merge', 'statements'),
      (d, ti, ci, where, value, key) => {
        const raw = structuredClone([...docs, yamlDoc][d % (docs.length + 1)]!) as unknown as { tables: Record<string, unknown>[] } & Record<string, unknown>;
        const t = raw.tables[ti % raw.tables.length]!;
        const chains = t.chains as Record<string, unknown>[];
        const sets = (t.sets ?? []) as Record<string, unknown>[];
        const target = where === 'top' ? raw : where === 'table' ? t : where === 'chain' ? chains[ci % chains.length]!
          : sets.length ? sets[ci % sets.length]! : t;
        target[key] = value;
        return agrees(raw);
      }), { numRuns: 3000 });
    // both ways were taken (a change zod takes, such as another valid name, stays plain)
    expect(seen.plain).toBeGreaterThan(100);
    expect(seen.zod).toBeGreaterThan(100);
  });

  it("never accepts a set zod refuses, nor gives other data: each of a set's fields, and a table's lists, given each odd value", () => {
    let plain = 0;
    for (const key of SET_KEYS_TRIED) {
      for (const value of ODD_VALUES) {
        const raw = structuredClone(docs[0]!) as unknown as { tables: { sets: Record<string, unknown>[] }[] };
        raw.tables[0]!.sets[0]![key] = value;
        agrees(raw);
        if (plainTables(raw) !== undefined) plain++;
      }
    }
    for (const key of ['sets', 'maps', 'objects']) {
      for (const value of ODD_VALUES) {
        const raw = structuredClone(docs[0]!) as unknown as { tables: Record<string, unknown>[] };
        raw.tables[0]![key] = value;
        agrees(raw);
      }
    }
    expect(plain).toBeGreaterThan(20);
  });

  it('leaves a rule that is not a string, a table that is not a plain object, and an inherited key to zod', () => {
    const raw = structuredClone(docs[2]!) as { tables: { chains: { rules: unknown[] }[] }[] };
    raw.tables[0]!.chains[0]!.rules.push(5);
    expect(plainTables(raw)).toBeUndefined();
    expect(plainTables({ tables: [Object.assign(Object.create({ extra: 1 }), docs[2]!.tables[0])] })).toBeUndefined();
    expect(plainTables({ tables: [new Map()] })).toBeUndefined();
    expect(plainTables([])).toBeUndefined();
  });
});
