/**
 * `nfkeeper apply` through the compile cache (src/config/compile-cache.ts) in --cache-dir, keyed as
 * `run` keys it: an apply stores the compiled config after its commit; the next apply or start of
 * the daemon for the same namespace and config finds it and compiles nothing. A warm apply leaves
 * the kernel as a cold one does, byte for byte; a changed config is compiled again; a directory
 * that others can write, is read-only or full is neither read nor written, and the apply still
 * succeeds with the kernel as desired (one line on stderr says why nothing was stored).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { loadAddon } from '../../src/netlink/addon.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { everyKindNft } from '../helpers/every-kind.js';
import { createNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { APPLY_STORES_FROM_RULES } from '../../src/cli.js';
import { nfk, nfkDone, waitFor } from './spawn.js';

const ENTRY = fileURLToPath(new URL('./entry.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Every kind of thing a compiled config holds (everyKindNft), its interface dummy0, and `extra` more rules. */
const NFT = (extra = 0, last = 'ip saddr 10.1.0.2 tcp dport 22 counter accept') => everyKindNft('ac', { iif: 'dummy0' },
  [...Array.from({ length: extra }, (_, i) => `ip saddr 10.2.${i >> 8}.${i & 255} tcp dport 443 counter accept`), last]);

const compiledIn = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((f) => f.startsWith('compiled-') && f.endsWith('.json')) : []);

describe('nfkeeper apply: the compile cache', { timeout: 240_000 }, () => {
  const ns = netnsPerTest('cli-apply-cache', (n) => n.exec('ip', ['link', 'add', 'dummy0', 'type', 'veth', 'peer', 'name', 'peer0']));

  // A config big enough for apply to store it (APPLY_STORES_FROM_RULES).
  function setUp(text = NFT(APPLY_STORES_FROM_RULES)) {
    const d = tempDir('cli-apply-cache');
    const config = join(d, 'c.nft');
    writeFileSync(config, text);
    return { cache: join(d, 'cache'), config };
  }
  const apply = (args: string[], netns = ns.path) => nfkDone(['apply', ...args, '--netns', netns, '--progress']);
  /** stderr but --progress's lines (the cache's note, and the steps that took over a second). */
  const others = (err: string[]) => err.filter((l) => !/compile cache (matches|not used)|\(\d+\.\d s\)$/.test(l));
  const ok = (r: { code: number | null; err: string[] }) => {
    expect(others(r.err)).toEqual([]);
    expect(r.code).toBe(0);
  };
  /** `nfkeeper run` of `config` in the namespace until it logs `msg`, then stopped (SIGTERM, exit 0): its logs. */
  const runUntil = async (config: string, cache: string, msg: string) => {
    const r = nfk(['run', '--config', config, '--cache-dir', cache, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor(msg, () => r.logs().some((l) => l.msg === msg));
    } finally {
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
    return r;
  };
  const noted = (r: { err: string[] }) => r.err.find((l) => /compile cache (matches|not used)/.test(l)) ?? 'nothing';
  /**
   * The kernel's ruleset as netlink messages (nft's debug output), which is what the commit wrote;
   * a set's elements sorted (a hash set lists them in the order of its random seed).
   */
  const netlinkDump = (n: { exec: (c: string, a: string[]) => string } = ns) => {
    const blocks = n.exec('nft', ['--debug=netlink', 'list', 'ruleset']).split(/\n(?=\S)/);
    return blocks.map((b) => {
      const [head, ...lines] = b.split('\n');
      return /^\S+ \S+ @/.test(head!) ? [head, ...lines.sort()].join('\n') : b;
    }).join('\n');
  };

  it('a warm apply leaves the kernel as a cold one and one without a cache, byte for byte', async () => {
    const { cache, config } = setUp();
    // The same namespace content three times: each apply into an empty ruleset of a namespace
    // made the same way (the same interface indexes, handles from 1).
    const dumps: string[] = [];
    const runs: [string, string[], RegExp][] = [
      ['no cache', ['--no-cache-dir'], /^nothing$/],
      ['cold', ['--cache-dir', cache], /compile cache not used \(there is none .*\); .*c\.nft was compiled/],
      ['warm', ['--cache-dir', cache], /compile cache matches every input: .*c\.nft was not compiled/],
    ];
    // The cache is keyed by the namespace's path: the same path each time, a link to the new one.
    const link = join(tempDir('cli-apply-cache-ns'), 'netns');
    for (const [what, args, said] of runs) {
      const other = createNetns('cli-apply-cache-ab');
      try {
        other.exec('ip', ['link', 'add', 'dummy0', 'type', 'veth', 'peer', 'name', 'peer0']);
        rmSync(link, { force: true });
        symlinkSync(other.path, link);
        const r = await apply(['--config', config, ...args], link);
        ok(r);
        expect(noted(r), what).toMatch(said);
        dumps.push(netlinkDump(other));
      } finally {
        other.remove();
      }
    }
    expect(dumps[0]).toMatch(/\[ payload load 4b @ network header \+ 12 => reg 1 \]/);
    expect(dumps[1]).toBe(dumps[0]);
    expect(dumps[2]).toBe(dumps[0]);
    expect(compiledIn(cache)).toHaveLength(1);
  });

  it('apply stores after its commit; the next apply compiles nothing and writes the same bytes, and prints the same plan', async () => {
    const { cache, config } = setUp();
    const cold = await apply(['--config', config, '--cache-dir', cache]);
    ok(cold);
    expect(noted(cold)).toMatch(/compile cache not used \(there is none/);
    expect(compiledIn(cache)).toHaveLength(1);
    const coldDump = netlinkDump();
    ns.exec('nft', ['flush', 'ruleset']);
    const warm = await apply(['--config', config, '--cache-dir', cache]);
    ok(warm);
    expect(noted(warm)).toMatch(/compile cache matches every input/);
    expect(netlinkDump()).toBe(coldDump);
    ns.exec('nft', ['flush', 'ruleset']);
    const none = await apply(['--config', config, '--no-cache-dir']);
    ok(none);
    expect(netlinkDump()).toBe(coldDump);
    expect(coldDump).toMatch(/\[ meta load iifname|\[ meta load iif /);
    // The plan (stdout is a pipe): the warm one from the texts the cold apply's store kept, the same.
    expect(none.out.join('\n')).toContain(`iif "dummy0" accept`);
    expect(none.out.join('\n')).toContain('ip saddr 10.2.3.231 tcp dport 443 counter accept');
    expect(cold.out).toEqual(none.out);
    expect(warm.out).toEqual(none.out);
  });

  // (that the entry so stored installs the same bytes: the test above, whose cold apply stores it so)
  it("a cold apply's store keeps each rule's expressions as its commit sent them: none encoded again", async () => {
    const { cache, config } = setUp();
    // In this process, to count the addon's calls: a store that encoded each rule again calls
    // encodeExprs once per rule (1,000 here).
    const addon = loadAddon();
    const encodes = vi.spyOn(addon, 'encodeExprs');
    try {
      const r = await cli('apply', '--config', config, '--cache-dir', cache, '--netns', ns.path);
      expect(r.code, r.err).toBe(0);
      expect(compiledIn(cache)).toHaveLength(1);
      expect(encodes.mock.calls.length).toBeLessThan(10);
    } finally {
      encodes.mockRestore();
    }
  });

  it("an entry the daemon stored (no plan printed, no rule texts kept): the first apply that prints its plan keeps the texts it rendered; the next prints the same plan, the kernel the same bytes", async () => {
    const { cache, config } = setUp();
    await runUntil(config, cache, 'compiled config stored in the compile cache');
    const daemonDump = netlinkDump();
    const encoded = join(cache, compiledIn(cache)[0]!.replace(/\.json$/, '.encoded'));
    const stored = readFileSync(encoded);
    const plans: string[][] = [];
    for (let i = 0; i < 2; i++) {
      ns.exec('nft', ['flush', 'ruleset']);
      const r = await apply(['--config', config, '--cache-dir', cache]);
      ok(r);
      expect(noted(r)).toMatch(/compile cache matches every input/);
      expect(netlinkDump()).toBe(daemonDump);
      plans.push(r.out);
      // The texts kept by the first: the file grew by them, and stays so.
      expect(readFileSync(encoded).length, `apply ${i + 1}`).toBeGreaterThan(stored.length + APPLY_STORES_FROM_RULES * 20);
    }
    expect(plans[0]!.join('\n')).toContain('ip saddr 10.2.3.231 tcp dport 443 counter accept');
    expect(plans[1]).toEqual(plans[0]);
    ns.exec('nft', ['flush', 'ruleset']);
    const none = await apply(['--config', config, '--no-cache-dir']);
    expect(none.out).toEqual(plans[0]);
  });

  it('a changed config is compiled, with the reason, and stored for the next', async () => {
    const { cache, config } = setUp();
    ok(await apply(['--config', config, '--cache-dir', cache]));
    writeFileSync(config, NFT(APPLY_STORES_FROM_RULES, 'ip saddr 10.1.0.3 tcp dport 22 counter drop'));
    const r = await apply(['--config', config, '--cache-dir', cache]);
    ok(r);
    expect(noted(r)).toMatch(/compile cache not used \(.*c\.nft changed\); .*c\.nft was compiled/);
    expect(ns.exec('nft', ['list', 'ruleset'])).toContain('ip saddr 10.1.0.3 tcp dport 22 counter packets 0 bytes 0 drop');
    expect(ns.exec('nft', ['list', 'ruleset'])).not.toContain('10.1.0.2');
    expect(noted(await apply(['--config', config, '--cache-dir', cache]))).toMatch(/compile cache matches every input/);
  });

  it('apply, then run: the daemon starts from the entry the apply stored', async () => {
    const { cache, config } = setUp();
    ok(await apply(['--config', config, '--cache-dir', cache]));
    const before = ns.exec('nft', ['list', 'ruleset']);
    const r = await runUntil(config, cache, 'nfkeeper running');
    expect(r.logs().find((l) => String(l.msg).startsWith('compile cache'))?.msg).toBe('compile cache matches every input: the config was not compiled');
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe(before);
    expect(compiledIn(cache)).toHaveLength(1);
  });

  it('--no-cache-dir: nothing read or stored; NFKEEPER_CACHE_DIR sets the directory when the flag does not', async () => {
    const { cache, config } = setUp();
    const viaEnv = (args: string[]) => {
      const r = nfk(['apply', '--config', config, '--netns', ns.path, '--progress', ...args], { env: { NFKEEPER_CACHE_DIR: cache } });
      return r.exited.then(({ code }) => ({ code, err: r.err }));
    };
    const off = await viaEnv(['--no-cache-dir']);
    ok(off);
    expect(noted(off)).toBe('nothing');
    expect(compiledIn(cache)).toEqual([]);
    const on = await viaEnv([]);
    ok(on);
    expect(noted(on)).toMatch(/compile cache not used \(there is none/);
    expect(compiledIn(cache)).toHaveLength(1);
    const offAgain = await viaEnv(['--no-cache-dir']);
    ok(offAgain);
    expect(noted(offAgain)).toBe('nothing');
  });

  it('a cache directory others can write: not read, not written; the apply succeeds', async () => {
    const { cache, config } = setUp();
    ok(await apply(['--config', config, '--cache-dir', cache]));
    expect(compiledIn(cache)).toHaveLength(1);
    ns.exec('nft', ['flush', 'ruleset']);
    chmodSync(cache, 0o777);
    const r = await apply(['--config', config, '--cache-dir', cache]);
    expect(r.code).toBe(0);
    expect(noted(r)).toMatch(/compile cache not used \(not trusted: .*cache may be written by others \(mode 777\)\)/);
    expect(others(r.err)).toEqual([
      expect.stringMatching(/^nfkeeper: the compiled config was not stored in the compile cache \(.*cache may be written by others \(mode 777\)\); the next apply compiles it again/),
    ]);
    expect(ns.exec('nft', ['list', 'ruleset'])).toContain('ip saddr 10.1.0.2 tcp dport 22 counter');
  });

  /**
   * `nfkeeper ARGS` inside the namespace as uid 65534 with CAP_NET_ADMIN only (as the image runs it
   * when not root), with HOME `home` and no NFKEEPER_CACHE_DIR: the default cache directory.
   */
  function asNobody(home: string, args: string[]) {
    const r = spawnSync('ip', ['netns', 'exec', ns.name, 'setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups',
      '--inh-caps', '+net_admin', '--ambient-caps', '+net_admin', 'env', '-i', `PATH=${process.env.PATH}`, `HOME=${home}`,
      process.execPath, '--import', 'tsx', ENTRY, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 90_000 });
    return { code: r.status, out: r.stdout, err: r.stderr.split('\n').filter(Boolean) };
  }

  it('not root: the default cache is under the user\'s home; a default that cannot be made is said only with --progress', async () => {
    const { config } = setUp();
    chmodSync(join(config, '..'), 0o755);
    const home = tempDir('cli-apply-cache-home', { mode: 0o755 });
    chownSync(home, 65534, 65534);
    const cold = asNobody(home, ['apply', '--config', config, '--progress']);
    expect(cold.code, cold.err.join('\n')).toBe(0);
    expect(noted(cold)).toMatch(new RegExp(`compile cache not used \\(there is none \\(${home}/\\.cache/nfkeeper/compiled-`));
    expect(compiledIn(join(home, '.cache', 'nfkeeper'))).toHaveLength(1);
    ns.exec('nft', ['flush', 'ruleset']);
    const warm = asNobody(home, ['apply', '--config', config, '--progress']);
    expect(warm.code).toBe(0);
    expect(noted(warm)).toMatch(/compile cache matches every input/);
    // No home to keep a cache in: every apply compiles, and says nothing of it unless asked.
    for (const progress of [false, true]) {
      ns.exec('nft', ['flush', 'ruleset']);
      const r = asNobody('/nonexistent', ['apply', '--config', config, ...(progress ? ['--progress'] : [])]);
      expect(r.code).toBe(0);
      expect(ns.exec('nft', ['list', 'ruleset'])).toContain('ip saddr 10.1.0.2 tcp dport 22 counter');
      const notStored = r.err.filter((l) => /not stored in the compile cache/.test(l));
      expect(notStored, r.err.join('\n')).toEqual(progress ? [expect.stringMatching(/^nfkeeper: the compiled config was not stored in the compile cache \(EACCES: permission denied, mkdir '\/nonexistent\/\.cache\/nfkeeper'\); the next apply compiles it again/)] : []);
      if (!progress) expect(r.err).toEqual([]);
    }
    // The same directory chosen with --cache-dir: said at every apply.
    const chosen = asNobody('/nonexistent', ['apply', '--config', config, '--cache-dir', '/nonexistent/cache']);
    expect(chosen.code).toBe(0);
    expect(chosen.err).toEqual([expect.stringMatching(/^nfkeeper: the compiled config was not stored in the compile cache \(EACCES/)]);
  });

  it('check reads the entry apply and run store, and stores none; its verdict is the same', async () => {
    const { cache, config } = setUp();
    const check = (args: string[]) => {
      const r = nfk(['check', '--config', config, '--netns', ns.path, '--progress', ...args]);
      return r.exited.then(({ code }) => ({ code, err: r.err, out: r.out }));
    };
    // Nothing installed and no entry: the drift, compiled, nothing stored.
    const drift = await check(['--cache-dir', cache]);
    expect(drift.code).toBe(1);
    expect(drift.err.filter((l) => /compile cache/.test(l))).toEqual([`nfkeeper: compile cache: no entry worth reading for ${config} (run and apply store one; a small config's compiles faster); it was compiled`]);
    expect(compiledIn(cache)).toEqual([]);
    const applied = await apply(['--config', config, '--cache-dir', cache]);
    ok(applied);
    expect(noted(applied)).toMatch(/compile cache not used \(there is none/);
    expect(compiledIn(cache)).toHaveLength(1);
    const inSync = await check(['--cache-dir', cache]);
    expect(inSync.code).toBe(0);
    expect(noted(inSync)).toMatch(/compile cache matches every input/);
    expect(inSync.out).toEqual(['in sync']);
    // A rule deleted: the cached config sees the drift as the compiled one does.
    const handle = /ip saddr 10\.2\.0\.7 tcp dport 443 counter packets 0 bytes 0 accept # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'inet', 'ac', 'input']))![1]!;
    ns.exec('nft', ['delete', 'rule', 'inet', 'ac', 'input', 'handle', handle]);
    const [warm, off] = [await check(['--cache-dir', cache]), await check(['--no-cache-dir'])];
    expect(noted(warm)).toMatch(/compile cache matches every input/);
    expect(noted(off)).toBe('nothing');
    expect(warm.code).toBe(1);
    expect(off.code).toBe(1);
    expect(warm.out).toEqual(off.out);
    expect(warm.out.join('\n')).toContain('ip saddr 10.2.0.7 tcp dport 443 counter accept');
    // The config changed: the check compiles, and leaves the entry as apply stored it.
    const entry = join(cache, compiledIn(cache)[0]!);
    const stored = readFileSync(entry);
    writeFileSync(config, NFT(APPLY_STORES_FROM_RULES, 'ip saddr 10.1.0.3 tcp dport 22 counter drop'));
    const changed = await check(['--cache-dir', cache]);
    expect(changed.code).toBe(1);
    expect(noted(changed)).toMatch(/compile cache not used \(.*c\.nft changed\)/);
    expect(readFileSync(entry).equals(stored)).toBe(true);
  });

  it('check does not read the entry of a small config (its compile is cheaper), which the daemon stores', async () => {
    const { cache, config } = setUp(NFT(0));
    await runUntil(config, cache, 'compiled config stored in the compile cache');
    expect(compiledIn(cache)).toHaveLength(1);
    const c = nfk(['check', '--config', config, '--netns', ns.path, '--progress', '--cache-dir', cache]);
    expect((await c.exited).code).toBe(0);
    expect(c.err.filter((l) => /compile cache/.test(l))).toEqual([expect.stringMatching(/^nfkeeper: compile cache: no entry worth reading for /)]);
  });

  /** apply with `dir` a tmpfs mounted with `options` (in a mount namespace of its own). */
  function applyOnMount(dir: string, options: string, args: string[]) {
    mkdirSync(dir, { recursive: true });
    const r = spawnSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', `mount -t tmpfs -o ${options} nfk-cache "$0" && shift && exec "$@"`,
      dir, 'x', process.execPath, '--import', 'tsx', ENTRY, 'apply', ...args, '--cache-dir', dir, '--netns', ns.path, '--progress'],
    { cwd: ROOT, encoding: 'utf8', timeout: 90_000 });
    return { code: r.status, err: r.stderr.split('\n').filter(Boolean) };
  }

  it('a config of fewer rules than APPLY_STORES_FROM_RULES is not stored by apply (its compile is cheaper), but is read when the daemon stored it', async () => {
    const { cache, config } = setUp(NFT(APPLY_STORES_FROM_RULES - 7)); // one rule fewer: the config has 6 besides the extra ones
    const first = await apply(['--config', config, '--cache-dir', cache]);
    ok(first);
    expect(noted(first)).toMatch(/compile cache not used \(there is none/);
    expect(compiledIn(cache)).toEqual([]);
    await runUntil(config, cache, 'compiled config stored in the compile cache');
    ns.exec('nft', ['flush', 'ruleset']);
    const after = await apply(['--config', config, '--cache-dir', cache]);
    ok(after);
    expect(noted(after)).toMatch(/compile cache matches every input/);
    expect(ns.exec('nft', ['list', 'ruleset'])).toContain('ip saddr 10.1.0.2 tcp dport 22 counter');
  });

  it('a read-only or full cache directory: the apply succeeds, the kernel as desired, one line says nothing was stored', async () => {
    const { cache, config } = setUp();
    for (const [options, why] of [['ro,mode=0700', /EROFS|read-only file system/], ['size=4k,mode=0700', /ENOSPC|no space left/]] as const) {
      ns.exec('nft', ['flush', 'ruleset']);
      const r = applyOnMount(cache, options, ['--config', config]);
      expect(r.code, r.err.join('\n')).toBe(0);
      const lines = others(r.err);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^nfkeeper: the compiled config was not stored in the compile cache \(/);
      expect(lines[0]).toMatch(why);
      expect(ns.exec('nft', ['list', 'ruleset'])).toContain('ip saddr 10.2.3.231 tcp dport 443 counter');
    }
    // (the mounts were the child's own: the directory here is as it was, empty)
    expect(readdirSync(cache)).toEqual([]);
  });
});
