/** Runs the real CLI in a child process (test/cli/entry.ts through tsx) and collects what it prints. */
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../helpers/tmp.js';

const ENTRY = fileURLToPath(new URL('./entry.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Running {
  child: ChildProcess;
  out: string[];
  err: string[];
  /** Resolves when the process exits: its code, and milliseconds from spawn to exit. */
  exited: Promise<{ code: number | null; ms: number }>;
  /** stdout lines parsed as JSON (the daemon's log). */
  logs(): Record<string, unknown>[];
}

export function nfk(args: string[], o: { asNobody?: boolean; env?: NodeJS.ProcessEnv } = {}): Running {
  // A daemon's restart record goes to a directory of the test's, not the machine's /run/nfkeeper
  // (where every test namespace would leave one), unless the test chooses.
  if (args[0] === 'run' && !args.includes('--record-dir') && !args.includes('--no-record') && !o.asNobody) args = [...args, '--record-dir', join(tempDir('record'), 'run')];
  const node = [process.execPath, '--import', 'tsx', ENTRY, ...args];
  const [cmd, ...argv] = o.asNobody ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', ...node] : node;
  const t0 = performance.now();
  const child = spawn(cmd!, argv, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...o.env } });
  const out: string[] = [];
  const err: string[] = [];
  let outBuf = '';
  child.stdout!.on('data', (d: Buffer) => {
    outBuf += d.toString();
    const lines = outBuf.split('\n');
    outBuf = lines.pop()!;
    out.push(...lines);
  });
  child.stderr!.on('data', (d: Buffer) => err.push(...d.toString().split('\n').filter(Boolean)));
  const exited = new Promise<{ code: number | null; ms: number }>((resolve) => child.on('exit', (code) => {
    if (outBuf) out.push(outBuf);
    resolve({ code, ms: performance.now() - t0 });
  }));
  return {
    child, out, err, exited,
    logs: () => out.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

/** Runs to the end; kills it (and fails the caller's expectation) after `timeoutMs`. */
export async function nfkDone(args: string[], o: { asNobody?: boolean; timeoutMs?: number } = {}) {
  const r = nfk(args, o);
  // Generous: a tsx start is slow on a loaded shared machine (docs/notes/2026-12-04-code-comment-figures.md).
  const timer = setTimeout(() => r.child.kill('SIGKILL'), o.timeoutMs ?? 90_000);
  const { code, ms } = await r.exited;
  clearTimeout(timer);
  return { code, ms, out: r.out, err: r.err };
}

export async function waitFor(what: string, f: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const t0 = performance.now();
  while (!(await f())) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export { rawCall } from '../helpers/http.js';
