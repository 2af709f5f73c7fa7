/**
 * Batch.createsAll (src/netlink/batch.ts), noted as ops are queued: whether a batch lies wholly in
 * tables it creates (`create table`), which the generation guard commits without the generation
 * (test/netlink/guard-create.test.ts has the kernel's side).
 */
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import type { Family } from '../../src/netlink/expr.js';

const accept = [{ kind: 'immediate' as const, dreg: 0, verdict: 'accept' as const }];
const at = (family: Family, table: string) => ({ family, table });
const rule = (family: Family, table: string) => ({ ...at(family, table), chain: 'c', exprs: accept });

describe('a batch confined to tables it creates', () => {
  it('is one when every op lies in a created table, in whatever order they come', () => {
    const b = new Batch().create('table', { family: 'ip', name: 'a' }).add('chain', { ...at('ip', 'a'), name: 'c' });
    for (let i = 0; i < 100; i++) b.add('rule', rule('ip', 'a'));
    expect(b.createsAll).toBe(true);
    // Two tables, the second's ops queued before its create, then the first's again.
    const two = new Batch().create('table', { family: 'ip', name: 'a' }).add('chain', { ...at('ip', 'a'), name: 'c' })
      .add('chain', { ...at('inet', 'a'), name: 'c' }).create('table', { family: 'inet', name: 'a' }).add('rule', rule('ip', 'a'));
    expect(two.createsAll).toBe(true);
  });

  it('is not one without a create, with another table op, or with an op in a table it does not create', () => {
    expect(new Batch().createsAll).toBe(false);
    expect(new Batch().add('table', { family: 'ip', name: 'a' }).add('chain', { ...at('ip', 'a'), name: 'c' }).createsAll).toBe(false);
    const added = new Batch().create('table', { family: 'ip', name: 'a' }).add('table', { family: 'ip', name: 'b' });
    expect(added.createsAll).toBe(false);
    const deleted = new Batch().delete('table', { family: 'ip', name: 'b' }).create('table', { family: 'ip', name: 'a' });
    expect(deleted.createsAll).toBe(false);
    // The last op only, after a long run in the created table: the same name in another family, another name.
    for (const [family, table] of [['inet', 'a'], ['ip', 'b']] as const) {
      const b = new Batch().create('table', { family: 'ip', name: 'a' }).add('chain', { ...at('ip', 'a'), name: 'c' });
      for (let i = 0; i < 100; i++) b.add('rule', rule('ip', 'a'));
      expect(b.add('rule', rule(family, table)).createsAll).toBe(false);
    }
    // An op in another table between two of the created one's.
    const between = new Batch().create('table', { family: 'ip', name: 'a' }).add('rule', rule('ip', 'a'))
      .add('rule', rule('ip', 'b')).add('rule', rule('ip', 'a'));
    expect(between.createsAll).toBe(false);
  });
});

describe('the tables a batch lies in', () => {
  it('names each table once, a table op\'s own table too, in order of its first op', () => {
    const b = new Batch().add('rule', rule('ip', 'a')).add('rule', rule('ip', 'a')).add('rule', rule('inet', 'a'))
      .delete('table', { family: 'ip', name: 'gone' }).add('rule', rule('ip', 'a')).add('element', { ...at('ip', 'b'), set: 's', elements: [] });
    expect(b.tables).toEqual([
      { family: 'ip', name: 'a' }, { family: 'inet', name: 'a' }, { family: 'ip', name: 'gone' }, { family: 'ip', name: 'b' },
    ]);
    expect(new Batch().tables).toEqual([]);
  });
});
