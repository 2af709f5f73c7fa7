#!/usr/bin/env node
// Prints the path of nfkeeper's npm package (`npm pack`) built from a clean
// copy of this checkout: the files git tracks (or would track), without
// dist/ or build/, so `prepack` has to build everything itself (it rebuilds
// prebuilds/ too, which git tracks).
// Packing in a copy also leaves this checkout's dist/ alone while tests run.
// Cached under node_modules/.cache/nfkeeper/pack/, keyed by those files'
// contents, Node's version and the libnftnl/libmnl versions.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd: root, maxBuffer: 64 << 20, ...opts });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed: ${r.stderr || r.error}`);
  return r.stdout;
}

const files = run('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard']).split('\0')
  .filter((f) => f && existsSync(join(root, f)) && !/^(test|bench)\//.test(f)).sort();
const hash = createHash('sha256').update(`v1 ${process.version}\n`);
hash.update(run('pkg-config', ['--modversion', 'libnftnl', 'libmnl']));
for (const f of files) hash.update(`${f}\n`).update(readFileSync(join(root, f)));
const key = hash.digest('hex').slice(0, 16);
const cacheRoot = join(root, 'node_modules', '.cache', 'nfkeeper', 'pack');
const out = join(cacheRoot, key);
const packed = () => (existsSync(out) ? readdirSync(out).find((f) => f.endsWith('.tgz')) : undefined);
let found = packed();
if (found) {
  process.stdout.write(join(out, found) + '\n');
  process.exit(0);
}

// Three test files pack at once (package, image, systemd-boot). Packing runs
// prepack's prebuild, whose cache the copies share through node_modules, so
// one process packs at a time and the others take its tarball.
mkdirSync(cacheRoot, { recursive: true });
const unlock = lock(join(cacheRoot, 'lock'));
found = packed();
if (found) {
  unlock();
  process.stdout.write(join(out, found) + '\n');
  process.exit(0);
}

const stage = join(cacheRoot, `stage-${process.pid}`);
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
for (const f of files) cpSync(join(root, f), join(stage, f), { recursive: false });
symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'));
// The arm64 prebuild's Node and sysroot (scripts/node.sh, scripts/sysroot.sh), fetched once.
mkdirSync(join(root, '.cache'), { recursive: true });
symlinkSync(join(root, '.cache'), join(stage, '.cache'));
process.stderr.write(`nfkeeper pack: npm pack in a clean copy (${files.length} files)\n`);
const tmp = `${out}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp, { recursive: true });
const name = run('npm', ['pack', '--silent', '--pack-destination', tmp], { cwd: stage, stdio: ['ignore', 'pipe', 'inherit'] }).trim().split('\n').at(-1);
rmSync(out, { recursive: true, force: true });
renameSync(tmp, out);
// Keep the newest few packages only.
const old = readdirSync(cacheRoot).filter((d) => /^[0-9a-f]{16}$/.test(d) && d !== key)
  .sort((a, b) => statSync(join(cacheRoot, a)).mtimeMs - statSync(join(cacheRoot, b)).mtimeMs);
for (const d of old.slice(0, -3)) rmSync(join(cacheRoot, d), { recursive: true, force: true });
rmSync(stage, { recursive: true, force: true });
unlock();
process.stdout.write(join(out, name) + '\n');

/** A directory as a lock (mkdir is atomic); taken over when its holder's pid is gone. */
function lock(dir) {
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, 'pid'), String(process.pid));
      const release = () => rmSync(dir, { recursive: true, force: true });
      process.on('exit', release);
      return release;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    let holder = NaN;
    try {
      holder = Number(readFileSync(join(dir, 'pid'), 'utf8'));
    } catch {
      // Not written yet by a holder that just took it.
    }
    if (holder > 0 && !alive(holder)) rmSync(dir, { recursive: true, force: true });
    else Atomics.wait(sleeper, 0, 0, 200);
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}
