/**
 * The owners state's lock (src/owners/state-lock.ts): refused at once while another process holds
 * it, or waited for (the daemon's start beside a one-shot apply or gc), naming the holder's pid.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KeeperLockedError, lockOwnersState, stateLockPathOf } from '../../src/owners/state-lock.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';

/** Another process holding the lock (util-linux flock) with its pid in the file, for `ms`. */
async function holdFor(stateFile: string, ms: number) {
  const path = stateLockPathOf(stateFile);
  const child = spawn('flock', ['-x', path, 'sh', '-c', `echo $$ > '${path}'; echo held; sleep ${ms / 1000}`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('held')) resolve(); });
    child.on('exit', (code) => reject(new Error(`flock exited ${code} before it held the lock`)));
  });
  const pid = Number(readFileSync(path, 'utf8').trim());
  return { pid, done: new Promise<void>((resolve) => child.on('exit', () => resolve())) };
}

describe("the owners state's lock", () => {
  it('held by another process: refused at once without a wait, and after the wait with one too short', async () => {
    const dir = tempDir('state-lock');
    const state = join(dir, 'owners.json');
    const h = await holdFor(state, 3000);
    try {
      let err: unknown;
      try { lockOwnersState(state); } catch (e) { err = e; }
      expect(err).toBeInstanceOf(KeeperLockedError);
      expect((err as KeeperLockedError).pid).toBe(h.pid);
      const t0 = performance.now();
      let told: (number | undefined)[] = [];
      err = undefined;
      try { lockOwnersState(state, { ms: 300, holder: (pid) => told.push(pid) }); } catch (e) { err = e; }
      expect(err).toBeInstanceOf(KeeperLockedError);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
      expect(told).toEqual([h.pid]);
      told = [];
    } finally {
      await h.done;
    }
  });

  it('waited for: taken once the holder lets go, its pid written in; free: taken at once, nothing said', async () => {
    const dir = tempDir('state-lock');
    const state = join(dir, 'owners.json');
    const h = await holdFor(state, 600);
    const told: (number | undefined)[] = [];
    const t0 = performance.now();
    const fd = lockOwnersState(state, { ms: 10_000, holder: (pid) => told.push(pid) });
    const took = performance.now() - t0;
    await h.done;
    expect(fd).toBeTypeOf('number');
    expect(told).toEqual([h.pid]);
    expect(took).toBeGreaterThan(300);
    expect(took).toBeLessThan(10_000);
    expect(readFileSync(stateLockPathOf(state), 'utf8').trim()).toBe(String(process.pid));
    closeSync(fd!);
    // Free: no wait, no word of a holder.
    await sleep(10);
    const again = lockOwnersState(state, { ms: 10_000, holder: (pid) => told.push(pid) });
    expect(told).toEqual([h.pid]);
    closeSync(again!);
    expect(existsSync(stateLockPathOf(state))).toBe(true);
  });
});
