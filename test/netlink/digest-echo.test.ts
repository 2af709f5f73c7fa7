/**
 * What the keeper learns without decoding (so a change costs what it changes): rule digests, equal exactly when the rules'
 * structural keys are (counter values left out; none for a lookup of an anonymous set), in full
 * and digest-only dumps alike; and a commit with `echo` that hands back the handles the kernel
 * gave the batch's new rules, as a dump then shows them.
 */
import { describe, expect, it } from 'vitest';
import { Batch, open } from '../../src/index.js';
import { compileRule, ruleKey } from '../../src/rules/index.js';
import { withNetns } from '../helpers/netns.js';

describe('rule digests', () => {
  it('equal for the same rule whatever its counter says, different for another rule, none for an anonymous set', async () => {
    await withNetns(async (ns) => {
      ns.nft(`add table ip t
add chain ip t c
add rule ip t c ip saddr 10.0.0.1 counter packets 0 bytes 0 return comment "x"
add rule ip t c ip saddr 10.0.0.1 counter packets 5 bytes 900 return comment "x"
add rule ip t c ip saddr 10.0.0.2 counter packets 0 bytes 0 return comment "x"
add rule ip t c ip saddr 10.0.0.1 counter return comment "y"
add rule ip t c ip saddr { 10.0.0.1, 10.0.0.3 } return
add rule ip t c ip saddr 10.0.0.1 counter packets 0 bytes 0 accept comment "x"
`);
      const s = open({ netns: ns.path });
      try {
        const rules = await s.listRules({ family: 'ip', table: 't', digests: true });
        const [a, b, c, d, anon, e] = rules.map((r) => r.digest);
        expect(a).toMatch(/^[0-9a-f]{32}$/);
        expect(b).toBe(a);
        for (const other of [c, d, e]) expect(other).not.toBe(a);
        expect(new Set([c, d, e]).size).toBe(3);
        expect(anon).toBeUndefined();
        // Equal digests, equal keys (what the keeper relies on).
        expect(ruleKey(rules[0]!)).toBe(ruleKey(rules[1]!));
        // The digest-only dump says the same, with the handles, chain by chain.
        const only = await s.listRuleDigests({ family: 'ip', table: 't' });
        expect(only).toEqual([{ chain: 'c', handles: rules.map((r) => r.handle), digests: rules.map((r) => r.digest ?? '') }]);
        expect(await s.listRuleDigests({ family: 'ip', table: 't', chain: 'c' })).toEqual(only);
        // A plain dump carries none.
        expect((await s.listRules({ family: 'ip', table: 't' })).every((r) => r.digest === undefined)).toBe(true);
      } finally {
        s.close();
      }
    }, 'digest');
  });
});

describe('commit with echo', () => {
  it('returns each new rule\'s handle by op index, as the dump then shows; a replace keeps its handle', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      try {
        const R = (t: string) => compileRule(t, { family: 'ip', table: 't', chain: 'c' }).exprs;
        const at = { family: 'ip' as const, table: 't', chain: 'c' };
        const r1 = await s.commit(new Batch().add('table', { family: 'ip', name: 't' }).add('chain', { family: 'ip', table: 't', name: 'c' })
          .add('rule', { ...at, exprs: R('ip saddr 10.0.0.1 return') }).add('rule', { ...at, exprs: R('ip saddr 10.0.0.2 return') }), { echo: true });
        let dumped = await s.listRules({ family: 'ip', table: 't' });
        expect(r1).toEqual({ handles: new Map([[2, dumped[0]!.handle!], [3, dumped[1]!.handle!]]) });
        const r2 = await s.commit(new Batch()
          .replace('rule', { ...at, handle: dumped[1]!.handle!, exprs: R('ip saddr 10.0.0.3 return') })
          .add('rule', { ...at, position: dumped[0]!.handle!, exprs: R('ip saddr 10.0.0.4 return') }), { echo: true, expectGeneration: s.generation() });
        dumped = await s.listRules({ family: 'ip', table: 't' });
        expect(r2).toEqual({ handles: new Map([[0, dumped[2]!.handle!], [1, dumped[1]!.handle!]]) });
        // Without echo nothing comes back.
        expect(await s.commit(new Batch().add('rule', { ...at, exprs: R('ip saddr 10.0.0.5 return') }))).toBeUndefined();
        // A batch past the 64 messages that are each acked (a group of owners) still echoes every rule.
        const group = new Batch();
        for (let i = 0; i < 300; i++) group.add('rule', { ...at, exprs: R(`ip saddr 10.1.${i >> 8}.${i & 255} return`) });
        const r3 = await s.commit(group, { echo: true });
        dumped = await s.listRules({ family: 'ip', table: 't' });
        expect(dumped).toHaveLength(304);
        expect(r3).toEqual({ handles: new Map(dumped.slice(4).map((x, i) => [i, x.handle!])) });
        // An install of thousands of rules echoes every one too, and with digests each echoed rule's
        // digest (held) is the one of the bytes sent, and the one a dump then gives.
        const big = new Batch();
        for (let i = 0; i < 5000; i++) big.add('rule', { ...at, exprs: R(`ip saddr 10.2.${i >> 8}.${i & 255} counter return`) });
        const r4 = await s.commit(big, { echo: true, digests: true });
        const all = await s.listRules({ family: 'ip', table: 't', digests: true });
        expect(all).toHaveLength(5304);
        expect(r4).toEqual({ handles: new Map(all.slice(304).map((x, i) => [i, x.handle!])), digests: all.slice(304).map((x) => x.digest),
          held: all.slice(304).map((x) => x.digest) });
      } finally {
        s.close();
      }
    }, 'echo');
  });

  it('a rule that looks up an anonymous set: no digest, but its digest with the set unnamed, equal in what was sent and what the kernel echoed', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      try {
        const at = { family: 'ip' as const, table: 't', chain: 'c' };
        const batch = new Batch().add('table', { family: 'ip', name: 't' }).add('chain', { family: 'ip', table: 't', name: 'c' })
          .add('chain', { family: 'ip', table: 't', name: 'x' });
        let setId = 1;
        const texts = ['ip saddr { 10.0.0.1, 10.0.0.3 } return', 'ip saddr { 10.0.0.7, 10.0.0.9 } return', 'numgen random mod 2 vmap { 0 : jump x, 1 : goto x }',
          'ip saddr 10.0.0.1 return', 'ip daddr . tcp dport { 192.0.2.1 . 80, 192.0.2.2 . 443 } accept'];
        const ruleOps: number[] = [];
        for (const t of texts) {
          const c = compileRule(t, { ...at, setIdBase: setId });
          setId += c.sets.length;
          for (const x of c.sets) batch.add('set', { ...x, family: 'ip', table: 't' });
          ruleOps.push(batch.length);
          batch.add('rule', { ...at, exprs: c.exprs });
        }
        const r = await s.commit(batch, { echo: true, digests: true });
        const dumped = await s.listRules({ family: 'ip', table: 't', chain: 'c', digests: true });
        const [set1, set2, vmap, plain, concat] = ruleOps;
        // A dump gives no digest for them, and neither does the commit (the one a dump would give).
        for (const i of [set1, set2, vmap, concat]) expect(r!.digests![i!]).toBe('');
        expect(dumped.map((x) => x.digest)).toEqual([undefined, undefined, undefined, r!.digests![plain!], undefined]);
        // Unnamed: what was sent and what the kernel holds give the same one, for every such rule.
        for (const i of [set1, set2, vmap, concat]) {
          expect(r!.unnamed![i!]).toMatch(/^[0-9a-f]{32}$/);
          expect(r!.held![i!]).toBe(r!.unnamed![i!]);
        }
        // Only for those rules; a rule with a digest is held by it.
        expect(r!.unnamed![plain!]).toBeUndefined();
        expect(r!.held![plain!]).toBe(r!.digests![plain!]);
        // It leaves the set out, elements and all: two rules that differ only in their anonymous set's
        // elements give the same, which is why it proves a rule only beside the batch that made its set.
        expect(r!.unnamed![set1!]).toBe(r!.unnamed![set2!]);
        expect(new Set([set1, vmap, concat].map((i) => r!.unnamed![i!])).size).toBe(3);
      } finally {
        s.close();
      }
    }, 'unnamed');
  });

  it('cut by a full receive buffer: the batch went through, and says so without handles (the caller reads instead)', async () => {
    // A receive buffer kept to 64 KiB holds a few hundred echoed rules, not thousands: the kernel
    // drops the rest (ENOBUFS) after the batch committed. That is no "outcome unknown": an echo
    // only follows a commit that went through.
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path, receiveBufferLimit: 64 * 1024 });
      try {
        const at = { family: 'ip' as const, table: 't', chain: 'c' };
        await s.commit(new Batch().add('table', { family: 'ip', name: 't' }).add('chain', { family: 'ip', table: 't', name: 'c' }));
        const g = s.generation();
        const big = new Batch();
        for (let i = 0; i < 5000; i++) {
          big.add('rule', { ...at, exprs: compileRule(`ip saddr 10.3.${i >> 8}.${i & 255} counter return`, at).exprs });
        }
        const r = await s.commit(big, { echo: true, digests: true, expectGeneration: g });
        expect(r).toMatchObject({ echoCut: true });
        expect(r && 'handles' in r).toBe(false);
        expect(r && 'held' in r).toBe(false);
        expect(s.generation()).toBe(g + 1);
        expect(await s.listRules({ family: 'ip', table: 't' })).toHaveLength(5000);
        // A refused batch echoes nothing: still its refusal, nothing changed.
        const bad = new Batch();
        for (let i = 0; i < 5000; i++) bad.add('rule', { ...at, chain: 'missing', exprs: compileRule('ip saddr 10.4.0.1 return', at).exprs });
        await expect(s.commit(bad, { echo: true, digests: true })).rejects.toMatchObject({ errnoName: 'ENOENT' });
        expect(s.generation()).toBe(g + 1);
      } finally {
        s.close();
      }
    }, 'echocut');
  });
});
