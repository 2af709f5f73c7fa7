/**
 * A neighbour in a process of its own (test/helpers/neighbour-child.ts) committing to a table of its
 * own in a test's namespace, at a rate or as fast as it can: one program for every test and bench
 * that needs a busy node's other writer.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('./neighbour-child.ts', import.meta.url));

export interface Neighbour {
  /** Stops it (SIGTERM): its commits and the commits the kernel refused it. Again: the same figures. */
  stop(): Promise<{ commits: number; failed: number }>;
  /** Ends it at once (SIGKILL), for a clean-up. */
  kill(): void;
}

/** Starts a neighbour committing `rate` times a second (or as fast as it can) to `ip TABLE`; resolves once its socket is open. */
export async function startNeighbour(nsPath: string, rate: number | 'max' = 'max', table = 'neighbour'): Promise<Neighbour> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, nsPath, String(rate), table], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.value !== 'ready') {
    child.kill('SIGKILL');
    throw new Error(`the neighbour did not start (exit ${child.exitCode}): ${String(first.value)}`);
  }
  let stopped: Promise<{ commits: number; failed: number }> | undefined;
  return {
    stop: () => stopped ??= (async () => {
      child.kill('SIGTERM');
      const last = await lines.next();
      if (last.done) throw new Error(`the neighbour ended without its counts (exit ${child.exitCode}, signal ${child.signalCode})`);
      const [commits, failed] = String(last.value).split(' ').map(Number);
      return { commits: commits!, failed: failed! };
    })(),
    kill: () => { child.kill('SIGKILL'); },
  };
}
