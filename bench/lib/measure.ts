/** Per-call wall time and CPU for the driver benchmarks. */
import { cpuNow } from './exec.js';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { summarize, type Summary } from './stats.js';

export interface Measurement extends Summary {
  /** Mean CPU per call in µs: this process plus its waited-for children. */
  cpuUs: number;
  /** The children's part of cpuUs (forked binaries; 10 ms tick resolution, averaged over the calls). */
  childCpuUs: number;
}

export interface Budget {
  /** Stop after this many timed calls. */
  maxIter: number;
  /** ...or once this much time has passed and at least minIter calls ran. */
  budgetMs: number;
  minIter: number;
  warmup: number;
}

/** Times sequential calls of fn (awaited); fn must return true (in sync) or the run fails. */
export async function measureCalls(fn: () => Promise<boolean>, b: Budget): Promise<Measurement> {
  for (let i = 0; i < b.warmup; i++) if (!(await fn())) throw new Error('check reported out of sync during warm-up');
  const samples: number[] = [];
  const c0 = cpuNow();
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(Math.round(b.budgetMs * 1e6));
  while (samples.length < b.maxIter) {
    const t0 = process.hrtime.bigint();
    const ok = await fn();
    const t1 = process.hrtime.bigint();
    if (!ok) throw new Error('check reported out of sync in steady state');
    samples.push(Number(t1 - t0) / 1000);
    // Let the event loop run between calls (untimed): spawnSync-based checks would otherwise
    // resolve through microtasks only and starve signal handlers (Ctrl-C cleanup).
    await yieldToLoop();
    if (t1 > deadline && samples.length >= b.minIter) break;
  }
  const c1 = cpuNow();
  const n = samples.length;
  const child = (c1.children - c0.children) / n;
  return { ...summarize(samples), cpuUs: (c1.self - c0.self) / n + child, childCpuUs: child };
}
