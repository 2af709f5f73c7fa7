/**
 * The peer rulesets as whole tables (the proof that large real rulesets load): each entry gives the
 * file a peer program writes and the tables in it. Files that need a tool in
 * a namespace (iptables-restore-translate for Docker) take one.
 *
 *   import { PEERS } from '../helpers/peers/index.js';
 *   for (const p of PEERS) { const f = p.file(ns, dir); … }
 */
import type { Netns } from '../netns.js';
import { calico } from './calico.js';
import { flannel, portmap } from './cni.js';
import { DOCKER_SAVE, dockerFile, dockerSave } from './docker.js';
import { kubeProxy, type PeerFile } from './kube-proxy.js';

export { calico, DOCKER_SAVE, dockerFile, dockerSave, flannel, kubeProxy, portmap };
export type { PeerFile };
export { hashName } from './kube-proxy.js';
export { Transaction, concat } from './knftables.js';
export { Rng } from './rng.js';

export interface PeerTable { family: 'ip' | 'ip6' | 'inet'; table: string }

export interface Peer {
  name: string;
  tables: PeerTable[];
  /** The file's text; `ns` and `dir` are for peers whose file a tool in a namespace writes. */
  file(ns: Netns, dir: string): string;
  /**
   * Why nft 1.0.6's listing of this table does not give back its install (nft itself installs
   * other expressions from its listing): the proof then checks the listing against nft's install
   * of the listing, and that the two installs differ.
   */
  lossyListing?: string;
}

function one(name: string, make: () => PeerFile): Peer {
  const f = make();
  return { name, tables: [{ family: f.family, table: f.table }], file: () => f.text };
}

export const PEERS: Peer[] = [
  one('kube-proxy ip, 10 services', () => kubeProxy({ services: 10 })),
  one('kube-proxy ip6, 10 services', () => kubeProxy({ services: 10, family: 'ip6' })),
  one('kube-proxy ip, 1,000 services', () => kubeProxy({ services: 1000 })),
  one('Calico NAT ip', () => calico()),
  one('Calico NAT ip6', () => calico({ family: 'ip6' })),
  {
    ...one('CNI portmap ip, 20 containers', () => portmap({ containers: 20 })),
    lossyListing: "nft lists `ip protocol tcp th dport N dnat ip addr . port to A . P` as `tcp dport N dnat to A:P`, " +
      'which nft compiles to `meta l4proto tcp` and the port in register 2, not `ip protocol tcp` and register 9',
  },
  {
    name: 'flannel (ip flannel-ipv4 and ip6 flannel-ipv6)',
    tables: [{ family: 'ip', table: 'flannel-ipv4' }, { family: 'ip6', table: 'flannel-ipv6' }],
    file: () => flannel().map((f) => f.text).join(''),
  },
  {
    name: 'Docker NAT via iptables-restore-translate, 50 published ports',
    tables: [{ family: 'ip', table: 'docker_nat' }],
    file: (ns, dir) => dockerFile(ns, dir, dockerSave(50)),
  },
];
