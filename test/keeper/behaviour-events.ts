/**
 * The shared behaviour suite's event-stream cases (behaviour.ts runs them against the kernel and
 * the fake): what a watcher is handed per committed batch, what a commit echoes, the digests a
 * dump gives, and the keeper's repairs driven by them: a foreign change to an owned table repaired
 * from the followed part (no dump, one commit, its own commit waking nothing), also when a commit
 * elsewhere comes between the change and its repair; an owned set's elements, repaired and
 * reloaded per element from the events; an event the view cannot follow in one owned table
 * reading that table alone, while another is repaired from the events; a deleted table by a full pass, churn in a
 * table it does not own costing nothing, and the fight's back-off. A watcher's armed reactions
 * (NftWatch.arm; native/monitor.cc React) on their own: what they answer, with what, and when the
 * arm ends (armCases). Nothing here waits on a timer: the
 * waits are for the keeper's events, its idle(), or turns of the event loop (the kernel's
 * notifications arrive on its poll phase, the fake's on immediates).
 */
import { expect, it } from 'vitest';
import type { Keeper, KeeperOptions, RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { CommitResult, NftConn, NftWatch } from '../../src/netlink/conn.js';
import type { EventKey, MonitorBatch, MonitorEvent, Reaction } from '../../src/netlink/events.js';
import type { Op } from '../../src/netlink/ops.js';
import type { Family } from '../../src/netlink/expr.js';
import type { NftSet } from '../../src/netlink/objects.js';
import { ruleDigester } from '../../src/netlink/socket.js';
import { compileRule } from '../../src/rules/index.js';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { FLANNEL_RULES, flannelConfig, nextRepair, postroutingYaml } from './helpers.js';
import type { World } from './behaviour.js';
import { planConfig, readPlanChain } from './plan-fixtures.js';

const IP = { family: 'ip' as Family };
const T = { family: 'ip' as Family, table: 't' };
const OWNED = { family: 'ip' as Family, table: 'nfkeeper', chain: 'postrouting' };
const NAMED: NftSet = { ...T, name: 'named', keyType: 7, keyLen: 4, flags: 0 };
const compiled = (text: string) => {
  const c = compileRule(text, { family: 'ip', table: 't', chain: 'c', sets: new Map([['named', NAMED]]) });
  return { exprs: c.exprs, ...(c.userdata ? { userdata: c.userdata } : {}), sets: c.sets };
};
const rule = (text: string) => {
  const { sets: _sets, ...r } = compiled(text);
  return r;
};

/** What the behaviour suite hands these cases: its world and connections, a keeper on the flannel config, a chain's rules as text. */
export interface Fixture {
  world(): World;
  conn(): NftConn;
  other(): NftConn;
  keeper(options?: Partial<KeeperOptions>): Promise<Keeper>;
  lines(conn: NftConn, chain?: { family: Family; table: string; chain: string }): Promise<string[]>;
}

/** Turns of the event loop until `ok` holds (no timer: a busy wait, bounded by wall time). */
async function turns(what: string, ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

const monitorOf = (k: Keeper) => k.state.monitor!;
const dumps = async (k: Keeper) => (await k.metrics.dumps.get()).values[0]?.value ?? 0;

/** The keeper's monitor has read the commit that made `generation`, and what it started is done. */
async function seen(k: Keeper, generation: number): Promise<void> {
  await turns(`the monitor to read generation ${generation}`, () => monitorOf(k).progress!().lastGeneration >= generation);
  await k.idle();
}

/** Waits until the followed part is exact (its 'followed' event, or already). */
async function followedExact(k: Keeper): Promise<void> {
  if (k.followState()?.exact) return;
  await new Promise<void>((resolve) => {
    const on = (s: { exact: boolean } | undefined) => {
      if (!s?.exact) return;
      k.off('followed', on);
      resolve();
    };
    k.on('followed', on);
  });
}

export function eventCases(f: Fixture): void {
  /** The flannel table and a second owned table holding `rules`. */
  const twoTablesConfig = (rules: readonly string[]) => parseConfig(`${postroutingYaml('nfkeeper', FLANNEL_RULES, 'postrouting')}${
    postroutingYaml('second', rules).replace('tables:\n', '')}`, 'two.yaml');
  /** A keeper on twoTablesConfig(rules), its events exact, counting its socket's rule dumps (decoded or digests) per table. */
  const twoTables = async (rules: readonly string[]): Promise<{ k: Keeper; dumped: Map<string, number> }> => {
    const k = await f.keeper({ config: twoTablesConfig(rules) });
    await followedExact(k);
    await k.idle();
    const dumped = new Map<string, number>();
    const sock = k.state.sock!;
    const { listRules, listRuleDigests } = sock;
    const count = (t: { table: string }) => dumped.set(t.table, (dumped.get(t.table) ?? 0) + 1);
    sock.listRules = (x) => (count(x), listRules.call(sock, x));
    sock.listRuleDigests = (x) => (count(x), listRuleDigests!.call(sock, x));
    return { k, dumped };
  };

  it('events: one record per committed batch, with its generation and the run of whole commits; echoed handles; skipOwn', async () => {
    const conn = f.conn();
    const other = f.other();
    const records: string[] = [];
    const g0 = conn.generation();
    const rel = (g: number) => (g === 0 ? '0' : `+${g - g0}`);
    const w = f.world().host.watch({ tables: [{ ...IP, name: 't' }], ignorePorts: [conn.portId], ownCommits: true, onBatch: (b) => {
      const p = w.progress!();
      records.push(`${b.overflow ? 'overflow' : `gen ${rel(b.generation)}`} since ${rel(b.since ?? 0)} ${b.foreign ? 'foreign' : 'own'}` +
        `${b.truncated ? ' truncated' : ''}, progress ${rel(p.lastGeneration)} ${rel(p.runStart)} ${p.delivered}: ` +
        b.events.map((e) => describe(e, conn.portId, other.portId)).join('; '));
    } });
    // A watcher never anchored: the first commit it reads may be partial, so its run starts after it.
    const plain: string[] = [];
    const w2 = f.world().host.watch({ tables: [{ ...IP, name: 't' }], onBatch: (b) => plain.push(`gen ${rel(b.generation)} since ${rel(b.since ?? 0)}`) });
    const step = async (c: NftConn, b: Batch, echo = false): Promise<string | undefined> => {
      const r = await c.commit(b, { echo });
      await turns('the watchers to read the commit', () => w.progress!().lastGeneration === conn.generation() && w2.progress!().lastGeneration === conn.generation());
      return echoed(r);
    };
    try {
      w.anchor!(g0, 0);
      expect(w.progress!()).toEqual({ lastGeneration: g0, runStart: g0 + 1, delivered: 0 });
      const s = compiled('ip saddr { 10.1.0.1, 10.1.0.2 } accept');
      const anon = new Batch();
      for (const x of s.sets) anon.add('set', { ...x, ...T });
      anon.add('rule', { ...T, chain: 'd', exprs: s.exprs });
      const echoes = [
        await step(conn, new Batch().add('table', { ...IP, name: 't' })
          .add('chain', { ...T, name: 'c', type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' }).add('chain', { ...T, name: 'd' })
          .add('rule', { ...T, chain: 'c', ...rule('ip saddr 10.0.0.1 return') }).add('rule', { ...T, chain: 'c', ...rule('ip saddr 10.0.0.2 return') })
          .add('rule', { ...T, chain: 'c', ...rule('ip saddr 10.0.0.3 masquerade comment "x"') })
          .add('set', { ...T, name: 's', keyType: 7, keyLen: 4, flags: 0, elements: [{ key: '0a000001' }, { key: '0a000002' }] }), true),
        // After a handle, at the head, after a rule of this batch (its id), and in place.
        await step(conn, new Batch().add('rule', { ...T, chain: 'c', position: 3, id: 1, ...rule('ip saddr 10.0.0.4 return') })
          .insert('rule', { ...T, chain: 'c', ...rule('ip saddr 10.0.0.5 return') })
          .add('rule', { ...T, chain: 'c', positionId: 1, ...rule('ip saddr 10.0.0.6 return') })
          .replace('rule', { ...T, chain: 'c', handle: 4, ...rule('ip saddr 10.0.0.7 return') }), true),
        await step(other, new Batch().delete('rule', { ...T, chain: 'c', handle: 7 })),
        await step(other, new Batch().insert('rule', { ...T, chain: 'c', position: 9, ...rule('ip saddr 192.0.2.2 accept') })
          .replace('rule', { ...T, chain: 'c', handle: 9, ...rule('ip saddr 192.0.2.3 accept') })),
        await step(other, new Batch().add('element', { ...T, set: 's', elements: [{ key: '0a000003' }] })
          .delete('element', { ...T, set: 's', elements: [{ key: '0a000001' }] })),
        await step(other, anon),
        // Another table: read (the run goes on), not handed over.
        await step(other, new Batch().add('table', { ...IP, name: 'u' }).add('chain', { ...IP, table: 'u', name: 'x' })),
        await step(other, new Batch().flush('chain', { ...T, name: 'd' })),
      ];
      expect(echoes).toEqual(['3:3 4:4 5:5', '0:7 1:8 2:9 3:4', undefined, undefined, undefined, undefined, undefined, undefined]);
      // Nothing changed, no generation, no record: an element the set holds, a table re-added unchanged.
      const g = conn.generation();
      await other.commit(new Batch().add('element', { ...T, set: 's', elements: [{ key: '0a000002' }] }));
      await conn.commit(new Batch().add('table', { ...IP, name: 't' }));
      expect(conn.generation()).toBe(g);
      // Our own commit learnt from its echo, inline: skipOwn keeps its record from being handed over.
      const inline = conn.commitNow!(new Batch().add('rule', { ...T, chain: 'd', ...rule('counter') }), { echo: true });
      expect(echoed(inline as CommitResult)).toBe('0:13');
      w.skipOwn!(g + 1);
      await step(other, new Batch().delete('table', { ...IP, name: 't' }));
      expect(records).toEqual([
        'gen +1 since +1 own, progress +1 +1 1: own newtable t create; own newchain t c #1 create; own newchain t d #2 create; ' +
          'own newrule t c #3 create|append; own newrule t c #4 after #3 create|append; own newrule t c #5 create|append; ' +
          'own newset t s create; own newsetelem t s create 0a000001; own newsetelem t s create 0a000002',
        'gen +2 since +1 own, progress +2 +1 2: own newrule t c #7 after #3 create|append; own newrule t c #8 create; ' +
          'own newrule t c #9 after #7 create|append; own delrule t c #4 append; own newrule t c #4 after #9 append',
        'gen +3 since +1 foreign, progress +3 +1 3: other delrule t c #7',
        'gen +4 since +1 foreign, progress +4 +1 4: other newrule t c #10 after #3 create; other delrule t c #9 append; ' +
          'other newrule t c #9 after #10 append',
        'gen +5 since +1 foreign, progress +5 +1 5: other newsetelem t s create 0a000003; other delsetelem t s 0a000001',
        'gen +6 since +1 foreign, progress +6 +1 6: other newset t __set0 create; other newsetelem t __set0 create 0a010001; ' +
          'other newsetelem t __set0 create 0a010002; other newrule t d #12 create|append',
        'gen +8 since +1 foreign, progress +8 +1 7: other delrule t d #12; other delset t __set0',
        'gen +10 since +1 foreign, progress +10 +1 8: other delrule t c #8; other delrule t c #3; other delrule t c #10; ' +
          'other delrule t c #9; other delrule t c #4; other delrule t c #5; other delrule t d #13; other delset t s; ' +
          'other delchain t c #1; other delchain t d #2; other deltable t',
      ]);
      expect(plain).toEqual(['gen +1 since 0', 'gen +2 since +2', 'gen +3 since +2', 'gen +4 since +2', 'gen +5 since +2', 'gen +6 since +2',
        'gen +8 since +2', 'gen +9 since +2', 'gen +10 since +2']);
    } finally {
      w.close();
      w2.close();
    }
  });

  it('digests: a digest dump gives, per rule, the addon\'s digest of the rule as committed; none for one with an anonymous set', async () => {
    const conn = f.conn();
    const texts = ['ip saddr 10.0.0.1 return', 'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
      'tcp dport 22 counter accept comment "ssh"', 'ip daddr @named drop'];
    const b = new Batch().add('table', { ...IP, name: 't' }).add('chain', { ...T, name: 'c' })
      .add('chain', { ...T, name: 'empty' }).add('set', NAMED);
    for (const text of texts) b.add('rule', { ...T, chain: 'c', ...rule(text) });
    const s = compiled('ip saddr { 10.1.0.1, 10.1.0.2 } accept');
    for (const x of s.sets) b.add('set', { ...x, ...T });
    b.add('rule', { ...T, chain: 'c', exprs: s.exprs });
    await conn.commit(b);
    const mine = texts.map((text) => {
      const r = rule(text);
      return ruleDigester()!(r.exprs, Uint32Array.from([r.exprs.length, ...r.exprs.keys()]), [r.userdata])[0];
    });
    expect(mine.every((d) => /^[0-9a-f]{32}$/.test(d!))).toBe(true);
    const dump = await conn.listRuleDigests!({ ...T });
    expect(dump).toEqual([{ chain: 'c', handles: [4, 5, 6, 7, 9], digests: [...mine, ''] }]);
    expect((await conn.listRuleDigests!({ ...T, chain: 'c' }))).toEqual(dump);
    expect((await conn.listRules({ ...T, chain: 'c', digests: true })).map((r) => r.digest)).toEqual([...mine, undefined]);
  });

  // A foreign change to the owned chain, repaired from the event: the cause, the ops, one commit, and whether it read the kernel.
  const tamperings: { what: string; tamper: (h: number[]) => Batch; ops: number; read: boolean }[] = [
    { what: 'a deleted owned rule', tamper: (h) => new Batch().delete('rule', { ...OWNED, handle: h[1]! }), ops: 1, read: false },
    { what: 'a foreign rule inserted before an owned one', tamper: (h) => new Batch().insert('rule', { ...OWNED, position: h[2]!, ...rule('ip saddr 192.0.2.1 accept') }),
      ops: 1, read: false },
    { what: 'a flushed owned chain', tamper: () => new Batch().flush('chain', { ...IP, table: 'nfkeeper', name: 'postrouting' }), ops: 4, read: false },
    // A table event: the followed part cannot follow it, the full pass re-creates the table.
    { what: 'a deleted owned table', tamper: () => new Batch().delete('table', { ...IP, name: 'nfkeeper' }), ops: 6, read: true },
  ];
  for (const { what, tamper, ops, read } of tamperings) {
    it(`keeper: ${what} is repaired from its event in one commit${read ? '' : ', without reading the kernel or waking for its own commit'}`, async () => {
      const conn = f.conn();
      // The generations of the records the keeper's watcher hands over.
      const handed: number[] = [];
      const host = f.world().host;
      const k = await f.keeper({ host: {
        connect: () => host.connect(),
        watch: (o) => host.watch({ ...o, onBatch: (b) => { handed.push(b.generation); o.onBatch(b); } }),
      } });
      await followedExact(k);
      await k.idle();
      const reads = await dumps(k);
      const repaired = nextRepair(k);
      await f.other().commit(tamper((await conn.listRules(OWNED)).map((r) => r.handle!)));
      const tampered = conn.generation();
      const r = await repaired;
      await k.idle();
      expect([r.cause, r.ops, r.generation]).toEqual(['event', ops, tampered + 1]);
      expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
      expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
      expect(conn.generation()).toBe(tampered + 1);
      expect((await dumps(k)) > reads).toBe(read);
      // A repair from the followed part learns its own commit from the echo: that commit's record is not handed over.
      await seen(k, tampered + 1);
      expect(handed).toContain(tampered);
      if (!read) expect(handed).not.toContain(tampered + 1);
      await followedExact(k);
      expect(k.followState()).toMatchObject({ exact: true, generation: tampered + 1 });
    });
  }

  it('keeper: a deletion and a commit elsewhere read together: the repair, guarded by the later generation, is one commit without a read', async () => {
    const conn = f.conn();
    const other = f.other();
    await other.commit(new Batch().add('table', { ...IP, name: 'u' }));
    const k = await f.keeper();
    await followedExact(k);
    await k.idle();
    const reads = await dumps(k);
    const h = (await conn.listRules(OWNED)).map((r) => r.handle!);
    const repaired = nextRepair(k);
    // Both in the kernel before the keeper's monitor reads either (on the kernel, the monitor's
    // armed repair of the first is refused by its guard; JavaScript then repairs at the second).
    other.commitNow!(new Batch().delete('rule', { ...OWNED, handle: h[2]! }));
    other.commitNow!(new Batch().add('chain', { ...IP, table: 'u', name: 'c' }));
    const g = conn.generation();
    const r = await repaired;
    await k.idle();
    expect([r.cause, r.ops, r.generation]).toEqual(['event', 1, g + 1]);
    expect(conn.generation()).toBe(g + 1);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
    expect(await dumps(k)).toBe(reads);
  });

  it('keeper: an owned set\'s elements follow the events: a foreign deletion and a reload of elements only, one commit each, no read', async () => {
    const conn = f.conn();
    const config = (els: string[]) => parseNftConfig(`table ip nfkeeper {\n\tset allow {\n\t\ttype ipv4_addr\n\t\telements = { ${els.join(', ')} }\n\t}\n` +
      '\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n\t\tip daddr @allow accept\n\t}\n}\n', 'allow.nft');
    const k = await f.keeper({ config: config(['10.0.0.1', '10.0.0.2', '10.0.0.3']) });
    await followedExact(k);
    await k.idle();
    const reads = await dumps(k);
    const keys = async () => (await conn.listElements({ ...IP, table: 'nfkeeper', set: 'allow' })).map((e) => e.key).sort();
    const repaired = nextRepair(k);
    await f.other().commit(new Batch().delete('element', { ...IP, table: 'nfkeeper', set: 'allow', elements: [{ key: '0a000002' }] }));
    const tampered = conn.generation();
    const r = await repaired;
    await k.idle();
    expect([r.cause, r.ops, r.generation, r.drift.map((d) => d.kind)]).toEqual(['event', 1, tampered + 1, ['elements-differ']]);
    expect(await keys()).toEqual(['0a000001', '0a000002', '0a000003']);
    await seen(k, tampered + 1);
    await k.setConfig(config(['10.0.0.2', '10.0.0.3', '10.0.0.4']));
    expect(conn.generation()).toBe(tampered + 2);
    expect(await keys()).toEqual(['0a000002', '0a000003', '0a000004']);
    expect(await dumps(k)).toBe(reads);
    // An element commit's echo has no handles: its events tell the followed part, once the monitor reads them.
    await seen(k, tampered + 2);
    expect(k.followState()).toMatchObject({ exact: true, generation: tampered + 2 });
  });

  it('keeper: what the view cannot follow in one owned table has that table read, and only it; what it follows, no table', async () => {
    const conn = f.conn();
    const second = ['ip saddr 192.0.2.1 accept', 'ip saddr 192.0.2.2 accept'];
    const { k, dumped } = await twoTables(second);
    const repaired = nextRepair(k);
    // A chain event: the followed content cannot follow it; the full pass repairs the table.
    await f.other().commit(new Batch().add('chain', { ...IP, table: 'nfkeeper', name: 'x' }));
    const r = await repaired;
    await k.idle();
    expect(r.ops).toBeGreaterThan(0);
    expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
    expect(dumped.get('nfkeeper')).toBeGreaterThan(0);
    expect(dumped.get('second')).toBeUndefined();
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
    // A foreign deletion the events follow, repaired from them; then a reload of the other table:
    // the view's rules took what the events followed, so neither table is read.
    await followedExact(k);
    await k.idle();
    dumped.clear();
    const again = nextRepair(k);
    await f.other().commit(new Batch().delete('rule', { ...OWNED, handle: (await conn.listRules(OWNED))[1]!.handle! }));
    expect((await again).cause).toBe('event');
    await k.idle();
    const third = [...second, 'ip saddr 192.0.2.3 accept'];
    await k.setConfig(twoTablesConfig(third));
    await k.idle();
    expect(await f.lines(conn, { ...IP, table: 'second', chain: 'post' })).toEqual(third);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
    expect([...dumped]).toEqual([]);
  });

  it('keeper: one commit the view cannot follow in one owned table and can in another: the other is repaired from the events, unread; the first read alone', async () => {
    const conn = f.conn();
    const second = ['ip saddr 192.0.2.1 accept', 'ip saddr 192.0.2.2 accept', 'ip saddr 192.0.2.3 accept'];
    const { k, dumped } = await twoTables(second);
    const reports: RepairReport[] = [];
    k.on('repaired', (r: RepairReport) => reports.push(r));
    const SECOND = { ...IP, table: 'second', chain: 'post' };
    const handles = (await conn.listRules(SECOND)).map((r) => r.handle!);
    await f.other().commit(new Batch().add('chain', { ...IP, table: 'nfkeeper', name: 'x' }).delete('rule', { ...SECOND, handle: handles[1]! }));
    await turns('both tables repaired', () => reports.some((r) => r.drift.some((d) => d.table === 'nfkeeper')) && reports.some((r) => r.drift.some((d) => d.table === 'second')));
    await followedExact(k);
    await k.idle();
    expect(await f.lines(conn, SECOND)).toEqual(second);
    expect((await conn.listChains({ ...IP, table: 'nfkeeper' })).map((c) => c.name)).toEqual(['postrouting']);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
    // Table second: its rule re-added from the events, in a repair of its own; never read.
    const fromEvents = reports.find((r) => r.drift.some((d) => d.table === 'second'))!;
    expect(fromEvents.drift.map((d) => `${d.table}: ${d.detail}`), JSON.stringify(reports)).toEqual([expect.stringMatching(/^second: rule 2 .* is missing; repair from events: /)]);
    expect(dumped.get('second'), JSON.stringify([...dumped])).toBeUndefined();
    // Table nfkeeper: the chain the events could not follow, by a full pass that read it.
    expect(dumped.get('nfkeeper')).toBeGreaterThan(0);
  });

  it('keeper: foreign churn in a table it does not own costs no repair, no commit and no read', async () => {
    const conn = f.conn();
    const other = f.other();
    const k = await f.keeper();
    await followedExact(k);
    await k.idle();
    const reads = await dumps(k);
    let repairs = 0;
    k.on('repaired', () => repairs++);
    const g = conn.generation();
    await other.commit(new Batch().add('table', { ...IP, name: 'u' }).add('chain', { ...IP, table: 'u', name: 'c' }));
    await other.commit(new Batch().add('rule', { ...IP, table: 'u', chain: 'c', ...rule('counter') }));
    // Every table deletion reaches the keeper (it may be `nft flush ruleset`): it reads the followed part, not the kernel.
    await other.commit(new Batch().delete('table', { ...IP, name: 'u' }));
    await seen(k, g + 3);
    // The tick finds the generation moved: the followed part proves nothing owned changed.
    const tick = await k.request('tick', performance.now());
    expect([tick.status, tick.ops]).toEqual(['in-sync', 0]);
    await k.idle();
    expect(repairs).toBe(0);
    expect(conn.generation()).toBe(g + 3);
    expect(await dumps(k)).toBe(reads);
    expect(k.followState()).toMatchObject({ exact: true });
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
  });

  it('keeper: a neighbour that keeps undoing the rules is answered later (the fight), a deliberate change at once', async () => {
    const conn = f.conn();
    const other = f.other();
    // The second repair of what the neighbour undid raises the level (start-up's install is none): the next one waits a minute.
    const k = await f.keeper({ fight: { threshold: 2, windowMs: 3_600_000, baseMs: 60_000, capMs: 60_000, quietMs: 3_600_000 } });
    const levels: number[] = [];
    k.on('fight', (l: number) => levels.push(l));
    const deleteOne = async (): Promise<number> => {
      await other.commit(new Batch().delete('rule', { ...OWNED, handle: (await conn.listRules(OWNED))[1]!.handle! }));
      return conn.generation();
    };
    const reports: RepairReport[] = [];
    for (let i = 0; i < 2; i++) {
      await followedExact(k);
      await k.idle();
      const repaired = nextRepair(k);
      const g = await deleteOne();
      reports.push(await repaired);
      expect(conn.generation()).toBe(g + 1);
    }
    expect(reports.map((r) => [r.cause, r.ops])).toEqual([['event', 1], ['event', 1]]);
    expect(levels).toEqual([1]);
    await k.idle();
    const held = await deleteOne();
    await seen(k, held);
    expect(conn.generation()).toBe(held);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES.filter((_, i) => i !== 1));
    expect(k.status()).toMatchObject({ fightLevel: 1, tables: [{ state: 'drifting' }] });
    // A reload is not something a neighbour undid: not held back, and it puts the rule back.
    await k.setConfig(flannelConfig());
    expect(conn.generation()).toBe(held + 1);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
  });

  it('keeper: a deletion the fight held back, then a reload that adds a chain: one commit planned from the difference the view holds, no read', async () => {
    const conn = f.conn();
    const other = f.other();
    // Every repair of what a neighbour undid waits a minute (the level is raised from the first).
    const k = await f.keeper({ fight: { threshold: 1, windowMs: 3_600_000, baseMs: 60_000, capMs: 60_000, quietMs: 3_600_000 } });
    await followedExact(k);
    await k.idle();
    const repaired = nextRepair(k);
    await other.commit(new Batch().delete('rule', { ...OWNED, handle: (await conn.listRules(OWNED))[0]!.handle! }));
    expect(await repaired).toMatchObject({ cause: 'event', ops: 1 });
    await k.idle();
    const g = await other.commit(new Batch().delete('rule', { ...OWNED, handle: (await conn.listRules(OWNED))[2]!.handle! }))
      .then(() => conn.generation());
    await seen(k, g);
    expect(conn.generation()).toBe(g);
    const reads = await dumps(k);
    // The rule stays missing; the reload changes what the events could follow (a new chain): a full pass plans it.
    await k.setConfig(parseConfig(`\n${postroutingYaml('nfkeeper', FLANNEL_RULES, 'postrouting', { extra: ['ip daddr 192.0.2.9 accept'] })}`, 'two.yaml'));
    expect(conn.generation()).toBe(g + 1);
    expect(await dumps(k)).toBe(reads);
    expect(await f.lines(conn)).toEqual(FLANNEL_RULES);
    expect(await f.lines(conn, { ...OWNED, chain: 'extra' })).toEqual(['ip daddr 192.0.2.9 accept']);
  });
}

const WANT = [1, 2, 3, 4, 5];
const C = { family: 'ip' as Family, table: 't', chain: 'c' };
const OTHER = { family: 'ip' as Family, table: 'other', chain: 'c' };
const wantRules = planConfig(WANT).tables[0]!.chains[0]!.rules;
const deleted = (handle: number): EventKey => ({ type: 'delrule', family: 'ip', table: 't', name: 'c', handle });
/** The keeper's re-add of rule j of chain t c as it stands: at the head for j = 0, else after rule j - 1. */
const reAdd = (handles: readonly number[], j: number): Op => (j === 0
  ? { verb: 'insert', object: 'rule', ...C, exprs: wantRules[j]!.compiled.exprs, id: 1 }
  : { verb: 'add', object: 'rule', ...C, exprs: wantRules[j]!.compiled.exprs, id: 1, position: handles[j - 1]! }) as Op;
/** Every rule's deletion answered by its re-add where it stood. */
const everyRule = (h: number[]): Reaction[] => h.map((x, j) => ({ on: [deleted(x)], ops: [reAdd(h, j)] }));

/**
 * A watcher's armed reactions on their own (the keeper's use of them is in armed-repair.test.ts and
 * arming.test.ts): it matches another writer's next commit on the watched tables against the
 * reactions' events and sends what it was given, guarded by that commit's generation, deciding
 * nothing. `conn` is the armed connection (its port ignored, as the keeper's), `other` the foreign writer.
 */
export function armCases(f: Fixture): void {
  /** Tables t (chain t c with the five rules) and other, and a watcher of t as the keeper makes it. */
  async function armed() {
    const conn = f.conn();
    const other = f.other();
    const b = new Batch().add('table', { ...IP, name: 't' }).add('table', { ...IP, name: 'other' })
      .add('chain', { ...IP, table: 't', name: 'c' }).add('chain', { ...IP, table: 'other', name: 'c' });
    for (const r of wantRules) b.add('rule', { ...C, exprs: r.compiled.exprs });
    await other.commit(b);
    const batches: MonitorBatch[] = [];
    const w: NftWatch = f.world().host.watch({ tables: [{ ...IP, name: 't' }], ignorePorts: [conn.portId], ownCommits: true, onBatch: (x) => {
      batches.push(x);
      // As the keeper does: the reaction's commit, whose handles came back, need not be handed over.
      if (x.reacted && 'handles' in x.reacted && x.reacted.handles.length > 0) w.skipOwn!(x.generation + 1);
    } });
    w.anchor!(conn.generation(), 0);
    const chain = () => readPlanChain(conn, WANT);
    return {
      conn, other, w, batches, chain,
      /** Arms `reactions(handles)` at the generation the watcher has read up to. */
      async arm(reactions: (handles: number[]) => Reaction[] = everyRule) {
        const handles = (await chain()).handles;
        const generation = conn.generation();
        await turns('the watcher to read every commit', () => w.progress!().lastGeneration === generation);
        expect(w.arm!(conn, generation, reactions(handles))).toBe(true);
        return { handles, generation };
      },
      /** The first record handed over after `commit`. */
      async next(commit: () => Promise<unknown> | unknown): Promise<MonitorBatch> {
        batches.length = 0;
        await commit();
        await turns('the commit to be handed over', () => batches.length > 0);
        return batches[0]!;
      },
    };
  }

  it('arm: another writer\'s deletion of a rule, after commits elsewhere, is answered with the reaction\'s ops, guarded and echoed; the arm ends with it', async () => {
    const a = await armed();
    try {
      const { handles, generation } = await a.arm();
      await a.other.commit(new Batch().add('rule', { ...OTHER, exprs: wantRules[0]!.compiled.exprs }));
      const b = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[2]! })));
      expect([b.generation, b.events.length]).toEqual([generation + 2, 1]);
      expect(b.reacted).toMatchObject({ reaction: 2 });
      expect(typeof b.reacted!.committedNs).toBe('number');
      const echoed = (b.reacted as { handles: [number, number][] }).handles;
      expect(echoed.map(([op]) => op)).toEqual([0]);
      const after = await a.chain();
      expect(after.ok).toBe(true);
      expect(after.handles).toEqual([handles[0], handles[1], echoed[0]![1], handles[3], handles[4]]);
      expect(a.conn.generation()).toBe(generation + 3);
      // Its own commit was skipped (the watcher was told so), not handed over.
      await turns('the reaction\'s commit to be read', () => a.w.progress!().lastGeneration === generation + 3);
      expect(a.batches).toHaveLength(1);
      // One commit, one answer: the next deletion is the caller's, even of a rule it had a reaction for.
      const next = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[4]! })));
      expect(next.reacted).toBeUndefined();
      expect((await a.conn.listRules(C)).length).toBe(4);
    } finally {
      a.w.close();
    }
  });

  it('arm: a commit of two deletions is answered when one reaction names exactly those, in order', async () => {
    const a = await armed();
    try {
      const { handles } = await a.arm((h) => [
        { on: [deleted(h[1]!), deleted(h[3]!)], ops: [reAdd(h, 1), reAdd(h, 3)] },
        { on: [deleted(h[1]!)], ops: [reAdd(h, 1)] },
      ]);
      const b = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[1]! }).delete('rule', { ...C, handle: handles[3]! })));
      expect(b.events).toHaveLength(2);
      expect(b.reacted).toMatchObject({ reaction: 0 });
      expect((b.reacted as { handles: [number, number][] }).handles.map(([op]) => op)).toEqual([0, 1]);
      expect((await a.chain()).ok).toBe(true);
    } finally {
      a.w.close();
    }
  });

  it('arm: an undo answers another writer\'s deletion of elements of its set, in one commit, by adding them back as they were; not a commit with anything beside', async () => {
    const a = await armed();
    try {
      const S = { ...IP, table: 't', set: 's' };
      const keys = ['0a000001', '0a000002', '0a000003', '0a000004'];
      await a.next(() => a.other.commit(new Batch().add('set', { ...IP, table: 't', name: 's', keyType: 7, keyLen: 4, elements: keys.map((key) => ({ key })) })));
      const undo = (h: number[]): Reaction[] => [...everyRule(h), { on: [{ type: 'delsetelem', ...IP, table: 't', name: 's' }], undo: true }];
      const held = async () => (await a.conn.listElements(S)).map((e) => e.key).sort();
      const { generation } = await a.arm(undo);
      const b = await a.next(() => a.other.commit(new Batch().delete('element', { ...S, elements: [{ key: keys[1]! }, { key: keys[3]! }] })));
      expect(b.generation).toBe(generation + 1);
      expect(b.reacted).toMatchObject({ reaction: 5 });
      expect(await held()).toEqual(keys);
      expect(a.conn.generation()).toBe(generation + 2);
      // A deletion beside an addition is not the undo's: nothing committed for it.
      await a.arm(undo);
      const mixed = await a.next(() => a.other.commit(new Batch().delete('element', { ...S, elements: [{ key: keys[0]! }] })
        .add('element', { ...S, elements: [{ key: '0a000009' }] })));
      expect(mixed.reacted).toBeUndefined();
      expect(await held()).toEqual([...keys.slice(1), '0a000009']);
    } finally {
      a.w.close();
    }
  });

  it('arm: events in another order, with more beside them, or that no reaction names are not answered, and end the arm', async () => {
    const a = await armed();
    try {
      const unanswered: [string, (h: number[]) => Reaction[], (h: number[]) => Batch][] = [
        ['another order', (h) => [{ on: [deleted(h[3]!), deleted(h[1]!)], ops: [reAdd(h, 1), reAdd(h, 3)] }],
          (h) => new Batch().delete('rule', { ...C, handle: h[1]! }).delete('rule', { ...C, handle: h[3]! })],
        ['more beside them', (h) => [{ on: [deleted(h[1]!)], ops: [reAdd(h, 1)] }],
          (h) => new Batch().delete('rule', { ...C, handle: h[1]! }).delete('rule', { ...C, handle: h[2]! })],
        ['a rule no reaction names', (h) => [{ on: [deleted(h[1]!)], ops: [reAdd(h, 1)] }], (h) => new Batch().delete('rule', { ...C, handle: h[2]! })],
        ['an added rule', everyRule, () => new Batch().add('rule', { ...C, exprs: wantRules[0]!.compiled.exprs })],
      ];
      for (const [what, reactions, commit] of unanswered) {
        const { handles } = await a.arm(reactions);
        const rules = (await a.conn.listRules(C)).length;
        const b = await a.next(() => a.other.commit(commit(handles)));
        expect([what, b.reacted]).toEqual([what, undefined]);
        // Nothing was committed for it, and the arm is over: a deletion a reaction names is not answered either.
        const left = await a.conn.listRules(C);
        expect(left.length).toBe(rules + (what === 'an added rule' ? 1 : -b.events.length));
        const next = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: left[0]!.handle! })));
        expect([what, next.reacted]).toEqual([what, undefined]);
        // Back to the five rules for the next round.
        const restore = new Batch().flush('chain', { ...IP, table: 't', name: 'c' });
        for (const r of wantRules) restore.add('rule', { ...C, exprs: r.compiled.exprs });
        await a.next(() => a.other.commit(restore));
      }
    } finally {
      a.w.close();
    }
  });

  it('arm: the guard refuses the reaction when another commit came first (ERESTART, nothing changed), and the arm is then off', async () => {
    const a = await armed();
    try {
      const { handles, generation } = await a.arm();
      // Both commits in one turn: the watcher reads the deletion after the second is in.
      const b = await a.next(() => {
        a.other.commitNow!(new Batch().delete('rule', { ...C, handle: handles[3]! }));
        a.other.commitNow!(new Batch().add('rule', { ...OTHER, exprs: wantRules[1]!.compiled.exprs }));
      });
      expect(b.generation).toBe(generation + 1);
      expect(b.reacted).toMatchObject({ errno: 85, reaction: 3 });
      expect(a.conn.generation()).toBe(generation + 2);
      expect((await a.conn.listRules(C)).map((r) => r.handle)).toEqual(handles.filter((_, j) => j !== 3));
      const next = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[0]! })));
      expect(next.reacted).toBeUndefined();
    } finally {
      a.w.close();
    }
  });

  it('arm: a commit that touched the watched table since the arm leaves the next one unanswered; paused, nothing is answered, and resume holds only while the table is untouched', async () => {
    const a = await armed();
    try {
      const { handles } = await a.arm();
      // Our own commit (an ignored port) is not answered, but it touched the table.
      await a.next(() => a.conn.commit(new Batch().add('rule', { ...C, exprs: wantRules[0]!.compiled.exprs })));
      const b = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[1]! })));
      expect(b.reacted).toBeUndefined();
      expect((await a.conn.listRules(C)).length).toBe(5);  // 5 - 1 + the extra: nothing re-added
      const again = await a.arm((h) => [{ on: [deleted(h[0]!)], ops: [reAdd(h, 0)] }]);
      a.w.pause!();
      await a.other.commit(new Batch().add('rule', { ...OTHER, exprs: wantRules[2]!.compiled.exprs }));
      await turns('the watcher to read it', () => a.w.progress!().lastGeneration === a.conn.generation());
      expect(a.w.resume!()).toBe(true);  // a commit elsewhere: the arm still holds
      a.w.pause!();
      const paused = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: again.handles[0]! })));
      expect(paused.reacted).toBeUndefined();
      expect(a.w.resume!()).toBe(false);  // that deletion touched the table
    } finally {
      a.w.close();
    }
  });

  it('arm: commits whatever the reaction holds; refuses reactions it cannot read and a connection of another kind', async () => {
    const a = await armed();
    try {
      const { handles, generation } = await a.arm((h) => [{ on: [deleted(h[0]!)], ops: [{ verb: 'add', object: 'rule', ...OTHER, exprs: wantRules[4]!.compiled.exprs }] }]);
      const b = await a.next(() => a.other.commit(new Batch().delete('rule', { ...C, handle: handles[0]! })));
      expect(b.reacted).toMatchObject({ reaction: 0 });
      expect((await a.conn.listRules(C)).map((r) => r.handle)).toEqual(handles.slice(1));  // not re-added
      expect(await a.conn.listRules(OTHER)).toHaveLength(1);
      const one = { on: [deleted(handles[1]!)], ops: [reAdd(handles, 1)] };
      expect(() => a.w.arm!(a.conn, generation, [{ on: [], ops: one.ops }])).toThrow(/needs events \(on\) and ops/);
      expect(() => a.w.arm!(a.conn, generation, [{ on: one.on, ops: [] }])).toThrow(/needs events \(on\) and ops/);
      expect(() => a.w.arm!(a.conn, generation, [{ on: [{ ...one.on[0]!, family: 'nope' as 'ip' }], ops: one.ops }]))
        .toThrow(/reaction 0: event 0 needs a type, a family and a table/);
      expect(() => a.w.arm!(a.conn, generation, [one, one])).toThrow(/reaction 1: the same events as an earlier one/);
      expect(() => a.w.arm!(a.conn, generation, [one, { on: [deleted(handles[2]!)], ops: [{ verb: 'add', object: 'rule' } as Op] }])).toThrow();
      expect(a.w.arm!(a.conn, generation, [])).toBe(false);
      expect(a.w.arm!({} as NftConn, generation, [one])).toBe(false);
    } finally {
      a.w.close();
    }
  });
}

/** `handles` of a commit's echo as "op:handle ...", or undefined without one. */
function echoed(r: void | CommitResult | false): string | undefined {
  return r && r.handles ? [...r.handles].map(([op, h]) => `${op}:${h}`).join(' ') : undefined;
}

function describe(e: MonitorEvent, own: number, other: number): string {
  const flags = [(e.flags ?? 0) & 0x400 ? 'create' : '', (e.flags ?? 0) & 0x800 ? 'append' : '', (e.flags ?? 0) & 0x100 ? 'replace' : '']
    .filter(Boolean).join('|');
  return [e.portId === own ? 'own' : e.portId === other ? 'other' : `port ${e.portId}`, e.type, e.table, e.name, e.handle ? `#${e.handle}` : '',
    e.position ? `after #${e.position}` : '', flags, ...(e.elements ?? []).map((x) => x.key ?? '?'), e.elementsMalformed ? 'malformed' : '']
    .filter(Boolean).join(' ');
}
