/**
 * Durations as Go writes them (time.ParseDuration), because Kubernetes, Nomad
 * and flannel users type them: "1m30s", "500ms", "1.5h", "2h45m", "100us".
 * A bare number is milliseconds (what nfkeeper accepted before).
 */
import { NfkeeperError } from './errors.js';

const UNIT_MS: Record<string, number> = {
  ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000,
};

/** A duration in milliseconds, or a DurationError naming the text. */
export function parseDuration(text: string): number {
  const s = String(text).trim();
  if (/^\d+(?:\.\d+)?$/.test(s)) return Number(s);
  const part = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let total = 0;
  let at = 0;
  let m: RegExpExecArray | null;
  while (s.length > 0 && (m = part.exec(s)) !== null) {
    total += Number(m[1]) * UNIT_MS[m[2]!]!;
    at = part.lastIndex;
  }
  if (s.length === 0 || at !== s.length) {
    throw new DurationError(`'${text}' is not a duration (like 500ms, 30s, 1m30s, 1h)`);
  }
  return total;
}

export class DurationError extends NfkeeperError {
  override name = 'DurationError';
}

/** Parses a flag's duration and holds it to [min, max]; the message names the flag and the bounds. */
export function parseBoundedDuration(flag: string, text: string, minMs: number, maxMs: number): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (e) {
    throw new DurationError(`${flag}: ${(e as Error).message}`);
  }
  if (ms < minMs || ms > maxMs) {
    throw new DurationError(`${flag}: ${text} is out of range; use between ${formatDuration(minMs)} and ${formatDuration(maxMs)}`);
  }
  return ms;
}

export function formatDuration(ms: number): string {
  if (ms >= 3_600_000 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms >= 1000 && ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
