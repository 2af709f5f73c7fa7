/**
 * A table's lock (src/lock.ts): an abstract socket bound in the namespace, whose holder another
 * keeper names by connecting to it. Its connections are drained from DRAIN_AFTER_MS on: before
 * that they wait in the backlog (16) and still name the holder; after it, any number do.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
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

/** Another process holding a table's lock in `ns` for `ms` (dist/lock.js: built by the suite's set-up). */
async function holdTable(ns: string, ms: number) {
  const lock = resolve('dist/lock.js');
  const child = spawn(process.execPath, ['--input-type=module', '-e',
    `const m = await import(${JSON.stringify(lock)}); const l = m.lockKeeper({ netns: ${JSON.stringify(ns)}, tables: [{ family: 'ip', name: 't' }] });`
    + ` console.log('held'); setTimeout(() => l.release(), ${ms});`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((res, rej) => {
    child.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('held')) res(); });
    child.on('exit', (code) => rej(new Error(`the holder exited ${code} before it held the lock`)));
  });
  return { pid: child.pid!, done: new Promise<void>((res) => child.on('exit', () => res())) };
}

describe("a table's lock waited for (the daemon's start)", () => {
  it('taken once the holder lets go, the holder named once; refused after a wait too short', async () => {
    await withNetns(async (ns) => {
      const t = [{ family: 'ip', name: 't' }];
      let h = await holdTable(ns.path, 3000);
      const told: [string, number | undefined][] = [];
      let t0 = performance.now();
      expect(() => lockKeeper({ netns: ns.path, tables: t, wait: { ms: 300, holder: (what, pid) => told.push([what, pid]) } })).toThrow(KeeperLockedError);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
      expect(told).toEqual([[`table ip t in ${ns.path}`, h.pid]]);
      await h.done;
      h = await holdTable(ns.path, 600);
      t0 = performance.now();
      const lock = lockKeeper({ netns: ns.path, tables: t, wait: { ms: 10_000, holder: (what, pid) => told.push([what, pid]) } });
      const took = performance.now() - t0;
      await h.done;
      expect(took).toBeGreaterThan(300);
      expect(took).toBeLessThan(10_000);
      expect(told).toHaveLength(2);
      expect(told[1]).toEqual([`table ip t in ${ns.path}`, h.pid]);
      // Held now by this process: another asker is told our pid.
      expect(lockCalls().abstractPeerPid!(ns.path, tableLockName('ip', 't'))).toBe(process.pid);
      lock.release();
    }, 'lockw');
  });
});
