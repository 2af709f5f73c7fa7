/**
 * A table's lock (src/lock.ts): an abstract socket bound in the namespace, whose holder another
 * keeper names by connecting to it. Its connections are drained from DRAIN_AFTER_MS on: before
 * that they wait in the backlog (16) and still name the holder; after it, any number do.
 */
import { describe, expect, it } from 'vitest';
import { KeeperLockedError, lockKeeper, tableLockName } from '../src/lock.js';
import { lockCalls } from '../src/netlink/unix.js';
import { withNetns } from './helpers/netns.js';
import { sleep } from './helpers/wait.js';

describe("a table's lock", () => {
  it('names its holder to more askers than its backlog holds once drained; before that to the backlog\'s; released, free at once', async () => {
    await withNetns(async (ns) => {
      const addon = lockCalls();
      const name = tableLockName('ip', 't');
      const ask = () => addon.abstractPeerPid!(ns.path, name);
      const lock = lockKeeper({ netns: ns.path, tables: [{ family: 'ip', name: 't' }], drainAfterMs: 1000 });
      expect(() => lockKeeper({ netns: ns.path, tables: [{ family: 'ip', name: 't' }] })).toThrow(KeeperLockedError);
      // Not drained yet, though the event loop runs between the askers: the backlog fills (the
      // asker's connect is non-blocking: EAGAIN), the first 16 named the holder.
      const early: number[] = [];
      for (let i = 0; i < 3; i++) {
        early.push(...Array.from({ length: 8 }, ask));
        await sleep(20);
      }
      expect(early.slice(0, 16)).toEqual(Array(16).fill(process.pid));
      expect(early).toContain(-11);
      await sleep(1100);
      // Drained: each connection accepted and closed as it comes.
      for (let i = 0; i < 40; i++) {
        expect(ask()).toBe(process.pid);
        if (i % 8 === 7) await sleep(20);
      }
      lock.release();
      expect(ask()).toBeLessThan(0);
      // Released before it drained: its socket closed all the same, and no timer left to drain it.
      const again = lockKeeper({ netns: ns.path, tables: [{ family: 'ip', name: 't' }], drainAfterMs: 60_000 });
      expect(ask()).toBe(process.pid);
      again.release();
      expect(ask()).toBeLessThan(0);
      lockKeeper({ netns: ns.path, tables: [{ family: 'ip', name: 't' }] }).release();
    }, 'lock');
  });
});
