/**
 * kill -9 around the commit that puts back runs of rules missing inside chains (src/keeper/plan.ts
 * placeEdit: each run's first rule where it was, the rest after it by its batch id;
 * docs/notes/2026-12-07-middle-run.md). Table ip big holds chains c (base) and d (regular) of 300
 * rules each; the damage deletes a run from the middle of c and one from the head of d, by handle.
 * Three writers of that commit, each killed at each point of the addon's test seam
 * NFKEEPER_TEST_KILL_AT around its first commit:
 *   commit-sending  the batch encoded, not sent (nothing reaches the kernel)
 *   commit-sent     sent (the kernel took or refused it inside sendmsg), its acks unread
 *   commit-acked    the acks read, the outcome not yet back in JavaScript
 * `nfkeeper apply` on the damaged table; the daemon (adopting its record, so that its first commit
 * is the repair) repairing 4-rule runs from the events (the follow pass); the daemon repairing
 * 100-rule runs (more than the follow pass plans: the full pass). After each kill the table dumps
 * (`nft --debug=netlink`, handles aside) as the damaged one (commit-sending) or as the desired one
 * (the others): the batch whole or not at all. Then a restart (`apply` again; the daemon started
 * quietly: ready, `check` in sync, stopped cleanly, no temp file) leaves it as the desired one, in
 * order. With no kill, the daemon's followed part after the repair is checked too: a rule deleted
 * inside the run it put back and one right after it are repaired from the events, in place.
 *   NFK_MIDDLE_KILLS=commit-sent,commit-acked npx vitest run test/reliability/middle-run-kill.test.ts
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { ip } from '../helpers/big-chain.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { ruleHandles } from '../helpers/nft.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { daemon, logged, stop, waitSaid, type Child } from './owners-child.js';

const N = 300;
const POINTS = process.env.NFK_MIDDLE_KILLS?.split(',') ?? ['commit-sending', 'commit-sent', 'commit-acked'];
const rulesOf = { c: (i: number) => `ip saddr ${ip(i)} accept`, d: (i: number) => `ip daddr ${ip(i)} accept` };
/** The runs a damage deletes: [from, to) of c (its middle) and of d (its head). */
const SMALL = { c: [140, 144], d: [0, 4] } as const;
const BIG = { c: [100, 200], d: [0, 100] } as const;
type Runs = { c: readonly [number, number]; d: readonly [number, number] };

const yaml = `tables:\n  - family: ip\n    name: big\n    chains:\n${(['c', 'd'] as const).map((n) => `      - name: ${n}\n${n === 'c'
  ? '        type: filter\n        hook: forward\n        priority: filter\n        policy: accept\n' : ''}        rules:\n${Array.from({ length: N }, (_, i) => `          - ${rulesOf[n](i)}\n`).join('')}`).join('')}`;

/** The table as an nft script, the runs left out. */
const script = (runs?: Runs) => `table ip big {\n${(['c', 'd'] as const).map((n) => ` chain ${n} {\n${n === 'c'
  ? '  type filter hook forward priority filter; policy accept;\n' : ''}${Array.from({ length: N }, (_, i) => i)
  .filter((i) => !runs || i < runs[n][0] || i >= runs[n][1]).map((i) => `  ${rulesOf[n](i)}\n`).join('')} }\n`).join('')}}\n`;

/** `nft --debug=netlink list table ip big` with each rule's handle and position taken out. */
const dump = (ns: Netns) => ns.exec('nft', ['--debug=netlink', 'list', 'table', 'ip', 'big'])
  .split('\n').map((l) => l.replace(/^(ip big [cd]) \d+( \d+)?$/, '$1')).join('\n');

/** Deletes the runs' rules by handle, in one nft transaction. */
function damage(ns: Netns, runs: Runs): void {
  const lines: string[] = [];
  for (const n of ['c', 'd'] as const) {
    const hs = ruleHandles(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', n]));
    expect(hs).toHaveLength(N);
    for (let i = runs[n][0]; i < runs[n][1]; i++) lines.push(`delete rule ip big ${n} handle ${hs[i]}`);
  }
  ns.nft(`${lines.join('\n')}\n`);
}

const temps = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((f) => f.includes('.tmp-')) : []);
const text = (d: Child) => d.logs.join('');
const alive = (d: Child) => d.child.exitCode === null && d.child.signalCode === null;
const ARGS = ['--no-cache-dir', '--log-level', 'debug'];
const FULL = 'repairing from a full read instead of the followed part';

describe('kill -9 around the commit of a middle run', { timeout: 600_000 }, () => {
  it(`at ${POINTS.join(', ')}, of apply and of the daemon's follow and full passes: the batch whole or not at all, and the next run leaves the chains as desired`, async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('midrun-kill');
      const config = join(dir, 'big.yaml');
      writeFileSync(config, yaml);
      // The references: the desired table and each damaged one, as nft installs them.
      ns.nft(script());
      const want = dump(ns);
      ns.nft(`delete table ip big\n${script(SMALL)}`);
      const damaged = { small: dump(ns) };
      ns.nft(`delete table ip big\n${script(BIG)}`);
      const damagedBig = dump(ns);
      ns.nft('delete table ip big\n');
      const damagedOf = (runs: Runs) => (runs === SMALL ? damaged.small : damagedBig);

      /** A quiet daemon's start: ready, in sync, the desired table, stopped cleanly, no temp file (its record left for the next). */
      async function quietStart(what: string): Promise<void> {
        const d = daemon(config, ns, { args: ARGS });
        try {
          await waitSaid(d, /^nfkeeper running$/, 90_000);
          const check = await cli('check', '--config', config, '--netns', ns.path, '--no-cache-dir');
          expect(check.code, `${what}: ${check.out} ${check.err}`).toBe(0);
          expect(dump(ns), what).toBe(want);
        } finally {
          await stop(d);
        }
        expect(d.child.exitCode, `${what}: ${text(d).slice(-2000)}`).toBe(0);
        expect(temps(ns.record), what).toEqual([]);
      }

      await quietStart('install');
      const where: string[] = [];

      // With no kill: the daemon's repair, then its followed part: a rule deleted inside the run it
      // put back and the one right after it, each repaired from the events into its place.
      {
        const d = daemon(config, ns, { args: ARGS });
        try {
          await waitSaid(d, /^nfkeeper running$/, 90_000);
          for (const runs of [SMALL, BIG]) {
            const n = logged(d).filter((l) => l.msg === 'repaired').length;
            const full = logged(d).filter((l) => l.msg === FULL).length;
            damage(ns, runs);
            await waitSaid(d, /^repaired$/, 60_000, n + 1);
            expect(dump(ns), 'repaired').toBe(want);
            // The pass each size is for: 8 ops from the followed part, 200 after a full read.
            expect(logged(d).filter((l) => l.msg === FULL).length, text(d).slice(-3000)).toBe(full + (runs === BIG ? 1 : 0));
            for (const at of [runs.c[0] + 1, runs.c[1]]) {
              const m = logged(d).filter((l) => l.msg === 'repaired').length;
              const hs = ruleHandles(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', 'c']));
              ns.nft(`delete rule ip big c handle ${hs[at]}\n`);
              await waitSaid(d, /^repaired$/, 30_000, m + 1);
              expect(dump(ns), `c[${at}] deleted after the repair of ${runs.c[1] - runs.c[0]}-rule runs`).toBe(want);
            }
          }
        } finally {
          await stop(d);
        }
        expect(d.child.exitCode, text(d).slice(-2000)).toBe(0);
      }
      await quietStart('after the unkilled repairs');

      for (const point of POINTS) {
        const env = { NFKEEPER_TEST_KILL_AT: point };
        const landed = point !== 'commit-sending';

        // apply on the damaged table.
        damage(ns, SMALL);
        const a = spawnSync(process.execPath, [resolve('bin/nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path, '--no-cache-dir'],
          { encoding: 'utf8', env: { ...process.env, ...env } });
        expect(a.signal, `apply at ${point}: ${a.stdout} ${a.stderr}`).toBe('SIGKILL');
        expect(a.stderr).toContain(`nfkeeper: killed at ${point}`);
        expect(dump(ns), `apply killed at ${point}`).toBe(landed ? want : damaged.small);
        const again = await cli('apply', '--config', config, '--netns', ns.path, '--no-cache-dir');
        expect(again.code, `${again.out} ${again.err}`).toBe(0);
        expect(dump(ns), `apply after apply killed at ${point}`).toBe(want);
        where.push(`apply ${point}`);

        // The daemon's follow pass (4-rule runs) and full pass (100-rule runs).
        for (const [pass, runs] of [['follow', SMALL], ['full', BIG]] as const) {
          const what = `daemon's ${pass} pass killed at ${point}`;
          const d = daemon(config, ns, { args: ARGS, env });
          try {
            await waitSaid(d, /^nfkeeper running$/, 90_000);
            damage(ns, runs);
            for (const end = Date.now() + 30_000; alive(d) && Date.now() < end;) await sleep(20);
          } finally {
            if (alive(d)) await stop(d);
          }
          expect(d.child.signalCode, `${what}: not reached: ${text(d).slice(-3000)}`).toBe('SIGKILL');
          expect(text(d)).toContain(`nfkeeper: killed at ${point}`);
          expect(dump(ns), what).toBe(landed ? want : damagedOf(runs));
          await quietStart(`after the ${what}`);
          where.push(`${pass} ${point}`);
        }
      }
      console.log(`middle-run kills: ${where.join(', ')}`);
    }, 'midrun-kill');
  });
});
