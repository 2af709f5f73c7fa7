import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../src/netlink/socket.js';
import { cli } from './helpers/cli.js';
import { netnsPerTest } from './helpers/netns-hooks.js';
import { tempDir } from './helpers/tmp.js';
import { sleep } from './helpers/wait.js';
import { FLANNEL_RULES, FLANNEL_YAML, chainLines } from './keeper/helpers.js';

const dir = tempDir('cli');
const good = join(dir, 'flannel.yaml');
writeFileSync(good, FLANNEL_YAML);
const bad = join(dir, 'bad.yaml');
writeFileSync(bad, FLANNEL_YAML.replace('fully-random\n', 'fully-randum\n'));

describe('nfkeeper CLI', () => {
  const ns = netnsPerTest('cli');

  it('validate: 0 for a good config, 2 with file:line:column for a bad one', async () => {
    expect((await cli('validate', '--config', good)).code).toBe(0);
    const r = await cli('validate', '--config', bad);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/bad\.yaml:\d+:\d+: error: rule 2 of chain postrouting/);
  });

  it('check: 1 and nft text on drift, apply repairs, then check says 0', async () => {
    let r = await cli('check', '--config', good, '--netns', ns.path);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/\+ add table ip nfkeeper/);
    expect(r.out).toContain(`+ add rule ip nfkeeper postrouting ${FLANNEL_RULES[1]}`);
    r = await cli('apply', '--config', good, '--netns', ns.path);
    expect(r.code).toBe(0);
    expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
    r = await cli('check', '--config', good, '--netns', ns.path, '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ inSync: true });
  });

  it('a bad config changes nothing in the kernel', async () => {
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    const r = await cli('apply', '--config', bad, '--netns', ns.path);
    expect(r.code).toBe(2);
    expect(sock.generation()).toBe(gen);
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
    sock.close();
  });

  it('cleanup removes what the config owns and nothing else', async () => {
    ns.nft('add table ip nat\nadd chain ip nat POSTROUTING { type nat hook postrouting priority srcnat; }\nadd rule ip nat POSTROUTING masquerade');
    const nat = ns.exec('nft', ['list', 'table', 'ip', 'nat']);
    await cli('apply', '--config', good, '--netns', ns.path);
    const r = await cli('cleanup', '--config', good, '--netns', ns.path);
    expect(r.code).toBe(0);
    expect(r.out).toBe('removed table ip nfkeeper');
    expect(ns.exec('nft', ['list', 'tables']).trim()).toBe('table ip nat');
    expect(ns.exec('nft', ['list', 'table', 'ip', 'nat'])).toBe(nat);
  });

  it('run: ready on /readyz, metrics served, repairs, and SIGTERM exits 0 leaving the rules', async () => {
    const port = 20000 + (process.pid % 20000);
    const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', good, '--netns', ns.path, '--record-dir', ns.record,
      // An hour-long tick: only the event path can repair, so the cause asserted below cannot race a tick.
      '--metrics', `127.0.0.1:${port}`, '--interval', '1h'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const logs: string[] = [];
    child.stdout.on('data', (d: Buffer) => logs.push(...d.toString().split('\n').filter(Boolean)));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      let ready = false;
      for (let i = 0; i < 100 && !ready; i++) {
        await sleep(100);
        ready = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status === 200, () => false);
      }
      expect(ready).toBe(true);
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      ns.nft('flush chain ip nfkeeper postrouting');
      // Poll rather than sleep a fixed time: on a loaded 2-core machine the repair can take longer.
      for (let i = 0; i < 100 && chainLines(ns, 'ip', 'nfkeeper', 'postrouting').length < FLANNEL_RULES.length; i++) {
        await sleep(100);
      }
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
      const status = await cli('status', '--metrics', `127.0.0.1:${port}`, '--json');
      expect(status.code).toBe(0);
      expect(JSON.parse(status.out)).toMatchObject({ ready: true, tables: [{ name: 'nfkeeper', state: 'verified', protection: 'unprotected' }],
        lastRepair: { cause: 'event' } });
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).toMatch(/nfkeeper_repairs_total\{cause="event"\} 1/);
      expect(metrics).toMatch(/nfkeeper_ready 1/);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
      const repaired = logs.map((l) => JSON.parse(l) as { msg: string }).filter((l) => l.msg === 'repaired');
      expect(repaired).toHaveLength(1);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
