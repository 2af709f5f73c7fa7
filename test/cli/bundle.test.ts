/**
 * bin/nfkeeper.js runs the build's bundle, dist/nfkeeper.script.js (scripts/bundle.mjs; one file
 * instead of every module: less of the daemon's memory), with V8's code cache of it when one fits,
 * and falls back to dist/cli.js when the bundle is missing or older. The daemon from the bundle reads and reloads an nft-syntax config
 * (the reader the YAML path does not use is in the bundle too). A one-shot command loads only
 * what it uses: version and validate load none of the HTTP, compression, cluster or crypto
 * modules that the daemon's packages pull in.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';
import { chainLines } from '../keeper/helpers.js';
import { ownerSpec, writeConfig } from '../owners/fixtures.js';

const ROOT = join(import.meta.dirname, '..', '..');

describe('the bundled daemon', () => {
  const ns = netnsPerTest('bundle');

  it('bin/nfkeeper.js runs dist/nfkeeper.script.js, or dist/cli.js when the bundle is missing or older', () => {
    // A copy of the bin beside a dist/ whose two entries say which one ran.
    const dir = tempDir('bundle-bin');
    mkdirSync(join(dir, 'bin'));
    mkdirSync(join(dir, 'dist'));
    copyFileSync(join(ROOT, 'bin', 'nfkeeper.js'), join(dir, 'bin', 'nfkeeper.js'));
    writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
    const ran = () => {
      const r = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), 'validate'], { encoding: 'utf8', env: { ...process.env, NODE_DISABLE_COMPILE_CACHE: '1' } });
      return (r.stdout + r.stderr).trim();
    };
    const cli = join(dir, 'dist', 'cli.js');
    const bundle = join(dir, 'dist', 'nfkeeper.script.js');
    expect(ran()).toMatch(/not built yet/);
    writeFileSync(cli, "export async function main() { process.stdout.write('modules\\n'); return 0; }\nexport async function drained() {}\n");
    expect(ran()).toBe('modules');
    writeFileSync(bundle, "// nfkeeper bundle 0\n(function () { return { main: async () => { process.stdout.write('bundle\\n'); return 0; }, drained: async () => {} }; })\n");
    const t = 1_700_000_000;  // whole seconds: the same mtime on both
    utimesSync(cli, t, t);
    utimesSync(bundle, t, t);
    expect(ran()).toBe('bundle');
    // tsc run again without the bundle step: the modules are newer.
    utimesSync(cli, t, t + 2);
    expect(ran()).toBe('modules');
  });

  /** The bundle's build, from its first line: a code cache entry is named after it. */
  const bundleId = (file = 'nfkeeper.script.js') => /^\/\/ nfkeeper bundle ([0-9a-f]+)\n/.exec(readFileSync(join(ROOT, 'dist', file), 'latin1'))![1];
  const clientId = () => bundleId('nfkeeper.client.script.js');
  const validate = ['validate', '--config', join(ROOT, 'examples', 'flannel.yaml')];

  it('keeps its code cache only in a directory the user alone can write', () => {
    // As nobody, with the cache under XDG_CACHE_HOME: made 0700 and filled; one that others can
    // write (its code would run as this user) is left as it is, and so is any with the cache off.
    const asNobody = (cacheHome: string, env: NodeJS.ProcessEnv = {}) => {
      const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, join(ROOT, 'bin', 'nfkeeper.js'), ...validate],
        { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent', XDG_CACHE_HOME: cacheHome, ...env } });
      expect(r.status, r.stderr).toBe(0);
    };
    const home = tempDir('cache-home', { mode: 0o755 });
    chownSync(home, 65534, 65534);
    asNobody(home);
    const dir = join(home, 'nfkeeper');
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(dir).uid).toBe(65534);
    expect(readdirSync(dir)).toEqual([`${process.version}-${process.arch}-${bundleId()}-validate`]);

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

  /** A copy of the package's run-time files (bin/, the bundle after dist/cli.js: newer, package.json, an example) and the fill script. */
  const packageCopy = (name: string) => {
    const pkg = join(tempDir(name, { mode: 0o755 }), 'nfkeeper');
    for (const d of ['bin', 'dist', 'scripts', 'examples']) mkdirSync(join(pkg, d), { recursive: true });
    for (const f of ['bin/nfkeeper.js', 'scripts/code-cache.mjs', 'package.json', 'dist/cli.js', 'dist/nfkeeper.script.js', 'dist/nfkeeper.client.script.js', 'examples/flannel.yaml']) {
      copyFileSync(join(ROOT, f), join(pkg, f));
    }
    return pkg;
  };
  // A run's deadline, where a case sets one (below): a command that does not end by it is a finding.
  let deadlineMs: number | undefined;
  let lastMs = 0;
  beforeEach(() => {
    deadlineMs = undefined;
  });
  /** Runs a command of the package copy; which entry of the code cache it read (bin's debug line) and what it printed (its wall in lastMs). */
  const command = (pkg: string, args: string[], env: NodeJS.ProcessEnv = {}, node: string[] = []) => {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, [...node, join(pkg, 'bin', 'nfkeeper.js'), ...args],
      { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent', NFKEEPER_DEBUG_CODE_CACHE: '1', ...env }, ...(deadlineMs ? { timeout: deadlineMs, killSignal: 'SIGKILL' as const } : {}) });
    if (deadlineMs && r.signal === 'SIGKILL') throw new Error(`${args.join(' ')} (${JSON.stringify(env)}) did not end within ${deadlineMs.toFixed(0)} ms (${(performance.now() - t0).toFixed(0)} ms)`);
    lastMs = performance.now() - t0;
    const used = /^nfkeeper: code cache (.*)$/m.exec(r.stderr)?.[1];
    return { used, status: r.status, stdout: r.stdout, stderr: r.stderr.replace(/^nfkeeper: code cache .*\n/m, ''), all: r.stderr };
  };
  // Where no cache of the user's can be made (a read-only file system): the package's only.
  const readOnly = { NODE_COMPILE_CACHE: '/dev/null/nfkeeper' };

  it("uses the package's own code cache, filled by scripts/code-cache.mjs, for any user, where no one but the package's owner can write it", () => {
    const pkg = packageCopy('cache-pkg');
    const fill = spawnSync(process.execPath, [join(pkg, 'scripts', 'code-cache.mjs')], { encoding: 'utf8' });
    expect({ status: fill.status, stderr: fill.stderr }).toEqual({ status: 0, stderr: '' });
    const cache = join(pkg, 'dist', 'code-cache');
    // One entry per set of V8 flags bin/nfkeeper.js gives a command: the config commands', none (export), run's; and the client commands' script's.
    expect(readdirSync(cache).sort()).toEqual([`${process.version}-${process.arch}-${clientId()}-client`,
      ...['config', 'plain', 'run'].map((s) => `${process.version}-${process.arch}-${bundleId()}-${s}`)].sort());
    expect(command(pkg, ['status', '--socket', join(pkg, 'none.sock'), '--metrics', '127.0.0.1:0'], readOnly).used).toBe('package');
    expect(command(pkg, validate, readOnly).used).toBe('package');
    // The image's user, with no cache of its own: the package (root's) is read, not written.
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, join(pkg, 'bin', 'nfkeeper.js'), ...validate],
      { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: '/nonexistent', NFKEEPER_DEBUG_CODE_CACHE: '1' } });
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: 'nfkeeper: code cache package\n' });
    expect(readdirSync(cache)).toHaveLength(4);
    // Writable by others: not read.
    chmodSync(cache, 0o777);
    expect(command(pkg, validate, readOnly).used).toBe('none');
    chmodSync(cache, 0o755);
    // A package copied elsewhere (an image's COPY) keeps it: entries are named after the build, not a path.
    const moved = `${pkg}-moved`;
    renameSync(pkg, moved);
    expect(command(moved, validate, readOnly).used).toBe('package');
  });

  // Some 50 runs of the command one after another: on a busy machine each waits for a core, and the
  // case's time is theirs (65 s and more at load 9-11, over the suite's 60 s). What a deadline can
  // say here is that no entry, however spoiled, makes a run hang or crawl: each run is bounded by 20
  // times the median of this run's own commands without a cache, and the case's own deadline is
  // only a stop for what that misses.
  it('a missing, truncated, garbled or foreign entry: the same output as without a cache, and the entry is made again', { timeout: 600_000 }, () => {
    const pkg = packageCopy('cache-bad');
    const own = tempDir('cache-own');
    const bad = join(tempDir('cache-bad-config'), 'bad.yaml');
    writeFileSync(bad, readFileSync(join(ROOT, 'examples', 'flannel.yaml'), 'utf8').replace('ip saddr 10.244.1.0/24 ip daddr', 'ip saddr 10.244.1.0/33 ip daddr'));
    const runs = [validate, ['validate', '--config', bad], ['validate', '--config', join(own, 'none.yaml')], ['completion', 'bash'], ['status', '--socket', join(own, 'none.sock'), '--metrics', '127.0.0.1:0']];
    const printed = (r: ReturnType<typeof command>) => ({ status: r.status, stdout: r.stdout, stderr: r.stderr });
    const took: number[] = [];
    const without = runs.map((a) => {
      const r = printed(command(pkg, a, { NODE_DISABLE_COMPILE_CACHE: '1' }));
      took.push(lastMs);
      return r;
    });
    deadlineMs = Math.ceil(20 * took.sort((x, y) => x - y)[2]!);
    expect(without[1]).toMatchObject({ status: 2, stderr: expect.stringMatching(/bad\.yaml:\d+:\d+: error: /) });
    const entry = join(own, `${process.version}-${process.arch}-${bundleId()}-validate`);
    const env = { NODE_COMPILE_CACHE: own };
    const size = () => statSync(entry, { throwIfNoEntry: false })?.size;

    // Missing: compiled from source, then written (after a run that succeeded).
    const first = runs.map((a) => command(pkg, a, env));
    expect(first[0]!.used).toBe('none');
    expect(first.map(printed)).toEqual(without);
    const full = size()!;
    expect(full).toBeGreaterThan(100_000);
    // (the commands that failed wrote none)
    expect(readdirSync(own).filter((e) => e.includes(`-${bundleId()}-`)).sort()).toEqual(['completion', 'validate'].map((c) => `${process.version}-${process.arch}-${bundleId()}-${c}`));
    // Present: read.
    expect(runs.map((a) => printed(command(pkg, a, env)))).toEqual(without);
    expect(command(pkg, validate, env).used).toBe('own');
    // Truncated, garbled or made under other V8 flags: V8 refuses each, the command runs from
    // source, and its run writes the entry again.
    const spoiled: [string, () => void][] = [
      ['truncated', () => truncateSync(entry, 1000)],
      ['garbled', () => writeFileSync(entry, Buffer.alloc(full, 0x5a))],
      // (completion's entry: a command with no V8 flags)
      ['other flags', () => copyFileSync(join(own, `${process.version}-${process.arch}-${bundleId()}-completion`), entry)],
    ];
    for (const [what, spoil] of spoiled) {
      spoil();
      for (const [i, a] of runs.entries()) {
        const r = command(pkg, a, env);
        expect(printed(r), `${what}: ${a.join(' ')}`).toEqual(without[i]);
        if (i === 0) expect(r.used, what).toBe('own rejected');
      }
      expect(size(), what).toBeGreaterThan(full / 2);
      expect(command(pkg, validate, env).used, what).toBe('own');
    }
    // One byte changed anywhere (V8 checks an entry's checksum only under the flag bin/ sets
    // while it reads one): refused, run from source with the same output, and written again.
    const good = readFileSync(entry);
    const offsets = [8, 16, 40, ...Array.from({ length: 10 }, (_, k) => Math.floor(((k + 0.5) / 10) * good.length)), good.length - 1];
    for (const at of offsets) {
      const changed = Buffer.from(good);
      changed[at]! ^= 0x10;
      writeFileSync(entry, changed);
      const r = command(pkg, validate, env);
      expect(printed(r), `byte ${at} of ${good.length}`).toEqual(without[0]);
      expect(r.used, `byte ${at} of ${good.length}`).toBe('own rejected');
    }
    expect(command(pkg, validate, env).used).toBe('own');
    // Another build's entry for the same command and Node stays while it is less than a day old
    // (two builds in use side by side), and goes when this one is written after that.
    const earlier = join(own, `${process.version}-${process.arch}-0123456789abcdef-validate`);
    renameSync(entry, earlier);
    expect(command(pkg, validate, env).used).toBe('none');
    expect(existsSync(entry) && existsSync(earlier)).toBe(true);
    expect(command(pkg, validate, env).used).toBe('own');
    renameSync(entry, earlier);
    const twoDaysAgo = Date.now() / 1000 - 2 * 86_400;
    utimesSync(earlier, twoDaysAgo, twoDaysAgo);
    // Entries another Node wrote go by the same rule: this command's once a day old; a fresh one,
    // another command's and a name this code does not write (Node's own compile cache shares the
    // variable) stay.
    const otherNode = (node: string, c: string, age: number) => {
      const e = join(own, `${node}-${process.arch}-fedcba9876543210-${c}`);
      writeFileSync(e, 'an entry of another Node');
      utimesSync(e, Date.now() / 1000 - age, Date.now() / 1000 - age);
      return e;
    };
    const oldNode = otherNode('v20.19.6', 'validate', 2 * 86_400);
    const kept = [otherNode('v23.11.1', 'validate', 3_600), otherNode('v20.19.6', 'check', 2 * 86_400), join(own, 'v20.19.6-x64-validate')];
    writeFileSync(kept[2]!, 'not an entry');
    utimesSync(kept[2]!, twoDaysAgo, twoDaysAgo);
    expect(command(pkg, validate, env).used).toBe('none');
    expect(existsSync(entry) && !existsSync(earlier)).toBe(true);
    expect(existsSync(oldNode)).toBe(false);
    expect(kept.filter((e) => !existsSync(e))).toEqual([]);
  });

  it('a command with its entry compiles none of what it runs from source: V8 deserialises it', () => {
    // V8's own account on stdout (its flag, given to both runs: an entry is bound to the flags):
    // the second run deserialises the first run's entry, which holds the functions that ran,
    // lazily compiled ones included.
    const pkg = packageCopy('cache-used');
    const own = tempDir('cache-used-own');
    const env = { NODE_COMPILE_CACHE: own };
    const deserialised = (stdout: string) => [...stdout.matchAll(/\[Deserializing from (\d+) bytes/g)].map((m) => Number(m[1])).filter((n) => n > 100_000);
    const first = command(pkg, validate, env, ['--profile-deserialization']);
    expect(first.status, first.all).toBe(0);
    expect(deserialised(first.stdout)).toEqual([]);
    const entry = readdirSync(own).find((e) => e.endsWith('-validate'))!;
    const second = command(pkg, validate, env, ['--profile-deserialization']);
    expect(second.used).toBe('own');
    expect(deserialised(second.stdout)).toHaveLength(1);
    expect(Math.abs(deserialised(second.stdout)[0]! - statSync(join(own, entry)).size)).toBeLessThan(4096);
    const lines = (stdout: string) => stdout.split('\n').filter((l) => !l.startsWith('['));
    expect(lines(second.stdout)).toEqual(lines(first.stdout));
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
    // nor to ask whether its compile cache has an entry for it, beside another config's big one
    const cache = join(dir, 'cache');
    mkdirSync(cache, { mode: 0o700 });
    writeFileSync(join(cache, 'compiled-0123456789abcdef.json'), 'x'.repeat(1 << 20));
    expect(loaded(0, 'check', '--config', config, '--netns', ns.path, '--cache-dir', cache)).not.toContain('NativeModule crypto');
  });

  /** `dir`/big.nft: table ip `table` with an input chain of 1,000 rules. */
  const bigNft = (dir: string, table: string): string => {
    const config = join(dir, 'big.nft');
    const rules = Array.from({ length: 1_000 }, (_, i) => `\t\tip saddr 10.1.${i >> 8}.${i & 255} counter accept\n`).join('');
    writeFileSync(config, `table ip ${table} {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n${rules}\t}\n}\n`);
    return config;
  };

  it("keys the compile cache's entries by the bundle's build id (its first line), and a warm apply takes the entry", () => {
    const dir = tempDir('bundle-compile-cache');
    const config = bigNft(dir, 'bc');
    const cache = join(dir, 'cache');
    const apply = () => spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path, '--cache-dir', cache, '--progress'], { encoding: 'utf8' });
    const cold = apply();
    expect(cold.status, cold.stderr).toBe(0);
    const entry = readdirSync(cache).find((f) => /^compiled-.*\.json$/.test(f))!;
    const header = JSON.parse(readFileSync(join(cache, entry), 'utf8').split('\n', 1)[0]!) as { code: string };
    expect(header.code).toBe(`bundle ${bundleId()}`);
    ns.exec('nft', ['flush', 'ruleset']);
    const warm = apply();
    expect(warm.status, warm.stderr).toBe(0);
    expect(warm.stderr).toMatch(/compile cache matches every input/);
    expect(cold.stderr).not.toMatch(/compile cache matches every input/);
  });

  it('an apply from the compile cache (V8 flags changed while it runs) writes a code cache entry the next apply takes', () => {
    const dir = tempDir('bundle-warm-code-cache');
    const config = bigNft(dir, 'wc');
    const codeCache = join(dir, 'code');
    const apply = () => {
      ns.exec('nft', ['flush', 'ruleset']);
      const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), 'apply', '--config', config, '--netns', ns.path, '--cache-dir', join(dir, 'cache'), '--progress'],
        { encoding: 'utf8', env: { ...process.env, NODE_COMPILE_CACHE: codeCache, NFKEEPER_DEBUG_CODE_CACHE: '1' } });
      expect(r.status, r.stderr).toBe(0);
      return { code: /^nfkeeper: code cache (.*)$/m.exec(r.stderr)?.[1], warm: /compile cache matches every input/.test(r.stderr) };
    };
    expect(apply().warm).toBe(false);
    // The command's own entry made by a warm apply (src/base/heap.ts withoutMaglev: V8's Maglev off
    // while it runs, back on before it returns), then taken: made under the flags it is read with.
    rmSync(codeCache, { recursive: true });
    expect(apply()).toEqual({ code: expect.stringMatching(/^(package|none)$/), warm: true });
    expect(apply()).toEqual({ code: 'own', warm: true });
    // A miss turns it back on before its compile: the same, after a cold apply made the entry.
    rmSync(codeCache, { recursive: true });
    writeFileSync(config, readFileSync(config, 'utf8').replace('10.1.0.0', '10.2.0.0'));
    expect(apply()).toEqual({ code: expect.stringMatching(/^(package|none)$/), warm: false });
    expect(apply()).toEqual({ code: 'own', warm: true });
  });

  it('the client commands (status, events, owner, reload) run from their own script, without the config, kernel and daemon modules', async () => {
    // esbuild names each module it holds by its path.
    const text = readFileSync(join(ROOT, 'dist', 'nfkeeper.client.script.js'), 'latin1');
    for (const m of ['"dist/owners/client.js"', '"dist/reload-status.js"', '"node_modules/commander/lib/command.js"']) expect(text.includes(m), m).toBe(true);
    for (const m of ['dist/config/config.js', 'dist/rules/', 'dist/netlink/', 'dist/keeper/keeper.js', 'dist/keeper/oneshot.js', 'dist/owners/api.js', 'dist/run.js',
      'node_modules/zod/', 'node_modules/pino/', 'node_modules/prom-client/']) expect(text.includes(m), m).toBe(false);
    expect(text.length).toBeLessThan(readFileSync(join(ROOT, 'dist', 'nfkeeper.script.js'), 'latin1').length / 3);

    // A daemon with owners and a control socket; each command against it from bin/, as a user runs it.
    const dir = tempDir('bundle-client');
    const config = writeConfig(dir);
    const sock = join(dir, 'nfkeeper.sock');
    const statusFile = join(dir, 'reload.status');
    const spec = join(dir, 'a.yaml');
    writeFileSync(spec, JSON.stringify(ownerSpec(1)));
    const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics',
      '--reload-status', statusFile], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const cache = tempDir('bundle-client-cache');
    const bin = (...args: string[]) => {
      const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), ...args], { encoding: 'utf8', env: { ...process.env, NODE_COMPILE_CACHE: cache } });
      return { status: r.status, stdout: r.stdout, stderr: r.stderr };
    };
    // The same command in this process, from the sources: what the command line prints.
    const inProcess = async (...args: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const status = await main(['node', 'nfkeeper', ...args], { out: (x) => out.push(`${x}\n`), err: (x) => err.push(`${x}\n`) });
      return { status, stdout: out.join(''), stderr: err.join('') };
    };
    try {
      await until('the control socket', () => bin('owner', 'ls', '--socket', sock).status === 0, 60_000, 100);
      expect(bin('owner', 'put', 'a', '--file', spec, '--socket', sock)).toEqual({ status: 0, stdout: 'owner a: registered\n', stderr: '' });
      for (const args of [['owner', 'ls'], ['owner', 'get', 'a'], ['status'], ['owner', 'get', 'none'], ['events', '--json']]) {
        const r = bin(...args, '--socket', sock);
        expect(r, args.join(' ')).toEqual(await inProcess(...args, '--socket', sock));
        expect(r.status, args.join(' ')).toBe(args.includes('none') ? 2 : 0);
      }
      expect(bin('status', '--socket', sock).stdout).toMatch(/^ready: true .*\ntable ip nfkeeper: verified.*\nowners: 1 registered/);
      expect(bin('owner', 'rm', 'a', '--socket', sock)).toEqual({ status: 0, stdout: 'owner a: removed\n', stderr: '' });
      expect(bin('reload', '--pid', String(child.pid), '--status-file', statusFile)).toEqual({ status: 0, stdout: 'config reloaded\n', stderr: '' });
      // Each wrote its code cache entry after it ran: of the client commands' script, not the bundle's.
      expect(readdirSync(cache).filter((e) => !e.includes(`-${clientId()}-`) && /^v\d.*-[a-z]+$/.test(e))).toEqual([]);
      expect(readdirSync(cache).filter((e) => e.includes(`-${clientId()}-`)).sort()).toEqual(
        ['events', 'owner', 'reload', 'status'].map((c) => `${process.version}-${process.arch}-${clientId()}-${c}`));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
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
    // Through a pipe without setting up a stdout stream (node:net and its handle, for a pipe); what
    // the one write could not take goes through process.stdout, with its errors, as before.
    const hook = 'data:text/javascript,import{writeSync}from"node:fs";process.on("exit",()=>writeSync(2,"loaded:"+JSON.stringify(process.moduleLoadList)+"\\n"))';
    const piped = spawnSync(process.execPath, ['--import', hook, join(dir, 'bin', 'nfkeeper.js'), 'version'], { encoding: 'utf8' });
    expect(piped.stdout).toBe(`${printed[0]}\n`);
    expect(JSON.parse(piped.stderr.slice('loaded:'.length))).not.toContain('NativeModule net');
    const full = spawnSync('sh', ['-c', `exec ${process.execPath} ${join(dir, 'bin', 'nfkeeper.js')} version >/dev/full`], { encoding: 'utf8' });
    expect({ status: full.status, stderr: full.stderr }).toMatchObject({ status: 1, stderr: expect.stringMatching(/Error: ENOSPC: no space left on device, write/) });
    // With anything else, the command line decides, as before (and the bundle is needed).
    const more = spawnSync(process.execPath, [join(dir, 'bin', 'nfkeeper.js'), 'version', 'extra'], { encoding: 'utf8' });
    expect(more.status).toBe(2);
    expect(more.stderr).toMatch(/not built yet/);
    const real = spawnSync(process.execPath, [join(ROOT, 'bin', 'nfkeeper.js'), 'version', 'extra'], { encoding: 'utf8' });
    expect({ status: real.status, stderr: real.stderr.trim() }).toEqual({ status: 2, stderr: "error: too many arguments for 'version'. Expected 0 arguments but got 1." });
  });

  it('the build made the bundle, and the daemon from it applies and reloads an .nft config', async () => {
    const bundle = join(ROOT, 'dist', 'nfkeeper.script.js');
    expect(existsSync(bundle), 'npm run build makes dist/nfkeeper.script.js').toBe(true);
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
