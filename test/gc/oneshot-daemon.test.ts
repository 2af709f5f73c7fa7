/**
 * The one-shot `nfkeeper gc` (the command line, in this process) beside `nfkeeper run` (a real
 * child process) whose registered owners are gc's live ids, through the same owners state file.
 * The Nomad seed's dead allocation's id is registered with the daemon over its control socket, and
 * answered, at each step of gc a harness can stop it at: the k-th scan (before its reads), the k-th
 * commit (planned, about to be sent), the k-th refusal, the k-th resend (after the proof and gc's
 * check of it); quiet (one scan, one commit), and with another socket committing to a table of its
 * own before gc's first two commits (refused, scanned again, refused, proved, sent again). Two
 * kinds of owner: one with a chain and a jump (its registration is a commit of the daemon's, which
 * moves the generation gc's batch is guarded by) and one of no rules (acknowledged without any
 * commit: a registration that only marks its id live). Two daemons: one running before gc starts,
 * and one started at the step (then registering).
 *
 * Checked after each case: an owner answered before gc's commit never has its id's rules collected
 * (the nat table is the seed, or gc collected nothing); the ruleset is the seed or the seed less
 * the dead allocation, nothing else; every answered owner is in the state file and listed by the
 * daemon (with its chain in the kernel); gc either collected, found nothing, or was refused before
 * it touched the kernel naming the daemon's pid; a daemon started at a step (gc holds the owners
 * state's lock) says it waits for the lock, naming gc's pid, and starts once gc is done (its
 * registration is then answered after gc).
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config/config.js';
import { NftSocket, open } from '../../src/netlink/socket.js';
import { call, loadOwners } from '../../src/owners/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { daemon, logged, stop, waitSaid, type Child } from '../reliability/owners-child.js';
import { DEAD, DEAD_CHAIN, LIVE, restoreNomad } from './fixtures.js';

type Step = 'scan' | 'commit' | 'refused' | 'recommit';
type Kind = 'empty' | 'chain';
type Mode = 'running' | 'starting';
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['scan', 1], ['commit', 1]] },
  { busy: true, points: [['scan', 1], ['commit', 1], ['refused', 1], ['scan', 2], ['commit', 2], ['refused', 2], ['recommit', 1]] },
];

/** The nat table as iptables-nft-save prints it, counters and comments aside. */
const nat = (ns: Netns) => ns.exec('iptables-nft-save', ['-t', 'nat']).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

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

/**
 * Hooks gc's socket (NftSocket.prototype: the daemon is another process): before the step `at`,
 * `reached()` runs and is waited for; with `busy`, `other` commits to a table of its own before
 * gc's first two commits.
 */
function hook(other: NftSocket, busy: boolean, at: [Step, number] | undefined, reached: () => Promise<void>) {
  const n: Record<Step, number> = { scan: 0, commit: 0, refused: 0, recommit: 0 };
  const sent: { how: 'commit' | 'recommit'; refused?: boolean }[] = [];
  let hit = false;
  const step = async (s: Step) => {
    if (++n[s] === at?.[1] && s === at[0]) {
      hit = true;
      await reached();
    }
  };
  let neighbour = 0;
  const proto = NftSocket.prototype;
  const { getTable, commit, recommit } = proto;
  vi.spyOn(proto, 'getTable').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof getTable>) {
    await step('scan');
    return getTable.apply(this, args);
  });
  vi.spyOn(proto, 'commit').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof commit>) {
    await step('commit');
    if (busy && neighbour < 2) other.commitNow([{ verb: neighbour++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    const s: (typeof sent)[number] = { how: 'commit' };
    sent.push(s);
    try {
      return await commit.apply(this, args);
    } catch (e) {
      s.refused = true;
      await step('refused');
      throw e;
    }
  });
  vi.spyOn(proto, 'recommit').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof recommit>) {
    await step('recommit');
    const s: (typeof sent)[number] = { how: 'recommit' };
    sent.push(s);
    const r = await recommit.apply(this, args).catch(async (e: unknown) => {
      s.refused = true;
      await step('refused');
      throw e;
    });
    if (r === false) s.refused = true;
    return r;
  });
  return { n, sent, hit: () => hit };
}

describe('one-shot gc beside a daemon registering owners', () => {
  it('an owner the daemon answered before gc\'s commit never has its id\'s rules collected; gc refuses beside it', { timeout: 600_000 }, async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('gc-daemon');
      const sock = join(dir, 'nfkeeper.sock');
      const stateFile = join(dir, 'state', 'owners.json');
      const daemonConfig = join(dir, 'daemon.yaml');
      writeFileSync(daemonConfig, ownersYaml(dir));
      const liveFile = join(dir, 'live.json');
      writeFileSync(liveFile, JSON.stringify([LIVE]));
      const gcConfig = join(dir, 'gc.yaml');
      writeFileSync(gcConfig, `${ownersYaml(dir)}gc:\n  grace: 0s\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  live:\n    file: ${liveFile}\n`);
      const config = loadConfig(gcConfig);
      const other = open({ netns: ns.path });
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
            restoreNomad(ns);
            ns.nft('add table ip neighbour\ndelete table ip neighbour\n');
            const before = nat(ns);
            let d = running;
            let answered: 'during' | 'after' | undefined;
            let startRefused: string | undefined;
            let waited = false;
            const register = async (when: 'during' | 'after') => {
              if (!c.kind) return;
              if (mode === 'starting') {
                if (!d) {
                  d = daemon(daemonConfig, ns);
                  // gc holds the owners state's lock: the daemon waits for it, so it cannot answer
                  // before gc is done. Seen waiting (naming gc's pid), gc goes on.
                  if (when === 'during') {
                    await waitSaid(d, /locked by another nfkeeper; waiting for it/, 30_000);
                    waited = logged(d).some((l) => /waiting/.test(l.msg) && (l as { holder?: number; lock?: string }).holder === process.pid && /^the owners state /.test((l as { lock?: string }).lock ?? ''));
                    return;
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
            const t = hook(other, c.busy, c.at, () => register('during'));
            let r: Awaited<ReturnType<typeof cli>>;
            try {
              r = await cli('gc', '--config', gcConfig, '--netns', ns.path);
            } finally {
              vi.restoreAllMocks();
            }
            const after = nat(ns);
            // Not reached (gc refused first): registered now, after gc, to check nothing answered is lost.
            if (c.kind && !answered && !startRefused) await register('after');
            const kept = after === before;
            const refusedBeside = r.code === 2 && /owners state \S+ is kept by a running nfkeeper \(pid (\d+)\)/.exec(r.err);
            const outcome = refusedBeside ? 'refused' : r.code === 0 ? (kept ? 'kept' : 'collected') : `exit ${r.code}`;
            seen.push(`${what}: ${outcome}${answered ? `, answered ${answered}` : ''}${waited ? ', daemon waited for gc' : ''}${startRefused ? ', daemon start refused' : ''}`);
            if (!kept && after !== collected(before)) failures.push(`${what}: neither the seed nor the seed less the dead allocation:\n${after}`);
            if (r.code !== 0 && !refusedBeside) failures.push(`${what}: gc exit ${r.code}: ${r.err}`);
            if (refusedBeside) {
              if (Number(refusedBeside[1]) !== d?.child.pid) failures.push(`${what}: gc named pid ${refusedBeside[1]}, the daemon is ${d?.child.pid}`);
              if (!kept || t.n.scan > 0) failures.push(`${what}: refused after it read or changed the kernel (${t.n.scan} reads)`);
            } else if (c.at && !t.hit()) failures.push(`${what}: the step was not reached (${JSON.stringify(t.sent)})`);
            // The guarantee: answered before gc's commit (at a step: every step comes before a send that lands) = its id's rules stay.
            if (answered === 'during' && !kept) failures.push(`${what}: LOST: the owner was answered, then gc collected its id's rules (${JSON.stringify(t.sent)})`);
            if (!c.kind && mode === 'starting' && !kept) { /* the control: no daemon, nothing registered: collected */ }
            if (!c.kind && mode === 'starting' && kept) failures.push(`${what}: the control collected nothing`);
            if (startRefused !== undefined) failures.push(`${what}: the daemon's start failed: ${startRefused.slice(-1000)}`);
            if (mode === 'starting' && c.kind && t.hit() && !waited) failures.push(`${what}: the daemon started at the step did not say it waits for gc's lock (pid ${process.pid})`);
            if (answered) {
              if (!loadOwners(config).some((o) => o.id === DEAD)) failures.push(`${what}: answered, not in the state file`);
              const listed = await call(sock, 'GET', '/v1/owners');
              if (!(listed.body as { owners: { id: string }[] }).owners.some((o) => o.id === DEAD)) failures.push(`${what}: answered, not listed by the daemon`);
              if (c.kind === 'chain' && !ns.exec('nft', ['list', 'chains', 'ip']).includes(`o/${DEAD}/masq`)) failures.push(`${what}: answered, its chain not in the kernel`);
            }
            // Beside the daemon a dry run is not refused: it changes nothing (exit 1: garbage found).
            if (!c.kind && mode === 'running') {
              restoreNomad(ns);
              const dry = await cli('gc', '--config', gcConfig, '--netns', ns.path, '--dry-run');
              if (dry.code !== 1 || !dry.out.includes(DEAD) || nat(ns) !== before) failures.push(`${what}: --dry-run beside the daemon: exit ${dry.code}: ${dry.err}`);
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
        other.close();
      }
      console.log(`one-shot gc beside a daemon (${seen.length} cases): ${seen.join('; ')}`);
      expect(failures).toEqual([]);
    }, 'gc-daemon');
  });
});
