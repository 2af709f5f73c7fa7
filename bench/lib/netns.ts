/**
 * Throwaway network namespaces for benchmarks. Never the root namespace:
 * every write goes into a namespace made here and removed afterwards, also
 * when the run fails or is interrupted. Removal is the tests' removeNetns():
 * retried while the namespace file is busy, and said on stderr when it fails.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { recordDirOf, removeNetns } from '../../test/helpers/netns.js';

export interface BenchNetns {
  name: string;
  path: string;
  /** Runs a program inside the namespace; throws with its stderr on failure. */
  exec(cmd: string, args: string[], input?: string): string;
  /** The --record-dir for a daemon run against this namespace, removed with it (test/helpers/netns.ts). */
  record: string;
  remove(): void;
}

const live = new Set<BenchNetns>();
let hooked = false;

function hookSignals(): void {
  if (hooked) return;
  hooked = true;
  const cleanup = () => {
    for (const ns of live) ns.remove();
  };
  process.on('exit', cleanup);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      cleanup();
      process.exit(130);
    });
  }
}

export function createBenchNetns(tag: string): BenchNetns {
  hookSignals();
  // NFK_BENCH_NETNS_PREFIX: a session that may only touch namespaces of its own prefix says it here.
  const name = `${process.env.NFK_BENCH_NETNS_PREFIX ?? 'nfk-bench'}-${process.pid}-${tag}`;
  execFileSync('ip', ['netns', 'add', name]);
  const ns: BenchNetns = {
    name,
    path: `/run/netns/${name}`,
    record: recordDirOf(name),
    exec(cmd, args, input) {
      const r = spawnSync('ip', ['netns', 'exec', name, cmd, ...args], { input, encoding: 'utf8', maxBuffer: 1 << 30 });
      if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed in ${name} (${r.status}): ${r.stderr || r.error}`);
      return r.stdout;
    },
    remove() {
      if (!live.has(ns)) return;
      live.delete(ns);
      removeNetns(name);
    },
  };
  live.add(ns);
  return ns;
}

export async function withBenchNetns<T>(tag: string, fn: (ns: BenchNetns) => Promise<T>): Promise<T> {
  const ns = createBenchNetns(tag);
  try {
    return await fn(ns);
  } finally {
    ns.remove();
  }
}
