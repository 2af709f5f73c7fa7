/**
 * The keeper's socket moved to another port id: an interrupted dump ends by replacing the socket
 * (native/socket.cc, NftSocket::Reopen) on the same port, unless the old socket still holds it
 * (here: a child process given its descriptor, as a forked child that has not exec'd yet holds
 * it), when the new one takes any port. The monitor tells our own commits from foreign ones by
 * the port id: it must follow the move, or the keeper's next repair is taken for a foreign change.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { DumpInterruptedError } from '../../src/base/errors.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import type { Op } from '../../src/netlink/ops.js';
import { observedHost } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const CUT = 30_000;

/** The inode of the netfilter netlink socket on `port` in `ns` (/proc/net/netlink). */
function inodeOf(ns: Netns, port: number): string | undefined {
  const rows = ns.exec('cat', ['/proc/net/netlink']).trim().split('\n').slice(1).map((l) => l.trim().split(/\s+/));
  return rows.find((r) => r[1] === '12' && Number(r[2]) === port)?.[9];
}

/** This process's descriptor of the socket with that inode. */
function fdOf(inode: string): number {
  const fd = readdirSync('/proc/self/fd').find((f) => {
    try {
      return readlinkSync(`/proc/self/fd/${f}`) === `socket:[${inode}]`;
    } catch {
      return false;
    }
  });
  if (fd === undefined) throw new Error(`no descriptor of socket:[${inode}]`);
  return Number(fd);
}

describe('the keeper\'s socket moved to another port id', () => {
  const { ns, sock } = socketPerTest('port-fallback');
  let keeper: Keeper | undefined;
  afterEach(async () => {
    await keeper?.stop();
    keeper = undefined;
  });

  it('the monitor follows it: the next repair is ours, not a foreign change', async () => {
    const N = 50;
    const k = keeper = new Keeper({ config: seedConfig(N), host: observedHost(ns as Netns, [], () => undefined), intervalMs: 50, trustOwnCommitMs: 500, netns: ns.path });
    k.on('error', () => undefined);
    const repairs: RepairReport[] = [];
    let deleted = false;
    k.on('repaired', (r: RepairReport) => { if (deleted) repairs.push(r); });
    await k.start();
    // A long chain in a table of the test's own (not the keeper's) for the keeper's socket to dump.
    const setup: Op[] = [{ verb: 'add', object: 'table', family: 'ip', name: 'cut' }, { verb: 'add', object: 'chain', family: 'ip', table: 'cut', name: 'big' }];
    for (let i = 0; i < CUT; i++) setup.push({ verb: 'add', object: 'rule', family: 'ip', table: 'cut', chain: 'big', exprs: [{ kind: 'counter' }] });
    await sock.commit(setup);
    await k.idle();

    const s = k.socket!;
    const port = s.portId;
    // The old socket kept alive, on its port, by a child given its descriptor.
    const holder = spawn('sleep', ['120'], { stdio: ['ignore', 'ignore', 'ignore', fdOf(inodeOf(ns as Netns, port)!)] });
    try {
      let cut: unknown;
      for (let i = 0; i < 20 && cut === undefined; i++) {
        const dump = s.listRuleDigests!({ family: 'ip', table: 'cut', once: true });
        await sock.commit([{ verb: 'add', object: 'table', family: 'ip', name: `other${i}` }]);
        cut = await dump.then(() => undefined, (e: unknown) => e);
      }
      expect(cut).toBeInstanceOf(DumpInterruptedError);
      // The fallback: the port was still taken, the replaced socket took another.
      expect(s.portId).not.toBe(port);
      expect(inodeOf(ns as Netns, s.portId)).toBeDefined();
    } finally {
      holder.kill('SIGKILL');
    }

    // A foreign deletion in the keeper's chain, and the keeper's repair of it from the new port.
    await k.idle();
    const foreignBefore = k.attribution.recent(10).length;
    const out = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'seed', 'post']);
    const handle = new RegExp(`${seedRule(7).replace(/\./g, '\\.')} # handle (\\d+)`).exec(out)![1]!;
    deleted = true;
    ns.exec('nft', ['delete', 'rule', 'ip', 'seed', 'post', 'handle', handle]);
    await until('the repair', () => repairs.length > 0 && chainLines(ns as Netns, 'ip', 'seed', 'post')[7] === seedRule(7), 30_000);
    let seen = 0;
    k.on('tick', () => { seen++; });
    await until('a few ticks after the repair', () => seen >= 5, 10_000);
    // The deletion is the one foreign change; the repair's commit is the keeper's own.
    expect(k.attribution.recent(10).length - foreignBefore).toBe(1);
    expect(repairs).toHaveLength(1);
  }, 120_000);
});
