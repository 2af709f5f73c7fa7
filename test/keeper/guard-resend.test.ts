/**
 * A full pass's repair refused by the generation because of a neighbour's commit (src/netlink/guard.ts,
 * stillHolds): where the followed events prove that no commit since the plan named the tables it was
 * planned from, the batch is sent again as encoded (recommit), guarded by the later generation, without
 * a new read or plan. Where the commit in between touched the owned table, the proof fails and the
 * pass plans again from a read: never a batch over a state it did not plan from.
 */
import { describe, expect, it } from 'vitest';
import { KernelView } from '../../src/keeper/view.js';
import { Reconciler } from '../../src/keeper/reconciler.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { open } from '../../src/netlink/socket.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { recordSends } from '../helpers/sends.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const N = 200;

describe('a full pass refused by a commit of another socket', () => {
  const t = socketPerTest('guard-resend');

  /** Installs seedConfig(N), flushes its chain from outside, then repairs it with a view following a monitor. */
  async function repair(between: () => void) {
    const { ns, sock } = t;
    const tables = seedConfig(N).tables;
    await new Reconciler(sock, { attempts: 5 }).once({ tables });
    ns.nft('flush chain ip seed post\n');
    const view = new KernelView();
    view.setOwned(tables);
    const monitor = new Monitor({ netns: ns.path, tables: tables.map((x) => ({ family: x.family, name: x.name })), onBatch: (b) => view.follow(b, sock.portId) });
    view.followEvents(() => monitor.progress(), () => false);
    monitor.anchor(sock.generation(), 0);
    const other = open({ netns: ns.path });
    const sent = recordSends(sock, () => between.call(other));
    let observations = 0;
    let mismatches = 0;
    const r = await new Reconciler(sock, { attempts: 5, view, metrics: { dumps: { inc: () => undefined }, generationRetries: { inc: () => mismatches++ } } as never })
      .once({ tables, useKnown: true, onObservation: () => observations++ });
    monitor.close();
    other.close();
    return { r, sent, observations, mismatches };
  }

  it('sends the same batch again, guarded by the later generation, when the commit in between was to another table', async () => {
    const { ns } = t;
    const { r, sent, observations, mismatches } = await repair(function (this: ReturnType<typeof open>) {
      this.commitNow([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    });
    expect(sent[0]).toMatchObject({ how: 'commit', refused: true, ops: N });
    expect(sent[1]).toMatchObject({ how: 'recommit', generation: sent[0]!.generation! + 1, ops: N });
    expect(sent[1]!.refused).toBeUndefined();
    expect(mismatches).toBe(1);
    // Planned once: the resend needed no read; the pass's second observation verifies.
    expect(observations).toBe(2);
    expect(r.status).toBe('repaired');
    expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: N }, (_, i) => seedRule(i)));
    expect(ns.exec('nft', ['list', 'tables'])).toMatch(/table ip neighbour/);
  });

  it('plans again from a read when the commit in between changed the owned table', async () => {
    const { ns } = t;
    const { r, sent, observations } = await repair(() => {
      ns.nft('add rule ip seed post counter\n');
    });
    expect(sent[0]).toMatchObject({ how: 'commit', refused: true, ops: N });
    // Never sent again as planned: the next commit comes from a new plan, which removes the stray rule.
    expect(sent.filter((s) => s.how === 'recommit')).toEqual([]);
    // Planned at the generation the stray rule made, from a read that saw it (the stray rule replaced).
    expect(sent[1]).toMatchObject({ how: 'commit', generation: sent[0]!.generation! + 1 });
    expect(sent[1]!.refused).toBeUndefined();
    expect(observations).toBe(3);
    expect(r.status).toBe('repaired');
    expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: N }, (_, i) => seedRule(i)));
  });
});
