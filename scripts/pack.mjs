#!/usr/bin/env node
// Prints the path of nfkeeper's npm package (`npm pack`) built from a clean
// copy of this checkout: the files git tracks (or would track), without
// dist/, build/ or prebuilds/, so `prepack` has to build everything itself.
// Packing in a copy also leaves this checkout's dist/ alone while tests run.
// Cached under node_modules/.cache/nfkeeper/pack/, keyed by those files'
// contents, Node's version and the libnftnl/libmnl versions.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync } from 'node:fs';
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
const found = existsSync(out) ? readdirSync(out).find((f) => f.endsWith('.tgz')) : undefined;
if (found) {
  process.stdout.write(join(out, found) + '\n');
  process.exit(0);
}

// Per process: two test files may pack at once; the last rename wins and both get the same bytes.
const stage = join(cacheRoot, `stage-${process.pid}`);
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
for (const f of files) cpSync(join(root, f), join(stage, f), { recursive: false });
symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'));
process.stderr.write(`nfkeeper pack: npm pack in a clean copy (${files.length} files)\n`);
const tmp = `${out}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp, { recursive: true });
const name = run('npm', ['pack', '--silent', '--pack-destination', tmp], { cwd: stage, stdio: ['ignore', 'pipe', 'inherit'] }).trim().split('\n').at(-1);
try {
  renameSync(tmp, out);
} catch (e) {
  // Another process packed the same files first: theirs is as good.
  if (!existsSync(join(out, name))) throw e;
  rmSync(tmp, { recursive: true, force: true });
}
// Keep the newest few packages only.
const old = readdirSync(cacheRoot).filter((d) => /^[0-9a-f]{16}$/.test(d) && d !== key)
  .sort((a, b) => statSync(join(cacheRoot, a)).mtimeMs - statSync(join(cacheRoot, b)).mtimeMs);
for (const d of old.slice(0, -3)) rmSync(join(cacheRoot, d), { recursive: true, force: true });
rmSync(stage, { recursive: true, force: true });
process.stdout.write(join(out, name) + '\n');
