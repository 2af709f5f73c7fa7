/**
 * Commits: all or nothing, the generation guard, where errors point, big
 * batches whose acknowledgements do not fit the receive buffer, and input
 * refused before it reaches the kernel.
 */
import { describe, expect, it } from 'vitest';
import {
  Batch, GenerationMismatchError, InvalidOperationError, NetlinkError, open, type Expr, type Op,
} from '../../src/index.js';
import type { NativeSocket } from '../../src/netlink/addon.js';
import { withNetns } from '../helpers/netns.js';
import { ip4, listRuleset, loadIptablesForeign, matchAddr, OWNED, ownedSetup, scaled, withSocket } from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;

function addRule(exprs: Expr[], chain: string = C): Op {
  return { verb: 'add', object: 'rule', family: F, table: T, chain, exprs };
}

async function refusal(p: Promise<unknown>): Promise<NetlinkError> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(NetlinkError);
  return e as NetlinkError;
}

describe('atomicity', () => {
  const invalidThird: [string, Op, string][] = [
    ['a rule in a chain that does not exist', addRule(matchAddr('saddr', '10.9.9.9'), 'missing'), 'ENOENT'],
    ['dnat in a filter chain', addRule([{ kind: 'immediate', dreg: 1, data: ip4('10.0.0.1') },
      { kind: 'nat', type: 'dnat', family: 'ip', regAddrMin: 1 }], 'input'), 'EOPNOTSUPP'],
    ['creating a table that exists', { verb: 'create', object: 'table', family: F, name: T }, 'EEXIST'],
  ];

  it.each(invalidThird)('a batch whose op 2 is %s changes nothing and reports index 2', async (_what, bad, errno) => {
    await withSocket(async (s, ns) => {
      await s.commit([...ownedSetup(),
        { verb: 'add', object: 'chain', family: F, table: T, name: 'input', type: 'filter', hook: 'input', priority: 0 }]);
      loadIptablesForeign(ns, 100);
      const gen = s.generation();
      const before = listRuleset(ns);
      const e = await refusal(s.commit([
        { verb: 'flush', object: 'chain', family: F, table: T, name: C },
        addRule(matchAddr('saddr', '10.5.5.5')),
        bad,
        { verb: 'add', object: 'chain', family: F, table: T, name: 'later' },
        { verb: 'delete', object: 'table', family: 'ip', name: 'nat' },
      ]));
      expect(e.opIndex).toBe(2);
      expect(e.errnoName).toBe(errno);
      expect(e.operation).toBe('commit');
      expect(e.description).toMatch(/^(add rule ip nfkeeper (missing|input)|create table ip nfkeeper)$/);
      expect(e.message).toContain('operation 2');
      expect(s.generation()).toBe(gen);
      expect(listRuleset(ns)).toBe(before);
    }, 'atom');
  });

  it('reports every refusal of a batch, each with its own index', async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const e = await refusal(s.commit([
        addRule(matchAddr('saddr', '10.5.5.5'), 'nope1'),
        addRule(matchAddr('saddr', '10.5.5.6')),
        addRule(matchAddr('saddr', '10.5.5.7'), 'nope2'),
      ]));
      expect(e.opIndex).toBe(0);
      expect(e.refusals?.map((r) => [r.opIndex, r.errnoName])).toEqual([[0, 'ENOENT'], [2, 'ENOENT']]);
      expect(e.refusals?.[1]?.description).toBe('add rule ip nfkeeper nope2');
    }, 'atom');
  });

  it('attributes a refusal of the commit phase to the batch, not to op 0', async () => {
    // The kernel refuses an anonymous set that no rule binds only when the
    // batch commits, and acks that error with the sequence number of the
    // first message of the batch.
    await withSocket(async (s, ns) => {
      await s.commit(ownedSetup());
      const gen = s.generation();
      const before = listRuleset(ns);
      const e = await refusal(s.commit([
        addRule(matchAddr('saddr', '10.5.5.5')),
        { verb: 'add', object: 'set', family: F, table: T, name: '__set%d', flags: 0x3, keyType: 7, keyLen: 4,
          elements: [{ key: ip4('10.0.0.1') }] },
      ]));
      expect(e.opIndex).toBe(-1);
      expect(e.errnoName).toBe('EINVAL');
      expect(e.message).toMatch(/^batch commit/);
      expect(e.description).toBeUndefined();
      expect(s.generation()).toBe(gen);
      expect(listRuleset(ns)).toBe(before);
    }, 'atom');
  });
});

describe('the generation guard', () => {
  it('refuses a stale expectGeneration, changing nothing, and accepts the current one', async () => {
    await withSocket(async (s, ns) => {
      await s.commit(ownedSetup());
      const g0 = s.generation();
      // Someone else commits in between.
      ns.nft('add table ip other');
      const g1 = s.generation();
      expect(g1).toBe(g0 + 1);
      const before = listRuleset(ns);
      const batch = new Batch().add('rule', { family: F, table: T, chain: C, exprs: matchAddr('saddr', '10.7.7.7') });
      const e = await refusal(s.commit(batch, { expectGeneration: g0 }));
      expect(e).toBeInstanceOf(GenerationMismatchError);
      expect((e as GenerationMismatchError).expected).toBe(g0);
      expect(e.errnoName).toBe('ERESTART');
      expect(e.opIndex).toBe(-1);
      expect(s.generation()).toBe(g1);
      expect(listRuleset(ns)).toBe(before);

      await s.commit(batch, { expectGeneration: g1 });
      expect(s.generation()).toBe(g1 + 1);
      expect(await s.listRules({ family: F, table: T, chain: C })).toHaveLength(5);
    }, 'gen');
  });

  it('refuses a generation from the future', async () => {
    await withSocket(async (s) => {
      const g = s.generation();
      const e = await refusal(s.commit([{ verb: 'add', object: 'table', family: F, name: T }], { expectGeneration: g + 1 }));
      expect(e).toBeInstanceOf(GenerationMismatchError);
      expect(await s.listTables()).toEqual([]);
    }, 'gen');
  });
});

describe('big batches and the acknowledgement buffer', () => {
  // 1,000 under a quick sanitizer run: still far past the 64-message acks
  // limit and the 64 KiB receive buffer below.
  const N = scaled(10_000);
  const manyRules = (chain: string = C): Op[] =>
    Array.from({ length: N }, (_, i) => addRule(matchAddr('saddr', `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`), chain));

  it(`commits ${N} operations in one batch and leaves nothing unread on the socket`, async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const g = s.generation();
      await s.commit(manyRules());
      expect(s.generation()).toBe(g + 1);
      expect(await s.listRules({ family: F, table: T, chain: C })).toHaveLength(N + 4);
      // Nothing stale is left on the socket: the next requests still line up.
      expect(s.generation()).toBe(g + 1);
      await s.commit([addRule([{ kind: 'counter' }])]);
      expect(await s.listRules({ family: F, table: T, chain: C })).toHaveLength(N + 5);
    }, 'big');
  });

  it('a big batch asks for errors only and still names the failing op, in the middle and at the end', async () => {
    // Batches of more than 64 messages carry NLM_F_ACK only on their first
    // message; the kernel's error acks name the failing message's seq.
    await withSocket(async (s, ns) => {
      await s.commit(ownedSetup());
      const g = s.generation();
      const before = listRuleset(ns);
      for (const at of [N / 2, N - 1]) {
        const ops = manyRules();
        ops[at] = addRule(matchAddr('saddr', '10.200.0.1'), 'missing');
        const e = await refusal(s.commit(ops));
        expect(e.opIndex).toBe(at);
        expect(e.errnoName).toBe('ENOENT');
        expect(e.refusals).toHaveLength(1);
        expect(e.refusals![0]!.opIndex).toBe(at);
      }
      // Two bad ops: both reported, the first one first.
      const ops = manyRules();
      const [first, second] = [Math.round(N * 0.1234), Math.round(N * 0.7777)];
      ops[second] = addRule(matchAddr('saddr', '10.200.0.1'), 'missing');
      ops[first] = addRule(matchAddr('saddr', '10.200.0.2'), 'missing');
      const e = await refusal(s.commit(ops));
      expect(e.opIndex).toBe(first);
      expect(e.refusals!.map((r) => r.opIndex)).toEqual([first, second]);
      // Every op bad: 10,000 error acks, read across many recv() calls.
      const all = await refusal(s.commit(manyRules('missing')));
      expect(all.opIndex).toBe(0);
      expect(all.refusals).toHaveLength(N);
      expect(all.refusals!.every((r, i) => r.opIndex === i && r.errnoName === 'ENOENT')).toBe(true);
      // A stale generation on a big batch is still a GenerationMismatchError.
      const stale = await s.commit(manyRules(), { expectGeneration: g - 1 }).then(() => undefined, (x: unknown) => x);
      expect(stale).toBeInstanceOf(GenerationMismatchError);
      // The commit phase's own refusal is told apart from op 0's.
      const e3 = await refusal(s.commit([...manyRules(),
        { verb: 'add', object: 'set', family: F, table: T, name: '__set%d', flags: 0x3, keyType: 7, keyLen: 4,
          elements: [{ key: ip4('10.0.0.1') }] }]));
      expect(e3.opIndex).toBe(-1);
      expect(e3.errnoName).toBe('EINVAL');
      expect(s.generation()).toBe(g);
      expect(listRuleset(ns)).toBe(before);
      // And a good one commits; the socket is in step afterwards.
      await s.commit(manyRules(), { expectGeneration: g });
      expect(s.generation()).toBe(g + 1);
      expect(await s.listRules({ family: F, table: T, chain: C })).toHaveLength(N + 4);
    }, 'big');
  });

  it('with a receive buffer too small for the acks, a batch still reports its true outcome', async () => {
    // Each ack's skb is far bigger than its message: 10,000 acks do not fit in 128 KiB. The
    // kernel would drop most of them (ENOBUFS) while the batch commits, so the
    // socket asks for errors only and decides from those.
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path, receiveBufferLimit: 64 * 1024 });
      try {
        await s.commit(ownedSetup());
        const g = s.generation();
        await s.commit(manyRules());
        expect(s.generation()).toBe(g + 1);
        expect(await s.listRules({ family: F, table: T, chain: C })).toHaveLength(N + 4);

        // One bad op deep in the batch: found, and nothing changed.
        const before = listRuleset(ns);
        const ops = manyRules();
        ops[N * 0.9] = addRule(matchAddr('saddr', '10.200.0.1'), 'missing');
        const e = await refusal(s.commit(ops));
        expect(e.opIndex).toBe(N * 0.9);
        expect(e.errnoName).toBe('ENOENT');
        expect(s.generation()).toBe(g + 1);

        // Every op bad: far more error acks than fit. The first is reported;
        // it is certain that the batch failed, whatever was lost.
        const e2 = await refusal(s.commit(manyRules('missing')));
        expect(e2.opIndex).toBe(0);
        expect(e2.errnoName).toBe('ENOENT');
        expect(e2.message).toMatch(/lost/);
        expect(s.generation()).toBe(g + 1);
        expect(listRuleset(ns)).toBe(before);

        // The commit phase's own refusal is still told apart from op 0's.
        const e3 = await refusal(s.commit([...manyRules(),
          { verb: 'add', object: 'set', family: F, table: T, name: '__set%d', flags: 0x3, keyType: 7, keyLen: 4,
            elements: [{ key: ip4('10.0.0.1') }] }]));
        expect(e3.opIndex).toBe(-1);
        expect(e3.errnoName).toBe('EINVAL');
        expect(s.generation()).toBe(g + 1);
      } finally {
        s.close();
      }
    }, 'big');
  });
});

describe('error paths', () => {
  it('open() of a namespace path that does not exist fails with ENOENT', () => {
    let err: unknown;
    try {
      open({ netns: '/run/netns/nfk-test-does-not-exist' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NetlinkError);
    expect((err as NetlinkError).errnoName).toBe('ENOENT');
    expect((err as NetlinkError).operation).toBe('open');
    expect((err as NetlinkError).message).toContain('/run/netns/nfk-test-does-not-exist');
  });

  it('open() of a file that is not a network namespace fails with EINVAL', () => {
    expect(() => open({ netns: '/proc/self/status' })).toThrow(expect.objectContaining({ errnoName: 'EINVAL' }));
  });

  const malformed: [string, () => Op][] = [
    ['an unknown expression kind', () => addRule([{ kind: 'nope' } as unknown as Expr])],
    ['a cmp without data', () => addRule([{ kind: 'cmp', sreg: 1, op: 'eq' } as unknown as Expr])],
    ['a misspelt field', () => addRule([{ kind: 'masq', flag: 4 } as unknown as Expr])],
    ['a 65-byte data register', () => addRule([{ kind: 'cmp', sreg: 1, op: 'eq', data: 'ab'.repeat(65) }])],
    ['a jump without a chain', () => addRule([{ kind: 'immediate', dreg: 0, verdict: 'jump' }])],
    ['an unknown verdict', () => addRule([{ kind: 'immediate', dreg: 0, verdict: 'maybe' as 'accept' }])],
    ['upper-case hex', () => addRule([{ kind: 'cmp', sreg: 1, op: 'eq', data: 'AB' }])],
    ['an xt name longer than 28 bytes', () => addRule([{ kind: 'match', name: 'x'.repeat(29), rev: 0, info: '' }])],
    ['a replace without a handle', () => ({ verb: 'replace', object: 'rule', family: F, table: T, chain: C, exprs: [] })],
    ['a verb the object does not take', () => ({ verb: 'insert', object: 'table', family: F, name: T } as unknown as Op)],
    ['an unknown family', () => ({ verb: 'add', object: 'table', family: 'ipx', name: T } as unknown as Op)],
    ['a 257-byte rule userdata', () => ({ ...addRule([]), userdata: '00'.repeat(257) } as Op)],
    ['a 65-byte set element key', () => ({ verb: 'add', object: 'element', family: F, table: T, set: 's', elements: [{ key: '00'.repeat(65) }] })],
  ];

  it.each(malformed)('Batch refuses %s at queue time', (_what, make) => {
    const b = new Batch().add('table', { family: F, name: T });
    let err: unknown;
    try {
      b.push(make());
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidOperationError);
    expect((err as InvalidOperationError).opIndex).toBe(1);
    expect(b.length).toBe(1);
  });

  it('checks an expression again unless it is the previous rule\'s frozen object at the same place', () => {
    const load = Object.freeze({ kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 }) as Expr;
    const verdict = Object.freeze({ kind: 'immediate', dreg: 0, verdict: 'accept' }) as Expr;
    const cmp = (data: string) => Object.freeze({ kind: 'cmp', sreg: 1, op: 'eq', data }) as Expr;
    const b = new Batch();
    b.push(addRule([load, cmp('0a000001'), verdict]));
    b.push(addRule([load, cmp('0a000002'), verdict]));
    const refused = (exprs: Expr[]) => {
      try {
        b.push(addRule(exprs));
      } catch (e) {
        expect(e).toBeInstanceOf(InvalidOperationError);
        return (e as InvalidOperationError).field;
      }
      return undefined;
    };
    // A bad expression where the previous rule had a good one, the good ones shared.
    expect(refused([load, cmp('zz'), verdict])).toBe('exprs[1].data');
    // Shared objects the previous rule had at other places are checked (and pass).
    expect(refused([verdict, load])).toBeUndefined();
    // The same object, not frozen, changed since it was checked: checked again.
    const loose = { kind: 'cmp', sreg: 1, op: 'eq', data: '0a000003' } as Expr & { data: string };
    expect(refused([load, loose])).toBeUndefined();
    loose.data = 'zz';
    expect(refused([load, loose])).toBe('exprs[1].data');
    expect(b.length).toBe(4);
  });

  it('a malformed op in an array never reaches the kernel', async () => {
    await withSocket(async (s) => {
      const g = s.generation();
      const err = await s.commit([
        { verb: 'add', object: 'table', family: F, name: T },
        addRule([{ kind: 'cmp', sreg: 1, op: 'eq', data: 'zz' }]),
      ]).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidOperationError);
      expect((err as InvalidOperationError).opIndex).toBe(1);
      expect((err as InvalidOperationError).field).toBe('exprs[0].data');
      expect(s.generation()).toBe(g);
      expect(await s.listTables()).toEqual([]);
    }, 'err');
  });

  it('the native encoder bounds what libnftnl would copy unchecked, even without Batch', async () => {
    // libnftnl 1.2.4 memcpy()s data registers into 64 bytes and element keys
    // likewise; the addon must refuse longer values itself.
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const native = (s as unknown as { native: NativeSocket }).native;
      try {
        const tooLong = [
          { verb: 'add', object: 'table', family: F, name: T },
          { verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'cmp', sreg: 1, op: 'eq', data: 'ab'.repeat(4096) }] },
        ];
        let err: unknown;
        try {
          await native.commit(tooLong);
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(NetlinkError);
        expect((err as NetlinkError).operation).toBe('encode');
        expect((err as NetlinkError).opIndex).toBe(1);
        expect((err as NetlinkError).message).toMatch(/more than the 64 allowed/);
        let err2: unknown;
        try {
          await native.commit([{ verb: 'add', object: 'element', family: F, table: T, set: 's',
            elements: [{ key: 'ab'.repeat(1000) }] }]);
        } catch (e) {
          err2 = e;
        }
        expect((err2 as NetlinkError).operation).toBe('encode');
        expect(await s.listTables()).toEqual([]);
      } finally {
        s.close();
      }
    }, 'err');
  });
});

describe('sets and elements', () => {
  it('creates a set without an explicit id and fills it across several element messages', async () => {
    // NEWSET needs NFTA_SET_ID; the encoder supplies one. 3,000 elements with
    // userdata exceed one 64 KiB element list, so they travel in several
    // messages of the same op.
    await withSocket(async (s) => {
      const elements = Array.from({ length: 3000 }, (_, i) => ({
        key: ip4(`10.1.${i >> 8}.${i & 255}`), userdata: '00'.repeat(40),
      }));
      await s.commit([
        { verb: 'add', object: 'table', family: F, name: T },
        { verb: 'add', object: 'set', family: F, table: T, name: 'big', flags: 0, keyType: 7, keyLen: 4, elements },
      ]);
      const got = await s.listElements({ family: F, table: T, set: 'big' });
      expect(got).toHaveLength(3000);
      expect(new Set(got.map((e) => e.key))).toEqual(new Set(elements.map((e) => e.key)));
      await s.commit([{ verb: 'flush', object: 'set', family: F, table: T, name: 'big' }]);
      expect(await s.listElements({ family: F, table: T, set: 'big' })).toEqual([]);
    }, 'set');
  });
});

describe('verbs', () => {
  it('add/insert at positions, replace and delete by handle, flush table, delete chain', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const tag = (n: number): Expr[] => matchAddr('saddr', `10.8.0.${n}`);
      const addrs = async (): Promise<string[]> => (await s.listRules({ family: F, table: T, chain: C }))
        .map((r) => r.exprs[1]!.kind === 'cmp' ? (r.exprs[1] as { data: string }).data.slice(6) : '?');
      try {
        await s.commit([
          { verb: 'add', object: 'table', family: F, name: T },
          { verb: 'add', object: 'chain', family: F, table: T, name: C },
          { verb: 'add', object: 'chain', family: F, table: T, name: 'other' },
          addRule(tag(1)), addRule(tag(2)),
          addRule(tag(9), 'other'),
        ]);
        expect(await addrs()).toEqual(['01', '02']);
        const [r1, r2] = await s.listRules({ family: F, table: T, chain: C });

        await s.commit([
          { verb: 'insert', object: 'rule', family: F, table: T, chain: C, exprs: tag(3) },               // at the start
          { verb: 'insert', object: 'rule', family: F, table: T, chain: C, position: r2!.handle, exprs: tag(4) }, // before r2
          { verb: 'add', object: 'rule', family: F, table: T, chain: C, position: r1!.handle, exprs: tag(5) },    // after r1
          addRule(tag(6)),                                                                                     // at the end
        ]);
        expect(await addrs()).toEqual(['03', '01', '05', '04', '02', '06']);

        await s.commit([
          { verb: 'replace', object: 'rule', family: F, table: T, chain: C, handle: r1!.handle, exprs: tag(7) },
          { verb: 'delete', object: 'rule', family: F, table: T, chain: C, handle: r2!.handle },
        ]);
        expect(await addrs()).toEqual(['03', '07', '05', '04', '06']);
        // replace keeps the handle
        expect((await s.listRules({ family: F, table: T, chain: C }))[1]!.handle).toBe(r1!.handle);

        // create refuses an existing chain; add of an existing chain is a no-op
        const e = await refusal(s.commit([{ verb: 'create', object: 'chain', family: F, table: T, name: C }]));
        expect(e.errnoName).toBe('EEXIST');
        await s.commit([{ verb: 'add', object: 'chain', family: F, table: T, name: C }]);
        expect(await addrs()).toHaveLength(5);

        // flush table empties every chain but keeps them
        await s.commit([{ verb: 'flush', object: 'table', family: F, name: T }]);
        expect(await s.listRules({ family: F, table: T })).toEqual([]);
        expect((await s.listChains({ family: F, table: T })).map((c) => c.name).sort()).toEqual(['other', C]);

        await s.commit([{ verb: 'delete', object: 'chain', family: F, table: T, name: 'other' }]);
        expect((await s.listChains({ family: F, table: T })).map((c) => c.name)).toEqual([C]);
        await s.commit([{ verb: 'delete', object: 'table', family: F, name: T }]);
        expect(await s.listTables()).toEqual([]);
      } finally {
        s.close();
      }
    }, 'verbs');
  });
});
