/**
 * deploy/systemd/nfkeeper.service, as shipped, under a real systemd: a Debian
 * 12 tree (scripts/debian-tree.sh: debootstrap + systemd + nftables + nodejs, cached
 * under /var/cache/nfkeeper-test) booted with systemd-nspawn in a network
 * namespace of its own, the npm package installed into it (with this
 * machine's node binary: Debian 12's nodejs is 18), then systemctl start,
 * reload, kill -s KILL, nftables.service and stop.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { open as fsOpen } from 'node:fs/promises';
import { parseConfig } from '../src/config/config.js';
import { Keeper } from '../src/keeper/keeper.js';
import type { AttributionEvent } from '../src/keeper/attribution.js';
import { FLANNEL_RULES, FLANNEL_YAML, captureLog, sleep } from './keeper/helpers.js';

const tools = ['debootstrap', 'systemd-nspawn', 'nsenter'].filter((t) => spawnSync('sh', ['-c', `command -v ${t}`]).status !== 0);
const skip = tools.length > 0
  ? ` (SKIPPED: ${tools.join(', ')} not installed; bash scripts/setup.sh --test installs debootstrap and systemd-container)` : '';

/** The flannel table under another name: a keeper on the host keeps it beside the daemon's. */
const ATTR_YAML = FLANNEL_YAML.replace('name: nfkeeper', 'name: nfkattr');

const EXTRA_RULE = 'ip saddr 10.244.0.0/16 ip daddr 192.168.0.0/16 return';

async function until<T>(what: string, f: () => T | undefined | false, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

describe.skipIf(tools.length > 0)(`the systemd unit under a booted Debian 12${skip}`, () => {
  let tree: string;
  let nspawn: ChildProcess | undefined;
  let pid1 = 0;

  /** Runs a command in the container (all of PID 1's namespaces). */
  const inside = (args: string[], input?: string) => spawnSync('nsenter', ['-t', String(pid1), '-a', ...args], { encoding: 'utf8', input, timeout: 60_000 });
  const systemctl = (...args: string[]) => inside(['systemctl', ...args]);
  const show = (prop: string) => systemctl('show', 'nfkeeper', '-p', prop, '--value').stdout.trim();
  /** The rules of nfkeeper's chain in the container's own network namespace. */
  const rules = () => {
    const r = spawnSync('nsenter', ['-t', String(pid1), '-n', 'nft', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting'], { encoding: 'utf8' });
    return r.status === 0 ? r.stdout.split('\n').map((l) => l.trim()).filter((l) => /(return|masquerade)/.test(l)) : [];
  };
  const config = (text: string) => writeFileSync(join(tree, 'etc', 'nfkeeper', 'config.yaml'), text);

  beforeAll(async () => {
    const built = spawnSync('bash', ['scripts/debian-tree.sh', 'systemd'], { encoding: 'utf8', timeout: 900_000 });
    expect(built.status, built.stderr).toBe(0);
    const packed = spawnSync(process.execPath, ['scripts/pack.mjs'], { encoding: 'utf8', timeout: 600_000 });
    expect(packed.status, packed.stderr).toBe(0);

    mkdirSync('/var/tmp', { recursive: true });
    tree = mkdtempSync('/var/tmp/nfk-boot-');
    expect(spawnSync('tar', ['-C', tree, '-xf', built.stdout.trim()]).status).toBe(0);
    copyFileSync(realpathSync(process.execPath), join(tree, 'usr', 'local', 'bin', 'node'));
    // Installed from outside: the container has a network namespace of its own, with no route out.
    const npm = spawnSync('npm', ['install', '-g', '--omit=dev', '--prefer-offline', '--no-audit', '--no-fund',
      '--prefix', join(tree, 'usr', 'local'), packed.stdout.trim()], { encoding: 'utf8', timeout: 300_000 });
    expect(npm.status, npm.stderr).toBe(0);
    copyFileSync('deploy/systemd/nfkeeper.service', join(tree, 'etc', 'systemd', 'system', 'nfkeeper.service'));
    mkdirSync(join(tree, 'etc', 'nfkeeper'));
    config(FLANNEL_YAML);

    const log = openSync(join(tree, '..', `${tree.split('/').pop()}.log`), 'w');
    nspawn = spawn('systemd-nspawn', ['--register=no', '--keep-unit', '--quiet', '-D', tree, '--private-network', '-b'],
      { stdio: ['ignore', log, log] });
    // PID 1 of the container is the nspawn process's child running systemd.
    pid1 = await until('the container\'s systemd', () => {
      const children = readdirSync(`/proc/${nspawn!.pid}/task`).flatMap((t) => {
        try {
          return readFileSync(`/proc/${nspawn!.pid}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
        } catch {
          return [];
        }
      });
      return children.find((p) => {
        try {
          return readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'systemd';
        } catch {
          return false;
        }
      });
    });
    await until('multi-user.target', () => ['running', 'degraded'].includes(systemctl('is-system-running').stdout.trim()), 60_000);
  }, 1_200_000);

  afterAll(async () => {
    if (nspawn?.pid && nspawn.exitCode === null) {
      // SIGTERM to nspawn is a clean poweroff of the container.
      const exited = new Promise((r) => nspawn!.once('exit', r));
      nspawn.kill('SIGTERM');
      await Promise.race([exited, sleep(30_000)]);
      if (nspawn.exitCode === null) nspawn.kill('SIGKILL');
    }
    if (tree && existsSync(tree)) {
      rmSync(tree, { recursive: true, force: true });
      rmSync(`${tree}.log`, { force: true });
    }
  }, 60_000);

  it('systemctl start: ExecStartPre validates, READY=1 comes with the rules verified in the kernel, WATCHDOG=1 keeps arriving', async () => {
    const start = systemctl('start', 'nfkeeper');
    expect(start.status, start.stderr).toBe(0);
    expect([show('ActiveState'), show('SubState'), show('StatusText')]).toEqual(['active', 'running', 'verified 1 tables']);
    expect(rules()).toEqual(FLANNEL_RULES);
    expect(inside(['journalctl', '-u', 'nfkeeper', '--no-pager', '-o', 'cat']).stdout).toMatch(/\/etc\/nfkeeper\/config\.yaml: ok \(1 tables\)/);
    // systemd records each WATCHDOG=1 it accepts.
    const seen = new Set<string>([show('WatchdogTimestampMonotonic')]);
    await until('two more watchdog notifications', () => seen.add(show('WatchdogTimestampMonotonic')).size >= 3, 20_000);
  });

  it('systemctl reload fails for a bad config and the daemon keeps the old one; a good one is loaded', async () => {
    const pid = show('MainPID');
    config('tables:\n  - family: ip\n    name: nfkeeper\n    chains: [ {name: postrouting\n');
    const bad = systemctl('reload', 'nfkeeper');
    expect(bad.status).not.toBe(0);
    expect(inside(['journalctl', '-u', 'nfkeeper', '--no-pager', '-o', 'cat']).stdout).toMatch(/Reload failed|Control process exited/);
    expect([show('ActiveState'), show('MainPID')]).toEqual(['active', pid]);
    expect(rules()).toEqual(FLANNEL_RULES);
    // A config that validates but the kernel refuses (a set given more elements than its size) fails too.
    config(`${FLANNEL_YAML}      - name: out\n        type: filter\n        hook: output\n        priority: 0\n        rules: ["ip daddr @few drop"]\n` +
      '    sets:\n      - { name: few, type: ipv4_addr, size: 2, elements: [10.0.0.1, 10.0.0.2, 10.0.0.3] }\n');
    const refused = systemctl('reload', 'nfkeeper');
    expect(refused.status).not.toBe(0);
    expect(inside(['journalctl', '-u', 'nfkeeper', '--no-pager', '-o', 'cat']).stdout).toMatch(/the kernel refused the new config/);
    expect([show('ActiveState'), show('MainPID')]).toEqual(['active', pid]);
    expect(rules()).toEqual(FLANNEL_RULES);
    config(FLANNEL_YAML.replace(`          - ${FLANNEL_RULES[0]}`, `          - ${EXTRA_RULE}\n          - ${FLANNEL_RULES[0]}`));
    const good = systemctl('reload', 'nfkeeper');
    expect(good.status, good.stderr).toBe(0);
    await until('the reloaded rules', () => rules().length === FLANNEL_RULES.length + 1);
    expect(rules()).toEqual([EXTRA_RULE, ...FLANNEL_RULES]);
    expect(show('MainPID')).toBe(pid);
  });

  it('systemctl kill -s KILL: the rules stay, and Restart= brings the daemon back', async () => {
    const pid = show('MainPID');
    const kill = systemctl('kill', '-s', 'KILL', 'nfkeeper');
    expect(kill.status, kill.stderr).toBe(0);
    expect(rules()).toEqual([EXTRA_RULE, ...FLANNEL_RULES]);
    await until('the restart', () => show('NRestarts') === '1' && show('ActiveState') === 'active' && show('MainPID') !== pid);
    expect(show('MainPID')).not.toBe('0');
    expect(rules()).toEqual([EXTRA_RULE, ...FLANNEL_RULES]);
  });

  it('nftables.service\'s flush ruleset (a later nft -f) is repaired by the running daemon', async () => {
    expect(readFileSync(join(tree, 'etc', 'nftables.conf'), 'utf8')).toMatch(/^flush ruleset$/m);
    const r = systemctl('restart', 'nftables');
    expect(r.status, r.stderr).toBe(0);
    await until('the repair after nftables.service', () => rules().length === FLANNEL_RULES.length + 1);
    expect(rules()).toEqual([EXTRA_RULE, ...FLANNEL_RULES]);
    // nftables.service's own table is there beside nfkeeper's.
    const all = spawnSync('nsenter', ['-t', String(pid1), '-n', 'nft', 'list', 'tables'], { encoding: 'utf8' }).stdout;
    expect(all).toMatch(/table inet filter/);
    expect(systemctl('show', 'nfkeeper', '-p', 'After', '--value').stdout).toMatch(/\bnftables\.service\b/);
  });

  it('a change from a transient unit (systemd-run) is attributed to that unit; the daemon inside, in a pid namespace of its own, says it cannot look', async () => {
    // A keeper of this (host) process on the container's network namespace, on a table of its own:
    // the host is the initial pid namespace, where the kernel's pid is.
    const logger = captureLog();
    const keeper = new Keeper({ config: parseConfig(ATTR_YAML, 'attr.yaml'), netns: `/proc/${pid1}/ns/net`, intervalMs: 3_600_000, logger: logger.logger });
    keeper.on('error', () => undefined);
    const fifo = join(tree, 'var', 'tmp', 'nfk-attr.fifo');
    try {
      await keeper.start();
      expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
      // nft -i stays alive, reading commands from the fifo: a long-lived committer in unit nfk-attr.service.
      const run = inside(['systemd-run', '--unit=nfk-attr', '--service-type=exec', 'sh', '-c', 'exec nft -i < /var/tmp/nfk-attr.fifo']);
      expect(run.status, run.stderr).toBe(0);
      const writer = await fsOpen(fifo, 'w');
      const heard: AttributionEvent[] = [];
      keeper.attribution.follow((e) => heard.push(e));
      try {
        const repaired = new Promise((r) => keeper.once('repaired', r));
        await writer.write('delete rule ip nfkattr postrouting handle 2\n');
        await repaired;
        const [change] = keeper.status().foreignChanges!;
        expect(change!.by).toMatchObject({ comm: 'nft', unit: 'nfk-attr.service', exe: '/usr/sbin/nft', cmdline: 'nft -i' });
        expect(change!.what).toEqual(['delete rule ip nfkattr postrouting handle 2']);
        const line = logger.lines.filter((l) => l.msg === 'repaired').at(-1)!;
        expect(line.by).toMatchObject({ comm: 'nft', unit: 'nfk-attr.service' });
        expect((await keeper.metrics.foreignChanges.get()).values.find((v) => v.labels.comm === 'nft')?.value).toBe(1);
        expect(heard.find((e) => e.type === 'change')).toMatchObject({ by: { comm: 'nft', unit: 'nfk-attr.service' }, generation: change!.generation });
      } finally {
        await writer.close();
      }
    } finally {
      await keeper.stop();
      inside(['systemctl', 'stop', 'nfk-attr']);
      rmSync(fifo, { force: true });
    }
    // The daemon in the container sees the kernel's pid from a pid namespace of its own: it says so.
    const handle = spawnSync('nsenter', ['-t', String(pid1), '-n', 'nft', '-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting'], { encoding: 'utf8' })
      .stdout.match(/masquerade.*# handle (\d+)/)![1]!;
    const del = inside(['systemd-run', '--wait', '--unit=nfk-attr-2', 'nft', 'delete', 'rule', 'ip', 'nfkeeper', 'postrouting', 'handle', handle]);
    expect(del.status, del.stderr).toBe(0);
    const said = await until('the daemon\'s repair line', () => inside(['journalctl', '-u', 'nfkeeper', '-o', 'cat']).stdout.split('\n')
      .filter((l) => l.includes('"did":["delete rule ip nfkeeper postrouting handle ' + handle + '"]')).at(-1));
    expect(JSON.parse(said).by).toMatchObject({ comm: 'nft', unresolved: expect.stringMatching(/not in the initial pid namespace/) });
  });

  it('Debian 12\'s own nodejs (18, what apt install nodejs gives) gets one line saying Node 22 or newer is needed', () => {
    // A clean environment: this machine's NODE_EXTRA_CA_CERTS names a file the container lacks.
    const r = inside(['env', '-i', 'PATH=/usr/bin:/bin', '/usr/bin/node', '/usr/local/lib/node_modules/nfkeeper/bin/nfkeeper.js', 'version']);
    expect(inside(['/usr/bin/node', '--version']).stdout).toMatch(/^v18\./);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^nfkeeper: needs Node\.js 22 or newer \(the supported lines are 22 and 24\), this is v18\.\d+\.\d+ \(\/usr\/bin\/node\); Debian 12's nodejs package is 18: install Node from NodeSource or a nodejs\.org tarball \(see README, Install\)\n$/);
  });

  it('systemctl stop leaves the rules in the kernel', () => {
    const stop = systemctl('stop', 'nfkeeper');
    expect(stop.status, stop.stderr).toBe(0);
    expect(show('ActiveState')).toBe('inactive');
    expect(rules()).toEqual([EXTRA_RULE, ...FLANNEL_RULES]);
  });
});
