/**
 * Temporary directories that are always removed.
 *
 *   import { tempDir } from '../helpers/tmp.js';
 *   const dir = tempDir('gc');                     // nfk-gc-XXXXXX under the OS temp dir
 *   const sockDir = tempDir('owners', { mode: 0o755 });  // reachable by a dropped-privilege child
 *
 * Where it is removed depends on where it was made:
 * - inside a test (or its beforeEach): when that test finishes (onTestFinished), pass or fail;
 * - anywhere else (a test file's top level, a describe body, beforeAll): after the test file
 *   (an afterAll this module registers on the file that imports it);
 * - outside vitest (a bench, a child process importing a fixture): at process exit.
 * Every directory left is also removed at exit, as a last resort.
 *
 * Every mkdtemp in test/ goes through here; do not call mkdtempSync in a test.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// vitest only where it runs (it sets VITEST): a bench importing a fixture does not load it.
const vitest = process.env.VITEST ? await import('vitest') : undefined;

const made = new Set<string>();

function remove(dir: string): void {
  made.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}

function removeAll(): void {
  for (const dir of [...made]) remove(dir);
}

// This module is imported while vitest collects a test file (imports are static), so the hook
// lands on that file. Outside a test file (a child process inherits VITEST) afterAll throws,
// and the exit hook below does the work.
try {
  vitest?.afterAll(removeAll);
} catch {
  /* not collecting a vitest file */
}
process.on('exit', removeAll);

export function tempDir(tag = 'tmp', options: { mode?: number } = {}): string {
  const dir = mkdtempSync(join(tmpdir(), `nfk-${tag}-`));
  if (options.mode !== undefined) chmodSync(dir, options.mode);
  made.add(dir);
  try {
    vitest?.onTestFinished(() => remove(dir));
  } catch {
    /* made outside a running test: removed after the file, or at exit */
  }
  return dir;
}
