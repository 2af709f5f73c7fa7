/**
 * A rule deleted while the safety net's read-back (a digest dump of a long chain, asked `once`)
 * runs: the kernel flags the dump interrupted, and the addon ends it there rather than reading its
 * rest (native/dump.cc): it replaces the socket (same namespace, same port id), or, where the
 * keeper's socket owns a protected table and cannot be replaced, the dump went over a dump-only
 * socket of the addon, which is closed. The read-back's pass ends deferred and the deletion's repair
 * follows at once; the keeper's own repair commit is still told apart from foreign ones by the port id.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DumpInterruptedError } from '../../src/base/errors.js';
import { parseConfig, type Config } from '../../src/config/config.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { observedHost } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const N = 30_000;

interface NetlinkSocket { inode: string; port: number; groups: number }

/** The user-space netfilter netlink sockets of `ns` (/proc/net/netlink; port 0 is the kernel's). */
function socketsOf(ns: Netns): NetlinkSocket[] {
  // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
  const rows = ns.exec('cat', ['/proc/net/netlink']).trim().split('\n').slice(1).map((l) => l.trim().split(/\s+/));
  return rows.filter((r) => r[1] === '12' && r[2] !== '0').map((r) => ({ inode: r[9]!, port: Number(r[2]), groups: parseInt(r[3]!, 16) }));
}

/** The inode of the netfilter netlink socket on `port` in `ns`. */
function inodeOf(ns: Netns, port: number): string | undefined {
  return socketsOf(ns).find((x) => x.port === port)?.inode;
}

/** seedConfig's table `seed` (unprotected: another process can delete its rules) and a small protected table `guard`. */
function protectConfig(n: number): Config {
  const seed = seedConfig(n);
  const guard = parseConfig(`\ntables:\n  - family: ip\n    name: guard\n    protect: true\n    chains:\n      - name: g\n        rules:\n          - ip daddr 192.0.2.9 return\n`, 'guard.yaml');
  return { ...seed, tables: [...seed.tables, ...guard.tables] };
}

describe('a rule deleted during the read-back of a long chain', () => {
  const { ns, sock } = socketPerTest('readback-cut');
  let keeper: Keeper | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  /**
   * Starts a keeper on `config` (30,000 rules in ip seed post), deletes the middle rule of that chain
   * from another socket while the read-back's `once` digest dump of `seed` is on the wire, and waits
   * for its repair. `armed` runs before the deletion is armed.
   */
  async function cutReadBack(config: Config, armed?: (k: Keeper) => Promise<void>): Promise<{ k: Keeper; readBack: unknown; repairs: RepairReport[] }> {
    const mid = N >> 1;
    let arm = false;
    let victim: number | undefined;
    let deleted = false;
    let earlyReadBack = false;
    const readBacks: Promise<unknown>[] = [];
    const host: NftHost = observedHost(ns as Netns, ['listRuleDigests'], () => undefined, (_method, [filter], dump) => {
      const f = filter as { table?: string; once?: boolean };
      if (f.once !== true || f.table !== 'seed') return dump;
      if (!arm) earlyReadBack = true;
      if (arm && !deleted && victim !== undefined) {
        // The dump is on the wire and the kernel walks the chain: another socket deletes.
        deleted = true;
        readBacks.push((dump as Promise<unknown>).then(() => 'resolved', (e: unknown) => e));
        sock.commitNow([{ verb: 'delete', object: 'rule', family: 'ip', table: 'seed', chain: 'post', handle: victim }]);
      }
      return dump;
    });
    const repairs: RepairReport[] = [];
    // The read-back comes trustOwnCommitMs after the install: long enough for this test's own listing
    // of the chain below to be done first on a loaded machine (at 500 ms it was not, now and then,
    // and the one read-back went by unarmed).
    const k = keeper = new Keeper({ config, host, intervalMs: 50, trustOwnCommitMs: 5_000, netns: ns.path });
    k.on('error', () => undefined);
    k.on('repaired', (r: RepairReport) => { if (deleted) repairs.push(r); });
    await k.start();
    const chains = await sock.listRuleDigests({ family: 'ip', table: 'seed' });
    victim = chains[0]!.handles[mid]!;
    await armed?.(k);
    expect(earlyReadBack, 'the read-back came before the test could arm it').toBe(false);
    arm = true;
    await until('the deletion during a read-back', () => deleted, 30_000);
    await until('the repair', () => repairs.length > 0, 30_000);
    expect(chainLines(ns as Netns, 'ip', 'seed', 'post')[mid]).toBe(seedRule(mid));
    return { k, readBack: await readBacks[0], repairs };
  }

  /** The keeper's own repair commit is not taken for a foreign change: only the deletion is one. */
  async function ownCommitsOurs(k: Keeper, repairs: RepairReport[]): Promise<void> {
    let seen = 0;
    k.on('tick', () => { seen++; });
    await until('a few ticks after the repair', () => seen >= 5, 10_000);
    expect(k.attribution.recent(10)).toHaveLength(1);
    expect(repairs).toHaveLength(1);
  }

  it('ends the read-back\'s dump there; the repair runs on the replaced socket, its commit still ours', async () => {
    let port = 0;
    let before: string | undefined;
    const { k, readBack, repairs } = await cutReadBack(seedConfig(N), async (k) => {
      port = k.socket!.portId;
      before = inodeOf(ns as Netns, port);
      expect(before).toBeDefined();
    });
    // The read-back's dump was interrupted, and ended by replacing the socket on the same port.
    expect(readBack).toBeInstanceOf(DumpInterruptedError);
    expect(k.socket!.portId).toBe(port);
    expect(inodeOf(ns as Netns, port)).not.toBe(before);
    await ownCommitsOurs(k, repairs);
  }, 120_000);

  it('protect mode: the read-back went over the dump-only socket, which is closed; the owning socket and its owner flag stay', async () => {
    let port = 0;
    let before: string | undefined;
    let dumpOnly: string | undefined;
    const { k, readBack, repairs } = await cutReadBack(protectConfig(N), async (k) => {
      port = k.socket!.portId;
      expect(await sock.getTable('ip', 'guard')).toMatchObject({ flags: 0x6, owner: port });
      before = inodeOf(ns as Netns, port);
      expect(before).toBeDefined();
      // A dump after the claim opens the dump-only socket (if the start's reads have not already):
      // the one socket in no multicast group (not the monitor's) besides the keeper's and the test's.
      await k.socket!.listTables();
      const others = socketsOf(ns as Netns).filter((x) => x.groups === 0 && x.port !== port && x.port !== sock.portId);
      expect(others).toHaveLength(1);
      dumpOnly = others[0]!.inode;
    });
    expect(readBack).toBeInstanceOf(DumpInterruptedError);
    // The dump ended early: the dump-only socket it went over is gone. The owning socket is the same
    // one, on the same port, and still owns its table.
    expect(socketsOf(ns as Netns).some((x) => x.inode === dumpOnly)).toBe(false);
    expect(k.socket!.portId).toBe(port);
    expect(inodeOf(ns as Netns, port)).toBe(before);
    expect(await sock.getTable('ip', 'guard')).toMatchObject({ flags: 0x6, owner: port });
    await ownCommitsOurs(k, repairs);
  }, 120_000);
});
