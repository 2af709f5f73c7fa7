/**
 * The generation guard's one exception (src/netlink/guard.ts): a batch confined to tables it
 * creates (`create table`, NLM_F_EXCL) goes without the generation, so commits to other tables
 * between the read and the commit do not refuse it; a table that appeared meanwhile does (EEXIST),
 * and the guard plans again from a fresh read. A batch that reaches one table more keeps the
 * generation check.
 */
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import { commitGuarded } from '../../src/netlink/guard.js';
import { open } from '../../src/netlink/socket.js';
import { withNetns } from '../helpers/netns.js';

const accept = [{ kind: 'immediate' as const, dreg: 0, verdict: 'accept' as const }];

/** The batch a start from empty plans for `ip own` (create table, its chain, a rule). */
function install(): Batch {
  return new Batch()
    .create('table', { family: 'ip', name: 'own' })
    .add('chain', { family: 'ip', table: 'own', name: 'c' })
    .add('rule', { family: 'ip', table: 'own', chain: 'c', exprs: accept });
}

describe('the generation guard and tables it creates', () => {
  it('commits a batch confined to a table it creates although another table was committed to since the read', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      try {
        let mismatches = 0;
        const r = await commitGuarded(s, async (generation, attempt) => {
          if (attempt > 1) return { value: attempt };
          expect(await s.getTable('ip', 'own')).toBeUndefined();
          // The neighbour: a commit to its own table after our read.
          await other.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
          expect(s.generation()).not.toBe(generation);
          return { value: attempt, batch: install() };
        }, { attempts: 3, onMismatch: () => mismatches++ });
        expect(mismatches).toBe(0);
        expect(r.attempts).toBe(1);
        expect((await s.listRules({ family: 'ip', table: 'own' })).length).toBe(1);
      } finally {
        s.close();
        other.close();
      }
    }, 'guard-create');
  });

  it('refuses the batch when the table it creates appeared since the read, and plans again from what is there', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      try {
        let mismatches = 0;
        const plans: string[] = [];
        await commitGuarded(s, async (_generation, attempt) => {
          const there = await s.getTable('ip', 'own');
          plans.push(there ? 'present' : 'absent');
          if (there) return { value: attempt };  // planned from what is there: nothing to add here
          // Someone else creates the table (a chain of its own) between our plan and our commit.
          await other.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'own' },
            { verb: 'add', object: 'chain', family: 'ip', table: 'own', name: 'x' }]);
          return { value: attempt, batch: install() };
        }, { attempts: 3, onMismatch: () => mismatches++ });
        expect(plans).toEqual(['absent', 'present']);
        expect(mismatches).toBe(1);
        // Never the batch over a table it did not plan from: the other's chain alone.
        expect((await s.listChains({ family: 'ip', table: 'own' })).map((c) => c.name)).toEqual(['x']);
      } finally {
        s.close();
        other.close();
      }
    }, 'guard-create');
  });

  it('keeps the generation check for a batch that reaches a table it does not create', async () => {
    await withNetns(async (ns) => {
      ns.nft('add table ip kept\nadd chain ip kept k\n');
      const s = open({ netns: ns.path });
      const other = open({ netns: ns.path });
      try {
        let mismatches = 0;
        const r = await commitGuarded(s, async (_generation, attempt) => {
          if (attempt > 1) return { value: attempt };
          await other.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
          return { value: attempt, batch: install().add('rule', { family: 'ip', table: 'kept', chain: 'k', exprs: accept }) };
        }, { attempts: 3, onMismatch: () => mismatches++ });
        expect(mismatches).toBe(1);
        expect(r.attempts).toBe(2);
        expect(await s.getTable('ip', 'own')).toBeUndefined();
      } finally {
        s.close();
        other.close();
      }
    }, 'guard-create');
  });
});
