/**
 * The seed's Nomad case in a namespace: the iptables-nft `ip nat` state
 * after a client restart, two CNI chains tagged with two alloc ids, one of
 * them no longer live.
 */
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { DEAD, DEAD_CHAIN, LIVE, LIVE_CHAIN, file, gcYaml, restoreNomad, save } from './fixtures.js';

describe('foreign GC, the Nomad seed', () => {
  const ns = netnsPerTest('gc', restoreNomad);

  it('removes exactly the dead alloc\'s CNI chain and its jump; everything else is byte-identical', async () => {
    const before = save(ns);
    expect(before).toContain(`:${DEAD_CHAIN} - [0:0]`);
    expect(before.split('\n').filter((l) => l.startsWith('-A'))).toHaveLength(15);
    const live = file(JSON.stringify([LIVE]));
    const config = file(gcYaml(), 'yaml');
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    const r = await cli('gc', '--config', config, '--netns', ns.path, '--live-file', live, '--grace', '0s', '--json');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out) as { collected: boolean; ops: number; garbage: { id: string; rules: unknown[]; chains: { name: string }[] }[] };
    expect(j.collected).toBe(true);
    expect(j.garbage.map((g) => g.id)).toEqual([DEAD]);
    expect(j.garbage[0]!.rules).toHaveLength(1);
    expect(j.garbage[0]!.chains.map((c) => c.name)).toEqual([DEAD_CHAIN]);
    expect(j.ops).toBe(3);
    expect(sock.generation()).toBe(gen + 1);
    sock.close();

    const after = save(ns);
    const expected = before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');
    expect(after).toBe(expected);
    expect(after).toContain(LIVE_CHAIN);
    // Running again finds nothing.
    const again = await cli('gc', '--config', config, '--netns', ns.path, '--live-file', live, '--grace', '0s');
    expect(again.code).toBe(0);
    expect(again.out).toBe('no garbage');
  });

  it('--dry-run prints the dead id\'s group as nft text, exits 1 and changes nothing', async () => {
    const before = save(ns);
    const config = file(gcYaml('', file(JSON.stringify([LIVE]))), 'yaml');
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    const r = await cli('gc', '--config', config, '--netns', ns.path, '--grace', '0s', '--dry-run');
    expect(r.err).toBe('');
    expect(r.code).toBe(1);
    expect(sock.generation()).toBe(gen);
    sock.close();
    expect(save(ns)).toBe(before);
    const lines = r.out.split('\n');
    // Each item under the reason it goes.
    expect(lines[0]).toBe(`# id ${DEAD} (owner nomad)`);
    expect(lines[1]).toBe(`# tag ${JSON.stringify(`name: "nomad" id: "${DEAD}"`)}: ${DEAD} is not live`);
    expect(lines[2]).toMatch(new RegExp(`^delete rule ip nat POSTROUTING handle \\d+ # ip saddr 172\\.26\\.64\\.102 .*jump ${DEAD_CHAIN}$`));
    expect(lines[3]).toBe('# reached only from garbage (POSTROUTING)');
    expect(lines[4]).toBe(`delete chain ip nat ${DEAD_CHAIN} {`);
    expect(lines[5]).toMatch(/ip daddr 172\.26\.64\.0\/20 .*accept$/);
    expect(lines[6]).toMatch(/ip daddr != 224\.0\.0\.0\/4 /);
    expect(lines[7]).toBe('}');
    expect(r.out).not.toContain(LIVE);
    expect(lines).toHaveLength(8);
  });
});
