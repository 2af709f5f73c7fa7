/**
 * Three namespaces joined by veth pairs, for real packets:
 *
 *   pod 10.244.1.2 ── 10.244.1.1 node 192.0.2.1 ── 192.0.2.2 external
 *
 * The external host answers each UDP probe with the source address it saw,
 * and routes 10.244.0.0/16 back through the node, so an unmasqueraded probe
 * is answered too (and reported as such). The addresses exist only inside
 * these namespaces; nothing is routed out of them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createNetns, type Netns } from './netns.js';

export const POD_ADDR = '10.244.1.2';
export const NODE_EXTERNAL_ADDR = '192.0.2.1';
export const EXTERNAL_ADDR = '192.0.2.2';
const PORT = 9999;

const SERVER = `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("${EXTERNAL_ADDR}", ${PORT}))
print("ready", flush=True)
while True:
    data, addr = s.recvfrom(100)
    s.sendto(addr[0].encode(), addr)
`;

// One probe per fresh socket (a new source port, so a new conntrack entry and a fresh NAT decision).
const PROBE = `
import socket, sys, time
end = time.time() + float(sys.argv[1])
while time.time() < end:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.3)
    sent = time.time()
    try:
        s.sendto(b"p", ("${EXTERNAL_ADDR}", ${PORT}))
        print("%.6f %s" % (sent, s.recvfrom(100)[0].decode()), flush=True)
    except socket.timeout:
        print("%.6f timeout" % sent, flush=True)
    s.close()
    time.sleep(0.01)
`;

export interface Probe {
  sentAt: number;
  /** The source address the external host saw, or 'timeout'. */
  from: string;
}

export interface Topology {
  pod: Netns;
  node: Netns;
  external: Netns;
  /** Sends probes from the pod for `seconds`; resolves with the source address each one arrived from. */
  probe(seconds: number): Promise<string[]>;
  /** The same, with the wall-clock time (ms since the epoch, Date.now()'s clock) each probe was sent. */
  probeTimed(seconds: number): Promise<Probe[]>;
  remove(): void;
}

function ip(...args: string[]): void {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

export async function createTopology(): Promise<Topology> {
  const pod = createNetns('pod');
  const node = createNetns('node');
  const external = createNetns('ext');
  let server: ChildProcess | undefined;
  const remove = () => {
    server?.kill('SIGKILL');
    for (const ns of [pod, node, external]) ns.remove();
  };
  try {
    const tag = `${process.pid % 10000}${Math.floor(Math.random() * 100)}`;
    ip('link', 'add', `nfp${tag}`, 'netns', pod.name, 'type', 'veth', 'peer', 'name', `nfn${tag}`, 'netns', node.name);
    ip('link', 'add', `nfe${tag}`, 'netns', node.name, 'type', 'veth', 'peer', 'name', `nfx${tag}`, 'netns', external.name);
    pod.exec('ip', ['addr', 'add', `${POD_ADDR}/24`, 'dev', `nfp${tag}`]);
    pod.exec('ip', ['link', 'set', `nfp${tag}`, 'up']);
    pod.exec('ip', ['route', 'add', 'default', 'via', '10.244.1.1']);
    node.exec('ip', ['addr', 'add', '10.244.1.1/24', 'dev', `nfn${tag}`]);
    node.exec('ip', ['addr', 'add', `${NODE_EXTERNAL_ADDR}/24`, 'dev', `nfe${tag}`]);
    node.exec('ip', ['link', 'set', `nfn${tag}`, 'up']);
    node.exec('ip', ['link', 'set', `nfe${tag}`, 'up']);
    node.exec('sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
    external.exec('ip', ['addr', 'add', `${EXTERNAL_ADDR}/24`, 'dev', `nfx${tag}`]);
    external.exec('ip', ['link', 'set', `nfx${tag}`, 'up']);
    external.exec('ip', ['route', 'add', '10.244.0.0/16', 'via', NODE_EXTERNAL_ADDR]);
    for (const ns of [pod, node, external]) ns.exec('ip', ['link', 'set', 'lo', 'up']);
    server = spawn('ip', ['netns', 'exec', external.name, 'python3', '-u', '-c', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once('data', () => resolve());
      server!.once('exit', (c) => reject(new Error(`probe server exited ${c}`)));
    });
  } catch (e) {
    remove();
    throw e;
  }
  const probeTimed = (seconds: number) => new Promise<Probe[]>((resolve, reject) => {
    const c = spawn('ip', ['netns', 'exec', pod.name, 'python3', '-u', '-c', PROBE, String(seconds)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    c.on('exit', (code) => (code === 0
      ? resolve(out.split('\n').filter(Boolean).map((l) => ({ sentAt: Number(l.split(' ')[0]) * 1000, from: l.split(' ')[1]! })))
      : reject(new Error(`probe exited ${code}`))));
  });
  const probe = async (seconds: number) => (await probeTimed(seconds)).map((p) => p.from);
  return { pod, node, external, probe, probeTimed, remove };
}
