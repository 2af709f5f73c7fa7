/**
 * A big batch encodes an expression object the previous rule had at the same place once (native
 * encode.cc, PreviousExprs): every rule the kernel then holds must be the one its expressions say,
 * whether its expressions are its predecessor's objects, equal copies, or the same objects at
 * other places, across the encoder's handle scopes, and an error still names the op and the
 * expression.
 *
 * A small commit takes a frozen rule's expressions encoded once (socket.ts, encodeExprs): the rule
 * the kernel then holds must be the one the expressions say, the first time (encoded and cached)
 * and every time after (from the cache), at any position; a rule whose expressions are not frozen
 * is encoded afresh every time, so changing them between commits changes the rule.
 */
import { describe, expect, it } from 'vitest';
import { Batch, open } from '../../src/index.js';
import { loadAddon } from '../../src/netlink/addon.js';
import type { Expr } from '../../src/netlink/expr.js';
import { compileRule, ruleKey } from '../../src/rules/index.js';
import { withNetns } from '../helpers/netns.js';

const at = { family: 'ip' as const, table: 't', chain: 'c' };
const exprsOf = (t: string) => compileRule(t, at).exprs;
const frozen = (x: readonly Expr[]): Expr[] => Object.freeze(x.map((e) => Object.freeze({ ...e }))) as Expr[];

describe('pre-encoded rule expressions', () => {
  it('re-add the same frozen rule, first encoded then from the cache, at its position; unfrozen ones are read afresh', async () => {
    await withNetns(async (ns) => {
      ns.nft(`add table ip t
add chain ip t c
add rule ip t c ip saddr 10.0.0.1 return
add rule ip t c ip saddr 10.0.0.3 return`);
      const s = open({ netns: ns.path });
      try {
        const mid = frozen(exprsOf('ip saddr 10.0.0.2 ip daddr 192.0.2.1 counter return'));
        const key = ruleKey({ exprs: mid });
        for (let k = 0; k < 3; k++) {
          const [first] = await s.listRules(at);
          await s.commit(new Batch().add('rule', { ...at, exprs: mid, userdata: '0102', position: first!.handle! }));
          const rules = await s.listRules(at);
          expect(rules.map((r) => ruleKey({ exprs: r.exprs }))).toEqual([ruleKey({ exprs: exprsOf('ip saddr 10.0.0.1 return') }), key,
            ruleKey({ exprs: exprsOf('ip saddr 10.0.0.3 return') })]);
          expect(rules[1]!.userdata).toBe('0102');
          await s.commit(new Batch().delete('rule', { ...at, handle: rules[1]!.handle! }));
        }
        // Not frozen: the same array changed in place must give the changed rule.
        const loose = exprsOf('ip saddr 10.0.0.9 return');
        await s.commit(new Batch().add('rule', { ...at, exprs: loose }));
        loose.splice(0, loose.length, ...exprsOf('ip saddr 10.0.0.8 return'));
        await s.commit(new Batch().add('rule', { ...at, exprs: loose }));
        const tail = (await s.listRules(at)).slice(-2).map((r) => ruleKey({ exprs: r.exprs }));
        expect(tail).toEqual([ruleKey({ exprs: exprsOf('ip saddr 10.0.0.9 return') }), ruleKey({ exprs: exprsOf('ip saddr 10.0.0.8 return') })]);
      } finally {
        s.close();
      }
    }, 'preenc');
  });

  it('a big batch of rules sharing expression objects installs each rule as its expressions say', async () => {
    await withNetns(async (ns) => {
      ns.nft('add table ip t\nadd chain ip t c');
      const s = open({ netns: ns.path });
      try {
        // Shared objects, as the keeper's compacted rules have them, in places that change from rule to rule.
        const load = exprsOf('ip saddr 10.0.0.1 return')[0]!;
        const counter = Object.freeze({ kind: 'counter' }) as Expr;
        const verdicts = ['return', 'accept', 'drop'].map((v) => exprsOf(`ip saddr 10.0.0.1 ${v}`).at(-1)!);
        const texts: string[] = [];
        const lists: Expr[][] = [];
        for (let i = 0; i < 700; i++) {
          const addr = `10.1.${i >> 8}.${i & 255}`;
          const text = i % 7 === 3 ? `ip saddr ${addr} ${['return', 'accept', 'drop'][i % 3]}`
            : i % 11 === 5 ? `counter ip saddr ${addr} ${['return', 'accept', 'drop'][i % 3]}`
              : `ip saddr ${addr} counter ${['return', 'accept', 'drop'][i % 3]}`;
          texts.push(text);
          // The compiled rule with its shared parts swapped for the shared objects (some rules keep their own copies).
          lists.push(exprsOf(text).map((e) => (i % 13 === 0 ? e : e.kind === 'counter' ? counter
            : JSON.stringify(e) === JSON.stringify(load) ? load
              : verdicts.find((v) => JSON.stringify(v) === JSON.stringify(e)) ?? e)));
        }
        const batch = new Batch();
        for (const exprs of lists) batch.add('rule', { ...at, exprs });
        await s.commit(batch);
        const got = (await s.listRules(at)).map((r) => ruleKey({ exprs: r.exprs }));
        expect(got).toEqual(texts.map((t) => ruleKey({ exprs: exprsOf(t) })));
        // The encoder's error for a bad expression where the previous rule had a good object still
        // names it (straight to the addon: the batch's validation would refuse it first).
        const bad = Array.from({ length: 300 }, (_, i) => ({ verb: 'add', object: 'rule', ...at, exprs: i === 299 ? [load, { kind: 'nosuch' }] : [load, counter] }));
        await expect(Promise.resolve().then(() => s.nativeSocket.commit(bad as never, undefined, false, undefined, false))).rejects.toThrow(/operation 299: exprs\[1\]: unknown kind 'nosuch'/);
        expect(await s.listRules(at)).toHaveLength(700);
      } finally {
        s.close();
      }
    }, 'shared');
  });

  it('encodeExprs gives the same bytes for equal expressions and refuses what the encoder refuses', () => {
    const { encodeExprs } = loadAddon();
    const a = encodeExprs(exprsOf('ip saddr 10.0.0.2 return'));
    expect(a.length).toBeGreaterThan(4);
    // NFTA_RULE_EXPRESSIONS (4) with NLA_F_NESTED (0x8000), its length the buffer's.
    expect(a.readUInt16LE(2)).toBe(0x8004);
    expect(a.readUInt16LE(0)).toBe(a.length);
    expect(encodeExprs(exprsOf('ip saddr 10.0.0.2 return')).equals(a)).toBe(true);
    expect(encodeExprs(exprsOf('ip saddr 10.0.0.3 return')).equals(a)).toBe(false);
    expect(() => encodeExprs([{ kind: 'nosuch' }])).toThrow(/unknown kind 'nosuch'/);
  });
});
