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

// --if-no-prebuild (the npm install script): a prebuilt addon for this
// platform, arch and libc that loads here is all an install needs. When none
// fits (or npm was asked for --build-from-source), say so and build.
if (process.argv.includes('--if-no-prebuild')) {
  const libc = process.report.getReport().header.glibcVersionRuntime ? 'glibc' : 'musl';
  const target = `${process.platform}-${process.arch} (${libc})`;
  const prebuilt = join(root, 'prebuilds', `${process.platform}-${process.arch}`, `nfkeeper.${libc}.node`);
  const fromSource = /^(true|1)$/.test(process.env.npm_config_build_from_source ?? '');
  let why;
  if (fromSource) {
    why = 'building from source as asked (--build-from-source)';
  } else if (!existsSync(prebuilt)) {
    why = `no prebuilt addon for ${target} in this package; building it from source`;
  } else {
    const probe = spawnSync(process.execPath, ['-e', `process.dlopen({ exports: {} }, ${JSON.stringify(prebuilt)})`], { encoding: 'utf8' });
    if (probe.status === 0) process.exit(0);
    why = `the prebuilt addon for ${target} does not load here (${(probe.stderr.split('\n').find((l) => /Error:/.test(l)) ?? '').trim()}); building it from source`;
  }
  console.error(`nfkeeper: ${why}`);
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
// Use the headers that ship with this Node when present (nodejs.org's builds and the npm registry's
// node-linux-* packages carry include/node beside bin/; Debian's nodejs has them in /usr), instead
// of downloading them.
const nodedir = [join(dirname(process.execPath), '..'), '/usr'].find((d) => existsSync(join(d, 'include', 'node', 'node_api.h')));
if (!process.env.npm_config_nodedir && nodedir) args.push(`--nodedir=${nodedir}`);
const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
