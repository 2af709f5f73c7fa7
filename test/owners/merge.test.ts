/**
 * mergeOwners against itself from scratch (pure logic): the merge after a change copies the
 * unchanged owners' runs from the previous merge of the same config tables; whatever the changes
 * (owners added, removed, put anew, several at once, none, out of id order), it must give what a
 * merge of the same owners with no previous merge gives, the same chain and rule objects in the
 * same order.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { type TableConfig } from '../../src/model/desired.js';
import { compileOwner, mergeOwners, type Owner } from '../../src/owners/index.js';
import { derivationOf } from '../../src/model/derivation.js';
import { tempDir } from '../helpers/tmp.js';
import { ownersYaml } from './fixtures.js';

/** Owner i: 0-2 chains, jumps into prerouting and/or postrouting (or none). */
function spec(i: number, v: number) {
  const n = (i + v) % 3;
  const chains = Array.from({ length: n }, (_, k) => ({ name: `c${k}`, rules: Array.from({ length: 1 + ((i + k + v) % 3) }, (_, r) => `ip daddr 10.${i}.${v}.${r} return`) }));
  const jumps: Record<string, string[]> = {};
  if (n > 0 && (i + v) % 2 === 0) jumps.postrouting = [`ip saddr 10.1.${i}.${v} jump c0`];
  if (n > 0 && (i + v) % 3 !== 1) jumps.prerouting = [`ip saddr 10.2.${i}.${v} jump c0`, `ip saddr 10.3.${i}.${v} jump c${n - 1}`];
  return { chains, jumps };
}

const shape = (tables: TableConfig[]) => tables.map((t) => t.chains.map((c) => [c, c.name, ...c.rules]));

describe('mergeOwners after a change', () => {
  it('equals a merge from scratch, object for object, over random runs of changes', () => {
    const dir = tempDir('merge');
    const config = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
    const oc = config.owners!;
    const table = config.tables[0]!;
    const make = (i: number, v: number) => compileOwner(`o${String(i).padStart(3, '0')}`, spec(i, v), oc, table);
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), Math.floor(seed / 65536) % n);
    let owners: Owner[] = [];
    let out = 0;
    let derived = 0;
    let previous: TableConfig | undefined;
    for (let step = 0; step < 400; step++) {
      const next = new Map(owners.map((o) => [o.id, o]));
      const changes = rand(10) === 0 ? 0 : 1 + (rand(4) === 0 ? rand(12) : 0);
      for (let c = 0; c < changes; c++) {
        const i = rand(60);
        const id = `o${String(i).padStart(3, '0')}`;
        if (next.has(id) && rand(3) === 0) next.delete(id);
        else next.set(id, make(i, rand(5)));
      }
      const sorted = [...next.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
      // Now and then the owners come in another order (as loadOwners gives them): merged sorted all the same.
      const given = rand(8) === 0 ? [...sorted].reverse() : sorted;
      if (given !== sorted && given.length > 1) out++;
      const got = mergeOwners(config.tables, oc, given);
      const want = mergeOwners([...config.tables], oc, sorted);  // another tables array: no previous merge
      expect(shape(got), `step ${step}`).toEqual(shape(want));
      for (const [t, ct] of got.entries()) {
        ct.chains.forEach((c, k) => {
          expect(c.rules.length).toBe(want[t]!.chains[k]!.rules.length);
          c.rules.forEach((r, x) => expect(r).toBe(want[t]!.chains[k]!.rules[x]));
          if (!oc.dispatch.includes(c.name)) expect(c).toBe(want[t]!.chains[k]);
        });
      }
      // How the owners table was made from the previous one (src/model/derivation.ts), when it says:
      // exactly the chains that are other objects, the names that went, and a dispatch chain's
      // rules as its previous rules with the splices' runs replaced.
      const now = got[0]!;
      const d = derivationOf(now);
      if (d) {
        derived++;
        expect(d.from, `step ${step}`).toBe(previous);
        const before = new Map(d.from.chains.map((c) => [c.name, c]));
        const changed = now.chains.filter((c) => before.get(c.name) !== c);
        expect(d.changed, `step ${step}`).toEqual(changed);
        const names = new Set(now.chains.map((c) => c.name));
        expect([...d.removed].sort(), `step ${step}`).toEqual(d.from.chains.map((c) => c.name).filter((n) => !names.has(n)).sort());
        for (const [name, e] of d.edited) {
          const c = now.chains.find((x) => x.name === name)!;
          expect(e.from).toBe(before.get(name));
          const rebuilt: unknown[] = [];
          let p = 0;
          for (const h of e.splices) {
            expect(h.fromStart).toBeGreaterThanOrEqual(p);
            rebuilt.push(...e.from.rules.slice(p, h.fromStart), ...c.rules.slice(h.start, h.end));
            p = h.fromEnd;
          }
          rebuilt.push(...e.from.rules.slice(p));
          expect(rebuilt.length, `step ${step} ${name}`).toBe(c.rules.length);
          rebuilt.forEach((r, x) => expect(r, `step ${step} ${name} rule ${x}`).toBe(c.rules[x]));
        }
        // A dispatch chain changed without a derivation of its rules would be compared whole: never the case here.
        for (const c of d.changed) if (oc.dispatch.includes(c.name) && before.has(c.name)) expect(d.edited.has(c.name)).toBe(true);
      }
      previous = now;
      owners = sorted;
    }
    expect(out).toBeGreaterThan(10);
    expect(derived).toBeGreaterThan(300);
  });
});
