/**
 * A flushed long chain put back by the daemon in a time of the order of the kernel's own re-add:
 * the repair's new rules at the chain's end are appended, not placed one after another by
 * NFTA_RULE_POSITION_ID, which the kernel resolves by walking the batch's transactions from the
 * first (O(N²): 30,000 rules 3.4 times an append's time, 100,000 rules 54 times;
 * docs/notes/2026-12-06-flush-100k.md).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { chainYaml, ip } from '../helpers/big-chain.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { nfk, waitFor } from './spawn.js';

const N = 50_000;

describe('a flushed chain of the daemon\'s', { timeout: 300_000 }, () => {
  it(`is put back within a few times the kernel's own append of its ${N} rules`, async () => {
    await withNetns(async (ns) => {
      const file = join(tempDir('flush-repair'), 'c.yaml');
      writeFileSync(file, chainYaml(N));
      const s = open({ netns: ns.path });
      try {
        await flushedAndBack(ns, s, file);
      } finally {
        s.close();
      }
    }, 'flush-repair');
  });
});

async function flushedAndBack(ns: Netns, s: NftSocket, file: string): Promise<void> {
  // The kernel's floor, here and now, before the daemon runs (its monitor would read the floor's
  // events): one batch appending the same rules to an empty chain of another table.
  const rules = await (async () => {
    const text = ['table ip floor {', ' chain c {'];
    for (let i = 0; i < N; i++) text.push(`  ip saddr ${ip(i)} accept`);
    ns.nft(`${text.join('\n')}\n }\n}\n`);
    return s.listRules({ family: 'ip', table: 'floor', chain: 'c' });
  })();
  ns.nft('flush chain ip floor c\n');
  const floor = new Batch();
  for (const x of rules) floor.push({ verb: 'add', object: 'rule', family: 'ip', table: 'floor', chain: 'c', exprs: x.exprs });
  const f0 = performance.now();
  await s.commit(floor);
  const floorMs = performance.now() - f0;
  ns.nft('delete table ip floor\n');
  const r = nfk(['run', '--config', file, '--netns', ns.path, '--no-metrics']);
  try {
    await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running') || r.child.exitCode !== null, 180_000);
    expect(r.child.exitCode, r.err.join('\n')).toBeNull();
    expect((await s.listRules({ family: 'ip', table: 'big', chain: 'c' })).map((x) => x.exprs)).toEqual(rules.map((x) => x.exprs));
    const before = r.logs().length;
    ns.nft('flush chain ip big c\n');
    const t0 = performance.now();
    await waitFor('repaired', () => r.logs().slice(before).some((l) => l.msg === 'repaired') || r.child.exitCode !== null, 120_000);
    const ms = performance.now() - t0;
    // 5 × the floor and 3 s for the daemon's read, plan and encode (1-2 s at load 10); placed one
    // after another by position id, the kernel alone took 10 times the floor at this size.
    const bound = 5 * floorMs + 3_000;
    console.log(`repaired ${ms.toFixed(0)} ms after the flush; the kernel's append ${floorMs.toFixed(0)} ms; bound ${bound.toFixed(0)} ms`);
    expect(ms).toBeLessThan(bound);
    expect((await s.listRules({ family: 'ip', table: 'big', chain: 'c' })).map((x) => x.exprs)).toEqual(rules.map((x) => x.exprs));
  } finally {
    r.child.kill('SIGTERM');
  }
  expect((await r.exited).code).toBe(0);
}
