/**
 * A full pass from empty creates its table (`create table`) and commits without the generation
 * (src/netlink/guard.ts). When the owned table appears between the plan and the commit, the kernel
 * refuses the batch (EEXIST) and the pass plans again from what is there, this time guarded by the
 * generation: never a batch over a state it did not plan from.
 */
import { describe, expect, it } from 'vitest';
import { Reconciler } from '../../src/keeper/reconciler.js';
import type { CommitOptions } from '../../src/netlink/conn.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { FLANNEL_RULES, chainLines, flannelConfig } from './helpers.js';

describe('a full pass from empty and its table appearing meanwhile', () => {
  const t = socketPerTest('guard-create-pass');

  it('is refused, plans again from the table as it is, and leaves the desired table', async () => {
    const { ns, sock } = t;
    const realCommit = sock.commit.bind(sock);
    const commits: { options: CommitOptions; verbs: string[]; refused?: string }[] = [];
    sock.commit = async (batch, options = {}) => {
      const ops = 'ops' in batch ? batch.ops : batch;
      const c: (typeof commits)[number] = { options, verbs: ops.filter((o) => o.object === 'table').map((o) => o.verb) };
      commits.push(c);
      // Someone creates the owned table, with a chain of its own, between the plan and the commit.
      if (commits.length === 1) ns.nft('add table ip nfkeeper\nadd chain ip nfkeeper stray\nadd rule ip nfkeeper stray counter\n');
      try {
        return await realCommit(batch, options);
      } catch (e) {
        c.refused = (e as { errnoName?: string }).errnoName;
        throw e;
      }
    };
    const tables = flannelConfig().tables;
    const r = await new Reconciler(sock, { attempts: 5 }).once({ tables });
    expect(commits[0]).toMatchObject({ verbs: ['create'], refused: 'EEXIST' });
    expect(commits[0]!.options.expectGeneration).toBeUndefined();
    // Planned from the table as it was: the stray chain seen and removed, under the generation.
    expect(commits[1]!.refused).toBeUndefined();
    expect(commits[1]!.options.expectGeneration).toBeTypeOf('number');
    expect(r.attempts).toBeGreaterThan(1);
    expect(ns.exec('nft', ['list', 'chains', 'ip'])).not.toMatch(/stray/);
    expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
  });
});
