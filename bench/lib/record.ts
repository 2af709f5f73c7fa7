/**
 * Where a benchmark's daemon keeps its restart record: the namespace's own directory, removed
 * with the namespace (bench/lib/netns.ts), never the machine's /run/nfkeeper. A build from
 * before the restart record (an A/B's older side) takes no such flag.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const known = new Map<string, boolean>();

/** Whether the build at `root` has `run --record-dir` (asked once per root). */
export function takesRecord(root: string): boolean {
  let yes = known.get(root);
  if (yes === undefined) {
    yes = spawnSync(process.execPath, [join(root, 'bin', 'nfkeeper.js'), 'run', '--help'], { encoding: 'utf8' }).stdout.includes('--record-dir');
    known.set(root, yes);
  }
  return yes;
}

/** `--record-dir` for a daemon of `root` run against `ns`, unless `extra` already chooses. */
export function recordArgs(root: string, ns: { record: string }, extra: readonly string[] = []): string[] {
  if (extra.includes('--record-dir') || extra.includes('--no-record') || !takesRecord(root)) return [];
  return ['--record-dir', ns.record];
}
