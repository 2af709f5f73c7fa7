/**
 * Foreign GC against what Debian's CNI plugins write (test/helpers/cni.ts runs
 * them as libcni does), with Nomad's conflist and podman's, on iptables-nft
 * and iptables-legacy, one-shot and daemon. Three allocations with port
 * mappings; one is forgotten (its namespace deleted, no DEL). After gc the
 * node's iptables-save is byte for byte what it was before the forgotten
 * allocation's ADD; the live ones still answer on their host ports, their
 * DEL still succeeds and leaves nothing of them; a new allocation on the
 * freed host port receives the traffic (after the one-shot and after the daemon).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { GcLoop } from '../../src/gc/index.js';
import { readCniCache } from '../../src/gc/live.js';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { createCniNode, nomadConflist, podmanConflist, type Allocation, type CniNode, type IptablesBackend } from '../helpers/cni.js';
import { createNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';

const template = (job: string) => /data = <<EOT\n([\s\S]*?)EOT/.exec(readFileSync(`deploy/nomad/${job}`, 'utf8'))![1]!;
/** The gc: section a runtime ships, with its live set pointed at this node's CNI cache. */
function shippedGc(runtime: 'nomad' | 'podman', backend: IptablesBackend, cacheDir: string): string {
  const live = `  live:\n    cni:\n      cacheDir: ${cacheDir}\n`;
  if (runtime === 'podman') return readFileSync('examples/podman-gc.yaml', 'utf8').replace(/ {2}live:\n(?: {4}.*\n)+/, live);
  const yaml = template(backend === 'nft' ? 'nfkeeper.nomad.hcl' : 'nfkeeper-gc-legacy.nomad.hcl');
  return yaml.replace(/ {2}live:\n(?: {4}.*\n)+/, live);
}

const NOMAD_IDS = ['0f4b9a52-7c1e-4d3a-9f0e-2b6c8d1a4e01', '3e803d29-4f9d-ad8b-adb6-31456a39db69', 'a7d2c0e4-5b8f-4c61-8e2d-9f3a6b1c7d02',
  'c1e5f7a9-2d4b-4e6f-8a0c-1b3d5f7a9c03', 'd4f6a8c0-3e5b-4f7a-9b1d-2c4e6f8a0b04', 'e5a7b9d1-4f6c-4a8b-8c2e-3d5f7a9b1c05'];
const PODMAN_IDS = NOMAD_IDS.map((id) => id.replace(/-/g, '').repeat(2));
const ports = (hostPort: number) => [{ hostPort, containerPort: 80, protocol: 'tcp' as const }];

describe.each([
  ['nomad', 'nft'], ['nomad', 'legacy'], ['podman', 'nft'], ['podman', 'legacy'],
] as const)('CNI GC with %s\'s conflist on iptables-%s', (runtime, backend) => {
  let node: CniNode | undefined;
  afterEach(() => {
    node?.remove();
    node = undefined;
  });
  const ids = runtime === 'nomad' ? NOMAD_IDS : PODMAN_IDS;

  /** A new allocation on `port`, answering there; then forgotten (its namespace deleted, no DEL). */
  async function forgotten(n: CniNode, id: string, port: number): Promise<Allocation> {
    const dead = await n.add(id, ports(port));
    expect(n.request(port)).toBe(dead.id);
    n.forget(dead);
    const leftover = n.save();
    // What the plugins left: the tagged jumps (bridge's and portmap's), the chains behind them, the firewall's two rules.
    expect(leftover).toContain(`-A POSTROUTING -s ${dead.address}/32 -m comment --comment "name: \\"${runtime}\\" id: \\"${dead.id}\\""`);
    expect(leftover).toContain(`--comment "dnat name: \\"${runtime}\\" id: \\"${dead.id}\\""`);
    expect(leftover).toContain(`-A CNI-FORWARD -s ${dead.address}/32 -j ACCEPT`);
    return dead;
  }

  it('one-shot gc, then the daemon\'s loop, with the shipped gc section and the CNI cache as live set', async () => {
    const n = node = createCniNode(backend, runtime === 'nomad' ? nomadConflist : podmanConflist);
    const live = [await n.add(ids[0]!, ports(8081)), await n.add(ids[2]!, ports(8083))];
    const config = join(tempDir('cnigc'), 'gc.yaml');
    writeFileSync(config, shippedGc(runtime, backend, n.cacheDir));

    // One-shot.
    let before = n.save();
    const dead = await forgotten(n, ids[1]!, 8082);
    expect(n.request(8082)).toBe('timeout');  // the stale DNAT to the dead address comes first
    expect(await readCniCache({ cacheDir: n.cacheDir })).toEqual(new Set(live.map((a) => a.id)));
    const backendArgs = backend === 'legacy' ? ['--backend', 'iptables-legacy'] : [];
    const dry = await cli('gc', '--config', config, '--netns', n.ns.path, '--grace', '0s', '--dry-run', ...backendArgs);
    expect(dry.code).toBe(1);
    // Why each item goes: portmap's tag, the chains behind the jumps, the firewall rules by address.
    expect(dry.out).toContain(`# tag "dnat name: \\"${runtime}\\" id: \\"${dead.id}\\"": ${dead.id} is not live`);
    expect(dry.out).toMatch(/reached only from garbage \(CNI-HOSTPORT-DNAT\)/);
    expect(dry.out).toMatch(/reached only from garbage \(POSTROUTING\)/);
    expect(dry.out).toContain(`CNI firewall rule for ${dead.address}, the source address of ${dead.id}'s tagged rule in ip nat POSTROUTING`);
    const generation = () => {
      const sock = open({ netns: n.ns.path });
      try {
        return sock.generation();
      } finally {
        sock.close();
      }
    };
    const g0 = generation();
    const r = await cli('gc', '--config', config, '--netns', n.ns.path, '--grace', '0s', '--json', ...backendArgs);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    // On nftables the jumps, the chains behind them and the firewall's rules go in one batch.
    if (backend === 'nft') expect(generation()).toBe(g0 + 1);
    expect(JSON.parse(r.out).garbage.map((g: { id: string }) => g.id)).toEqual([dead.id]);
    expect(n.save()).toBe(before);
    // The freed host port serves a new allocation.
    const fresh = await n.add(ids[3]!, ports(8082));
    expect(n.request(8082)).toBe(fresh.id);

    // The daemon's loop, on another forgotten allocation.
    before = n.save();
    const dead2 = await forgotten(n, ids[4]!, 8084);
    const gc = parseConfig(readFileSync(config, 'utf8'), config, { environment: {} }).gc!;
    const loop = new GcLoop({
      gc: { ...gc, grace: 0, enabled: true, backend: backend === 'legacy' ? 'iptables-legacy' : 'nftables' },
      netns: n.ns.path, logger: pino({ level: 'silent' }),
    });
    try {
      const p = await loop.runOnce();
      expect(p?.garbage.map((g) => g.id)).toEqual([dead2.id]);
      expect(p?.collected).toBe(true);
      expect(n.save()).toBe(before);
      expect((await loop.runOnce())?.garbage).toEqual([]);
    } finally {
      await loop.stop();
    }
    // The port the daemon freed serves a new allocation too.
    const fresh2 = await n.add(ids[5]!, ports(8084));
    expect(n.request(8084)).toBe(fresh2.id);

    // The live ones still answer; their own DEL succeeds and leaves nothing of any allocation.
    for (const [a, port] of [[live[0]!, 8081], [live[1]!, 8083], [fresh, 8082], [fresh2, 8084]] as const) expect(n.request(port)).toBe(a.id);
    for (const a of [...live, fresh, fresh2]) n.del(a);
    const empty = n.save();
    for (const a of [...live, fresh, fresh2, dead, dead2]) {
      expect(empty).not.toContain(a.id);
      expect(empty).not.toContain(`${a.address}/32`);
    }
    expect(empty).not.toMatch(/CNI-DN-|:CNI-[0-9a-f]{24}/);
  }, 180_000);  // about 40 plugin runs, each forking iptables a few times: slow on a loaded machine
});

describe('the CNI cache as live set, with the real plugins', () => {
  let node: CniNode | undefined;
  afterEach(() => {
    node?.remove();
    node = undefined;
  });

  it('a record is live while its namespace exists; gone, or not a namespace, it is not; DEL removes the record', async () => {
    const n = node = createCniNode('nft', nomadConflist);
    const [a, b, c] = [await n.add(NOMAD_IDS[0]!, ports(8081)), await n.add(NOMAD_IDS[1]!, ports(8082)), await n.add(NOMAD_IDS[2]!, ports(8083))];
    expect(await readCniCache({ cacheDir: n.cacheDir })).toEqual(new Set([a.id, b.id, c.id]));
    n.forget(b);
    n.del(c);
    expect(await readCniCache({ cacheDir: n.cacheDir })).toEqual(new Set([a.id]));
    // A plain file where the namespace was mounted is no namespace.
    const rec = join(n.cacheDir, 'results', `nomad-${b.id}-eth0`);
    const stale = join(tempDir('cnins'), 'netns');
    writeFileSync(stale, '');
    writeFileSync(rec, JSON.stringify({ ...JSON.parse(readFileSync(rec, 'utf8')), netns: stale }));
    expect(await readCniCache({ cacheDir: n.cacheDir })).toEqual(new Set([a.id]));
    // A record without netns (libcni before 1.1) counts as live.
    const { netns: _, ...old } = JSON.parse(readFileSync(rec, 'utf8'));
    writeFileSync(rec, JSON.stringify(old));
    expect(await readCniCache({ cacheDir: n.cacheDir })).toEqual(new Set([a.id, b.id]));
  }, 120_000);

  it('an unreadable cache stops gc before the kernel is touched', async () => {
    const n = node = createCniNode('nft', nomadConflist);
    const a = await n.add(NOMAD_IDS[0]!, ports(8081));
    const b = await n.add(NOMAD_IDS[1]!, ports(8082));
    n.forget(b);
    const before = n.save();
    const config = join(tempDir('cnigc'), 'gc.yaml');
    const run = async (cacheDir: string) => {
      writeFileSync(config, shippedGc('nomad', 'nft', cacheDir));
      return cli('gc', '--config', config, '--netns', n.ns.path, '--grace', '0s');
    };
    const bad: [string, RegExp][] = [];
    bad.push([join(n.cacheDir, 'missing'), /cannot read/]);
    const corrupt = tempDir('cnibad');
    const results = join(corrupt, 'results');
    mkdirSync(results);
    writeFileSync(join(results, `nomad-${a.id}-eth0`), '{"kind":"cniCacheV1","containerId":');
    bad.push([corrupt, /cannot read a cache record/]);
    const wrongKind = tempDir('cnibad');
    mkdirSync(join(wrongKind, 'results'));
    writeFileSync(join(wrongKind, 'results', 'x'), '{"kind":"other","containerId":"x"}');
    bad.push([wrongKind, /not a libcni cache record/]);
    for (const [dir, why] of bad) {
      const r = await run(dir);
      expect(r.code).toBe(2);
      expect(r.err).toMatch(why);
      expect(n.save()).toBe(before);
    }
    // The same node with its real cache: b goes.
    expect((await run(n.cacheDir)).code).toBe(0);
    expect(n.save()).not.toContain(b.id);
  }, 120_000);
});

describe.each(['nft', 'legacy'] as const)('CNI firewall rules on iptables-%s: collected on proof only', (backend) => {
  it('an address a live id names, a wider prefix, another chain, another shape: all stay', async () => {
    const ns = createNetns('cnifw');
    try {
      const dead = NOMAD_IDS[1]!;
      const live = NOMAD_IDS[0]!;
      const tag = (id: string) => `"name: \\"nomad\\" id: \\"${id}\\""`;
      const keep = [
        // 172.26.64.2 is the dead id's source, and the live one's too (handed out again).
        '-A CNI-FORWARD -d 172.26.64.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
        '-A CNI-FORWARD -s 172.26.64.2/32 -j ACCEPT',
        // 172.26.64.3 is only the dead id's: these are not the plugin's rules.
        '-A CNI-FORWARD -s 172.26.64.3/32 -p tcp -j ACCEPT',
        '-A CNI-FORWARD -d 172.26.64.3/32 -j ACCEPT',
        '-A CNI-FORWARD -s 172.26.64.0/24 -j ACCEPT',
        '-A OTHER -s 172.26.64.3/32 -j ACCEPT',
        // 172.26.64.4 is no tagged rule's source (only a destination in the dead id's chain).
        '-A CNI-FORWARD -s 172.26.64.4/32 -j ACCEPT',
      ];
      const gone = [
        '-A CNI-FORWARD -d 172.26.64.3/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
        '-A CNI-FORWARD -s 172.26.64.3/32 -j ACCEPT',
      ];
      ns.exec(`iptables-${backend}-restore`, [], [
        '*filter', ':CNI-FORWARD - [0:0]', ':OTHER - [0:0]', '-A FORWARD -j CNI-FORWARD', '-A FORWARD -j OTHER', ...keep, ...gone,
        'COMMIT', '*nat', ':CNI-a - [0:0]', ':CNI-b - [0:0]',
        `-A POSTROUTING -s 172.26.64.2/32 -m comment --comment ${tag(dead)} -j CNI-a`,
        `-A POSTROUTING -s 172.26.64.2/32 -m comment --comment ${tag(live)} -j CNI-b`,
        `-A POSTROUTING -s 172.26.64.3/32 -m comment --comment ${tag(dead)} -j CNI-a`,
        '-A CNI-a -d 172.26.64.4/32 -j ACCEPT',
        'COMMIT', '',
      ].join('\n'));
      const dir = tempDir('cnifw');
      const config = join(dir, 'gc.yaml');
      writeFileSync(config, 'tables: []\ngc:\n  foreign:\n    - { family: ip, table: nat, owner: nomad }\n    - { family: ip, table: filter, owner: nomad }\n');
      writeFileSync(join(dir, 'live.json'), JSON.stringify([live]));
      const r = await cli('gc', '--config', config, '--netns', ns.path, '--grace', '0s', '--live-file', join(dir, 'live.json'),
        ...(backend === 'legacy' ? ['--backend', 'iptables-legacy'] : []));
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      const after = ns.exec(`iptables-${backend}-save`, []).split('\n');
      for (const l of keep) expect(after).toContain(l);
      for (const l of gone) expect(after).not.toContain(l);
      expect(after.filter((l) => l.includes(dead))).toEqual([]);
      expect(after.some((l) => l.includes(live))).toBe(true);
    } finally {
      ns.remove();
    }
  });
});
