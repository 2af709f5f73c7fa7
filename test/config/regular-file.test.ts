/**
 * Config and env files are regular files only: a FIFO, a device, a directory or a socket is
 * refused in one line at once, through the real CLI (validate), and never blocks the daemon's loop
 * (its config replaced by a FIFO: the reload is refused, the daemon keeps answering). Reads are
 * bounded (/dev/zero would grow until the allocator gave up).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { call } from '../../src/owners/index.js';
import { readRegularFile } from '../../src/base/regular-file.js';
import { withNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownersYaml } from '../owners/fixtures.js';

/** `nfkeeper validate` as a child: a blocked open would hang it (the timeout kills it and fails the test). */
function validate(config: string): { code: number | null; err: string } {
  try {
    execFileSync(process.execPath, ['bin/nfkeeper.js', 'validate', '--config', config], { encoding: 'utf8', timeout: 20_000, stdio: ['ignore', 'pipe', 'pipe'] });
    return { code: 0, err: '' };
  } catch (e) {
    const x = e as { status: number | null; stderr: string; signal?: string };
    if (x.signal) throw new Error(`validate --config ${config} did not finish (${x.signal})`);
    return { code: x.status, err: x.stderr };
  }
}

describe('only regular files as config and env files', () => {
  it('validate refuses a FIFO, /dev/zero, a directory and a socket as the config, and as an env file, in one line', async () => {
    const dir = tempDir('regular');
    const fifo = join(dir, 'fifo.yaml');
    execFileSync('mkfifo', [fifo]);
    const sub = join(dir, 'dir.yaml');
    mkdirSync(sub);
    const sockPath = join(dir, 'sock.yaml');
    const server = createServer().listen(sockPath);
    await new Promise((r) => server.once('listening', r));
    try {
      for (const [path, why] of [
        [fifo, /it is a FIFO, not a regular file/],
        ['/dev/zero', /it is a character device, not a regular file/],
        [sub, /it is a directory, not a config file/],
        [sockPath, /cannot read: .*(ENXIO|no such device)/i],
      ] as const) {
        const r = validate(path);
        expect(r.code, path).toBe(2);
        const lines = r.err.trim().split('\n');
        expect(lines, r.err).toHaveLength(1);
        expect(lines[0]).toMatch(why);
      }
      // As an env file the config lists.
      for (const [env, why] of [[fifo, /env\.files: .*fifo\.yaml: cannot read: it is a FIFO/], ['/dev/zero', /env\.files: \/dev\/zero: cannot read: it is a character device/]] as const) {
        const f = join(dir, 'with-env.yaml');
        writeFileSync(f, `env:\n  files: [${env}]\ntables:\n  - family: ip\n    name: t\n    chains: []\n`);
        const r = validate(f);
        expect(r.code).toBe(2);
        expect(r.err.trim().split('\n')).toHaveLength(1);
        expect(r.err).toMatch(why);
      }
    } finally {
      server.close();
    }
  }, 120_000);

  it('reads are bounded: a file over the bound is refused, not read whole', () => {
    const dir = tempDir('regular-bound');
    const f = join(dir, 'big');
    writeFileSync(f, Buffer.alloc(4097));
    expect(() => readRegularFile(f, 4096)).toThrow(/4097 bytes, larger than the 4096/);
    expect(readRegularFile(f, 4097).length).toBe(4097);
  });

  it('a running daemon whose config is replaced by a FIFO keeps running and answering; the reload is refused', async () => {
    await withNetns(async (ns) => {
      const dir = tempDir('regular-daemon');
      const config = join(dir, 'config.yaml');
      writeFileSync(config, ownersYaml(dir));
      const sock = join(dir, 'nfkeeper.sock');
      const d = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics', '--interval', '200ms'],
        { stdio: ['ignore', 'pipe', 'pipe'] });
      let logs = '';
      d.stdout!.on('data', (b: Buffer) => { logs += b.toString(); });
      d.stderr!.on('data', (b: Buffer) => { logs += b.toString(); });
      try {
        for (let i = 0; i < 200 && (await call(sock, 'GET', '/v1/status', undefined, 2_000).catch(() => undefined))?.status !== 200; i++) await sleep(50);
        const fifo = join(dir, 'next.fifo');
        execFileSync('mkfifo', [fifo]);
        renameSync(fifo, config);  // the watcher sees the change
        await sleep(600);
        d.kill('SIGHUP');  // and a reload by signal
        for (let i = 0; i < 100 && !/config reload rejected/.test(logs); i++) await sleep(50);
        expect(logs).toMatch(/config reload rejected; keeping the old one/);
        expect(logs).toMatch(/FIFO, not a regular file/);
        // The loop is alive: the control socket answers, the tables are verified.
        const st = await call(sock, 'GET', '/v1/status', undefined, 5_000);
        expect(st.status).toBe(200);
        expect((st.body as { ready: boolean }).ready).toBe(true);
        ns.exec('nft', ['flush', 'chain', 'ip', 'nfkeeper', 'postrouting']);
        for (let i = 0; i < 100 && !ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting']).includes('10.244.0.0/16'); i++) await sleep(50);
        expect(ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting'])).toContain('10.244.0.0/16');
      } finally {
        d.kill('SIGKILL');
      }
    }, 'regular');
  }, 120_000);
});
