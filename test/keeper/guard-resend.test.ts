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

  /**
   * Installs seedConfig(n), flushes its chain from outside, then repairs it with a view following a
   * monitor as the daemon's does (its proofs read the socket now). `between` runs before the first
   * commit, `refused` when a send is refused (before the guard asks for the proof).
   */
  async function repair(between: () => void, n = N, refused?: () => void) {
    const { ns, sock } = t;
    const tables = seedConfig(n).tables;
    await new Reconciler(sock, { attempts: 5 }).once({ tables });
    ns.nft('flush chain ip seed post\n');
    const view = new KernelView();
    view.setOwned(tables);
    const monitor = new Monitor({ netns: ns.path, tables: tables.map((x) => ({ family: x.family, name: x.name })), onBatch: (b) => view.follow(b, sock.portId) });
    view.followEvents(monitor, () => false);
    monitor.anchor(sock.generation(), 0);
    const other = open({ netns: ns.path });
    const sent = recordSends(sock, () => between.call(other), 1, refused);
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

  it('proves the resend at the generation the kernel refused it by, with no turn of the loop for another commit to come first', async () => {
    const { ns } = t;
    // 20 rules: sent inline, so the resend reaches the kernel before the loop turns. After the
    // refusal, another commit to the neighbour's table waits for the loop's next check phase: a
    // proof that waits for the loop to turn before it reads the monitor is taken after that commit
    // (the resend guarded by it, or refused by it); one that reads the monitor's socket at once is
    // taken at the generation that refused the batch, and the resend goes before the late commit.
    const n = 20;
    let late: Promise<void> | undefined;
    const other = open({ netns: ns.path });
    try {
      const { r, sent, mismatches } = await repair(function (this: ReturnType<typeof open>) {
        this.commitNow([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
      }, n, () => {
        late ??= new Promise((done) => setImmediate(() => {
          other.commitNow([{ verb: 'add', object: 'table', family: 'ip', name: 'late' }]);
          done();
        }));
      });
      await late;
      expect(sent.map((x) => [x.how, x.generation! - sent[0]!.generation!, x.refused ?? false])).toEqual([
        ['commit', 0, true],
        ['recommit', 1, false],
      ]);
      expect(mismatches).toBe(1);
      expect(r.status).toBe('repaired');
      expect(chainLines(ns, 'ip', 'seed', 'post')).toEqual(Array.from({ length: n }, (_, i) => seedRule(i)));
      // The late commit came after our resend, as scheduled.
      expect(ns.exec('nft', ['list', 'tables'])).toMatch(/table ip late/);
    } finally {
      other.close();
    }
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
