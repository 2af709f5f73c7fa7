/**
 * Monitor.readNow(): the proofs' moment (FollowedView.current). What the monitor's socket holds is
 * read at once, without a turn of the event loop, and its batches are handed over before it
 * returns: the generation it gives is the kernel's. From inside onBatch it reads nothing, so the
 * batches of a wake-up are handed over in order.
 */
import { describe, expect, it } from 'vitest';
import { Monitor, type MonitorBatch } from '../../src/index.js';
import { open } from '../../src/netlink/socket.js';
import type { Op } from '../../src/netlink/ops.js';
import { withNetns } from '../helpers/netns.js';
import { until } from '../helpers/wait.js';

const table = (verb: 'add' | 'delete', name: string): Op => ({ verb, object: 'table', family: 'ip', name });

describe('Monitor.readNow', () => {
  it('reads what the socket holds and hands it over before it returns: the kernel\'s generation, no turn of the loop', async () => {
    await withNetns(async (ns) => {
      const got: MonitorBatch[] = [];
      const m = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 'w' }], onBatch: (b) => got.push(b) });
      const s = open({ netns: ns.path });
      try {
        const g0 = s.generation();
        m.anchor(g0, 0);
        // Three commits on this thread (inline), with no turn of the loop after them.
        for (const op of [table('add', 'other'), table('add', 'w'), table('delete', 'other')]) expect(s.commitNow([op])).not.toBe(false);
        expect(s.generation()).toBe(g0 + 3);
        expect(m.progress().lastGeneration, 'nothing read yet').toBe(g0);
        expect(got).toEqual([]);
        const p = m.readNow();
        expect(p.lastGeneration).toBe(g0 + 3);
        expect(p.runStart).toBe(g0 + 1);
        // The watched commit, and the other table's deletion (every table deletion is handed over).
        expect(got.map((b) => [b.generation, b.events.map((e) => `${e.type} ${e.table}`)])).toEqual([
          [g0 + 2, ['newtable w']],
          [g0 + 3, ['deltable other']],
        ]);
        expect(p.delivered).toBe(2);
      } finally {
        m.close();
        s.close();
      }
    }, 'readnow');
  });

  it('reads nothing from inside onBatch: the batches of one read come in order', async () => {
    await withNetns(async (ns) => {
      const seen: string[] = [];
      const s = open({ netns: ns.path });
      const m: Monitor = new Monitor({
        netns: ns.path, tables: [{ family: 'ip', name: 'w' }], onBatch: (b) => {
          seen.push(`batch ${b.generation}`);
          // Inside onBatch: progress as handed over with this wake-up, nothing read.
          if (b.generation === g0 + 1) {
            s.commitNow([table('add', 'later')]);
            seen.push(`readNow ${m.readNow().lastGeneration}`);
          }
        },
      });
      const g0 = s.generation();
      try {
        m.anchor(g0, 0);
        s.commitNow([table('add', 'w')]);
        s.commitNow([table('delete', 'w')]);
        m.readNow();
        // The deletion of w came in the same read and is handed over after the first batch; the
        // commit made inside onBatch is not read until the next read.
        expect(seen).toEqual([`batch ${g0 + 1}`, `readNow ${g0 + 2}`, `batch ${g0 + 2}`]);
        expect(m.progress().lastGeneration).toBe(g0 + 2);
        await until('the later commit read', () => m.readNow().lastGeneration === g0 + 3, 5000);
      } finally {
        m.close();
        s.close();
      }
    }, 'readnow-inside');
  });
});
