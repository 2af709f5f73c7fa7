/**
 * Work done in slices: a generator that yields between them, each yield a place where the work
 * may pause. The caller runs it at once (runNow), or by turns of the event loop (runByTurns), so
 * that a long piece of work (the compile cache's store of a big config, the making of its rules
 * after a restart) does not hold a daemon's loop for its whole length: what is queued meanwhile
 * (an event's repair, a timer) runs between turns.
 */
export type Sliced<T> = Generator<void, T, void>;

/**
 * How long one turn of runByTurns may run before it gives the loop back: what an event waits for at
 * most (beside one slice), small against a repair; the turns' own cost (a setImmediate each) stays
 * small against the work.
 */
export const TURN_MS = 3;

/** Runs all of `work` now. */
export function runNow<T>(work: Sliced<T>): T {
  for (;;) {
    const r = work.next();
    if (r.done) return r.value;
  }
}

/**
 * Runs `work` by turns of the event loop: slices until `turnMs` has passed, then the loop's turn.
 * The slices are made small (a few hundred rules): the time, not their count, makes a turn.
 */
export async function runByTurns<T>(work: Sliced<T>, turnMs = TURN_MS): Promise<T> {
  for (;;) {
    const began = performance.now();
    for (;;) {
      const r = work.next();
      if (r.done) return r.value;
      if (performance.now() - began >= turnMs) break;
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** `work` that stops at the first slice after which `stop` holds (undefined then). */
export function* until<T>(work: Sliced<T>, stop: () => boolean): Sliced<T | undefined> {
  for (;;) {
    const r = work.next();
    if (r.done) return r.value;
    if (stop()) return undefined;
    yield;
  }
}
