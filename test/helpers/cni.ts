/**
 * A small CNI runtime for tests: runs Debian's containernetworking-plugins
 * (/usr/lib/cni) the way libcni does, so that the rules foreign GC is tested
 * against are the ones the plugins write, not a copy of them.
 *
 * - ADD runs the conflist's plugins in order, each given the list's `name`
 *   and `cniVersion`, the previous plugin's result as `prevResult`, and a
 *   `runtimeConfig` holding the capability arguments the plugin declares in
 *   `capabilities` (portMappings). The last result is cached in
 *   `<cacheDir>/results/<network>-<container id>-<ifname>` as libcni's
 *   cniCacheV1 record (container id, the conflist, ifname, network, netns,
 *   capability arguments, result).
 * - CHECK runs them in order with the cached result as prevResult.
 * - DEL runs them in reverse, with the cached result and the cached
 *   capability arguments, then removes the cache file.
 *
 * Plugins run inside the node namespace with CNI_COMMAND, CNI_CONTAINERID,
 * CNI_NETNS, CNI_IFNAME and CNI_PATH set, exactly as a runtime on that node
 * would run them. They call `iptables` from PATH: the node's `bin` directory
 * comes first and holds `iptables`/`ip6tables` links to the -nft or -legacy
 * programs, which picks the backend for this node alone (never the machine's
 * alternatives). host-local keeps its leases in the node's temp directory
 * (`dataDir`), the one change made to the runtimes' conflists.
 *
 *   node (172.x bridge, 198.51.100.1) ── 198.51.100.2 client
 *
 * Each allocation gets its own namespace and a TCP server on its container
 * port that answers every connection with the allocation's id; `request()`
 * connects from the client namespace to a host port on the node.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createNetns, removeNetns, type Netns } from './netns.js';
import { tempDir } from './tmp.js';

export type IptablesBackend = 'nft' | 'legacy';

export const CNI_BIN = '/usr/lib/cni';
export const NODE_ADDR = '198.51.100.1';
export const CLIENT_ADDR = '198.51.100.2';

/** Nomad's bridge conflist (client/allocrunner/networking_bridge_linux.go), with its defaults filled in. */
export function nomadConflist(dataDir: string): Record<string, unknown> {
  return {
    cniVersion: '0.4.0',
    name: 'nomad',
    plugins: [
      { type: 'loopback' },
      {
        type: 'bridge', bridge: 'nomad', ipMasq: true, isGateway: true, forceAddress: true, hairpinMode: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: '172.26.64.0/20' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir },
      },
      { type: 'firewall', backend: 'iptables', iptablesAdminChainName: 'NOMAD-ADMIN' },
      { type: 'portmap', capabilities: { portMappings: true }, snat: true },
    ],
  };
}

/** podman's CNI conflist (/etc/cni/net.d/87-podman-bridge.conflist as Debian 12's podman ships it). */
export function podmanConflist(dataDir: string): Record<string, unknown> {
  return {
    cniVersion: '0.4.0',
    name: 'podman',
    plugins: [
      {
        type: 'bridge', bridge: 'cni-podman0', isGateway: true, ipMasq: true, hairpinMode: true,
        ipam: { type: 'host-local', routes: [{ dst: '0.0.0.0/0' }], ranges: [[{ subnet: '10.88.0.0/16', gateway: '10.88.0.1' }]], dataDir },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
      { type: 'firewall' },
      { type: 'tuning' },
    ],
  };
}

export interface PortMapping {
  hostPort: number;
  containerPort: number;
  protocol: 'tcp' | 'udp';
}

export interface Allocation {
  id: string;
  ns: Netns;
  ifName: string;
  portMappings: PortMapping[];
  /** The final ADD result. */
  result: { ips?: { address: string }[] };
  /** The allocation's address (without prefix length). */
  address: string;
  server?: ChildProcess;
}

export class CniPluginError extends Error {
  override name = 'CniPluginError';
}

export interface CniNode {
  backend: IptablesBackend;
  ns: Netns;
  client: Netns;
  /** libcni's cache directory for this node (results/ below it). */
  cacheDir: string;
  /** PATH the plugins run with: the backend's iptables first. */
  path: string;
  conflist: Record<string, unknown>;
  /** ADD (and CHECK) of a new allocation in its own namespace, with a server on each container port. */
  add(id: string, portMappings: PortMapping[]): Promise<Allocation>;
  check(a: Allocation): void;
  del(a: Allocation): void;
  /** The allocation dies without a DEL: its server and namespace go, its rules and cache stay. */
  forget(a: Allocation): void;
  /** Connects from the client namespace to NODE_ADDR:hostPort; the id that answered, or 'timeout'. */
  request(hostPort: number): string;
  /** iptables-save of the node for this backend, counters zeroed, comment lines left out. */
  save(): string;
  remove(): void;
}

const SERVER = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[2].encode())
    c.close()
`;

function ip(...args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

/** A node namespace with a client beside it; `conflist(dataDir)` is the runtime's network. */
export function createCniNode(backend: IptablesBackend, conflist: (dataDir: string) => Record<string, unknown>): CniNode {
  const dir = tempDir('cni');
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  symlinkSync(`/usr/sbin/iptables-${backend}`, join(bin, 'iptables'));
  // A node without IPv6 NAT (no ip6table_nat): portmap 1.1.1's CHECK looks for its IPv6 chain
  // whenever ip6tables has a nat table, and fails for a container without an IPv6 address.
  writeFileSync(join(bin, 'ip6tables'), `#!/bin/sh
for a in "$@"; do [ "$a" = nat ] && { echo "ip6tables: can't initialize ip6tables table \\\`nat': Table does not exist" >&2; exit 3; }; done
exec /usr/sbin/ip6tables-${backend} "$@"
`, { mode: 0o755 });
  const path = `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`;
  const cacheDir = join(dir, 'cache');
  const list = conflist(join(dir, 'ipam'));
  const listBytes = JSON.stringify(list);
  const network = list.name as string;
  const plugins = list.plugins as Record<string, unknown>[];

  const ns = createNetns('cninode');
  const client = createNetns('cniclient');
  const allocs = new Set<Allocation>();
  const tag = `${process.pid % 10000}${Math.floor(Math.random() * 100)}`;
  try {
    ip('link', 'add', `nfc${tag}`, 'netns', ns.name, 'type', 'veth', 'peer', 'name', `nfk${tag}`, 'netns', client.name);
    ns.exec('ip', ['addr', 'add', `${NODE_ADDR}/24`, 'dev', `nfc${tag}`]);
    client.exec('ip', ['addr', 'add', `${CLIENT_ADDR}/24`, 'dev', `nfk${tag}`]);
    for (const [n, dev] of [[ns, `nfc${tag}`], [client, `nfk${tag}`]] as const) {
      n.exec('ip', ['link', 'set', dev, 'up']);
      n.exec('ip', ['link', 'set', 'lo', 'up']);
    }
    ns.exec('sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
  } catch (e) {
    ns.remove();
    client.remove();
    throw e;
  }

  const cacheFile = (a: { id: string; ifName: string }) => join(cacheDir, 'results', `${network}-${a.id}-${a.ifName}`);

  /** One plugin call as libcni makes it: the config on stdin, the CNI_* variables, the result on stdout. */
  const invoke = (command: 'ADD' | 'CHECK' | 'DEL', plugin: Record<string, unknown>, a: { id: string; ns: Netns; ifName: string },
    prevResult: unknown, capabilityArgs: Record<string, unknown>): unknown => {
    const conf: Record<string, unknown> = { ...plugin, name: network, cniVersion: list.cniVersion };
    if (prevResult !== undefined) conf.prevResult = prevResult;
    const rc: Record<string, unknown> = {};
    for (const [cap, on] of Object.entries((plugin.capabilities ?? {}) as Record<string, boolean>)) {
      if (on && cap in capabilityArgs) rc[cap] = capabilityArgs[cap];
    }
    if (Object.keys(rc).length > 0) conf.runtimeConfig = rc;
    const r = spawnSync('ip', ['netns', 'exec', ns.name, join(CNI_BIN, plugin.type as string)], {
      input: JSON.stringify(conf),
      encoding: 'utf8',
      env: {
        PATH: path, CNI_COMMAND: command, CNI_CONTAINERID: a.id, CNI_NETNS: a.ns.path, CNI_IFNAME: a.ifName, CNI_PATH: CNI_BIN,
      },
    });
    if (r.status !== 0) {
      throw new CniPluginError(`${plugin.type as string} ${command} for ${a.id} failed (exit ${r.status}): ${r.stdout.trim()} ${r.stderr.trim()}`);
    }
    return command === 'ADD' ? JSON.parse(r.stdout) : undefined;
  };

  const readCache = (a: Allocation) => JSON.parse(readFileSync(cacheFile(a), 'utf8')) as {
    result: unknown; capabilityArgs?: Record<string, unknown>;
  };

  const node: CniNode = {
    backend, ns, client, cacheDir, path, conflist: list,
    async add(id, portMappings) {
      const a: Allocation = { id, ns: createNetns('alloc'), ifName: 'eth0', portMappings, result: {}, address: '' };
      try {
        const caps = { portMappings };
        let result: unknown;
        for (const p of plugins) result = invoke('ADD', p, a, result, caps);
        a.result = result as Allocation['result'];
        a.address = a.result.ips![0]!.address.split('/')[0]!;
        mkdirSync(join(cacheDir, 'results'), { recursive: true, mode: 0o700 });
        writeFileSync(cacheFile(a), JSON.stringify({
          kind: 'cniCacheV1', containerId: id, config: Buffer.from(listBytes).toString('base64'), ifName: a.ifName,
          networkName: network, netns: a.ns.path, capabilityArgs: caps, result,
        }), { mode: 0o600 });
        node.check(a);
        for (const m of portMappings) {
          const server = spawn('ip', ['netns', 'exec', a.ns.name, 'python3', '-u', '-c', SERVER, String(m.containerPort), id],
            { stdio: ['ignore', 'pipe', 'inherit'] });
          a.server = server;
          await new Promise<void>((resolve, reject) => {
            server.stdout!.once('data', () => resolve());
            server.once('exit', (c) => reject(new Error(`server of ${id} exited ${c}`)));
          });
        }
      } catch (e) {
        a.server?.kill('SIGKILL');
        a.ns.remove();
        throw e;
      }
      allocs.add(a);
      return a;
    },
    check(a) {
      const cached = readCache(a);
      for (const p of plugins) invoke('CHECK', p, a, cached.result, cached.capabilityArgs ?? {});
    },
    del(a) {
      const cached = existsSync(cacheFile(a)) ? readCache(a) : undefined;
      for (const p of [...plugins].reverse()) invoke('DEL', p, a, cached?.result, cached?.capabilityArgs ?? {});
      if (cached) rmSync(cacheFile(a));
      a.server?.kill('SIGKILL');
      a.ns.remove();
      allocs.delete(a);
    },
    forget(a) {
      a.server?.kill('SIGKILL');
      removeNetns(a.ns.name);
      allocs.delete(a);
    },
    request(hostPort) {
      // bash's /dev/tcp: a connection and its answer without a python start-up per request.
      const r = spawnSync('ip', ['netns', 'exec', client.name, 'timeout', '1', 'bash', '-c', `exec 3<>/dev/tcp/${NODE_ADDR}/${hostPort} && cat <&3`],
        { encoding: 'utf8' });
      return r.status === 0 && r.stdout !== '' ? r.stdout : 'timeout';
    },
    save() {
      return ns.exec(`iptables-${backend}-save`, []).split('\n').filter((l) => !l.startsWith('#'))
        .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
    },
    remove() {
      for (const a of allocs) {
        a.server?.kill('SIGKILL');
        a.ns.remove();
      }
      ns.remove();
      client.remove();
    },
  };
  return node;
}
