/**
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
