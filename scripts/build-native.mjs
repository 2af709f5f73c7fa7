#!/usr/bin/env node
// Builds the native addon with node-gyp. Runs as the npm "install" script, so
// a missing system library is reported here in words, not as a compiler error.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const force = process.argv.includes('--force');
const addon = join(root, 'build', 'Release', 'nfkeeper.node');

function newestSource() {
  const files = [join(root, 'binding.gyp'), ...readdirSync(join(root, 'native')).map((f) => join(root, 'native', f))];
  return Math.max(...files.map((f) => statSync(f).mtimeMs));
}

if (!force && existsSync(addon) && statSync(addon).mtimeMs >= newestSource()) {
  process.exit(0);
}

const pc = spawnSync('pkg-config', ['--exists', 'libnftnl', 'libmnl']);
if (pc.error || pc.status !== 0) {
  console.error(`
nfkeeper: cannot build the native addon: libnftnl and libmnl development files were not found
(pkg-config --exists libnftnl libmnl failed). Install them, then run 'npm run build:native':
  Debian/Ubuntu:  apt-get install libnftnl-dev libmnl-dev pkg-config g++ make python3
  Fedora/RHEL:    dnf install libnftnl-devel libmnl-devel pkgconf-pkg-config gcc-c++ make python3
`);
  process.exit(1);
}

// npm hands install scripts its own node-gyp; fall back to ours.
const candidates = [
  process.env.npm_config_node_gyp,
  join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
].filter(Boolean);
const gyp = candidates.find((p) => existsSync(p));
if (!gyp) {
  console.error('nfkeeper: node-gyp not found; run npm install first');
  process.exit(1);
}
const args = [gyp, 'rebuild', '-j', '2'];
// Use the headers that ship with this Node when present, instead of downloading them.
if (!process.env.npm_config_nodedir && existsSync('/usr/include/node/node_api.h')) args.push('--nodedir=/usr');
const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
