/**
 * The one-shot `nfkeeper gc --backend iptables-legacy` (the command line, in this process) beside
 * `nfkeeper run` (a real child process) registering owners in the same owners state: the sweep of
 * test/gc/daemon-sweep.ts (its cases and checks). The Nomad seed in x_tables, written by
 * iptables-legacy-restore itself; PATH shims in front of iptables-legacy-save and -restore hold the
 * k-th save before it reads (`save`), after it read and before gc has its output (`saved`: gc's
 * plan is next), and the k-th restore before it runs (`restore`: planned). Quiet (one save, one
 * restore), and busy: at the first restore another writer (iptables-legacy itself) appends a rule
 * to the dead allocation's chain, so that restore's -X fails and changes nothing, and gc saves and
 * restores again (5 steps). Here also: gc saves and restores exactly as often as its run needs, and
 * beside a running daemon it is refused before any save.
 *
 * x_tables has no generation: nothing a registration commits to nf_tables refuses gc's restore, so
 * the owners state's lock (src/owners/state-lock.ts), which gc holds for its whole run, is all that
 * keeps an owner from being answered between gc's read of the state and its restore.
 */
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { DEAD_CHAIN, NOMAD_RESTORE } from './fixtures.js';
import { sweepBesideDaemon } from './daemon-sweep.js';

type Step = 'save' | 'saved' | 'restore';
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['save', 1], ['saved', 1], ['restore', 1]] },
  { busy: true, points: [['save', 1], ['restore', 1], ['save', 2], ['saved', 2], ['restore', 2]] },
];

/** x_tables as iptables-legacy-save prints it, counters and comments aside. */
// (By their paths: the harness's own calls do not go through the shims, which count and hold gc's.)
const legacy = (ns: Netns) => ns.exec('/usr/sbin/iptables-legacy-save', []).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
/** The busy writer's rule: in the dead allocation's chain, so -X of it fails until it is gone too. */
const BUSY_RULE = ['-t', 'nat', '-A', DEAD_CHAIN, '-d', '10.99.0.0/16', '-j', 'ACCEPT'];

/**
 * Shims in front of the real programs. Each call counts itself (count-<step>); with hold-<step>-<k>
 * present, the k-th says at-<step>-<k> and waits for go-<step>-<k>. The save is held before it
 * runs (save) and after it ran with its output not yet given to gc (saved).
 */
function shims(dir: string): void {
  const held = (step: Step) => `n=$(( $(cat ${dir}/count-${step} 2>/dev/null || echo 0) + 1 )); echo $n > ${dir}/count-${step}
if [ -e ${dir}/hold-${step}-$n ]; then
  touch ${dir}/at-${step}-$n
  while [ ! -e ${dir}/go-${step}-$n ]; do sleep 0.01; done
fi`;
  writeFileSync(join(dir, 'iptables-legacy-save'), `#!/bin/sh
${held('save')}
out=$(/usr/sbin/iptables-legacy-save "$@") || exit $?
${held('saved')}
printf '%s\\n' "$out"
`);
  writeFileSync(join(dir, 'iptables-legacy-restore'), `#!/bin/sh
${held('restore')}
exec /usr/sbin/iptables-legacy-restore "$@"
`);
  for (const t of ['iptables-legacy-save', 'iptables-legacy-restore']) chmodSync(join(dir, t), 0o755);
}

describe('one-shot iptables-legacy gc beside a daemon registering owners', () => {
  it('an owner the daemon answered is durable: gc refuses beside it, a daemon started meanwhile waits for gc', { timeout: 300_000 }, async () => {
    await withNetns(async (ns) => {
      const bin = tempDir('gc-legacy-daemon-bin');
      shims(bin);
      const path = process.env.PATH;
      process.env.PATH = `${bin}:${path}`;
      try {
        const { seen, failures } = await sweepBesideDaemon<Step>(ns, {
          name: 'gc-legacy-daemon',
          gcLines: '  backend: iptables-legacy\n',
          runs: RUNS,
          seed: () => {
            ns.exec('/usr/sbin/iptables-legacy', ['-t', 'nat', '-F']);
            ns.exec('/usr/sbin/iptables-legacy', ['-t', 'nat', '-X']);
            ns.exec('/usr/sbin/iptables-legacy-restore', [], NOMAD_RESTORE);
          },
          read: () => legacy(ns),
          gc: async (c, gcConfig, register) => {
            for (const f of ['count-save', 'count-saved', 'count-restore']) rmSync(join(bin, f), { force: true });
            const failures: string[] = [];
            let seed: string | undefined;
            // The steps to hold: the case's, and with busy the first restore (where the writer adds its rule).
            const holds: [Step, number][] = [];
            if (c.at) holds.push(c.at);
            if (c.busy && !(c.at?.[0] === 'restore' && c.at[1] === 1)) holds.push(['restore', 1]);
            for (const [s, k] of holds) writeFileSync(join(bin, `hold-${s}-${k}`), '');
            let hit = false;
            const gc = cli('gc', '--config', gcConfig, '--netns', ns.path);
            let done = false;
            void gc.then(() => { done = true; });
            // Each held step in the order gc reaches them; a step gc never reaches (refused, or done) is not waited for.
            const order = [...holds].sort((a, b) => a[1] - b[1] || (['save', 'saved', 'restore'].indexOf(a[0]) - ['save', 'saved', 'restore'].indexOf(b[0])));
            for (const [s, k] of order) {
              for (const end = Date.now() + 60_000; !done && !existsSync(join(bin, `at-${s}-${k}`)) && Date.now() < end;) await sleep(5);
              if (done) break;
              if (!existsSync(join(bin, `at-${s}-${k}`))) {
                // Neither done nor at the step: said, and every hold let go so gc ends.
                failures.push(`gc neither ended nor reached ${s} ${k} within 60 s`);
                for (const [s2, k2] of holds) writeFileSync(join(bin, `go-${s2}-${k2}`), '');
                break;
              }
              if (c.busy && s === 'restore' && k === 1) {
                ns.exec('/usr/sbin/iptables-legacy', BUSY_RULE);
                // What gc was given to collect from: the seed, with the busy writer's rule.
                seed = legacy(ns);
              }
              if (c.at && s === c.at[0] && k === c.at[1]) {
                hit = true;
                await register();
              }
              writeFileSync(join(bin, `go-${s}-${k}`), '');
            }
            const r = await gc;
            for (const [s, k] of holds) for (const f of [`hold-${s}-${k}`, `at-${s}-${k}`, `go-${s}-${k}`]) rmSync(join(bin, f), { force: true });
            const count = (s: Step) => Number(existsSync(join(bin, `count-${s}`)) ? readFileSync(join(bin, `count-${s}`), 'utf8') : 0);
            if (r.code === 0) {
              const want = c.busy ? 2 : 1;
              if (count('save') !== want || count('restore') !== want) failures.push(`${count('save')} saves, ${count('restore')} restores, not ${want} and ${want}`);
            }
            return { r, hit, seed, said: `saves ${count('save')}, restores ${count('restore')}`, touched: count('save') > 0 || count('restore') > 0, failures };
          },
        });
        console.log(`one-shot iptables-legacy gc beside a daemon (${seen.length} cases): ${seen.join('; ')}`);
        expect(failures).toEqual([]);
      } finally {
        process.env.PATH = path;
      }
    }, 'gc-legacy-daemon');
  });
});
