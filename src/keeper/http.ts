/**
 * /metrics, /healthz, /readyz, /events and /status on a TCP port (127.0.0.1 by default), to GET and
 * HEAD. The port may be the node's address (the DaemonSet's): what it serves leaves out committers'
 * command lines, which can carry secrets; the control socket (root only) gives them whole.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Keeper } from './keeper.js';
import type { Attribution } from './attribution.js';
import { NfkeeperError } from '../base/errors.js';

/**
 * GET /events (HTTP) and /v1/events (control socket): the remembered foreign changes, oldest first,
 * one JSON object a line (each with the repair that answered it); with ?follow=1 the response then
 * stays open and carries each foreign change and each repair as they happen (`nfkeeper events`).
 */
export function sendEvents(attribution: Pick<Attribution, 'recent' | 'capacity' | 'follow'>, req: IncomingMessage, res: ServerResponse,
  o: { redact?: boolean } = {}): void {
  const follow = /[?&]follow=(1|true)(&|$)/.test(req.url ?? '');
  const json = (v: unknown) => JSON.stringify(v, o.redact ? withoutCmdline : undefined);
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  const backlog = attribution.recent(attribution.capacity).reverse().map((c) => json({ type: 'change', ...c }) + '\n');
  if (!follow) {
    res.end(backlog.join(''));
    return;
  }
  res.write(backlog.join(''));
  // A follower may stay for days: no idle timeout on its connection; a slow one is dropped, not buffered for.
  req.socket.setTimeout(0);
  const stop = attribution.follow((e) => {
    if (res.writableLength > 1 << 20) res.destroy();
    else res.write(json(e) + '\n');
  });
  res.once('close', stop);
}

/** A JSON.stringify replacer that drops every `cmdline`. */
function withoutCmdline(key: string, value: unknown): unknown {
  return key === 'cmdline' ? undefined : value;
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
    // HEAD is GET without the body (Node's response leaves it out): probes and load balancers send it.
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
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
      const why = keeper.notReadyReason();
      res.writeHead(why === undefined ? 200 : 503, { 'content-type': 'text/plain' }).end(why === undefined ? 'ready\n' : `not ready: ${why}\n`);
    } else if (url === '/events') {
      sendEvents(keeper.attribution, req, res, { redact: true });
    } else if (url === '/status') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(keeper.status(), withoutCmdline));
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
