/**
 * The keeper's socket moved to another port id: an interrupted dump ends by replacing the socket
 * (native/socket.cc, NftSocket::Reopen) on the same port, unless the old socket still holds it
 * (here: a child process given its descriptor, as a forked child that has not exec'd yet holds
 * it), when the new one takes any port. The monitor tells our own commits from foreign ones by
 * the port id: it must follow the move, or the keeper's next repair is taken for a foreign change;
 * and the old port stays ours only up to the generation of the move: after it, a commit on it is
 * the socket's that kept it (here the child's), a foreign change.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { DumpInterruptedError } from '../../src/base/errors.js';
import { Keeper, type RepairReport } from '../../src/keeper/keeper.js';
import type { Op } from '../../src/netlink/ops.js';
import type { IgnoredPort } from '../../src/netlink/events.js';
import { observedHost } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { until } from '../helpers/wait.js';
import { chainLines, seedConfig, seedRule } from './helpers.js';

const CUT = 30_000;

/**
 * Holds the socket given as its fd 3 (as a forked child that has not exec'd would) and, for each
 * rule handle read from stdin, deletes that rule of ip seed post through it: a commit on the old
 * port by another process.
 */
const HOLDER = `
import socket, struct, sys
s = socket.socket(fileno=3)
def msg(t, flags, seq, body):
    n = 16 + len(body)
    return struct.pack('=IHHII', n, t, flags, seq, 0) + body + bytes(-n % 4)
def attr(t, data):
    n = 4 + len(data)
    return struct.pack('=HH', n, t) + data + bytes(-n % 4)
gen = lambda family, res: struct.pack('=BBH', family, 0, socket.htons(res))
print('ready', flush=True)
for line in sys.stdin:
    body = gen(2, 0) + attr(1, b'seed\\0') + attr(2, b'post\\0') + attr(3, struct.pack('>Q', int(line)))
    # NFNL_MSG_BATCH_BEGIN, NFT_MSG_DELRULE (subsystem 10), NFNL_MSG_BATCH_END; no ack asked for.
    s.send(msg(0x10, 1, 1, gen(0, 10)) + msg((10 << 8) | 8, 1, 2, body) + msg(0x11, 1, 3, gen(0, 10)))
    print('sent', flush=True)
`;

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

  it('the monitor follows it: the next repair is ours, not a foreign change; the old port is another socket\'s after the move', async () => {
    const N = 50;
    const host = observedHost(ns as Netns, [], () => undefined);
    // The ports the keeper's monitor is given, each time.
    const filters: (readonly IgnoredPort[])[] = [];
    const watch = host.watch.bind(host);
    host.watch = (o) => {
      const m = watch(o);
      const set = m.setFilter.bind(m);
      m.setFilter = (tables, ports) => { filters.push(ports ?? []); set(tables, ports); };
      return m;
    };
    const k = keeper = new Keeper({ config: seedConfig(N), host, intervalMs: 50, trustOwnCommitMs: 500, netns: ns.path });
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
    const ownLast = sock.generation();  // the keeper's commits on the old port are at or before it
    // The old socket kept alive, on its port, by a child given its descriptor.
    const holder = spawn('python3', ['-c', HOLDER], { stdio: ['pipe', 'pipe', 'inherit', fdOf(inodeOf(ns as Netns, port)!)] });
    const said: string[] = [];
    holder.stdout!.on('data', (d: Buffer) => said.push(...d.toString().split('\n').filter(Boolean)));
    await until('the holder', () => said.includes('ready'), 10_000);
    const deleteRule = (via: 'holder' | 'nft', i: number) => {
      const out = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'seed', 'post']);
      const handle = new RegExp(`${seedRule(i).replace(/\./g, '\\.')} # handle (\\d+)`).exec(out)![1]!;
      if (via === 'nft') ns.exec('nft', ['delete', 'rule', 'ip', 'seed', 'post', 'handle', handle]);
      else holder.stdin!.write(`${handle}\n`);
    };
    try {
      let cut: unknown;
      for (let i = 0; i < 20 && cut === undefined; i++) {
        const dump = s.listRuleDigests!({ family: 'ip', table: 'cut', once: true });
        // A change to the dumped table itself: a dump of one table that only other tables'
        // commits interrupted is taken (native/dump.cc, the watch), not ended.
        await sock.commit([{ verb: 'add', object: 'rule', family: 'ip', table: 'cut', chain: 'big', exprs: [{ kind: 'counter' }] }]);
        cut = await dump.then(() => undefined, (e: unknown) => e);
      }
      expect(cut).toBeInstanceOf(DumpInterruptedError);
      // The fallback: the port was still taken, the replaced socket took another.
      expect(s.portId).not.toBe(port);
      expect(inodeOf(ns as Netns, s.portId)).toBeDefined();
      // The monitor ignores the new port, and the old one up to the generation of the move: every
      // commit of ours on it (read after the move or not), and none made on it after.
      const moved = sock.generation();
      const last = filters.at(-1)!;
      expect(last[0]).toBe(s.portId);
      expect(last.slice(1)).toHaveLength(1);
      const [left, upTo] = last[1] as readonly [number, number];
      expect(left).toBe(port);
      expect(upTo).toBeGreaterThanOrEqual(ownLast);
      expect(upTo).toBeLessThanOrEqual(moved);

      // A deletion in the keeper's chain through the old port, by the child that kept it, after
      // the move: a foreign change, repaired from the new port.
      await k.idle();
      const foreignBefore = k.attribution.recent(10).length;
      deleted = true;
      deleteRule('holder', 7);
      await until('the holder\'s deletion repaired', () => said.includes('sent') && repairs.length > 0 &&
        chainLines(ns as Netns, 'ip', 'seed', 'post')[7] === seedRule(7), 30_000);
      expect(sock.generation()).toBeGreaterThan(moved);
      // A foreign deletion by nft, and its repair.
      await k.idle();
      deleteRule('nft', 9);
      await until('the repair', () => repairs.length > 1 && chainLines(ns as Netns, 'ip', 'seed', 'post')[9] === seedRule(9), 30_000);
      let seen = 0;
      k.on('tick', () => { seen++; });
      await until('a few ticks after the repairs', () => seen >= 5, 10_000);
      // The two deletions are the foreign changes; the repairs' commits are the keeper's own.
      expect(k.attribution.recent(10).length - foreignBefore).toBe(2);
      expect(repairs).toHaveLength(2);
    } finally {
      holder.kill('SIGKILL');
    }
  }, 120_000);
});
