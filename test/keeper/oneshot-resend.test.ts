/**
 * A one-shot apply (checkOnce) onto an existing owned table, refused by the generation because of
 * another socket's commit between its plan and its commit. Its monitor (options.watch, the daemon's
 * proof: FollowedView.unchangedSince) is opened at the first refusal, so a pass no commit refuses
 * has none (a member of the group costs our own commit a notification per op); the plans read after
 * it are proved: a batch refused again is sent again, guarded by the later generation, where the
 * commit in between named none of its tables; where it touched ours, never sent again as planned:
 * the pass reads and plans again.
 */
import { describe, expect, it } from 'vitest';
import { checkOnce } from '../../src/keeper/oneshot.js';
import { Reconciler } from '../../src/keeper/reconciler.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { open } from '../../src/netlink/socket.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { recordSends } from '../helpers/sends.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const N = 200;

describe('a one-shot apply refused by a commit of another socket', () => {
  const t = socketPerTest('oneshot-resend');

  /** Installs seedConfig(N), flushes its chain from outside, then applies it once; `between` runs before each of its first `times` commits. */
  async function apply(between: () => void, watch = true, times = 1) {
    const { ns, sock } = t;
    const config = seedConfig(N);
    await new Reconciler(sock, { attempts: 5 }).once({ tables: config.tables });
    ns.nft('flush chain ip seed post\n');
    const other = open({ netns: ns.path });
    const sent = recordSends(sock, () => between.call(other), times);
    const monitors: Monitor[] = [];
    let observations = 0;
    const r = await checkOnce(sock, config, true, [], {
      found: () => observations++,
      ...(watch ? { watch: (o: ConstructorParameters<typeof Monitor>[0]) => { const m = new Monitor({ ...o, netns: ns.path }); monitors.push(m); return m; } } : {}),
    });
    other.close();
    return { r, sent, monitors };
  }

  it('a pass no commit refuses opens no monitor', async () => {
    const { sent, monitors } = await apply(() => undefined);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.refused).toBeUndefined();
    expect(monitors).toEqual([]);
  });

  it('after the first refusal, sends the same batch again, guarded by the later generation, when the commit in between was to another table', async () => {
    const { ns } = t;
    let n = 0;
    const { r, sent, monitors } = await apply(function (this: ReturnType<typeof open>) {
      this.commitNow([{ verb: n++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    }, true, 2);
    // The first plan, read before the monitor: planned again; the second, proved: sent again as encoded.
    expect(sent[0]).toMatchObject({ how: 'commit', refused: true, ops: N });
    expect(sent[1]).toMatchObject({ how: 'commit', refused: true, generation: sent[0]!.generation! + 1, ops: N });
    expect(sent[2]).toMatchObject({ how: 'recommit', generation: sent[1]!.generation! + 1, ops: N });
    expect(sent[2]!.refused).toBeUndefined();
    // Two plans, one batch in the kernel.
    expect(sent).toHaveLength(3);
    expect(r.ops).toBe(N);
    expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: N }, (_, i) => seedRule(i)));
    expect(ns.exec('nft', ['list', 'tables'])).not.toMatch(/table ip neighbour/);
    // The pass's monitor is closed when it ends.
    expect(monitors.map((m) => m.closed)).toEqual([true]);
  });

  it('plans again from a read when the commit in between changed the owned table, the monitor open or not', async () => {
    const { ns } = t;
    const { r, sent, monitors } = await apply(() => {
      ns.nft('add rule ip seed post counter\n');
    }, true, 2);
    expect(sent[0]).toMatchObject({ how: 'commit', refused: true, ops: N });
    // Never sent again as planned: each next commit comes from a new plan, which removes the stray rules.
    expect(sent.filter((s) => s.how === 'recommit')).toEqual([]);
    expect(sent[1]).toMatchObject({ how: 'commit', refused: true, generation: sent[0]!.generation! + 1 });
    expect(sent[2]).toMatchObject({ how: 'commit', generation: sent[1]!.generation! + 1 });
    expect(sent[2]!.refused).toBeUndefined();
    expect(r.ops).toBe(sent[2]!.ops);
    expect(monitors).toHaveLength(1);
    expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: N }, (_, i) => seedRule(i)));
  });

  it('without a monitor plans again after a commit to another table (no proof)', async () => {
    const { ns } = t;
    const { sent } = await apply(function (this: ReturnType<typeof open>) {
      this.commitNow([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    }, false);
    expect(sent[0]).toMatchObject({ how: 'commit', refused: true, ops: N });
    expect(sent.filter((s) => s.how === 'recommit')).toEqual([]);
    expect(sent[1]).toMatchObject({ how: 'commit', generation: sent[0]!.generation! + 1, ops: N });
    expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: N }, (_, i) => seedRule(i)));
  });
});
