/**
 * The safety net's read-back (the background read the tick makes trustOwnCommitMs after our last
 * commit) and a foreign deletion while it reads, on the real kernel. The read commits nothing, so
 * the repairs that answer a deletion at once (the monitor's armed undo of an element deletion, the
 * event repair in JavaScript of a rule's) go on while it reads (Scheduler.committing): the deletion
 * is repaired while the read is still held on the wire, not after it. The read then concludes
 * nothing about a generation it did not read (the table changed under it: it gives up, before
 * reading the set's elements for nothing, keeping the rules it held), and the repair's verified
 * generation stands; the next read-back verifies by digests, and nothing was added twice or taken back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import type { Keeper } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { NftConn } from '../../src/netlink/conn.js';
import type { MonitorBatch } from '../../src/netlink/events.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { observedHost, startKeeper } from '../helpers/keeper.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { until } from '../helpers/wait.js';
import { nextRepair } from './helpers.js';

/** What the tests hold: the keeper's rule digest dumps, once they have read, until released. */
class Hold {
  on = false;
  reached = false;
  private release?: () => void;
  private gate = Promise.resolve();
  arm(): void {
    this.on = true;
    this.reached = false;
    this.gate = new Promise((r) => { this.release = r; });
  }
  open(): void {
    this.on = false;
    this.release?.();
  }
  wrap = (method: keyof NftConn, _args: unknown[], result: unknown): unknown => {
    if (method !== 'listRuleDigests' || !this.on) return result;
    return (result as Promise<unknown>).then(async (x) => {
      this.reached = true;
      await this.gate;
      return x;
    });
  };
}

interface Fixture {
  ns: Netns;
  sock: NftSocket;
  keeper: Keeper;
  hold: Hold;
  calls: Map<string, number>;
  /** Commits another socket (the keeper's) made to the table, as an observer saw them. */
  seen: MonitorBatch[];
  observer: Monitor;
  jsCommits: () => number;
}

async function fixture(tag: string, yaml: string, table: string): Promise<Fixture> {
  const ns = createNetns(tag);
  const sock = open({ netns: ns.path });
  const hold = new Hold();
  const calls = new Map<string, number>();
  const host = observedHost(ns, ['listRuleDigests', 'listElements', 'listRules', 'commit', 'commitNow'],
    (m) => calls.set(m, (calls.get(m) ?? 0) + 1), hold.wrap);
  // The default fight; no tick: the test asks for the read-back the tick would make.
  const keeper = await startKeeper(ns, { config: parseConfig(yaml), host });
  await until('the followed part to be seeded', () => keeper.followState()?.exact === true, 30_000);
  await keeper.idle();
  const seen: MonitorBatch[] = [];
  const observer = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: table }], ignorePorts: [sock.portId], onBatch: (b) => seen.push(b) });
  const jsCommits = () => (calls.get('commit') ?? 0) + (calls.get('commitNow') ?? 0);
  return { ns, sock, keeper, hold, calls, seen, observer, jsCommits };
}

async function teardown(f: Fixture | undefined): Promise<void> {
  f?.hold.open();
  f?.observer.close();
  await f?.keeper.stop();
  f?.sock.close();
  f?.ns.remove();
}

/**
 * The read-back held after its digest dump read the table; `damage` commits another writer's
 * deletion meanwhile. The repair must come while the read is held; then the read is let go.
 */
async function deletionDuringReadBack(f: Fixture, damage: () => Promise<unknown>) {
  const { keeper, hold } = f;
  hold.arm();
  const readBack = keeper.readBack('tick', performance.now(), true);
  await until('the read-back to have read the digests', () => hold.reached, 10_000);
  const armedWhileReading = keeper.armed;
  const repaired = nextRepair(keeper, 3_000);
  const at = performance.now();
  await damage();
  let r;
  try {
    r = await repaired;
  } finally {
    hold.open();
  }
  const repairMs = performance.now() - at;
  const outcome = await readBack;
  await keeper.idle();
  return { r, repairMs, outcome, armedWhileReading };
}

describe('a deletion of an element while the read-back reads (the monitor armed with the set\'s undo)', () => {
  const N = 20_000;
  const ipOf = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
  const set = { family: 'ip', table: 'big', set: 's' } as const;
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture('rbarm-el', `
tables:
  - family: ip
    name: big
    sets:
      - name: s
        type: ipv4_addr
        elements: [${Array.from({ length: N }, (_, i) => ipOf(i)).join(', ')}]
    chains:
      - name: c
        type: filter
        hook: forward
        priority: filter
        rules:
          - ip saddr @s counter accept
`, 'big');
  }, 60_000);
  afterAll(() => teardown(f));

  it('is sent back by the monitor while the read is held; the read gives up without reading the elements; the next read-back verifies; one re-add', async () => {
    const { keeper, sock, calls, seen } = f;
    await until('the monitor to be armed', () => keeper.armed === true, 10_000);
    const victim = (await sock.listElements(set))[1234]!;
    const j0 = f.jsCommits();
    const e0 = calls.get('listElements') ?? 0;
    seen.length = 0;
    const { r, outcome, armedWhileReading } = await deletionDuringReadBack(f, () => sock.commit(new Batch().delete('element', { ...set, elements: [{ key: victim.key }] })));
    // The read commits nothing: the monitor stayed armed through it, and its undo answered.
    expect(armedWhileReading).toBe(true);
    expect(r.cause).toBe('event');
    expect(f.jsCommits()).toBe(j0);
    // The read saw the table change under it: no conclusion about the generation it read, and the
    // 20,000 elements were not read for it.
    expect(outcome.status).toBe('deferred');
    expect((calls.get('listElements') ?? 0) - e0).toBe(0);
    // The repair's generation stays verified (the read's giving up does not undo it).
    const gen = sock.generation();
    expect(keeper.status().generation).toBe(gen);
    // The next read-back verifies what the repair left, by digests as before: the rules the read
    // gave up on were kept (the events carry them on), not dropped for a whole decoding read.
    const r0 = calls.get('listRules') ?? 0;
    expect((await keeper.readBack('tick', performance.now(), true)).status).toBe('in-sync');
    await keeper.idle();
    expect((calls.get('listRules') ?? 0) - r0).toBe(0);
    expect((calls.get('listElements') ?? 0) - e0).toBe(0);
    expect(f.jsCommits()).toBe(j0);
    expect(sock.generation()).toBe(gen);
    expect(await sock.listElements(set)).toHaveLength(N);
    // One commit of ours: the element, once.
    await until('the observer to see the re-add', () => seen.length > 0, 5_000);
    const ours = seen.filter((b) => b.by?.pid === process.pid);
    expect(ours.map((b) => b.events.map((e) => [e.type, e.elements?.map((x) => x.key)]))).toEqual([[['newsetelem', [victim.key]]]]);
  }, 30_000);
});

describe('a deletion of a rule while the read-back reads (a chain too long to arm: the event repair in JavaScript)', () => {
  const N = 1_000;
  const where = { family: 'ip', table: 't', chain: 'c' } as const;
  const rules = Array.from({ length: N }, (_, i) => `ip saddr 10.1.${i >> 8}.${i & 255} accept`);
  let f: Fixture;
  beforeAll(async () => {
    f = await fixture('rbarm-rule', `
tables:
  - family: ip
    name: t
    chains:
      - name: c
        type: filter
        hook: forward
        priority: filter
        rules:
${rules.map((x) => `          - ${x}`).join('\n')}
`, 't');
  }, 60_000);
  afterAll(() => teardown(f));

  it('is repaired while the read is held; the read does not undo the repair; the next read-back verifies; one re-add', async () => {
    const { keeper, sock, seen } = f;
    const before = await sock.listRules(where);
    expect(before).toHaveLength(N);
    const j0 = f.jsCommits();
    seen.length = 0;
    const { r, outcome } = await deletionDuringReadBack(f, () => sock.commit(new Batch().delete('rule', { ...where, handle: before[500]!.handle! })));
    expect(r.cause).toBe('event');
    expect(f.jsCommits()).toBe(j0 + 1);  // the event repair's one commit
    expect(outcome.status).toBe('deferred');
    const gen = sock.generation();
    expect(keeper.status().generation).toBe(gen);
    const r0 = f.calls.get('listRules') ?? 0;
    expect((await keeper.readBack('tick', performance.now(), true)).status).toBe('in-sync');
    await keeper.idle();
    expect((f.calls.get('listRules') ?? 0) - r0).toBe(0);
    expect(f.jsCommits()).toBe(j0 + 1);
    expect(sock.generation()).toBe(gen);
    const after = await sock.listRules(where);
    expect(after.map((x) => x.handle).filter((h) => h !== after[500]!.handle)).toEqual(before.map((x) => x.handle).filter((h) => h !== before[500]!.handle));
    await until('the observer to see the re-add', () => seen.length > 0, 5_000);
    const ours = seen.filter((b) => b.by?.pid === process.pid);
    expect(ours.map((b) => b.events.map((e) => e.type))).toEqual([['newrule']]);
  }, 30_000);
});
