#!/usr/bin/env node
// Fills the package's own code cache, dist/code-cache (bin/nfkeeper.js reads it where a command has
// no entry of its own): V8's code for the bundle (dist/nfkeeper.script.js) as it stands after a command
// ran, for the Node that runs this, one entry for each set of V8 flags bin/nfkeeper.js gives a
// command (the config commands', none as for export, and run's) and one for the client commands'
// script (dist/nfkeeper.client.script.js: status, events, owner, reload). `npm run build` and
// the package's install script run it, so that an image whose file system is read-only at run
// time, or a first start, neither parses the bundle nor compiles again what it runs. What runs
// for each set needs no kernel, no daemon and no privilege: validate of an example config, for
// the set without flags a completion script, and for the client commands status asking a socket
// where no daemon is. Whoever runs the package
// (the image's user too) may read the entries: V8 refuses one made for another Node. Never fails:
// without the cache nfkeeper is only slower to start.
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'dist', 'code-cache');
if (!existsSync(join(root, 'dist', 'nfkeeper.script.js'))) process.exit(0);
try {
  // The last build's entries are for another bundle.
  rmSync(dir, { recursive: true, force: true });
  const example = join(root, 'examples', 'flannel.yaml');
  const validate = ['validate', '--config', example];
  const runs = {
    config: validate,
    plain: ['completion', 'bash'],
    client: ['status', '--socket', join(dir, 'none.sock'), '--metrics', '127.0.0.1:0'],
    run: validate,
  };
  const env = { ...process.env };
  delete env.NODE_COMPILE_CACHE;
  delete env.NODE_DISABLE_COMPILE_CACHE;
  for (const [set, args] of Object.entries(runs)) {
    const r = spawnSync(process.execPath, [join(root, 'bin', 'nfkeeper.js'), ...args], { env: { ...env, NFKEEPER_FILL_CODE_CACHE: set }, encoding: 'utf8' });
    if (r.error || r.signal) throw new Error(`${set}: ${(r.stderr || r.error?.message || `signal ${r.signal}`).trim().split('\n')[0]}`);
  }
} catch (e) {
  console.error(`nfkeeper: no code cache in ${dir} (${e.message}); commands start slower`);
}
