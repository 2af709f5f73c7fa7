/**
 * /readyz and nfkeeper_ready mean "the desired state is verified", on the real kernel: not ready
 * before the start-up pass, ready after it, not ready once drift has gone unrepaired for longer
 * than the back-off cap plus an interval (here: another process owns the table, so every repair
 * is refused), ready again once a repair verifies it, not ready after stop. HEAD is answered on
 * every GET endpoint, other methods get 405 with Allow.
 */
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Keeper } from '../../src/keeper/keeper.js';
import { serveMetrics } from '../../src/keeper/http.js';
import { Batch } from '../../src/netlink/batch.js';
import { TABLE_F } from '../../src/netlink/objects.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { until } from '../helpers/wait.js';
import { flannelConfig } from './helpers.js';

function http(port: number, method: string, path: string): Promise<{ status: number; body: string; allow?: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), allow: res.headers.allow }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function readyMetric(k: Keeper): Promise<number> {
  return (await k.metrics.ready.get()).values[0]?.value ?? NaN;
}

describe('readiness: the desired state is verified', { timeout: 60_000 }, () => {
  let ns: Netns;
  let keeper: Keeper | undefined;
  let server: Server | undefined;
  let other: NftSocket | undefined;

  beforeEach(() => {
    ns = createNetns('ready');
  });
  afterEach(async () => {
    server?.close();
    await keeper?.stop();
    other?.close();
    ns.remove();
    keeper = server = other = undefined;
  });

  it('goes not ready while repairs are refused past the back-off cap, and ready again once verified', async () => {
    const capMs = 300;
    const intervalMs = 100;
    keeper = new Keeper({ config: flannelConfig(), netns: ns.path, intervalMs, fight: { threshold: 3, windowMs: 5000, baseMs: 50, capMs, quietMs: 500 } });
    keeper.on('error', () => undefined);
    const k = keeper;
    server = await serveMetrics(k, '127.0.0.1:0');
    const port = (server.address() as AddressInfo).port;

    // Before the start-up pass.
    expect(k.isReady()).toBe(false);
    const before = await http(port, 'GET', '/readyz');
    expect(before.status).toBe(503);
    expect(before.body).toMatch(/^not ready: the desired ruleset is not verified yet/);
    expect(await readyMetric(k)).toBe(0);

    await k.start();
    expect(k.isReady()).toBe(true);
    expect(await http(port, 'GET', '/readyz')).toMatchObject({ status: 200, body: 'ready\n' });
    expect(await readyMetric(k)).toBe(1);

    // Another process takes the table over (replaced, owned by its socket, in one batch): every
    // repair is refused with EPERM, and the drift stays.
    other = open({ netns: ns.path });
    await other.commit(new Batch().delete('table', { family: 'ip', name: 'nfkeeper' })
      .add('table', { family: 'ip', name: 'nfkeeper', flags: TABLE_F.OWNER }));
    // Within the grace (cap + interval) it stays ready: a fight's held-back repair takes that long.
    await until('a refused repair', () => k.status().lastError !== undefined, 10_000);
    await until('not ready', () => !k.isReady(), 10_000);
    const t0 = performance.now();
    const notReady = await http(port, 'GET', '/readyz');
    expect(notReady.status).toBe(503);
    expect(notReady.body).toMatch(/^not ready: the desired ruleset has not been verified for \d+\.\d s: .*ip nfkeeper/);
    await until('nfkeeper_ready 0', async () => (await readyMetric(k)) === 0, 10_000);
    expect((await http(port, 'GET', '/status')).body).toMatch(/"ready":false/);
    // Still not ready while it lasts.
    await until('a second', () => performance.now() - t0 > 1000, 5000, 100);
    expect(k.isReady()).toBe(false);

    // The other process goes: its table (no persist flag) goes with it, the keeper installs the
    // desired state again and says so.
    other.close();
    other = undefined;
    await until('ready again', () => k.isReady(), 10_000);
    expect((await http(port, 'GET', '/readyz')).status).toBe(200);
    await until('nfkeeper_ready 1', async () => (await readyMetric(k)) === 1, 10_000);
    expect(ns.nft('list chain ip nfkeeper postrouting')).toMatch(/masquerade/);

    await k.stop();
    expect(k.isReady()).toBe(false);
    expect(await readyMetric(k)).toBe(0);
  });

  it('HEAD is answered on every GET endpoint, without a body; other methods get 405 with Allow', async () => {
    keeper = new Keeper({ config: flannelConfig(), netns: ns.path, intervalMs: 3_600_000 });
    keeper.on('error', () => undefined);
    await keeper.start();
    server = await serveMetrics(keeper, '127.0.0.1:0');
    const port = (server.address() as AddressInfo).port;
    for (const path of ['/metrics', '/healthz', '/readyz', '/status']) {
      const get = await http(port, 'GET', path);
      const head = await http(port, 'HEAD', path);
      expect(get.status, path).toBe(200);
      expect(get.body.length, path).toBeGreaterThan(0);
      expect(head.status, path).toBe(200);
      expect(head.body, path).toBe('');
    }
    expect((await http(port, 'HEAD', '/nothing')).status).toBe(404);
    for (const m of ['POST', 'PUT', 'DELETE']) {
      const r = await http(port, m, '/metrics');
      expect(r.status).toBe(405);
      expect(r.allow).toBe('GET, HEAD');
    }
  });
});
