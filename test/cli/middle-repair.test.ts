/**
 * A long run of rules missing from the middle of a chain put back by the daemon in a time of the
 * order of the kernel's own append of those rules: the run's rules are placed after its first by
 * that one's batch id, which the kernel finds near the head of the batch, not each after the one
 * before (nft_rule_lookup_byid walks the batch's transactions from the first: O(K²);
 * docs/notes/2026-12-07-middle-run.md). The chain after is the one nft installs, rule by rule.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/netlink/batch.js';
import { open } from '../../src/netlink/socket.js';
import { chainYaml, ip } from '../helpers/big-chain.js';
import { withNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { nfk, waitFor } from './spawn.js';

const N = 60_000;
const LO = 5_000;
const HI = 55_000;

/** `nft --debug=netlink list ruleset` without handles: the kernel's rules, expression by expression, in order. */
const dump = (text: string) => text.split('\n').map((l) => l.replace(/^(ip big c) \d+( \d+)?$/, '$1')).join('\n');

describe('a run of rules missing from the middle of the daemon\'s chain', { timeout: 300_000 }, () => {
  it(`is put back within a few times the kernel's own append of its ${HI - LO} rules, in order`, async () => {
    await withNetns(async (ns) => {
      const file = join(tempDir('middle-repair'), 'c.yaml');
      writeFileSync(file, chainYaml(N));
      const rule = (i: number) => `ip saddr ${ip(i)} accept`;
      // The reference: the whole chain as nft installs it.
      const head = 'table ip big {\n chain c {\n  type filter hook forward priority filter; policy accept;\n';
      const all = Array.from({ length: N }, (_, i) => `  ${rule(i)}`);
      ns.nft(`${head}${all.join('\n')}\n }\n}\n`);
      const reference = dump(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']));
      const s = open({ netns: ns.path });
      try {
        // The kernel's floor, here and now: the missing rules appended to the chain by one batch.
        const missing = (await s.listRules({ family: 'ip', table: 'big', chain: 'c' })).slice(LO, HI);
        const damaged = `flush chain ip big c\n${all.filter((_, i) => i < LO || i >= HI).map((l) => `add rule ip big c ${l.trim()}`).join('\n')}\n`;
        ns.nft(damaged);
        const floor = new Batch();
        for (const x of missing) floor.push({ verb: 'add', object: 'rule', family: 'ip', table: 'big', chain: 'c', exprs: x.exprs });
        const f0 = performance.now();
        await s.commit(floor);
        const floorMs = performance.now() - f0;
        ns.nft('delete table ip big\n');
        const r = nfk(['run', '--config', file, '--netns', ns.path, '--no-metrics']);
        try {
          await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running') || r.child.exitCode !== null, 180_000);
          expect(r.child.exitCode, r.err.join('\n')).toBeNull();
          const before = r.logs().length;
          ns.nft(damaged);
          const t0 = performance.now();
          await waitFor('repaired', () => r.logs().slice(before).some((l) => l.msg === 'repaired') || r.child.exitCode !== null, 120_000);
          const ms = performance.now() - t0;
          // 5 × the floor and 3 s for the daemon's read, plan and encode; placed one after another by
          // position id, the kernel alone took several times the floor at this size.
          const bound = 5 * floorMs + 3_000;
          console.log(`repaired ${ms.toFixed(0)} ms after the damage; the kernel's append ${floorMs.toFixed(0)} ms; bound ${bound.toFixed(0)} ms`);
          expect(ms).toBeLessThan(bound);
          expect(dump(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']))).toBe(reference);
        } finally {
          r.child.kill('SIGTERM');
        }
        expect((await r.exited).code).toBe(0);
      } finally {
        s.close();
      }
    }, 'middle-repair');
  });
});
