/**
 * Waiting in tests and benchmarks: the one `sleep`.
 *
 *   import { sleep } from '../helpers/wait.js';
 *   for (let i = 0; i < 100 && !done(); i++) await sleep(50);  // poll with a generous deadline
 *
 * Assert on a polled condition with a generous bound, never on a fixed sleep: the suite runs on
 * loaded 2-core machines.
 */
import { setTimeout } from 'node:timers/promises';

export function sleep(ms: number): Promise<void> {
  return setTimeout(ms);
}

/** Polls `ok` every `pollMs` until it holds; throws naming `what` after `ms`. */
export async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 30_000, pollMs = 20): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(pollMs);
  }
}
