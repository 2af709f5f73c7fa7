/**
 * A monitor opened unread (MonitorOptions.unread: a one-shot apply's resend proof): joined at open,
 * so the commits after it wait in its socket, but nothing is read or handed over until the first
 * progress(); then the waiting commits come, in order, the run of whole commits intact from the anchor.
 */
import { describe, expect, it } from 'vitest';
import { Monitor, type MonitorBatch } from '../../src/index.js';
import { open } from '../../src/netlink/socket.js';
import { withNetns } from '../helpers/netns.js';
import { until } from '../helpers/wait.js';

const turns = async (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end) await new Promise((r) => setTimeout(r, 5));
};

describe('a monitor opened unread', () => {
  it('reads nothing until progress() is asked, then every commit since the join', async () => {
    await withNetns(async (ns) => {
      const got: MonitorBatch[] = [];
      const m = new Monitor({ netns: ns.path, tables: [{ family: 'ip', name: 'w' }], unread: true, onBatch: (b) => got.push(b) });
      const s = open({ netns: ns.path });
      try {
        const g0 = s.generation();
        m.anchor(g0, 0);
        ns.nft('add table ip w\nadd chain ip w c\n');
        ns.nft('add table ip other\n');
        ns.nft('add rule ip w c counter\n');
        await turns(300);
        expect(got).toEqual([]);
        const first = m.progress();
        expect(first.lastGeneration).toBe(g0);
        await until('the waiting commits read', () => m.progress().lastGeneration === g0 + 3, 5000);
        // The watched table's two commits, in order; the other table's moved the generation only.
        expect(got.map((b) => [b.generation, b.events.map((e) => `${e.type} ${e.table}`)])).toEqual([
          [g0 + 1, ['newtable w', 'newchain w']],
          [g0 + 3, ['newrule w']],
        ]);
        expect(m.progress().runStart).toBe(g0 + 1);
      } finally {
        m.close();
        s.close();
      }
    }, 'unread');
  });
});
