/**
 * `nfkeeper run --record-dir`: the daemon keeps its restart record there (src/keeper/record.ts),
 * written at ready and at SIGTERM; the next daemon on the same namespace adopts the ruleset from it without a
 * commit and says so. `--no-record` keeps none. The record's logic is tested on the kernel in
 * test/keeper/record.test.ts; this is the command line's wiring.
 */
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { postroutingYaml } from '../keeper/helpers.js';
import { nfk, waitFor } from './spawn.js';

const YAML = postroutingYaml('rec', ['ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random', 'ip daddr 192.0.2.1 return']);

describe('nfkeeper run: the restart record', { timeout: 120_000 }, () => {
  const ns = netnsPerTest('cli-record');

  /** One daemon from start to SIGTERM; its log lines. */
  async function runOnce(args: string[]): Promise<Record<string, unknown>[]> {
    const r = nfk(['run', ...args, '--netns', ns.path, '--no-metrics']);
    try {
      await waitFor('nfkeeper running', () => r.logs().some((l) => l.msg === 'nfkeeper running'));
    } finally {
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
    return r.logs();
  }

  it('a restart adopts the ruleset from the record its predecessor wrote at SIGTERM, with no commit', async () => {
    const dir = join(tempDir('cli-record'), 'state');
    const config = join(tempDir('cli-record-config'), 'c.yaml');
    writeFileSync(config, YAML);
    const args = ['--config', config, '--record-dir', dir];
    // The install writes its record at ready, marked not verified (its own commit, not read back
    // yet); the next start adopts it, and would read it back trustOwnCommitMs later (10 s).
    await runOnce(args);
    const second = await runOnce(args);
    const adopted = second.find((l) => String(l.msg).startsWith('restart record'));
    expect(adopted?.msg).toMatch(/^restart record matches the kernel/);
    expect(adopted?.verified).toBe(false);
    // The record alone: the compile cache is in --cache-dir (test/cli/compile-cache.test.ts).
    expect(readdirSync(dir).filter((f) => !f.startsWith('restart-'))).toEqual([]);
    const records = readdirSync(dir).filter((f) => f.startsWith('restart-'));
    expect(records).toHaveLength(1);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, records[0]!)).mode & 0o777).toBe(0o600);
    const sock = open({ netns: ns.path });
    try {
      const gen = sock.generation();
      const third = await runOnce(args);
      expect(third.find((l) => String(l.msg).startsWith('restart record'))?.msg).toMatch(/^restart record matches the kernel/);
      expect(sock.generation()).toBe(gen);
    } finally {
      sock.close();
    }
  });

  it('with owners: adopted while the state file holds the owners recorded; an owner registered meanwhile refuses the record', async () => {
    const dir = join(tempDir('cli-record'), 'state');
    const etc = tempDir('cli-record-config');
    const config = join(etc, 'c.yaml');
    const state = join(etc, 'owners.json');
    writeFileSync(config, `${postroutingYaml('rec', ['ip daddr 192.0.2.1 return'], 'post', { side: ['ip daddr 198.51.100.1 return'] })}owners:\n  family: ip\n  table: rec\n` +
      `  dispatch: [side]\n  socket: ${join(etc, 'owners.sock')}\n  state: ${state}\n`);
    const owner = (n: number) => ({ chains: [{ name: 'c', rules: [`ip daddr 192.0.2.${n} accept`] }], jumps: { side: [`ip saddr 10.9.0.${n} jump c`] } });
    writeFileSync(state, `${JSON.stringify({ version: 1, owners: { a: owner(1) } })}\n`);
    const args = ['--config', config, '--record-dir', dir];
    const said = (logs: Record<string, unknown>[]) => {
      const l = logs.find((x) => String(x.msg).startsWith('restart record'));
      return `${String(l?.msg)}: ${String(l?.why ?? '')}`;
    };
    await runOnce(args);
    await runOnce(args);
    const sock = open({ netns: ns.path });
    try {
      const gen = sock.generation();
      expect(said(await runOnce(args))).toMatch(/^restart record matches the kernel/);
      expect(sock.generation()).toBe(gen);
      // Registered while no daemon ran: the state file holds b too.
      writeFileSync(state, `${JSON.stringify({ version: 1, owners: { a: owner(1), b: owner(2) } })}\n`);
      expect(said(await runOnce(args))).toMatch(/^restart record not used.*: the desired state \(config or owners\) changed/);
      expect(sock.generation()).not.toBe(gen);
      expect(ns.exec('nft', ['list', 'chain', 'ip', 'rec', 'o/b/c'])).toMatch(/ip daddr 192\.0\.2\.2 accept/);
    } finally {
      sock.close();
    }
  });

  it('--no-record: no record kept, none looked for', async () => {
    const dir = join(tempDir('cli-record'), 'state');
    const config = join(tempDir('cli-record-config'), 'c.yaml');
    writeFileSync(config, YAML);
    for (let i = 0; i < 2; i++) {
      const logs = await runOnce(['--config', config, '--record-dir', dir, '--no-record']);
      expect(logs.some((l) => String(l.msg).startsWith('restart record'))).toBe(false);
    }
    expect(() => readdirSync(dir)).toThrow(/ENOENT/);
  });
});
