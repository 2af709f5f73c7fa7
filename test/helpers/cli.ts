/**
 * The `nfkeeper` command line in this process, with its output captured.
 *
 *   import { cli } from '../helpers/cli.js';
 *   const r = await cli('apply', '--config', file, '--netns', ns.path);
 *   expect(r.code).toBe(0);  // r.out and r.err: the lines written, joined with '\n'
 *
 * For a daemon (`run`) as a real child process, spawn bin/nfkeeper.js instead.
 */
import { main } from '../../src/cli.js';

export interface CliResult {
  code: number;
  out: string;
  err: string;
}

export async function cli(...args: string[]): Promise<CliResult> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'nfkeeper', ...args], { out: (s) => out.push(s), err: (s) => err.push(s) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}
