import { describe, expect, it } from 'vitest';
import { runByTurns, runNow, type Sliced } from '../../src/base/sliced.js';

/** Three slices, each noting itself in `log`; its result is the number of slices. */
function* work(log: string[]): Sliced<number> {
  for (let i = 1; i <= 3; i++) {
    log.push(`slice ${i}`);
    if (i < 3) yield;
  }
  return 3;
}

describe('work in slices', () => {
  it('runNow runs every slice at once', () => {
    const log: string[] = [];
    expect(runNow(work(log))).toBe(3);
    expect(log).toEqual(['slice 1', 'slice 2', 'slice 3']);
  });

  it('runByTurns lets what is queued meanwhile run between slices', async () => {
    const log: string[] = [];
    // Queued before the work starts: its first slice runs at once, the second only after this
    // (a turn of no time: one slice each).
    setImmediate(() => log.push('queued'));
    const done = runByTurns(work(log), 0);
    expect(await done).toBe(3);
    expect(log).toEqual(['slice 1', 'queued', 'slice 2', 'slice 3']);
  });

  it('runByTurns gives the loop its turn by time: several short slices to a turn, none longer than the turn and one slice', async () => {
    const SLICE_MS = 2;
    const TURN = 5;
    const perTurn: number[] = [0];
    let ended = false;
    // Another piece of work queued meanwhile: each of its turns ends one of runByTurns's.
    const queued = () => {
      if (ended) return;
      perTurn.push(0);
      setImmediate(queued);
    };
    setImmediate(queued);
    function* slices(): Sliced<void> {
      for (let i = 0; i < 40; i++) {
        const t = performance.now();
        while (performance.now() - t < SLICE_MS) { /* a slice of work */ }
        perTurn[perTurn.length - 1]!++;
        yield;
      }
    }
    await runByTurns(slices(), TURN);
    ended = true;
    const turns = perTurn.filter((n) => n > 0);
    expect(turns.reduce((a, b) => a + b, 0)).toBe(40);
    // At most the slices that fit in a turn and the one that crosses its end (each is at least SLICE_MS).
    expect(Math.max(...turns)).toBeLessThanOrEqual(Math.ceil(TURN / SLICE_MS));
    // Not a turn per slice: the loop's turns cost a setImmediate each.
    expect(turns.length).toBeLessThan(40);
  });
});
