/** /metrics, /healthz and /readyz on a loopback TCP port (127.0.0.1 by default). */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Keeper } from './keeper.js';
import type { Attribution } from './attribution.js';
import { NfkeeperError } from '../errors.js';

/**
 * GET /events (HTTP) and /v1/events (control socket): the remembered foreign changes, oldest first,
 * one JSON object a line (each with the repair that answered it); with ?follow=1 the response then
 * stays open and carries each foreign change and each repair as they happen (`nfkeeper events`).
 */
export function sendEvents(attribution: Pick<Attribution, 'recent' | 'capacity' | 'follow'>, req: IncomingMessage, res: ServerResponse): void {
  const follow = /[?&]follow=(1|true)(&|$)/.test(req.url ?? '');
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const backlog = attribution.recent(attribution.capacity).reverse().map((c) => JSON.stringify({ type: 'change', ...c }) + '\n');
  if (!follow) {
    res.end(backlog.join(''));
    return;
  }
  res.write(backlog.join(''));
  // A follower may stay for days: no idle timeout on its connection; a slow one is dropped, not buffered for.
  req.socket.setTimeout(0);
  const stop = attribution.follow((e) => {
    if (res.writableLength > 1 << 20) res.destroy();
    else res.write(JSON.stringify(e) + '\n');
  });
  res.once('close', stop);
}

export function parseListen(spec: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(spec);
  if (!m) throw new NfkeeperError(`--metrics: wants HOST:PORT, got '${spec}'`);
  const port = Number(m[3]);
  if (port > 65535) throw new NfkeeperError(`--metrics: port ${port} is out of range`);
  return { host: m[1] ?? m[2]!, port };
}

export async function serveMetrics(keeper: Keeper, spec: string): Promise<Server> {
  const { host, port } = parseListen(spec);
  const server = createServer((req, res) => {
    const url = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET') {
      res.writeHead(405).end();
      return;
    }
    if (url === '/metrics') {
      keeper.metrics.registry.metrics().then((body) => {
        res.writeHead(200, { 'content-type': keeper.metrics.registry.contentType }).end(body);
      }, (e: Error) => res.writeHead(500).end(e.message));
    } else if (url === '/healthz') {
      const ok = keeper.healthy();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' }).end(ok ? 'ok\n' : 'loop stalled\n');
    } else if (url === '/readyz') {
      const ok = keeper.isReady();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' }).end(ok ? 'ready\n' : 'not verified yet\n');
    } else if (url === '/events') {
      sendEvents(keeper.attribution, req, res);
    } else if (url === '/status') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(keeper.status()));
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
