/**
 * A start from empty under a busy neighbour: another socket commits to a table of its own 100
 * times a second while `nfkeeper run` (or `apply`) installs a 10,000-rule table. Each commit moves
 * the ruleset's generation, so a guard that checks the generation alone refused every attempt
 * ("the ruleset kept changing between read and commit", exit 2). The install creates its table
 * (`create table`, src/netlink/guard.ts) and needs no generation: the daemon becomes ready, and the
 * kernel holds exactly the desired table.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { chainYaml } from '../helpers/big-chain.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { nfk, nfkDone, waitFor } from './spawn.js';

const N = 10_000;
const RATE = 100;

function config(): string {
  const file = join(tempDir('guard-neighbour'), 'c.yaml');
  writeFileSync(file, chainYaml(N));
  return file;
}

/** The kernel holds `ip big` with its N rules, nothing else of ours (the neighbour's table aside). */
async function holdsDesired(ns: Netns, file: string): Promise<void> {
  const s = open({ netns: ns.path });
  try {
    expect((await s.listTables()).map((t) => `${t.family} ${t.name}`).filter((t) => t !== 'ip neighbour')).toEqual(['ip big']);
    expect((await s.listChains({ family: 'ip', table: 'big' })).map((c) => c.name)).toEqual(['c']);
    expect((await s.listRules({ family: 'ip', table: 'big' })).length).toBe(N);
  } finally {
    s.close();
  }
  const check = await nfkDone(['check', '--config', file, '--netns', ns.path, '--no-progress']);
  expect(check.code, check.err.join('\n')).toBe(0);
}

describe('a start from empty under a neighbour committing to its own table', { timeout: 180_000 }, () => {
  it(`nfkeeper run installs ${N} rules and becomes ready while another table is committed to ${RATE} times a second`, async () => {
    await withNetns(async (ns) => {
      const file = config();
      const nb = await startNeighbour(ns.path, RATE);
      const r = nfk(['run', '--config', file, '--netns', ns.path, '--no-metrics']);
      let commits = 0;
      try {
        await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running')
          || r.child.exitCode !== null, 120_000);
        expect(r.child.exitCode, r.err.join('\n')).toBeNull();
      } finally {
        ({ commits } = await nb.stop());
        r.child.kill('SIGTERM');
      }
      expect(commits, 'the neighbour committed meanwhile').toBeGreaterThan(10);
      expect((await r.exited).code).toBe(0);
      await holdsDesired(ns, file);
    }, 'guard-run');
  });

  it(`nfkeeper apply installs ${N} rules while another table is committed to ${RATE} times a second`, async () => {
    await withNetns(async (ns) => {
      const file = config();
      const nb = await startNeighbour(ns.path, RATE);
      let r;
      let commits = 0;
      try {
        r = await nfkDone(['apply', '--config', file, '--netns', ns.path, '--no-progress'], { timeoutMs: 120_000 });
      } finally {
        ({ commits } = await nb.stop());
      }
      expect(commits, 'the neighbour committed meanwhile').toBeGreaterThan(10);
      expect(r.code, r.err.join('\n')).toBe(0);
      await holdsDesired(ns, file);
    }, 'guard-apply');
  });
});
