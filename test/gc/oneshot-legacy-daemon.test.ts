/**
 * The one-shot `nfkeeper gc --backend iptables-legacy` (the command line, in this process) beside
 * `nfkeeper run` (a real child process) registering owners in the same owners state. The Nomad
 * seed in x_tables, written by iptables-legacy-restore itself; the dead allocation's id registered
 * with the daemon over its control socket at each step of gc's save, plan and restore a harness can
 * stop it at: PATH shims in front of iptables-legacy-save and -restore hold the k-th save before it
 * reads (`save`), after it read and before gc has its output (`saved`: gc's plan is next), and the
 * k-th restore before it runs (`restore`: planned). Quiet (one save, one restore), and busy: at the
 * first restore another writer (iptables-legacy itself) appends a rule to the dead allocation's
 * chain, so that restore's -X fails and changes nothing, and gc saves and restores again (5 steps).
 * Two kinds of owner: one with a chain and a jump, one of no rules (answered without any commit).
 * Two daemons: one running before gc starts, one started at the step.
 *
 * x_tables has no generation: nothing a registration commits to nf_tables refuses gc's restore, so
 * the owners state's lock (src/owners/state-lock.ts), which gc holds for its whole run, is all that
 * keeps an owner from being answered between gc's read of the state and its restore.
 *
 * Checked after each case ("acknowledged = durable"): an owner the daemon answered before gc's
 * restore never has its id's rules collected; x_tables is the seed (with the busy writer's rule) or
 * the seed less the dead allocation, nothing else; every answered owner is in the state file,
 * listed by the daemon, its chain in the kernel; beside a running daemon gc is refused
 * (GcBesideDaemonError, exit 2, naming the daemon's pid) before it runs a save, and x_tables is as
 * it was; a daemon started at a step says it waits for the owners state's lock naming gc's pid, and
 * starts (and answers) once gc is done; `--dry-run` beside the daemon lists the dead id, changes
 * nothing.
 */
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/config.js';
import { call, loadOwners } from '../../src/owners/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { daemon, logged, stop, waitSaid, type Child } from '../reliability/owners-child.js';
import { DEAD, DEAD_CHAIN, LIVE, NOMAD_RESTORE } from './fixtures.js';

type Step = 'save' | 'saved' | 'restore';
type Kind = 'empty' | 'chain';
type Mode = 'running' | 'starting';
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['save', 1], ['saved', 1], ['restore', 1]] },
  { busy: true, points: [['save', 1], ['restore', 1], ['save', 2], ['saved', 2], ['restore', 2]] },
];

/** x_tables as iptables-legacy-save prints it, counters and comments aside. */
// (By their paths: the harness's own calls do not go through the shims, which count and hold gc's.)
const legacy = (ns: Netns) => ns.exec('/usr/sbin/iptables-legacy-save', []).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');
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

/** Waits until the daemon answers on its socket (true) or exits (false). */
async function up(sock: string, d: Child): Promise<boolean> {
  for (const end = Date.now() + 60_000; Date.now() < end;) {
    if (d.child.exitCode !== null || d.child.signalCode !== null) return false;
    const r = await call(sock, 'GET', '/v1/owners', undefined, 5_000).catch(() => undefined);
    if (r?.status === 200) return true;
    await sleep(30);
  }
  throw new Error(`the daemon neither answered nor exited within 60 s: ${d.logs.join('').slice(-2000)}`);
}

describe('one-shot iptables-legacy gc beside a daemon registering owners', () => {
  it('an owner the daemon answered is durable: gc refuses beside it, a daemon started meanwhile waits for gc', { timeout: 300_000 }, async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('gc-legacy-daemon');
      const bin = tempDir('gc-legacy-daemon-bin');
      shims(bin);
      const sock = join(dir, 'nfkeeper.sock');
      const stateFile = join(dir, 'state', 'owners.json');
      const daemonConfig = join(dir, 'daemon.yaml');
      writeFileSync(daemonConfig, ownersYaml(dir));
      const liveFile = join(dir, 'live.json');
      writeFileSync(liveFile, JSON.stringify([LIVE]));
      const gcConfig = join(dir, 'gc.yaml');
      writeFileSync(gcConfig, `${ownersYaml(dir)}gc:\n  grace: 0s\n  backend: iptables-legacy\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  live:\n    file: ${liveFile}\n`);
      const config = loadConfig(gcConfig);
      const path = process.env.PATH;
      process.env.PATH = `${bin}:${path}`;
      const seen: string[] = [];
      const failures: string[] = [];
      let running: Child | undefined;
      try {
        for (const mode of ['running', 'starting'] as Mode[]) {
          if (mode === 'running') {
            running = daemon(daemonConfig, ns);
            if (!(await up(sock, running))) throw new Error(`the daemon did not start: ${running.logs.join('')}`);
          }
          const cases: { busy: boolean; at?: [Step, number]; kind?: Kind }[] = [{ busy: false }];
          for (const run of RUNS) for (const at of run.points) for (const kind of ['empty', 'chain'] as Kind[]) cases.push({ busy: run.busy, at, kind });
          for (const c of cases) {
            const what = `${mode}, ${c.busy ? 'busy' : 'quiet'}, ${c.at ? `at ${c.at.join(' ')}, ${c.kind}` : 'no registration'}`;
            for (const f of ['count-save', 'count-saved', 'count-restore']) rmSync(join(bin, f), { force: true });
            ns.exec('/usr/sbin/iptables-legacy', ['-t', 'nat', '-F']);
            ns.exec('/usr/sbin/iptables-legacy', ['-t', 'nat', '-X']);
            ns.exec('/usr/sbin/iptables-legacy-restore', [], NOMAD_RESTORE);
            const before = legacy(ns);
            let d = running;
            let answered: 'during' | 'after' | undefined;
            let startRefused: string | undefined;
            let waited = false;
            let busySeed: string | undefined;
            const register = async (when: 'during' | 'after') => {
              if (!c.kind) return;
              if (mode === 'starting') {
                if (!d) {
                  d = daemon(daemonConfig, ns);
                  // gc holds the owners state's lock: the daemon waits for it, naming gc's pid. One
                  // that answers instead (no lock held) is registered with at once, at the step.
                  if (when === 'during') {
                    const answers = (async () => (await up(sock, d!)) ? 'up' as const : 'exited' as const)();
                    const said = waitSaid(d, /locked by another nfkeeper; waiting for it/, 30_000).then(() => 'waits' as const);
                    if (await Promise.race([said, answers]) === 'waits') {
                      answers.catch(() => undefined);
                      waited = logged(d).some((l) => /waiting/.test(l.msg) && (l as { holder?: number; lock?: string }).holder === process.pid && /^the owners state /.test((l as { lock?: string }).lock ?? ''));
                      return;
                    }
                    said.catch(() => undefined);
                  }
                }
                if (!(await up(sock, d))) {
                  startRefused = `exit ${await d.exited}: ${d.logs.join('')}`;
                  return;
                }
              }
              const r = await call(sock, 'PUT', `/v1/owners/${DEAD}`, c.kind === 'empty' ? {} : ownerSpec(1));
              if (r.status === 200 || r.status === 201) answered = when;
              else failures.push(`${what}: the registration was answered ${r.status} ${JSON.stringify(r.body)}`);
            };
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
                failures.push(`${what}: gc neither ended nor reached ${s} ${k} within 60 s`);
                for (const [s2, k2] of holds) writeFileSync(join(bin, `go-${s2}-${k2}`), '');
                break;
              }
              if (c.busy && s === 'restore' && k === 1) {
                ns.exec('/usr/sbin/iptables-legacy', BUSY_RULE);
                busySeed = legacy(ns);
              }
              if (c.at && s === c.at[0] && k === c.at[1]) {
                hit = true;
                await register('during');
              }
              writeFileSync(join(bin, `go-${s}-${k}`), '');
            }
            const r = await gc;
            for (const [s, k] of holds) for (const f of [`hold-${s}-${k}`, `at-${s}-${k}`, `go-${s}-${k}`]) rmSync(join(bin, f), { force: true });
            const after = legacy(ns);
            // Not reached (gc refused first): registered now, after gc, to check nothing answered is lost.
            if (c.kind && !answered && !startRefused) await register('after');
            // What gc was given to collect from: the seed, with the busy writer's rule once it was added.
            const seed = busySeed ?? before;
            const kept = after === seed;
            const count = (s: Step) => Number(existsSync(join(bin, `count-${s}`)) ? readFileSync(join(bin, `count-${s}`), 'utf8') : 0);
            const refusedBeside = r.code === 2 && /owners state \S+ is kept by a running nfkeeper \(pid (\d+)\)/.exec(r.err);
            const outcome = refusedBeside ? 'refused' : r.code === 0 ? (kept ? 'kept' : 'collected') : `exit ${r.code}`;
            seen.push(`${what}: ${outcome} (saves ${count('save')}, restores ${count('restore')})${answered ? `, answered ${answered}` : ''}${waited ? ', daemon waited for gc' : ''}`);
            if (!kept && after !== collected(before)) failures.push(`${what}: neither the seed nor the seed less the dead allocation:\n${after}`);
            if (r.code !== 0 && !refusedBeside) failures.push(`${what}: gc exit ${r.code}: ${r.err}`);
            if (refusedBeside) {
              if (Number(refusedBeside[1]) !== d?.child.pid) failures.push(`${what}: gc named pid ${refusedBeside[1]}, the daemon is ${d?.child.pid}`);
              if (after !== before || count('save') > 0 || count('restore') > 0) failures.push(`${what}: refused after it ran iptables-legacy (${count('save')} saves, ${count('restore')} restores)`);
            } else if (c.at && !hit) failures.push(`${what}: the step was not reached (saves ${count('save')}, restores ${count('restore')})`);
            if (!refusedBeside && r.code === 0) {
              const want = { save: c.busy ? 2 : 1, restore: c.busy ? 2 : 1 };
              if (count('save') !== want.save || count('restore') !== want.restore) failures.push(`${what}: ${count('save')} saves, ${count('restore')} restores, not ${want.save} and ${want.restore}`);
            }
            // The guarantee: answered before gc's restore = its id's rules stay.
            if (answered === 'during' && !kept) failures.push(`${what}: LOST: the owner was answered, then gc collected its id's rules`);
            if (!c.kind && mode === 'starting' && after !== collected(before)) failures.push(`${what}: the control did not collect`);
            if (startRefused !== undefined) failures.push(`${what}: the daemon's start failed: ${startRefused.slice(-1000)}`);
            if (mode === 'starting' && c.kind && hit && !waited) failures.push(`${what}: the daemon started at the step did not say it waits for gc's lock (pid ${process.pid})`);
            if (c.kind && !answered) failures.push(`${what}: never answered`);
            if (answered) {
              if (!loadOwners(config).some((o) => o.id === DEAD)) failures.push(`${what}: answered, not in the state file`);
              const listed = await call(sock, 'GET', '/v1/owners');
              if (!(listed.body as { owners: { id: string }[] }).owners.some((o) => o.id === DEAD)) failures.push(`${what}: answered, not listed by the daemon`);
              if (c.kind === 'chain' && !ns.exec('nft', ['list', 'chains', 'ip']).includes(`o/${DEAD}/masq`)) failures.push(`${what}: answered, its chain not in the kernel`);
            }
            // Beside the daemon a dry run is not refused: it lists the dead id and changes nothing (exit 1: garbage found).
            if (!c.kind && mode === 'running') {
              const dry = await cli('gc', '--config', gcConfig, '--netns', ns.path, '--dry-run');
              if (dry.code !== 1 || !dry.out.includes(DEAD) || legacy(ns) !== before) failures.push(`${what}: --dry-run beside the daemon: exit ${dry.code}: ${dry.err}`);
            }
            // The next case starts with nothing registered.
            if (mode === 'running') {
              const del = await call(sock, 'DELETE', `/v1/owners/${DEAD}`);
              if (del.status !== 200 && del.status !== 404) failures.push(`${what}: DELETE ${del.status}`);
            } else if (d) {
              await stop(d);
              rmSync(stateFile, { force: true });
              rmSync(`${stateFile}.journal`, { force: true });
            }
          }
          if (running) {
            await stop(running);
            running = undefined;
            rmSync(stateFile, { force: true });
          }
        }
      } finally {
        process.env.PATH = path;
        if (running) await stop(running);
      }
      console.log(`one-shot iptables-legacy gc beside a daemon (${seen.length} cases): ${seen.join('; ')}`);
      expect(failures).toEqual([]);
    }, 'gc-legacy-daemon');
  });
});
