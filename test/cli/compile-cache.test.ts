/**
 * `nfkeeper run` with its compile cache (src/config/compile-cache.ts) in --cache-dir, apart from the
 * restart record (--record-dir):
 * stored once the daemon is running; a restart with both finds every input unchanged and starts
 * with no rule compiled and none read, nothing written. An interface renumbered in the namespace,
 * the config changed, or the cache file damaged: compiled again, and the kernel ends as the config
 * says now. The cache's logic is tested in test/config/compile-cache.test.ts; this is the daemon's.
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generationOf, netnsPerTest } from '../helpers/netns-hooks.js';
import { writeSealed } from '../../src/base/sealed-file.js';
import { tempDir } from '../helpers/tmp.js';
import { ownersYaml, ownerSpec } from '../owners/fixtures.js';
import { nfk, rawCall, waitFor } from './spawn.js';

const nft = (rules: string[]) => `table ip cc {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n${rules.map((r) => `\t\t${r}\n`).join('')}\t}\n}\n`;
const RULES = ['iif "dummy0" ip saddr 192.0.2.1 accept', 'ip saddr 10.0.0.1 tcp dport 22 counter accept', 'ip saddr 10.0.0.2 tcp dport 22 counter accept'];

describe('nfkeeper run: the compile cache', { timeout: 180_000 }, () => {
  const ns = netnsPerTest('cli-cache');

  /** One daemon from start to SIGTERM (once its cache is stored, if `stored`); its log lines. */
  async function runOnce(args: string[], dir: string): Promise<Record<string, unknown>[]> {
    const r = nfk(['run', ...args, '--netns', ns.path, '--no-metrics', '--log-level', 'debug']);
    try {
      await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running'));
      // The compile cache is stored after the daemon is running (or said why not).
      await waitFor('the compile cache', () => r.logs().some((l) => /^compile(d config| cache matches)/.test(String(l.msg))));
    } finally {
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
    expect(readdirSync(dir).some((f) => f.startsWith('compiled-'))).toBe(true);
    return r.logs();
  }
  const said = (logs: Record<string, unknown>[], prefix: string) => {
    const l = logs.find((x) => String(x.msg).startsWith(prefix));
    return l ? `${String(l.msg)}${l.why ? `: ${String(l.why)}` : ''}` : 'nothing';
  };
  const ruleset = () => ns.exec('nft', ['list', 'ruleset']);
  const gen = () => generationOf(ns);

  function setUp() {
    ns.exec('ip', ['link', 'add', 'dummy0', 'type', 'veth', 'peer', 'name', 'peer0']);
    const dir = join(tempDir('cli-cache'), 'cache');
    const record = join(tempDir('cli-cache'), 'record');
    const config = join(tempDir('cli-cache-config'), 'c.nft');
    writeFileSync(config, nft(RULES));
    return { dir, record, config, args: ['--config', config, '--record-dir', record, '--cache-dir', dir] };
  }

  it('a restart with the record and the cache: nothing compiled, no rule read, nothing written', async () => {
    const { dir, args } = setUp();
    const first = await runOnce(args, dir);
    expect(said(first, 'compile cache')).toMatch(/^compile cache not used; the config was compiled: there is none/);
    const cache = readdirSync(dir).find((f) => f.startsWith('compiled-') && f.endsWith('.json'))!;
    expect(statSync(join(dir, cache)).mode & 0o777).toBe(0o600);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    // The first start leaves its record at ready (not verified: its install is not read back yet); the second adopts it; the third has both.
    const second = await runOnce(args, dir);
    expect(said(second, 'compile cache')).toMatch(/^compile cache matches every input/);
    const g = gen();
    const before = ruleset();
    const third = await runOnce(args, dir);
    expect(said(third, 'compile cache')).toMatch(/^compile cache matches every input: the config was not compiled/);
    expect(said(third, 'restart record')).toMatch(/^restart record matches the kernel/);
    expect(gen()).toBe(g);
    expect(ruleset()).toBe(before);
  });

  it('stopped (SIGTERM) the moment it is running after a start that compiled: its store ends first, and the next start compiles nothing', async () => {
    const { dir, args } = setUp();
    // Big enough that the store is still under way when the signal comes (10,000 rules: ~0.2 s of it).
    const big = [...RULES, ...Array.from({ length: 10_000 }, (_, i) => `ip saddr 10.3.${i >> 8}.${i & 255} tcp dport 443 counter accept`)];
    writeFileSync(args[1]!, nft(big));
    const r = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running'), 120_000);
    } finally {
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
    const msgs = r.logs().map((l) => String(l.msg));
    // Said in this order: the stop, then the store's end (the store was under way when the signal came).
    expect(msgs.indexOf('compiled config stored in the compile cache')).toBeGreaterThan(msgs.indexOf('stopping; rules stay in place'));
    expect(msgs.indexOf('stopping; rules stay in place')).toBeGreaterThan(-1);
    const second = await runOnce(args, dir);
    expect(said(second, 'compile cache')).toMatch(/^compile cache matches every input: the config was not compiled/);
  });

  it('a reboot (the record directory emptied, the cache directory kept): the first start compiles nothing; a cache left in the record directory by an earlier version is not read', async () => {
    const { dir, record, args } = setUp();
    await runOnce(args, dir);
    const stored = readdirSync(dir).find((f) => f.startsWith('compiled-') && f.endsWith('.json'))!;
    // /run cleared; an earlier version's cache beside the record would be there only before a reboot,
    // but one there is not looked at: a damaged one does not matter.
    rmSync(record, { recursive: true, force: true });
    mkdirSync(record, { mode: 0o700 });
    writeFileSync(join(record, stored), 'not a cache\n', { mode: 0o600 });
    ns.exec('nft', ['flush', 'ruleset']);
    const logs = await runOnce(args, dir);
    expect(said(logs, 'compile cache')).toBe('compile cache matches every input: the config was not compiled');
    expect(said(logs, 'restart record')).toMatch(/^restart record not used/);
    expect(ruleset()).toContain('ip saddr 10.0.0.2 tcp dport 22 counter packets 0 bytes 0 accept');
    // --no-cache-dir: compiled, nothing read or written there.
    const before = readFileSync(join(dir, stored));
    const off = nfk(['run', ...args, '--no-cache-dir', '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => off.logs().some((l) => l.msg === 'nfkeeper running'));
    } finally {
      off.child.kill('SIGTERM');
    }
    expect((await off.exited).code).toBe(0);
    expect(off.logs().some((l) => String(l.msg).startsWith('compile'))).toBe(false);
    expect(readFileSync(join(dir, stored))).toEqual(before);
  });

  it('a restart with the record and the cache: a rule deleted right after ready is put back; the config changed then is reloaded', async () => {
    const { dir, config, args } = setUp();
    await runOnce(args, dir);
    await runOnce(args, dir);
    const r = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running'));
      expect(said(r.logs(), 'compile cache')).toMatch(/^compile cache matches every input/);
      expect(said(r.logs(), 'restart record')).toMatch(/^restart record matches the kernel/);
      const handle = /ip saddr 10\.0\.0\.2 tcp dport 22 counter packets \d+ bytes \d+ accept # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'cc', 'input']))![1]!;
      ns.exec('nft', ['delete', 'rule', 'ip', 'cc', 'input', 'handle', handle]);
      await waitFor('the rule put back', () => /ip saddr 10\.0\.0\.2 tcp dport 22/.test(ruleset()));
      // The config's digest came from the load (not a read after it): a change now is a change.
      writeFileSync(config, nft([...RULES, 'ip saddr 10.0.0.3 tcp dport 22 counter accept']));
      await waitFor('the reload', () => r.logs().some((l) => l.msg === 'config reloaded'));
      expect(ruleset()).toMatch(/ip saddr 10\.0\.0\.3 tcp dport 22/);
    } finally {
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
  });

  it('an interface renumbered: compiled again, and the kernel matches the new index', async () => {
    const { dir, args } = setUp();
    await runOnce(args, dir);
    const index = () => JSON.parse(ns.exec('ip', ['-j', 'link', 'show', 'dummy0']))[0].ifindex as number;
    const was = index();
    ns.exec('ip', ['link', 'del', 'dummy0']);
    ns.exec('ip', ['link', 'add', 'dummy0', 'type', 'veth', 'peer', 'name', 'peer0']);
    expect(index()).not.toBe(was);
    const logs = await runOnce(args, dir);
    expect(said(logs, 'compile cache')).toMatch(new RegExp(`not used; the config was compiled: the interface dummy0 has index ${index()} now, not ${was}`));
    // nft names the rule's interface by the index the kernel holds: the new dummy0's.
    expect(ruleset()).toContain('iif "dummy0" ip saddr 192.0.2.1 accept');
    expect(said(await runOnce(args, dir), 'compile cache')).toMatch(/^compile cache matches/);
  });

  it('the config changed: compiled again, the kernel as the new config says', async () => {
    const { dir, config, args } = setUp();
    await runOnce(args, dir);
    writeFileSync(config, nft([...RULES, 'ip saddr 10.0.0.3 tcp dport 22 counter drop']));
    const logs = await runOnce(args, dir);
    expect(said(logs, 'compile cache')).toMatch(/not used; the config was compiled: .*c\.nft changed/);
    expect(ruleset()).toContain('ip saddr 10.0.0.3 tcp dport 22 counter packets 0 bytes 0 drop');
  });

  it('owners: registered owners and their rules stay through a restart from the cache, and a changed config reloads (SIGHUP) compiled', async () => {
    const d = tempDir('cli-cache-owners');
    const config = join(d, 'config.yaml');
    writeFileSync(config, ownersYaml(d));
    const socket = join(d, 'nfkeeper.sock');
    const args = ['--config', config, '--record-dir', join(d, 'rec'), '--cache-dir', join(d, 'cache')];
    // The first start registers two owners; the second finds the config compiled in the cache.
    const first = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => first.logs().some((l) => l.msg === 'nfkeeper running'));
      for (const id of ['alloc-1', 'alloc-2']) {
        expect((await rawCall(socket, 'PUT', `/v1/owners/${id}`, JSON.stringify(ownerSpec(Number(id.slice(-1)))))).status).toBe(201);
      }
      await waitFor('the compile cache', () => first.logs().some((l) => /^compiled config/.test(String(l.msg))));
    } finally {
      first.child.kill('SIGTERM');
    }
    expect((await first.exited).code).toBe(0);
    const before = ruleset();
    expect(before).toMatch(/comment "nfkeeper-owner=alloc-2"/);
    const second = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => second.logs().some((l) => l.msg === 'nfkeeper running'));
      expect(said(second.logs(), 'compile cache')).toMatch(/^compile cache matches every input/);
      const listed = await rawCall(socket, 'GET', '/v1/owners', '');
      expect(listed.body.owners.map((o: { id: string }) => o.id)).toEqual(['alloc-1', 'alloc-2']);
      expect(ruleset()).toBe(before);
      // A reload with a changed config: compiled, the owners' rules kept.
      writeFileSync(config, ownersYaml(d).replace('tables:', 'tables:\n  - family: ip\n    name: extra\n    chains:\n      - name: c\n        rules: ["ip daddr 192.0.2.99 return"]'));
      second.child.kill('SIGHUP');
      await waitFor('the reload', () => second.logs().some((l) => l.msg === 'config reloaded'));
      // (the file's watch may reload it a second time: from the cache the first reload stored, or compiled before that)
      const loads = second.logs().filter((l) => String(l.msg).startsWith('compile cache')).map((l) => String(l.msg));
      expect(loads.slice(0, 2)).toEqual(['compile cache matches every input: the config was not compiled', 'compile cache not used; the config was compiled']);
      const after = ruleset();
      expect(after).toContain('ip daddr 192.0.2.99 return');
      expect(after).toMatch(/comment "nfkeeper-owner=alloc-2"/);
    } finally {
      second.child.kill('SIGTERM');
    }
    expect((await second.exited).code).toBe(0);
  });

  it('the cache cut short or changed: compiled, the kernel as desired, nothing written', async () => {
    const { dir, args } = setUp();
    await runOnce(args, dir);
    await runOnce(args, dir);
    const file = join(dir, readdirSync(dir).find((f) => f.startsWith('compiled-') && f.endsWith('.json'))!);
    const whole = readFileSync(file);
    const before = ruleset();
    const g = gen();
    // A cut in the header, one in the rules, a byte changed in the rules' part and in the digest.
    const nl = whole.indexOf(0x0a);
    const flipped = (at: number) => {
      const b = Buffer.from(whole);
      b[at] = b[at]! ^ 1;
      return b;
    };
    const variants = [whole.subarray(0, nl - 3), whole.subarray(0, whole.length - 100), flipped(nl + 20), flipped(whole.length - 5)];
    for (const bytes of variants) {
      writeFileSync(file, bytes, { mode: 0o600 });
      const logs = await runOnce(args, dir);
      expect(said(logs, 'compile cache')).toMatch(/not used; the config was compiled: .* is cut short or corrupt/);
      // Adopted, or (the record not verified: each start here ends within trustOwnCommitMs) read at
      // the third adoption (MAX_UNVERIFIED_ADOPTIONS): either way nothing is written.
      expect(said(logs, 'restart record')).toMatch(/^restart record (matches the kernel|not used; .*: 2 starts adopted it and none read it back)/);
      expect(gen()).toBe(g);
      expect(ruleset()).toBe(before);
    }
  });
  it("a sealed cache whose rules cannot be made: the daemon says so and exits, the cache removed; the next start compiles", async () => {
    const { dir, args } = setUp();
    await runOnce(args, dir);
    await runOnce(args, dir);
    const file = join(dir, readdirSync(dir).find((f) => f.startsWith('compiled-') && f.endsWith('.json'))!);
    const whole = readFileSync(file, 'latin1');
    const body = whole.slice(0, whole.lastIndexOf('\n', whole.length - 2));
    // After the header, the chains' counts and the number of expression lines: the chain's length
    // in bytes, then its rules a line each. The second rule names an expression not stored.
    const lines = body.split('\n');
    const chainLine = 3 + Number(lines[2]);
    const rules = lines.slice(chainLine + 1, chainLine + 4);
    expect(Number(lines[chainLine])).toBe(Buffer.byteLength(rules.map((l) => `${l}\n`).join('')));
    const [text, exprs] = JSON.parse(rules[1]!) as [string, number[]];
    expect(text).toBe('ip saddr 10.0.0.1 tcp dport 22 counter accept');
    lines[chainLine + 2] = JSON.stringify([text, [...exprs.slice(1), 1e6]]);
    lines[chainLine] = String(Buffer.byteLength(lines.slice(chainLine + 1, chainLine + 4).map((l) => `${l}\n`).join('')));
    // A fault of nfkeeper's own, not a damaged file: the seal is right.
    // (as read: the serialized rest after the rules' lines is bytes, not UTF-8)
    writeSealed(file, dir, [Buffer.from(lines.join('\n'), 'latin1')]);
    const g = gen();
    const before = ruleset();
    const r = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    const { code } = await r.exited;
    expect(code).not.toBe(0);
    expect(said(r.logs(), 'compile cache')).toMatch(/^compile cache matches every input/);
    expect(r.logs().some((l) => /could not be read back \(rule 2 of chain input names an expression not stored\); removed, the next start compiles/.test(String(l.msg)))).toBe(true);
    expect(readdirSync(dir).some((f) => f.startsWith('compiled-'))).toBe(false);
    expect(gen()).toBe(g);
    expect(ruleset()).toBe(before);
    const next = await runOnce(args, dir);
    expect(said(next, 'compile cache')).toMatch(/^compile cache not used; the config was compiled: there is none/);
    expect(ruleset()).toBe(before);
  });
});
