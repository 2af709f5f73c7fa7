/**
 * kube-proxy's nftables mode as kube-proxy writes it (kubernetes
 * pkg/proxy/nftables/proxier.go: setupNFTables + syncProxyRules, the version
 * with the filter-*-pre-dnat chains and cluster-ips-check), for a generated
 * cluster: N service ports with endpoints, some NodePort, LoadBalancer (with
 * and without source ranges), ExternalIP, externalTrafficPolicy Local,
 * ClientIP session affinity, and some with no endpoints. Written as the one
 * full-sync transaction kube-proxy sends through knftables, one `add …` line
 * per object (see knftables.ts). Deterministic for a seed.
 *
 * Names are kube-proxy's: `service-HASH-ns/svc/tcp/port`,
 * `endpoint-HASH-ns/svc/tcp/port__10.180.0.1/80`, … where HASH is the first
 * 8 characters of base32(sha256(name)) (hashAndTruncate).
 */
import { createHash } from 'node:crypto';
import { concat, Transaction } from './knftables.js';
import { Rng } from './rng.js';

export interface KubeProxyOptions {
  family?: 'ip' | 'ip6';
  services: number;
  seed?: number;
  /** Also write the flush/delete lines of kube-proxy's first full sync. */
  transaction?: boolean;
  /** Share of services with ClientIP session affinity (affinity sets and `update @set`); 0 leaves dynset out. */
  affinity?: number;
  /** The masquerade bit (kube-proxy's --masquerade-bit, 14 by default). */
  masqueradeBit?: number;
}

export interface PeerFile {
  family: 'ip' | 'ip6' | 'inet';
  table: string;
  text: string;
  counts: { chains: number; rules: number; sets: number; elements: number };
}

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
function base32(buf: Buffer): string {
  let out = '';
  let bits = 0;
  let value = 0;
  for (const b of buf) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

/** kube-proxy's hashAndTruncate (the names here never reach the 240-byte limit). */
export function hashName(name: string): string {
  return `${base32(createHash('sha256').update(name).digest()).slice(0, 8)}-${name}`;
}

/** Go's fmt.Sprintf("%#08x", v): eight zero-padded digits after 0x. */
const goHex08 = (v: number) => `0x${v.toString(16).padStart(8, '0')}`;

interface Endpoint { ip: string; port: number; local: boolean }
interface ServicePort {
  ns: string; name: string; port: string; protocol: 'tcp' | 'udp' | 'sctp'; portNum: number;
  clusterIP: string; nodePort: number; externalIPs: string[]; lbIPs: string[]; sourceRanges: string[];
  externalLocal: boolean; affinity: number | undefined; endpoints: Endpoint[];
}

const FORCED: { kind: number; endpoints?: number; externalIP?: boolean; sourceRanges?: boolean; local?: boolean; affinity?: boolean }[] = [
  { kind: 0.5, endpoints: 1, affinity: false },
  { kind: 0.25, endpoints: 2, local: true, externalIP: true, sourceRanges: false, affinity: false },
  { kind: 0.05, endpoints: 1, local: false, affinity: false },
  { kind: 0.5, endpoints: 2, externalIP: true, affinity: false },
  { kind: 0.25, endpoints: 1, local: false, sourceRanges: true, affinity: true },
  { kind: 0.25, endpoints: 0, affinity: false },
];

function v4(base: [number, number], k: number): string {
  return `${base[0]}.${base[1]}.${(k >> 8) & 255}.${k & 255}`;
}
function v6(prefix: string, k: number): string {
  return `${prefix}${k.toString(16)}`;
}

/** A cluster of `n` service ports, deterministic for the seed. */
function cluster(o: Required<Pick<KubeProxyOptions, 'services' | 'seed' | 'affinity'>>, six: boolean): ServicePort[] {
  const rng = new Rng(o.seed);
  const svcs: ServicePort[] = [];
  let ep = 1;
  let ext = 1;
  let nodePort = 30000; // allocated like the apiserver does, one per service port (30000-32767)
  for (let i = 0; i < o.services; i++) {
    // The first six are the kinds of kube-proxy's own TestOverallNFTablesRules (ClusterIP,
    // LoadBalancer with Local policy, NodePort, ExternalIP, LoadBalancer with source ranges and
    // ClientIP affinity, no endpoints), so even the 10-service file has every kind of object.
    const forced = FORCED[i];
    const kind = forced?.kind ?? rng.next();
    const nodePortish = kind < 0.15;
    const lb = kind >= 0.2 && kind < 0.26;
    const protocol = rng.pick(['tcp', 'tcp', 'tcp', 'tcp', 'udp', 'sctp'] as const);
    const portNum = protocol === 'udp' ? 53 : rng.pick([80, 443, 8080, 9090, 6379]);
    const nEndpoints = forced?.endpoints ?? (rng.chance(0.05) ? 0 : rng.int(1, 3));
    const endpoints: Endpoint[] = [];
    for (let e = 0; e < nEndpoints; e++, ep++) {
      endpoints.push({ ip: six ? v6('fd00:10:180::', ep) : v4([10, 180], ep), port: rng.pick([80, 8080, 8443, 53]), local: rng.chance(0.3) });
    }
    const externalIPs = forced?.externalIP ?? rng.chance(0.03) ? [six ? v6('2001:db8:99::', ext++) : v4([192, 168], 0x6300 + ext++)] : [];
    const lbIPs = lb ? [six ? v6('2001:db8:1::', ext++) : v4([1, 2], ext++)] : [];
    const sourceRanges = lb && (forced?.sourceRanges ?? rng.chance(0.5)) ? [six ? '2001:db8:203::/64' : '203.0.113.0/25'] : [];
    svcs.push({
      ns: `ns${i % 97}`, name: `svc${i}`, port: `p${portNum}`, protocol, portNum,
      clusterIP: six ? v6('fd00:172:30::', i + 1) : v4([172, 30], i + 1),
      nodePort: nodePortish || lb ? nodePort++ : 0,
      externalIPs, lbIPs, sourceRanges,
      externalLocal: (nodePortish || lb) && (forced?.local ?? rng.chance(0.3)),
      affinity: (forced?.affinity ?? rng.chance(o.affinity)) && o.affinity > 0 ? 10800 : undefined,
      endpoints,
    });
  }
  return svcs;
}

export function kubeProxy(options: KubeProxyOptions): PeerFile {
  const family = options.family ?? 'ip';
  const six = family === 'ip6';
  const ipX = six ? 'ip6' : 'ip';
  const addrType = six ? 'ipv6_addr' : 'ipv4_addr';
  const noLocalhost = six ? 'ip6 daddr != ::1' : 'ip daddr != 127.0.0.0/8';
  void noLocalhost; // the nodeport-ips form below is the one used when --nodeport-addresses is set (the default "primary")
  const mark = goHex08(1 << (options.masqueradeBit ?? 14));
  const clusterCIDR = six ? 'fd00:10::/64' : '10.0.0.0/8';
  const serviceCIDR = six ? 'fd00:172:30::/112' : '172.30.0.0/16';
  const nodeIP = six ? 'fd00:192:168::2' : '192.168.0.2';
  const tx = new Transaction(family, 'kube-proxy', options.transaction);
  const svcs = cluster({ services: options.services, seed: options.seed ?? 1, affinity: options.affinity ?? 0.03 }, six);

  // ---- setupNFTables
  tx.addTable({ comment: 'rules for kube-proxy' });
  const baseChains: [string, 'filter' | 'nat', string, string][] = [
    ['filter-prerouting-pre-dnat', 'filter', 'prerouting', 'dstnat-10'],
    ['filter-output-pre-dnat', 'filter', 'output', 'dstnat-10'],
    ['filter-input', 'filter', 'input', 'filter'],
    ['filter-forward', 'filter', 'forward', 'filter'],
    ['filter-output', 'filter', 'output', 'filter'],
    ['nat-prerouting', 'nat', 'prerouting', 'dstnat'],
    ['nat-output', 'nat', 'output', 'dstnat'],
    ['nat-postrouting', 'nat', 'postrouting', 'srcnat'],
  ];
  if (tx.transaction) {
    for (const [name] of baseChains) {
      tx.addChain({ name });
      tx.deleteChain(name);
    }
  }
  for (const [name, type, hook, priority] of baseChains) {
    tx.addChain({ name, type, hook, priority });
    tx.flushChain(name);
  }
  const created = new Set<string>();
  const ensureChain = (name: string) => {
    if (created.has(name)) return;
    created.add(name);
    tx.addChain({ name });
    tx.flushChain(name);
  };
  const jumps: [string, string, string][] = [
    ['nodeport-endpoints-check', 'filter-input', 'ct state new'],
    ['service-endpoints-check', 'filter-input', 'ct state new'],
    ['service-endpoints-check', 'filter-forward', 'ct state new'],
    ['service-endpoints-check', 'filter-output', 'ct state new'],
    ['firewall-check', 'filter-prerouting-pre-dnat', 'ct state new'],
    ['firewall-check', 'filter-output-pre-dnat', 'ct state new'],
    ['services', 'nat-output', ''],
    ['services', 'nat-prerouting', ''],
    ['masquerading', 'nat-postrouting', ''],
    ['cluster-ips-check', 'filter-forward', 'ct state new'],
    ['cluster-ips-check', 'filter-output', 'ct state new'],
  ];
  for (const [dst, src, extra] of jumps) {
    ensureChain(dst);
    tx.addRule(src, concat(extra, 'jump', dst));
  }
  for (const c of ['services', 'cluster-ips-check', 'masquerading', 'mark-for-masquerade']) ensureChain(c);
  tx.addRule('mark-for-masquerade', concat('mark', 'set', 'mark', 'or', mark));
  tx.addRule('masquerading', concat('mark', 'and', mark, '==', '0', 'return'));
  tx.addRule('masquerading', concat('mark', 'set', 'mark', 'xor', mark));
  tx.addRule('masquerading', 'masquerade fully-random');
  tx.addSet({ name: 'cluster-ips', type: addrType, comment: 'Active ClusterIPs' });
  tx.addRule('cluster-ips-check', concat(ipX, 'daddr', '@cluster-ips', 'reject'), 'Reject traffic to invalid ports of ClusterIPs');
  tx.addRule('cluster-ips-check', concat(ipX, 'daddr', '{', serviceCIDR, '}', 'drop'), 'Drop traffic to unallocated ClusterIPs');
  tx.addSet({ name: 'nodeport-ips', type: addrType, comment: 'IPs that accept NodePort traffic' });
  tx.flushSet('set', 'nodeport-ips');
  tx.addElement({ set: 'nodeport-ips', key: [nodeIP] });
  tx.addMap({ name: 'no-endpoint-services', type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: 'vmap to drop or reject packets to services with no endpoints' });
  tx.addMap({ name: 'no-endpoint-nodeports', type: 'inet_proto . inet_service : verdict',
    comment: 'vmap to drop or reject packets to service nodeports with no endpoints' });
  tx.addChain({ name: 'reject-chain', comment: 'helper for @no-endpoint-services / @no-endpoint-nodeports' });
  tx.flushChain('reject-chain');
  tx.addRule('reject-chain', 'reject');
  tx.addRule('service-endpoints-check', concat(ipX, 'daddr', '.', 'meta l4proto', '.', 'th dport', 'vmap', '@no-endpoint-services'));
  tx.addRule('nodeport-endpoints-check', concat(ipX, 'daddr', '@nodeport-ips', 'meta l4proto . th dport', 'vmap', '@no-endpoint-nodeports'));
  tx.addMap({ name: 'firewall-ips', type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: 'destinations that are subject to LoadBalancerSourceRanges' });
  ensureChain('firewall-check');
  tx.addRule('firewall-check', concat(ipX, 'daddr', '.', 'meta l4proto', '.', 'th dport', 'vmap', '@firewall-ips'));
  tx.addMap({ name: 'service-ips', type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: 'ClusterIP, ExternalIP and LoadBalancer IP traffic' });
  tx.addMap({ name: 'service-nodeports', type: 'inet_proto . inet_service : verdict', comment: 'NodePort traffic' });
  tx.addRule('services', concat(ipX, 'daddr', '.', 'meta l4proto', '.', 'th dport', 'vmap', '@service-ips'));
  tx.addRule('services', concat(ipX, 'daddr @nodeport-ips', 'meta l4proto . th dport', 'vmap', '@service-nodeports'));
  tx.flushSet('set', 'cluster-ips');
  for (const m of ['service-ips', 'firewall-ips', 'no-endpoint-services', 'no-endpoint-nodeports', 'service-nodeports']) tx.flushSet('map', m);

  // ---- syncProxyRules, one service port at a time
  const active = new Set<string>();
  const ensureActive = (name: string) => {
    if (active.has(name)) return;
    active.add(name);
    tx.addChain({ name });
    tx.flushChain(name);
  };
  for (const s of svcs) {
    const base = hashName(`${s.ns}/${s.name}/${s.protocol}/${s.port}`);
    const clusterPolicyChain = `service-${base}`;
    const localPolicyChain = `local-${base}`;
    const externalChain = `external-${base}`;
    const fwChain = `firewall-${base}`;
    const nameString = `${s.ns}/${s.name}:${s.port}`;
    const externallyAccessible = s.nodePort !== 0 || s.externalIPs.length > 0 || s.lbIPs.length > 0;
    const externalPolicyLocal = s.externalLocal && externallyAccessible;
    const epChain = (e: Endpoint) => {
      const host = e.ip.replaceAll(':', '.');
      return `endpoint-${hashName(`${s.ns}/${s.name}/${s.protocol}/${s.port}__${host}/${e.port}`)}`;
    };
    const affinitySet = (e: Endpoint) => epChain(e).replace(/^endpoint-/, 'affinity-');
    const epString = (e: Endpoint) => (six ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`);

    // proxy.CategorizeEndpoints for internalTrafficPolicy Cluster
    const hasEndpoints = s.endpoints.length > 0;
    const usesLocal = externalPolicyLocal;
    const clusterEndpoints = s.endpoints;
    const localEndpoints = usesLocal ? s.endpoints.filter((e) => e.local) : [];
    const reachable = [...clusterEndpoints];
    for (const e of localEndpoints) if (!reachable.includes(e)) reachable.push(e);
    for (const e of reachable) ensureActive(epChain(e));
    const usesClusterPolicyChain = clusterEndpoints.length > 0;
    if (usesClusterPolicyChain) ensureActive(clusterPolicyChain);
    const usesLocalPolicyChain = localEndpoints.length > 0;
    if (usesLocalPolicyChain) ensureActive(localPolicyChain);
    const hasInternalEndpoints = hasEndpoints;
    const internalTrafficChain = clusterPolicyChain;
    const externalPolicyChain = externalPolicyLocal ? localPolicyChain : clusterPolicyChain;
    const hasExternalEndpoints = externalPolicyLocal ? localEndpoints.length > 0 : hasEndpoints;
    const usesExternalTrafficChain = hasEndpoints && externallyAccessible;
    if (usesExternalTrafficChain) ensureActive(externalChain);
    const internalVerdict = hasEndpoints ? undefined : 'goto reject-chain';
    const externalVerdict = hasEndpoints ? (hasExternalEndpoints ? undefined : 'drop') : 'goto reject-chain';
    const key = (ip: string) => [ip, s.protocol, String(s.portNum)];

    tx.addElement({ set: 'cluster-ips', key: [s.clusterIP] });
    if (hasInternalEndpoints) {
      tx.addElement({ set: 'service-ips', key: key(s.clusterIP), value: [`goto ${internalTrafficChain}`] });
    } else {
      tx.addElement({ set: 'no-endpoint-services', key: key(s.clusterIP), value: [internalVerdict!], comment: nameString });
    }
    for (const ip of s.externalIPs) {
      if (hasEndpoints) tx.addElement({ set: 'service-ips', key: key(ip), value: [`goto ${externalChain}`] });
      if (!hasExternalEndpoints) tx.addElement({ set: 'no-endpoint-services', key: key(ip), value: [externalVerdict!], comment: nameString });
    }
    const usesFWChain = s.lbIPs.length > 0 && s.sourceRanges.length > 0;
    if (usesFWChain) ensureActive(fwChain);
    for (const ip of s.lbIPs) {
      if (hasEndpoints) tx.addElement({ set: 'service-ips', key: key(ip), value: [`goto ${externalChain}`] });
      if (usesFWChain) tx.addElement({ set: 'firewall-ips', key: key(ip), value: [`goto ${fwChain}`] });
    }
    if (!hasExternalEndpoints) {
      for (const ip of s.lbIPs) tx.addElement({ set: 'no-endpoint-services', key: key(ip), value: [externalVerdict!], comment: nameString });
    }
    if (s.nodePort !== 0) {
      const npKey = [s.protocol, String(s.nodePort)];
      if (hasEndpoints) tx.addElement({ set: 'service-nodeports', key: npKey, value: [`goto ${externalChain}`] });
      if (!hasExternalEndpoints) tx.addElement({ set: 'no-endpoint-nodeports', key: npKey, value: [externalVerdict!], comment: nameString });
    }

    if (hasInternalEndpoints) {
      tx.addRule(internalTrafficChain, concat(ipX, 'daddr', s.clusterIP, ipX, 'saddr', '!=', clusterCIDR, 'jump', 'mark-for-masquerade'));
    }
    if (usesExternalTrafficChain) {
      if (!externalPolicyLocal) {
        tx.addRule(externalChain, concat('jump', 'mark-for-masquerade'));
      } else {
        tx.addRule(externalChain, concat(ipX, 'saddr', clusterCIDR, 'goto', clusterPolicyChain), 'short-circuit pod traffic');
        tx.addRule(externalChain, concat('fib', 'saddr', 'type', 'local', 'jump', 'mark-for-masquerade'), 'masquerade local traffic');
        tx.addRule(externalChain, concat('fib', 'saddr', 'type', 'local', 'goto', clusterPolicyChain), 'short-circuit local traffic');
      }
      if (hasExternalEndpoints) tx.addRule(externalChain, concat('goto', externalPolicyChain));
    }
    if (usesFWChain) {
      const sources = s.sourceRanges.join(' , ');
      tx.addRule(fwChain, concat(ipX, 'saddr', '!=', '{', sources, '}', 'drop'));
    }
    if (s.affinity !== undefined) {
      for (const e of reachable) {
        tx.addSet({ name: affinitySet(e), type: addrType, flags: ['dynamic', 'timeout'], timeout: s.affinity });
      }
    }
    const serviceToEndpoints = (chain: string, eps: Endpoint[]) => {
      if (s.affinity !== undefined) {
        for (const e of eps) tx.addRule(chain, concat(ipX, 'saddr', `@${affinitySet(e)}`, 'goto', epChain(e)));
      }
      const elements = eps.map((e, i) => `${i} : goto ${epChain(e)}`).join(' , ');
      tx.addRule(chain, concat('numgen random mod', eps.length, 'vmap', '{', elements, '}'));
    };
    if (usesClusterPolicyChain) serviceToEndpoints(clusterPolicyChain, clusterEndpoints);
    if (usesLocalPolicyChain) serviceToEndpoints(localPolicyChain, localEndpoints);
    for (const e of reachable) {
      const chain = epChain(e);
      tx.addRule(chain, concat(ipX, 'saddr', e.ip, 'jump', 'mark-for-masquerade'));
      if (s.affinity !== undefined) tx.addRule(chain, concat('update', `@${affinitySet(e)}`, '{', ipX, 'saddr', '}'));
      tx.addRule(chain, concat('meta l4proto', s.protocol, 'dnat to', epString(e)));
    }
  }
  return {
    family, table: 'kube-proxy', text: tx.text(),
    counts: { chains: tx.chains, rules: tx.rules, sets: tx.sets, elements: tx.elements },
  };
}
