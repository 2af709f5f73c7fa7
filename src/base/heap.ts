/**
 * A full garbage collection on request, for the daemon only (`run` turns it on): before the C
 * heap takes a big block for as long as a call lasts (a commit of thousands of rules encodes its
 * whole batch first), the JS garbage is collected, so that the two do not add up. At start-up V8's
 * incremental marking of the config's and the plan's garbage had often begun and could not end
 * while the encoder held the thread, and the install's peak held both (bench/rss.ts and
 * rss-trace.ts show it). One collection costs what the next one V8 would have run costs;
 * one-shot commands never collect here. Also V8's Maglev turned off at run time for an apply
 * from the compile cache (withoutMaglev, below).
 */
import { createRequire } from 'node:module';

let collect: (() => void) | undefined;

/** Lets collectGarbage() collect (V8's gc function, taken from a new context once the flag is set). */
export function enableCollections(): void {
  if (collect) return;
  // node:v8 and node:vm when asked, not at import: the one-shot commands import this file too.
  const require = createRequire(import.meta.url);
  (require('node:v8') as typeof import('node:v8')).setFlagsFromString('--expose-gc');
  const gc: unknown = (require('node:vm') as typeof import('node:vm')).runInNewContext('gc');
  if (typeof gc === 'function') collect = gc as () => void;
}

/** A full collection when enabled; otherwise nothing. */
export function collectGarbage(): void {
  collect?.();
}

/** Commits of at least this many ops collect first (see above): below it the encoded batch is small. */
export const COLLECT_BEFORE_OPS = 4096;

/**
 * V8's mid-tier compiler (Maglev) off until the function returned turns it back on (once; again
 * does nothing). For a one-shot apply until it knows it compiles nothing: from the compile cache
 * it makes no rule, and the functions it runs once per op (10,000 times at 10,000 rules) reach
 * Maglev's threshold only for its compiles to cost more CPU than their code saves before the
 * process ends (docs/notes/2026-12-06-apply-10k-2.md). A compile keeps it: there it pays. Back on
 * before the command returns, so that bin/ makes the code cache under the flags it read it with.
 */
export function withoutMaglev(): () => void {
  const require = createRequire(import.meta.url);
  const { setFlagsFromString } = require('node:v8') as typeof import('node:v8');
  setFlagsFromString('--no-maglev');
  let on = false;
  return () => {
    if (on) return;
    on = true;
    setFlagsFromString('--maglev');
  };
}
