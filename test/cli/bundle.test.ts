/**
 * bin/nfkeeper.js runs the build's bundle, dist/nfkeeper.mjs and its chunks (scripts/bundle.mjs; a
 * few dozen files instead of every module: less of the daemon's memory), and falls back to dist/cli.js when the
 * bundle is missing or older. The daemon from the bundle reads and reloads an nft-syntax config
 * (the reader the YAML path does not use is in the bundle too). A one-shot command loads only
 * what it uses: version and validate load none of the HTTP, compression, cluster or crypto
 * modules that the daemon's packages pull in.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';
import { chainLines } from '../keeper/helpers.js';

const ROOT = join(import.meta.dirname, '..', '..');

describe('the bundled daemon', () => {
  const ns = netnsPerTest('bundle');

  it('bin/nfkeeper.js runs dist/nfkeeper.mjs, or dist/cli.js when the bundle is missing or older', () => {
    // A copy of the bin beside a dist/ whose two entries say which one ran.
    const dir = tempDir('bundle-bin');
    mkdirSync(join(dir, 'bin'));
    mkdirSync(join(dir, 'dist'));
    copyFileSync(join(ROOT, 'bin', 'nfkeeper.js'), join(dir, 'bin', 'nfkeeper.js'));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    const entry = (name: string) => `export async function main() { process.stdout.write('${name}\\n'); return 0; }\n`;
    const ran = () => {
      const r = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), 'validate'], { encoding: 'utf8' });
      return (r.stdout + r.stderr).trim();
    };
    const cli = join(dir, 'dist', 'cli.js');
    const bundle = join(dir, 'dist', 'nfkeeper.mjs');
    expect(ran()).toMatch(/not built yet/);
    writeFileSync(cli, entry('modules'));
    expect(ran()).toBe('modules');
    writeFileSync(bundle, entry('bundle'));
    const t = 1_700_000_000;  // whole seconds: the same mtime on both
    utimesSync(cli, t, t);
    utimesSync(bundle, t, t);
    expect(ran()).toBe('bundle');
    // tsc run again without the bundle step: the modules are newer.
    utimesSync(cli, t, t + 2);
    expect(ran()).toBe('modules');
  });

  it("keeps Node's compile cache only in a directory the user alone can write", () => {
    // As nobody, with the cache under XDG_CACHE_HOME: made 0700 and filled; one that others can
    // write (its code would run as this user) is left as it is, and so is any with the cache off.
    const asNobody = (cacheHome: string, env: NodeJS.ProcessEnv = {}) => {
      const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, join(ROOT, 'bin', 'nfkeeper.js'),
        'validate', '--config', join(ROOT, 'examples', 'flannel.yaml')],
        { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent', XDG_CACHE_HOME: cacheHome, ...env } });
      expect(r.status, r.stderr).toBe(0);
    };
    const home = tempDir('cache-home', { mode: 0o755 });
    chownSync(home, 65534, 65534);
    asNobody(home);
    const dir = join(home, 'nfkeeper');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(dir).uid).toBe(65534);
    expect(readdirSync(dir).some((e) => e.startsWith(`${process.version}-`))).toBe(true);

    const open = tempDir('cache-open', { mode: 0o755 });
    mkdirSync(join(open, 'nfkeeper'), { mode: 0o777 });
    chmodSync(join(open, 'nfkeeper'), 0o777);
    chownSync(join(open, 'nfkeeper'), 65534, 65534);
    asNobody(open);
    expect(readdirSync(join(open, 'nfkeeper'))).toEqual([]);

    const off = tempDir('cache-off', { mode: 0o755 });
    chownSync(off, 65534, 65534);
    asNobody(off, { NODE_DISABLE_COMPILE_CACHE: '1' });
    expect(readdirSync(off)).toEqual([]);
  });

  it("uses the package's own compile cache, filled by scripts/compile-cache.mjs, where it is the user's and no one else can write it", () => {
    // A copy of the package's run-time files (bin/, the bundle, package.json) and the script.
    const pkg = join(tempDir('cache-pkg', { mode: 0o755 }), 'nfkeeper');
    for (const d of ['bin', 'dist', 'scripts']) mkdirSync(join(pkg, d), { recursive: true });
    copyFileSync(join(ROOT, 'bin', 'nfkeeper.js'), join(pkg, 'bin', 'nfkeeper.js'));
    copyFileSync(join(ROOT, 'scripts', 'compile-cache.mjs'), join(pkg, 'scripts', 'compile-cache.mjs'));
    copyFileSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    for (const f of readdirSync(join(ROOT, 'dist')).filter((n) => /^nfkeeper\.(.*\.)?mjs$/.test(n) || n === 'cli.js')) {
      copyFileSync(join(ROOT, 'dist', f), join(pkg, 'dist', f));
    }
    const fill = spawnSync(process.execPath, [join(pkg, 'scripts', 'compile-cache.mjs')], { encoding: 'utf8' });
    expect({ status: fill.status, stderr: fill.stderr }).toEqual({ status: 0, stderr: '' });
    const cache = join(pkg, 'dist', 'compile-cache');
    const uid = process.geteuid!();
    // One entry per set of V8 flags bin/nfkeeper.js gives a command: the config commands', none (export, status), run's.
    expect(readdirSync(cache).filter((e) => e.startsWith(`${process.version}-${process.arch}-`) && e.endsWith(`-${uid}`))).toHaveLength(3);

    // Which cache a command used, and whether its modules' code came from it (Node's own debug output).
    const home = tempDir('cache-pkg-home', { mode: 0o755 });
    const used = (dir = pkg) => {
      const r = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), 'validate', '--config', join(ROOT, 'examples', 'flannel.yaml')],
        { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: home, XDG_CACHE_HOME: home, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' } });
      expect(r.status, r.stderr).toBe(0);
      const resolved = /resolved path (\S+) \+/.exec(r.stderr)?.[1];
      // (Node 22 says "cache for URL was accepted", 24 "V8 code cache for ESM URL was accepted")
      const url = pathToFileURL(join(dir, 'dist', 'nfkeeper.mjs')).href;
      return { resolved, accepted: r.stderr.split('\n').some((l) => l.includes(`cache for `) && l.includes(` ${url} was accepted`)) };
    };
    expect(used()).toEqual({ resolved: cache, accepted: true });
    // The package's cache is only read where it is sure to be its owner's: writable by others, the
    // command takes the user's own (as root /var/cache/nfkeeper, as another user the XDG one).
    chmodSync(cache, 0o777);
    expect(used().resolved).not.toBe(cache);
    chmodSync(cache, 0o755);
    // Node 24.12 and later key the cache by paths relative to it: a package copied elsewhere (an
    // image's COPY) keeps it.
    const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
    if (major > 24 || (major === 24 && minor >= 12)) {
      const moved = `${pkg}-moved`;
      renameSync(pkg, moved);
      expect(used(moved)).toEqual({ resolved: join(moved, 'dist', 'compile-cache'), accepted: true });
    }
  });

  it('version and validate from the bundle load none of the modules only other commands use', () => {
    // Node's own modules a process loaded, as it exits; undici is what node:http's lazy exports load,
    // child_process what commander requires for subcommands that are programs (nfkeeper has none),
    // perf_hooks what the global performance loads.
    const heavy = /^NativeModule (http|https|http2|zlib|cluster|worker_threads|crypto|internal\/deps\/undici\/undici|child_process|dgram|perf_hooks)$/;
    const hook = 'data:text/javascript,process.on("exit",()=>process.stderr.write("loaded:"+JSON.stringify(process.moduleLoadList)+"\\n"))';
    const loaded = (status: number, ...args: string[]) => {
      const r = spawnSync(process.execPath, ['--import', hook, join(ROOT, 'bin', 'nfkeeper.js'), ...args], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(status);
      const line = r.stderr.split('\n').find((l) => l.startsWith('loaded:'));
      return (JSON.parse(line!.slice('loaded:'.length)) as string[]);
    };
    expect(loaded(0, 'version').filter((m) => heavy.test(m))).toEqual([]);
    expect(loaded(0, 'validate', '--config', join(ROOT, 'examples', 'flannel.yaml')).filter((m) => heavy.test(m))).toEqual([]);
    // A command that talks HTTP loads node:http (so the hook does see what a command loads).
    const dir = tempDir('bundle-load');
    expect(loaded(2, 'status', '--socket', join(dir, 'none.sock'))).toContain('NativeModule http');
    // check of a table in sync hashes no rule (their digests prove them): no node:crypto.
    const config = join(ROOT, 'examples', 'flannel.yaml');
    expect(spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path]).status).toBe(0);
    expect(loaded(0, 'check', '--config', config, '--netns', ns.path)).not.toContain('NativeModule crypto');
  });

  it('version, -V and --version alone print the version without the bundle, as the command line prints it', async () => {
    const printed: string[] = [];
    expect(await main(['node', 'nfkeeper', 'version'], { out: (x) => printed.push(x), err: (x) => printed.push(x) })).toBe(0);
    // A copy of the bin with no dist/ beside it: the bundle is not needed (nor loaded).
    const dir = tempDir('bundle-version');
    mkdirSync(join(dir, 'bin'));
    copyFileSync(join(ROOT, 'bin', 'nfkeeper.js'), join(dir, 'bin', 'nfkeeper.js'));
    copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
    for (const arg of ['version', '-V', '--version']) {
      const r = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), arg], { encoding: 'utf8' });
      expect({ status: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({ status: 0, stdout: `${printed[0]}\n`, stderr: '' });
    }
    // With anything else, the command line decides, as before (and the bundle is needed).
    const more = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), 'version', 'extra'], { encoding: 'utf8' });
    expect(more.status).toBe(2);
    expect(more.stderr).toMatch(/not built yet/);
    const real = spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), 'version', 'extra'], { encoding: 'utf8' });
    expect({ status: real.status, stderr: real.stderr.trim() }).toEqual({ status: 2, stderr: "error: too many arguments for 'version'. Expected 0 arguments but got 1." });
  });

  it('the build made the bundle, and the daemon from it applies and reloads an .nft config', async () => {
    const bundle = join(ROOT, 'dist', 'nfkeeper.mjs');
    expect(existsSync(bundle), 'npm run build makes dist/nfkeeper.mjs').toBe(true);
    expect(statSync(bundle).mtimeMs).toBeGreaterThanOrEqual(statSync(join(ROOT, 'dist', 'cli.js')).mtimeMs);

    const dir = tempDir('bundle-nft');
    const config = join(dir, 'nat.nft');
    const nft = (rules: string[]) => `table ip nfk-bundle {\n  chain post {\n    type nat hook postrouting priority srcnat; policy accept;\n` +
      rules.map((r) => `    ${r}\n`).join('') + '  }\n}\n';
    const first = ['ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return'];
    const second = [...first, 'ip saddr 10.244.0.0/16 masquerade'];
    writeFileSync(config, nft(first));
    const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics',
      '--interval', '1s', '--log-level', 'info'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const logs: string[] = [];
    child.stdout.on('data', (d: Buffer) => logs.push(...d.toString().split('\n').filter(Boolean)));
    child.stderr.on('data', (d: Buffer) => logs.push(d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const lines = () => {
      try {
        return chainLines(ns, 'ip', 'nfk-bundle', 'post');
      } catch {
        return [];  // not there yet
      }
    };
    try {
      await until('the first rule', () => lines().length === first.length, 60_000, 100);
      expect(lines()).toEqual(first);
      writeFileSync(config, nft(second));
      await until('the reloaded rules', () => lines().length === second.length, 60_000, 100);
      expect(lines()).toEqual(second);
      // The log line is written after the commit that the rules show: wait for it.
      await until('the reload logged', () => logs.some((l) => l.includes('"config reloaded"')), 10_000, 100);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
