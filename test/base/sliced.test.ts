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
    // Queued before the work starts: its first slice runs at once, the second only after this.
    setImmediate(() => log.push('queued'));
    const done = runByTurns(work(log));
    expect(await done).toBe(3);
    expect(log).toEqual(['slice 1', 'queued', 'slice 2', 'slice 3']);
  });
});
