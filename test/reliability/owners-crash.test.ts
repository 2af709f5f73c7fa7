/**
 * kill -9 of the daemon (bin/nfkeeper.js run, a real child process) with
 * owners in flight:
 *  - while 1,000 owners are being registered over the control socket by 100
 *    clients at once: killed once a seeded random number of them has been
 *    acknowledged, with requests still in flight;
 *  - during the owned GC batch: 500 of 1,000 owners were unregistered while
 *    the daemon was down, and the restarted daemon is killed after a seeded
 *    random delay around its start-up pass, which collects them in one batch.
 * The oracle reads the kernel through its own socket. Each owner must be
 * whole (its chain with every rule, and its jump) or wholly absent, right
 * after the kill and after a restart. After the kill every acknowledged owner
 * is in the kernel (an answer means committed); after the restart every
 * acknowledged owner is there, and exactly the owners of the state file are.
 *   NFK_OWNERS_CRASH_RUNS=10 NFK_OWNERS_CRASH_SEED=3 npx vitest run test/reliability/owners-crash.test.ts
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { prng } from '../../bench/soak.js';
import { parseConfig } from '../../src/config/config.js';
import { open } from '../../src/netlink/socket.js';
import { call, loadOwners, saveOwners } from '../../src/owners/index.js';
import { daemon, kernelOwners, kill9, ready, stop } from './owners-child.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { ownerSpec, ownersYaml, sleep, tempDir, writeConfig } from '../owners/fixtures.js';

const SEED = Number(process.env.NFK_OWNERS_CRASH_SEED ?? 16);
const RUNS = Number(process.env.NFK_OWNERS_CRASH_RUNS ?? 2);
const N = 1000;
const RULES = 3; // per owner: a chain of 2 rules and 1 jump from postrouting
const id = (i: number): string => `alloc-${String(i).padStart(4, '0')}`;

function stateIds(dir: string): Set<string> {
  const config = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
  return new Set(loadOwners(config).map((o) => o.id));
}

describe('kill -9 with owners in flight', () => {
  it(`while ${N} owners are registered over the control socket (${RUNS} kills)`, async () => {
    const rnd = prng(SEED);
    for (let run = 0; run < RUNS; run++) {
      await withNetns(async (ns) => {
        const dir = tempDir('own-crash');
        const config = writeConfig(dir);
        const sock = join(dir, 'nfkeeper.sock');
        let d = daemon(config, ns);
        try {
          await ready(sock, d);
          const target = 50 + Math.floor(rnd() * (N - 100));
          const acked = new Set<string>();
          let killed = false;
          let next = 0;
          let inFlight = 0;
          let inFlightAtKill = 0;
          const t0 = performance.now();
          // 100 clients, each sending its next PUT as soon as the last one is answered, so
          // requests are always in flight (queued, in the state file, in the kernel) at the kill.
          await Promise.all(Array.from({ length: 100 }, async () => {
            while (!killed && next < N) {
              const j = next++;
              inFlight++;
              const r = await call(sock, 'PUT', `/v1/owners/${id(j)}`, ownerSpec(j, RULES), 60_000).catch(() => undefined);
              inFlight--;
              if (r?.status === 201) acked.add(id(j));
              else if (!killed) throw new Error(`PUT ${id(j)} refused before the kill: ${JSON.stringify(r)}`);
              if (!killed && acked.size >= target) {
                killed = true;
                inFlightAtKill = inFlight;
                await kill9(d);
              }
            }
          }));
          expect(killed).toBe(true);
          const killedAt = performance.now() - t0;

          // Right after the kill: everything acknowledged is committed and on disk, nothing is half there.
          // The kernel may hold an owner the disk does not (committed, killed before its write):
          // never an acknowledged one, and the restart takes it out.
          const inKernel = await kernelOwners(ns);
          for (const o of acked) expect(inKernel.has(o), `acknowledged owner ${o} missing after the kill`).toBe(true);
          const saved = stateIds(dir);
          for (const o of acked) expect(saved.has(o), `acknowledged owner ${o} not in the state file`).toBe(true);

          // After a restart: exactly the state file's owners, each whole; every acknowledged one among them.
          d = daemon(config, ns);
          await ready(sock, d);
          const after = await kernelOwners(ns);
          for (const o of acked) expect(after.has(o), `acknowledged owner ${o} missing after the restart`).toBe(true);
          expect([...after].sort()).toEqual([...saved].sort());
          const listed = await call(sock, 'GET', '/v1/owners');
          expect((listed.body as { owners: { id: string }[] }).owners.map((o) => o.id).sort()).toEqual([...saved].sort());
          expect(inFlightAtKill).toBeGreaterThan(0);
          console.log(`[owners-crash] run ${run}: killed after ${acked.size} acknowledged PUTs, ${inFlightAtKill} in flight (${killedAt.toFixed(0)} ms); ` +
            `kernel then held ${inKernel.size} whole owners, state file ${saved.size}; restart: ${after.size} whole owners`);
        } finally {
          await stop(d);
        }
      }, 'own-crash');
    }
  }, 600_000);

  it(`during the owned GC batch that collects ${N / 2} of ${N} owners at start-up (${RUNS} kills)`, async () => {
    const rnd = prng(SEED + 1);
    await withNetns(async (ns) => {
      const dir = tempDir('own-gc-crash');
      const config = writeConfig(dir);
      const cfg = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
      const sock = join(dir, 'nfkeeper.sock');
      const all = Array.from({ length: N }, (_, i) => id(i));
      const kept = new Set(all.filter((_, i) => i % 2 === 0));
      let d = daemon(config, ns);
      try {
        await ready(sock, d);
        for (let i = 0; i < N; i += 100) {
          const rs = await Promise.all(all.slice(i, i + 100).map((o, k) => call(sock, 'PUT', `/v1/owners/${o}`, ownerSpec(i + k, RULES))));
          expect(rs.filter((r) => r.status !== 201)).toEqual([]);
        }
        await kill9(d);
        const full = loadOwners(cfg);
        expect(full).toHaveLength(N);
        const unregister = () => saveOwners(cfg.owners!.state, full.filter((o) => kept.has(o.id)));

        // Calibration: how long from spawn until the GC batch has been committed. Adopting the
        // kept owners writes nothing, so the GC batch is the start-up's one commit; polling the
        // generation is cheap enough not to slow the daemon down (full dumps every few ms did).
        unregister();
        const watch = open({ netns: ns.path });
        const gen0 = watch.generation();
        const t0 = performance.now();
        d = daemon(config, ns);
        while (watch.generation() === gen0) await sleep(2);
        const gcAt = performance.now() - t0;
        watch.close();
        expect((await kernelOwners(ns)).size).toBe(N / 2);
        await kill9(d);

        const seen: Record<string, number> = { all: 0, kept: 0 };
        for (let run = 0; run < RUNS; run++) {
          // Back to 1,000 owners in the kernel: a daemon with the full state file installs them.
          saveOwners(cfg.owners!.state, full);
          d = daemon(config, ns);
          await ready(sock, d);
          expect((await kernelOwners(ns)).size).toBe(N);
          await kill9(d);

          unregister();
          const delay = gcAt * (0.4 + rnd() * 0.8);
          d = daemon(config, ns);
          await sleep(delay);
          await kill9(d);
          // One batch: all 1,000 owners or exactly the 500 kept, each whole.
          const inKernel = await kernelOwners(ns);
          if (inKernel.size === N) seen.all!++;
          else {
            expect([...inKernel].sort()).toEqual([...kept].sort());
            seen.kept!++;
          }
          d = daemon(config, ns);
          await ready(sock, d);
          expect([...(await kernelOwners(ns))].sort()).toEqual([...kept].sort());
          await kill9(d);
          console.log(`[owners-crash] GC run ${run}: killed ${delay.toFixed(0)} ms after spawn (GC committed at ~${gcAt.toFixed(0)} ms): ` +
            `kernel held ${inKernel.size === N ? 'all 1,000 owners' : 'the 500 kept'}; restart: the 500 kept, whole`);
        }
        console.log(`[owners-crash] GC kills: ${JSON.stringify(seen)}`);
      } finally {
        await stop(d);
      }
    }, 'own-gc-crash');
  }, 900_000);
});
