/** 1,000 orphaned allocs (1,000 CNI chains, 3,000 tagged rules) go in one batch; a concurrent commit is retried. */
import { describe, expect, it } from 'vitest';
import { GraceTracker, collect } from '../../src/gc/index.js';
import { parseConfig } from '../../src/config/config.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { LIVE, file, gcYaml, manyAllocs, save, tag } from './fixtures.js';

const foreign = parseConfig(gcYaml()).gc!.foreign;

describe('foreign GC at scale', () => {
  it('collects 1,000 orphaned ids in one batch (the generation moves by exactly 1)', async () => {
    await withNetns(async (ns) => {
      ns.exec('iptables-nft-restore', [], manyAllocs(1000));
      const sock = open({ netns: ns.path });
      try {
        const gen = sock.generation();
        const t0 = performance.now();
        const r = await cli('gc', '--config', file(gcYaml(), 'yaml'), '--netns', ns.path,
          '--live-file', file(JSON.stringify([LIVE])), '--grace', '0s', '--json');
        const ms = performance.now() - t0;
        expect(r.err).toBe('');
        expect(r.code).toBe(0);
        const j = JSON.parse(r.out) as { ops: number; garbage: unknown[]; collected: boolean };
        expect(j.collected).toBe(true);
        expect(j.garbage).toHaveLength(1000);
        expect(j.ops).toBe(3000);
        expect(sock.generation()).toBe(gen + 1);
        const after = save(ns);
        expect(after.split('\n').filter((l) => l.startsWith('-A'))).toEqual([
          '-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE',
          `-A POSTROUTING -s 10.0.3.232/32 -m comment --comment ${tag(LIVE)} -j CNI-0000000000000000000003e8`,
          `-A CNI-0000000000000000000003e8 -d 172.26.64.0/20 -m comment --comment ${tag(LIVE)} -j ACCEPT`,
          `-A CNI-0000000000000000000003e8 ! -d 224.0.0.0/4 -m comment --comment ${tag(LIVE)} -j MASQUERADE`,
        ]);
        expect(after.split('\n').filter((l) => l.startsWith(':CNI'))).toEqual([':CNI-0000000000000000000003e8 - [0:0]']);
        console.log(`gc of 1,000 ids (3,000 ops) through the CLI: ${ms.toFixed(0)} ms`);
      } finally {
        sock.close();
      }
    }, 'gcscale');
  });

  it('a commit that loses the race to another writer is recomputed and retried', async () => {
    await withNetns(async (ns) => {
      ns.exec('iptables-nft-restore', [], manyAllocs(3));
      const sock = open({ netns: ns.path });
      try {
        let interfered = 0;
        // Another writer commits between our scan and our commit, once.
        const racing = new Proxy(sock, {
          get(target, prop, receiver) {
            if (prop === 'commit') {
              return async (...args: Parameters<NftSocket['commit']>) => {
                if (interfered++ === 0) ns.exec('iptables-nft', ['-t', 'nat', '-A', 'POSTROUTING', '-s', '10.200.0.1/32', '-j', 'ACCEPT']);
                return target.commit(...args);
              };
            }
            const v = Reflect.get(target, prop, receiver) as unknown;
            return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
          },
        });
        const r = await collect(racing, { foreign, live: new Set([LIVE]), graceMs: 0, tracker: new GraceTracker() });
        expect(r.attempts).toBe(2);
        expect(r.collected).toBe(true);
        expect(r.garbage).toHaveLength(3);
        const after = save(ns);
        expect(after).toContain('-A POSTROUTING -s 10.200.0.1/32 -j ACCEPT');
        expect(after.split('\n').filter((l) => l.startsWith(':CNI'))).toHaveLength(1);
      } finally {
        sock.close();
      }
    }, 'gcrace');
  });
});
