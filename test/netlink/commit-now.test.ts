/**
 * commitNow(): a small batch committed at once on the calling thread, without a promise (the
 * keeper's repair of a foreign change): the same transaction, echo and refusals as commit(),
 * returned or thrown; false, with nothing sent, for a big batch or a socket busy with a dump.
 */
import { describe, expect, it } from 'vitest';
import { Batch, GenerationMismatchError, NetlinkError, type Op } from '../../src/index.js';
import { matchAddr, OWNED, ownedSetup, withSocket } from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;
const where = { family: F, table: T, chain: C };
const rule = (addr: string): Op => ({ verb: 'add', object: 'rule', ...where, exprs: matchAddr('saddr', addr) });

describe('commitNow', () => {
  it('commits a small batch before it returns, and echoes the handles the kernel holds', async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const g = s.generation();
      const r = s.commitNow([rule('10.1.0.1'), rule('10.1.0.2')], { expectGeneration: g, echo: true });
      expect(r).not.toBe(false);
      expect(s.generation()).toBe(g + 1);
      // Appended at the end of the chain, after the setup's rules.
      const held = (await s.listRules(where)).map((x) => x.handle);
      expect(r && [...r.handles!.entries()]).toEqual([[0, held.at(-2)], [1, held.at(-1)]]);
      expect(s.commitNow([rule('10.1.0.3')])).toBeUndefined();  // no echo asked
      expect((await s.listRules(where)).length).toBe(held.length + 1);
    }, 'cnow');
  });

  it('throws what commit() rejects with: the guard\'s refusal, an op\'s refusal naming it, and changes nothing', async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const before = await s.listRules(where);
      const g = s.generation();
      expect(() => s.commitNow([rule('10.2.0.1')], { expectGeneration: g - 1 })).toThrow(GenerationMismatchError);
      let e: unknown;
      try {
        s.commitNow([rule('10.2.0.1'), { verb: 'delete', object: 'rule', ...where, handle: 99_999 }]);
      } catch (x) {
        e = x;
      }
      expect(e).toBeInstanceOf(NetlinkError);
      expect((e as NetlinkError).opIndex).toBe(1);
      expect((e as NetlinkError).errnoName).toBe('ENOENT');
      expect((e as NetlinkError).description).toBe(`delete rule ${F} ${T} ${C} handle 99999`);
      expect(s.generation()).toBe(g);
      expect(await s.listRules(where)).toEqual(before);
    }, 'cnowerr');
  });

  it('sends nothing and says false for a big batch, or while a dump holds the socket', async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const base = (await s.listRules(where)).length;
      // (not scaled down under the sanitizers: a smaller dump fits the inline datagrams and never holds the socket)
      const n = 2000;
      const many = Array.from({ length: n }, (_, i) => rule(`10.3.${i >> 8}.${i & 255}`));
      const g = s.generation();
      expect(s.commitNow(many.slice(0, 65))).toBe(false);
      expect(s.generation()).toBe(g);
      await s.commit(many);
      // A dump of n rules is more than the inline reads take: a worker finishes it, holding the
      // socket. The worker can finish before the next statement when this thread is preempted
      // right after queueing it (seen under load), so the busy case is tried up to five times:
      // it must say false at least once, and a false must have sent nothing.
      let held = base + n;
      let refused = 0;
      for (let i = 0; i < 5 && refused === 0; i++) {
        const g0 = s.generation();  // (before the dump: it waits for the socket)
        const dump = s.listRules(where);
        const r = s.commitNow([rule(`10.4.0.${i + 1}`)]);
        if (r === false) {
          refused++;
          expect(s.generation()).toBe(g0);
        } else {
          expect(r).toBeUndefined();
          held++;
        }
        expect((await dump).length).toBeGreaterThanOrEqual(base + n);
      }
      expect(refused).toBe(1);
      expect(s.commitNow([rule('10.4.1.1')])).toBeUndefined();
      expect((await s.listRules(where)).length).toBe(held + 1);
    }, 'cnowbusy');
  });
});
