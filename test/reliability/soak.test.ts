import { describe, expect, it } from 'vitest';
import { soak } from '../../bench/soak.js';

describe('chaos soak (short)', () => {
  it('converges after every random tampering and ends with no divergence', async () => {
    // Back-off capped at 400 ms keeps this short; `npm run soak` runs with the daemon's defaults.
    const r = await soak(40, 7, undefined, { capMs: 300 });
    console.log(`[soak] ${JSON.stringify(r)}`);
    expect(r.converged).toBe(r.ops);
    expect(r.finalDivergence).toEqual([]);
    expect(r.keeperErrors).toBe(0);
    expect(Object.keys(r.byOp).length).toBeGreaterThanOrEqual(6);
  }, 300_000);
});
