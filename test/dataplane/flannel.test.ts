/**
 * examples/flannel.yaml against flannel's own rules, with real packets. The
 * same three-namespace network is built three times: once with the example
 * installed by nfkeeper, and twice with FLANNEL-POSTRTG written by iptables
 * (-nft and -legacy) as flannel v0.21+ writes it (pkg/trafficmngr/iptables:
 * a jump from POSTROUTING, then the chain's rules with -A). A mangle rule
 * on the node sets kube-proxy's mark 0x4000 on packets from UDP source
 * ports 40000-40099, as KUBE-MARK-MASQ would. Probes with and without the
 * mark go pod -> external host, pod -> a pod of another node, and external
 * host -> pod; each receiver answers with the source address it saw. Every
 * probe must see the same source in all three.
 *
 *   pod 10.244.1.2 -- 10.244.1.1 node 192.0.2.1 -- 192.0.2.2 external (+ 10.244.2.5, "another node's pod")
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { createNetns, type Netns } from '../helpers/netns.js';

const SERVER = `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
print("ready", flush=True)
while True:
    data, addr = s.recvfrom(100)
    s.sendto(addr[0].encode(), addr)
`;

// One probe per (destination, source port); prints "dst sport seen-source" (or timeout).
const PROBE = `
import socket, sys
for dst in sys.argv[1].split(","):
    for sport in [int(p) for p in sys.argv[2].split(",")]:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", sport))
        s.settimeout(3.0)
        try:
            s.sendto(b"p", (dst, 9999))
            seen = s.recvfrom(100)[0].decode()
        except socket.timeout:
            seen = "timeout"
        print(dst, sport, seen, flush=True)
        s.close()
`;

const MARKED = [40001, 40002];
const UNMARKED = [50001, 50002];

function ip(...args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

async function network(): Promise<{ pod: Netns; node: Netns; ext: Netns; remove(): void }> {
  const pod = createNetns('fpod');
  const node = createNetns('fnode');
  const ext = createNetns('fext');
  const remove = () => { for (const n of [pod, node, ext]) n.remove(); };
  try {
    const tag = `${process.pid % 10000}${Math.floor(Math.random() * 100)}`;
    ip('link', 'add', `ffp${tag}`, 'netns', pod.name, 'type', 'veth', 'peer', 'name', `ffn${tag}`, 'netns', node.name);
    ip('link', 'add', `ffe${tag}`, 'netns', node.name, 'type', 'veth', 'peer', 'name', `ffx${tag}`, 'netns', ext.name);
    pod.exec('ip', ['addr', 'add', '10.244.1.2/24', 'dev', `ffp${tag}`]);
    pod.exec('ip', ['link', 'set', `ffp${tag}`, 'up']);
    pod.exec('ip', ['route', 'add', 'default', 'via', '10.244.1.1']);
    node.exec('ip', ['addr', 'add', '10.244.1.1/24', 'dev', `ffn${tag}`]);
    node.exec('ip', ['addr', 'add', '192.0.2.1/24', 'dev', `ffe${tag}`]);
    node.exec('ip', ['link', 'set', `ffn${tag}`, 'up']);
    node.exec('ip', ['link', 'set', `ffe${tag}`, 'up']);
    node.exec('ip', ['route', 'add', '10.244.2.0/24', 'via', '192.0.2.2']);
    node.exec('sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
    ext.exec('ip', ['addr', 'add', '192.0.2.2/24', 'dev', `ffx${tag}`]);
    ext.exec('ip', ['addr', 'add', '10.244.2.5/32', 'dev', 'lo']);
    ext.exec('ip', ['link', 'set', `ffx${tag}`, 'up']);
    ext.exec('ip', ['route', 'add', '10.244.1.0/24', 'via', '192.0.2.1']);
    for (const n of [pod, node, ext]) n.exec('ip', ['link', 'set', 'lo', 'up']);
    // kube-proxy's KUBE-MARK-MASQ, for the probes from the marked source ports.
    node.nft('table ip kubeproxy {\n chain pre {\n type filter hook prerouting priority mangle;\n udp sport 40000-40099 meta mark set mark or 0x4000\n }\n}\n');
  } catch (e) {
    remove();
    throw e;
  }
  return { pod, node, ext, remove };
}

/** Every probe's receiver-side source address, keyed "from->dst sport". */
async function probe(n: { pod: Netns; ext: Netns }): Promise<Map<string, string>> {
  const servers = [n.pod, n.ext].map((ns) => spawn('ip', ['netns', 'exec', ns.name, 'python3', '-u', '-c', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] }));
  try {
    await Promise.all(servers.map((s) => new Promise<void>((resolve, reject) => {
      s.stdout!.once('data', () => resolve());
      s.once('exit', (c) => reject(new Error(`server exited ${c}`)));
    })));
    const ports = [...MARKED, ...UNMARKED].join(',');
    const out = new Map<string, string>();
    for (const [from, ns, dsts] of [['pod', n.pod, '192.0.2.2,10.244.2.5'], ['ext', n.ext, '10.244.1.2']] as const) {
      for (const line of ns.exec('python3', ['-c', PROBE, dsts, ports]).trim().split('\n')) {
        const [dst, sport, seen] = line.split(' ');
        out.set(`${from}->${dst} ${sport}`, seen!);
      }
    }
    return out;
  } finally {
    for (const s of servers) s.kill('SIGKILL');
  }
}

/** FLANNEL-POSTRTG as flannel v0.21+ writes it for network 10.244.0.0/16, lease 10.244.1.0/24. */
function flannelRules(iptables: string, node: Netns): void {
  const c = ['-m', 'comment', '--comment', 'flanneld masq'];
  const t = (...args: string[]) => node.exec(iptables, ['-t', 'nat', ...args]);
  t('-N', 'FLANNEL-POSTRTG');
  t('-A', 'POSTROUTING', ...c, '-j', 'FLANNEL-POSTRTG');
  t('-A', 'FLANNEL-POSTRTG', '-m', 'mark', '--mark', '0x4000/0x4000', ...c, '-j', 'RETURN');
  t('-A', 'FLANNEL-POSTRTG', '-s', '10.244.1.0/24', '-d', '10.244.0.0/16', ...c, '-j', 'RETURN');
  t('-A', 'FLANNEL-POSTRTG', '-s', '10.244.0.0/16', '-d', '10.244.1.0/24', ...c, '-j', 'RETURN');
  t('-A', 'FLANNEL-POSTRTG', '!', '-s', '10.244.0.0/16', '-d', '10.244.1.0/24', ...c, '-j', 'RETURN');
  t('-A', 'FLANNEL-POSTRTG', '-s', '10.244.0.0/16', '!', '-d', '224.0.0.0/4', ...c, '-j', 'MASQUERADE', '--random-fully');
  t('-A', 'FLANNEL-POSTRTG', '!', '-s', '10.244.0.0/16', '-d', '10.244.0.0/16', ...c, '-j', 'MASQUERADE', '--random-fully');
}

describe('examples/flannel.yaml masquerades exactly what flannel\'s own rules do', () => {
  it('marked and unmarked probes, nfkeeper beside iptables-nft and iptables-legacy', async () => {
    const seen: Record<string, Map<string, string>> = {};
    for (const variant of ['nfkeeper', 'iptables-nft', 'iptables-legacy'] as const) {
      const n = await network();
      try {
        if (variant === 'nfkeeper') {
          const r = await cli('apply', '--config', 'examples/flannel.yaml', '--netns', n.node.path);
          expect(r.code, r.err).toBe(0);
        } else flannelRules(variant, n.node);
        seen[variant] = await probe(n);
      } finally {
        n.remove();
      }
    }
    const nfk = seen.nfkeeper!;
    // The classes themselves: unmarked pod traffic leaves from the node, marked traffic is left to
    // kube-proxy (not masqueraded here), pod-to-pod and traffic to the pods keep their source.
    for (const p of UNMARKED) expect(nfk.get(`pod->192.0.2.2 ${p}`)).toBe('192.0.2.1');
    for (const p of MARKED) expect(nfk.get(`pod->192.0.2.2 ${p}`)).toBe('10.244.1.2');
    for (const p of [...MARKED, ...UNMARKED]) {
      expect(nfk.get(`pod->10.244.2.5 ${p}`)).toBe('10.244.1.2');
      expect(nfk.get(`ext->10.244.1.2 ${p}`)).toBe('192.0.2.2');
    }
    expect(nfk.size).toBe(12);
    expect(seen['iptables-nft']).toEqual(nfk);
    expect(seen['iptables-legacy']).toEqual(nfk);
  }, 180_000);  // three networks, each with python receivers and probers: slow on a loaded machine

  it('the ConfigMap holds the example\'s rules, with the lease and network as variables', () => {
    const rules = (yaml: string) => (parse(yaml) as { tables: { chains: { rules: string[] }[] }[] }).tables[0]!.chains[0]!.rules;
    const cm = parse(readFileSync('deploy/kubernetes/configmap.yaml', 'utf8')) as { data: Record<string, string> };
    const fromCm = rules(cm.data['config.yaml']!).map((r) => r.replaceAll('${FLANNEL_NETWORK}', '10.244.0.0/16').replaceAll('${FLANNEL_SUBNET}', '10.244.1.0/24'));
    expect(fromCm).toEqual(rules(readFileSync('examples/flannel.yaml', 'utf8')));
  });
});
