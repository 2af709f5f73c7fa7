/** The CLI's side of the control API: one HTTP request over the Unix socket. */
import { request, type Agent, type RequestOptions } from 'node:http';
import { createConnection } from 'node:net';
import { NfkeeperError } from '../base/errors.js';

/**
 * The largest request body the control API takes (the daemon answers 413 beyond it); `owner put`
 * reads no more of a file. Here, not in api.ts, so that the client's commands do not load the
 * daemon's side.
 */
export const MAX_BODY = 1 << 20;

export interface Response {
  status: number;
  body: unknown;
}

/** The daemon is not there (no socket, nobody listening): callers may fall back. */
export class NoDaemonError extends NfkeeperError {
  override name = 'NoDaemonError';
}

/**
 * A request over the Unix socket without an agent: one connection, closed after the answer. Node's
 * agent tests the host name (`localhost`, for a socket) against its IPv6 pattern, whose first use
 * is a good part of a command's time that sends one request and exits.
 */
const direct: Pick<RequestOptions, 'createConnection'> = { createConnection: (o) => createConnection(o as { path: string }) };

/**
 * `agent`: Node's global agent by default, which keeps connections open for the next request (a
 * caller sending many, at once too); a keep-alive agent of the caller's; or 'none', one connection
 * for this request alone (the command line: one request, then the process exits).
 */
export function call(socketPath: string, method: string, path: string, body?: unknown, timeoutMs = 120_000, agent?: Agent | 'none'): Promise<Response> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request({
      socketPath, method, path, timeout: timeoutMs, ...(agent === 'none' ? direct : agent ? { agent } : {}),
      headers: payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {},
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = text;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch { /* not JSON: keep the text */ }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new NfkeeperError(`control socket ${socketPath}: no answer within ${timeoutMs} ms`)));
    req.on('error', (e: NodeJS.ErrnoException) => reject(connectError(socketPath, `control socket ${socketPath}`, e)));
    req.end(payload);
  });
}

/**
 * A streaming GET (the daemon's /v1/events or /events): `line` is called with each line as it
 * arrives; resolves when the daemon ends the response. NoDaemonError as call() says it.
 */
export function followEvents(to: { socketPath: string; path: string } | { host: string; port: number; path: string },
  line: (text: string) => void): Promise<void> {
  const where = 'socketPath' in to ? `control socket ${to.socketPath}` : `${to.host}:${to.port}`;
  return new Promise((resolve, reject) => {
    const req = request({ ...to, method: 'GET', ...('socketPath' in to ? direct : {}) }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new NfkeeperError(`${where}: ${to.path} answered ${res.statusCode}`));
        return;
      }
      let rest = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        rest += c;
        let nl;
        while ((nl = rest.indexOf('\n')) >= 0) {
          const text = rest.slice(0, nl);
          rest = rest.slice(nl + 1);
          if (text !== '') line(text);
        }
      });
      res.on('end', () => resolve());
      res.on('error', reject);
    });
    req.on('error', (e: NodeJS.ErrnoException) => reject(connectError('socketPath' in to ? to.socketPath : `${to.host}:${to.port}`, where, e)));
    req.end();
  });
}

/** A request's failure to reach the daemon, as an error a user can act on. */
function connectError(at: string, where: string, e: NodeJS.ErrnoException): Error {
  if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') return new NoDaemonError(`no daemon answers on ${at} (${e.code})`);
  if (e.code === 'EACCES') return new NfkeeperError(`${where}: permission denied (the socket is root's)`);
  return e instanceof NfkeeperError ? e : new NfkeeperError(`${where}: ${e.message}`);
}
