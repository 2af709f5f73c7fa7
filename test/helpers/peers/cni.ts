/**
 * The CNI portmap plugin's nftables backend (containernetworking/plugins
 * plugins/meta/portmap/portmap_nftables.go: forwardPorts), and flannel's
 * nftables traffic manager (flannel-io/flannel pkg/trafficmngr/nftables),
 * each as the knftables transactions those programs send, replayed in
 * order into one file. Deterministic for a seed.
 */
import { concat, Transaction } from './knftables.js';
import type { PeerFile } from './kube-proxy.js';
import { Rng } from './rng.js';

/**
 * `containers` pods with host ports on one node (portmap ADD per container,
 * snat on, no conditions): a few with a hostIP (hostip_hostports), the rest
 * on every address (hostports), with their hairpin/localhost masquerade rules.
 * Each ADD re-adds the table and chains and flushes prerouting/output; what
 * stays is written once, then every container's rules in ADD order.
 */
export function portmap(o: { containers: number; family?: 'ip' | 'ip6'; seed?: number; transaction?: boolean }): PeerFile {
  const family = o.family ?? 'ip';
  const six = family === 'ip6';
  const ipX = family;
  const rng = new Rng(o.seed ?? 7);
  const tx = new Transaction(family, 'cni_hostport', o.transaction);
  const setup = () => {
    tx.addTable({ comment: 'CNI portmap plugin' });
    tx.addChain({ name: 'hostports' });
    tx.addChain({ name: 'hostip_hostports' });
    tx.addChain({ name: 'prerouting', type: 'nat', hook: 'prerouting', priority: 'dstnat' });
    tx.flushChain('prerouting');
    tx.addRule('prerouting', concat('jump', 'hostip_hostports'));
    tx.addRule('prerouting', concat('jump', 'hostports'));
    tx.addChain({ name: 'output', type: 'nat', hook: 'output', priority: '-100' });
    tx.flushChain('output');
    tx.addRule('output', concat('jump', 'hostip_hostports'));
    tx.addRule('output', concat('fib daddr type local', 'jump', 'hostports'));
    tx.addChain({ name: 'masquerading', type: 'nat', hook: 'postrouting', priority: 'srcnat' });
  };
  setup();
  let hostPort = 8000;
  for (let c = 0; c < o.containers; c++) {
    const id = rng.hex(64);
    const ip = six ? `fd00:88::${(c + 2).toString(16)}` : `10.88.${(c + 2) >> 8}.${(c + 2) & 255}`;
    const hostIP = rng.chance(0.2) ? (six ? '2001:db8::10' : '192.168.1.10') : undefined;
    const maps = rng.int(1, 3);
    for (let m = 0; m < maps; m++) {
      const protocol = rng.pick(['tcp', 'tcp', 'udp'] as const);
      const dnat = concat(ipX, 'protocol', protocol, 'th dport', hostPort++,
        'dnat', ipX, 'addr . port', 'to', ip, '.', rng.pick([80, 443, 53, 8080]));
      if (hostIP) tx.addRule('hostip_hostports', concat(ipX, 'daddr', hostIP, dnat), id);
      else tx.addRule('hostports', dnat, id);
    }
    tx.addRule('masquerading', concat(ipX, 'saddr', ip, ipX, 'daddr', ip, 'masquerade'), id);
    if (!six) tx.addRule('masquerading', concat(ipX, 'saddr 127.0.0.1', ipX, 'daddr', ip, 'masquerade'), id);
  }
  return { family, table: 'cni_hostport', text: tx.text(), counts: { chains: tx.chains, rules: tx.rules, sets: tx.sets, elements: tx.elements } };
}

/**
 * flannel with the nftables backend on one node: Init creates `ip flannel-ipv4`
 * and `ip6 flannel-ipv6` (comment only), then the forward and masquerade
 * transactions fill the IPv4 table (masquerade fully-random, as on a kernel
 * that has it). Two tables in one file.
 */
export function flannel(o: { network?: string; subnet?: string; transaction?: boolean } = {}): PeerFile[] {
  const network = o.network ?? '10.244.0.0/16';
  const subnet = o.subnet ?? '10.244.1.0/24';
  const v4 = new Transaction('ip', 'flannel-ipv4', o.transaction);
  const v6 = new Transaction('ip6', 'flannel-ipv6', o.transaction);
  v4.addTable({ comment: 'rules for flannel-ipv4' });
  v6.addTable({ comment: 'rules for flannel-ipv6' });
  v4.addChain({ name: 'forward', comment: 'chain to accept flannel traffic', type: 'filter', hook: 'forward', priority: 'filter' });
  v4.flushChain('forward');
  v4.addRule('forward', concat('ip saddr', network, 'accept'));
  v4.addRule('forward', concat('ip daddr', network, 'accept'));
  v4.addChain({ name: 'postrtg', comment: 'chain to manage traffic masquerading by flannel', type: 'nat', hook: 'postrouting', priority: 'srcnat' });
  v4.flushChain('postrtg');
  const masquerade = 'masquerade fully-random';
  v4.addRule('postrtg', concat('meta mark', '0x4000', 'return'));
  v4.addRule('postrtg', concat('ip', 'saddr', subnet, 'ip', 'daddr', network, 'return'));
  v4.addRule('postrtg', concat('ip', 'saddr', network, 'ip', 'daddr', subnet, 'return'));
  v4.addRule('postrtg', concat('ip', 'saddr', '!=', subnet, 'ip', 'daddr', network, 'return'));
  v4.addRule('postrtg', concat('ip', 'saddr', network, 'ip', 'daddr', '!=', '224.0.0.0/4', masquerade));
  v4.addRule('postrtg', concat('ip', 'saddr', '!=', network, 'ip', 'daddr', network, masquerade));
  const counts = (t: Transaction) => ({ chains: t.chains, rules: t.rules, sets: t.sets, elements: t.elements });
  return [
    { family: 'ip', table: 'flannel-ipv4', text: v4.text(), counts: counts(v4) },
    { family: 'ip6', table: 'flannel-ipv6', text: v6.text(), counts: counts(v6) },
  ];
}
