/**
 * `nfkeeper apply` of a changed config onto its existing 10,000-rule table while another writer
 * commits to a table of its own: each of its commits moves the ruleset's generation, and a guard
 * with the generation alone refused every attempt ("the ruleset kept changing between read and
 * commit", exit 2). apply's monitor proves that those commits named none of our tables, and the
 * refused batch is sent again guarded by the later generation (src/keeper/oneshot.ts). The kernel
 * then holds exactly what a quiet apply leaves.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { chainYaml, ip } from '../helpers/big-chain.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { nfkDone } from './spawn.js';

const N = 10_000;

function configs(): [string, string] {
  const dir = tempDir('oneshot-neighbour');
  const v1 = join(dir, 'v1.yaml'), v2 = join(dir, 'v2.yaml');
  writeFileSync(v1, chainYaml(N));
  // One rule changed in the middle of the chain: a small batch into the existing table.
  writeFileSync(v2, chainYaml(N, { rule: (i) => `ip saddr ${ip(i === N / 2 ? N * 2 : i)} accept` }));
  return [v1, v2];
}

async function apply(ns: Netns, file: string) {
  return nfkDone(['apply', '--config', file, '--netns', ns.path, '--no-progress', '--no-cache-dir'], { timeoutMs: 120_000 });
}

/** What a quiet apply of v1 then v2 leaves: `nft --debug=netlink list table ip big`. */
async function quietResult(v1: string, v2: string): Promise<string> {
  return withNetns(async (ns) => {
    expect((await apply(ns, v1)).code).toBe(0);
    expect((await apply(ns, v2)).code).toBe(0);
    return netlinkDump(ns, 'ip', 'big');
  }, 'oneshot-quiet');
}

const generation = (ns: Netns): number => {
  const s = open({ netns: ns.path });
  try {
    return s.generation();
  } finally {
    s.close();
  }
};

describe('apply onto an existing table under a neighbour committing to its own', { timeout: 240_000 }, () => {
  it('succeeds under 1,000 commits a second to another table and leaves what a quiet apply leaves', async () => {
    const [v1, v2] = configs();
    const want = await quietResult(v1, v2);
    await withNetns(async (ns) => {
      expect((await apply(ns, v1)).code).toBe(0);
      const nb = await startNeighbour(ns.path, 1000);
      let r;
      let commits = 0;
      try {
        await new Promise((res) => setTimeout(res, 200));
        r = await apply(ns, v2);
      } finally {
        ({ commits } = await nb.stop());
      }
      expect(commits, 'the neighbour committed meanwhile').toBeGreaterThan(100);
      expect(r.code, r.err.join('\n')).toBe(0);
      expect(netlinkDump(ns, 'ip', 'big')).toBe(want);
    }, 'oneshot-1000');
  });

  it('succeeds while iptables-nft adds and deletes a rule of its own table in a loop', async () => {
    const [v1, v2] = configs();
    const want = await quietResult(v1, v2);
    await withNetns(async (ns) => {
      expect((await apply(ns, v1)).code).toBe(0);
      // A real program as the neighbour: Debian's iptables-nft writing table ip filter, one commit per call.
      const loop = spawn('ip', ['netns', 'exec', ns.name, 'sh', '-c',
        'iptables-nft -A INPUT -s 192.0.2.7 -j ACCEPT; while :; do iptables-nft -A INPUT -s 192.0.2.8 -j ACCEPT; iptables-nft -D INPUT -s 192.0.2.8 -j ACCEPT; done'],
      { stdio: 'ignore', detached: true });
      let r;
      let moved = 0;
      try {
        await new Promise((res) => setTimeout(res, 500));
        const before = generation(ns);
        r = await apply(ns, v2);
        moved = generation(ns) - before;
      } finally {
        process.kill(-loop.pid!, 'SIGKILL');
      }
      expect(moved, 'iptables-nft committed meanwhile').toBeGreaterThan(5);
      expect(r.code, r.err.join('\n')).toBe(0);
      expect(netlinkDump(ns, 'ip', 'big')).toBe(want);
      expect(ns.exec('iptables-nft', ['-S', 'INPUT'])).toMatch(/-A INPUT -s 192\.0\.2\.7\/32 -j ACCEPT/);
    }, 'oneshot-iptables');
  });
});
