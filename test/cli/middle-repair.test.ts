/**
 * A long run of rules missing from the middle of a chain put back by the daemon with a kernel's
 * part (the daemon's system CPU) of the order of the kernel's own append of those rules (the test's
 * system CPU for it, in the same run): the run's rules are placed after its first by
 * that one's batch id, which the kernel finds near the head of the batch, not each after the one
 * before (nft_rule_lookup_byid walks the batch's transactions from the first: O(K²);
 * docs/notes/2026-12-07-middle-run.md). The chain after is the one nft installs, rule by rule.
 */
import { readFileSync, writeFileSync } from 'node:fs';
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

/** A process's CPU so far (ms, 10 ms ticks), user and system, from /proc/PID/stat. */
function cpuOf(pid: number): { user: number; sys: number } {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const x = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return { user: Number(x[11]) * 10, sys: Number(x[12]) * 10 };
}

/** `nft --debug=netlink list ruleset` without handles: the kernel's rules, expression by expression, in order. */
const dump = (text: string) => text.split('\n').map((l) => l.replace(/^(ip big c) \d+( \d+)?$/, '$1')).join('\n');

describe('a run of rules missing from the middle of the daemon\'s chain', { timeout: 300_000 }, () => {
  it(`is put back at a few times the kernel's own CPU for an append of its ${HI - LO} rules, in order`, async () => {
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
        const c0 = process.cpuUsage();
        await s.commit(floor);
        const floorSysMs = process.cpuUsage(c0).system / 1000;
        const floorMs = performance.now() - f0;
        ns.nft('delete table ip big\n');
        const r = nfk(['run', '--config', file, '--netns', ns.path, '--no-metrics']);
        try {
          await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running') || r.child.exitCode !== null, 180_000);
          expect(r.child.exitCode, r.err.join('\n')).toBeNull();
          const before = r.logs().length;
          const cpu0 = cpuOf(r.child.pid!);
          ns.nft(damaged);
          const t0 = performance.now();
          await waitFor('repaired', () => r.logs().slice(before).some((l) => l.msg === 'repaired') || r.child.exitCode !== null, 120_000);
          const ms = performance.now() - t0;
          const cpu = cpuOf(r.child.pid!);
          const sysMs = cpu.sys - cpu0.sys;
          const userMs = cpu.user - cpu0.user;
          // The kernel's part of the repair is done in the daemon's own context (a batch is processed
          // in the sendmsg that sends it): its system CPU, against the system CPU of the floor's
          // commit here, both counted in CPU time, which a busy machine does not stretch as it does
          // the wall. Placed one after another by batch id, the kernel walked the batch for each:
          // 9.9 s of the daemon's system CPU against a floor of 0.26 s (38×; this bound's 4× + 1 s
          // holds 2.4× as placed now). The daemon's own read, plan and encode are user CPU, not
          // bounded here; the wall is printed, not asserted (it failed a bound of 5 × the floor's wall
          // + 3 s, 13.7 s against 9.7 s, at load 8-10 with the placement as now).
          const bound = 4 * floorSysMs + 1_000;
          console.log(`repaired ${ms.toFixed(0)} ms after the damage (daemon CPU: system ${sysMs} ms, user ${userMs} ms); `
            + `the kernel's append ${floorMs.toFixed(0)} ms (system ${floorSysMs.toFixed(0)} ms); bound on the system CPU ${bound.toFixed(0)} ms`);
          expect(sysMs, 'the daemon\'s system CPU for the repair').toBeLessThan(bound);
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
