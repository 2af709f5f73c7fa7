/**
 * A one-shot read under a busy neighbour: `nfkeeper export` of a 20,000-rule table while another
 * socket adds and deletes a table of its own as fast as its loop turns. Its rule dump is interrupted
 * (the ruleset's generation moves between its datagrams) by commits that name another table only,
 * and is taken (native/dump.cc: the watch); before, every attempt was interrupted and the export
 * failed (exit 2, "interrupted ... on all 32 attempts"). The text is the quiet export's.
 */
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';

const N = 20_000;

describe('a one-shot read under a busy neighbour', () => {
  it('export of a 20,000-rule table succeeds while another table is committed to as fast as it goes, and prints the quiet export', async () => {
    await withNetns(async (ns) => {
      const rules = Array.from({ length: N }, (_, i) => `add rule ip big c ip saddr 10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255} accept`);
      ns.nft(`add table ip big\nadd chain ip big c\n${rules.join('\n')}\n`);
      const args = ['export', '--table', 'ip', 'big', '--netns', ns.path, '--no-progress'];
      const quiet = await cli(...args);
      expect(quiet.code, quiet.err).toBe(0);
      const s = open({ netns: ns.path });
      let running = true;
      let commits = 0;
      const neighbour = (async () => {
        for (; running; commits++) {
          const op = { verb: commits % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' } as const;
          if (s.commitNow([op]) === false) await s.commit([op]);
          await new Promise((r) => setImmediate(r));
        }
      })();
      let busy;
      const before = commits;
      try {
        busy = await cli(...args);
      } finally {
        running = false;
        await neighbour;
        s.close();
      }
      expect(commits - before, 'the neighbour committed while the export read').toBeGreaterThan(10);
      expect(busy.code, busy.err).toBe(0);
      expect(busy.out).toBe(quiet.out);
    }, 'busy-export');
  }, 120_000);
});
