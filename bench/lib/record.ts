/**
 * Where a benchmark's daemon keeps its restart record: the namespace's own directory, removed
 * with the namespace (bench/lib/netns.ts), never the machine's /run/nfkeeper. A build from
 * before the restart record (an A/B's older side) takes no such flag.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const help = new Map<string, string>();
const runHelp = (root: string): string => {
  let text = help.get(root);
  if (text === undefined) help.set(root, text = spawnSync(process.execPath, [join(root, 'bin', 'nfkeeper.js'), 'run', '--help'], { encoding: 'utf8' }).stdout);
  return text;
};

/** Whether the build at `root` has `run --record-dir` (asked once per root). */
export function takesRecord(root: string): boolean {
  return runHelp(root).includes('--record-dir');
}

/** Whether the build at `root` keeps its compile cache apart from the record (`run --cache-dir`). */
export function takesCacheDir(root: string): boolean {
  return runHelp(root).includes('--cache-dir');
}

/**
 * `--record-dir` for a daemon of `root` run against `ns`, unless `extra` already chooses; and
 * `--cache-dir` the same directory (a build that has it), so the compile cache is the namespace's too.
 */
export function recordArgs(root: string, ns: { record: string }, extra: readonly string[] = []): string[] {
  const cache = extra.includes('--cache-dir') || extra.includes('--no-cache-dir') || !takesCacheDir(root) ? [] : ['--cache-dir', ns.record];
  if (extra.includes('--record-dir') || extra.includes('--no-record') || !takesRecord(root)) return cache;
  return ['--record-dir', ns.record, ...cache];
}
