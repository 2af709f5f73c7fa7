/**
 * A one-shot read under a busy neighbour: `nfkeeper export` of a 20,000-rule table while another
 * process adds and deletes a table of its own 3,000 times a second. Its rule dump is interrupted
 * (the ruleset's generation moves between its datagrams) by commits that name another table only,
 * and is taken (native/dump.cc: the watch); before, every attempt was interrupted and the export
 * failed (exit 2, "interrupted ... on all 32 attempts"). The text is the quiet export's. At 10,000
 * commits a second it still fails so (the issue-27 neighbour's rate): not fixed yet.
 */
import { describe, expect, it } from 'vitest';
import { ip } from '../helpers/big-chain.js';
import { cli } from '../helpers/cli.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns } from '../helpers/netns.js';

const N = 20_000;
const RATE = 3_000;

describe('a one-shot read under a busy neighbour', () => {
  it(`export of a 20,000-rule table succeeds while another table is committed to ${RATE} times a second, and prints the quiet export`, async () => {
    await withNetns(async (ns) => {
      const rules = Array.from({ length: N }, (_, i) => `add rule ip big c ip saddr ${ip(i)} accept`);
      ns.nft(`add table ip big\nadd chain ip big c\n${rules.join('\n')}\n`);
      const args = ['export', '--table', 'ip', 'big', '--netns', ns.path, '--no-progress'];
      const quiet = await cli(...args);
      expect(quiet.code, quiet.err).toBe(0);
      const neighbour = await startNeighbour(ns.path, RATE);
      let busy;
      let commits = 0;
      try {
        busy = await cli(...args);
      } finally {
        ({ commits } = await neighbour.stop());
      }
      expect(commits, 'the neighbour committed while the export read').toBeGreaterThan(10);
      expect(busy.code, busy.err).toBe(0);
      expect(busy.out).toBe(quiet.out);
    }, 'busy-export');
  }, 120_000);
});
