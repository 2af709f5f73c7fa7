/**
 * Keeper, reconciler and GC logic against the fake kernel (no root, no
 * namespaces, seconds): coalescing, fights, rollback of refused changes, the
 * protect-mode fallback a kernel with the flags never exercises, the GC
 * fixpoint, and the guard's limits. The fake is held to the kernel by the
 * shared suite in behaviour.ts.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { DumpInterruptedError, GenerationRetriesExhaustedError, NetlinkError } from '../../src/base/errors.js';
import pino from 'pino';
import { GraceTracker, collect } from '../../src/gc/collect.js';
import { GC_SCHEMA } from '../../src/config/gc.js';
import { GcLoop } from '../../src/gc/daemon.js';
import { Keeper, checkOnce, type KeeperOptions, type PassOutcome } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import type { NftConn } from '../../src/netlink/conn.js';
import type { Family } from '../../src/netlink/expr.js';
import { RESENDS_PER_PLAN, commitGuarded } from '../../src/netlink/guard.js';
import { SET_F } from '../../src/netlink/objects.js';
import { compileOwner, parseOwnerChain } from '../../src/owners/spec.js';
import { compileRule } from '../../src/rules/index.js';
import { FakeKernel } from '../helpers/fake-kernel.js';
import { until } from '../helpers/wait.js';
import { FLANNEL_YAML, captureLog, flannelConfig, nextRepair, seedConfig, sleep } from './helpers.js';
import { loadAddon } from '../../src/netlink/addon.js';

const IP = { family: 'ip' as Family };
const CHAIN = { family: 'ip' as Family, table: 'nfkeeper', chain: 'postrouting' };
const FLUSH = new Batch().flush('chain', { ...IP, table: 'nfkeeper', name: 'postrouting' });
const rule = (text: string) => {
  const c = compileRule(text, { family: 'ip', table: 't', chain: 'c' });
  return { exprs: c.exprs, ...(c.userdata ? { userdata: c.userdata } : {}) };
};

let kernel: FakeKernel;
const keepers: Keeper[] = [];
afterEach(async () => {
  for (const k of keepers.splice(0)) await k.stop();
});

async function start(options: Partial<KeeperOptions> = {}): Promise<Keeper> {
  kernel ??= new FakeKernel();
  const k = new Keeper({ config: flannelConfig(), host: kernel, intervalMs: 3_600_000, ...options });
  k.on('error', () => undefined);
  keepers.push(k);
  await k.start();
  return k;
}

async function ruleCount(conn: NftConn): Promise<number> {
  return (await conn.listRules(CHAIN)).length;
}

/**
 * A keeper on a new fake kernel, its errors collected, and its chain flushed through its own port
 * (no event: only a request runs a pass); `conn` is a connection of the test's own.
 */
async function startFlushed(options: Partial<KeeperOptions> = {}): Promise<{ k: Keeper; errors: unknown[]; conn: NftConn }> {
  kernel = new FakeKernel();
  const k = await start(options);
  const errors: unknown[] = [];
  k.on('error', (e) => errors.push(e));
  const conn = kernel.connect();
  kernel.tamper(FLUSH, k.socket!.portId);
  return { k, errors, conn };
}


describe('/healthz (Keeper.healthy)', () => {
  it('is alive until no tick ran within three intervals and a second, and before the first tick; not once stopped', async () => {
    kernel = new FakeKernel();
    const idle = await start();  // an hour's interval: no tick is due yet
    expect(idle.healthy(performance.now() + 7_200_000)).toBe(true);
    const k = await start({ intervalMs: 50 });
    const tickAt = await new Promise<number>((resolve) => k.once('tick', () => resolve(performance.now())));
    expect(k.healthy(tickAt + 3 * 50 + 1000 - 20)).toBe(true);
    expect(k.healthy(tickAt + 3 * 50 + 1000 + 20)).toBe(false);
    await k.stop();
    expect(k.healthy()).toBe(false);
  });
});

describe('requests', () => {
  it('coalesce: one pass runs, one more waits, and every request made meanwhile shares that one', async () => {
    kernel = new FakeKernel();
    const k = await start();
    // Passes, counted where the scheduler runs one (from the followed part or a full pass, whichever can).
    const hooks = (k as unknown as { scheduler: { hooks: { run: (...a: unknown[]) => Promise<unknown> } } }).scheduler.hooks;
    const run = hooks.run.bind(hooks);
    let passes = 0;
    hooks.run = (...a: unknown[]) => { passes++; return run(...a); };
    const outcomes = await Promise.all(Array.from({ length: 10 }, () => k.request('manual', performance.now())));
    expect(passes).toBe(2);
    expect(outcomes.every((o) => o.status === 'in-sync' && o.cause === 'manual')).toBe(true);
  });

  it('a request made as the last pass settles starts a pass of its own instead of waiting forever', async () => {
    kernel = new FakeKernel();
    const k = await start();
    // Each continuation runs in the microtasks right after the previous pass settled its waiters.
    for (let i = 0; i < 20; i++) expect(await k.request('manual', 0)).toMatchObject({ status: 'in-sync' });
    const chained = await k.request('manual', 0).then(() => k.request('manual', 0)).then(() => k.request('manual', 0));
    expect(chained.status).toBe('in-sync');
    await k.idle();
  });

  it('a deliberate request joining a queued one runs it under its cause (no fight hold-back)', async () => {
    kernel = new FakeKernel();
    const k = await start();
    const [, second, third] = await Promise.all([k.request('tick', 0), k.request('tick', 0), k.request('reload', 0)]);
    expect(second).toMatchObject({ cause: 'reload' });
    expect(third).toMatchObject({ cause: 'reload' });
  });

  it('return their own pass\'s outcome: a refused pass rejects that request, and the next one repairs', async () => {
    const { k, errors, conn } = await startFlushed();
    kernel.refuse({ errno: 'EBUSY', op: (op) => op.object === 'rule' });
    const refused = await k.request('manual', performance.now()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(NetlinkError);
    expect((refused as NetlinkError).errnoName).toBe('EBUSY');
    expect(errors).toEqual([refused]);
    expect(k.status().lastError).toMatch(/Device or resource busy/);
    expect(await ruleCount(conn)).toBe(0);
    const ok: PassOutcome = await k.request('manual', performance.now());
    expect(ok).toMatchObject({ status: 'repaired', cause: 'manual' });
    expect(ok.drift.map((d) => d.kind)).toEqual(['rules-differ']);
    expect(await ruleCount(conn)).toBe(4);
    conn.close();
  });

  it('a read the addon refuses (a kernel message libnftnl would exit() on) fails that pass, not the daemon; the next pass reads again', async () => {
    const { k, errors, conn } = await startFlushed();
    // What a dump rejects with when a message fails one of libnftnl's attribute type checks
    // (native/attr.cc CheckRule): libnftnl is never handed it, so nothing calls exit().
    const refusal = new NetlinkError('cannot parse rule message: NFTA_RULE_EXPRESSIONS[0] > NFTA_EXPR_DATA (cmp) > ' +
      'NFTA_CMP_SREG is 2 bytes where libnftnl 1.2.4 wants a u32 (4 bytes) (and would exit(): "nf_tables kernel ABI is broken")', 74, 'decode rule');
    const sock = k.socket as unknown as Record<string, unknown>;
    const reads = ['listTables', 'listChains', 'listRules', 'listRuleDigests', 'listSets', 'listElements'];
    let refused = 0;
    for (const m of reads) sock[m] = () => { refused++; return Promise.reject(refusal); };
    const failed = await k.request('manual', performance.now()).catch((e: unknown) => e);
    for (const m of reads) delete sock[m];  // the prototype's methods again
    expect(refused).toBeGreaterThan(0);
    expect(failed).toBe(refusal);
    expect(errors).toEqual([refusal]);
    expect(k.status().lastError).toMatch(/NFTA_CMP_SREG is 2 bytes/);
    expect(k.healthy()).toBe(true);
    expect(await ruleCount(conn)).toBe(0);
    const ok: PassOutcome = await k.request('manual', performance.now());
    expect(ok).toMatchObject({ status: 'repaired', cause: 'manual' });
    expect(await ruleCount(conn)).toBe(4);
    conn.close();
  });

  it('a tick that finds the socket held (a dump in flight) skips its check; a tick that finds it free repairs', async () => {
    const { k, errors, conn } = await startFlushed({ intervalMs: 5 });
    // The addon's generation(true): undefined while a dump or commit holds the socket's gate.
    let held = true;
    let skipped = 0;
    const sock = k.socket!;
    (sock as { generationIfFree?: () => number | undefined }).generationIfFree = () => {
      if (held) {
        skipped++;
        return undefined;
      }
      return sock.generation();
    };
    const repaired = new Promise((resolve) => k.once('repaired', resolve));
    let ticks = 0;
    k.on('tick', () => { ticks++; });
    while (ticks < 5) await sleep(5);
    // The generation moved (the flush), but no tick read it while the socket was held.
    expect(skipped).toBeGreaterThanOrEqual(4);
    expect(await ruleCount(conn)).toBe(0);
    held = false;
    await repaired;
    expect(await ruleCount(conn)).toBe(4);
    expect(errors).toEqual([]);
    conn.close();
  });

  it('a background read whose digest dump a commit interrupts ends unread (moved): not retried, nothing decoded; the commit\'s pass repairs', async () => {
    kernel = new FakeKernel();
    let armed = false;
    let interrupted = 0;
    let decoded = 0;
    const host = {
      connect: () => {
        const c = kernel.connect();
        const digests = c.listRuleDigests.bind(c);
        const rules = c.listRules.bind(c);
        c.listRules = (f) => { if (interrupted > 0) decoded++; return rules(f); };
        c.listRuleDigests = (f: Parameters<typeof digests>[0] & { once?: boolean }) => {
          if (!armed || f.once !== true) return digests(f);
          armed = false;
          interrupted++;
          // A neighbour's commit while the kernel walks the chain: the dump is marked NLM_F_DUMP_INTR.
          kernel.tamper(FLUSH);
          return Promise.reject(new DumpInterruptedError('list rules', 1));
        };
        return c;
      },
      watch: kernel.watch.bind(kernel),
    };
    const k = await start({ host });
    const errors: unknown[] = [];
    k.on('error', (e) => errors.push(e));
    const conn = kernel.connect();
    await until('the followed part seeded', () => k.followState()?.exact === true);
    armed = true;
    // The safety net's read-back, in the background (a read that only observes): by digest, once.
    const outcome = await k.readBack('tick', performance.now(), true);
    expect(interrupted).toBe(1);
    expect(outcome).toMatchObject({ status: 'deferred', drift: [] });
    await until('the flushed chain repaired', async () => await ruleCount(conn) === 4);
    expect(decoded).toBe(0);
    expect(errors).toEqual([]);
    conn.close();
  });

  it('a background read-back that finds a commit after its dump while it compares the install\'s rules by turns gives up there: the repair waiting for it runs', async () => {
    // A chain of four calls of the desired digests: our own install, its rules' digests unknown (echoed handles, no read).
    const n = 4 * 4096;
    kernel = new FakeKernel();
    const k = await start({ config: seedConfig(n) });
    const errors: unknown[] = [];
    k.on('error', (e) => errors.push(e));
    const conn = kernel.connect();
    await until('the followed part seeded', () => k.followState()?.exact === true);
    const post = { family: 'ip' as Family, table: 'seed', chain: 'post' };
    const [, second] = await conn.listRules(post);
    const addon = loadAddon();
    const digests = addon.ruleDigests!;
    let calls = 0;
    try {
      addon.ruleDigests = (...a: Parameters<typeof digests>) => {
        // The comparison's calls (the fake digests its dump's rules one at a time): at the first, a neighbour deletes a rule.
        if (a[2].length > 1 && calls++ === 0) void conn.commit(new Batch().delete('rule', { ...post, handle: second!.handle! }));
        return digests(...a);
      };
      const outcome = await k.readBack('tick', performance.now(), true);
      expect(outcome).toMatchObject({ status: 'deferred', drift: [] });
      expect(calls).toBeGreaterThan(0);
      expect(calls).toBeLessThan(4);
    } finally {
      addon.ruleDigests = digests;
    }
    await until('the deleted rule put back', async () => (await conn.listRules(post)).length === n);
    expect(errors).toEqual([]);
    conn.close();
  });

  it('after stop() resolve as stopped', async () => {
    kernel = new FakeKernel();
    const k = await start();
    await k.stop();
    expect(await k.request('manual', 0)).toMatchObject({ status: 'stopped', ops: 0 });
  });
});

describe('fights', () => {
  it('backs off when a neighbour keeps undoing the rules, and recovers once it stops', async () => {
    // The keeper's clock and timers (performance, setTimeout, setInterval) are fake: the fight's
    // seconds pass at once. The fake kernel's watcher and connections run on immediates, which stay real.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance', 'Date'] });
    try {
      kernel = new FakeKernel();
      const k = await start({ fight: { threshold: 3, windowMs: 5000, baseMs: 50, capMs: 400, quietMs: 500 } });
      const levels: number[] = [];
      k.on('fight', (l: number) => levels.push(l));
      /** `ms` of the keeper's time, and what the keeper started meanwhile done. */
      const pass = async (ms: number) => {
        await vi.advanceTimersByTimeAsync(ms);
        for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
        await k.idle();
      };
      let tampers = 0;
      for (let t = 0; t < 1500; t += 10) {
        try {
          kernel.tamper(FLUSH);
          tampers++;
        } catch { /* the chain is momentarily gone */ }
        await pass(10);
      }
      const repairs = (await k.metrics.repairs.get()).values.reduce((a, v) => a + v.value, 0);
      expect(Math.max(...levels)).toBeGreaterThanOrEqual(2);
      expect(repairs).toBeLessThan(tampers);
      const conn = kernel.connect();
      await pass(600);  // one back-off step at most (cap 400 ms)
      expect(await ruleCount(conn)).toBe(4);
      await pass(600);  // the quiet spell
      await k.request('manual', performance.now());
      expect(levels.at(-1)).toBe(0);
      conn.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('start-up\'s install is no repair toward the fight: the first repair of what a neighbour undid is', async () => {
    kernel = new FakeKernel();
    // Every counted repair raises the level.
    const k = await start({ fight: { threshold: 1, windowMs: 3_600_000, baseMs: 60_000, capMs: 60_000, quietMs: 3_600_000 } });
    expect(kernel.log.filter((l) => l.portId === k.socket!.portId)).toHaveLength(1);  // the install
    expect(k.status().fightLevel).toBe(0);
    expect((await k.metrics.repairs.get()).values.find((v) => v.labels.cause === 'startup')?.value).toBe(1);
    const levels: number[] = [];
    k.on('fight', (l: number) => levels.push(l));
    const repaired = nextRepair(k);
    kernel.tamper(FLUSH);
    expect((await repaired).cause).toBe('event');
    expect(levels).toEqual([1]);
    expect(await ruleCount(kernel.connect())).toBe(4);
  });

  it('a deliberate change is not held back by the fight', async () => {
    kernel = new FakeKernel();
    const k = await start({ fight: { threshold: 2, windowMs: 60_000, baseMs: 10_000, capMs: 10_000, quietMs: 60_000 } });
    const levels: number[] = [];
    k.on('fight', (l: number) => levels.push(l));
    for (let i = 0; i < 100 && !levels.some((l) => l > 0); i++) {
      kernel.tamper(FLUSH);
      await sleep(20);
    }
    expect(levels.some((l) => l > 0)).toBe(true);
    await k.setConfig(parseConfig(`${FLANNEL_YAML}          - ip saddr 10.99.0.0/16 masquerade\n`, 'reload.yaml'));
    const conn = kernel.connect();
    expect(await ruleCount(conn)).toBe(5);
    conn.close();
  });
});

describe('rollback', () => {
  const TWO_TABLES = `${FLANNEL_YAML}  - family: ip6\n    name: nfkeeper6\n    chains: []\n`;

  it('a reload the kernel refuses leaves the old desired state in force, retired tables included', async () => {
    kernel = new FakeKernel();
    const k = await start({ config: parseConfig(TWO_TABLES) });
    const conn = kernel.connect();
    const handles = (await conn.listRules(CHAIN)).map((r) => r.handle);
    const gen = kernel.generation;
    kernel.refuse({ errno: 'EBUSY', op: (op) => op.object === 'chain' && op.name === 'extra' });
    const next = parseConfig(`${FLANNEL_YAML}      - name: extra\n        rules: ["return"]\n`);
    await expect(k.setConfig(next)).rejects.toThrow(/Device or resource busy/);
    expect(kernel.generation).toBe(gen);
    expect((await k.metrics.reloadFailed.get()).values[0]!.value).toBe(1);
    expect(k.status().tables.map((t) => t.name)).toEqual(['nfkeeper', 'nfkeeper6']);
    // The table the refused config dropped is not retired: a later pass keeps it.
    await k.request('manual', performance.now());
    expect(await conn.getTable('ip6', 'nfkeeper6')).toBeDefined();
    expect((await conn.listRules(CHAIN)).map((r) => r.handle)).toEqual(handles);
    // The same reload goes through once the kernel takes it, the drop included, in one batch.
    await k.setConfig(next);
    expect(kernel.generation).toBe(gen + 1);
    expect(await conn.getTable('ip6', 'nfkeeper6')).toBeUndefined();
    expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting', 'extra']);
    expect((await k.metrics.reloadFailed.get()).values[0]!.value).toBe(0);
    conn.close();
  });

  it('an owners change the kernel refuses leaves the previous owners in force', async () => {
    kernel = new FakeKernel();
    const config = parseConfig(`${FLANNEL_YAML}owners:\n  family: ip\n  table: nfkeeper\n  dispatch: [postrouting]\n  socket: /nonexistent/s\n  state: /nonexistent/o.json\n`);
    const spec = (i: number) => ({ chains: [{ name: 'masq', rules: ['ip daddr != 224.0.0.0/4 masquerade'] }],
      jumps: { postrouting: [`ip saddr 10.100.0.${i}/32 jump masq`] } });
    const a = compileOwner('a', spec(1), config.owners!, config.tables[0]!);
    const b = compileOwner('b', spec(2), config.owners!, config.tables[0]!);
    const k = await start({ config, owners: [a] });
    const conn = kernel.connect();
    const chains = async () => (await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name).sort();
    expect(await chains()).toEqual(['o/a/masq', 'postrouting']);
    kernel.refuse({ errno: 'EBUSY', op: (op) => op.object === 'chain' && parseOwnerChain(op.name ?? '')?.id === 'b' });
    await expect(k.setOwners([b])).rejects.toThrow(/Device or resource busy/);
    expect(await chains()).toEqual(['o/a/masq', 'postrouting']);
    expect(await k.request('manual', performance.now())).toMatchObject({ status: 'in-sync' });
    await k.setOwners([b]);  // a goes (owned GC) and b comes, in one batch
    expect(await chains()).toEqual(['o/b/masq', 'postrouting']);
    conn.close();
  });
});

describe('protect mode on a kernel without the flags', () => {
  const PROTECTED = () => parseConfig(FLANNEL_YAML.replace('    name: nfkeeper\n', '    name: nfkeeper\n    protect: true\n'));

  it('the keeper logs it once and keeps repairing, unprotected', async () => {
    kernel = new FakeKernel();
    kernel.protectFlags = false;
    const log = captureLog();
    const k = await start({ config: PROTECTED(), logger: log.logger });
    const conn = kernel.connect();
    expect(await conn.getTable('ip', 'nfkeeper')).toMatchObject({ flags: 0 });
    expect(k.status().tables[0]).toMatchObject({ state: 'verified', protection: 'unprotected' });
    const repaired = nextRepair(k);
    kernel.tamper(FLUSH);
    expect((await repaired).cause).toBe('event');
    expect(await ruleCount(conn)).toBe(4);
    expect(log.lines.filter((l) => /protect mode is off/.test(String(l.msg)))).toHaveLength(1);
    conn.close();
  });

  it('apply falls back the same way and says so', async () => {
    kernel = new FakeKernel();
    kernel.protectFlags = false;
    const conn = kernel.connect();
    const r = await checkOnce(conn, PROTECTED(), true);
    expect(r.protectUnsupported).toBe(true);
    expect(r.ops).toBeGreaterThan(0);
    expect(await conn.getTable('ip', 'nfkeeper')).toMatchObject({ flags: 0 });
    expect(await ruleCount(conn)).toBe(4);
    conn.close();
  });
});

describe('apply', () => {
  it('deletes retired tables in the same batch as the rest', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    kernel.tamper(new Batch().add('table', { family: 'ip6', name: 'old' }));
    const gen = kernel.generation;
    const r = await checkOnce(conn, flannelConfig(), true, [], { retired: [{ family: 'ip6', name: 'old' }] });
    expect(r.ops).toBeGreaterThan(0);
    expect(kernel.generation).toBe(gen + 1);
    expect(await conn.getTable('ip6', 'old')).toBeUndefined();
    conn.close();
  });

  it('refused by other tables\' commits: the guard opens the resend proof at the first refusal (one watcher, over the desired and retired tables), a later plan refused is sent again, the watcher closed at the end', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    await checkOnce(conn, flannelConfig(), true);
    kernel.tamper(new Batch().flush('chain', { ...IP, table: 'nfkeeper', name: 'postrouting' }).add('table', { family: 'ip6', name: 'old' }));
    // A bystander commits before each of apply's first three commits.
    let n = 0;
    kernel.beforeCommit = (port) => {
      if (port === conn.portId && n < 3) kernel.tamper(new Batch().add('table', { ...IP, name: `bystander${n++}` }));
    };
    const watched: { tables: unknown; closed: boolean }[] = [];
    const r = await checkOnce(conn, flannelConfig(), true, [], {
      retired: [{ family: 'ip6', name: 'old' }],
      watch: (o) => {
        const w = kernel.watch(o);
        const seen = { tables: o.tables, closed: false };
        watched.push(seen);
        const close = w.close.bind(w);
        w.close = () => { seen.closed = true; close(); };
        return w;
      },
    });
    expect(await ruleCount(conn)).toBe(4);
    expect(await conn.getTable('ip6', 'old')).toBeUndefined();
    expect(r.ops).toBe(5);
    expect(watched).toEqual([{ tables: [{ family: 'ip', name: 'nfkeeper' }, { family: 'ip6', name: 'old' }], closed: true }]);
    // The first plan, read before the proof joined: refused and planned again; the second refused twice, sent again each time.
    expect(kernel.log.filter((l) => l.portId === conn.portId).slice(-4).map((l) => l.ok)).toEqual([false, false, false, true]);
    conn.close();
  });

  it("an entry's held-as-sent proof on the in-memory kernel: none read or kept (it names no kernel build), the full echo asked", async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    const path = join(mkdtempSync(join(tmpdir(), 'nfk-fake-proof-')), 'compiled-x.held');
    writeFileSync(path, `${JSON.stringify({ entry: 'e', kernel: 'undefined' })}\n`);
    const echo: unknown[] = [];
    const commit = conn.commit.bind(conn);
    conn.commit = (batch, options) => {
      echo.push(options?.echo);
      return commit(batch, options);
    };
    const r = await checkOnce(conn, flannelConfig(), true, [], { proof: { path, token: 'e' } });
    expect(echo[0]).toBe(true);
    expect(r.held).toBeUndefined();
    expect(await ruleCount(conn)).toBe(4);
    expect(readFileSync(path, 'utf8')).toBe(`${JSON.stringify({ entry: 'e', kernel: 'undefined' })}\n`);
    conn.close();
  });

  it('check reports drift and writes nothing', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    const r = await checkOnce(conn, flannelConfig(), false);
    expect(r.drift[0]!.drift.map((d) => d.kind)).toEqual(['table-missing']);
    expect(r.ops).toBe(0);
    expect(kernel.log).toHaveLength(0);
    conn.close();
  });
});

describe('events', () => {
  it('an overflowed event socket (ENOBUFS) makes the keeper resync from a dump', async () => {
    kernel = new FakeKernel();
    const k = await start();
    kernel.tamper(FLUSH, k.socket!.portId);  // no event reaches the keeper for this one
    const repaired = nextRepair(k);
    kernel.overflow();
    expect((await repaired).cause).toBe('overflow');
    expect((await k.metrics.overflows.get()).values[0]!.value).toBe(1);
  });

  it('gives up a pass after its attempts when the ruleset never holds still', async () => {
    kernel = new FakeKernel();
    const k = await start({ maxGenerationRetries: 4 });
    let n = 0;
    kernel.beforeCommit = (port) => {
      if (port === k.socket!.portId) kernel.tamper(new Batch().add('table', { ...IP, name: `bystander${n++}` }));
    };
    kernel.tamper(FLUSH, k.socket!.portId);
    const e = await k.request('manual', performance.now()).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(GenerationRetriesExhaustedError);
    expect((e as GenerationRetriesExhaustedError).attempts).toBe(4);
    // Each plan refused, then sent again as long as the events proved the bystanders' commits left the table alone (guard.ts).
    expect((await k.metrics.generationRetries.get()).values[0]!.value).toBe(4 * (1 + RESENDS_PER_PLAN));
    kernel.beforeCommit = undefined;
  });
});

describe('foreign GC', () => {
  const foreign = [{ family: 'ip' as const, table: 'nat', tag: 'alloc=<id>' }];
  const nat = (chain: string) => ({ ...IP, table: 'nat', chain });

  function seed(k: FakeKernel): void {
    const b = new Batch().add('table', { ...IP, name: 'nat' })
      .add('chain', { ...IP, table: 'nat', name: 'POSTROUTING', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' });
    for (const c of ['d1', 'd2', 'd3', 'shared', 'mapped']) b.add('chain', { ...IP, table: 'nat', name: c });
    b.add('rule', { ...nat('d3'), ...rule('masquerade') })
      .add('rule', { ...nat('d2'), ...rule('jump d3') })
      .add('rule', { ...nat('d1'), ...rule('jump d2') })
      .add('rule', { ...nat('d1'), ...rule('jump shared') })
      .add('rule', { ...nat('d1'), ...rule('jump mapped') })
      .add('rule', { ...nat('POSTROUTING'), ...rule('ip saddr 10.1.0.1 jump d1 comment "alloc=dead"') })
      .add('rule', { ...nat('POSTROUTING'), ...rule('ip saddr 10.1.0.9 jump shared') })
      // A verdict map also points at `mapped`: the kernel's use count says so, and the chain stays.
      .add('set', { ...IP, table: 'nat', name: 'vmap', flags: SET_F.MAP, keyType: 7, keyLen: 4, dataType: 0xffffff00, dataLen: 16,
        elements: [{ key: '0a000001', verdict: 'jump', chain: 'mapped' }] });
    k.tamper(b);
  }

  it('follows chains reached only from garbage to a fixpoint, and stops at chains something else reaches', async () => {
    kernel = new FakeKernel();
    seed(kernel);
    const conn = kernel.connect();
    const gen = kernel.generation;
    const r = await collect(conn, { foreign, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    expect(r.collected).toBe(true);
    expect(r.garbage).toHaveLength(1);
    expect(r.garbage[0]!.chains.map((c) => c.name).sort()).toEqual(['d1', 'd2', 'd3']);
    expect(kernel.generation).toBe(gen + 1);
    expect((await conn.listChains({ ...IP, table: 'nat' })).map((c) => c.name)).toEqual(['POSTROUTING', 'shared', 'mapped']);
    expect(await conn.listRules(nat('POSTROUTING'))).toHaveLength(1);
    const again = await collect(conn, { foreign, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    expect(again).toMatchObject({ collected: false, ops: 0, garbage: [] });
    conn.close();
  });

  it('rescans when another writer commits first, and gives up after 5 attempts when they never stop', async () => {
    kernel = new FakeKernel();
    seed(kernel);
    const conn = kernel.connect();
    let n = 0;
    kernel.beforeCommit = (port) => {
      if (port === conn.portId && n++ === 0) kernel.tamper(new Batch().add('table', { ...IP, name: 'bystander' }));
    };
    const r = await collect(conn, { foreign, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    expect(r).toMatchObject({ attempts: 2, collected: true });
    seed(kernel);
    kernel.beforeCommit = (port) => {
      if (port === conn.portId) kernel.tamper(new Batch().add('table', { ...IP, name: `bystander${n++}` }));
    };
    const e = await collect(conn, { foreign, live: new Set(), graceMs: 0, tracker: new GraceTracker() }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(GenerationRetriesExhaustedError);
    expect((e as GenerationRetriesExhaustedError).attempts).toBe(5);
    expect(await conn.listChains({ ...IP, table: 'nat' })).toHaveLength(6);
    conn.close();
  });
});

describe('foreign GC in the daemon', () => {
  it('GcLoop collects through the host it is given', async () => {
    kernel = new FakeKernel();
    kernel.tamper(new Batch().add('table', { ...IP, name: 'nat' })
      .add('chain', { ...IP, table: 'nat', name: 'POSTROUTING', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' })
      .add('rule', { ...IP, table: 'nat', chain: 'POSTROUTING', ...rule('ip saddr 10.1.0.1 masquerade comment "alloc=dead"') })
      .add('rule', { ...IP, table: 'nat', chain: 'POSTROUTING', ...rule('ip saddr 10.1.0.2 masquerade comment "alloc=live"') }));
    const gc = GC_SCHEMA.parse({ enabled: true, grace: '0s', foreign: [{ family: 'ip', table: 'nat', tag: 'alloc=<id>' }] });
    const loop = new GcLoop({ gc, host: kernel, logger: pino({ level: 'silent' }), liveIds: () => ['live'] });
    const r = await loop.runOnce();
    expect(r).toMatchObject({ collected: true, ops: 1 });
    expect(r!.garbage.map((g) => g.id)).toEqual(['dead']);
    await loop.stop();
    expect(kernel.openPorts).toEqual([]);
  });
});

describe('commitGuarded', () => {
  it('commits with the generation the plan saw; untilClean observes again until a plan has nothing to commit', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    const seen: number[] = [];
    const r = await commitGuarded(conn, async (generation, attempt) => {
      seen.push(generation);
      return attempt < 3 ? { value: attempt, batch: new Batch().add('table', { ...IP, name: `t${attempt}` }) } : { value: attempt };
    }, { attempts: 10, untilClean: true });
    expect(r).toEqual({ value: 3, attempts: 3, ops: 2, generation: 3 });
    expect(seen).toEqual([1, 2, 3]);
    expect(kernel.log.map((l) => l.ok)).toEqual([true, true]);
    conn.close();
  });

  it('a proof (GuardOptions.proof) is opened at the first refusal, proves only later plans, is told their generations and closed at the end', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    const events: string[] = [];
    // A bystander commits before each of our first three commits.
    let n = 0;
    kernel.beforeCommit = (port) => {
      if (port === conn.portId && n < 3) kernel.tamper(new Batch().add('table', { ...IP, name: `bystander${n++}` }));
    };
    const r = await commitGuarded(conn, async (generation, attempt) => {
      events.push(`plan ${attempt} at ${generation}`);
      return { value: attempt, batch: new Batch().add('table', { ...IP, name: 't' }) };
    }, {
      attempts: 5,
      proof: () => {
        events.push('open');
        return {
          stillHolds: async (planned) => {
            events.push(`proof of ${planned}`);
            return kernel.generation;
          },
          planned: (generation) => events.push(`planned ${generation}`),
          close: () => events.push('close'),
        };
      },
    });
    expect(r).toMatchObject({ value: 2, attempts: 2, ops: 1 });
    // Plan 1 was read before the proof joined: planned again. Plan 2's refusals are proved and sent again.
    expect(events).toEqual(['plan 1 at 1', 'open', 'planned 2', 'plan 2 at 2', 'proof of 2', 'proof of 2', 'close']);
    expect(kernel.log.filter((l) => l.portId === conn.portId).map((l) => l.ok)).toEqual([false, false, false, true]);
    conn.close();
  });

  it('replans after a refusal the caller can avoid, and rethrows any other', async () => {
    kernel = new FakeKernel();
    const conn = kernel.connect();
    kernel.refuse({ errno: 'EOPNOTSUPP', times: 1 });
    let replans = 0;
    const plan = async () => ({ value: 0, batch: new Batch().add('table', { ...IP, name: 't' }) });
    const r = await commitGuarded(conn, plan, { attempts: 3, replan: () => ++replans === 1 });
    expect(r).toMatchObject({ attempts: 2, ops: 1 });
    kernel.refuse({ errno: 'EBUSY', op: (op: Op) => op.object === 'table' });
    await expect(commitGuarded(conn, plan, { attempts: 3, replan: () => false })).rejects.toThrow(/Device or resource busy/);
    conn.close();
  });
});
