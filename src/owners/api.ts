/**
 * The control API: HTTP + JSON over a Unix socket (mode 0600), versioned
 * routes under /v1. Two layers keep non-root callers out: the socket's mode
 * stops them at connect(), and each connection's peer credentials
 * (SO_PEERCRED, read by the addon) are checked before a request is read, so
 * a socket whose mode was relaxed still refuses them. Every refusal is a 4xx
 * with `{ "error": "…" }` saying what is wrong; nothing reaches the kernel
 * before a request has been fully validated.
 *
 *   GET    /v1/status          the keeper's status, with owners and owned GC
 *   GET    /v1/events          foreign changes to owned tables, one JSON a line (?follow=1: then live)
 *   GET    /v1/owners          [{ id, chains, rules }]
 *   GET    /v1/owners/{id}     { id, spec, table, chains (kernel names) }
 *   PUT    /v1/owners/{id}     body { chains: [{ name, rules }], jumps: { <dispatch>: [rules] } }
 *   DELETE /v1/owners/{id}
 */
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, unlinkSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { NfkeeperError } from '../base/errors.js';
import { peerCred } from '../netlink/unix.js';
import { OwnerApplyError, OwnerLimitError, OwnerStateWriteError, type OwnerRegistry } from './registry.js';
import { OwnerSpecError, validateOwnerId } from './spec.js';
import { MAX_BODY } from './client.js';

export { MAX_BODY };
/** Connections served at once; more are answered 503 (an orchestrator may open hundreds at once). */
export const MAX_CONNECTIONS = 1024;
/**
 * A client must send its request headers within HEADERS_TIMEOUT_MS and the whole
 * request within REQUEST_TIMEOUT_MS (the server answers 408 and closes), and an
 * idle connection is closed after IDLE_TIMEOUT_MS: a slow or stuck client holds a
 * connection slot for seconds, never the daemon.
 */
export const HEADERS_TIMEOUT_MS = 5_000;
export const REQUEST_TIMEOUT_MS = 15_000;
export const IDLE_TIMEOUT_MS = 30_000;

export interface Reply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export interface ControlOptions {
  path: string;
  /** Undefined when the config has no owners section: the owner routes answer 404. */
  registry?: OwnerRegistry;
  status: () => unknown | Promise<unknown>;
  /**
   * GET /v1/events: the foreign changes, and with ?follow=1 each one and each repair as they happen
   * (the keeper's sendEvents, given by whoever runs both: owners sit below the keeper).
   */
  events?: (req: IncomingMessage, res: ServerResponse) => void;
  logger?: Logger;
  /** Test-only: a socket mode other than 0600, to reach the credential check. */
  mode?: number;
  /** Peer uids allowed besides root; default: this process's own euid. */
  allowUids?: number[];
  /** Requests wait for this (the keeper's start-up pass) before they are routed: the socket is bound earlier. */
  ready?: Promise<unknown>;
  /** Default MAX_CONNECTIONS. */
  maxConnections?: number;
  /** Default HEADERS_TIMEOUT_MS / REQUEST_TIMEOUT_MS (tests shorten them). */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
}

const err = (status: number, message: string, extra: Record<string, unknown> = {}): Reply => ({ status, body: { error: message, ...extra } });

/** Routes one request. Pure apart from the registry: the HTTP layer and the property test both call it. */
export async function route(o: Pick<ControlOptions, 'registry' | 'status'>, method: string, url: string, body: string | undefined): Promise<Reply> {
  const path = url.split('?')[0]!;
  if (path === '/v1/status') {
    if (method !== 'GET') return { ...err(405, `${method} ${path}: only GET`), headers: { allow: 'GET, HEAD' } };
    return { status: 200, body: await o.status() };
  }
  if (path !== '/v1/owners' && !path.startsWith('/v1/owners/')) {
    return err(404, `no route ${method} ${path.slice(0, 200)}; the routes are /v1/status, /v1/events, /v1/owners and /v1/owners/{id}`);
  }
  const reg = o.registry;
  if (!reg) return err(404, 'owners are not configured on this daemon (no owners section in its config)');
  if (path === '/v1/owners') {
    if (method !== 'GET') return { ...err(405, `${method} /v1/owners: only GET (PUT and DELETE take /v1/owners/{id})`), headers: { allow: 'GET, HEAD' } };
    return { status: 200, body: { owners: reg.list().map((x) => ({ id: x.id, chains: x.chains.length, rules: x.rules })) } };
  }
  const raw = path.slice('/v1/owners/'.length);
  let id: string;
  try {
    id = decodeURIComponent(raw);
  } catch {
    return err(400, `the owner id in the path is not valid percent-encoding`);
  }
  try {
    switch (method) {
      case 'GET': {
        validateOwnerId(id);
        const x = reg.get(id);
        if (!x) return err(404, `no owner ${id}`);
        return { status: 200, body: { id: x.id, spec: x.spec, chains: x.chains.map((c) => c.name), rules: x.rules } };
      }
      case 'PUT': {
        if (!reg.get(id) && reg.full) return err(409, `${reg.size} owners are registered, the most this daemon takes (${reg.maxOwners}); remove one first`);
        if (body === undefined || body.trim() === '') return err(400, 'PUT needs a JSON body: { "chains": [...], "jumps": { ... } }');
        let spec: unknown;
        try {
          spec = JSON.parse(body);
        } catch (e) {
          return err(400, `body: not JSON (${(e as Error).message})`);
        }
        const r = await reg.put(id, spec);
        return { status: r.existed ? 200 : 201, body: { id, created: !r.existed, changed: r.changed } };
      }
      case 'DELETE': {
        const r = await reg.remove(id);
        if (!r.existed) return err(404, `no owner ${id}`);
        return { status: 200, body: { id, removed: true } };
      }
      default:
        return { ...err(405, `${method} /v1/owners/{id}: use GET, PUT or DELETE`), headers: { allow: 'GET, HEAD, PUT, DELETE' } };
    }
  } catch (e) {
    if (e instanceof OwnerSpecError) return err(400, e.message, { path: e.path });
    if (e instanceof OwnerStateWriteError) return err(503, e.message);
    if (e instanceof OwnerApplyError) return err(422, e.message);
    // 507 Insufficient Storage: the request is fine, the daemon holds as much as it is configured to.
    if (e instanceof OwnerLimitError) return err(507, e.message, { limit: `owners.limits.${e.limit}`, max: e.max, total: e.total });
    throw e;
  }
}

export interface ControlServer {
  server: Server;
  path: string;
  close(): Promise<void>;
}

/** Listens on the Unix socket `o.path`, replacing a stale socket file but never a live daemon's. */
export async function serveControl(o: ControlOptions): Promise<ControlServer> {
  const allowed = new Set([0, ...(o.allowUids ?? [process.geteuid?.() ?? 0])]);
  const refused = new WeakMap<Socket, { status: number; why: string }>();
  const maxConnections = Math.max(1, Math.min(o.maxConnections ?? MAX_CONNECTIONS, connectionsWithinFdLimit()));
  const server = createServer({
    headersTimeout: o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS,
    requestTimeout: o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
    // How often the two timeouts above are checked (Node's default is every 30 s).
    connectionsCheckingInterval: Math.min(1000, o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS),
  }, (req, res) => void handle(req, res));
  server.keepAliveTimeout = 5_000;
  server.timeout = IDLE_TIMEOUT_MS;
  let open = 0;
  server.on('connection', (sock: Socket) => {
    open++;
    sock.once('close', () => open--);
    if (open > maxConnections) {
      refused.set(sock, { status: 503, why: `${maxConnections} connections are open, the most the control socket serves at once; retry later` });
      return;
    }
    const fd = (sock as unknown as { _handle?: { fd?: number } })._handle?.fd;
    const cred = typeof fd === 'number' && fd >= 0 ? peerCred(fd) : -1;
    if (typeof cred === 'number') refused.set(sock, { status: 403, why: 'the peer\'s credentials could not be read' });
    else if (!allowed.has(cred.uid)) refused.set(sock, { status: 403, why: `uid ${cred.uid} (pid ${cred.pid}) may not use the control socket; it is root's` });
  });

  const send = (res: ServerResponse, r: Reply) => {
    res.writeHead(r.status, { 'content-type': 'application/json', ...r.headers }).end(JSON.stringify(r.body) + '\n');
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refusal = refused.get(req.socket);
    if (refusal) {
      o.logger?.warn({ method: req.method, url: req.url?.slice(0, 200), why: refusal.why }, 'control request refused');
      res.setHeader('connection', 'close');
      send(res, err(refusal.status, refusal.why));
      req.resume();
      return;
    }
    if (o.ready) {
      try {
        await o.ready;
      } catch {
        send(res, err(503, 'the daemon did not start'));
        return;
      }
    }
    const read = await readBody(req);
    if (read === 'aborted') return;  // the client went away mid-body: nobody to answer
    if (read === 'too-big') {
      res.setHeader('connection', 'close');
      send(res, err(413, `the body is larger than ${MAX_BODY} bytes`));
      req.destroy();
      return;
    }
    const body = read.body;
    if (o.events && (req.url ?? '').split('?')[0] === '/v1/events' && req.method === 'GET') {
      o.events(req, res);
      return;
    }
    try {
      // HEAD is GET without the body (Node's response leaves it out).
      const method = req.method === 'HEAD' ? 'GET' : req.method ?? 'GET';
      const r = await route(o, method, req.url ?? '/', body);
      if (r.status >= 400 || method !== 'GET') {
        o.logger?.[r.status >= 400 ? 'warn' : 'info']({ method: req.method, url: req.url?.slice(0, 200), status: r.status,
          ...(r.status >= 400 ? { error: (r.body as { error: string }).error } : {}) }, 'control request');
      }
      send(res, r);
    } catch (e) {
      o.logger?.error({ err: e, method: req.method, url: req.url }, 'control request failed');
      send(res, err(500, `internal error: ${(e as Error).message}`));
    }
  }

  await prepareSocketPath(o.path);
  // The socket is created 0600 (umask) and chmod'ed again, so there is no moment it is open to others.
  const oldMask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      // A deep backlog: an orchestrator may open hundreds of connections at once (the kernel caps it at somaxconn).
      server.listen({ path: o.path, backlog: 4096 }, () => resolve());
    });
  } finally {
    process.umask(oldMask);
  }
  chmodSync(o.path, o.mode ?? 0o600);
  return {
    server,
    path: o.path,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

/** Descriptors kept free besides the control connections: netlink sockets, the state, logs, a refused client's 503. */
const FD_RESERVE = 64;

/**
 * Connections that fit under the process's open-file limit (RLIMIT_NOFILE, from /proc/self/limits)
 * with the descriptors open now and a reserve: past the limit, accept() fails and libuv closes the
 * client unanswered (ECONNRESET), so the 503 must come first. Infinity when the limit is unknown.
 */
export function connectionsWithinFdLimit(): number {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (!m || m[1] === 'unlimited') return Infinity;
    return Number(m[1]) - readdirSync('/proc/self/fd').length - FD_RESERVE;
  } catch {
    return Infinity;
  }
}

/**
 * The request's body (undefined when empty), read with plain listeners: an async iterator over the
 * request threw when the client went away mid-body, and the handler's promise had no catcher, so
 * that took the daemon down (an unhandled rejection). Stops reading past MAX_BODY.
 */
function readBody(req: IncomingMessage): Promise<{ body: string | undefined } | 'too-big' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (r: { body: string | undefined } | 'too-big' | 'aborted') => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
      resolve(r);
    };
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) done('too-big');
      else chunks.push(c);
    };
    const text = () => ({ body: chunks.length === 0 ? undefined : Buffer.concat(chunks).toString('utf8') });
    const onEnd = () => done(text());
    const onError = () => done('aborted');
    const onClose = () => done(req.complete ? text() : 'aborted');
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}

/** Creates the directory; removes a stale socket file, refuses when a daemon answers on it or it is not a socket. */
async function prepareSocketPath(path: string): Promise<void> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
  let st;
  try {
    st = lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  if (!st.isSocket()) throw new NfkeeperError(`control socket ${path}: a file that is not a socket is in the way`);
  const live = await new Promise<boolean>((resolve) => {
    const c = createConnection(path);
    c.once('connect', () => { c.destroy(); resolve(true); });
    c.once('error', () => resolve(false));
  });
  if (live) throw new NfkeeperError(`control socket ${path}: another process (a running nfkeeper?) is listening on it`);
  unlinkSync(path);
}
