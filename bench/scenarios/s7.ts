/**
 * S7 owners at scale.
 *
 * - registration: `nfkeeper run` as its own process (owners configured, state file in a temp
 *   dir), and this process registers N owners of 10 rules ONE BY ONE over the control socket
 *   (each PUT sent when the previous was answered; an answer means the owner is on disk and in
 *   the kernel). Reported: the rate, each PUT's latency, the daemon's CPU per PUT and its RSS;
 * - one more owner at N, and its removal, in process: the ops of its batch and the reads it made;
 * - a pass at N owners when nothing changed but the generation (another table was committed):
 *   an in-process keeper's request(), (a) after a read-back seeded the followed part, and (b) right
 *   after a registration (the followed part not seeded yet: the known state, with the events' proof that
 *   the commit was in another table), each with the kernel reads it made;
 * - RSS of `nfkeeper run` idle with examples/flannel.yaml and with one owned chain of 10,000 and
 *   100,000 rules (VmRSS after start-up and the 10 s read-back, and VmHWM).
 *
 * With `--root DIR` the daemon is another build's bin/nfkeeper.js (main's, for a before/after).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Agent } from 'node:http';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseConfig } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { NftSocket, open } from '../../src/netlink/socket.js';
import type { Op } from '../../src/netlink/ops.js';
import { OwnerRegistry, call } from '../../src/owners/index.js';
import { compileOwner } from '../../src/owners/spec.js';
import { ownersTable } from '../../src/owners/state-file.js';
import { ownerSpec, ownersYaml } from '../../test/owners/fixtures.js';
import { withBenchNetns } from '../lib/netns.js';
import { summarize, type Summary } from '../lib/stats.js';
import { daemonNodeFlags } from '../lib/node-flags.js';
import { recordArgs } from '../lib/record.js';
import { metricOf } from '../lib/metrics.js';

export interface S7Results {
  owners: number;
  rulesPerOwner: number;
  /** The daemon's build (this checkout, or --root). */
  root: string;
  register: Registration & { rssMiB: number; hwmMiB: number };
  /** The same N owners registered into a fresh daemon with this many PUTs in flight (one client process). */
  concurrent?: Registration[];
  one: { ops: number; reads: number; removeOps: number; removeReads: number };
  /** After a read-back: the followed part serves the pass. */
  pass: Summary;
  passReads: number;
  /** Right after a registration (each sample follows one): the known state and the events' proof. */
  passAfterPut?: Summary;
  passAfterPutReads?: number;
  rss: { config: string; rssMiB: number; hwmMiB: number }[];
  /** The kernel's share of the one-by-one registration: the same batches committed from one bare socket. */
  floor?: KernelFloor;
}

/**
 * What one registration at a time cannot go below on this kernel: the batches an in-process
 * keeper committed to register the same N owners one by one, replayed into a fresh namespace from
 * one bare socket (each guarded by the generation and echoed, as the keeper commits them), nothing
 * else between them. Each commit's time is encode + sendmsg (the kernel's transaction, with its
 * validation of the whole table) + the acks.
 */
export interface KernelFloor {
  owners: number;
  /** The registrations' commits, one after another, in total (ms) and as owners per second. */
  totalMs: number;
  perSecond: number;
  /** Each registration's commit, microseconds. */
  commit: Summary;
  /** The last 100 registrations' commits (the table at N - 100 to N owners), microseconds. */
  lastCommits: Summary;
  /** The same with a listener on the nftables multicast group (the daemon's monitor is one). */
  listened: Pick<KernelFloor, 'totalMs' | 'perSecond' | 'commit' | 'lastCommits'>;
  /** The start-up batches replayed before the registrations (not timed). */
  setupBatches: number;
}

export interface S7Options {
  owners: number;
  passes: number;
  rssSizes: number[];
  /** Concurrency levels measured after the one-by-one run (default none). */
  inFlight?: number[];
  root?: string;
  log: (msg: string) => void;
}

export interface Registration {
  /** PUTs in flight at once (1: one by one). */
  inFlight: number;
  totalMs: number;
  perSecond: number;
  /** Each PUT from sending to its answer, microseconds. */
  put: Summary;
  cpuMsPerPut: number;
  /** The client process's own CPU (user + system) per PUT: it must not be what limits the rate. */
  clientCpuMsPerPut: number;
  /** Owners batches the daemon committed (nfkeeper_repairs_total{cause="owners"}). */
  batches: number;
  /** The daemon's CPU per PUT on its main thread and on the others (10 ms ticks, so rough for the small ones). */
  threadCpuMsPerPut?: Record<string, number>;
  rssMiB?: number;
  hwmMiB?: number;
}

const CLK_TCK = 100;
const status = (pid: number) => readFileSync(`/proc/${pid}/status`, 'utf8');
const kib = (pid: number, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status(pid))![1]);
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(f[11]) + Number(f[12])) / CLK_TCK) * 1000;
};
/** The daemon's CPU (user + system, ms): its main thread's and its other threads' together. */
const threadCpuMs = (pid: number): Map<string, number> => {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      // Node 20 names no thread: the main one is the process's own id, the rest (V8's, libuv's, the addon's) "other".
      const name = Number(tid) === pid ? 'main' : process.env.S7_TIDS ? `tid${tid}` : 'other';
      const f = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      out.set(name, (out.get(name) ?? 0) + ((Number(f[11]) + Number(f[12])) / CLK_TCK) * 1000);
    } catch { /* the thread ended */ }
  }
  return out;
};
const id = (i: number) => `alloc-${String(i).padStart(5, '0')}`;
const us = (t0: number) => (performance.now() - t0) * 1000;

function daemon(root: string, config: string, ns: { path: string; record: string }, port: number, nodeFlags: string[] = []): { child: ChildProcess; ready: Promise<void>; stop: () => Promise<void> } {
  // With the Node flags bin/nfkeeper.js's first line gives, as the daemon runs when installed.
  const child = spawn(process.execPath, [...daemonNodeFlags(root), ...nodeFlags, join(root, 'bin', 'nfkeeper.js'), 'run', '--config', config, '--netns', ns.path, ...recordArgs(root, ns), '--interval', '1s',
    '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise((r) => child.on('exit', r));
  const ready = (async () => {
    for (let i = 0; i < 3000; i++) {
      if (await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.ok, () => false)) return;
      if (child.exitCode !== null) throw new Error('nfkeeper run exited before it was ready');
      await sleep(100);
    }
    throw new Error('nfkeeper run not ready in 300 s');
  })();
  return { child, ready, stop: async () => { child.kill('SIGTERM'); await exited; } };
}

const metric = async (port: number, name: string): Promise<number> => (await metricOf(port, name)) ?? NaN;

/**
 * N owners of 10 rules registered into a fresh `nfkeeper run` (its own namespace and state), with
 * `inFlight` PUTs outstanding at a time from this process over one keep-alive agent (1: each PUT
 * sent when the previous was answered). `cpuProfDir`: the daemon runs with --cpu-prof into it.
 */
export async function registerOwners(o: { root: string; dir: string; port: number; owners: number; inFlight: number;
  log: (msg: string) => void; settleMs?: number; cpuProfDir?: string; nodeFlags?: string[] }): Promise<Registration> {
  return withBenchNetns(`s7-reg${o.inFlight}`, async (ns) => {
    const dir = mkdtempSync(join(o.dir, 'reg-'));
    const file = join(dir, 'owners.yaml');
    writeFileSync(file, ownersYaml(dir));
    const d = daemon(o.root, file, ns, o.port, [...(o.nodeFlags ?? []), ...(o.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', o.cpuProfDir] : [])]);
    const agent = new Agent({ keepAlive: true, maxSockets: o.inFlight });
    try {
      await d.ready;
      const socket = join(dir, 'nfkeeper.sock');
      const batches0 = await metric(o.port, 'nfkeeper_repairs_total{cause="owners"}');
      const cpu0 = cpuMs(d.child.pid!);
      const threads0 = threadCpuMs(d.child.pid!);
      const client0 = process.cpuUsage();
      const puts: number[] = [];
      let next = 0;
      const t0 = performance.now();
      const worker = async () => {
        for (let i = next++; i < o.owners; i = next++) {
          const t = performance.now();
          const r = await call(socket, 'PUT', `/v1/owners/${id(i)}`, ownerSpec(i, 10), 120_000, agent);
          puts.push(us(t));
          if (r.status !== 201) throw new Error(`S7: PUT ${id(i)} answered ${r.status}: ${JSON.stringify(r.body)}`);
          if (puts.length % 250 === 0) o.log(`    ${puts.length} owners registered, ${o.inFlight} in flight (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
        }
      };
      await Promise.all(Array.from({ length: o.inFlight }, worker));
      const totalMs = performance.now() - t0;
      const client = process.cpuUsage(client0);
      const cpu = cpuMs(d.child.pid!) - cpu0;
      const threads = [...threadCpuMs(d.child.pid!)].map(([name, ms]) => [name, (ms - (threads0.get(name) ?? 0)) / o.owners] as const)
        .filter(([, ms]) => ms > 0).sort((a, b) => b[1] - a[1]);
      const batches = await metric(o.port, 'nfkeeper_repairs_total{cause="owners"}') - batches0;
      const s = open({ netns: ns.path });
      const chains = (await s.listChains({ family: 'ip', table: 'nfkeeper' })).length;
      s.close();
      if (chains !== o.owners + 2) throw new Error(`S7: ${chains} chains in the kernel after registering ${o.owners} owners`);
      const r: Registration = { inFlight: o.inFlight, totalMs, perSecond: o.owners / (totalMs / 1000), put: summarize(puts), cpuMsPerPut: cpu / o.owners,
        clientCpuMsPerPut: (client.user + client.system) / 1000 / o.owners, batches,
        threadCpuMsPerPut: Object.fromEntries(threads.map(([name, ms]) => [name, Math.round(ms * 1000) / 1000])) };
      if (o.settleMs) {
        // The daemon's memory with N owners, after the read-back of its trusted commits (10 s).
        await sleep(o.settleMs);
        r.rssMiB = kib(d.child.pid!, 'VmRSS') / 1024;
        r.hwmMiB = kib(d.child.pid!, 'VmHWM') / 1024;
      }
      o.log(`    ${o.owners} owners, ${o.inFlight === 1 ? 'one by one' : `${o.inFlight} in flight`}: ${totalMs.toFixed(0)} ms (${r.perSecond.toFixed(0)}/s), ` +
        `PUT p50 ${(r.put.median / 1000).toFixed(2)} ms, p99 ${(r.put.p99 / 1000).toFixed(2)} ms, daemon CPU ${r.cpuMsPerPut.toFixed(2)} ms/PUT, ` +
        `client CPU ${r.clientCpuMsPerPut.toFixed(2)} ms/PUT, ${batches} batches${r.rssMiB ? `, RSS ${r.rssMiB.toFixed(1)} MiB` : ''}`);
      o.log(`      daemon CPU per PUT by thread: ${threads.map(([name, ms]) => `${name} ${ms.toFixed(2)}`).join(', ')} ms`);
      return r;
    } finally {
      agent.destroy();
      await d.stop();
    }
  });
}

/**
 * KernelFloor: records the batches an in-process keeper commits while N owners are registered one
 * by one (OwnerRegistry.put, as the control socket's PUT does), then replays them from a bare socket.
 */
export async function kernelFloor(o: { dir: string; owners: number; log: (msg: string) => void }): Promise<KernelFloor> {
  const config = parseConfig(ownersYaml(o.dir), join(o.dir, 'owners.yaml'));
  const setup: Op[][] = [];
  const registrations: Op[][] = [];
  let recording: Op[][] = setup;
  const proto = NftSocket.prototype as unknown as Record<'commit' | 'commitNow', (this: NftSocket, b: Batch | readonly Op[], opts?: object) => unknown>;
  const original = { commit: proto.commit, commitNow: proto.commitNow };
  const record = (b: Batch | readonly Op[]) => {
    const ops = b instanceof Batch ? b.ops : b;
    if (ops.length > 0) recording.push([...ops]);
  };
  proto.commit = function (b, opts) { record(b); return original.commit.call(this, b, opts); };
  proto.commitNow = function (b, opts) {
    const r = original.commitNow.call(this, b, opts);
    if (r !== false) record(b);  // false: not committed, the caller commits it the other way
    return r;
  };
  try {
    await withBenchNetns('s7-floor-rec', async (ns) => {
      const keeper = new Keeper({ config, netns: ns.path, intervalMs: 3_600_000, owners: [] });
      keeper.on('error', () => undefined);
      await keeper.start();
      try {
        const registry = new OwnerRegistry(config, [], (next) => keeper.setOwners(next));
        for (let i = 0; i < o.owners; i++) {
          recording = registrations;
          const before = registrations.length;
          await registry.put(id(i), ownerSpec(i, 10));
          if (registrations.length !== before + 1) throw new Error(`S7 floor: registering ${id(i)} committed ${registrations.length - before} batches, not 1`);
        }
      } finally {
        recording = [];
        await keeper.stop();
      }
    });
  } finally {
    proto.commit = original.commit;
    proto.commitNow = original.commitNow;
  }
  const replay = (listening: boolean) => withBenchNetns(`s7-floor${listening ? 'm' : ''}`, async (ns) => {
    const sock = open({ netns: ns.path });
    // The daemon listens to the nftables group (its monitor): with a listener the kernel also builds
    // each change's notification. The listener here takes them and does nothing else.
    const monitor = listening ? new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 'nfkeeper' }], onBatch: () => undefined }) : undefined;
    try {
      // Handles are the table's counter: the same batches in the same order get the same handles.
      for (const ops of setup) await sock.commit(ops, { expectGeneration: sock.generation(), echo: true });
      const commits: number[] = [];
      for (const ops of registrations) {
        const gen = sock.generation();
        const t = performance.now();
        await sock.commit(ops, { expectGeneration: gen, echo: true });
        commits.push(us(t));
      }
      const chains = (await sock.listChains({ family: 'ip', table: 'nfkeeper' })).length;
      if (chains !== o.owners + 2) throw new Error(`S7 floor: ${chains} chains in the kernel after replaying ${o.owners} registrations`);
      return commits;
    } finally {
      monitor?.close();
      sock.close();
    }
  });
  const floorOf = (commits: number[]) => {
    const totalMs = commits.reduce((a, b) => a + b, 0) / 1000;
    return { totalMs, perSecond: o.owners / (totalMs / 1000), commit: summarize(commits), lastCommits: summarize(commits.slice(-100)) };
  };
  const bare = floorOf(await replay(false));
  const listened = floorOf(await replay(true));
  const r: KernelFloor = { owners: o.owners, ...bare, listened, setupBatches: setup.length };
  for (const [what, f] of [['one bare socket', bare], ['the same with a listener on the nftables group (as the daemon\'s monitor)', listened]] as const) {
    o.log(`    kernel floor, ${what}: the same ${o.owners} registrations' batches, ${f.totalMs.toFixed(0)} ms of commits ` +
      `(${f.perSecond.toFixed(0)}/s), commit p50 ${(f.commit.median / 1000).toFixed(2)} ms, the last 100 p50 ${(f.lastCommits.median / 1000).toFixed(2)} ms`);
  }
  return r;
}

export async function runS7(o: S7Options): Promise<S7Results> {
  const root = o.root ?? PROJECT_ROOT;
  const dir = mkdtempSync(join(tmpdir(), 'nfk-s7-'));
  const port = 19800 + (process.pid % 150);
  try {
    const out: Partial<S7Results> = { owners: o.owners, rulesPerOwner: 10, root: o.root ? o.root : 'this checkout', rss: [] };

    // Registration against the daemon as its own process: one by one, then with requests in flight.
    const reg = await registerOwners({ root, dir, port, owners: o.owners, inFlight: 1, log: o.log, settleMs: 12_000 });
    out.register = { ...reg, rssMiB: reg.rssMiB!, hwmMiB: reg.hwmMiB! };
    // The kernel's share of it, in the same run.
    out.floor = await kernelFloor({ dir, owners: o.owners, log: o.log });
    out.concurrent = [];
    for (const inFlight of o.inFlight ?? []) out.concurrent.push(await registerOwners({ root, dir, port, owners: o.owners, inFlight, log: o.log }));

    // One more owner, its removal, and passes when only the generation moved: in process.
    await withBenchNetns('s7-pass', async (ns) => {
      const config = parseConfig(ownersYaml(dir), join(dir, 'owners.yaml'));
      const { oc, table } = ownersTable(config);
      const owners = Array.from({ length: o.owners }, (_, i) => compileOwner(id(i), ownerSpec(i, 10), oc, table));
      rmSync(join(dir, 'state'), { recursive: true, force: true });
      const keeper = new Keeper({ config, netns: ns.path, intervalMs: 3_600_000, owners });
      keeper.on('error', () => undefined);
      await keeper.start();
      const sock = open({ netns: ns.path });
      try {
        const dumps = async () => (await keeper.metrics.dumps.get()).values[0]?.value ?? 0;
        // One decoding read (as the daemon's read-back does): the keeper learns every rule's digest.
        await keeper.readBack('tick', performance.now());
        const registry = new OwnerRegistry(config, owners, (next) => keeper.setOwners(next));
        let ops = 0;
        keeper.on('repaired', (r: RepairReport) => { ops = r.ops; });
        let before = await dumps();
        await registry.put('alloc-x', ownerSpec(o.owners + 1, 10));
        const one = { ops, reads: await dumps() - before, removeOps: 0, removeReads: 0 };
        before = await dumps();
        await registry.remove('alloc-x');
        one.removeOps = ops;
        one.removeReads = await dumps() - before;
        out.one = one;
        await keeper.readBack('tick', performance.now());
        const timePasses = async (before: () => Promise<void>): Promise<{ s: Summary; reads: number }> => {
          const passes: number[] = [];
          let reads = 0;
          for (let k = 0; k < o.passes + 1; k++) {
            await before();
            await sock.commit(new Batch().add('table', { family: 'ip', name: `elsewhere${elsewhere++}` }));
            const d0 = await dumps();
            const t = performance.now();
            const r = await keeper.request('tick', t);
            if (k > 0) passes.push(us(t));  // the first is a warm-up
            if (k > 0) reads += await dumps() - d0;
            if (r.ops !== 0 || r.status !== 'in-sync') throw new Error(`S7: a pass after a foreign commit did ${r.status} with ${r.ops} ops`);
          }
          return { s: summarize(passes), reads };
        };
        let elsewhere = 0;
        const followed = await timePasses(async () => undefined);
        out.pass = followed.s;
        out.passReads = followed.reads;
        let extra = 0;
        const afterPut = await timePasses(() => registry.put(`extra-${extra}`, ownerSpec(o.owners + 10 + extra++, 10)).then(() => undefined));
        out.passAfterPut = afterPut.s;
        out.passAfterPutReads = afterPut.reads;
        o.log(`    one owner at ${o.owners}: ${one.ops} ops, ${one.reads} reads; its removal ${one.removeOps} ops, ${one.removeReads} reads; ` +
          `pass when only the generation moved: p50 ${(out.pass.median / 1000).toFixed(2)} ms (${out.passReads} reads in ${o.passes}), ` +
          `right after a registration p50 ${(afterPut.s.median / 1000).toFixed(2)} ms (${afterPut.reads} reads in ${o.passes})`);
      } finally {
        sock.close();
        await keeper.stop();
      }
    });

    // RSS of the daemon.
    for (const n of o.rssSizes) {
      await withBenchNetns(`s7-rss-${n}`, async (ns) => {
        const file = join(dir, `rss-${n}.yaml`);
        const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
        writeFileSync(file, n === 0 ? readFileSync(join(PROJECT_ROOT, 'examples', 'flannel.yaml'), 'utf8')
          : `tables:\n  - family: ip\n    name: nfk-s7\n    chains:\n      - name: owned\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n` +
            Array.from({ length: n }, (_, i) => `          - ip saddr ${addr(i)} ip daddr 192.0.2.1 return`).join('\n') + '\n');
        const d = daemon(root, file, ns, port + 1);
        try {
          await d.ready;
          await sleep(15_000);  // start-up settled, the read-back done, some ticks
          const row = { config: n === 0 ? 'examples/flannel.yaml (4 rules)' : `one chain of ${n.toLocaleString('en-US')} rules`,
            rssMiB: kib(d.child.pid!, 'VmRSS') / 1024, hwmMiB: kib(d.child.pid!, 'VmHWM') / 1024 };
          out.rss!.push(row);
          o.log(`    RSS with ${row.config}: ${row.rssMiB.toFixed(1)} MiB (peak ${row.hwmMiB.toFixed(1)} MiB)`);
        } finally {
          await d.stop();
        }
      });
    }
    return out as S7Results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
