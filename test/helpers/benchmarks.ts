/**
 * Figures the deployment files are sized from, read from BENCHMARKS.md (the reference run), so a
 * test holds a limit against the measurement rather than a number copied into it.
 */
import { readFileSync } from 'node:fs';

/** The daemon's start-up peak (VmHWM) at 100,000 owned rules, the largest measured, in MiB. */
export function startupPeakMiB(): number {
  const peak = /^\| one chain of 100,000 rules \| [\d.]+ MiB \| ([\d.]+) MiB \|$/m.exec(readFileSync('BENCHMARKS.md', 'utf8'));
  if (!peak) throw new Error('BENCHMARKS.md has no 100,000-rule start-up peak (the S7 RSS table\'s "one chain of 100,000 rules" row)');
  return Number(peak[1]);
}
