/**
 * A new node: the env file the config lists (flannel's subnet.env) is not written yet when the
 * daemon starts. `run` waits for it, bounded by --env-wait: one log line, not ready (nothing
 * listens yet), nothing written to the kernel; once the file appears it starts with its values.
 * Past the bound it exits 2 with one clear line, the kernel untouched. A file that exists but is
 * bad, or --env-wait 0s, fails at once, as before.
 */
import { createServer, type AddressInfo } from 'node:net';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns, type Netns } from '../helpers/netns.js';
import { postroutingYaml } from '../keeper/helpers.js';
import { tempDir } from '../owners/fixtures.js';
import { nfk, nfkDone, waitFor } from './spawn.js';

const dir = tempDir('env-wait');

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function get(port: number, path: string): Promise<number> {
  try {
    return (await fetch(`http://127.0.0.1:${port}${path}`)).status;
  } catch {
    return 0;  // nothing listens
  }
}

describe('run waits for a missing env file', { timeout: 180_000 }, () => {
  let ns: Netns;
  let envFile: string;
  let config: string;
  beforeEach(() => {
    ns = createNetns('envwait');
    envFile = join(dir, `subnet-${ns.name}.env`);
    rmSync(envFile, { force: true });
    config = join(dir, `${ns.name}.yaml`);
    writeFileSync(config, `env:\n  files: [${envFile}]\n${postroutingYaml('nfkeeper', ['ip saddr ${FLANNEL_NETWORK} ip daddr != 224.0.0.0/4 masquerade fully-random'], 'postrouting')}`);
  });
  afterEach(() => ns.remove());

  it('not ready and nothing written while it waits; starts with the file\'s values once it appears', async () => {
    const port = await freePort();
    const d = nfk(['run', '--config', config, '--netns', ns.path, '--metrics', `127.0.0.1:${port}`, '--env-wait', '2m']);
    try {
      await waitFor('the waiting line', () => d.logs().some((l) => String(l.msg).startsWith('waiting for the env file')), 90_000);
      // Several looks later: still one line, still not ready, the kernel untouched.
      await new Promise((r) => setTimeout(r, 2000));
      const waiting = d.logs().filter((l) => String(l.msg).startsWith('waiting for the env file'));
      expect(waiting).toHaveLength(1);
      expect(waiting[0]).toMatchObject({ file: envFile, waitMs: 120_000 });
      expect(waiting[0]!.listedAt).toMatch(/\.yaml:2:\d+$/);
      expect(await get(port, '/readyz')).not.toBe(200);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
      expect(d.child.exitCode).toBeNull();
      // A SIGHUP while it starts (systemd's ExecReload) is a reload once running, not the end of it.
      d.child.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 300));
      expect(d.child.exitCode).toBeNull();
      expect(d.child.signalCode).toBeNull();

      writeFileSync(envFile, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n');
      await waitFor('ready', async () => (await get(port, '/readyz')) === 200, 60_000);
      expect(ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting'])).toMatch(/ip saddr 10\.244\.0\.0\/16 ip daddr != 224\.0\.0\.0\/4 masquerade fully-random/);
      expect(d.err).toEqual([]);
      await waitFor('the reload the early SIGHUP asked for', () => d.logs().some((l) => l.msg === 'config reloaded' && l.why === 'SIGHUP during start-up'), 30_000);
    } finally {
      d.child.kill('SIGTERM');
      await d.exited;
    }
  });

  it('past --env-wait: exit 2 with one clear line, the kernel untouched', async () => {
    const r = await nfkDone(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--env-wait', '1500ms']);
    expect(r.code).toBe(2);
    expect(r.err).toHaveLength(1);
    expect(r.err[0]).toBe(`nfkeeper: ${config}:2:11: env.files: ${envFile} did not appear within 1500ms (--env-wait); nothing was written to the kernel`);
    expect(r.out.filter((l) => l.includes('waiting for the env file'))).toHaveLength(1);
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
  });

  it('--env-wait 0s, or a file that exists but is bad: exit 2 at once, without waiting', async () => {
    const now = await nfkDone(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--env-wait', '0s']);
    expect(now.code).toBe(2);
    expect(now.err[0]).toMatch(/env\.files: .*cannot read: ENOENT/);
    expect(now.out.filter((l) => l.includes('waiting for the env file'))).toEqual([]);
    writeFileSync(envFile, 'not an assignment\n');
    const bad = await nfkDone(['run', '--config', config, '--netns', ns.path, '--no-metrics']);
    expect(bad.code).toBe(2);
    expect(bad.err[0]).toMatch(/subnet-.*\.env:1:1: expected NAME=VALUE/);
    expect(bad.out.filter((l) => l.includes('waiting for the env file'))).toEqual([]);
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
  });

  it('--env-wait is checked with the other flags', async () => {
    const r = await nfkDone(['run', '--config', config, '--netns', ns.path, '--env-wait', '2h']);
    expect(r.code).toBe(2);
    expect(r.err).toEqual(['nfkeeper: --env-wait: 2h is out of range; use between 0ms and 1h']);
  });
});
