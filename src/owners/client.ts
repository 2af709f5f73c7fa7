/** The CLI's side of the control API: one HTTP request over the Unix socket. */
import { request, type Agent } from 'node:http';
import { NfkeeperError } from '../errors.js';

export interface Response {
  status: number;
  body: unknown;
}

/** The daemon is not there (no socket, nobody listening): callers may fall back. */
export class NoDaemonError extends NfkeeperError {
  override name = 'NoDaemonError';
}

/** `agent`: a keep-alive agent of the caller's (a client sending many requests); default Node's global one. */
export function call(socketPath: string, method: string, path: string, body?: unknown, timeoutMs = 120_000, agent?: Agent): Promise<Response> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request({
      socketPath, method, path, timeout: timeoutMs, ...(agent ? { agent } : {}),
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
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') reject(new NoDaemonError(`no daemon answers on ${socketPath} (${e.code})`));
      else if (e.code === 'EACCES') reject(new NfkeeperError(`control socket ${socketPath}: permission denied (the socket is root's)`));
      else reject(e instanceof NfkeeperError ? e : new NfkeeperError(`control socket ${socketPath}: ${e.message}`));
    });
    req.end(payload);
  });
}
