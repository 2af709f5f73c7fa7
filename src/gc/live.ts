/**
 * The live set: the ids whose rules must stay. It comes from a JSON file or
 * a command's JSON output, and must be a JSON array of valid ids. Any doubt
 * (unreadable, not JSON, not an array of strings, a bad id, a failing
 * command) is an error, never an empty set: a wrong live set would delete
 * live rules.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { NfkeeperError } from '../base/errors.js';
import { ID_RE, ID_RULE } from '../config/gc.js';

export class LiveSetError extends NfkeeperError {
  override name = 'LiveSetError';
}

export interface NomadSource {
  address: string;
  tokenFile?: string;
  namespace: string;
}

export interface CniCacheSource {
  /** libcni's cache directory (the runtime's cacheDir; /var/lib/cni by default). */
  cacheDir: string;
}

export type LiveSource = { file: string } | { command: string[] } | { nomad: NomadSource } | { cni: CniCacheSource };

/** Parses a live set from JSON text; `from` names the source in errors. */
export function parseLiveSet(text: string, from: string): Set<string> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new LiveSetError(`live set ${from}: not JSON (${(e as Error).message})`);
  }
  if (!Array.isArray(v)) throw new LiveSetError(`live set ${from}: must be a JSON array of ids, not ${v === null ? 'null' : typeof v}`);
  const out = new Set<string>();
  v.forEach((id, i) => {
    if (typeof id !== 'string') throw new LiveSetError(`live set ${from}: element ${i} is ${typeof id}, not a string id`);
    if (!ID_RE.test(id)) throw new LiveSetError(`live set ${from}: element ${i} ${JSON.stringify(id.slice(0, 140))} is not a valid id (${ID_RULE})`);
    out.add(id);
  });
  return out;
}

const COMMAND_TIMEOUT_MS = 30_000;

export async function readLiveSet(src: LiveSource): Promise<Set<string>> {
  if ('nomad' in src) return readNomadAllocations(src.nomad);
  if ('cni' in src) return readCniCache(src.cni);
  if ('file' in src) {
    let text: string;
    try {
      text = await readFile(src.file, 'utf8');
    } catch (e) {
      throw new LiveSetError(`live set ${src.file}: cannot read: ${(e as Error).message}`);
    }
    return parseLiveSet(text, src.file);
  }
  const [cmd, ...args] = src.command as [string, ...string[]];
  const name = `command '${src.command.join(' ')}'`;
  const stdout = await new Promise<string>((resolve, reject) => {
    execFile(cmd, args, { timeout: COMMAND_TIMEOUT_MS, maxBuffer: 64 << 20, encoding: 'utf8' }, (err, out, errText) => {
      if (err) reject(new LiveSetError(`live set ${name} failed: ${err.message.split('\n')[0]}${errText ? `: ${errText.trim().slice(0, 500)}` : ''}`));
      else resolve(out);
    });
  });
  return parseLiveSet(stdout, name);
}

/** Allocations in these client states are over: their networks should be gone. */
const TERMINAL = new Set(['complete', 'failed', 'lost']);
const NOMAD_TIMEOUT_MS = 30_000;
const NOMAD_MAX_BYTES = 256 << 20;

/**
 * The live allocation ids from a Nomad agent: GET /v1/allocations (all
 * namespaces by default, task states left out), every allocation whose
 * ClientStatus is not terminal. Allocations of other nodes are in the set
 * too; their ids never tag this node's rules, so they change nothing.
 * An HTTP error, a time-out or a reply that is not a list of allocations is
 * a LiveSetError, never an empty set.
 */
export async function readNomadAllocations(o: NomadSource): Promise<Set<string>> {
  const url = new URL('/v1/allocations', o.address);
  url.searchParams.set('namespace', o.namespace);
  url.searchParams.set('task_states', 'false');
  const from = `nomad ${url.origin}`;
  let token = process.env.NOMAD_TOKEN;
  if (o.tokenFile !== undefined) {
    try {
      token = (await readFile(o.tokenFile, 'utf8')).trim();
    } catch (e) {
      throw new LiveSetError(`live set ${from}: token file ${o.tokenFile}: cannot read: ${(e as Error).message}`);
    }
  }
  let text: string;
  try {
    const res = await fetch(url, { headers: token ? { 'X-Nomad-Token': token } : {}, signal: AbortSignal.timeout(NOMAD_TIMEOUT_MS) });
    text = await res.text();
    if (!res.ok) throw new Error(`HTTP ${res.status}${text ? `: ${text.trim().slice(0, 200)}` : ''}${res.status === 403 ? ' (the token needs read-job in the namespaces listed)' : ''}`);
    if (text.length > NOMAD_MAX_BYTES) throw new Error(`reply larger than ${NOMAD_MAX_BYTES} bytes`);
  } catch (e) {
    const cause = (e as { cause?: Error }).cause;
    throw new LiveSetError(`live set ${from}: GET ${url.pathname} failed: ${(e as Error).message}${cause ? ` (${cause.message})` : ''}`);
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new LiveSetError(`live set ${from}: not JSON (${(e as Error).message})`);
  }
  if (!Array.isArray(v)) throw new LiveSetError(`live set ${from}: /v1/allocations must be a JSON array, not ${v === null ? 'null' : typeof v}`);
  const out = new Set<string>();
  v.forEach((a: unknown, i) => {
    const alloc = a as { ID?: unknown; ClientStatus?: unknown } | null;
    if (typeof alloc?.ID !== 'string' || !ID_RE.test(alloc.ID)) {
      throw new LiveSetError(`live set ${from}: allocation ${i} has no valid ID (${ID_RULE})`);
    }
    // An unknown or missing status counts as live: only a known terminal state lets rules go.
    if (typeof alloc.ClientStatus === 'string' && TERMINAL.has(alloc.ClientStatus)) return;
    out.add(alloc.ID);
  });
  return out;
}

/** statfs(2)'s f_type of the namespace filesystem: what a live network namespace file is on. */
const NSFS_MAGIC = 0x6e736673;

/**
 * The live container ids from libcni's result cache: every
 * `<cacheDir>/results/<network>-<id>-<ifname>` record (cniCacheV1) whose
 * container still has its network namespace. libcni writes the record after
 * a successful ADD and removes it after DEL; a container that died without
 * a DEL keeps its record, so the record alone is not enough: the namespace
 * file it names (`netns`, written by libcni 1.1 and later) must still be a
 * namespace (nsfs). A record without `netns` counts as live. A missing
 * cache directory, an unreadable or malformed record, or a namespace file
 * that cannot be examined is a LiveSetError, never a smaller set.
 */
export async function readCniCache(o: CniCacheSource): Promise<Set<string>> {
  const from = `cni cache ${o.cacheDir}`;
  const dir = join(o.cacheDir, 'results');
  let names: string[];
  try {
    await readdir(o.cacheDir);
    names = await readdir(dir).catch((e: NodeJS.ErrnoException) => {
      // libcni makes results/ on the first ADD: none yet means no container was ever set up.
      if (e.code === 'ENOENT') return [];
      throw e;
    });
  } catch (e) {
    throw new LiveSetError(`live set ${from}: cannot read: ${(e as Error).message}`);
  }
  const out = new Set<string>();
  for (const name of names.sort()) {
    const file = join(dir, name);
    let rec: { kind?: unknown; containerId?: unknown; netns?: unknown };
    try {
      rec = JSON.parse(await readFile(file, 'utf8')) as typeof rec;
    } catch (e) {
      throw new LiveSetError(`live set ${from}: ${file}: cannot read a cache record: ${(e as Error).message}`);
    }
    if (rec?.kind !== 'cniCacheV1') throw new LiveSetError(`live set ${from}: ${file}: not a libcni cache record (kind ${JSON.stringify(rec?.kind)}, expected "cniCacheV1")`);
    if (typeof rec.containerId !== 'string' || !ID_RE.test(rec.containerId)) {
      throw new LiveSetError(`live set ${from}: ${file}: containerId is not a valid id (${ID_RULE})`);
    }
    if (rec.netns !== undefined && typeof rec.netns !== 'string') throw new LiveSetError(`live set ${from}: ${file}: netns is not a path`);
    if (rec.netns !== undefined && rec.netns !== '') {
      try {
        if ((await statfs(rec.netns)).type !== NSFS_MAGIC) continue;  // a plain file left where a namespace was mounted
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw new LiveSetError(`live set ${from}: ${file}: cannot examine its netns ${rec.netns}: ${(e as Error).message}`);
      }
    }
    out.add(rec.containerId);
  }
  return out;
}
