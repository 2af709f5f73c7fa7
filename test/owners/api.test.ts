/** The control API on a real kernel: routes, idempotence, refusals that change nothing, repair and owned GC. */
import { execFile } from 'node:child_process';
import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createNetns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { BASE_RULE, listTable, ownerSpec, rawCall, startDaemon, withDaemon, type Daemon } from './fixtures.js';

describe('control API', () => {
  const { ns, sock } = socketPerTest('own-api');
  let dir: string;
  let d: Daemon;
  beforeEach(async () => {
    dir = tempDir('owners');
    d = await startDaemon(ns, dir);
  });
  afterEach(async () => {
    await d.stop();
  });

  it('PUT registers an owner: tagged chain and jump in one batch; a second identical PUT changes nothing', async () => {
    const gen = sock.generation();
    let r = await d.api('PUT', '/v1/owners/alloc-1', ownerSpec(1));
    expect(r).toMatchObject({ status: 201, body: { id: 'alloc-1', created: true, changed: true } });
    expect(sock.generation()).toBe(gen + 1);
    const table = listTable(ns);
    expect(table).toContain('ip saddr 10.100.0.1 jump o/alloc-1/masq comment "nfkeeper-owner=alloc-1"');
    expect(table).toMatch(/chain o\/alloc-1\/masq \{\n\t\tip daddr 172\.16\.0\.0\/24 tcp dport 1000 return comment "nfkeeper-owner=alloc-1"\n\t\tip daddr != 224\.0\.0\.0\/4 masquerade comment "nfkeeper-owner=alloc-1"\n\t\}/);
    // The jump follows the config's own rule.
    expect(table.indexOf(BASE_RULE)).toBeLessThan(table.indexOf('jump o/alloc-1/masq'));
    r = await d.api('PUT', '/v1/owners/alloc-1', ownerSpec(1));
    expect(r).toMatchObject({ status: 200, body: { created: false, changed: false } });
    expect(sock.generation()).toBe(gen + 1);
    // The tag has no quotes: nft's own listing of the table loads again with nft -f.
    const copy = createNetns('own-copy');
    try {
      copy.nft(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper']));
      expect(listTable(copy)).toBe(listTable(ns));
    } finally {
      copy.remove();
    }
    // The state file holds it.
    const state = JSON.parse(readFileSync(join(dir, 'state', 'owners.json'), 'utf8'));
    expect(state).toEqual({ version: 1, owners: { 'alloc-1': ownerSpec(1) } });
  });

  it('GET lists and shows owners; PUT replaces; DELETE removes chains and jumps in one batch', async () => {
    await d.api('PUT', '/v1/owners/a', ownerSpec(1));
    await d.api('PUT', '/v1/owners/b', ownerSpec(2, 5));
    let r = await d.api('GET', '/v1/owners');
    expect(r).toEqual({ status: 200, body: { owners: [{ id: 'a', chains: 1, rules: 3 }, { id: 'b', chains: 1, rules: 5 }] } });
    r = await d.api('GET', '/v1/owners/b');
    expect(r).toEqual({ status: 200, body: { id: 'b', spec: ownerSpec(2, 5), chains: ['o/b/masq'], rules: 5 } });
    r = await d.api('PUT', '/v1/owners/b', ownerSpec(3));
    expect(r).toMatchObject({ status: 200, body: { created: false, changed: true } });
    expect(listTable(ns)).toContain('ip saddr 10.100.0.3 jump o/b/masq');
    expect(listTable(ns)).not.toContain('10.100.0.2');
    const gen = sock.generation();
    r = await d.api('DELETE', '/v1/owners/a');
    expect(r).toEqual({ status: 200, body: { id: 'a', removed: true } });
    expect(sock.generation()).toBe(gen + 1);
    const table = listTable(ns);
    expect(table).not.toContain('o/a/');
    expect(table).toContain('o/b/masq');
    const metrics = await d.keeper.metrics.registry.metrics();
    expect(metrics).toMatch(/nfkeeper_owned_gc_collected_total\{kind="chain"\} 1\n/);
    expect(metrics).toMatch(/nfkeeper_owned_gc_collected_total\{kind="rule"\} 1\n/);  // the jump; chain rules go with the chain
    expect(metrics).toMatch(/nfkeeper_owners 1\n/);
    expect((await d.api('DELETE', '/v1/owners/a')).status).toBe(404);
    expect((await d.api('GET', '/v1/owners/a')).status).toBe(404);
    expect(sock.generation()).toBe(gen + 1);
  });

  it('HEAD is answered on every GET route, without a body; a 405 names GET and HEAD as allowed', async () => {
    await d.api('PUT', '/v1/owners/a', ownerSpec(1));
    for (const path of ['/v1/status', '/v1/owners', '/v1/owners/a']) {
      const head = await rawCall(d.socket, 'HEAD', path, '');
      expect(head, path).toEqual({ status: 200, body: '' });
    }
    expect((await rawCall(d.socket, 'HEAD', '/v1/owners/nobody', '')).status).toBe(404);
    const gen = sock.generation();
    const post = await new Promise<{ status: number; allow?: string }>((resolve, reject) => {
      const req = request({ socketPath: d.socket, method: 'POST', path: '/v1/status', agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, allow: res.headers.allow }));
      });
      req.on('error', reject);
      req.end();
    });
    expect(post).toEqual({ status: 405, allow: 'GET, HEAD' });
    expect(sock.generation()).toBe(gen);
  });

  it('refusals are 4xx with a reason and leave the kernel and the state file alone', async () => {
    await d.api('PUT', '/v1/owners/keep', ownerSpec(1));
    const gen = sock.generation();
    const table = listTable(ns);
    const state = readFileSync(join(dir, 'state', 'owners.json'), 'utf8');
    const cases: [string, string, unknown, number, RegExp][] = [
      ['PUT', '/v1/owners/bad"id', ownerSpec(2), 400, /not a valid owner id/],
      ['PUT', `/v1/owners/${'x'.repeat(65)}`, ownerSpec(2), 400, /not a valid owner id/],
      ['PUT', '/v1/owners/a%20b', ownerSpec(2), 400, /not a valid owner id/],
      ['PUT', '/v1/owners/a%2Fb', ownerSpec(2), 400, /not a valid owner id/],
      ['DELETE', '/v1/owners/..', undefined, 400, /not a valid owner id/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c', rules: ['ip saddr 10.0.0.0/8 masquerad'] }] }, 400, /chains\[0\]\.rules\[0\]: .*column/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c', rules: ['counter comment "mine"'] }] }, 400, /cannot carry a comment/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c', rules: ['jump { accept; }'] }] }, 400, /chains\[0\]\.rules\[0\]: owner rules cannot hold a chain binding/],
      ['PUT', '/v1/owners/x', { jumps: { postrouting: ['jump elsewhere'] } }, 400, /jumps\.postrouting\[0\]: jump to chain 'elsewhere', which this owner does not define/],
      ['PUT', '/v1/owners/x', { jumps: { output: ['counter'] } }, 400, /jumps\.output: "output" is not a dispatch chain/],
      ['PUT', '/v1/owners/x', { jumps: { postrouting: ['dnat to 10.0.0.1'] } }, 400, /dnat and redirect are only valid/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c', rules: ['masquerade'] }], jumps: { prerouting: ['jump c'] } }, 400,
        /chains\[0\]\.rules\[0\]: masquerade is only valid in postrouting chains \(chain c is reached from the prerouting hook\)/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'a', rules: ['jump b'] }, { name: 'b', rules: ['jump a'] }] }, 400, /loops/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c' }, { name: 'c' }] }, 400, /listed twice/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'c', type: 'nat' }] }, 400, /chains\[0\]/],
      ['PUT', '/v1/owners/x', { chains: [{ name: 'has/slash' }] }, 400, /chains\[0\]\.name/],
      ['PUT', '/v1/owners/x', [], 400, /body/],
      ['GET', '/v2/owners', undefined, 404, /no route/],
      ['GET', '/v1/ownerz', undefined, 404, /no route/],
      ['POST', '/v1/owners/x', ownerSpec(2), 405, /use GET, PUT or DELETE/],
      ['DELETE', '/v1/owners', undefined, 405, /only GET/],
      ['DELETE', '/v1/owners/nobody', undefined, 404, /no owner nobody/],
    ];
    for (const [method, path, body, status, message] of cases) {
      const r = await d.api(method, path, body);
      expect({ method, path, status: r.status }).toEqual({ method, path, status });
      expect(r.body.error).toMatch(message);
    }
    for (const [body, message] of [['{not json', /not JSON/], ['', /needs a JSON body/]] as const) {
      const r = await rawCall(d.socket, 'PUT', '/v1/owners/x', body);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatch(message);
    }
    const big = await rawCall(d.socket, 'PUT', '/v1/owners/x', JSON.stringify({ chains: [{ name: 'c', rules: ['x'.repeat(2 << 20)] }] }))
      .catch((e: NodeJS.ErrnoException) => ({ status: e.code === 'EPIPE' || e.code === 'ECONNRESET' ? 413 : 0, body: { error: 'larger' } }));
    expect(big.status).toBe(413);
    expect(sock.generation()).toBe(gen);
    expect(listTable(ns)).toBe(table);
    expect(readFileSync(join(dir, 'state', 'owners.json'), 'utf8')).toBe(state);
  });

  it('a client that goes away in the middle of its body gets nothing done, and the daemon carries on', async () => {
    await d.api('PUT', '/v1/owners/keep', ownerSpec(1));
    const gen = sock.generation();
    const table = listTable(ns);
    const state = readFileSync(join(dir, 'state', 'owners.json'), 'utf8');
    // Before the fix the request's reader threw 'aborted' into a promise nobody caught: Node ended the process.
    const rejected: unknown[] = [];
    const onRejection = (e: unknown) => rejected.push(e);
    process.on('unhandledRejection', onRejection);
    try {
      const body = JSON.stringify(ownerSpec(2));
      for (let i = 0; i < 3; i++) {
        await new Promise<void>((resolve, reject) => {
          const c = createConnection(d.socket, () => {
            c.write(`PUT /v1/owners/gone${i} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
            setTimeout(() => { c.destroy(); resolve(); }, 50);
          });
          c.on('error', reject);
        });
      }
      await sleep(100);
      expect(rejected).toEqual([]);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
    expect(sock.generation()).toBe(gen);
    expect(listTable(ns)).toBe(table);
    expect(readFileSync(join(dir, 'state', 'owners.json'), 'utf8')).toBe(state);
    expect((await d.api('PUT', '/v1/owners/after', ownerSpec(3))).status).toBe(201);
    expect(listTable(ns)).toContain('jump o/after/masq');
  });

  it('an owner chain tampered with is repaired like any owned chain', async () => {
    await d.api('PUT', '/v1/owners/a', ownerSpec(1));
    const want = listTable(ns);
    ns.nft('flush chain ip nfkeeper o/a/masq');
    for (let i = 0; i < 100 && listTable(ns) !== want; i++) await sleep(50);
    expect(listTable(ns)).toBe(want);
    // The jump holds a reference: the kernel refuses to delete the chain on its own.
    expect(() => ns.nft('delete chain ip nfkeeper o/a/masq')).toThrow(/Device or resource busy/);
    const handle = /jump o\/a\/masq comment "nfkeeper-owner=a" # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']))![1]!;
    ns.nft(`delete rule ip nfkeeper postrouting handle ${handle}`);
    for (let i = 0; i < 100 && listTable(ns) !== want; i++) await sleep(50);
    expect(listTable(ns)).toBe(want);
  });

  it('concurrent PUTs are grouped into few state writes and batches, and all are installed', async () => {
    const gen = sock.generation();
    const rs = await Promise.all(Array.from({ length: 40 }, (_, i) => d.api('PUT', `/v1/owners/c${i}`, ownerSpec(i))));
    expect(rs.every((r) => r.status === 201)).toBe(true);
    expect(d.registry.groups).toBeLessThan(40);
    expect(sock.generation() - gen).toBe(d.registry.groups);
    const table = listTable(ns);
    for (let i = 0; i < 40; i++) expect(table).toContain(`jump o/c${i}/masq`);
  });
});

describe('control socket access', () => {
  const probe = (socket: string) => `
    const req = require('node:http').request({ socketPath: ${JSON.stringify(socket)}, method: 'PUT', path: '/v1/owners/evil',
      headers: { 'content-type': 'application/json' } }, (res) => {
      let b = ''; res.on('data', (c) => b += c); res.on('end', () => { console.log(JSON.stringify({ status: res.statusCode, body: b })); });
    });
    req.on('error', (e) => console.log(JSON.stringify({ error: e.code })));
    req.end(JSON.stringify({ jumps: { postrouting: ['counter'] } }));`;
  // Asynchronous: the daemon answering it lives in this process.
  const asNobody = (socket: string) => new Promise<{ status?: number; body?: string; error?: string }>((resolve, reject) => {
    execFile('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', probe(socket)],
      { encoding: 'utf8', timeout: 30_000 }, (e, stdout) => {
        if (e) reject(e);
        else resolve(JSON.parse(stdout.trim().split('\n').pop()!));
      });
  });

  it('a non-root peer is stopped by the socket mode (0600) at connect()', async () => {
    await withDaemon('own-perm', async ({ d, sock }) => {
      const gen = sock.generation();
      expect(await asNobody(d.socket)).toEqual({ error: 'EACCES' });
      expect(sock.generation()).toBe(gen);
    });
  });

  it('a non-root peer on a socket whose mode was relaxed is refused by its credentials: 403, nothing changes', async () => {
    await withDaemon('own-cred', async ({ d, sock }) => {
      const gen = sock.generation();
      const r = await asNobody(d.socket);
      expect(r.status).toBe(403);
      expect(JSON.parse(r.body!).error).toMatch(/uid 65534 .* may not use the control socket/);
      expect(sock.generation()).toBe(gen);
      expect(d.registry.size).toBe(0);
      // Root on the same socket is served.
      expect((await d.api('PUT', '/v1/owners/fine', { jumps: { postrouting: ['counter'] } })).status).toBe(201);
    }, { mode: 0o666 });
  });
});
