import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../src/netlink/socket.js';
import { withNetns } from './helpers/netns.js';
import { tempDir } from './helpers/tmp.js';
import { sleep } from './helpers/wait.js';
import { FLANNEL_YAML } from './keeper/helpers.js';
import { startupPeakMiB } from './helpers/benchmarks.js';

const UNIT = 'deploy/systemd/nfkeeper.service';

// A datagram listener: Node has no AF_UNIX datagram sockets, python does.
const LISTENER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("listening", flush=True)
while True:
    print(repr(s.recv(4096).decode()), flush=True)
`;

describe('systemd', () => {
  it('the unit passes systemd-analyze verify', () => {
    const dir = tempDir('unit');
    const unit = readFileSync(UNIT, 'utf8').replaceAll('/usr/local/bin/nfkeeper', resolve('bin/nfkeeper.js'));
    writeFileSync(join(dir, 'nfkeeper.service'), unit);
    const r = spawnSync('systemd-analyze', ['verify', join(dir, 'nfkeeper.service')], { encoding: 'utf8' });
    expect(r.stderr.split('\n').filter((l) => l.includes('nfkeeper.service'))).toEqual([]);
    expect(r.status).toBe(0);
    expect(unit).toMatch(/^Type=notify$/m);
    expect(unit).toMatch(/^CapabilityBoundingSet=CAP_NET_ADMIN$/m);
    expect(unit).toMatch(/^Restart=always$/m);
    expect(unit).toMatch(/^ExecStartPre=\S+ validate --config /m);
    expect(unit).toMatch(/^After=.*\bnftables\.service\b/m);
    // The rules are in place before networks come up, as nftables.service orders itself.
    expect(unit).toMatch(/^Before=network-pre\.target$/m);
    expect(unit).toMatch(/^Wants=network-pre\.target$/m);
    expect(unit).not.toMatch(/^After=.*network-pre/m);
    expect(Number(/^OOMScoreAdjust=(-?\d+)$/m.exec(unit)?.[1])).toBeLessThan(0);
    expect(Number(/^OOMScoreAdjust=(-?\d+)$/m.exec(unit)?.[1])).toBeGreaterThan(-1000);
    for (const d of ['SystemCallFilter', 'UMask', 'ProtectProc', 'Documentation']) expect(unit).toMatch(new RegExp(`^${d}=`, 'm'));
  });

  it('memory limits are sized from the measured start-up peaks, the same in the unit and the DaemonSet', () => {
    const unit = readFileSync(UNIT, 'utf8');
    const peakMiB = startupPeakMiB();
    const mib = (v: string) => Number(/^(\d+)M$/.exec(v)![1]);
    const high = mib(/^MemoryHigh=(\S+)$/m.exec(unit)![1]!);
    const max = mib(/^MemoryMax=(\S+)$/m.exec(unit)![1]!);
    // Pressure only above twice the peak (a reload holds two configs), the hard limit above that.
    expect(high).toBeGreaterThanOrEqual(2 * peakMiB);
    expect(max).toBeGreaterThan(high);
    const ds = readFileSync('deploy/kubernetes/daemonset.yaml', 'utf8');
    expect(/limits: \{ memory: (\d+)Mi \}/.exec(ds)?.[1]).toBe(String(max));
  });

  it('sends READY=1 only once the ruleset is verified, then WATCHDOG=1 from the loop, STOPPING=1 at the end', async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('notify');
      const sockPath = join(dir, 'notify.sock');
      const config = join(dir, 'c.yaml');
      writeFileSync(config, FLANNEL_YAML);
      const listener = spawn('python3', ['-u', '-c', LISTENER, sockPath], { stdio: ['ignore', 'pipe', 'inherit'] });
      const messages: string[] = [];
      let tableAtReady: boolean | undefined;
      const nft = open({ netns: ns.path });
      await new Promise<void>((r) => listener.stdout.once('data', () => r()));
      listener.stdout.on('data', (d: Buffer) => {
        for (const line of d.toString().split('\n').filter(Boolean)) {
          messages.push(line);
          if (line.includes('READY=1')) {
            tableAtReady = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']).status === 0;
          }
        }
      });
      const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record,
        '--no-metrics', '--interval', '50ms'], {
        env: { ...process.env, NOTIFY_SOCKET: sockPath, WATCHDOG_USEC: '400000' }, stdio: 'ignore',
      });
      const exited = new Promise((r) => child.on('exit', r));
      try {
        // Bounds are generous and waits are polls: starting node and relaying through the python
        // listener can take seconds on a loaded 2-core machine.
        for (let i = 0; i < 400 && messages.filter((m) => m.includes('WATCHDOG=1')).length < 2; i++) await sleep(50);
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
        for (let i = 0; i < 100 && !messages.some((m) => m.includes('STOPPING=1')); i++) await sleep(50);
        // Before READY=1: only the start-up's time-out extensions and status.
        const ready = messages.findIndex((m) => m.includes('READY=1'));
        expect(ready).toBeGreaterThan(0);
        for (const m of messages.slice(0, ready)) expect(m).toMatch(/^'(EXTEND_TIMEOUT_USEC=60000000|STATUS=installing 1 tables)'$/);
        expect(messages.slice(0, ready)).toContain("'EXTEND_TIMEOUT_USEC=60000000'");
        expect(messages.slice(ready).filter((m) => m.includes('EXTEND_TIMEOUT_USEC'))).toEqual([]);
        expect(tableAtReady).toBe(true);
        expect(messages.filter((m) => m.includes('WATCHDOG=1')).length).toBeGreaterThanOrEqual(2);
        expect(messages.at(-1)).toMatch(/STOPPING=1/);
      } finally {
        child.kill('SIGKILL');
        listener.kill('SIGKILL');
        nft.close();
      }
    });
  });

  it('while it waits for an env file: STATUS says which, EXTEND_TIMEOUT_USEC keeps coming, READY=1 once installed', async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('notify-env');
      const sockPath = join(dir, 'notify.sock');
      const envFile = join(dir, 'subnet.env');
      const config = join(dir, 'c.yaml');
      writeFileSync(config, FLANNEL_YAML.replace('tables:', `env:\n  files: [${envFile}]\ntables:`).replaceAll('10.244.0.0/16', '${FLANNEL_NETWORK}'));
      const listener = spawn('python3', ['-u', '-c', LISTENER, sockPath], { stdio: ['ignore', 'pipe', 'inherit'] });
      const messages: string[] = [];
      await new Promise<void>((r) => listener.stdout.once('data', () => r()));
      listener.stdout.on('data', (d: Buffer) => messages.push(...d.toString().split('\n').filter(Boolean)));
      const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics'], {
        env: { ...process.env, NOTIFY_SOCKET: sockPath }, stdio: 'ignore',
      });
      const exited = new Promise((r) => child.on('exit', r));
      try {
        for (let i = 0; i < 600 && messages.filter((m) => m.includes('EXTEND_TIMEOUT_USEC')).length < 4; i++) await sleep(50);
        expect(messages).toContain(`'STATUS=waiting for the env file ${envFile}'`);
        expect(messages.filter((m) => m.includes('EXTEND_TIMEOUT_USEC')).length).toBeGreaterThanOrEqual(4);
        expect(messages.some((m) => m.includes('READY=1'))).toBe(false);
        writeFileSync(envFile, 'FLANNEL_NETWORK=10.244.0.0/16\n');
        for (let i = 0; i < 600 && !messages.some((m) => m.includes('READY=1')); i++) await sleep(50);
        expect(messages.some((m) => m.includes('READY=1'))).toBe(true);
        expect(ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting'])).toMatch(/10\.244\.0\.0\/16/);
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
      } finally {
        child.kill('SIGKILL');
        listener.kill('SIGKILL');
      }
    });
  });
});
