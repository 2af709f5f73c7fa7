/**
 * The scheduler alone, without a kernel: how requests coalesce into passes, which cause a joined
 * pass runs under, and what a refused or stopped pass answers.
 */
import { describe, expect, it } from 'vitest';
import { Scheduler } from '../../src/keeper/scheduler.js';
import type { Outcome, RepairRequest } from '../../src/keeper/outcome.js';
import { TableOwnedError } from '../../src/keeper/table.js';

/** A scheduler whose passes wait until released, recording what each was asked. */
function gated() {
  const runs: RepairRequest[] = [];
  const releases: ((o: Outcome | Error) => void)[] = [];
  const failed: unknown[] = [];
  const loops: string[] = [];
  const s = new Scheduler({
    run: (req) => {
      runs.push({ cause: req.cause, detectedAt: req.detectedAt, background: req.background });
      return new Promise<Outcome>((resolve, reject) => releases.push((o) => (o instanceof Error ? reject(o) : resolve(o))));
    },
    fail: (e) => failed.push(e),
    passesBegin: () => loops.push('start'),
    passesEnd: () => loops.push('end'),
  });
  const release = async (o: Outcome | Error = { status: 'in-sync', drift: [], ops: 0, attempts: 1 }) => {
    await until(() => releases.length > 0);
    releases.shift()!(o);
  };
  return { s, runs, release, failed, loops };
}

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !ok(); i++) await new Promise((r) => setImmediate(r));
  if (!ok()) throw new Error('condition never held');
}

describe('Scheduler', () => {
  it('runs at most one pass and queues one more: a burst of requests costs two passes, each request answered', async () => {
    const { s, runs, release, loops } = gated();
    const first = s.request('event', 1);
    const burst = [s.request('event', 2), s.request('tick', 3), s.request('event', 4)];
    expect(s.busy()).toBe(true);
    await release();
    await release({ status: 'repaired', drift: [], ops: 1, attempts: 1, generation: 7 });
    expect((await first).status).toBe('in-sync');
    // The queued pass served the whole burst, under the first cause that queued it, from the earliest detection.
    for (const p of burst) expect(await p).toMatchObject({ cause: 'event', status: 'repaired', generation: 7 });
    expect(runs.map((r) => [r.cause, r.detectedAt])).toEqual([['event', 1], ['event', 2]]);
    await s.idle();
    expect(s.busy()).toBe(false);
    expect(loops).toEqual(['start', 'end']);
  });

  it('a deliberate change joining a queued tick lends it its cause (a fight does not hold it back)', async () => {
    const { s, runs, release } = gated();
    void s.request('tick', 1);
    void s.request('tick', 2);
    const reload = s.request('reload', 3);
    await release();
    await release();
    expect((await reload).cause).toBe('reload');
    expect(runs.map((r) => r.cause)).toEqual(['tick', 'reload']);
  });

  it('a request joining a queued background read turns it into a pass of its own cause and clock', async () => {
    const { s, runs, release } = gated();
    void s.request('tick', 1);
    void s.request('tick', 2, true);
    const ev = s.request('event', 5);
    await release();
    await release();
    expect((await ev).cause).toBe('event');
    expect(runs[1]).toEqual({ cause: 'event', detectedAt: 5, background: false });
  });

  it('a background read alone commits nothing: the event repairs and the armed monitor go on (committing), until a pass that may commit queues', async () => {
    const { s, runs, release, loops } = gated();
    void s.request('tick', 1, true);
    expect(s.busy()).toBe(true);
    expect(s.committing()).toBe(false);
    expect(loops).toEqual([]);  // the arm is not paused for it
    void s.request('tick', 2, true);  // another background read queued: still nothing that commits
    expect(s.committing()).toBe(false);
    void s.request('event', 3);  // joins the queued read and turns it into a pass of its own
    expect(s.committing()).toBe(true);
    expect(loops).toEqual(['start']);
    await release();
    expect(s.committing()).toBe(true);
    await release();
    await s.idle();
    expect(s.committing()).toBe(false);
    expect(loops).toEqual(['start', 'end']);
    expect(runs.map((r) => [r.cause, r.background])).toEqual([['tick', true], ['event', false]]);
    // A pass that may commit, then a background read after it: committing only while the first runs.
    void s.request('event', 4);
    void s.request('tick', 5, true);
    expect(s.committing()).toBe(true);
    await release();
    await until(() => runs.length === 4);
    expect(s.committing()).toBe(false);
    await release();
    await s.idle();
    expect(loops).toEqual(['start', 'end', 'start', 'end']);
  });

  it('a refused pass rejects its requests; only a refusal nobody handles is reported', async () => {
    const { s, release, failed } = gated();
    const tick = s.request('tick', 1);
    await release(new Error('EPERM'));
    await expect(tick).rejects.toThrow('EPERM');
    expect(failed).toHaveLength(1);
    // A reload's and a start-up's refusal by another owner are their callers' to handle.
    const reload = s.request('reload', 2);
    await release(new Error('refused'));
    await expect(reload).rejects.toThrow('refused');
    const startup = s.request('startup', 3);
    await release(new TableOwnedError('ip', 't', 42));
    await expect(startup).rejects.toBeInstanceOf(TableOwnedError);
    expect(failed).toHaveLength(1);
  });

  it('stop settles the queued pass as stopped, waits for the running one, and answers later requests stopped', async () => {
    const { s, runs, release } = gated();
    const running = s.request('tick', 1);
    const queued = s.request('event', 2);
    const stopping = s.stop();
    expect(await queued).toMatchObject({ cause: 'event', status: 'stopped' });
    await release();
    await stopping;
    expect((await running).status).toBe('in-sync');
    expect(await s.request('event', 3)).toMatchObject({ status: 'stopped' });
    expect(runs).toHaveLength(1);
  });
});
