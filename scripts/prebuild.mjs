#!/usr/bin/env node
// Builds the prebuilt addon the npm package ships (run by `prepack`):
//   prebuilds/<platform>-<arch>/nfkeeper.<libc>.node
//   prebuilds/<platform>-<arch>/<libc>/libnftnl.so.N, libmnl.so.N (+ their copyright files)
// The addon's RUNPATH is $ORIGIN/<libc>, so it finds the two libraries beside
// it and a node needs neither -dev packages nor libnftnl/libmnl installed.
// Why bundled shared objects and not static linking: Debian ships libnftnl.a
// built without -fPIC (it cannot go into a shared object) and no libmnl.a at all.
// Builds for this machine's platform, arch and libc only; the result is cached
// under node_modules/.cache/nfkeeper/, keyed by the sources and library versions.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, renameSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const libc = process.report.getReport().header.glibcVersionRuntime ? 'glibc' : 'musl';
const target = `${process.platform}-${process.arch}`;
const say = (s) => process.stderr.write(`nfkeeper prebuild: ${s}\n`);

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.status !== 0) {
    if (opts.stdio !== 'inherit') process.stderr.write((r.stdout ?? '') + (r.stderr ?? ''));
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`})`);
  }
  return r.stdout;
}

const sources = ['binding.gyp', ...readdirSync(join(root, 'native')).filter((f) => statSync(join(root, 'native', f)).isFile()).map((f) => `native/${f}`)].sort();
const hash = createHash('sha256');
hash.update(`v3 ${target} ${libc} ${process.versions.napi}\n`);
for (const f of sources) hash.update(`${f}\n`).update(readFileSync(join(root, f)));
hash.update(readFileSync(join(root, 'node_modules', 'node-addon-api', 'package.json')));
hash.update(run('pkg-config', ['--modversion', 'libnftnl', 'libmnl']));
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
  if (existsSync('/usr/include/node/node_api.h')) args.push('--nodedir=/usr');
  run(process.execPath, args, { cwd: stage, stdio: 'inherit', env: { ...process.env, NFKEEPER_PREBUILD: '1', NFKEEPER_LIBC: libc, NFKEEPER_SANITIZE: '' } });
  const built = join(stage, 'build', 'Release', 'nfkeeper.node');
  const out = `${cached}.tmp-${process.pid}`;
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, libc), { recursive: true });
  cpSync(built, join(out, `nfkeeper.${libc}.node`));
  run('strip', ['--strip-unneeded', join(out, `nfkeeper.${libc}.node`)]);
  // The libraries the addon was linked against, as the loader resolves them here.
  const ldd = run('ldd', [built]);
  for (const lib of ['libnftnl', 'libmnl']) {
    const m = new RegExp(`(${lib}\\.so\\.\\d+) => (\\S+)`).exec(ldd);
    if (!m) throw new Error(`ldd finds no ${lib} in the addon:\n${ldd}`);
    cpSync(m[2], join(out, libc, m[1]), { dereference: true });
    // The licence travels with the binary (libnftnl GPL-2.0-or-later, libmnl LGPL-2.1-or-later).
    // dpkg knows the library by its /usr path (Debian's /lib is a symlink to /usr/lib).
    const dpkg = spawnSync('dpkg', ['-S', m[2].replace(/^\/lib\//, '/usr/lib/')], { encoding: 'utf8' });
    const pkg = dpkg.status === 0 ? dpkg.stdout.split(':')[0] : undefined;
    if (pkg && existsSync(`/usr/share/doc/${pkg}/copyright`)) cpSync(`/usr/share/doc/${pkg}/copyright`, join(out, libc, `${m[1]}.copyright`));
  }
  // Proof that it loads from its own directory with nothing from the build environment.
  run(process.execPath, ['-e', `process.dlopen({ exports: {} }, ${JSON.stringify(join(out, `nfkeeper.${libc}.node`))})`],
    { env: { PATH: process.env.PATH } });
  const ldd2 = run('ldd', [join(out, `nfkeeper.${libc}.node`)]);
  for (const lib of ['libnftnl', 'libmnl']) {
    if (!new RegExp(`${lib}\\.so\\.\\d+ => ${join(out, libc).replaceAll('.', '\\.')}/`).test(ldd2)) {
      throw new Error(`the prebuilt addon does not resolve ${lib} beside itself:\n${ldd2}`);
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
