/**
 * Failing well, through the real CLI in child processes: start-up
 * is all or nothing (each failure exits 2 with one line and the namespace's
 * generation unchanged), flags are validated, permission problems name the
 * privilege, validate's output is editor-parseable, a daemon whose namespace
 * goes away exits, inputs are bounded and logs keep their level.
 */
import { createServer as createNetServer, connect, type Server, type Socket } from 'node:net';
import { spawnSync } from 'node:child_process';
import { chmodSync, writeFileSync, mkdirSync, truncateSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { FLANNEL_YAML } from '../keeper/helpers.js';
import { ownersYaml, tempDir } from '../owners/fixtures.js';
import { nfk, nfkDone, rawCall, waitFor } from './spawn.js';

const dir = tempDir('cli-fail');
// Readable by uid 65534 (the permission tests read the config before they reach the kernel).
chmodSync(dir, 0o755);
const good = join(dir, 'flannel.yaml');
writeFileSync(good, FLANNEL_YAML, { mode: 0o644 });
const bad = join(dir, 'bad.yaml');
writeFileSync(bad, FLANNEL_YAML.replace('fully-random\n', 'fully-randum\n'));

/** One line on stderr, "nfkeeper: …", matching `re`, and no stack trace. */
function oneClearLine(err: string[], re: RegExp): void {
  expect(err, err.join('\n')).toHaveLength(1);
  expect(err[0]).toMatch(/^nfkeeper: /);
  expect(err[0]).toMatch(re);
  expect(err[0]).not.toMatch(/\n\s+at /);
}

function listen(server: Server, ...args: unknown[]): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    (server.listen as (...a: unknown[]) => void)(...args, () => resolve());
  });
}

describe('start-up is all or nothing', { timeout: 240_000 }, () => {
  let ns: Netns;
  beforeEach(() => {
    ns = createNetns('clifail');
  });
  afterEach(() => ns.remove());

  /** Runs `run` with `args`; it must exit 2 with one clear line and leave the namespace's ruleset and generation alone. */
  async function refused(args: string[], re: RegExp): Promise<number> {
    const sock = open({ netns: ns.path });
    try {
      const gen = sock.generation();
      const r = await nfkDone(['run', '--netns', ns.path, ...args]);
      expect(r.code).toBe(2);
      oneClearLine(r.err, re);
      expect(r.out.filter((l) => /installed desired ruleset|nfkeeper running/.test(l))).toEqual([]);
      expect(sock.generation()).toBe(gen);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
      return r.ms;
    } finally {
      sock.close();
    }
  }

  it('--metrics that is not HOST:PORT', async () => {
    await refused(['-c', good, '--metrics', 'bad'], /--metrics: wants HOST:PORT, got 'bad'/);
  });

  it('a metrics port in use', async () => {
    const busy = createNetServer();
    await listen(busy, 0, '127.0.0.1');
    const port = (busy.address() as { port: number }).port;
    try {
      await refused(['-c', good, '--metrics', `127.0.0.1:${port}`], new RegExp(`--metrics 127\\.0\\.0\\.1:${port}: cannot listen: the address is in use`));
    } finally {
      busy.close();
    }
  });

  it('a busy control socket (another daemon answers on it)', async () => {
    const d = tempDir('cli-busy');
    const config = join(d, 'config.yaml');
    writeFileSync(config, ownersYaml(d));
    const busy = createNetServer();
    await listen(busy, join(d, 'nfkeeper.sock'));
    try {
      await refused(['-c', config, '--no-metrics'], /control socket .*nfkeeper\.sock: another process .* is listening on it/);
    } finally {
      busy.close();
    }
  });

  it('a control socket that cannot be bound', async () => {
    await refused(['-c', good, '--no-metrics', '--socket', '/dev/null/nfkeeper.sock'], /control socket \/dev\/null\/nfkeeper\.sock: cannot listen: /);
  });

  it('a bad config', async () => {
    await refused(['-c', bad, '--no-metrics'], /bad\.yaml:\d+:\d+: rule 2 of chain postrouting/);
  });

  it('a corrupt owners state file', async () => {
    const d = tempDir('cli-state');
    const config = join(d, 'config.yaml');
    writeFileSync(config, ownersYaml(d));
    mkdirSync(join(d, 'state'));
    writeFileSync(join(d, 'state', 'owners.json'), '{"version": 1, "owners": {');
    await refused(['-c', config, '--no-metrics'], /owners state .*owners\.json: corrupt: not JSON/);
  });

  it('a missing namespace', async () => {
    const r = await nfkDone(['run', '-c', good, '--no-metrics', '--netns', `${ns.path}-missing`]);
    expect(r.code).toBe(2);
    oneClearLine(r.err, /--netns .*-missing: no such namespace/);
  });

  // One process each: a spawn through tsx takes seconds on a loaded machine.
  const flagCases: [string, string[], RegExp][] = [
    ['--interval 5x', ['--interval', '5x'], /--interval: '5x' is not a duration \(like 500ms, 30s, 1m30s, 1h\)/],
    ['--interval 0', ['--interval', '0'], /--interval: 0 is out of range; use between 10ms and 1h/],
    ['--interval 2h', ['--interval', '2h'], /--interval: 2h is out of range; use between 10ms and 1h/],
    ['--log-level bogus', ['--log-level', 'bogus'], /--log-level: 'bogus' is not a level; use one of fatal, error, warn, info, debug, trace, silent/],
    ['--socket-mode 999', ['--socket-mode', '999'], /--socket-mode: '999' is not an octal mode/],
  ];
  for (const [name, args, re] of flagCases) {
    it(`a flag value is checked before anything is opened: ${name}`, async () => {
      const ms = await refused(['-c', good, '--no-metrics', ...args], re);
      console.log(`${name}: exited after ${ms.toFixed(0)} ms (including tsx's start)`);
    });
  }
});

describe('permission problems name the privilege', { timeout: 240_000 }, () => {
  let ns: Netns;
  beforeEach(() => {
    ns = createNetns('cliperm');
  });
  afterEach(() => ns.remove());

  it('as uid 65534: entering the namespace needs root or CAP_SYS_ADMIN + CAP_NET_ADMIN; nothing changes', async () => {
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    for (const cmd of [['check', '-c', good, '--netns', ns.path], ['run', '-c', good, '--no-metrics', '--netns', ns.path]]) {
      const r = await nfkDone(cmd, { asNobody: true });
      expect(r.code).toBe(2);
      oneClearLine(r.err, /network namespace .*: permission denied; uid 65534 may not enter that network namespace: run nfkeeper as root, or with CAP_SYS_ADMIN and CAP_NET_ADMIN/);
    }
    expect(sock.generation()).toBe(gen);
    sock.close();
  });

  it('as uid 65534 inside the namespace: nftables needs root or CAP_NET_ADMIN', async () => {
    // setpriv runs inside the test namespace (ip netns exec), so no --netns: the uid alone is refused.
    const r = spawnSync('ip', ['netns', 'exec', ns.name, 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
      process.execPath, '--import', 'tsx', 'test/cli/entry.ts', 'apply', '-c', good], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(2);
    oneClearLine(r.stderr.split('\n').filter(Boolean), /permission denied; uid 65534 may not use nftables: run nfkeeper as root, or with CAP_NET_ADMIN/);
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
  });
});

describe('validate', { timeout: 240_000 }, () => {
  const many = join(dir, 'many.yaml');
  writeFileSync(many, `tables:
  - family: ip
    name: t
    chains:
      - name: post
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - "masquerade fully-randum"
          - "ip saddr 10.0.0.0/8 dnat to 1.2.3.4"
      - name: x
        policy: drop
        rules:
          - "jump nowhere"
`);

  it('prints every error as file:line:column: error: message, without a prefix', async () => {
    const r = await nfkDone(['validate', '-c', many]);
    expect(r.code).toBe(2);
    expect(r.err).toEqual([
      expect.stringMatching(new RegExp(`^${many}:10:25: error: rule 1 of chain post: unknown or unsupported keyword at column 12, 'fully-randum'`)),
      `${many}:11:13: error: rule 2 of chain post: dnat and redirect are only valid in prerouting and output chains`,
      `${many}:13:17: error: chain x: only base chains have a policy`,
      `${many}:15:13: error: rule 1 of chain x: jump to chain 'nowhere', which this table does not define`,
    ]);
  });

  it('--json lists them too, and says ok for a good file', async () => {
    let r = await nfkDone(['validate', '-c', many, '--json']);
    expect(r.code).toBe(2);
    const j = JSON.parse(r.out.join('\n'));
    expect(j.ok).toBe(false);
    expect(j.errors.map((e: { line: number; column: number; severity: string }) => [e.line, e.column, e.severity]))
      .toEqual([[10, 25, 'error'], [11, 13, 'error'], [13, 17, 'error'], [15, 13, 'error']]);
    r = await nfkDone(['validate', '-c', good, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out.join('\n'))).toMatchObject({ ok: true, errors: [], tables: [{ table: 'ip nfkeeper' }] });
  });

  it('an unreadable file has a position and a reason, in text and JSON', async () => {
    const missing = join(dir, 'missing.yaml');
    let r = await nfkDone(['validate', '-c', missing]);
    expect(r.code).toBe(2);
    expect(r.err).toEqual([`${missing}:1:1: error: cannot read: no such file`]);
    r = await nfkDone(['validate', '-c', missing, '--json']);
    expect(JSON.parse(r.out.join('\n'))).toEqual({ ok: false, errors: [{ file: missing, line: 1, column: 1, severity: 'error', message: 'cannot read: no such file' }] });
    r = await nfkDone(['validate', '-c', dir]);
    expect(r.err).toEqual([`${dir}:1:1: error: cannot read: it is a directory, not a config file`]);
  });

  it('a config larger than the limit is refused before it is read', async () => {
    const huge = join(dir, 'huge.yaml');
    writeFileSync(huge, '');
    truncateSync(huge, (32 << 20) + 1);  // sparse: costs no disk
    const r = await nfkDone(['validate', '-c', huge]);
    expect(r.code).toBe(2);
    expect(r.err).toEqual([`${huge}:1:1: error: the file is ${(32 << 20) + 1} bytes, more than the ${32 << 20} a config may have`]);
  });

  it('validate, version and --help do not load the native addon', async () => {
    const env = { NFKEEPER_ADDON: '/nonexistent/nfkeeper.node' };
    for (const args of [['validate', '-c', good], ['version'], ['--help'], ['run', '--help']]) {
      const r = nfk(args, { env });
      expect((await r.exited).code, `${args.join(' ')}: ${r.err.join('\n')}`).toBe(0);
    }
    // The variable does reach the loader: a command that needs the kernel fails on it.
    const r = nfk(['check', '-c', good], { env });
    expect((await r.exited).code).toBe(2);
    expect(r.err.join('\n')).toMatch(/nonexistent\/nfkeeper\.node/);
  });
});

describe('the daemon notices its namespace is gone', { timeout: 240_000 }, () => {
  /** Starts the daemon in a namespace, deletes the namespace, and expects exit 2 with one clear line. */
  async function exitsWhenGone(tag: string, args: string[]) {
    const ns = createNetns(tag);
    const d = nfk(['run', '-c', good, '--netns', ns.path, '--no-metrics', ...args]);
    try {
      await waitFor('nfkeeper running', () => d.logs().some((l) => l.msg === 'nfkeeper running'));
      ns.remove();
      const timer = setTimeout(() => d.child.kill('SIGKILL'), 60_000);
      const { code } = await d.exited;
      clearTimeout(timer);
      expect(code).toBe(2);
      oneClearLine(d.err, new RegExp(`the network namespace ${ns.path} is gone; exited \\(the rules stay in place\\)`));
      return d;
    } finally {
      d.child.kill('SIGKILL');
      ns.remove();
    }
  }

  it('deleted: exits 2 with a clear line (and Go-style --interval 1m30s is taken)', async () => {
    const d = await exitsWhenGone('cligone', ['--interval', '1m30s', '--netns-check', '100ms']);
    expect(d.logs().at(-1)).toMatchObject({ level: 60, msg: expect.stringMatching(/is gone; exiting/) });
  });

  it('deleted, checked on the keeper\'s own tick (no --netns-check, the interval under 2 s): exits 2', async () => {
    await exitsWhenGone('clitick', ['--interval', '200ms']);
  });

  it('replaced (the path now names another namespace): exits 2', async () => {
    const ns = createNetns('clirepl');
    const other = createNetns('cliother');
    const d = nfk(['run', '-c', good, '--netns', ns.path, '--no-metrics', '--netns-check', '100ms']);
    let mounted = false;
    try {
      await waitFor('nfkeeper running', () => d.logs().some((l) => l.msg === 'nfkeeper running'));
      // The path never goes missing: another namespace is mounted over it.
      expect(spawnSync('mount', ['--bind', other.path, ns.path]).status).toBe(0);
      mounted = true;
      const timer = setTimeout(() => d.child.kill('SIGKILL'), 60_000);
      const { code } = await d.exited;
      clearTimeout(timer);
      expect(code).toBe(2);
      oneClearLine(d.err, new RegExp(`${ns.path} now names another network namespace than the one nfkeeper keeps`));
      expect(other.exec('nft', ['list', 'ruleset'])).toBe('');
    } finally {
      d.child.kill('SIGKILL');
      if (mounted) spawnSync('umount', [ns.path]);
      ns.remove();
      other.remove();
    }
  });
});

describe('bounded inputs on the control socket', { timeout: 240_000 }, () => {
  it('owner count, connection count, body size, slow clients; logs stay bounded with their level', async () => {
    const ns = createNetns('clibound');
    const d = tempDir('cli-bound');
    const config = join(d, 'config.yaml');
    writeFileSync(config, ownersYaml(d));
    const socket = join(d, 'nfkeeper.sock');
    const daemon = nfk(['run', '-c', config, '--netns', ns.path, '--no-metrics', '--max-owners', '2', '--max-connections', '3']);
    const held: Socket[] = [];
    try {
      await waitFor('nfkeeper running', () => daemon.logs().some((l) => l.msg === 'nfkeeper running'));
      const put = (id: string, body: unknown) => rawCall(socket, 'PUT', `/v1/owners/${id}`, JSON.stringify(body));
      const spec = { jumps: { postrouting: ['counter'] } };

      // Owners: the third new id is refused; replacing one still works.
      expect((await put('a', spec)).status).toBe(201);
      expect((await put('b', spec)).status).toBe(201);
      const third = await put('c', spec);
      expect(third.status).toBe(409);
      expect(third.body.error).toBe('2 owners are registered, the most this daemon takes (2); remove one first');
      expect((await put('a', { jumps: { postrouting: ['counter', 'counter'] } })).status).toBe(200);

      // Body size.
      const big = await rawCall(socket, 'PUT', '/v1/owners/big', 'x'.repeat((1 << 20) + 10)).catch((e: Error) => ({ status: 0, body: e.message }));
      expect([413, 0]).toContain(big.status);  // 413, unless the server closed before the client finished writing
      if (big.status === 413) expect(big.body.error).toMatch(/larger than 1048576 bytes/);

      // Connections: three held open, the fourth is answered 503 with the reason.
      for (let i = 0; i < 3; i++) {
        const s = connect(socket);
        await new Promise((r) => s.once('connect', r));
        held.push(s);
      }
      const over = await rawCall(socket, 'GET', '/v1/status', '');
      expect(over.status).toBe(503);
      expect(over.body.error).toMatch(/3 connections are open, the most the control socket serves at once/);
      for (const s of held.splice(0)) s.destroy();
      await waitFor('a free slot', async () => (await rawCall(socket, 'GET', '/v1/status', '')).status === 200);

      // A client sending one byte a second neither blocks others nor keeps its slot for long.
      const slow = connect(socket);
      held.push(slow);
      let slowAnswer = '';
      slow.on('data', (b: Buffer) => { slowAnswer += b.toString(); });
      const slowClosed = new Promise<number>((r) => { const t0 = performance.now(); slow.on('close', () => r(performance.now() - t0)); });
      slow.on('error', () => undefined);
      const request = 'GET /v1/status HTTP/1.1\r\nhost: x\r\nx-padding: ' + 'y'.repeat(100);
      let i = 0;
      const drip = setInterval(() => { if (!slow.destroyed) slow.write(request[i++ % request.length]!); }, 1000);
      try {
        for (let k = 0; k < 3; k++) {
          const t0 = performance.now();
          expect((await rawCall(socket, 'GET', '/v1/status', '')).status).toBe(200);
          expect(performance.now() - t0).toBeLessThan(5000);  // generous: served at once, not after the slow client
          await new Promise((r) => setTimeout(r, 1000));
        }
        const closedAfter = await Promise.race([slowClosed, new Promise<number>((r) => setTimeout(() => r(-1), 20_000))]);
        expect(closedAfter).toBeGreaterThan(0);
        expect(slowAnswer).toMatch(/^HTTP\/1\.1 408/);
        console.log(`slow client closed after ${closedAfter.toFixed(0)} ms`);
      } finally {
        clearInterval(drip);
      }

      // A storm of refused requests: bounded lines, then one summary at shutdown.
      for (let k = 0; k < 50; k++) await rawCall(socket, 'GET', '/v1/nothing', '');
      daemon.child.kill('SIGTERM');
      expect((await daemon.exited).code).toBe(0);
      const logs = daemon.logs();
      for (const l of logs) expect([10, 20, 30, 40, 50, 60]).toContain(l.level);
      const refusedLines = logs.filter((l) => l.msg === 'control request' && l.status === 404);
      expect(refusedLines.length).toBeLessThanOrEqual(10);
      const summary = logs.find((l) => l.similarTo === 'control request' && l.level === 40);
      expect(summary).toMatchObject({ msg: expect.stringMatching(/^\d+ similar lines suppressed$/) });
      // Every request is accounted for: written or counted (the 409 and 503 and 413 above are warn 'control request' lines too).
      expect((summary!.suppressed as number) + logs.filter((l) => l.msg === 'control request' && l.level === 40).length).toBeGreaterThanOrEqual(50);
    } finally {
      for (const s of held) s.destroy();
      daemon.child.kill('SIGKILL');
      ns.remove();
    }
  });
});
