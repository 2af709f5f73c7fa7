/**
 * Throwaway network namespaces for tests. Everything a test writes to the
 * kernel goes into one of these; the root namespace's ruleset is never
 * touched (test/global-setup.ts checks that it is the same at the end).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let counter = 0;

/**
 * The test run this process belongs to: test/global-setup.ts sets it to the
 * vitest main process's pid, and forked workers have that process as parent.
 * Names carry it so that a run cleans up only its own leftovers, never the
 * namespaces of another suite running on the same machine.
 */
export const testRunId = process.env.NFK_TEST_RUN ?? String(process.ppid);

export interface Netns {
  name: string;
  /** The namespace file to pass as { netns } to open(). */
  path: string;
  /** Runs a program inside the namespace; throws with its stderr on failure. */
  exec(cmd: string, args: string[], input?: string): string;
  /** nft -f - inside the namespace. */
  nft(script: string): string;
  /**
   * The --record-dir for a daemon run against this namespace: the test's own directory, kept
   * across the daemon's restarts within the test and removed with the namespace, so that no
   * test leaves a restart record in the machine's /run/nfkeeper.
   */
  record: string;
  remove(): void;
}

/** The restart-record directory of the namespace `name` (made by the daemon when it writes one). */
export function recordDirOf(name: string): string {
  return join(tmpdir(), `nfk-record-${name}`);
}

export function createNetns(tag = 't'): Netns {
  const name = `nfk-test-${testRunId}-${process.pid}-${tag}-${++counter}`;
  execFileSync('ip', ['netns', 'add', name]);
  const exec = (cmd: string, args: string[], input?: string): string => {
    const r = spawnSync('ip', ['netns', 'exec', name, cmd, ...args], {
      input, encoding: 'utf8', maxBuffer: 1 << 28,
    });
    if (r.status !== 0) {
      throw new Error(`${cmd} ${args.join(' ')} failed in ${name} (${r.status}): ${r.stderr || r.error}`);
    }
    return r.stdout;
  };
  return {
    name,
    path: `/run/netns/${name}`,
    exec,
    nft: (script) => exec('nft', ['-f', '-'], script),
    record: recordDirOf(name),
    remove: () => removeNetns(name),
  };
}

/**
 * Deletes a namespace, retrying for a while: while another process's mount
 * namespace still holds a copy of the namespace file (for example an
 * `ip netns exec` that is just exiting), the unlink can fail with EBUSY, and
 * a single attempt left namespaces behind in full suite runs.
 */
export function removeNetns(name: string): boolean {
  rmSync(recordDirOf(name), { recursive: true, force: true });
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = spawnSync('ip', ['netns', 'del', name], { encoding: 'utf8' });
    if (r.status === 0 || /No such file/.test(r.stderr ?? '')) return true;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
  const last = spawnSync('ip', ['netns', 'del', name], { encoding: 'utf8' });
  if (last.status !== 0) process.stderr.write(`could not remove namespace ${name}: ${last.stderr}`);
  return last.status === 0;
}

/** Runs `fn` with a fresh namespace and removes it afterwards, even when `fn` throws. */
export async function withNetns<T>(fn: (ns: Netns) => Promise<T> | T, tag?: string): Promise<T> {
  const ns = createNetns(tag);
  try {
    return await fn(ns);
  } finally {
    ns.remove();
  }
}
