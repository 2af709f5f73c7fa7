/**
 * A full pass from empty creates its table (`create table`) and commits without the generation
 * (src/netlink/guard.ts). When the owned table appears between the plan and the commit, the kernel
 * refuses the batch (EEXIST) and the pass plans again from what is there, this time guarded by the
 * generation: never a batch over a state it did not plan from.
 */
import { describe, expect, it } from 'vitest';
import { Reconciler } from '../../src/keeper/reconciler.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { recordSends, type Sent } from '../helpers/sends.js';
import { FLANNEL_RULES, chainLines, flannelConfig } from './helpers.js';

describe('a full pass from empty and its table appearing meanwhile', () => {
  const t = socketPerTest('guard-create-pass');

  it('is refused, plans again from the table as it is, and leaves the desired table', async () => {
    const { ns, sock } = t;
    // Someone creates the owned table, with a chain of its own, between the plan and the commit.
    const sent = recordSends(sock, () => ns.nft('add table ip nfkeeper\nadd chain ip nfkeeper stray\nadd rule ip nfkeeper stray counter\n'));
    const tables = flannelConfig().tables;
    const r = await new Reconciler(sock, { attempts: 5 }).once({ tables });
    const tableVerbs = (s: Sent) => s.batch.filter((o) => o.object === 'table').map((o) => o.verb);
    expect(tableVerbs(sent[0]!)).toEqual(['create']);
    expect((sent[0]!.error as { errnoName?: string }).errnoName).toBe('EEXIST');
    expect(sent[0]!.generation).toBeUndefined();
    // Planned from the table as it was: the stray chain seen and removed, under the generation.
    expect(sent[1]!.refused).toBeUndefined();
    expect(sent[1]!.generation).toBeTypeOf('number');
    expect(r.attempts).toBeGreaterThan(1);
    expect(ns.exec('nft', ['list', 'chains', 'ip'])).not.toMatch(/stray/);
    expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
  });
});
