/**
 * Socket lifecycle: use after close, idempotent close, fds released by close,
 * by garbage collection and by environment teardown (worker exit, process
 * exit with a monitor polling), and work that stays off the event
 * loop.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open, SocketClosedError, type Op } from '../../src/index.js';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { withNetns } from '../helpers/netns.js';
import { fdCount, loadIptablesForeign, matchAddr, OWNED, ownedSetup, withSocket } from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;
const CHILD = join(PROJECT_ROOT, 'test', 'netlink', 'children', 'lifecycle-child.ts');

function runChild(mode: string, netns: string, nodeArgs: string[] = [], wrapper: string[] = []): { status: number | null; signal: string | null; out: Record<string, unknown> } {
  const [cmd, ...args] = [...wrapper, process.execPath, ...nodeArgs, '--import', 'tsx', CHILD, mode, netns];
  const r = spawnSync(cmd!, args, {
    cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 30_000,
  });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  let out: Record<string, unknown> = {};
  try {
    out = JSON.parse(line) as Record<string, unknown>;
  } catch {
    out = { stdout: r.stdout, stderr: r.stderr };
  }
  return { status: r.status, signal: r.signal, out: { ...out, stderr: r.stderr } };
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(() => undefined, (e: unknown) => e);
}

describe('socket lifecycle', () => {
  it('throws SocketClosedError after close, and close is idempotent', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      expect(s.closed).toBe(false);
      s.close();
      s.close();
      expect(s.closed).toBe(true);
      expect(() => s.generation()).toThrow(SocketClosedError);
      expect(await rejection(s.listTables())).toBeInstanceOf(SocketClosedError);
      expect(await rejection(s.listRules({ family: F, table: T, chain: C }))).toBeInstanceOf(SocketClosedError);
      expect(await rejection(s.commit(ownedSetup()))).toBeInstanceOf(SocketClosedError);
      const e = await rejection(s.listChains({ family: F, table: T }));
      expect(e).toMatchObject({ errnoName: 'EBADF', operation: 'list chains' });
    }, 'life');
  });

  it('a close while requests are queued fails them with SocketClosedError or lets them finish', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      await s.commit(ownedSetup());
      // Handlers are attached before close(): awaiting one request at a time
      // would leave a later one rejected with no handler yet (an unhandled
      // rejection that fails the whole run).
      const outcomes = [
        s.listRules({ family: F, table: T, chain: C }),
        s.commit([{ verb: 'add', object: 'chain', family: F, table: T, name: 'x' }]),
        s.listTables(),
      ].map(rejection);
      s.close();
      for (const e of await Promise.all(outcomes)) {
        if (e !== undefined) expect(e).toBeInstanceOf(SocketClosedError);
      }
    }, 'life');
  });

  it('close releases the fd; 1,000 open/close cycles leave the fd count unchanged', async () => {
    await withNetns(async (ns) => {
      const before = fdCount();
      const socks = Array.from({ length: 50 }, () => open({ netns: ns.path }));
      expect(fdCount()).toBe(before + 50);
      for (const s of socks) s.close();
      expect(fdCount()).toBe(before);
      for (let i = 0; i < 1000; i++) {
        const s = open({ netns: ns.path });
        s.generation();
        s.close();
      }
      expect(fdCount()).toBe(before);
    }, 'life');
  });

  it('a socket that owns a table: close releases its dump-only socket too', async () => {
    await withNetns(async (ns) => {
      const before = fdCount();
      const s = open({ netns: ns.path });
      await s.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'owned', flags: 0x2 | 0x4 }]);
      expect(fdCount()).toBe(before + 1);
      await s.listTables();
      expect(fdCount()).toBe(before + 2);
      s.close();
      expect(fdCount()).toBe(before);
    }, 'life');
  });

  it('a socket that owns a table dumps over itself when no descriptor is left for a dump-only socket', async () => {
    await withNetns(async (ns) => {
      const r = runChild('dump-emfile', ns.path, [], ['prlimit', '--nofile=256:256']);
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  }, 60_000);

  it('a garbage-collected socket releases its fd', async () => {
    await withNetns(async (ns) => {
      const r = runChild('gc', ns.path, ['--expose-gc']);
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  });

  it('terminating a worker thread closes its sockets and its monitor', async () => {
    await withNetns(async (ns) => {
      const r = runChild('worker', ns.path);
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  });

  it('process.exit() with a ref\'d monitor and requests in flight exits cleanly', async () => {
    await withNetns(async (ns) => {
      loadIptablesForeign(ns, 1000);
      const r = runChild('exit-while-busy', ns.path);
      expect(r.signal).toBeNull();
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  });

  it('more requests at once than the worker pool has threads are all answered (none waits for the socket on a pool thread)', async () => {
    await withNetns(async (ns) => {
      const r = runChild('crowd', ns.path);
      expect(r.signal, 'the child hung (killed by the 30 s guard)').toBeNull();
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  });

  it('open sockets and an unref\'d monitor do not keep the process alive', async () => {
    await withNetns(async (ns) => {
      const r = runChild('natural-exit', ns.path);
      expect(r.signal).toBeNull(); // not killed by the 30 s guard
      expect(r.out).toMatchObject({ ok: true });
      expect(r.status).toBe(0);
    }, 'life');
  });
});

describe('the event loop keeps running', () => {
  it('while a 10,000-rule commit and a 10,000-rule dump run', async () => {
    await withSocket(async (s) => {
      await s.commit(ownedSetup());
      const ops: Op[] = Array.from({ length: 10_000 }, (_, i) => ({
        verb: 'add', object: 'rule', family: F, table: T, chain: C,
        exprs: matchAddr('saddr', `10.9.${i >> 8}.${i & 255}`),
      }));
      // A setImmediate chain runs once per loop iteration. A blocking call
      // would finish (and resolve) before the first of them could run.
      let turns = 0;
      let spinning = true;
      const spin = (): void => {
        turns++;
        if (spinning) setImmediate(spin);
      };
      try {
        turns = 0;
        setImmediate(spin);
        await s.commit(ops);
        const duringCommit = turns;

        turns = 0;
        const rules = await s.listRules({ family: F, table: T });
        const duringDump = turns;

        // A blocking call would resolve before any setImmediate turn (its continuation is a
        // microtask), so one turn already proves the loop ran; more would be load-dependent.
        // A chain-filtered dump starts inline (at most two datagrams) and a
        // worker finishes it when the chain turns out big.
        turns = 0;
        const chainRules = await s.listRules({ family: F, table: T, chain: C });
        const duringChainDump = turns;

        expect(rules).toHaveLength(10_004);
        expect(chainRules).toHaveLength(10_004);
        expect(duringCommit).toBeGreaterThan(0);
        expect(duringDump).toBeGreaterThan(0);
        expect(duringChainDump).toBeGreaterThan(0);
      } finally {
        spinning = false;
      }
    }, 'loop');
  });
});
