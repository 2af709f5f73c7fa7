#!/usr/bin/env node
// Builds the prebuilt addon the npm package ships (run by `prepack`):
//   prebuilds/<platform>-<arch>/nfkeeper.<libc>.node
//   prebuilds/<platform>-<arch>/<libc>/libnftnl.so.N, libmnl.so.N (+ their copyright files)
// The addon's RUNPATH is $ORIGIN/<libc>, so it finds the two libraries beside
// it and a node needs neither -dev packages nor libnftnl/libmnl installed.
// Why bundled shared objects and not static linking: Debian ships libnftnl.a
// built without -fPIC (it cannot go into a shared object) and no libmnl.a at all.
// Builds for this machine's platform, arch and libc; `--arch arm64` cross-builds linux-arm64
// (glibc) on x64 with Debian's g++-aarch64-linux-gnu against arm64 libnftnl/libmnl unpacked by
// scripts/sysroot.sh, and proves the load with the npm registry's arm64 Node under qemu-aarch64.
// The result is cached under node_modules/.cache/nfkeeper/, keyed by the sources and library versions.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, renameSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const arch = process.argv.includes('--arch') ? process.argv[process.argv.indexOf('--arch') + 1] : process.arch;
const target = `${process.platform}-${arch}`;
const say = (s) => process.stderr.write(`nfkeeper prebuild: ${s}\n`);

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.status !== 0) {
    if (opts.stdio !== 'inherit') process.stderr.write((r.stdout ?? '') + (r.stderr ?? ''));
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`})`);
  }
  return r.stdout;
}

// A cross build: its compiler, the arm64 libraries, and the Node whose headers it builds with
// and which loads the result under qemu.
const cross = arch === process.arch ? undefined : crossSetup();
const libc = cross ? 'glibc' : process.report.getReport().header.glibcVersionRuntime ? 'glibc' : 'musl';
const buildEnv = { ...process.env, ...cross?.env };
const tool = (name) => `${cross?.prefix ?? ''}${name}`;

function crossSetup() {
  if (`${process.platform}-${process.arch}` !== 'linux-x64' || arch !== 'arm64') {
    throw new Error(`cannot cross-build ${target} on ${process.platform}-${process.arch} (linux-arm64 on linux-x64 only)`);
  }
  const prefix = 'aarch64-linux-gnu-';
  if (spawnSync(`${prefix}g++`, ['--version']).status !== 0) {
    throw new Error(`${prefix}g++ not found: apt-get install g++-aarch64-linux-gnu qemu-user (scripts/setup.sh installs them)`);
  }
  const sysroot = run('bash', [join(root, 'scripts', 'sysroot.sh'), arch]).trim();
  const node = run('bash', [join(root, 'scripts', 'node.sh'), '24', arch]).trim();
  return {
    prefix, sysroot, node,
    // The loader, libc and libstdc++ for qemu: the cross compiler's own arm64 root.
    qemu: ['qemu-aarch64', '-L', '/usr/aarch64-linux-gnu', join(node, 'bin', 'node')],
    env: {
      CC: `${prefix}gcc`, CXX: `${prefix}g++`,
      // The sysroot's kernel headers before the cross compiler's older ones.
      CXXFLAGS: `-isystem ${sysroot}/usr/include/aarch64-linux-gnu`,
      PKG_CONFIG_LIBDIR: `${sysroot}/usr/lib/aarch64-linux-gnu/pkgconfig`, PKG_CONFIG_SYSROOT_DIR: sysroot,
    },
  };
}

const sources = ['binding.gyp', ...readdirSync(join(root, 'native')).filter((f) => statSync(join(root, 'native', f)).isFile()).map((f) => `native/${f}`)].sort();
const hash = createHash('sha256');
hash.update(`v3 ${target} ${libc} ${process.versions.napi}\n`);
for (const f of sources) hash.update(`${f}\n`).update(readFileSync(join(root, f)));
hash.update(readFileSync(join(root, 'node_modules', 'node-addon-api', 'package.json')));
hash.update(run('pkg-config', ['--modversion', 'libnftnl', 'libmnl'], { env: buildEnv }));
const key = hash.digest('hex').slice(0, 16);
// Not under build/: node-gyp rebuild (npm run build:native) deletes all of build/.
const cached = join(root, 'node_modules', '.cache', 'nfkeeper', 'prebuild', `${target}-${libc}-${key}`);

if (!existsSync(join(cached, 'done'))) {
  const stage = join(root, 'node_modules', '.cache', 'nfkeeper', `prebuild-stage-${process.pid}`);
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(join(stage, 'native'), { recursive: true });
  for (const f of sources) cpSync(join(root, f), join(stage, f));
  say(`building the addon for ${target} (${libc})`);
  const gyp = join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  const args = [gyp, 'rebuild', '-j', '2'];
  // The headers of the Node that loads the result (see build-native.mjs).
  const nodedir = cross ? [cross.node] : [join(dirname(process.execPath), '..'), '/usr'];
  const headers = nodedir.find((d) => existsSync(join(d, 'include', 'node', 'node_api.h')));
  if (cross) args.push(`--arch=${arch}`);
  // Through the environment: under `npm pack`, npm exports the user's nodedir setting as
  // npm_config_nodedir, which node-gyp prefers to a --nodedir on its command line.
  run(process.execPath, args, { cwd: stage, stdio: 'inherit',
    env: { ...buildEnv, ...(headers && { npm_config_nodedir: headers }), NFKEEPER_PREBUILD: '1', NFKEEPER_LIBC: libc, NFKEEPER_SANITIZE: '' } });
  const built = join(stage, 'build', 'Release', 'nfkeeper.node');
  const out = `${cached}.tmp-${process.pid}`;
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, libc), { recursive: true });
  cpSync(built, join(out, `nfkeeper.${libc}.node`));
  run(tool('strip'), ['--strip-unneeded', join(out, `nfkeeper.${libc}.node`)]);
  // The libraries the addon was linked against, as the loader resolves them here (ldd), or for a
  // cross build, its NEEDED entries found in the sysroot.
  const ldd = cross ? run('readelf', ['-d', built]).replace(/.*\(NEEDED\).*\[(\S+)\].*/g,
    (_, so) => `${so} => ${cross.sysroot}/usr/lib/aarch64-linux-gnu/${so}`) : run('ldd', [built]);
  for (const lib of ['libnftnl', 'libmnl']) {
    const m = new RegExp(`(${lib}\\.so\\.\\d+) => (\\S+)`).exec(ldd);
    if (!m) throw new Error(`ldd finds no ${lib} in the addon:\n${ldd}`);
    // copyFileSync follows the symlink; cpSync with dereference refuses it on Node 22 and 24.
    copyFileSync(m[2], join(out, libc, m[1]));
    // The licence travels with the binary (libnftnl GPL-2.0-or-later, libmnl LGPL-2.1-or-later).
    // dpkg knows the library by its /usr path (Debian's /lib is a symlink to /usr/lib); the
    // sysroot holds each package's doc directory, named after the so-version (libnftnl11).
    let copyright;
    if (cross) {
      copyright = `${cross.sysroot}/usr/share/doc/${m[1].replace(/\.so\./, '')}/copyright`;
    } else {
      const dpkg = spawnSync('dpkg', ['-S', m[2].replace(/^\/lib\//, '/usr/lib/')], { encoding: 'utf8' });
      if (dpkg.status === 0) copyright = `/usr/share/doc/${dpkg.stdout.split(':')[0]}/copyright`;
    }
    if (copyright && existsSync(copyright)) cpSync(copyright, join(out, libc, `${m[1]}.copyright`));
    else if (cross) throw new Error(`no copyright file for ${m[1]} in the sysroot (${copyright})`);
  }
  // Proof that it loads from its own directory with nothing from the build environment (the
  // cross build's qemu root has no libnftnl or libmnl: they can only come from beside it).
  const [node, ...nodeArgs] = cross ? cross.qemu : [process.execPath];
  run(node, [...nodeArgs, '-e', `process.dlopen({ exports: {} }, ${JSON.stringify(join(out, `nfkeeper.${libc}.node`))})`],
    { env: { PATH: process.env.PATH } });
  if (cross) {
    const dynamic = run('readelf', ['-d', join(out, `nfkeeper.${libc}.node`)]);
    if (!dynamic.includes(`Library runpath: [$ORIGIN/${libc}]`)) throw new Error(`the prebuilt addon's RUNPATH is not $ORIGIN/${libc}:\n${dynamic}`);
  } else {
    const ldd2 = run('ldd', [join(out, `nfkeeper.${libc}.node`)]);
    for (const lib of ['libnftnl', 'libmnl']) {
      if (!new RegExp(`${lib}\\.so\\.\\d+ => ${join(out, libc).replaceAll('.', '\\.')}/`).test(ldd2)) {
        throw new Error(`the prebuilt addon does not resolve ${lib} beside itself:\n${ldd2}`);
      }
    }
  }
  cpSync(join(root, 'package.json'), join(out, 'done'));
  // A finished entry is never removed: another build may be copying it. If one
  // appeared while this one built, it holds the same bytes; keep it.
  try {
    renameSync(out, cached);
  } catch (e) {
    if (!existsSync(join(cached, 'done'))) throw e;
    rmSync(out, { recursive: true, force: true });
  }
  rmSync(stage, { recursive: true, force: true });
} else {
  say(`using the cached build ${basename(cached)}`);
}

const dest = join(root, 'prebuilds', target);
rmSync(dest, { recursive: true, force: true });
mkdirSync(dest, { recursive: true });
cpSync(cached, dest, { recursive: true, filter: (src) => basename(src) !== 'done' });
say(`prebuilds/${target}: ${readdirSync(dest, { recursive: true }).join(', ')}`);
