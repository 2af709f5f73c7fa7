/** 1,000 owners with 10 rules each: registered, listed, kept, and collected in one batch. Times are printed, not asserted. */
import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { RepairReport } from '../../src/keeper/keeper.js';
import { open } from '../../src/netlink/socket.js';
import { parseOwnerChain, ownerOfRule } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { BASE_RULE, ownerSpec, startDaemon } from './fixtures.js';
import { chainLines } from '../keeper/helpers.js';

const N = 1000;
const RULES = 10;

async function kernelCounts(ns: Netns) {
  const s = open({ netns: ns.path });
  try {
    const chains = (await s.listChains({ family: 'ip', table: 'nfkeeper' })).filter((c) => parseOwnerChain(c.name));
    const rules = (await s.listRules({ family: 'ip', table: 'nfkeeper' })).filter((r) => ownerOfRule(r) !== undefined);
    return { chains: chains.length, rules: rules.length, ids: new Set(rules.map((r) => ownerOfRule(r))).size, generation: s.generation() };
  } finally {
    s.close();
  }
}

describe('owners at scale', () => {
  it(`registers ${N} owners × ${RULES} rules, lists them, and collects them all in one batch`, async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('scale');
      let d = await startDaemon(ns, dir);
      try {
        const ids = Array.from({ length: N }, (_, i) => `alloc-${String(i).padStart(4, '0')}`);
        const t0 = performance.now();
        // 100 clients at a time, as a busy orchestrator would be.
        for (let i = 0; i < N; i += 100) {
          const rs = await Promise.all(ids.slice(i, i + 100).map((id, k) => d.api('PUT', `/v1/owners/${id}`, ownerSpec(i + k, RULES))));
          expect(rs.filter((r) => r.status !== 201)).toEqual([]);
        }
        const registerMs = performance.now() - t0;
        const t1 = performance.now();
        const list = await d.api('GET', '/v1/owners');
        const listMs = performance.now() - t1;
        expect(list.body.owners).toHaveLength(N);
        expect(list.body.owners.map((o: { id: string }) => o.id)).toEqual(ids);
        expect(list.body.owners.every((o: { rules: number }) => o.rules === RULES)).toBe(true);
        let k = await kernelCounts(ns);
        expect(k).toMatchObject({ chains: N, rules: N * RULES, ids: N });
        console.log(`registered ${N} owners × ${RULES} rules over the socket in ${registerMs.toFixed(0)} ms ` +
          `(${d.registry.groups} groups, i.e. state writes and batches); listed in ${listMs.toFixed(1)} ms`);

        // A restart with every owner still registered adopts the ruleset without writing.
        await d.stop();
        d = await startDaemon(ns, dir);
        expect((await kernelCounts(ns)).generation).toBe(k.generation);
        expect(d.registry.size).toBe(N);

        // Collected: the owners are unregistered while nfkeeper is down; start-up collects them in one batch.
        await d.stop();
        rmSync(`${dir}/state/owners.json`);
        let report: RepairReport | undefined;
        const gen = k.generation;
        const t2 = performance.now();
        d = await startDaemonWatching(ns, dir, (r) => { report = r; });
        const startMs = performance.now() - t2;
        k = await kernelCounts(ns);
        expect(k).toMatchObject({ chains: 0, rules: 0, generation: gen + 1 });
        // Only the dead chains' rules were left unread (observeTable's mostly-unwanted path): the config's rules are intact.
        expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual([BASE_RULE]);
        expect(ns.exec('nft', ['list', 'chains', 'ip']).match(/chain /g)).toHaveLength(2);
        console.log(`owned GC of ${N} owners (${N} chains, ${N * RULES} rules) at start-up: one batch of ${report!.ops} ops; ` +
          `pass ${report!.latencyMs.toFixed(1)} ms (observe + diff + plan + commit), whole start-up ${startMs.toFixed(0)} ms`);

        // And through the API: re-register, then remove all at once (grouped into few batches).
        for (let i = 0; i < N; i += 250) {
          await Promise.all(ids.slice(i, i + 250).map((id, j) => d.api('PUT', `/v1/owners/${id}`, ownerSpec(i + j, RULES))));
        }
        const groups = d.registry.groups;
        const t3 = performance.now();
        const rs = (await Promise.all([0, 250, 500, 750].map((i) => Promise.all(ids.slice(i, i + 250)
          .map((id) => d.api('DELETE', `/v1/owners/${id}`)))))).flat();
        const deleteMs = performance.now() - t3;
        expect(rs.every((r) => r.status === 200)).toBe(true);
        expect(await kernelCounts(ns)).toMatchObject({ chains: 0, rules: 0 });
        console.log(`${N} DELETEs (4 × 250 concurrent): ${deleteMs.toFixed(0)} ms in ${d.registry.groups - groups} batches`);
      } finally {
        await d.stop();
      }
    }, 'own-scale');
  }, 300_000);
});

async function startDaemonWatching(ns: Netns, dir: string, onRepair: (r: RepairReport) => void) {
  // The start-up pass runs inside keeper.start(); listen on the prototype's emit to catch its report.
  const { Keeper } = await import('../../src/keeper/keeper.js');
  const emit = Keeper.prototype.emit;
  Keeper.prototype.emit = function (this: InstanceType<typeof Keeper>, event: string | symbol, ...args: unknown[]) {
    if (event === 'repaired') onRepair(args[0] as RepairReport);
    return emit.call(this, event, ...args);
  } as typeof emit;
  try {
    return await startDaemon(ns, dir);
  } finally {
    Keeper.prototype.emit = emit;
  }
}
