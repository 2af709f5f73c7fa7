/**
 * The npm package as a node gets it: packed from a clean copy of the checkout
 * (scripts/pack.mjs, cached), installed with `npm install -g` into an empty
 * prefix with no compiler, no pkg-config and no -dev files reachable, then
 * run. Also: no addon, or a broken one, is one line, and the commands that
 * need no kernel still work.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { explainLoadFailure } from '../src/netlink/addon.js';

const VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;

function which(cmd: string, path = process.env.PATH ?? ''): string | undefined {
  return path.split(delimiter).map((d) => join(d, cmd)).find((p) => existsSync(p));
}

/** The environment of a node without build tools: PATH holds only what nfkeeper and npm run. */
function bareEnv(bin: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(npm_|LD_|PKG_CONFIG|CPATH|C_INCLUDE|CPLUS_INCLUDE|LIBRARY_PATH|NFKEEPER_)/i.test(k)) continue;
    env[k] = v;
  }
  return { ...env, PATH: bin, PKG_CONFIG_LIBDIR: '/nonexistent' };
}

describe('the npm package, installed on a node without a compiler or -dev packages', () => {
  let dir: string;
  let tarball: string;
  let bin: string;
  let prefix: string;
  let install: ReturnType<typeof spawnSync>;

  beforeAll(() => {
    const packed = spawnSync(process.execPath, ['scripts/pack.mjs'], { encoding: 'utf8', timeout: 600_000 });
    expect(packed.status, packed.stderr).toBe(0);
    tarball = packed.stdout.trim();
    dir = mkdtempSync(join(tmpdir(), 'nfk-pkg-'));
    bin = join(dir, 'bin');
    mkdirSync(bin);
    // sh for npm's lifecycle scripts; ip and nft for the demo's namespace and tampering.
    for (const tool of ['node', 'npm', 'sh', 'ip', 'nft']) symlinkSync(realpathSync(which(tool)!), join(bin, tool));
    prefix = join(dir, 'prefix');
    install = spawnSync('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund',
      '--foreground-scripts', tarball], { encoding: 'utf8', env: bareEnv(bin), timeout: 300_000 });
  }, 900_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the package holds dist/, the prebuilt addon with its two libraries, docs/ and its metadata', () => {
    const list = spawnSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).stdout.split('\n');
    for (const f of ['dist/cli.js', 'dist/nfkeeper.script.js', 'dist/nfkeeper.client.script.js', 'dist/netlink/addon.js', 'bin/nfkeeper.js', 'prebuilds/linux-x64/nfkeeper.glibc.node',
      'prebuilds/linux-x64/glibc/libnftnl.so.11', 'prebuilds/linux-x64/glibc/libmnl.so.0',
      'prebuilds/linux-x64/glibc/libnftnl.so.11.copyright', 'prebuilds/linux-arm64/nfkeeper.glibc.node',
      'prebuilds/linux-arm64/glibc/libnftnl.so.11', 'prebuilds/linux-arm64/glibc/libmnl.so.0',
      'prebuilds/linux-arm64/glibc/libnftnl.so.11.copyright', 'prebuilds/linux-arm64/glibc/libmnl.so.0.copyright', 'docs/design.md', 'binding.gyp', 'native/socket.cc',
      'scripts/build-native.mjs', 'deploy/systemd/nfkeeper.service', 'LICENSE']) {
      expect(list).toContain(`package/${f}`);
    }
    expect(list.filter((f) => /^package\/(test|bench|build|node_modules)\//.test(f))).toEqual([]);
    // The code cache is made where the package is installed, for that Node (npm's install script).
    expect(list).toContain('package/scripts/code-cache.mjs');
    expect(list.filter((f) => f.startsWith('package/dist/code-cache/'))).toEqual([]);
    const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
    expect(pkg.scripts.prepack).toMatch(/npm run build\b.*build:prebuild/);
    expect(pkg.scripts['build:prebuild']).toMatch(/prebuild\.mjs --arch arm64/);
    expect(pkg).toHaveProperty('keywords');
    // There is no public host for the project yet: no repository/homepage/bugs rather than a placeholder.
    for (const k of ['repository', 'homepage', 'bugs']) expect(pkg).not.toHaveProperty(k);
  });

  it('npm install -g uses the prebuilt addon: nothing compiled, and none of the tools to compile were there', () => {
    for (const tool of ['cc', 'gcc', 'g++', 'c++', 'make', 'pkg-config', 'python3']) expect(which(tool, bin)).toBeUndefined();
    expect(install.status, `${install.stdout}${install.stderr}`).toBe(0);
    expect(`${install.stdout}${install.stderr}`).not.toMatch(/building it from source/);
    const pkgDir = join(prefix, 'lib', 'node_modules', 'nfkeeper');
    expect(existsSync(join(pkgDir, 'build'))).toBe(false);
    // The install script filled the package's code cache for this Node (three sets of V8 flags, and the client commands' script).
    expect(readdirSync(join(pkgDir, 'dist', 'code-cache')).filter((e) => e.startsWith(`${process.version}-${process.arch}-`))).toHaveLength(4);
    // The addon resolves libnftnl and libmnl beside itself, not from the system.
    const ldd = spawnSync('ldd', [join(pkgDir, 'prebuilds', 'linux-x64', 'nfkeeper.glibc.node')], { encoding: 'utf8' }).stdout;
    expect(ldd).toMatch(new RegExp(`libnftnl\\.so\\.11 => ${pkgDir}/prebuilds/linux-x64/glibc/libnftnl\\.so\\.11`));
    expect(ldd).toMatch(new RegExp(`libmnl\\.so\\.0 => ${pkgDir}/prebuilds/linux-x64/glibc/libmnl\\.so\\.0`));
  });

  it('the installed nfkeeper prints its version and runs the demo in a namespace of its own', () => {
    const nfkeeper = join(prefix, 'bin', 'nfkeeper');
    const v = spawnSync(nfkeeper, ['version'], { encoding: 'utf8', env: bareEnv(bin) });
    expect(v.stderr).toBe('');
    expect(v.stdout.trim()).toBe(VERSION);
    const demo = spawnSync(nfkeeper, ['demo', '--json'], { encoding: 'utf8', env: bareEnv(bin), timeout: 120_000 });
    expect(demo.status, demo.stderr).toBe(0);
    const results = JSON.parse(demo.stdout) as { results?: { repaired: boolean }[] } | { repaired: boolean }[];
    const steps = Array.isArray(results) ? results : results.results!;
    expect(steps.length).toBeGreaterThanOrEqual(7);
    expect(steps.every((s) => s.repaired)).toBe(true);
  });

  it('a source build is the fallback when no prebuild fits, and it says so', () => {
    const pkgDir = join(prefix, 'lib', 'node_modules', 'nfkeeper');
    // No compiler here: the fallback is announced, then stops with the packages to install.
    const r = spawnSync('node', [join(pkgDir, 'scripts', 'build-native.mjs'), '--if-no-prebuild'], {
      encoding: 'utf8', env: { ...bareEnv(bin), npm_config_build_from_source: 'true' },
    });
    expect(r.stderr).toMatch(/^nfkeeper: building from source as asked/m);
    expect(r.stderr).toMatch(/apt-get install libnftnl-dev libmnl-dev pkg-config g\+\+/);
    expect(r.status).toBe(1);
    // A package without a prebuild for this machine (as on musl today).
    const bare = join(dir, 'no-prebuilds');
    mkdirSync(join(bare, 'scripts'), { recursive: true });
    writeFileSync(join(bare, 'scripts', 'build-native.mjs'), readFileSync(join(pkgDir, 'scripts', 'build-native.mjs')));
    const none = spawnSync('node', [join(bare, 'scripts', 'build-native.mjs'), '--if-no-prebuild'], { encoding: 'utf8', env: bareEnv(bin) });
    expect(none.stderr).toMatch(/^nfkeeper: no prebuilt addon for linux-x64 \(glibc\) in this package; building it from source$/m);
    expect(none.status).toBe(1);
  });
});

describe('without a usable native addon', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-noaddon-'));
  const run = (addon: string, ...args: string[]) => spawnSync(process.execPath, ['bin/nfkeeper.js', ...args],
    { encoding: 'utf8', env: { ...process.env, NFKEEPER_ADDON: addon } });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const broken = join(dir, 'broken.node');
  writeFileSync(broken, 'not an ELF file\n'.repeat(8));
  // A real shared object that is not an addon.
  const notAddon = join(dir, 'libmnl.node');
  writeFileSync(notAddon, readFileSync(realpathSync('/usr/lib/x86_64-linux-gnu/libmnl.so.0')));

  for (const [what, addon, line] of [
    ['missing', join(dir, 'missing.node'), /^nfkeeper: the native addon \S+missing\.node does not exist \(from NFKEEPER_ADDON\)$/],
    ['not an ELF file', broken, /^nfkeeper: the native addon \S+broken\.node cannot be loaded \(invalid ELF header\); reinstall nfkeeper/],
    ['a shared object but no addon', notAddon, /^nfkeeper: the native addon \S+libmnl\.node cannot be loaded \(Module did not self-register/],
  ] as const) {
    it(`${what}: version, --help and validate work; a kernel command says why in one line`, () => {
      const v = run(addon, 'version');
      expect([v.status, v.stdout.trim(), v.stderr]).toEqual([0, VERSION, '']);
      const h = run(addon, '--help');
      expect(h.status).toBe(0);
      expect(h.stdout).toMatch(/validate/);
      const ok = run(addon, 'validate', '--config', 'examples/flannel.yaml');
      expect([ok.status, ok.stderr]).toEqual([0, '']);
      const check = run(addon, 'check', '--config', 'examples/flannel.yaml');
      expect(check.status).toBe(2);
      expect(check.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(check.stderr.trimEnd()).toMatch(line);
      expect(check.stderr).not.toMatch(/\n\s+at /);
    });
  }

  it('the dynamic loader\'s words for a missing library become the library and its package', () => {
    const p = '/opt/nfkeeper/prebuilds/linux-x64/nfkeeper.glibc.node';
    const e = explainLoadFailure(p, 'libnftnl.so.11: cannot open shared object file: No such file or directory');
    expect(e.message).toBe(`libnftnl.so.11 not found: apt-get install libnftnl11 (Fedora: dnf install libnftnl; Alpine: apk add libnftnl) (needed by ${p})`);
    expect(e.library).toBe('libnftnl.so.11');
    expect(explainLoadFailure(p, 'libmnl.so.0: cannot open shared object file: No such file or directory').message)
      .toMatch(/^libmnl\.so\.0 not found: apt-get install libmnl0 /);
    expect(explainLoadFailure(p, "/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by x)").message)
      .toMatch(/needs GLIBCXX_3\.4\.30, newer than this system's/);
  });
});

describe('an old Node', () => {
  it('bin/nfkeeper.js says in one line that it needs Node 22, before importing anything', () => {
    // The suite runs on a supported line; the check reads process.versions.node, so fake that one value.
    const r = spawnSync(process.execPath, ['-e',
      "Object.defineProperty(process.versions, 'node', { value: '20.20.2' }); process.argv = [process.execPath, 'bin/nfkeeper.js', 'version']; import('./bin/nfkeeper.js')"],
    { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^nfkeeper: needs Node\.js 22 or newer \(the supported lines are 22 and 24\), this is v20\.20\.2 \(.*\); Debian 12's nodejs package is 18: install Node from NodeSource or a nodejs\.org tarball/);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  });
});
