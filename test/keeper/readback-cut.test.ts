/**
 * A rule deleted while the safety net's read-back (a digest dump of a long chain, asked `once`)
 * runs: the kernel flags the dump interrupted, and the addon ends it there by replacing the socket
 * (same namespace, same port id) rather than reading its rest (native/dump.cc, NftSocket::Reopen).
 * The read-back's pass ends deferred and the deletion's repair runs on the replaced socket; the
 * keeper's own repair commit is still told apart from foreign ones by the port id.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DumpInterruptedError } from '../../src/base/errors.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import type { NftHost } from '../../src/netlink/conn.js';
import { observedHost } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const N = 30_000;

/** The inode of the netfilter netlink socket on `port` in `ns` (/proc/net/netlink). */
function inodeOf(ns: Netns, port: number): string | undefined {
  const rows = ns.exec('cat', ['/proc/net/netlink']).trim().split('\n').slice(1).map((l) => l.trim().split(/\s+/));
  return rows.find((r) => r[1] === '12' && Number(r[2]) === port)?.[9];
}

describe('a rule deleted during the read-back of a long chain', () => {
  const { ns, sock } = socketPerTest('readback-cut');
  let keeper: Keeper | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  it('ends the read-back\'s dump there; the repair runs on the replaced socket, its commit still ours', async () => {
    const mid = N >> 1;
    let armed = false;
    let victim: number | undefined;
    let deleted = false;
    let earlyReadBack = false;
    const readBacks: Promise<unknown>[] = [];
    const host: NftHost = observedHost(ns as Netns, ['listRuleDigests'], () => undefined, (_method, [filter], dump) => {
      if (!armed && (filter as { once?: boolean }).once === true) earlyReadBack = true;
      if (armed && (filter as { once?: boolean }).once === true && !deleted && victim !== undefined) {
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
    const k = keeper = new Keeper({ config: seedConfig(N), host, intervalMs: 50, trustOwnCommitMs: 5_000, netns: ns.path });
    k.on('error', () => undefined);
    k.on('repaired', (r: RepairReport) => { if (deleted) repairs.push(r); });
    await k.start();
    const chains = await sock.listRuleDigests({ family: 'ip', table: 'seed' });
    victim = chains[0]!.handles[mid]!;
    const port = k.socket!.portId;
    const before = inodeOf(ns as Netns, port);
    expect(before).toBeDefined();
    expect(earlyReadBack, 'the read-back came before the test could arm it').toBe(false);
    armed = true;
    await until('the deletion during a read-back', () => deleted, 30_000);
    await until('the repair', () => repairs.length > 0, 30_000);
    // The read-back's dump was interrupted, and ended by replacing the socket on the same port.
    expect(await readBacks[0]).toBeInstanceOf(DumpInterruptedError);
    expect(k.socket!.portId).toBe(port);
    expect(inodeOf(ns as Netns, port)).not.toBe(before);
    expect(chainLines(ns as Netns, 'ip', 'seed', 'post')[mid]).toBe(seedRule(mid));
    // The repair's own commit is not taken for a foreign change: only the deletion is one.
    let seen = 0;
    k.on('tick', () => { seen++; });
    await until('a few ticks after the repair', () => seen >= 5, 10_000);
    expect(k.attribution.recent(10)).toHaveLength(1);
    expect(repairs).toHaveLength(1);
  }, 120_000);
});
