/**
 * A daemon's reload compiles only what changed (src/config/rule-reuse.ts): the config in force's
 * rules whose text and context are unchanged are taken as compiled, and the kernel after the
 * reload is what a fresh start of the new config installs. Counted by the `config reloaded` line's
 * `rules` (what the load compiled and reused).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { nfk, waitFor, type Running } from './spawn.js';

const N = 3000;
const rule = (i: number, port = 1 + i) => `ip saddr 10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255} tcp dport ${port} counter accept`;
const configOf = (rules: string[]) =>
  'tables:\n  - family: ip\n    name: big\n    chains:\n      - name: c\n        type: filter\n        hook: forward\n        priority: 0\n        rules:\n' +
  rules.map((r) => `          - ${JSON.stringify(r)}\n`).join('');
const RULES = Array.from({ length: N }, (_, i) => rule(i));

describe('a reload reuses what the config in force compiled', () => {
  const ns = netnsPerTest('reuse');
  const other = netnsPerTest('reuse-fresh');
  const logged = (d: Running, msg: string, k = 1) => waitFor(msg, () => d.logs().filter((l) => l.msg === msg).length >= k, 120_000);
  const reloads = (d: Running) => d.logs().filter((l) => l.msg === 'config reloaded');
  const stop = async (d: Running) => {
    d.child.kill('SIGTERM');
    await d.exited;
  };
  /** What a fresh start of `text` installs, in the other namespace. */
  const freshDump = async (text: string, dir: string) => {
    const config = join(dir, 'fresh.yaml');
    writeFileSync(config, text);
    const d = nfk(['run', '--config', config, '--netns', other.path, '--no-metrics', '--no-cache-dir']);
    try {
      await logged(d, 'nfkeeper running');
    } finally {
      await stop(d);
    }
    return other.exec('nft', ['--debug=netlink', 'list', 'ruleset']).replace(/^(ip \S+ \S+)(?: \d+)+$/gm, '$1');
  };
  const dumpOf = () => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']).replace(/^(ip \S+ \S+)(?: \d+)+$/gm, '$1');

  it(`one rule edited among ${N}: that rule compiled, the kernel as a fresh start installs the new config`, async () => {
    const dir = tempDir('reload-reuse');
    const config = join(dir, 'c.yaml');
    writeFileSync(config, configOf(RULES));
    const d = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--cache-dir', join(dir, 'cache')]);
    try {
      await logged(d, 'nfkeeper running');
      await logged(d, 'compiled config stored in the compile cache');
      const edited = RULES.map((r, i) => (i === 1234 ? rule(i, 60_001) : r));
      writeFileSync(config, configOf(edited));
      d.child.kill('SIGHUP');
      await waitFor('the reload', () => reloads(d).length === 1, 120_000);
      expect(reloads(d)[0]!.rules).toEqual({ compiled: 1, reused: N - 1 });
      expect(dumpOf()).toBe(await freshDump(configOf(edited), dir));
      expect(netlinkDump(ns, 'ip', 'big')).toContain('[ cmp eq reg 1 0x000061ea ]');  // 60001, the edit's port
    } finally {
      await stop(d);
    }
  });

  it("an interface's index changed: the rule that resolved it compiled again, the kernel holds the new index", async () => {
    const link = (name: string) => ns.exec('ip', ['link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`]);
    const indexOf = (name: string) => Number(/^(\d+):/.exec(ns.exec('ip', ['-o', 'link', 'show', name]))![1]);
    link('d0');
    const was = indexOf('d0');
    const dir = tempDir('reload-reuse-if');
    const config = join(dir, 'c.yaml');
    const rules = ['iif "d0" counter accept', ...RULES.slice(0, 200)];
    writeFileSync(config, configOf(rules));
    const d = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--no-cache-dir']);
    try {
      await logged(d, 'nfkeeper running');
      d.child.kill('SIGHUP');
      await waitFor('the reload', () => reloads(d).length === 1, 120_000);
      expect(reloads(d)[0]!.rules).toEqual({ compiled: 0, reused: 201 });
      // d0 again, with another index: the text is the same, the compiled rule is not.
      ns.exec('ip', ['link', 'del', 'd0']);
      link('d1');
      link('d0');
      expect(indexOf('d0')).not.toBe(was);
      d.child.kill('SIGHUP');
      await waitFor('the reload', () => reloads(d).length === 2, 120_000);
      expect(reloads(d)[1]!.rules).toEqual({ compiled: 1, reused: 200 });
      // The kernel matches d0's index now: nft names it (a stale index would be printed as a number, or as another link).
      expect(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'c'])).toContain('iif "d0" counter');
      expect(netlinkDump(ns, 'ip', 'big')).toContain(`[ cmp eq reg 1 0x${indexOf('d0').toString(16).padStart(8, '0')} ]`);
    } finally {
      await stop(d);
    }
  });

  it('a daemon started from the compile cache reuses the rules it read from there', async () => {
    const dir = tempDir('reload-reuse-cache');
    const config = join(dir, 'c.yaml');
    const cache = join(dir, 'cache');
    writeFileSync(config, configOf(RULES));
    const first = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--cache-dir', cache]);
    try {
      await logged(first, 'compiled config stored in the compile cache');
    } finally {
      await stop(first);
    }
    const d = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--cache-dir', cache]);
    try {
      await logged(d, 'nfkeeper running');
      expect(d.logs().some((l) => String(l.msg).startsWith('compile cache matches every input'))).toBe(true);
      const edited = RULES.map((r, i) => (i === 10 ? rule(i, 60_002) : r));
      writeFileSync(config, configOf(edited));
      d.child.kill('SIGHUP');
      await waitFor('the reload', () => reloads(d).length === 1, 120_000);
      expect(reloads(d)[0]!.rules).toEqual({ compiled: 1, reused: N - 1 });
      expect(dumpOf()).toBe(await freshDump(configOf(edited), dir));
    } finally {
      await stop(d);
    }
  });
});
