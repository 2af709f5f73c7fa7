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
import { ID_RE, ID_RULE } from './config.js';

export class LiveSetError extends NfkeeperError {
  override name = 'LiveSetError';
}

export type LiveSource = { file: string } | { command: string[] };

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
