import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { Keeper, cleanup } from '../../src/keeper/keeper.js';
import { TableOwnedError } from '../../src/keeper/table.js';
import { startKeeper } from '../helpers/keeper.js';
import { type Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { FLANNEL_RULES, FLANNEL_YAML, chainLines, handles } from './helpers.js';

const PROTECTED_YAML = FLANNEL_YAML.replace('    name: nfkeeper\n', '    name: nfkeeper\n    protect: true\n');
const CHAIN = ['ip', 'nfkeeper', 'postrouting'] as const;
const config = () => parseConfig(PROTECTED_YAML, 'protected.yaml');

function tryNft(ns: Netns, script: string): { ok: boolean; err: string } {
  try {
    ns.nft(script);
    return { ok: true, err: '' };
  } catch (e) {
    return { ok: false, err: (e as Error).message };
  }
}

describe('protect mode', () => {
  const { ns, sock } = socketPerTest('protect');
  const keepers: Keeper[] = [];

  afterEach(async () => {
    for (const k of keepers.splice(0)) await k.stop();
  });

  async function start(): Promise<Keeper> {
    const k = await startKeeper(ns, { config: config() });
    keepers.push(k);
    return k;
  }

  it('creates the table owned by its socket, and the kernel refuses every tampering', async () => {
    const k = await start();
    const table = await sock.getTable('ip', 'nfkeeper');
    expect(table?.flags).toBe(0x6);
    expect(table?.owner).toBe(k.socket!.portId);
    expect(k.status().tables[0]).toMatchObject({ protection: 'protected', state: 'verified' });
    const h = handles(ns, ...CHAIN);

    expect(tryNft(ns, 'delete table ip nfkeeper').err).toMatch(/Operation not permitted/);
    expect(tryNft(ns, `delete rule ip nfkeeper postrouting handle ${h[0]}`).err).toMatch(/Operation not permitted/);
    expect(tryNft(ns, 'add rule ip nfkeeper postrouting counter accept').ok).toBe(false);
    tryNft(ns, 'flush ruleset');  // returns 0 and leaves the owned table alone
    ns.exec('iptables-nft', ['-t', 'nat', '-A', 'POSTROUTING', '-j', 'MASQUERADE']);
    ns.exec('iptables-nft', ['-t', 'nat', '-F']);

    expect(handles(ns, ...CHAIN)).toEqual(h);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
  });

  it('a second keeper on the same config refuses to start, naming the owner', async () => {
    const first = await start();
    const second = new Keeper({ config: config(), netns: ns.path, intervalMs: 3_600_000 });
    const err = await second.start().then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(TableOwnedError);
    expect((err as TableOwnedError).portId).toBe(first.socket!.portId);
    expect((err as Error).message).toContain(String(first.socket!.portId));
    expect(handles(ns, ...CHAIN)).toHaveLength(4);
  });

  it('check reads a table the daemon owns; apply and cleanup are refused while it runs; cleanup works once it stopped', async () => {
    const k = await start();
    const { checkOnce } = await import('../../src/keeper/keeper.js');
    const checked = await checkOnce(sock, config(), false);
    expect(checked.drift.flatMap((d) => d.drift)).toEqual([]);
    await expect(checkOnce(sock, config(), true)).rejects.toBeInstanceOf(TableOwnedError);
    await expect(cleanup(sock, config())).rejects.toBeInstanceOf(TableOwnedError);
    await k.stop();
    const table = await sock.getTable('ip', 'nfkeeper');
    expect(table?.flags).toBe(0x4);  // persist, no owner: an orphan, still in place
    expect(await cleanup(sock, config())).toEqual(['ip nfkeeper']);
    expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
  });

  it('recreates an existing unprotected table as an owned one, atomically', async () => {
    ns.nft(`add table ip nfkeeper
add chain ip nfkeeper postrouting { type nat hook postrouting priority srcnat; }
add rule ip nfkeeper postrouting ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return`);
    const gen = sock.generation();
    const k = await start();
    expect(sock.generation()).toBe(gen + 1);
    expect((await sock.getTable('ip', 'nfkeeper'))?.owner).toBe(k.socket!.portId);
    expect(chainLines(ns, ...CHAIN)).toEqual(FLANNEL_RULES);
  });

  it('survives kill -9 as an orphan and a new keeper claims it without rewriting a rule', async () => {
    const dir = tempDir('protect');
    const file = join(dir, 'protected.yaml');
    writeFileSync(file, PROTECTED_YAML);
    const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', file, '--netns', ns.path, '--record-dir', ns.record, '--no-metrics'],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    try {
      for (let i = 0; i < 100 && (await sock.getTable('ip', 'nfkeeper'))?.flags !== 0x6; i++) await sleep(50);
      expect((await sock.getTable('ip', 'nfkeeper'))?.flags).toBe(0x6);
      const h = handles(ns, ...CHAIN);
      child.kill('SIGKILL');
      await exited;
      const orphan = await sock.getTable('ip', 'nfkeeper');
      expect(orphan?.flags).toBe(0x4);
      expect(handles(ns, ...CHAIN)).toEqual(h);

      const k = await start();
      const claimed = await sock.getTable('ip', 'nfkeeper');
      expect(claimed).toMatchObject({ flags: 0x6, owner: k.socket!.portId });
      expect(handles(ns, ...CHAIN)).toEqual(h);  // same handles: no rule was rewritten
      expect(k.status().tables[0]!.protection).toBe('protected');
    } finally {
      child.kill('SIGKILL');
    }
  });
});
