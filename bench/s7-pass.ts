/**
 * The keeper's side of one owner registration, in process (no HTTP, no state file): N owners
 * registered in groups, then owners registered one at a time through OwnerRegistry → Keeper.setOwners
 * (merge, pass from the known state, commit, the known state followed), each timed, optionally
 * under a V8 CPU profile of just those registrations.
 *
 *   npx tsx bench/s7-pass.ts [--owners 1000] [--puts 300] [--group 1] [--cpu-prof FILE] [--heap-prof FILE] [--passes N]
 *
 * --group K: K registrations in flight at once (one group each time, as the registry makes them).
 * Prints the time per registration and the kernel commit's share (NftConn.commit timed). --passes N:
 * then N passes each right after a registration and a commit in another table (only the generation
 * moved for the owned table: S7's "pass right after a registration"), timed from request to answer.
 */
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseConfig } from '../src/config/config.js';
import { Keeper } from '../src/keeper/keeper.js';
import { Batch } from '../src/netlink/batch.js';
import { open } from '../src/netlink/socket.js';
import { OwnerRegistry } from '../src/owners/index.js';
import { ownerSpec, ownersYaml } from '../test/owners/fixtures.js';
import { withBenchNetns } from './lib/netns.js';
import { summarize } from './lib/stats.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--owners': 1, '--puts': 1, '--group': 1, '--passes': 1, '--cpu-prof': 1, '--heap-prof': 1 });
const arg = cli.value;
const owners = Number(arg('--owners') ?? 1000);
const puts = Number(arg('--puts') ?? 300);
const group = Number(arg('--group') ?? 1);
const passes = Number(arg('--passes') ?? 0);
const prof = arg('--cpu-prof');
// --heap-prof FILE: a sampling heap profile (what the registrations allocate, by function) instead.
const heapProf = arg('--heap-prof');
const id = (i: number) => `alloc-${String(i).padStart(5, '0')}`;

const dir = mkdtempSync(join(tmpdir(), 'nfk-s7p-'));
try {
  await withBenchNetns('s7-pass', async (ns) => {
    const config = parseConfig(ownersYaml(dir), join(dir, 'owners.yaml'));
    const keeper = new Keeper({ config, netns: ns.path, intervalMs: 3_600_000 });
    keeper.on('error', () => undefined);
    await keeper.start();
    try {
      const registry = new OwnerRegistry(config, [], (next) => keeper.setOwners(next));
      for (let i = 0; i < owners; i += 100) {
        await Promise.all(Array.from({ length: Math.min(100, owners - i) }, (_, k) => registry.put(id(i + k), ownerSpec(i + k, 10))));
      }
      const sock = keeper.socket!;
      let commitUs = 0;
      const commit = sock.commit.bind(sock);
      (sock as unknown as { commit: typeof commit }).commit = async (b, o) => {
        const t = performance.now();
        try { return await commit(b, o); } finally { commitUs += (performance.now() - t) * 1000; }
      };
      const session = prof || heapProf ? new Session() : undefined;
      if (session) session.connect();
      if (session && prof) {
        await session.post('Profiler.enable');
        await session.post('Profiler.setSamplingInterval', { interval: 100 });
        await session.post('Profiler.start');
      }
      // Every sample kept, collected or not: what a registration allocates, not what stays.
      if (session && heapProf) await session.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
      const times: number[] = [];
      const groups0 = registry.groups;
      const t0 = performance.now();
      let cpu0 = process.cpuUsage();
      for (let i = 0; i < puts; i += group) {
        const t = performance.now();
        await Promise.all(Array.from({ length: group }, (_, k) => registry.put(id(owners + i + k), ownerSpec(owners + i + k, 10))));
        times.push((performance.now() - t) * 1000 / group);
      }
      const cpu = process.cpuUsage(cpu0);
      const total = performance.now() - t0;
      if (session && prof) {
        const { profile } = await session.post('Profiler.stop');
        writeFileSync(prof, JSON.stringify(profile));
      }
      if (session && heapProf) {
        const { profile } = await session.post('HeapProfiler.stopSampling');
        // Bytes allocated per function (self), per registration.
        const self = new Map<string, number>();
        const walk = (n: typeof profile.head) => {
          const k = `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/^.*\/(src|node_modules)\//, '$1/')}`;
          self.set(k, (self.get(k) ?? 0) + n.selfSize);
          for (const c of n.children) walk(c);
        };
        walk(profile.head);
        let total = 0;
        for (const v of self.values()) total += v;
        console.log(`allocated ${(total / puts / 1024).toFixed(1)} KiB a registration; by function:`);
        for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`${(v / puts / 1024).toFixed(1).padStart(8)} KiB  ${k}`);
        writeFileSync(heapProf, JSON.stringify(profile));
      }
      session?.disconnect();
      const s = summarize(times);
      console.log(`${puts} registrations at ${owners} owners, ${group} at a time (${registry.groups - groups0} groups): ` +
        `${(total / puts).toFixed(3)} ms each (p50 ${(s.median / 1000).toFixed(3)} ms), CPU ${((cpu.user + cpu.system) / 1000 / puts).toFixed(3)} ms each, ` +
        `of which the commit call ${(commitUs / 1000 / puts).toFixed(3)} ms`);
      if (passes > 0) {
        const other = open({ netns: ns.path });
        const us: number[] = [];
        try {
          for (let k = 0; k <= passes; k++) {
            await registry.put(`pass-${k}`, ownerSpec(owners + puts + k, 10));
            await other.commit(new Batch().add('table', { family: 'ip', name: `elsewhere${k}` }));
            const t = performance.now();
            const r = await keeper.request('tick', t);
            if (k > 0) us.push((performance.now() - t) * 1000);  // the first is a warm-up
            if (r.ops !== 0 || r.status !== 'in-sync') throw new Error(`a pass after a foreign commit did ${r.status} with ${r.ops} ops`);
          }
        } finally {
          other.close();
        }
        const p = summarize(us);
        console.log(`${passes} passes right after a registration and a commit elsewhere: p50 ${(p.median / 1000).toFixed(3)} ms, p99 ${(p.p99 / 1000).toFixed(3)} ms`);
      }
    } finally {
      await keeper.stop();
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
