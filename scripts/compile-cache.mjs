#!/usr/bin/env node
// Fills the package's own compile cache, dist/compile-cache (bin/nfkeeper.js uses it before any
// other): V8's code for every chunk of the bundle, for the Node that runs this and the user it
// runs as, under each set of V8 flags bin/nfkeeper.js gives a command (the config commands',
// none as for export and status, and run's: one command of each below). `npm run build` and the
// package's install script run it, so that an image whose file system is read-only at run time,
// or a first start, does not compile the bundle. The cache is bound to the Node version; another
// Node (or user) finds no entry of its own there and uses its own cache directory
// (bin/nfkeeper.js). Never fails: without the cache nfkeeper is only slower to start.
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'dist', 'compile-cache');
if (!existsSync(join(root, 'dist', 'nfkeeper.mjs'))) process.exit(0);
try {
  // The last build's entries name chunks that are gone.
  rmSync(dir, { recursive: true, force: true });
  const env = { ...process.env, NFKEEPER_FILL_COMPILE_CACHE: '1' };
  delete env.NODE_COMPILE_CACHE;
  delete env.NODE_DISABLE_COMPILE_CACHE;
  for (const command of ['validate', 'export', 'run']) {
    const r = spawnSync(process.execPath, [join(root, 'bin', 'nfkeeper.js'), command], { env, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${command}: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split('\n')[0]}`);
  }
} catch (e) {
  console.error(`nfkeeper: no compile cache in ${dir} (${e.message}); commands start slower`);
}
