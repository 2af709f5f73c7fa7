/**
 * EXPR_SCHEMA (src/netlink/expr.ts) is the one description of the expression
 * kinds: the addon's table is generated from it and the validator derived
 * from it. These tests hold the generated C++ to the schema, and check the
 * validator field by field for every kind, so a new kind is covered by
 * adding its entry. That each kind survives the real kernel is
 * roundtrip.test.ts's job; the last test here makes sure it has a case.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HEADER_PATH, renderSchemaHeader } from '../../scripts/gen-schema.js';
import { Batch, EXPR_KINDS, EXPR_SCHEMA, InvalidOperationError, type FieldSpec, type KindSpec, type Op } from '../../src/index.js';
import { checkField } from '../../src/netlink/validate.js';

const kinds = Object.entries(EXPR_SCHEMA) as [string, KindSpec][];

/** A value each field type accepts. */
function sample(f: FieldSpec): unknown {
  switch (f.type) {
    case 'enum': return Object.keys(f.enum!.values)[0];
    case 'str': return 'x';
    case 'data': case 'blob': return '0a0b';
    default: return 1;
  }
}

/** Values each field type refuses, with the reason. */
function wrong(f: FieldSpec): unknown[] {
  switch (f.type) {
    case 'enum': return ['no-such-name', 1.5, true];
    case 'str': return ['', 'a\0b', 7, ...(f.max ? ['x'.repeat(f.max + 1)] : [])];
    case 'data': case 'blob': return ['0A', 'abc', 12, '00'.repeat((f.max ?? 64) + 1)];
    case 'reg': return [-1, 32, 1.5, '1'];
    case 'u8': return [256, -1, '1'];
    case 'u16': return [0x10000, -1];
    case 'u32': return [2 ** 32, -1, 0.5];
    case 'i32': return [2 ** 31, -(2 ** 31) - 1];
    case 'u64': return [-1, 2 ** 53, 1.5];
  }
}

/** The smallest valid expression of a kind: its required fields and one of each exactly-one pair. */
function minimal(kind: string, k: KindSpec): Record<string, unknown> {
  const e: Record<string, unknown> = { kind };
  for (const [name, f] of Object.entries(k.fields)) if (!f.optional) e[name] = sample(f);
  for (const [a] of k.exactlyOne ?? []) e[a] = sample(k.fields[a]!);
  // immediate: a verdict that needs no chain, instead of data
  if (kind === 'immediate') {
    delete e.data;
    e.verdict = 'accept';
  }
  return e;
}

function refusal(e: Record<string, unknown>): InvalidOperationError | undefined {
  const op = { verb: 'add', object: 'rule', family: 'ip', table: 't', chain: 'c', exprs: [e] } as Op;
  try {
    new Batch().push(op);
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidOperationError);
    return err as InvalidOperationError;
  }
}

describe('expression schema', () => {
  it('native/expr_schema.gen.h is what `npm run gen:schema` writes from the schema', () => {
    expect(readFileSync(HEADER_PATH, 'utf8'), 'stale: run npm run gen:schema').toBe(renderSchemaHeader());
  });

  it('the generated table names every typed kind and every field with its libnftnl attribute', () => {
    const header = renderSchemaHeader();
    for (const [kind, k] of kinds) {
      if (k.nftnl === undefined) {
        expect(header).not.toContain(`{"${kind}"`);
        continue;
      }
      expect(header).toContain(`{"${kind}", `);
      for (const [js, f] of Object.entries(k.fields)) expect(header).toContain(`{"${js}", NFTNL_EXPR_${k.nftnl}_${f.attr}, `);
    }
    expect(EXPR_KINDS).toEqual(kinds.map(([kind]) => kind));
  });

  describe.each(kinds)('%s', (kind, k) => {
    it('its minimal form is accepted', () => {
      expect(refusal(minimal(kind, k))).toBeUndefined();
    });

    it('each required field is required', () => {
      for (const [name, f] of Object.entries(k.fields)) {
        if (f.optional) continue;
        const e = minimal(kind, k);
        delete e[name];
        expect(refusal(e)?.field).toBe(`exprs[0].${name}`);
      }
    });

    it('each field refuses values outside its type, naming the field', () => {
      for (const [name, f] of Object.entries(k.fields)) {
        for (const v of wrong(f)) {
          expect(checkField(f, v), `${kind}.${name} = ${JSON.stringify(v)}`).toBeDefined();
          const err = refusal({ ...minimal(kind, k), [name]: v });
          expect(err?.field, `${kind}.${name} = ${JSON.stringify(v)}`).toBe(`exprs[0].${name}`);
        }
      }
    });

    it('a field it does not have is refused', () => {
      expect(refusal({ ...minimal(kind, k), nosuchfield: 1 })?.message).toMatch(/not a field of a/);
    });

    it('exactly one of each exclusive pair', () => {
      for (const [a, b] of k.exactlyOne ?? []) {
        const both = { ...minimal(kind, k), [a]: sample(k.fields[a]!), [b]: sample(k.fields[b]!) };
        expect(refusal(both)?.message).toMatch(/exactly one of/);
        const neither = minimal(kind, k);
        delete neither[a];
        delete neither[b];
        expect(refusal(neither)?.message).toMatch(/exactly one of|needs/);
      }
    });

    it('has a real-kernel case in roundtrip.test.ts', () => {
      const roundtrip = readFileSync(new URL('./roundtrip.test.ts', import.meta.url), 'utf8');
      expect(roundtrip).toContain(`kind: '${kind}'`);
    });
  });

  it('enums take a raw number too (the decoder gives one for a value it cannot name)', () => {
    expect(refusal({ kind: 'meta', key: 200, dreg: 1 })).toBeUndefined();
    expect(refusal({ kind: 'cmp', sreg: 1, op: 3, data: '00' })).toBeUndefined();
  });

  it('immediate: jump and goto need a chain (by name, or by batch id: a bound chain), other verdicts take none', () => {
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'jump' })?.message).toMatch(/needs a 'chain' or a 'chainId'/);
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'goto', chain: 'x' })).toBeUndefined();
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'jump', chainId: 3 })).toBeUndefined();
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'jump', chain: 'x', chainId: 3 })?.message).toMatch(/needs a 'chain' or a 'chainId'/);
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'accept', chain: 'x' })?.message).toMatch(/only go with/);
    expect(refusal({ kind: 'immediate', dreg: 0, verdict: 'drop', chainId: 1 })?.message).toMatch(/only go with/);
  });
});
