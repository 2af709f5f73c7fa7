/**
 * The sweep both one-shot gc files run beside `nfkeeper run` (a real child process) registering
 * owners in the same owners state (test/gc/oneshot-daemon.test.ts for nf_tables,
 * oneshot-legacy-daemon.test.ts for iptables-legacy): the Nomad seed's dead allocation's id is
 * registered with the daemon over its control socket, and answered, at each step of gc the file's
 * harness can stop it at; two kinds of owner (one with a chain and a jump, one of no rules:
 * answered without any commit); two daemons (one running before gc starts, one started at the
 * step). The file says how gc is run and stopped at a step (`gc`); the cases, the registration and
 * the checks after each case are here, one copy for both.
 *
 * Checked after each case: an owner answered before gc's write never has its id's rules collected;
 * the foreign table is the seed or the seed less the dead allocation, nothing else; every answered
 * owner is in the state file and listed by the daemon (with its chain in the kernel); gc either
 * collected, found nothing, or was refused beside the daemon, naming its pid, before it read
 * anything; a daemon started at a step (gc holds the owners state's lock) says it waits for the
 * lock, naming gc's pid, and starts once gc is done; `--dry-run` beside the daemon lists the dead
 * id and changes nothing.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/config.js';
import { call, loadOwners } from '../../src/owners/index.js';
import { cli, type CliResult } from '../helpers/cli.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { daemon, logged, stop, waitSaid, type Child } from '../reliability/owners-child.js';
import { DEAD, DEAD_CHAIN, LIVE } from './fixtures.js';

export type Kind = 'empty' | 'chain';
export type Mode = 'running' | 'starting';
export interface SweepCase<S extends string> { busy: boolean; at?: [S, number]; kind?: Kind }

/** What the file's run of gc for one case gives back. */
export interface GcRun {
  r: CliResult;
  /** gc reached the case's step (and the registration ran there). */
  hit: boolean;
  /** What gc was given to collect from, where a writer changed the seed meanwhile (else the case's `before`). */
  seed?: string;
  /** What gc read or ran, for the case's line and for the checks below. */
  said: string;
  /** gc read or ran something (it must not have, when refused beside the daemon). */
  touched: boolean;
  /** Failures of the file's own (its counts). */
  failures: string[];
}

/** The seed less the dead allocation. */
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

/** Waits until the daemon answers on its socket (true) or exits (false). */
async function up(sock: string, d: Child): Promise<boolean> {
  for (const end = Date.now() + 60_000; Date.now() < end;) {
    if (d.child.exitCode !== null || d.child.signalCode !== null) return false;
    const r = await call(sock, 'GET', '/v1/owners', undefined, 5_000).catch(() => undefined);
    if (r?.status === 200) return true;
    await sleep(30);
  }
  throw new Error(`the daemon neither answered nor exited within 60 s: ${d.logs.join('')}`);
}

/**
 * Runs the sweep in `ns`: for each mode, a case with no registration (the control) and one a
 * step and kind of owner. `gcLines`: the gc section's lines the file adds (its backend); `seed`
 * puts the Nomad seed back; `read` gives the foreign table as its tool prints it (counters aside);
 * `gc` runs gc for the case, calling `register` at the case's step.
 */
export async function sweepBesideDaemon<S extends string>(ns: Netns, o: {
  name: string;
  gcLines?: string;
  runs: readonly { busy: boolean; points: readonly [S, number][] }[];
  seed: () => void;
  read: () => string;
  gc: (c: SweepCase<S>, gcConfig: string, register: () => Promise<void>) => Promise<GcRun>;
}): Promise<{ seen: string[]; failures: string[] }> {
  const dir = tempDir(o.name);
  const sock = join(dir, 'nfkeeper.sock');
  const stateFile = join(dir, 'state', 'owners.json');
  const daemonConfig = join(dir, 'daemon.yaml');
  writeFileSync(daemonConfig, ownersYaml(dir));
  const liveFile = join(dir, 'live.json');
  writeFileSync(liveFile, JSON.stringify([LIVE]));
  const gcConfig = join(dir, 'gc.yaml');
  writeFileSync(gcConfig, `${ownersYaml(dir)}gc:\n  grace: 0s\n${o.gcLines ?? ''}  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  live:\n    file: ${liveFile}\n`);
  const config = loadConfig(gcConfig);
  const seen: string[] = [];
  const failures: string[] = [];
  let running: Child | undefined;
  try {
    for (const mode of ['running', 'starting'] as Mode[]) {
      if (mode === 'running') {
        running = daemon(daemonConfig, ns);
        if (!(await up(sock, running))) throw new Error(`the daemon did not start: ${running.logs.join('')}`);
      }
      const cases: SweepCase<S>[] = [{ busy: false }];
      for (const run of o.runs) for (const at of run.points) for (const kind of ['empty', 'chain'] as Kind[]) cases.push({ busy: run.busy, at, kind });
      for (const c of cases) {
        const what = `${mode}, ${c.busy ? 'busy' : 'quiet'}, ${c.at ? `at ${c.at.join(' ')}, ${c.kind}` : 'no registration'}`;
        o.seed();
        const before = o.read();
        let d = running;
        let answered: 'during' | 'after' | undefined;
        let startRefused: string | undefined;
        let waited = false;
        const register = async (when: 'during' | 'after') => {
          if (!c.kind) return;
          if (mode === 'starting') {
            if (!d) {
              d = daemon(daemonConfig, ns);
              // gc holds the owners state's lock: the daemon waits for it, naming gc's pid, so it
              // cannot answer before gc is done; seen waiting, gc goes on. One that answers instead
              // (no lock held) is registered with at once, at the step.
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
        const g = await o.gc(c, gcConfig, () => register('during'));
        const { r } = g;
        const after = o.read();
        // Not reached (gc refused first): registered now, after gc, to check nothing answered is lost.
        if (c.kind && !answered && !startRefused) await register('after');
        const kept = after === (g.seed ?? before);
        const refusedBeside = r.code === 2 && /owners state \S+ is kept by a running nfkeeper \(pid (\d+)\)/.exec(r.err);
        const outcome = refusedBeside ? 'refused' : r.code === 0 ? (kept ? 'kept' : 'collected') : `exit ${r.code}`;
        seen.push(`${what}: ${outcome} (${g.said})${answered ? `, answered ${answered}` : ''}${waited ? ', daemon waited for gc' : ''}`);
        failures.push(...g.failures.map((f) => `${what}: ${f}`));
        if (!kept && after !== collected(before)) failures.push(`${what}: neither the seed nor the seed less the dead allocation:\n${after}`);
        if (r.code !== 0 && !refusedBeside) failures.push(`${what}: gc exit ${r.code}: ${r.err}`);
        if (refusedBeside) {
          if (Number(refusedBeside[1]) !== d?.child.pid) failures.push(`${what}: gc named pid ${refusedBeside[1]}, the daemon is ${d?.child.pid}`);
          if (after !== before || g.touched) failures.push(`${what}: refused after it read or changed the kernel (${g.said})`);
        } else if (c.at && !g.hit) failures.push(`${what}: the step was not reached (${g.said})`);
        // The guarantee: answered before gc's write (every step comes before a write that lands) = its id's rules stay.
        if (answered === 'during' && !kept) failures.push(`${what}: LOST: the owner was answered, then gc collected its id's rules (${g.said})`);
        // The control: no daemon, nothing registered: collected.
        if (!c.kind && mode === 'starting' && after !== collected(before)) failures.push(`${what}: the control did not collect`);
        if (startRefused !== undefined) failures.push(`${what}: the daemon's start failed: ${startRefused.slice(-1000)}`);
        if (mode === 'starting' && c.kind && g.hit && !waited) failures.push(`${what}: the daemon started at the step did not say it waits for gc's lock (pid ${process.pid})`);
        if (c.kind && !answered) failures.push(`${what}: never answered`);
        if (answered) {
          if (!loadOwners(config).some((x) => x.id === DEAD)) failures.push(`${what}: answered, not in the state file`);
          const listed = await call(sock, 'GET', '/v1/owners');
          if (!(listed.body as { owners: { id: string }[] }).owners.some((x) => x.id === DEAD)) failures.push(`${what}: answered, not listed by the daemon`);
          if (c.kind === 'chain' && !ns.exec('nft', ['list', 'chains', 'ip']).includes(`o/${DEAD}/masq`)) failures.push(`${what}: answered, its chain not in the kernel`);
        }
        // Beside the daemon a dry run is not refused: it lists the dead id and changes nothing (exit 1: garbage found).
        if (!c.kind && mode === 'running') {
          o.seed();
          const dry = await cli('gc', '--config', gcConfig, '--netns', ns.path, '--dry-run');
          if (dry.code !== 1 || !dry.out.includes(DEAD) || o.read() !== before) failures.push(`${what}: --dry-run beside the daemon: exit ${dry.code}: ${dry.err}`);
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
    if (running) await stop(running);
  }
  return { seen, failures };
}
