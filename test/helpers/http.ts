/**
 * A raw HTTP request over a Unix socket, for control-API tests:
 *
 *   import { rawCall } from '../helpers/http.js';
 *   const r = await rawCall(sock, 'PUT', '/v1/owners/a', '{"chains": []}');   // { status, body }
 *
 * The body goes as written (not JSON-encoded), so malformed requests can be sent.
 */
import { request } from 'node:http';

/** One request on its own connection (no keep-alive pool, so connection counts are exact). */
export function rawCall(socketPath: string, method: string, path: string, body: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, agent: false, headers: { 'content-length': Buffer.byteLength(body) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let parsed: unknown = text;
        try { parsed = JSON.parse(text); } catch { /* keep text */ }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
