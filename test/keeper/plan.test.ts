/**
 * Minimal per-chain edit plans, in pure logic: random desired chains against
 * random kernel chains, the planned batch applied to a model of the kernel's
 * rule list (the real-kernel version of this test is plan-kernel.test.ts).
 */
import { describe, expect, it } from 'vitest';
import type { TableConfig } from '../../src/model/desired.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import type { Rule } from '../../src/netlink/objects.js';
import { diffTable } from '../../src/keeper/table.js';
import { planTable } from '../../src/keeper/plan.js';
import { renderDrift } from '../../src/keeper/render-drift.js';
import type { ObservedTable } from '../../src/netlink/objects.js';
import { matchKeys, planChain, planSplices } from '../../src/keeper/chain-edit.js';
import { chainConfig, rng } from './plan-fixtures.js';

interface FakeRule { handle: number; key: number; id?: number; dead: boolean; fresh: boolean }

/** The kernel's rule list semantics for one chain within one transaction (net/netfilter/nf_tables_api.c). */
class FakeChain {
  rules: FakeRule[];
  /** The kernel's walks: of the batch's transactions to a position id, of the chain's list to a handle. */
  walkedById = 0;
  walkedByHandle = 0;
  private next: number;
  constructor(keys: readonly number[], firstHandle = 2) {
    this.rules = keys.map((key, i) => ({ handle: firstHandle + i, key, dead: false, fresh: false }));
    this.next = firstHandle + keys.length;
  }

  apply(ops: readonly Op[], keyOf: (op: Op) => number): void {
    // The batch's transactions so far (nft_net->commit_list), by the id of the rule each added.
    const trans: (number | undefined)[] = [];
    for (const op of ops) {
      if (op.object === 'set') {
        trans.push(undefined);
        continue;
      }
      if (op.object !== 'rule' && !(op.object === 'chain' && op.verb === 'flush')) throw new Error(`unexpected ${op.verb} ${op.object}`);
      if (op.object === 'chain') {
        for (const r of this.rules) r.dead = true;
        continue;
      }
      const byHandle = (h: number) => {
        const i = this.rules.findIndex((r) => r.handle === h && !r.dead);
        if (i < 0) throw new Error(`ENOENT: no rule with handle ${h}`);
        this.walkedByHandle += i + 1;
        return i;
      };
      const byId = (id: number) => {
        const i = this.rules.findIndex((r) => r.fresh && r.id === id);
        if (i < 0) throw new Error(`ENOENT: no rule with id ${id}`);
        this.walkedById += trans.indexOf(id) + 1;
        return i;
      };
      trans.push(op.verb === 'add' || op.verb === 'insert' || op.verb === 'replace' ? op.id : undefined);
      if (op.verb === 'delete') {
        this.rules[byHandle(op.handle!)]!.dead = true;
        continue;
      }
      const rule: FakeRule = { handle: 0, key: keyOf(op), id: op.id, dead: false, fresh: true };
      if (op.verb === 'replace') {
        const i = byHandle(op.handle!);
        rule.handle = op.handle!;
        this.rules[i]!.dead = true;
        this.rules.splice(i, 0, rule);  // list_add_tail_rcu(new, old): before the old rule
        continue;
      }
      rule.handle = this.next++;
      const at = op.position !== undefined ? byHandle(op.position) : op.positionId !== undefined ? byId(op.positionId) : -1;
      if (op.verb === 'add') this.rules.splice(at < 0 ? this.rules.length : at + 1, 0, rule);
      else this.rules.splice(at < 0 ? 0 : at, 0, rule);
    }
    this.rules = this.rules.filter((r) => !r.dead).map((r) => ({ ...r, fresh: false, id: undefined }));
  }
}

function observed(want: TableConfig, chain: FakeChain): ObservedTable {
  const c = want.chains[0]!;
  const ruleOf = (r: FakeRule): Rule => {
    const exprs = chainConfig([r.key]).chains[0]!.rules[0]!.compiled.exprs;
    return { family: 'ip', table: 't', chain: 'c', handle: r.handle, exprs };
  };
  return {
    family: 'ip', name: 't', table: { family: 'ip', name: 't', flags: 0, use: 1 },
    chains: new Map([['c', { family: 'ip', table: 't', name: 'c', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' }]]),
    rules: new Map([[c.name, chain.rules.map(ruleOf)]]),
    sets: new Map(),
  };
}

/** The key number a batch's rule op carries, read back from its source address. */
function keyOfOp(op: Op): number {
  if (op.object !== 'rule' || !op.exprs) throw new Error('not a rule with expressions');
  const cmp = op.exprs.find((e) => e.kind === 'cmp');
  if (!cmp || cmp.kind !== 'cmp') throw new Error('no cmp');
  const hex = cmp.data;
  return parseInt(hex.slice(4, 6), 16) * 256 + parseInt(hex.slice(6, 8), 16);
}

function repair(have: number[], want: number[]) {
  const cfg = chainConfig(want);
  const chain = new FakeChain(have);
  const before = new Map(chain.rules.map((r) => [r.handle, r.key]));
  const obs = observed(cfg, chain);
  const diff = diffTable(cfg, obs);
  const batch = new Batch();
  planTable(batch, cfg, obs, diff);
  chain.apply(batch.ops, keyOfOp);
  return { chain, batch, drifts: diff.drift, diff, before, cfg, obs };
}

describe('minimal chain edits (model of the kernel rule list)', () => {
  it('repairs one deleted rule in the middle with one add placed after its neighbour, keeping every handle', () => {
    const want = Array.from({ length: 1000 }, (_, i) => i);
    const have = want.filter((k) => k !== 500);
    const { chain, batch, before, drifts } = repair(have, want);
    expect(chain.rules.map((r) => r.key)).toEqual(want);
    expect(batch.ops).toHaveLength(1);
    expect(batch.ops[0]).toMatchObject({ verb: 'add', object: 'rule', position: 2 + 499 });
    for (const r of chain.rules) if (r.key !== 500) expect(before.get(r.handle)).toBe(r.key);
    expect(drifts[0]!.detail).toMatch(/rule order differs at 501: .*; repair: 999 of 999 kernel rules stay, 0 deleted, 1 inserted/);
  });

  it('deletes a foreign rule by handle, replaces a changed one in place and moves a rule with one delete and one add', () => {
    let r = repair([1, 2, 99, 3, 4], [1, 2, 3, 4]);
    expect(r.batch.ops).toEqual([expect.objectContaining({ verb: 'delete', handle: 4 })]);
    r = repair([1, 2, 99, 4], [1, 2, 3, 4]);
    expect(r.batch.ops).toEqual([expect.objectContaining({ verb: 'replace', handle: 4 })]);
    expect(r.chain.rules.map((x) => x.handle)).toEqual([2, 3, 4, 5]);
    r = repair([4, 1, 2, 3], [1, 2, 3, 4]);
    expect(r.batch.ops.map((o) => o.verb)).toEqual(['delete', 'add']);
    expect(r.chain.rules.map((x) => x.key)).toEqual([1, 2, 3, 4]);
    expect(r.chain.rules.slice(0, 3).map((x) => x.handle)).toEqual([3, 4, 5]);
  });

  it('inserts at the head of the chain and places the rest of the run after its first by that one\'s batch id, last to second', () => {
    const r = repair([5, 6], [1, 2, 3, 5, 6]);
    expect(r.batch.ops.map((o) => [o.verb, (o as { position?: number }).position, (o as { positionId?: number }).positionId]))
      .toEqual([['insert', undefined, undefined], ['add', undefined, 1], ['add', undefined, 1]]);
    expect(r.chain.rules.map((x) => x.key)).toEqual([1, 2, 3, 5, 6]);
  });

  it('appends the run of new rules at the chain\'s end in order, with no position (the kernel walks the batch to find an id)', () => {
    const ops = (r: ReturnType<typeof repair>) => r.batch.ops.map((o) => [o.verb, (o as { position?: number }).position, (o as { positionId?: number }).positionId]);
    // A flushed chain: every rule appended.
    const want = Array.from({ length: 1000 }, (_, i) => i);
    let r = repair([], want);
    expect(r.chain.rules.map((x) => x.key)).toEqual(want);
    expect(r.batch.ops).toHaveLength(1000);
    expect(ops(r).every(([verb, position, id]) => verb === 'add' && position === undefined && id === undefined)).toBe(true);
    // New rules in the middle are still placed; the run after the last kept rule is appended.
    r = repair([1, 4, 5], [1, 2, 3, 4, 5, 6, 7]);
    expect(ops(r)).toEqual([['add', 2, undefined], ['add', undefined, 2], ['add', undefined, undefined], ['add', undefined, undefined]]);
    expect(r.chain.rules.map((x) => x.key)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    // A rule replaced in place at the end stays where it is: nothing before it is appended.
    r = repair([1, 2, 99], [1, 5, 6, 3]);
    expect(r.chain.rules.map((x) => x.key)).toEqual([1, 5, 6, 3]);
    expect(r.batch.ops.some((o) => o.verb === 'replace')).toBe(true);
  });

  it('puts back a long run missing from the middle and one from the head with a walk of the batch per rule, not per rule before it', () => {
    const N = 3_000;
    const want = Array.from({ length: N }, (_, i) => i);
    // 1,000 missing from the middle, 500 from the head, one in between (a run of one).
    const have = want.filter((k) => k >= 500 && (k < 1_000 || k >= 2_000) && k !== 2_500);
    const r = repair(have, want);
    expect(r.chain.rules.map((x) => x.key)).toEqual(want);
    // Every kept rule keeps its handle.
    for (const x of r.chain.rules) if (r.before.has(x.handle)) expect(r.before.get(x.handle)).toBe(x.key);
    const place = (o: Op) => [o.verb, (o as { position?: number }).position, (o as { positionId?: number }).positionId];
    // Each run's first rule first, where the rule before the run is (the head; a kept rule's handle),
    // then the rest of each run after its first by that one's id, last to second.
    expect(r.batch.ops.slice(0, 3).map(place)).toEqual([['insert', undefined, undefined], ['add', 2 + have.indexOf(999), undefined],
      ['add', 2 + have.indexOf(2_499), undefined]]);
    expect(r.batch.ops.slice(3, 3 + 499).map(place)).toEqual(Array.from({ length: 499 }, () => ['add', undefined, 1]));
    expect(r.batch.ops.slice(3, 3 + 499).map((o) => keyOfOp(o))).toEqual(Array.from({ length: 499 }, (_, i) => 499 - i));
    expect(r.batch.ops.slice(3 + 499).map(place)).toEqual(Array.from({ length: 999 }, () => ['add', undefined, 1 + 1_000]));
    // The kernel's walks: three by handle (one per run), and to an id only as far as the third op.
    expect(r.chain.walkedById).toBeLessThanOrEqual(3 * 1_498);
    expect(r.chain.walkedByHandle).toBeLessThanOrEqual(3 * N);
  });

  it('flushes and rewrites when that takes fewer operations', () => {
    const r = repair([10, 11, 12, 13, 14, 15], [1, 2]);
    expect(r.batch.ops.map((o) => `${o.verb} ${o.object}`)).toEqual(['flush chain', 'add rule', 'add rule']);
    expect(r.drifts[0]!.detail).toMatch(/flush and re-add 2 rules \(3 ops; an edit would take 6\)/);
    expect(r.chain.rules.map((x) => x.key)).toEqual([1, 2]);
  });

  it('check output names the edit: deletes and replaces by handle, adds by position', () => {
    const r = repair([1, 99, 3, 77], [1, 2, 3]);
    const text = renderDrift(r.cfg, r.diff);
    expect(text).toEqual([
      expect.stringMatching(/^# ip t: rule 2 differs: .*; repair: 2 of 4 kernel rules stay, 1 deleted, 0 inserted, 1 replaced \(2 ops\)$/),
      '~ replace rule ip t c handle 3 ip saddr 10.0.0.2 accept  # was ip saddr 10.0.0.99 accept',
      '- delete rule ip t c handle 5  # ip saddr 10.0.0.77 accept',
    ]);
  });

  it('random kernel chains against random desired chains: the plan lands exactly, never costs more than a rewrite, keeps kept handles', () => {
    const rand = rng(14);
    for (let trial = 0; trial < 400; trial++) {
      const alphabet = 2 + Math.floor(rand() * 30);
      const pick = () => Math.floor(rand() * alphabet);
      const want = Array.from({ length: Math.floor(rand() * 25) }, pick);
      // Kernel chains: either unrelated, or the desired one with random damage.
      let have: number[];
      if (rand() < 0.3) {
        have = Array.from({ length: Math.floor(rand() * 25) }, pick);
      } else {
        have = [...want];
        for (let d = Math.floor(rand() * 4); d >= 0; d--) {
          const at = Math.floor(rand() * (have.length + 1));
          const what = rand();
          if (what < 0.4) have.splice(at, 1);
          else if (what < 0.7) have.splice(at, 0, alphabet + Math.floor(rand() * 5));
          else if (what < 0.85) have.splice(at, 1, pick());
          else if (have.length > 1) have.splice(Math.floor(rand() * have.length), 0, ...have.splice(at, 1));
        }
      }
      const ctx = `trial ${trial}: have [${have}] want [${want}]`;
      const { chain, batch, before } = repair(have, want);
      expect(chain.rules.map((r) => r.key), ctx).toEqual(want);
      const same = have.length === want.length && have.every((k, i) => k === want[i]);
      expect(batch.length, ctx).toBeLessThanOrEqual(same ? 0 : 1 + want.length);
      // Every rule that was not touched by an op keeps its handle.
      const touched = new Set(batch.ops.flatMap((o) => (o.object === 'rule' && o.verb !== 'add' && o.verb !== 'insert' ? [o.handle] : [])));
      const flushed = batch.ops.some((o) => o.verb === 'flush');
      if (!flushed) {
        for (const r of chain.rules) if (before.has(r.handle) && !touched.has(r.handle)) expect(before.get(r.handle), ctx).toBe(r.key);
        const kept = chain.rules.filter((r) => before.has(r.handle) && !touched.has(r.handle)).length;
        const lcs = lcsLength(have, want);
        // Replaces count as kept positions too; the diff is an exact LCS at these sizes.
        expect(kept, ctx).toBe(lcs);
      }
    }
  });

  it('a plan of known runs (planSplices) keeps every rule outside them and accounts for each rule inside once; runs that do not fit are refused', () => {
    const rand = rng(21);
    for (let trial = 0; trial < 400; trial++) {
      const have = Array.from({ length: Math.floor(rand() * 40) }, () => Math.floor(rand() * 8));
      // Runs that changed, apart from one another: [fromStart, fromEnd) of have gave way to new keys.
      const splices: { fromStart: number; fromEnd: number; start: number; end: number }[] = [];
      const want: number[] = [];
      let i = 0;
      while (i <= have.length) {
        if (rand() < 0.25) {
          const gone = Math.min(have.length - i, Math.floor(rand() * 3));
          const added = Array.from({ length: Math.floor(rand() * 3) }, () => Math.floor(rand() * 8));
          if (gone + added.length > 0) {
            splices.push({ fromStart: i, fromEnd: i + gone, start: want.length, end: want.length + added.length });
            want.push(...added);
            i += gone;
          }
        }
        if (i >= have.length) break;
        want.push(have[i++]!);
      }
      const ctx = `trial ${trial}: have [${have}] want [${want}] splices ${JSON.stringify(splices)}`;
      const e = planSplices((x) => String(have[x]), have.length, (y) => String(want[y]), want.length, splices)!;
      expect(e, ctx).toBeDefined();
      const inSplice = (j: number) => splices.some((h) => j >= h.start && j < h.end);
      let last = -1;
      for (let j = 0; j < want.length; j++) {
        const k = e.keep[j]!;
        if (!inSplice(j)) expect(k, ctx).toBeGreaterThanOrEqual(0);
        if (k < 0) continue;
        expect(have[k], ctx).toBe(want[j]);
        expect(k, ctx).toBeGreaterThan(last);
        last = k;
      }
      const added = e.steps.flatMap((x) => (x.op === 'delete' ? [] : [x.want])).sort((a, b) => a - b);
      expect(added, ctx).toEqual(want.flatMap((_, j) => (e.keep[j]! < 0 ? [j] : [])));
      const keptHave = new Set(Array.from(e.keep).filter((k) => k >= 0));
      const taken = e.steps.flatMap((x) => (x.op === 'insert' ? [] : [x.have])).sort((a, b) => a - b);
      expect(taken, ctx).toEqual(have.flatMap((_, x) => (keptHave.has(x) ? [] : [x])));
    }
    // Runs that are not runs of these lists: the caller plans the whole chain instead.
    expect(planSplices((x) => `k${x}`, 3, (y) => `k${y}`, 3, [{ fromStart: 2, fromEnd: 4, start: 2, end: 3 }])).toBeUndefined();
    expect(planSplices((x) => `k${x}`, 3, (y) => `k${y}`, 4, [{ fromStart: 1, fromEnd: 1, start: 1, end: 2 }, { fromStart: 0, fromEnd: 0, start: 3, end: 3 }])).toBeUndefined();
  });

  it('plans a 100,000-rule chain with one deletion and one insertion in near-linear time', () => {
    const want = Array.from({ length: 100_000 }, (_, i) => `k${i}`);
    const have = [...want.slice(0, 30_000), 'foreign', ...want.slice(30_000, 70_000), ...want.slice(70_001)];
    const t = performance.now();
    const e = planChain((i) => have[i]!, have.length, want);
    const ms = performance.now() - t;
    expect(e.steps).toEqual([{ op: 'delete', have: 30_000 }, { op: 'insert', want: 70_000, after: { kind: 'kept', have: 70_000 } }]);
    // Generous: a quadratic diff would take minutes here.
    expect(ms).toBeLessThan(5000);
    // A shuffled middle (no common prefix or suffix): anchors still find nearly everything.
    const shuffled = [...want];
    shuffled.push(shuffled.shift()!);
    const e2 = planChain((i) => shuffled[i]!, shuffled.length, want);
    expect(e2.editOps).toBe(2);
  });

  it('matchKeys keeps order and matches duplicates', () => {
    const keep = matchKeys((i) => 'aabab'[i]!, 5, [...'abba']);
    expect([...keep].filter((x) => x >= 0)).toHaveLength(3);  // 'aba' or 'abb'
    const kept = [...keep].filter((x) => x >= 0);
    expect(kept).toEqual([...kept].sort((x, y) => x - y));
  });
});

function lcsLength(a: readonly number[], b: readonly number[]): number {
  const dp = Array.from({ length: a.length + 1 }, () => new Array<number>(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      dp[i]![j] = a[i] === b[j] ? dp[i + 1]![j + 1]! + 1 : Math.max(dp[i + 1]![j]!, dp[i]![j + 1]!);
    }
  }
  return dp[0]![0]!;
}
