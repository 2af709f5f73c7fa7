/**
 * Leaks: 100,000 generation/dump/commit calls on one socket keep the RSS flat
 * and the fd count exactly constant. The mix is what a keeper does in steady
 * state: mostly generation checks, filtered 4-rule dumps, and some
 * flush-and-replace commits (which also exercise the big-receive-buffer and
 * encoder paths), with 1,000 foreign rules in the namespace.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { open, type NftSocket } from '../../src/index.js';
import { withNetns } from '../helpers/netns.js';
import { fdCount, flushAndReplace, loadIptablesForeign, OWNED, ownedSetup, rssBytes, scaled } from './fixtures.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const { family, table, chain } = OWNED;
const MB = 1024 * 1024;
// Under scripts/sanitize.sh, AddressSanitizer's quarantine holds freed memory
// on purpose, so RSS says nothing there; LeakSanitizer counts the leaks instead.
const SANITIZED = process.env.NFK_SANITIZE === '1';
// 10,000 in a quick sanitizer run (LeakSanitizer finds a leak on the first
// call that leaks; the count matters for the RSS bound, which ASan voids).
const CALLS = scaled(100_000);

/** `calls` calls: 16 of 20 generation(), 2 chain-filtered rule dumps and 1 chain dump, 1 commit (one in ten refused). */
async function mixedCalls(s: NftSocket, calls: number): Promise<{ gens: number; dumps: number; commits: number; refused: number }> {
  let gens = 0, dumps = 0, commits = 0, refused = 0;
  for (let i = 0; i < calls; i++) {
    const k = i % 20;
    if (k < 16) {
      s.generation();
      gens++;
    } else if (k < 18) {
      // Chain-filtered: the inline path.
      const rules = await s.listRules({ family, table, chain });
      if (rules.length !== 4) throw new Error(`dump returned ${rules.length} rules`);
      dumps++;
    } else if (k < 19) {
      // Table-filtered chains: the worker path.
      const chains = await s.listChains({ family, table });
      if (chains.length !== 1) throw new Error(`dump returned ${chains.length} chains`);
      dumps++;
    } else if (i % 200 === 199) {
      // The refusal path: op 2 names a chain that does not exist.
      const ops = flushAndReplace('d');
      ops[2] = { ...ops[2]!, chain: 'missing' } as (typeof ops)[number];
      const e = await s.commit(ops).then(() => undefined, (x: unknown) => x);
      if ((e as { opIndex?: number } | undefined)?.opIndex !== 2) throw new Error(`unexpected commit outcome: ${String(e)}`);
      refused++;
    } else {
      await s.commit(flushAndReplace(i % 40 === 19 ? 'b' : 'c'));
      commits++;
    }
  }
  return { gens, dumps, commits, refused };
}

async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
}

describe('leaks', () => {
  it(`${CALLS.toLocaleString('en')} generation/dump/commit calls keep the RSS flat and the fd count constant`, async () => {
    await withNetns(async (ns) => {
      loadIptablesForeign(ns, 1000);
      const s = open({ netns: ns.path });
      try {
        await s.commit(ownedSetup());
        // Warm-up: JIT, V8 heap growth, the socket's buffers, malloc arenas.
        await mixedCalls(s, scaled(10_000));
        await settle();
        const fd0 = fdCount();
        const rss0 = rssBytes();
        const gen0 = s.generation();

        const counts = await mixedCalls(s, CALLS);
        await settle();
        const fd1 = fdCount();
        const rss1 = rssBytes();
        const growth = rss1 - rss0;
        console.log(`[leak] ${CALLS} calls (${counts.gens} generation, ${counts.dumps} dumps, ${counts.commits} commits, ` +
          `${counts.refused} refused commits): ` +
          `RSS ${(rss0 / MB).toFixed(1)} -> ${(rss1 / MB).toFixed(1)} MiB (${growth >= 0 ? '+' : ''}${(growth / MB).toFixed(1)} MiB), ` +
          `fds ${fd0} -> ${fd1}`);

        expect(counts.gens + counts.dumps + counts.commits + counts.refused).toBe(CALLS);
        expect(s.generation()).toBe(gen0 + counts.commits);
        expect(fd1).toBe(fd0);
        if (!SANITIZED) expect(growth).toBeLessThan(30 * MB);
      } finally {
        s.close();
      }
    }, 'leak');
  }, SANITIZED ? 900_000 : 180_000);
});
