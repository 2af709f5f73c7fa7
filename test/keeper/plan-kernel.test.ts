/**
 * Minimal per-chain edit plans on the real kernel: random kernel chains
 * repaired to random desired chains by one guarded batch, handles of rules
 * that stayed unchanged; and the keeper's event-path repairs keep the
 * handles of the rules nobody touched.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { checkOnce, type Keeper } from '../../src/keeper/keeper.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { ruleHandles } from '../helpers/nft.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { FLANNEL_RULES, chainLines, handles, nextRepair, startKeeper } from './helpers.js';
import { planConfig, rng, ruleText } from './plan-fixtures.js';

const config = planConfig;

/** Rule texts and handles of `ip t c`, in order. */
function listing(ns: Netns): { text: string; handle: number }[] {
  const out = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 't', 'c']);
  const lines = out.split('\n').map((l) => l.trim()).filter((l) => /# handle \d+$/.test(l) && !/^chain /.test(l));
  const hs = ruleHandles(out);
  return lines.map((l, i) => ({ text: l.replace(/\s*# handle \d+$/, ''), handle: hs[i]! }));
}

describe('minimal chain edits on the real kernel', () => {
  let ns: Netns;
  let sock: NftSocket;
  beforeAll(() => {
    ns = createNetns('plan');
    sock = open({ netns: ns.path });
  });
  afterAll(() => {
    sock?.close();
    ns?.remove();
  });

  it('random kernel chains repaired to random desired chains: exact result, kept handles unchanged, ops <= rewrite', async () => {
    const rand = rng(1414);
    for (let trial = 0; trial < 40; trial++) {
      const alphabet = 2 + Math.floor(rand() * 20);
      const pick = () => Math.floor(rand() * alphabet);
      const want = Array.from({ length: Math.floor(rand() * 15) }, pick);
      let have: number[];
      if (rand() < 0.3) {
        have = Array.from({ length: Math.floor(rand() * 15) }, pick);
      } else {
        have = [...want];
        for (let d = Math.floor(rand() * 3); d >= 0; d--) {
          const at = Math.floor(rand() * (have.length + 1));
          const what = rand();
          if (what < 0.4) have.splice(at, 1);
          else if (what < 0.7) have.splice(at, 0, 200 + Math.floor(rand() * 5));
          else if (what < 0.85) have.splice(at, 1, pick());
          else if (have.length > 1) have.splice(Math.floor(rand() * have.length), 0, ...have.splice(at, 1));
        }
      }
      ns.nft(`add table ip t
add chain ip t c { type nat hook postrouting priority srcnat; policy accept; }
flush chain ip t c
${have.map((k) => `add rule ip t c ${ruleText(k)}`).join('\n')}
`);
      const ctx = `trial ${trial}: have [${have}] want [${want}]`;
      const before = listing(ns);
      const gen = sock.generation();
      const { ops } = await checkOnce(sock, config(want), true);
      const after = listing(ns);
      expect(after.map((r) => r.text), ctx).toEqual(want.map(ruleText));
      expect(ops, ctx).toBeLessThanOrEqual(1 + want.length);
      // One batch, or none when nothing differed.
      expect(sock.generation(), ctx).toBe(gen + (ops > 0 ? 1 : 0));
      // A rule whose handle survived still has its text (nothing was rewritten under it).
      const was = new Map(before.map((r) => [r.handle, r.text]));
      for (const r of after) if (was.has(r.handle)) expect(r.text === was.get(r.handle) || ops > 0, ctx).toBe(true);
      const kept = after.filter((r) => was.get(r.handle) === r.text).length;
      const flushed = ops === 1 + want.length && kept === 0;
      if (!flushed && ops > 0) expect(ops, ctx).toBeLessThanOrEqual(have.length + want.length - 2 * kept + 0);
      expect((await checkOnce(sock, config(want), false)).drift.every((d) => d.drift.length === 0), ctx).toBe(true);
    }
  });

  it('one rule deleted from a 10,000-rule chain comes back with one op, every other handle unchanged', async () => {
    const want = Array.from({ length: 10_000 }, (_, i) => i);
    await checkOnce(sock, config(want), true);
    const before = listing(ns);
    ns.nft(`delete rule ip t c handle ${before[5000]!.handle}`);
    const { ops, drift } = await checkOnce(sock, config(want), true);
    expect(ops).toBe(1);
    expect(drift[0]!.drift[0]!.detail).toMatch(/9999 of 9999 kernel rules stay, 0 deleted, 1 inserted/);
    const after = listing(ns);
    expect(after.map((r) => r.text)).toEqual(want.map(ruleText));
    expect(after.filter((_, i) => i !== 5000).map((r) => r.handle)).toEqual(before.filter((_, i) => i !== 5000).map((r) => r.handle));
  });
});

describe('keeper repairs keep the handles of untouched rules', () => {
  let ns: Netns;
  let keeper: Keeper | undefined;
  beforeEach(() => {
    ns = createNetns('plankeep');
  });
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
    ns.remove();
  });
  const CHAIN = ['ip', 'nfkeeper', 'postrouting'] as const;
  const cases: [string, (h: number[]) => string, (h: number[]) => number[]][] = [
    ['a deleted rule', (h) => `delete rule ip nfkeeper postrouting handle ${h[1]}`, (h) => [h[0]!, h[2]!, h[3]!]],
    ['an inserted foreign rule', () => 'insert rule ip nfkeeper postrouting ip saddr 192.0.2.1 accept', (h) => h],
    ['a moved rule', (h) => `delete rule ip nfkeeper postrouting handle ${h[0]}\nadd rule ip nfkeeper postrouting ${FLANNEL_RULES[0]}`,
      (h) => [h[1]!, h[2]!, h[3]!]],
  ];
  for (const [what, script, untouched] of cases) {
    it(`after ${what}`, async () => {
      keeper = await startKeeper(ns);
      const h = handles(ns, ...CHAIN);
      const repaired = nextRepair(keeper);
      ns.nft(script(h));
      const r = await repaired;
      await keeper.idle();
      expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
      expect(r.ops).toBeLessThanOrEqual(2);
      const now = handles(ns, ...CHAIN);
      for (const x of untouched(h)) expect(now).toContain(x);
    });
  }
});

describe('verification after a repair', () => {
  it('trusts its own commit when the generation moved by exactly one, and the tick reads the table back later', async () => {
    const ns = createNetns('plantrust');
    // Without the followed part: the full pass's own read-back is what this is about.
    const keeper = await startKeeper(ns, { intervalMs: 50, trustOwnCommitMs: 400, follow: false });
    try {
      const dumps = async () => (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;
      const before = await dumps();
      const repaired = nextRepair(keeper);
      ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, 'ip', 'nfkeeper', 'postrouting')[1]}`);
      const r = await repaired;
      expect(r.ops).toBe(1);
      // One observation for the repair; none to verify it.
      expect(await dumps()).toBe(before + 1);
      expect(keeper.status().generation).toBe(r.generation);
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
      // The safety net: one read-back after trustOwnCommitMs, finding nothing to do, then quiet again.
      const deadline = Date.now() + 10_000;
      while (await dumps() < before + 2 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
      expect(await dumps()).toBe(before + 2);
      await new Promise((res) => setTimeout(res, 600));
      expect(await dumps()).toBe(before + 2);
      expect((await keeper.metrics.repairs.get()).values.reduce((a, v) => a + v.value, 0)).toBe(2);  // start-up + this one
    } finally {
      await keeper.stop();
      ns.remove();
    }
  });

  it('with the followed part, a repair reads nothing, and the tick reads the table back once later', async () => {
    const ns = createNetns('plantrustm');
    const keeper = await startKeeper(ns, { intervalMs: 50, trustOwnCommitMs: 400 });
    try {
      const dumps = async () => (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;
      const deadline = Date.now() + 10_000;
      while (keeper.followState()?.exact !== true && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
      // Let the start-up's own read-back (which seeded the followed part) and its safety net pass.
      await new Promise((res) => setTimeout(res, 800));
      await keeper.idle();
      const before = await dumps();
      const repaired = nextRepair(keeper);
      ns.nft(`delete rule ip nfkeeper postrouting handle ${handles(ns, 'ip', 'nfkeeper', 'postrouting')[1]}`);
      const r = await repaired;
      expect(r.ops).toBe(1);
      expect(await dumps()).toBe(before);  // planned from the events, verified by the guard
      expect(keeper.status().generation).toBe(r.generation);
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
      while (await dumps() < before + 1 && Date.now() < deadline + 10_000) await new Promise((res) => setTimeout(res, 50));
      expect(await dumps()).toBe(before + 1);
      await new Promise((res) => setTimeout(res, 600));
      expect(await dumps()).toBe(before + 1);
      expect(keeper.followState()?.exact).toBe(true);
    } finally {
      await keeper.stop();
      ns.remove();
    }
  });
});
