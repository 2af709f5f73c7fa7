/**
 * Work done in slices: a generator that yields between them. The caller runs it at once
 * (runNow), or a slice per turn of the event loop (runByTurns), so that a long piece of work (the
 * compile cache's store of a big config) does not hold a daemon's loop for its whole length: what
 * is queued meanwhile (an event's repair, a timer) runs between slices.
 */
export type Sliced<T> = Generator<void, T, void>;

/** Runs all of `work` now. */
export function runNow<T>(work: Sliced<T>): T {
  for (;;) {
    const r = work.next();
    if (r.done) return r.value;
  }
}

/** Runs `work` a slice per turn of the event loop. */
export async function runByTurns<T>(work: Sliced<T>): Promise<T> {
  for (;;) {
    const r = work.next();
    if (r.done) return r.value;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}
