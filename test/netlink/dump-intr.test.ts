/**
 * NLM_F_DUMP_INTR: a dump that a concurrent commit interrupts is thrown away
 * and retried, never returned. A writer on a second socket commits in a loop
 * while a reader dumps a table of 20,000 rules: chain `a` (dumped first) and
 * chain `z` (dumped last, after the big chain) always hold the same number
 * of rules carrying the writer's state number, changed together in one
 * batch. A dump that mixed two rulesets would show `a` at one state and `z`
 * at another; every returned dump must show one state the writer committed,
 * and the socket's counter must show that interruptions happened and were
 * retried (otherwise the race was not provoked and the test proves nothing).
 */
import { describe, expect, it } from 'vitest';
import { DumpInterruptedError, NetlinkError, open, type Op, type Rule } from '../../src/index.js';
import { loadAddon } from '../../src/netlink/addon.js';
import { ip4, withSocket } from './fixtures.js';
import type { Netns } from '../helpers/netns.js';
import type { NftSocket } from '../../src/netlink/socket.js';
import { sleep } from '../helpers/wait.js';

const F = 'ip';
const T = 'race';
const BIG = 20_000;
// Under scripts/sanitize.sh a 20,000-rule dump takes seconds, not a few hundred ms.
const SANITIZED = process.env.NFK_SANITIZE === '1';
const RETURNED = 4;

const stateHex = (i: number) => i.toString(16).padStart(8, '0');

/** State i: (i % 3) + 1 marker rules in `a` and in `z`, each carrying i. */
function writeState(i: number): Op[] {
  const ops: Op[] = [];
  for (const chain of ['a', 'z']) {
    ops.push({ verb: 'flush', object: 'chain', family: F, table: T, name: chain });
    for (let k = 0; k <= i % 3; k++) {
      ops.push({ verb: 'add', object: 'rule', family: F, table: T, chain, exprs: [{ kind: 'counter' }], userdata: stateHex(i) });
    }
  }
  return ops;
}

/** The one state a dump shows, or a description of the mix it shows. */
function stateOf(rules: Rule[]): number | string {
  const marks = (chain: string) => rules.filter((r) => r.chain === chain).map((r) => r.userdata ?? '?');
  const a = marks('a'), z = marks('z');
  const all = [...a, ...z];
  const i = parseInt(a[0] ?? 'ffffffff', 16);
  const big = rules.filter((r) => r.chain === 'big').length;
  const consistent = big === BIG && a.length === (i % 3) + 1 && z.length === a.length && all.every((m) => m === a[0]);
  return consistent ? i : `a=[${a.join(',')}] z=[${z.join(',')}] big=${big}`;
}

describe('dumps interrupted by a concurrent change', () => {
  it('are retried and never returned: every dump is one state the writer committed', async () => {
    await withSocket(async (reader, ns) => {
      const setup: Op[] = [{ verb: 'add', object: 'table', family: F, name: T }];
      for (const name of ['a', 'big', 'z']) setup.push({ verb: 'add', object: 'chain', family: F, table: T, name });
      for (let k = 0; k < BIG; k++) {
        const ip = `10.${(k >> 16) & 255}.${(k >> 8) & 255}.${k & 255}`;
        setup.push({
          verb: 'add', object: 'rule', family: F, table: T, chain: 'big',
          exprs: [{ kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'eq', data: ip4(ip) }],
        });
      }
      await reader.commit([...setup, ...writeState(0)]);

      // One quiet dump: its duration paces the writer so that some dumps are
      // raced and some can finish.
      const t0 = performance.now();
      expect(stateOf(await reader.listRules({ family: F, table: T }))).toBe(0);
      const dumpMs = performance.now() - t0;

      const writer = open({ netns: ns.path });
      const committed = new Set<number>([0]);
      let stop = false;
      const writing = (async () => {
        for (let i = 1; !stop; i++) {
          await writer.commit(writeState(i));
          committed.add(i);
          await sleep(Math.random() * dumpMs * 1.5);
        }
      })();

      const seen: (number | string)[] = [];
      let gaveUp = 0;
      try {
        const deadline = Date.now() + (SANITIZED ? 600_000 : 90_000);
        const mixed = () => seen.some((x) => typeof x === 'string');
        while (Date.now() < deadline && !mixed() && (seen.length < RETURNED || reader.dumpsInterrupted === 0)) {
          try {
            seen.push(stateOf(await reader.listRules({ family: F, table: T })));
          } catch (e) {
            // Every attempt raced: refused, which is allowed; a mixed view is not.
            if (!(e instanceof DumpInterruptedError)) throw e;
            gaveUp++;
          }
        }
      } finally {
        stop = true;
        await writing;
        writer.close();
      }
      console.log(`dump of ${BIG + 3} rules: ${dumpMs.toFixed(0)} ms quiet; ${seen.length} returned, ` +
        `${reader.dumpsInterrupted} interrupted and retried, ${gaveUp} gave up after every attempt raced, ` +
        `${committed.size - 1} writer commits`);
      for (const s of seen) {
        expect(typeof s, `a dump mixed two rulesets: ${String(s)}`).toBe('number');
        expect(committed.has(s as number)).toBe(true);
      }
      expect(reader.dumpsInterrupted).toBeGreaterThan(0);
      expect(seen.length).toBeGreaterThanOrEqual(RETURNED);
    }, 'intr');
  }, SANITIZED ? 900_000 : 150_000);

  it('digest dumps too: built as the messages come, an interrupted one is retried and never returned', async () => {
    // The digest dump (handles and digests, nothing decoded) builds its answer while it reads
    // (native/dump.cc): what an interruption makes it drop must be all of it. A returned dump shows
    // one state: `a` and `z` hold the same number of marker rules, all of one digest (the digest
    // covers the userdata, which is the state's number).
    await withSocket(async (reader, ns) => {
      const setup: Op[] = [{ verb: 'add', object: 'table', family: F, name: T }];
      for (const name of ['a', 'big', 'z']) setup.push({ verb: 'add', object: 'chain', family: F, table: T, name });
      for (let k = 0; k < BIG; k++) {
        setup.push({ verb: 'add', object: 'rule', family: F, table: T, chain: 'big', exprs: [{ kind: 'counter' }] });
      }
      await reader.commit([...setup, ...writeState(0)]);
      const view = async () => {
        const chains = await reader.listRuleDigests({ family: F, table: T });
        const of = (name: string) => chains.find((c) => c.chain === name)?.digests ?? [];
        const a = of('a'), z = of('z');
        const one = a.length > 0 && a.length === z.length && [...a, ...z].every((d) => d === a[0] && d !== '');
        return one && of('big').length === BIG ? a[0]! : `a=[${a.join(',')}] z=[${z.join(',')}] big=${of('big').length}`;
      };
      const quiet = await view();
      expect(quiet).toMatch(/^[0-9a-f]+$/);
      const t0 = performance.now();
      await view();
      const dumpMs = performance.now() - t0;
      const writer = open({ netns: ns.path });
      let stop = false;
      const writing = (async () => {
        for (let i = 1; !stop; i++) {
          await writer.commit(writeState(i));
          await sleep(Math.random() * dumpMs * 1.5);
        }
      })();
      const seen: string[] = [];
      try {
        const deadline = Date.now() + (SANITIZED ? 600_000 : 90_000);
        while (Date.now() < deadline && (seen.length < RETURNED || reader.dumpsInterrupted === 0)) {
          try {
            seen.push(await view());
          } catch (e) {
            if (!(e instanceof DumpInterruptedError)) throw e;
          }
        }
      } finally {
        stop = true;
        await writing;
        writer.close();
      }
      for (const s of seen) expect(s, 'a digest dump mixed two rulesets').toMatch(/^[0-9a-f]+$/);
      expect(reader.dumpsInterrupted).toBeGreaterThan(0);
      expect(seen.length).toBeGreaterThanOrEqual(RETURNED);
    }, 'intr-digests');
  }, SANITIZED ? 900_000 : 150_000);

  it('the addon marks an interrupted dump, which is never another EINTR', async () => {
    // Straight to the addon, without the retry: the raced dumps reject with
    // dumpInterrupted, the others resolve consistent.
    await withSocket(async (s, ns) => {
      const setup: Op[] = [{ verb: 'add', object: 'table', family: F, name: T }];
      for (const name of ['a', 'big', 'z']) setup.push({ verb: 'add', object: 'chain', family: F, table: T, name });
      for (let k = 0; k < BIG / 4; k++) {
        setup.push({ verb: 'add', object: 'rule', family: F, table: T, chain: 'big', exprs: [{ kind: 'counter' }] });
      }
      await s.commit([...setup, ...writeState(0)]);
      const { NftSocket: Native } = loadAddon();
      const raw = new Native(ns.path);
      const writer = open({ netns: ns.path });
      let marked = 0;
      try {
        const deadline = Date.now() + 60_000;
        for (let i = 1; marked === 0 && Date.now() < deadline; i++) {
          const dump = raw.dump('rule', F, T);
          await writer.commit(writeState(i));
          try {
            await dump;
          } catch (e) {
            expect(e).toBeInstanceOf(NetlinkError);
            expect((e as NetlinkError).errno).toBe(4);
            expect((e as { dumpInterrupted?: boolean }).dumpInterrupted).toBe(true);
            expect((e as Error).message).toMatch(/NLM_F_DUMP_INTR/);
            marked++;
          }
        }
      } finally {
        raw.close();
        writer.close();
      }
      expect(marked).toBe(1);
    }, 'intr-raw');
  });

  describe('an interrupted dump is ended, not read to its end (native/dump.cc, NftSocket::Reopen)', () => {
    const CUT = 30_000;
    /** The owned case's table of the long chain: one the socket does not own, which another socket can change. */
    const LOOSE = 'loose';

    /** The inode of the netfilter netlink socket on `port` in `ns`, from the kernel's own table. */
    function inodeOf(ns: Netns, port: number): string | undefined {
      // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
      const rows = ns.exec('cat', ['/proc/net/netlink']).trim().split('\n').slice(1).map((l) => l.trim().split(/\s+/));
      return rows.find((r) => r[1] === '12' && Number(r[2]) === port)?.[9];
    }

    /** The user-space netfilter netlink sockets of `ns` by inode, with their port ids (/proc/net/netlink; port 0 is the kernel's). */
    function socketsOf(ns: Netns): Map<string, number> {
      const rows = ns.exec('cat', ['/proc/net/netlink']).trim().split('\n').slice(1).map((l) => l.trim().split(/\s+/));
      return new Map(rows.filter((r) => r[1] === '12' && r[2] !== '0').map((r) => [r[9]!, Number(r[2])]));
    }

    /**
     * Fills `s`'s table with a chain of CUT rules (`flags` on the table), calls `ready`, then races
     * a `once` digest dump with another socket's commit to the dumped table (a commit to another
     * table would not spoil it: native/dump.cc, Confirm). A table with flags (owned) refuses other
     * sockets: the long chain is then in LOOSE, a table of `s`'s it does not own.
     */
    async function raced(s: NftSocket, ns: Netns, flags?: number, ready?: () => Promise<void>): Promise<unknown> {
      const D = flags !== undefined ? LOOSE : T;
      const setup: Op[] = [{ verb: 'add', object: 'table', family: F, name: T, ...(flags !== undefined ? { flags } : {}) }];
      if (D !== T) setup.push({ verb: 'add', object: 'table', family: F, name: D });
      for (const name of ['a', 'z']) setup.push({ verb: 'add', object: 'chain', family: F, table: T, name });
      setup.push({ verb: 'add', object: 'chain', family: F, table: D, name: 'big' });
      for (let k = 0; k < CUT; k++) setup.push({ verb: 'add', object: 'rule', family: F, table: D, chain: 'big', exprs: [{ kind: 'counter' }] });
      await s.commit([...setup, ...writeState(0)]);
      await ready?.();
      const writer = open({ netns: ns.path });
      try {
        for (let i = 1; i < 20; i++) {
          // The dump is sent, and its first datagrams read, before dump() returns (the inline
          // start): the commit lands while the kernel still walks the long chain.
          const dump = s.listRuleDigests({ family: F, table: D, once: true });
          await writer.commit([{ verb: 'add', object: 'chain', family: F, table: D, name: `other${i}` }]);
          try {
            await dump;
          } catch (e) {
            return e;
          }
        }
      } finally {
        writer.close();
      }
      return undefined;
    }

    it('the socket is replaced, on the same port id, and serves the next dump and commit', async () => {
      await withSocket(async (first, ns) => {
        // The namespace's first socket of this process has the process's id as its port, which
        // any new socket would take again once free: the socket under test is a second one.
        const s = open({ netns: ns.path });
        try {
          await cut(s, ns);
        } finally {
          s.close();
        }
        expect(first.closed).toBe(false);
      }, 'intr-cut');
    }, SANITIZED ? 600_000 : 120_000);

    async function cut(s: NftSocket, ns: Netns): Promise<void> {
      {
        const port = s.portId;
        expect(port).not.toBe(process.pid);
        const before = inodeOf(ns, port);
        expect(before).toBeDefined();
        const e = await raced(s, ns);
        expect(e).toBeInstanceOf(DumpInterruptedError);
        // The socket that held the rest of the dump is gone (the kernel ended the dump with it):
        // another one has its port id. Read to its end, the same socket would still be there.
        expect(s.portId).toBe(port);
        const after = inodeOf(ns, port);
        expect(after).toBeDefined();
        expect(after).not.toBe(before);
        expect(s.closed).toBe(false);
        // The same NftSocket: a whole dump, a commit (with the generation check), a dump again.
        const chains = await s.listRuleDigests({ family: F, table: T });
        expect(chains.find((c) => c.chain === 'big')?.handles.length).toBe(CUT);
        await s.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: 'a', exprs: [{ kind: 'counter' }] }],
          { expectGeneration: s.generation() });
        expect((await s.listRules({ family: F, table: T, chain: 'a' })).length).toBe(2);
        expect(inodeOf(ns, port)).toBe(after);
      }
    }

    it('a socket that owns a table is kept (closing it would take the owner flag off): its dumps go over a dump-only socket, which is replaced', async () => {
      await withSocket(async (s, ns) => {
        const port = s.portId;
        const before = inodeOf(ns, port);
        let dumpOnly: string | undefined;
        const e = await raced(s, ns, 0x2 | 0x4, async () => {  // owner | persist, as protect mode creates it
          // The first dump after the claim opens the dump-only socket: the namespace's one socket
          // besides `s` (the writer comes later).
          await s.listTables();
          const others = [...socketsOf(ns)].filter(([, p]) => p !== port);
          expect(others).toHaveLength(1);
          dumpOnly = others[0]![0];
        });
        expect(e).toBeInstanceOf(DumpInterruptedError);
        // The owning socket is the same one, and still owns the table.
        expect(inodeOf(ns, port)).toBe(before);
        expect(await s.getTable(F, T)).toMatchObject({ flags: 0x6, owner: port });
        // The dump ended early: the socket it went over is gone (the kernel ended the dump with
        // it). Read to its end, that socket would still be there.
        expect(socketsOf(ns).has(dumpOnly!)).toBe(false);
        // The next dumps go over another dump-only socket, whole; a commit with the generation check
        // goes over the owning one, which still owns the table.
        const chains = await s.listRuleDigests({ family: F, table: LOOSE });
        expect(chains.find((c) => c.chain === 'big')?.handles.length).toBe(CUT);
        const now = [...socketsOf(ns)].filter(([, p]) => p !== port);
        expect(now).toHaveLength(1);
        expect(now[0]![0]).not.toBe(dumpOnly);
        await s.commit([{ verb: 'add', object: 'rule', family: F, table: T, chain: 'a', exprs: [{ kind: 'counter' }] }],
          { expectGeneration: s.generation() });
        expect((await s.listRules({ family: F, table: T, chain: 'a' })).length).toBe(2);
        expect(inodeOf(ns, port)).toBe(before);
        expect(await s.getTable(F, T)).toMatchObject({ flags: 0x6, owner: port });
        // Another socket still cannot change the table: the owner flag is the kernel's, intact.
        const other = open({ netns: ns.path });
        try {
          await expect(other.commit([{ verb: 'add', object: 'chain', family: F, table: T, name: 'x' }])).rejects.toMatchObject({ errno: 1 });
        } finally {
          other.close();
        }
      }, 'intr-owner');
    }, SANITIZED ? 600_000 : 120_000);
  });
});
