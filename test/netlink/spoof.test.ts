/**
 * Only the kernel answers. Any process with CAP_NET_ADMIN may unicast a
 * netlink datagram to our socket's port id; such a datagram must never be
 * taken for the kernel's reply. The forger below knows exactly which
 * sequence numbers the socket will use next (they start at 1) and queues a
 * fake answer for each before the requests go out, so a socket that read
 * them would return a made-up generation, fail with EPERM, or end a dump
 * early.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/index.js';
import { withNetns } from '../helpers/netns.js';
import { OWNED, ownedSetup } from './fixtures.js';

const { family: F, table: T, chain: C } = OWNED;

// For every seq in range: a NEWGEN claiming generation 4242, an NLMSG_ERROR
// with -EPERM and an NLMSG_DONE, all sent from an ordinary netlink socket.
const FORGER = `
import socket, struct, sys
port, first, last = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
s.bind((0, 0))
NEWGEN = (10 << 8) | 22                                    # NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN
sent = 0
for seq in range(first, last + 1):
    attr = struct.pack('=HHI', 8, 1, socket.htonl(4242))   # NFTA_GEN_ID, big endian
    gen = struct.pack('=IHHII', 16 + 4 + len(attr), NEWGEN, 0, seq, 0) + struct.pack('=BBH', 0, 0, 0) + attr
    err = struct.pack('=IHHII', 16 + 4 + 16, 2, 0, seq, 0) + struct.pack('=i', -1) + struct.pack('=IHHII', 16, 0, 0, seq, 0)
    done = struct.pack('=IHHII', 16 + 4, 3, 2, seq, 0) + struct.pack('=i', 0)
    for m in (gen, err, done):
        s.sendto(m, (port, 0))
        sent += 1
print(sent)
`;

describe('replies from anyone but the kernel', () => {
  it('are dropped: forged generations, errors and dump ends never reach the caller', async () => {
    await withNetns(async (ns) => {
      const setup = open({ netns: ns.path });
      await setup.commit(ownedSetup());
      const gen = setup.generation();
      const expected = await setup.listRules({ family: F, table: T, chain: C });
      setup.close();

      const s = open({ netns: ns.path });
      try {
        const forged = spawnSync('ip', ['netns', 'exec', ns.name, 'python3', '-c', FORGER, String(s.portId), '1', '64'],
          { encoding: 'utf8' });
        expect(forged.status, forged.stderr).toBe(0);
        expect(Number(forged.stdout)).toBe(192);  // every forgery was accepted by the kernel for delivery

        for (let i = 0; i < 8; i++) expect(s.generation()).toBe(gen);
        expect(await s.listRules({ family: F, table: T, chain: C })).toEqual(expected);
        expect((await s.listTables()).map((t) => t.name)).toContain(T);
        await s.commit([{ verb: 'add', object: 'chain', family: F, table: T, name: 'after-forgery' }]);
        expect(s.generation()).toBe(gen + 1);
      } finally {
        s.close();
      }
    }, 'spoof');
  });
});
