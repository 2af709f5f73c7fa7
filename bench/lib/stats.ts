/** Timing helpers for the benchmarks: per-call samples, medians and tails. */

export interface Summary {
  /** Number of timed calls. */
  n: number;
  /** Microseconds. */
  median: number;
  p99: number;
  min: number;
  max: number;
}

/** The q-quantile (0..1) of sorted samples, nearest rank. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

export function summarize(samplesUs: number[]): Summary {
  const s = [...samplesUs].sort((a, b) => a - b);
  return { n: s.length, median: quantile(s, 0.5), p99: quantile(s, 0.99), min: s[0] ?? NaN, max: s[s.length - 1] ?? NaN };
}

export interface Timed {
  summary: Summary;
  /** Microseconds per call, in call order. */
  samples: number[];
}

/** Times `iterations` sequential calls of `fn` after `warmup` untimed ones; microseconds per call. */
export async function timeCalls(fn: () => unknown, iterations: number, warmup = Math.ceil(iterations / 10)): Promise<Timed> {
  for (let i = 0; i < warmup; i++) await fn();
  const samples = new Array<number>(iterations);
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    samples[i] = Number(process.hrtime.bigint() - t0) / 1000;
  }
  return { summary: summarize(samples), samples };
}

/** Like timeCalls, for synchronous calls (no await between samples). */
export function timeSyncCalls(fn: () => unknown, iterations: number, warmup = Math.ceil(iterations / 10)): Timed {
  for (let i = 0; i < warmup; i++) fn();
  const samples = new Array<number>(iterations);
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint();
    fn();
    samples[i] = Number(process.hrtime.bigint() - t0) / 1000;
  }
  return { summary: summarize(samples), samples };
}

/** 4.5 -> "4.5 µs", 12345 -> "12.3 ms". */
export function formatUs(us: number): string {
  if (!Number.isFinite(us)) return '-';
  if (us >= 1_000_000) return `${(us / 1_000_000).toFixed(2)} s`;
  if (us >= 1000) return `${(us / 1000).toFixed(us >= 10_000 ? 1 : 2)} ms`;
  return `${us.toFixed(us >= 100 ? 0 : 1)} µs`;
}

/** The median (nearest rank, as summarize) of the values given, those undefined left out; undefined for none. */
export function medianOf(xs: readonly (number | undefined)[]): number | undefined {
  const v = xs.filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  return v.length > 0 ? quantile(v, 0.5) : undefined;
}

/** A figure with `digits` decimals, or '-' where there is none. */
export const fixed = (x: number | undefined, digits = 2): string => (x === undefined ? '-' : x.toFixed(digits));
