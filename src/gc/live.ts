/**
 * The live set: the ids whose rules must stay. It comes from a JSON file or
 * a command's JSON output, and must be a JSON array of valid ids. Any doubt
 * (unreadable, not JSON, not an array of strings, a bad id, a failing
 * command) is an error, never an empty set: a wrong live set would delete
 * live rules.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { NfkeeperError } from '../errors.js';
import { ID_RE, ID_RULE } from '../config/gc.js';

export class LiveSetError extends NfkeeperError {
  override name = 'LiveSetError';
}

export interface NomadSource {
  address: string;
  tokenFile?: string;
  namespace: string;
}

export type LiveSource = { file: string } | { command: string[] } | { nomad: NomadSource };

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
