/**
 * The change monitor: another process's commit to a watched table wakes the
 * callback once, with its events and the new generation; changes elsewhere
 * and our own commits do not; deleting any table does.
 *
 * "Does not wake" is shown without timing: the kernel delivers commits to the
 * multicast socket in order, so after the change that must stay silent we
 * make a watched change (a sentinel); the next callback has to be the
 * sentinel's, with nothing in between.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Monitor, open, type MonitorBatch, type Op } from '../../src/index.js';
import { withNetns } from '../helpers/netns.js';
import { until } from '../helpers/wait.js';
import { OWNED, ownedSetup } from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;

/** Collects batches; next() waits for the next one (or fails after a generous guard). */
class Inbox {
  private readonly queue: MonitorBatch[] = [];
  private waiter: ((b: MonitorBatch) => void) | undefined;
  readonly all: MonitorBatch[] = [];

  push = (b: MonitorBatch): void => {
    this.all.push(b);
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w(b);
    } else {
      this.queue.push(b);
    }
  };

  next(): Promise<MonitorBatch> {
    const b = this.queue.shift();
    if (b) return Promise.resolve(b);
    return new Promise((resolve, reject) => {
      // Only a hang guard: events arrive microseconds after a commit.
      const t = setTimeout(() => reject(new Error('no monitor batch arrived within 20 s')), 20_000);
      this.waiter = (x) => {
        clearTimeout(t);
        resolve(x);
      };
    });
  }

  get pending(): number {
    return this.queue.length;
  }
}

describe('monitor', () => {
  it('wakes for foreign changes to watched tables and table deletions only', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId], onBatch: inbox.push });
      try {
        await s.commit(ownedSetup());
        ns.nft('add table ip other; add chain ip other c; add table ip other2');
        const rules = await s.listRules({ family: F, table: T, chain: C });
        const victim = rules[1]!.handle!;

        // 1. nft deletes a rule in the watched table.
        ns.nft(`delete rule ip ${T} ${C} handle ${victim}`);
        const b1 = await inbox.next();
        expect(b1.overflow).toBe(false);
        expect(b1.generation).toBe(s.generation());
        expect(b1.events).toEqual([
          expect.objectContaining({ type: 'delrule', family: F, table: T, name: C, handle: victim }),
        ]);
        expect(b1.events[0]!.portId).not.toBe(s.portId);

        // 2. A change in an unwatched table stays silent...
        ns.nft('add rule ip other c counter');
        const silentGen = s.generation();
        // 3. ...and so does a commit from the ignored port (ours).
        await s.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] }]);
        const ownGen = s.generation();
        expect(ownGen).toBe(silentGen + 1);
        // Sentinel: a watched foreign change. It must be the very next batch.
        ns.nft(`add rule ip ${T} ${C} counter`);
        const b2 = await inbox.next();
        expect(b2.generation).toBe(ownGen + 1);
        expect(b2.events.map((e) => `${e.type} ${e.table}`)).toEqual([`newrule ${T}`]);
        expect(inbox.pending).toBe(0);

        // 4. Deleting any table wakes it, watched or not.
        ns.nft('delete table ip other');
        const b3 = await inbox.next();
        expect(b3.generation).toBe(s.generation());
        expect(b3.events).toEqual([expect.objectContaining({ type: 'deltable', family: F, table: 'other' })]);

        // 5. Our own deletion of a table is ignored like our other commits.
        await s.commit([{ verb: 'delete', object: 'table', family: F, name: 'other2' }]);
        ns.nft(`flush chain ip ${T} ${C}`);
        const b4 = await inbox.next();
        expect(b4.generation).toBe(s.generation());
        expect(b4.events.every((e) => e.type === 'delrule' && e.table === T)).toBe(true);
        expect(b4.events).toHaveLength(5); // 3 owned rules left, our counter, the sentinel

        // 6. A filter change takes effect for the next commit.
        m.setFilter([{ family: F, name: 'third' }], [s.portId]);
        ns.nft(`add rule ip ${T} ${C} counter`);
        ns.nft('add table ip third; add chain ip third c');
        const b5 = await inbox.next();
        expect(b5.events.map((e) => `${e.type} ${e.table}`)).toEqual(['newtable third', 'newchain third']);
        expect(inbox.all).toHaveLength(5);
      } finally {
        m.close();
        s.close();
      }
    }, 'mon');
  });

  it('delivers our own commits with ownCommits, except one the caller learnt from its echo (skipOwn), uncounted', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      await s.commit(ownedSetup());
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId], ownCommits: true, onBatch: inbox.push });
      const rule: Op = { verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] };
      try {
        // Our own commit, not skipped: delivered, flagged not foreign.
        await s.commit([rule]);
        const own = await inbox.next();
        expect(own.foreign).toBe(false);
        const d0 = m.progress().delivered;
        // Skipped: its generation neither calls back nor counts; the monitor still reads its NEWGEN.
        const g = s.generation();
        const echoed = await s.commit([rule], { expectGeneration: g, echo: true });
        expect(echoed && [...echoed.handles!.keys()]).toEqual([0]);
        m.skipOwn(g + 1);
        // A foreign commit after it is the next batch, with the run unbroken.
        await other.commit([rule]);
        const sentinel = await inbox.next();
        expect(sentinel.foreign).toBe(true);
        expect(sentinel.generation).toBe(g + 2);
        expect(sentinel.since).toBeLessThanOrEqual(g + 1);
        expect(inbox.pending).toBe(0);
        expect(m.progress()).toMatchObject({ lastGeneration: g + 2, delivered: d0 + 1 });
        // A skip for a generation the monitor has read already changes nothing; neither does an old one.
        m.skipOwn(g + 2);
        m.skipOwn(g + 1);
        await s.commit([rule]);
        expect((await inbox.next()).generation).toBe(g + 3);
      } finally {
        m.close();
        other.close();
        s.close();
      }
    });
  });

  it('a port ignored up to a generation: its commits up to it are ours, after it another socket\'s (a port our socket left)', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const current = open({ netns: ns.path });
      await s.commit(ownedSetup());
      const inbox = new Inbox();
      const g = s.generation();
      // s's port as a port left after generation g + 1 (the socket now on `current`'s); given twice, the wider counts.
      const m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [current.portId, [s.portId, g], [s.portId, g + 1]],
        ownCommits: true, onBatch: inbox.push });
      const rule: Op = { verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] };
      try {
        await s.commit([rule]);
        expect(await inbox.next()).toMatchObject({ generation: g + 1, foreign: false });
        await s.commit([rule]);
        expect(await inbox.next()).toMatchObject({ generation: g + 2, foreign: true });
        await current.commit([rule]);
        expect(await inbox.next()).toMatchObject({ generation: g + 3, foreign: false });
        // Bounded again, above what it has made: ours once more; a plain port id, every commit.
        m.setFilter([{ family: F, name: T }], [[s.portId, g + 4]]);
        await s.commit([rule]);
        expect(await inbox.next()).toMatchObject({ generation: g + 4, foreign: false });
        m.setFilter([{ family: F, name: T }], [s.portId]);
        await s.commit([rule]);
        expect(await inbox.next()).toMatchObject({ generation: g + 5, foreign: false });
        expect(() => m.setFilter([{ family: F, name: T }], [[s.portId]] as never)).toThrow(/port ids or \[port id, generation\]/);
      } finally {
        m.close();
        current.close();
        s.close();
      }
    });
  });

  it('progress() inside the callback is what the addon reads outside it', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      await s.commit(ownedSetup());
      const seen: { inside: ReturnType<Monitor['progress']>; generation: number }[] = [];
      let m: Monitor | undefined = undefined;
      m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId],
        onBatch: (b) => seen.push({ inside: m!.progress(), generation: b.generation }) });
      try {
        m.anchor(s.generation(), 0);
        for (let i = 0; i < 3; i++) {
          await other.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] }]);
          const g = other.generation();
          await until('the batch', () => seen.length === i + 1);
          expect(seen[i]!.generation).toBe(g);
          expect(seen[i]!.inside).toEqual(m.progress());
          expect(seen[i]!.inside).toMatchObject({ lastGeneration: g, delivered: i + 1 });
          expect(seen[i]!.inside.runStart).toBeGreaterThan(0);
        }
      } finally {
        m.close();
        other.close();
        s.close();
      }
    });
  });

  it('tells watched tables from others by family and whole name, whatever its length (the kernel drops the others)', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const inbox = new Inbox();
      const long = 'a-table-name-of-exactly-forty-bytes-xyz1';
      const watched = [{ family: 'ip', name: 'abc' }, { family: 'inet', name: 'abcd' }, { family: 'ip6', name: long }] as const;
      const others = [['ip', 'ab'], ['ip', 'abcd'], ['ip', 'abcde'], ['inet', 'abc'], ['ip6', long.slice(0, -1)], ['ip6', `${long}z`], ['ip', long]];
      const m = new Monitor({ netns: ns.path, tables: [...watched], ignorePorts: [s.portId], onBatch: inbox.push });
      try {
        for (const [f, t] of [...watched.map((w) => [w.family, w.name]), ...others]) ns.nft(`add table ${f} ${t}; add chain ${f} ${t} c`);
        // The tables' creation was watched for three of them: drain it.
        await until('the set-up seen', () => inbox.all.length > 0);
        await new Promise((r) => setTimeout(r, 100));
        while (inbox.pending > 0) await inbox.next();
        for (const w of watched) {
          for (const [f, t] of others) ns.nft(`add rule ${f} ${t} c counter`);
          ns.nft(`add rule ${w.family} ${w.name} c counter`);
          const b = await inbox.next();
          expect(b.events).toEqual([expect.objectContaining({ type: 'newrule', family: w.family, table: w.name, name: 'c' })]);
        }
        // A table deletion is always seen, watched or not.
        ns.nft('delete table ip abcde');
        expect((await inbox.next()).events).toEqual([expect.objectContaining({ type: 'deltable', table: 'abcde' })]);
      } finally {
        m.close();
        s.close();
      }
    }, 'mon-names');
  });

  it('a storm of commits to other tables, read in gathers, loses nothing: each watched commit comes whole, the run unbroken', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId], onBatch: inbox.push });
      try {
        await s.commit(ownedSetup());
        ns.nft('add table ip other; add chain ip other c');
        m.anchor(s.generation(), 0);
        const add = [{ verb: 'add', object: 'rule', family: 'ip', table: 'other', chain: 'c', exprs: [{ kind: 'counter' }] }] as Op[];
        const flush = [{ verb: 'flush', object: 'chain', family: 'ip', table: 'other', name: 'c' }] as Op[];
        // Thousands of unwatched commits back to back (the monitor stops waking per commit and
        // reads them together), a watched one every 500: each of those arrives alone and whole.
        for (let i = 1; i <= 3000; i++) {
          await other.commit(i % 2 ? add : flush);
          // A small commit settles inline: let the loop poll the monitor between them, as a neighbour's would.
          await new Promise((r) => setImmediate(r));
          if (i % 500 !== 0) continue;
          await other.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] }]);
          const g = other.generation();
          const b = await inbox.next();
          expect(b).toMatchObject({ overflow: false, generation: g, foreign: true });
          expect(b.events).toEqual([expect.objectContaining({ type: 'newrule', table: T, name: C })]);
          expect(b.since).toBeGreaterThan(0);
          expect(b.since).toBeLessThanOrEqual(g);
        }
        // The storm's last commits are counted too, without a watched one after them.
        const last = other.generation();
        await until('the monitor read the storm\'s end', () => m.progress().lastGeneration === last);
        expect(m.progress().runStart).toBeGreaterThan(0);
        expect(inbox.all.filter((b) => b.overflow)).toEqual([]);
        expect(inbox.pending).toBe(0);
      } finally {
        m.close();
        other.close();
        s.close();
      }
    }, 'mon-storm');
  });

  it('element events carry their elements as a dump gives them (vmap, data map, timeout set)', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 'e' }], onBatch: inbox.push });
      try {
        ns.nft('add table ip e; add chain ip e svc; ' +
          'add map ip e vm { type ipv4_addr . inet_proto . inet_service : verdict; }; ' +
          'add map ip e dm { type ipv4_addr : inet_service; }; ' +
          'add set ip e ts { type ipv4_addr; flags timeout; }');
        await inbox.next();
        const dumped = async (set: string) => s.listElements({ family: 'ip', table: 'e', set });

        ns.nft('add element ip e vm { 10.0.0.1 . tcp . 80 : goto svc }');
        const b1 = await inbox.next();
        expect(b1.events).toHaveLength(1);
        expect(b1.events[0]).toMatchObject({ type: 'newsetelem', table: 'e', name: 'vm' });
        expect(b1.events[0]!.elements).toEqual(await dumped('vm'));
        expect(b1.events[0]!.elements![0]).toMatchObject({ verdict: 'goto', chain: 'svc' });

        ns.nft('add element ip e dm { 10.0.0.2 : 8080 } ; add element ip e ts { 10.0.0.3 timeout 1h comment "x" }');
        const b2 = await inbox.next();
        expect(b2.events.map((e) => `${e.type} ${e.name}`)).toEqual(['newsetelem dm', 'newsetelem ts']);
        expect(b2.events[0]!.elements).toEqual(await dumped('dm'));
        const ts = b2.events[1]!.elements![0]!;
        expect(ts.timeout).toBe(3_600_000);
        const [tsDumped] = await dumped('ts');
        expect({ ...ts, expiration: undefined }).toEqual({ ...tsDumped, expiration: undefined });

        // A changed element in one commit: its delete (with the old data) then its add.
        const before = await dumped('dm');
        ns.nft('delete element ip e dm { 10.0.0.2 }; add element ip e dm { 10.0.0.2 : 443 }');
        const b3 = await inbox.next();
        expect(b3.events.map((e) => e.type)).toEqual(['delsetelem', 'newsetelem']);
        expect(b3.events[0]!.elements).toEqual(before);
        expect(b3.events[1]!.elements).toEqual(await dumped('dm'));
        expect(b3.events[1]!.elements![0]!.data).toBe('01bb');

        // Key ends (a concatenated interval set) and a catch-all element, as the dump gives them.
        ns.nft('add set ip e iv { type ipv4_addr . inet_service; flags interval; }; add map ip e cm { type ipv4_addr : verdict; }');
        await inbox.next();
        ns.nft('add element ip e iv { 10.0.0.0/24 . 80-90 }; add element ip e cm { * : goto svc }');
        const b4 = await inbox.next();
        expect(b4.events.map((e) => `${e.type} ${e.name}`)).toEqual(['newsetelem iv', 'newsetelem cm']);
        expect(b4.events[0]!.elements).toEqual(await dumped('iv'));
        expect(b4.events[0]!.elements![0]!.keyEnd).toBe('0a0000ff005a0000');
        expect(b4.events[1]!.elements).toEqual(await dumped('cm'));
        expect(b4.events[1]!.elements![0]).toMatchObject({ flags: 2, verdict: 'goto', chain: 'svc' });
      } finally {
        m.close();
        s.close();
      }
    }, 'mon');
  });

  it('reports every table of `nft flush ruleset` and stops calling back after close', async () => {
    await withNetns(async (ns) => {
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [], onBatch: inbox.push });
      try {
        ns.nft('add table ip a; add table ip6 b; add table inet c');
        ns.nft('flush ruleset');
        const b = await inbox.next();
        expect(b.events.filter((e) => e.type === 'deltable').map((e) => `${e.family} ${e.table}`).sort())
          .toEqual(['inet c', 'ip a', 'ip6 b']);
        expect(inbox.all).toHaveLength(1); // the adds touched no watched table
      } finally {
        m.close();
      }
      m.close(); // idempotent
      expect(m.closed).toBe(true);
      ns.nft('add table ip late; delete table ip late');
      // Nothing can arrive any more: the socket is gone. Give the loop a turn.
      await new Promise((r) => setImmediate(r));
      expect(inbox.all).toHaveLength(1);
    }, 'mon');
  });

  it('watching everything (no table filter) sees every foreign commit', async () => {
    await withNetns(async (ns) => {
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, onBatch: inbox.push });
      try {
        ns.nft('add table ip x');
        ns.nft('add chain ip x c');
        const b1 = await inbox.next();
        const b2 = await inbox.next();
        expect(b1.events.map((e) => e.type)).toEqual(['newtable']);
        expect(b2.events).toEqual([expect.objectContaining({ type: 'newchain', table: 'x', name: 'c' })]);
        expect(b2.generation).toBe(b1.generation + 1);
      } finally {
        m.close();
      }
    }, 'mon');
  });

  it('a monitor in one namespace never sees another namespace', async () => {
    await withNetns(async (a) => {
      await withNetns(async (b) => {
        const inbox = new Inbox();
        const m = new Monitor({ netns: b.path, onBatch: inbox.push });
        try {
          a.nft('add table ip in-a; delete table ip in-a');
          b.nft('add table ip in-b');
          const first = await inbox.next();
          expect(first.events).toEqual([expect.objectContaining({ type: 'newtable', table: 'in-b' })]);
          expect(inbox.pending).toBe(0);
        } finally {
          m.close();
        }
      }, 'mon-b');
    }, 'mon-a');
  });

  it('says who committed: the NEWGEN\'s pid and name, in one-event and many-event batches alike', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      await s.commit(ownedSetup());
      const inbox = new Inbox();
      const m = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId], onBatch: inbox.push });
      try {
        // One event (the call's arguments), from nft: gone by now, its pid and name stay.
        const nft = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', `add rule ip ${T} ${C} counter`], { encoding: 'utf8' });
        expect(nft.status).toBe(0);
        const one = await inbox.next();
        expect(one.events).toHaveLength(1);
        expect(one.by?.comm).toBe('nft');
        expect(one.by?.pid).toBeGreaterThan(1);
        // Several events (the flat array), from a process that is still there: its pid is ours to read in /proc.
        const child = spawn('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { stdio: ['pipe', 'ignore', 'ignore'] });
        child.stdin.write(`add rule ip ${T} ${C} counter\nadd rule ip ${T} ${C} counter\n`);
        child.stdin.end();
        const two = await inbox.next();
        expect(two.events).toHaveLength(2);
        expect(two.by?.comm).toBe('nft');
        // ip netns exec execs nft in place: the committing task is the child we spawned.
        expect(two.by?.pid).toBe(child.pid);
        await new Promise((r) => child.once('exit', r));
        // Our own commit, delivered with ownCommits, names this process.
        m.close();
        const own = new Inbox();
        const m2 = new Monitor({ netns: ns.path, tables: [{ family: F, name: T }], ignorePorts: [s.portId], ownCommits: true, onBatch: own.push });
        try {
          await s.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: C, exprs: [{ kind: 'counter' }] }]);
          const b = await own.next();
          expect(b.foreign).toBe(false);
          expect(b.by).toEqual({ pid: process.pid, comm: readFileSync(`/proc/${process.pid}/comm`, 'utf8').trim() });
        } finally {
          m2.close();
        }
      } finally {
        m.close();
        s.close();
      }
    }, 'mon-by');
  });
});
