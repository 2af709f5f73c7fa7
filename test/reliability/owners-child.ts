/**
 * `nfkeeper run` (bin/nfkeeper.js, a real child process) for the owners' reliability tests, and
 * the oracle: the owners the kernel holds, read through a socket of the test's own.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { open } from '../../src/netlink/socket.js';
import { call, ownerOfRule, parseOwnerChain } from '../../src/owners/index.js';
import type { Netns } from '../helpers/netns.js';
import { sleep } from '../helpers/wait.js';

/** Rules of the owners ownerSpec() makes here by default: a chain of 2 rules and 1 jump. */
const RULES = 3;

export interface Child { child: ChildProcess; exited: Promise<number | null>; logs: string[] }

export function daemon(config: string, ns: Netns, o: { args?: string[]; prefix?: string[]; env?: NodeJS.ProcessEnv } = {}): Child {
  // `prefix`: a command the daemon runs under (nsenter into a mount namespace).
  const argv = [process.execPath, resolve('bin/nfkeeper.js'), 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics', '--interval', '1s', ...(o.args ?? [])];
  const [cmd, ...args] = [...(o.prefix ?? []), ...argv];
  const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(o.env ? { env: { ...process.env, ...o.env } } : {}) });
  const logs: string[] = [];
  child.stdout!.on('data', (d: Buffer) => logs.push(d.toString()));
  child.stderr!.on('data', (d: Buffer) => logs.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, logs };
}

/** A line the daemon logged (its JSON log): the message and the fields the tests read. */
export interface Logged { msg: string; why?: string; verified?: boolean; generation?: number }

/** Every JSON line the daemon wrote so far, in order. */
export const logged = (d: Child): Logged[] => d.logs.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Logged);

/** The daemon logged a message that `re` matches, `n` times or more. */
export const said = (d: Child, re: RegExp, n = 1): boolean => logged(d).filter((l) => re.test(l.msg)).length >= n;

/**
 * Waits for the `n`-th message that `re` matches, for `ms` at most; throws with the log's end if the
 * daemon exits first or it does not come. Returns when the test read it (performance.now()).
 */
export async function waitSaid(d: Child, re: RegExp, ms = 60_000, n = 1): Promise<number> {
  for (const end = Date.now() + ms; !said(d, re, n);) {
    if (d.child.exitCode !== null || d.child.signalCode !== null) throw new Error(`the daemon exited (${d.child.exitCode ?? d.child.signalCode}) before it said ${re}: ${d.logs.join('').slice(-3000)}`);
    if (Date.now() > end) throw new Error(`the daemon did not say ${re} within ${ms} ms: ${d.logs.join('').slice(-3000)}`);
    await sleep(20);
  }
  return performance.now();
}

export async function kill9(d: Child): Promise<void> {
  d.child.kill('SIGKILL');
  await d.exited;
}

export async function stop(d: Child): Promise<void> {
  if (d.child.exitCode !== null || d.child.signalCode !== null) return;
  d.child.kill('SIGTERM');
  // A daemon that does not stop is a finding, said with its logs, not a test left waiting.
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => { timer = setTimeout(() => resolve('late'), 20_000); });
  const r = await Promise.race([d.exited, late]);
  clearTimeout(timer);
  if (r === 'late') {
    d.child.kill('SIGKILL');
    await d.exited;
    throw new Error(`the daemon did not stop within 20 s of SIGTERM: ${d.logs.join('').slice(-4000)}`);
  }
}

export async function ready(sock: string, d: Child, ms = 120_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end;) {
    if (d.child.exitCode !== null) throw new Error(`the daemon exited ${d.child.exitCode}: ${d.logs.join('')}`);
    const r = await call(sock, 'GET', '/v1/owners', undefined, 5_000).catch(() => undefined);
    if (r?.status === 200) return;
    await sleep(50);
  }
  throw new Error(`the daemon did not answer on ${sock} within ${ms} ms: ${d.logs.join('')}`);
}

/**
 * The owners the kernel holds, each checked whole: its chain o/<id>/masq with
 * all its rules and its one jump. Throws on any owner that is partly there.
 */
export async function kernelOwners(ns: Netns, perOwner = RULES): Promise<Set<string>> {
  const s = open({ netns: ns.path });
  try {
    // Two dumps are one view only if no commit came between them (the daemon
    // may be live while this polls): read again until the generation held.
    let chains: string[], rules: Awaited<ReturnType<typeof s.listRules>>;
    for (;;) {
      const gen = s.generation();
      chains = (await s.listChains({ family: 'ip', table: 'nfkeeper' })).map((c) => c.name);
      rules = await s.listRules({ family: 'ip', table: 'nfkeeper' });
      if (s.generation() === gen) break;
    }
    const parts = new Map<string, { chain: boolean; chainRules: number; jumps: number }>();
    const of = (o: string) => parts.get(o) ?? parts.set(o, { chain: false, chainRules: 0, jumps: 0 }).get(o)!;
    for (const c of chains) {
      const p = parseOwnerChain(c);
      if (p) of(p.id).chain = true;
    }
    for (const r of rules) {
      const inChain = parseOwnerChain(r.chain);
      if (inChain) of(inChain.id).chainRules++;
      else {
        const o = ownerOfRule(r);
        if (o !== undefined) of(o).jumps++;
      }
    }
    const half = [...parts].filter(([, p]) => !(p.chain && p.chainRules === perOwner - 1 && p.jumps === 1));
    if (half.length) throw new Error(`half-installed owners: ${half.slice(0, 5).map(([o, p]) => `${o} ${JSON.stringify(p)}`).join('; ')}`);
    return new Set(parts.keys());
  } finally {
    s.close();
  }
}


/**
 * A private mount namespace (held by a sleeping process) with a tmpfs of `kib` KiB on `dir`
 * (`options`: more of mount's -o, say mode=0700).
 */
export function tmpfsIn(dir: string, kib: number, options = ''): { prefix: string[]; run(...cmd: string[]): string; close(): void } {
  const holder: ChildProcess = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', `mount -t tmpfs -o size=${kib}k${options ? `,${options}` : ''} tmpfs '${dir}' && echo up && exec sleep 600`],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const pid = holder.pid!;
  // Wait for the mount (the holder prints "up" after it).
  execFileSync('sh', ['-c', `for i in $(seq 100); do nsenter -t ${pid} -m grep -q ' ${dir} tmpfs' /proc/mounts && exit 0; sleep 0.05; done; exit 1`]);
  const prefix = ['nsenter', '-t', String(pid), '-m', '--'];
  return {
    prefix,
    run: (...cmd) => execFileSync(prefix[0]!, [...prefix.slice(1), ...cmd], { encoding: 'utf8' }),
    close: () => { holder.kill('SIGKILL'); },
  };
}
