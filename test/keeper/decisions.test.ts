/**
 * Repair decisions the keeper makes, each on the fake kernel (no root, no namespace), that were
 * held only by tests on the real kernel, or by none: which path repairs (the followed part, or the
 * full pass past FOLLOW_MAX_OPS / FOLLOW_MAX_ELEMENTS), what a refusal of a repair planned from the
 * events means, when the tick repairs and reads our own commit back, when the followed part is
 * taken for wrong, how a rule that jumps, a set and a chain created again are put right, what in
 * an owned table is an owner's garbage, when the restart record is adopted, and a protected table
 * at start-up. docs/notes/2026-12-05-repair-decisions.md lists every decision with its test.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig, type Config } from '../../src/config/config.js';
import { Keeper, type KeeperOptions } from '../../src/keeper/keeper.js';
import { planTable } from '../../src/keeper/plan.js';
import { heldAsSent } from '../../src/keeper/reconciler.js';
import { TableOwnedError, diffTable } from '../../src/keeper/table.js';
import { Batch } from '../../src/netlink/batch.js';
import type { NftConn } from '../../src/netlink/conn.js';
import type { Family } from '../../src/netlink/expr.js';
import type { ObservedTable, Rule } from '../../src/netlink/objects.js';
import type { OwnedTable } from '../../src/keeper/owned-table.js';
import { compileOwner } from '../../src/owners/spec.js';
import { compileRule } from '../../src/rules/index.js';
import { FakeKernel } from '../helpers/fake-kernel.js';
import { tempDir } from '../helpers/tmp.js';
import { FLANNEL_RULES, FLANNEL_YAML, captureLog, flannelConfig, nextRepair, postroutingYaml } from './helpers.js';

const IP = { family: 'ip' as Family };
const OWNED = { family: 'ip' as Family, table: 'nfkeeper', chain: 'postrouting' };
const FLUSH = new Batch().flush('chain', { ...IP, table: 'nfkeeper', name: 'postrouting' });

let kernel: FakeKernel;
const keepers: Keeper[] = [];
afterEach(async () => {
  for (const k of keepers.splice(0)) await k.stop();
});

async function start(options: Partial<KeeperOptions> = {}): Promise<Keeper> {
  kernel = new FakeKernel();
  const k = new Keeper({ config: flannelConfig(), host: kernel, intervalMs: 3_600_000, ...options });
  k.on('error', () => undefined);
  keepers.push(k);
  await k.start();
  return k;
}

/** Turns of the event loop until `ok` holds (the fake's events come on immediates). */
async function turns(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** A keeper whose followed part is exact, counting its socket's rule reads (decoded or by digests). */
async function following(options: Partial<KeeperOptions> = {}): Promise<{ k: Keeper; reads: () => number }> {
  const k = await start(options);
  await turns('the followed part to be exact', () => k.followState()?.exact === true);
  await k.idle();
  let reads = 0;
  const sock = k.state.sock!;
  const { listRules, listRuleDigests } = sock;
  sock.listRules = (x) => (reads++, listRules.call(sock, x));
  sock.listRuleDigests = (x) => (reads++, listRuleDigests!.call(sock, x));
  return { k, reads: () => reads };
}

const lines = async (conn: NftConn, config: Config) => {
  const want = config.tables[0]!.chains[0]!.rules.map((r) => JSON.stringify(r.compiled.exprs));
  const have = (await conn.listRules(OWNED)).map((r) => JSON.stringify(r.exprs));
  return { want, have };
};
const counter = async (c: { get(): Promise<{ values: { value: number }[] }> }) => (await c.get()).values.reduce((s, v) => s + v.value, 0);

describe('which path repairs a foreign change', () => {
  it('more rule ops than the followed part plans (FOLLOW_MAX_OPS): left to the full pass, which repairs it', async () => {
    const rules = Array.from({ length: 70 }, (_, i) => `ip saddr 10.1.0.${i + 1} accept`);
    const config = parseConfig(postroutingYaml('nfkeeper', rules, 'postrouting'));
    const { k } = await following({ config });
    const fallbacks: unknown[] = [];
    k.state.events.on('follow-fallback', (reason: unknown) => fallbacks.push(reason));
    const repaired = nextRepair(k);
    kernel.tamper(FLUSH);
    const r = await repaired;
    await k.idle();
    expect(r.cause).toBe('event');
    expect(fallbacks.some((x) => /more than 64 rule ops/.test(String(x)))).toBe(true);
    const { want, have } = await lines(kernel.connect(), config);
    expect(have).toEqual(want);
  });

  it('a few rule ops: repaired from the followed part, nothing read, no fallback', async () => {
    const { k, reads } = await following();
    const fallbacks: unknown[] = [];
    k.state.events.on('follow-fallback', (reason: unknown) => fallbacks.push(reason));
    const repaired = nextRepair(k);
    kernel.tamper(FLUSH);
    expect((await repaired).ops).toBe(FLANNEL_RULES.length);
    await k.idle();
    expect([fallbacks, reads()]).toEqual([[], 0]);
  });
});

describe('a repair planned from the events, refused', () => {
  it('by the guard (a commit came first): counted as a retry, the generation read, and repaired from the followed part without a read', async () => {
    const { k, reads } = await following();
    const h = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
    kernel.refuse({ errno: 'ERESTART', portId: k.socket!.portId });
    const repaired = nextRepair(k);
    kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
    const g = kernel.generation;
    const r = await repaired;
    await k.idle();
    expect([r.ops, r.generation]).toEqual([1, g + 1]);
    expect(await counter(k.metrics.generationRetries)).toBe(1);
    expect(reads()).toBe(0);
    expect(k.followState()).toMatchObject({ exact: true });
  });

  it('otherwise (the kernel refused its ops): the followed part is off, and the full pass reads and repairs', async () => {
    const { k, reads } = await following();
    const h = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
    kernel.refuse({ errno: 'EINVAL', portId: k.socket!.portId, op: 0 });
    const repaired = nextRepair(k);
    kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
    const r = await repaired;
    await k.idle();
    expect(r.ops).toBe(1);
    expect(await counter(k.metrics.generationRetries)).toBe(0);
    expect(reads()).toBeGreaterThan(0);
    expect((await kernel.connect().listRules(OWNED))).toHaveLength(FLANNEL_RULES.length);
  });
});

describe('verification without events, and of our own commit', () => {
  it('with events off, the tick finds the generation moved and repairs', async () => {
    const k = await start({ events: false, intervalMs: 10 });
    const h = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
    const repaired = nextRepair(k);
    kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: h[2]! }));
    const r = await repaired;
    expect([r.cause, r.ops]).toEqual(['tick', 1]);
    expect(await kernel.connect().listRules(OWNED)).toHaveLength(FLANNEL_RULES.length);
  });

  it('a repair verified by its own commit is read back by a later tick, once; with nothing moved no tick reads', async () => {
    const { k, reads } = await following({ intervalMs: 5, trustOwnCommitMs: 30 });
    const h = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
    const repaired = nextRepair(k);
    kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
    await repaired;
    await k.idle();
    expect(reads()).toBe(0);
    await turns('the read-back', () => reads() > 0);
    await k.idle();
    const after = reads();
    // Ticks that find the generation unchanged read nothing more.
    let ticks = 0;
    k.on('tick', () => ticks++);
    await turns('ten more ticks', () => ticks >= 10);
    await k.idle();
    expect(reads()).toBe(after);
  });

  it('a read that finds a difference the followed part did not hold, at the generation it read, turns the followed part off', async () => {
    const { k } = await following();
    // A rule gone with no commit and no event (what a lost event would leave): the followed part still says exact.
    const fake = kernel as unknown as { tables: Map<string, { chains: Map<string, { rules: unknown[] }> }> };
    fake.tables.get('ip nfkeeper')!.chains.get('postrouting')!.rules.splice(1, 1);
    expect(k.followState()).toMatchObject({ exact: true });
    await k.readBack('tick', performance.now(), true);
    await k.idle();
    expect(k.followState()).toMatchObject({ exact: false, reason: expect.stringMatching(/a read found a difference the followed part did not hold/) });
  });
});

describe('the event repair beside a pass, and the read-back against the followed part', () => {
  /** A pass held on its first table read while another writer deletes an owned rule; what was committed meanwhile. */
  async function deletionDuringPass(committing: boolean) {
    const { k } = await following();
    // The pass waits on its first table read until released.
    const sock = k.state.sock!;
    const { getTable } = sock;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let waiting = false;
    sock.getTable = async (family, name) => {
      if (!waiting) {
        waiting = true;
        await gate;
      }
      return getTable.call(sock, family, name);
    };
    const pass = k.readBack('tick', performance.now(), true);
    // A pass that may commit queued behind the read: it plans and commits on its own.
    const queued = committing ? k.request('manual', performance.now()) : undefined;
    const repaired = nextRepair(k);
    let g: number;
    let meanwhile: { generation: number; rules: number };
    try {
      await turns('the pass to wait on its read', () => waiting);
      const h = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
      kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: h[1]! }));
      g = kernel.generation;
      await turns('the deletion handed over', () => k.state.view.generation >= g);
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      meanwhile = { generation: kernel.generation, rules: (await kernel.connect().listRules(OWNED)).length };
    } finally {
      release();
    }
    await pass;
    await queued;
    const r = await repaired;
    await k.idle();
    expect(r.ops).toBe(1);
    expect(await kernel.connect().listRules(OWNED)).toHaveLength(FLANNEL_RULES.length);
    // One repair in all: the pass (or the read) after it committed nothing more.
    expect(kernel.generation).toBe(g + 1);
    return { g, meanwhile };
  }

  it('a foreign change while a pass that may commit runs or waits is not repaired inline from the events: the pass that follows repairs it', async () => {
    const { g, meanwhile } = await deletionDuringPass(true);
    // The followed part was exact at the deletion, yet nothing was committed while the pass ran.
    expect(meanwhile).toEqual({ generation: g, rules: FLANNEL_RULES.length - 1 });
  });

  it('a foreign change while a background read runs (it commits nothing) is repaired inline from the events, the read held', async () => {
    const { g, meanwhile } = await deletionDuringPass(false);
    expect(meanwhile).toEqual({ generation: g + 1, rules: FLANNEL_RULES.length });
  });

  it('a read-back that finds the kernel as desired but the followed part otherwise: reseeded from the read and said (followed-diverged), nothing committed', async () => {
    const { k } = await following();
    let diverged = 0;
    k.state.events.on('followed-diverged', () => diverged++);
    // The followed part holds a rule at a handle the kernel does not (what an event followed wrongly would leave).
    const view = k.state.view as unknown as { find(family: string, name: string): OwnedTable | undefined };
    const c = view.find('ip', 'nfkeeper')!.followed!.chains.get('postrouting')!;
    const was = c.rules[1]!;
    c.byHandle.delete(was.handle!);
    c.rules[1] = { ...was, handle: 99_999 };
    c.byHandle.set(99_999, 1);
    const g = kernel.generation;
    await k.readBack('tick', performance.now(), true);
    await k.idle();
    expect(diverged).toBe(1);
    expect(kernel.generation).toBe(g);
    const handles = (await kernel.connect().listRules(OWNED)).map((r) => r.handle!);
    expect(k.state.view.handlesOf('ip', 'nfkeeper', 'postrouting')).toEqual(handles);
    expect(k.followState()).toMatchObject({ exact: true, generation: g });
  });
});

describe('how a chain is put right', () => {
  const CONFIG = parseConfig(postroutingYaml('t', ['ip saddr 10.0.0.1 accept', 'ip saddr 10.0.0.2 accept', 'ip saddr 10.0.0.3 accept'], 'c', { x: ['accept'] }));
  const table = CONFIG.tables[0]!;
  const compiled = (text: string, chain = 'c'): Rule['exprs'] => compileRule(text, { family: 'ip', table: 't', chain }).exprs;
  const observed = (middle: string): ObservedTable => {
    const rules: Rule[] = ['ip saddr 10.0.0.1 accept', middle, 'ip saddr 10.0.0.3 accept']
      .map((text, i) => ({ family: 'ip', table: 't', chain: 'c', handle: 10 + i, exprs: compiled(text) }));
    return {
      family: 'ip', name: 't', table: { family: 'ip', name: 't', flags: 0, use: 2 },
      chains: new Map([
        ['c', { family: 'ip', table: 't', name: 'c', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' }],
        ['x', { family: 'ip', table: 't', name: 'x' }],
      ]),
      rules: new Map([['c', rules], ['x', [{ family: 'ip', table: 't', chain: 'x', handle: 20, exprs: compiled('accept', 'x') }]]]),
      sets: new Map(),
    };
  };
  const plan = (middle: string) => {
    const obs = observed(middle);
    const batch = new Batch();
    planTable(batch, table, obs, diffTable(table, obs));
    return batch.ops.map((o) => [o.verb, o.object, (o as { handle?: number }).handle, (o as { position?: number }).position]);
  };

  it('a foreign rule in a desired rule\'s place is replaced in place, by its handle', () => {
    expect(plan('ip saddr 10.0.0.99 accept')).toEqual([['replace', 'rule', 11, undefined]]);
  });

  it('one that jumps is deleted and the desired rule added after its neighbour (the chain it jumps to may go in the same batch)', () => {
    expect(plan('ip saddr 10.0.0.99 jump x')).toEqual([['delete', 'rule', 11, undefined], ['add', 'rule', undefined, 10]]);
  });
});

describe('an owner\'s garbage in the owned table', () => {
  const CONFIG = () => parseConfig(`${FLANNEL_YAML}owners:\n  family: ip\n  table: nfkeeper\n  dispatch: [postrouting]\n  socket: /nonexistent/s\n  state: /nonexistent/o.json\n`);
  const spec = { chains: [{ name: 'masq', rules: ['ip daddr != 224.0.0.0/4 masquerade'] }], jumps: { postrouting: ['ip saddr 10.100.0.1/32 jump masq'] } };
  const tagged = (id: string | undefined, text: string) => {
    const c = compileRule(id ? `${text} comment "nfkeeper-owner=${id}"` : text, { family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
    return { exprs: c.exprs, ...(c.userdata ? { userdata: c.userdata } : {}) };
  };

  it('collected and named only when tagged with an owner nobody registered: not an untagged rule, not a registered owner\'s', async () => {
    const config = CONFIG();
    const a = compileOwner('a', spec, config.owners!, config.tables[0]!);
    const k = await start({ config, owners: [a] });
    const gc: { rules: { id: string }[]; chains: { id: string }[] }[] = [];
    k.state.events.on('owned-gc', (g: (typeof gc)[number]) => gc.push(g));
    kernel.tamper(new Batch()
      .add('chain', { ...IP, table: 'nfkeeper', name: 'o/ghost/x' })
      .add('rule', { ...OWNED, ...tagged('ghost', 'ip saddr 10.7.7.7 accept') })
      .add('rule', { ...OWNED, ...tagged('a', 'ip saddr 10.7.7.8 accept') })
      .add('rule', { ...OWNED, ...tagged(undefined, 'ip saddr 10.7.7.9 accept') }));
    // A full read, with the followed part's events left aside: the drift a read finds is what garbage is told from.
    await k.readBack('manual', performance.now());
    await k.idle();
    const conn = kernel.connect();
    expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name).sort()).toEqual(['o/a/masq', 'postrouting']);
    expect(gc.flatMap((g) => [...g.chains.map((c) => `chain ${c.id}`), ...g.rules.map((r) => `rule ${r.id}`)]).sort()).toEqual(['chain ghost', 'rule ghost']);
    expect(await counter(k.metrics.ownedGcCollected)).toBe(2);
  });
});

describe('element repairs, and sets created again', () => {
  const setConfig = (els: string[], flags = '') => parseNftConfig(`table ip nfkeeper {\n\tset allow {\n\t\ttype ipv4_addr\n${flags}` +
    `\t\telements = { ${els.join(', ')} }\n\t}\n\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n\t\tip daddr @allow accept\n\t}\n}\n`, 'allow.nft');
  const ALLOW = { ...IP, table: 'nfkeeper', set: 'allow' };
  const keys = (n: number) => Array.from({ length: n }, (_, i) => `10.2.${i >> 8}.${(i & 255) + 1}`);

  it('more elements than the followed part plans (FOLLOW_MAX_ELEMENTS): left to the full pass, which adds them back', async () => {
    const { k } = await following({ config: setConfig(keys(200)) });
    const fallbacks: unknown[] = [];
    k.state.events.on('follow-fallback', (reason: unknown) => fallbacks.push(reason));
    const conn = kernel.connect();
    const all = (await conn.listElements(ALLOW)).map((e) => e.key).sort();
    expect(all).toHaveLength(200);
    const repaired = nextRepair(k);
    // With a foreign element beside the deletions: no armed undo answers it (arming.ts), JavaScript does.
    kernel.tamper(new Batch().delete('element', { ...ALLOW, elements: all.slice(0, 195).map((key) => ({ key })) })
      .add('element', { ...ALLOW, elements: [{ key: '0a090909' }] }));
    const r = await repaired;
    await k.idle();
    expect(r.cause).toBe('event');
    expect(fallbacks.some((x) => /192 elements/.test(String(x)))).toBe(true);
    expect((await conn.listElements(ALLOW)).map((e) => e.key).sort()).toEqual(all);
  });

  it('a set created again (a constant set given other elements): the rules using it are deleted first and added back, in one batch', async () => {
    const k = await start({ config: setConfig(['10.0.0.1'], '\t\tflags constant\n') });
    const g = kernel.generation;
    await k.setConfig(setConfig(['10.0.0.2'], '\t\tflags constant\n'));
    expect(kernel.generation).toBe(g + 1);
    const ops = kernel.log.at(-1)!.ops.map((o) => `${o.verb} ${o.object}`);
    expect(ops.indexOf('delete set')).toBeGreaterThan(-1);
    // The rule that uses the set goes before the set, and comes back after it.
    expect(ops.findIndex((o) => /^(delete rule|flush chain)$/.test(o))).toBeLessThan(ops.indexOf('delete set'));
    expect(ops.lastIndexOf('add rule')).toBeGreaterThan(ops.lastIndexOf('add set'));
    const conn = kernel.connect();
    expect((await conn.listElements(ALLOW)).map((e) => e.key)).toEqual(['0a000002']);
    expect(await conn.listRules({ ...IP, table: 'nfkeeper', chain: 'out' })).toHaveLength(1);
  });
});

describe('the restart record', () => {
  /** A keeper on the flannel config with the record in `dir`, on `kernel`, counting its rule reads from the start. */
  async function withRecord(dir: string, bootIdPath: string): Promise<{ k: Keeper; reads: () => number; said: () => string }> {
    let reads = 0;
    const log = captureLog();
    const k = new Keeper({
      config: flannelConfig(), intervalMs: 3_600_000, record: { dir, version: 'test', bootIdPath }, logger: log.logger,
      host: {
        connect: () => {
          const sock = kernel.connect();
          const { listRules, listRuleDigests } = sock;
          sock.listRules = (x) => (reads++, listRules.call(sock, x));
          sock.listRuleDigests = (x) => (reads++, listRuleDigests.call(sock, x));
          return sock;
        },
        watch: (o) => kernel.watch(o),
      },
    });
    k.on('error', () => undefined);
    keepers.push(k);
    await k.start();
    await k.idle();
    return { k, reads: () => reads, said: () => {
      const l = log.lines.find((x) => String(x.msg).startsWith('restart record'));
      return `${String(l?.msg)}: ${String(l?.why ?? '')}`;
    } };
  }

  it('one that matches the kernel: the start-up plans from it and reads no rule; after a foreign commit meanwhile, the start-up reads and repairs', async () => {
    kernel = new FakeKernel();
    const dir = tempDir('record');
    const bootIdPath = join(tempDir('boot'), 'boot_id');
    writeFileSync(bootIdPath, '6d1c2f7e-0000-4000-8000-000000000001\n');
    const first = await withRecord(dir, bootIdPath);
    // Verified by a read, the record is written at stop.
    await first.k.readBack('tick', performance.now(), true);
    await first.k.idle();
    await first.k.stop();
    const g = kernel.generation;
    const again = await withRecord(dir, bootIdPath);
    expect(again.said()).toMatch(/^restart record matches the kernel/);
    expect([again.reads(), kernel.generation, again.k.isReady()]).toEqual([0, g, true]);
    await again.k.stop();
    // A rule deleted while no keeper ran: the tables and chains are as the record says, the generation is not.
    const conn = kernel.connect();
    kernel.tamper(new Batch().delete('rule', { ...OWNED, handle: (await conn.listRules(OWNED))[1]!.handle! }));
    const moved = await withRecord(dir, bootIdPath);
    expect(moved.said()).toMatch(/^restart record not used.*: the ruleset generation moved since it was written/);
    expect(moved.reads()).toBeGreaterThan(0);
    expect(await conn.listRules(OWNED)).toHaveLength(FLANNEL_RULES.length);
  });
});

describe('a chain created again', () => {
  const config = (comment: string) => parseNftConfig(`table ip nfkeeper {\n\tchain x {\n\t\tcomment "${comment}"\n\t\tcounter accept\n\t}\n` +
    '\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n\t\tip daddr 10.0.0.1 accept\n\t\tip daddr 10.0.0.2 jump x\n\t}\n}\n', 'x.nft');

  it('while a desired rule jumps to it: the chain holding that rule is rewritten in the same batch, the kernel takes it', async () => {
    const k = await start({ config: config('first') });
    const g = kernel.generation;
    await k.setConfig(config('second'));
    expect(kernel.generation).toBe(g + 1);
    const ops = kernel.log.at(-1)!.ops.map((o) => `${o.verb} ${o.object} ${(o as { name?: string; chain?: string }).name ?? (o as { chain?: string }).chain}`);
    expect(ops).toContain('delete chain x');
    expect(ops.some((o) => /^(flush chain out|delete rule out)$/.test(o))).toBe(true);
    const conn = kernel.connect();
    expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name).sort()).toEqual(['out', 'x']);
    expect(await conn.listRules({ ...IP, table: 'nfkeeper', chain: 'out' })).toHaveLength(2);
  });
});

describe('a protected table at start-up', () => {
  const PROTECTED = () => parseConfig(FLANNEL_YAML.replace('    name: nfkeeper\n', '    name: nfkeeper\n    protect: true\n'));

  it('owned by a live keeper: the second refuses to start and writes nothing; an orphan (its owner gone) is claimed without a rule rewritten', async () => {
    const first = await start({ config: PROTECTED() });
    const handles = (await kernel.connect().listRules(OWNED)).map((r) => r.handle);
    const g = kernel.generation;
    const second = new Keeper({ config: PROTECTED(), host: kernel, intervalMs: 3_600_000 });
    second.on('error', () => undefined);
    await expect(second.start()).rejects.toBeInstanceOf(TableOwnedError);
    expect(kernel.generation).toBe(g);
    await first.stop();
    const third = new Keeper({ config: PROTECTED(), host: kernel, intervalMs: 3_600_000 });
    third.on('error', () => undefined);
    keepers.push(third);
    await third.start();
    await third.idle();
    expect(kernel.generation).toBe(g + 1);
    expect(kernel.log.at(-1)!.ops.map((o) => `${o.verb} ${o.object}`)).toEqual(['add table']);
    expect((await kernel.connect().listRules(OWNED)).map((r) => r.handle)).toEqual(handles);
  });
});

describe("a commit's echo proving its batch (heldAsSent)", () => {
  it('every rule op added, inserted or replaced, the last one too, held with the digest sent (or, with anonymous sets, the unnamed one); a delete needs none', () => {
    const batch = new Batch();
    batch.add('table', { family: 'ip', name: 't' });
    for (let i = 0; i < 3; i++) batch.add('rule', { family: 'ip', table: 't', chain: 'c', exprs: [{ kind: 'counter' }] });
    batch.delete('rule', { family: 'ip', table: 't', chain: 'c', handle: 9 });
    const digests = ['', 'a', 'b', '', ''];
    const unnamed = [undefined, undefined, undefined, 'u', undefined];
    expect(heldAsSent(batch, { digests, unnamed, held: ['', 'a', 'b', 'u'] })).toBe(true);
    // The last rule op, the first, held otherwise or not echoed: not proved.
    expect(heldAsSent(batch, { digests, unnamed, held: ['', 'a', 'b', 'x'] })).toBe(false);
    expect(heldAsSent(batch, { digests, unnamed, held: ['', 'x', 'b', 'u'] })).toBe(false);
    expect(heldAsSent(batch, { digests, unnamed, held: ['', 'a', 'b'] })).toBe(false);
    // A rule op with neither digest: nothing to prove it by.
    expect(heldAsSent(batch, { digests, held: ['', 'a', 'b', 'u'] })).toBe(false);
  });
});
