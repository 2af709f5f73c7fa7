/**
 * Per-node values in one config for every node: `${NAME}` in a string value
 * of the config is replaced by the variable NAME, taken from the env files
 * the config lists (`env: { files: [/run/flannel/subnet.env] }`, re-read on
 * every load, so on every reload) and from the process environment (a pod's
 * downward API, a unit's Environment=). `$${` writes a literal `${`.
 *
 * An unset or empty variable is an error, never an empty string: a rule
 * with a hole in it (`ip daddr  return`) could match far more than meant.
 */
import { readRegularFile } from '../base/regular-file.js';
import { noteFile } from '../base/compile-inputs.js';
import { ConfigError } from '../base/errors.js';

/** Variable names: what a shell accepts. */
export const VAR_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Env files are small (flannel's is ~100 bytes); a bound keeps a wrong path (a log, a device) from being read whole. */
export const MAX_ENV_FILE_BYTES = 64 * 1024;

/**
 * Parses KEY=VALUE lines (flannel's subnet.env, systemd's EnvironmentFile
 * subset): blank lines and `#` comments skipped, an optional `export `,
 * the value optionally in matching single or double quotes, taken as is
 * (no escapes, no expansion). Anything else is a ConfigError at file:line:col.
 */
export function parseEnvFile(text: string, file: string): Map<string, string> {
  const vars = new Map<string, string>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '');
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const m = /^(\s*)(export\s+)?([^=\s]*)\s*=(.*)$/.exec(line);
    if (!m) throw new ConfigError(file, i + 1, 1, 'expected NAME=VALUE');
    const col = m[1]!.length + (m[2]?.length ?? 0) + 1;
    const name = m[3]!;
    if (!VAR_NAME.test(name)) throw new ConfigError(file, i + 1, col, `'${name}' is not a variable name (letters, digits and _, not starting with a digit)`);
    let value = m[4]!.trim();
    const q = value[0];
    if ((q === '"' || q === "'") && value.length >= 2 && value.endsWith(q)) value = value.slice(1, -1);
    else if (q === '"' || q === "'") throw new ConfigError(file, i + 1, line.indexOf(q) + 1, `unterminated ${q === '"' ? 'double' : 'single'} quote`);
    vars.set(name, value);
  });
  return vars;
}

/** Reads an env file; a missing, unreadable or oversized file is a ConfigError naming it and where it was listed. */
export function readEnvFile(path: string, listedAt: { file: string; line: number; col: number }): Map<string, string> {
  let text: string;
  try {
    const bytes = readRegularFile(path, MAX_ENV_FILE_BYTES);
    noteFile(path, bytes);
    text = bytes.toString('utf8');
  } catch (e) {
    throw envFileError(path, listedAt, e as NodeJS.ErrnoException);
  }
  return parseEnvFile(text, path);
}

/**
 * An env file the config lists does not exist (yet): flannel writes its subnet.env once it has a
 * lease, after the node's pods start. `run` waits for it at start-up (src/run.ts).
 */
export class EnvFileMissingError extends ConfigError {
  override name = 'EnvFileMissingError';
  constructor(readonly path: string, listedAt: { file: string; line: number; col: number }, reason: string) {
    super(listedAt.file, listedAt.line, listedAt.col, reason);
  }
}

/** The error for an env file that cannot be read: a missing one is an EnvFileMissingError. */
function envFileError(path: string, listedAt: { file: string; line: number; col: number }, e: NodeJS.ErrnoException): ConfigError {
  const reason = `env.files: ${path}: cannot read: ${e.message}`;
  if (e.code === 'ENOENT') return new EnvFileMissingError(path, listedAt, reason);
  return new ConfigError(listedAt.file, listedAt.line, listedAt.col, reason);
}

export type SubstitutionProblem =
  | { kind: 'unset' | 'empty'; name: string; index: number }
  | { kind: 'syntax'; index: number };

/**
 * Replaces every `${NAME}` in `value`; `$${` stands for a literal `${`, and a
 * `$` not followed by `{` is left alone. Returns the new string, or the first
 * problem with its index in `value`.
 */
export function substitute(value: string, lookup: (name: string) => string | undefined):
  { value: string; names: string[] } | { problem: SubstitutionProblem } {
  let out = '';
  const names: string[] = [];
  let i = 0;
  while (i < value.length) {
    const at = value.indexOf('$', i);
    if (at < 0) break;
    out += value.slice(i, at);
    if (value.startsWith('$${', at)) {
      out += '${';
      i = at + 3;
      continue;
    }
    if (value[at + 1] !== '{') {
      out += '$';
      i = at + 1;
      continue;
    }
    const end = value.indexOf('}', at + 2);
    const name = end < 0 ? '' : value.slice(at + 2, end);
    if (end < 0 || !VAR_NAME.test(name)) return { problem: { kind: 'syntax', index: at } };
    const v = lookup(name);
    if (v === undefined) return { problem: { kind: 'unset', name, index: at } };
    if (v === '') return { problem: { kind: 'empty', name, index: at } };
    out += v;
    names.push(name);
    i = end + 1;
  }
  return { value: out + value.slice(i), names };
}

/** The message for a substitution problem. */
export function describeProblem(p: SubstitutionProblem, sources: string): string {
  if (p.kind === 'syntax') return '`${` starts a variable: write ${NAME} (letters, digits, _), or $${ for a literal ${';
  if (p.kind === 'empty') return `variable ${p.name} is set but empty (${sources})`;
  return `variable ${p.name} is not set (${sources})`;
}
