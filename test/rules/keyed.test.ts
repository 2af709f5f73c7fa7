/**
 * The rule side of sets and maps against nft 1.0.6: named-set lookups, concatenated keys,
 * anonymous and named verdict maps, NAT data maps, numgen/jhash/symhash and th ports. Every rule
 * is added with the nft CLI in one namespace and compiled (against the named sets as the kernel
 * lists them) into one nfkeeper batch in another; the decoded expressions, the anonymous sets and
 * maps (flags, types, lengths, size, userdata, elements), rule keys and `nft list` lines must be
 * identical, and our rendering of the kernel's rule must compile back to the same rule.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RuleSyntaxError } from '../../src/base/errors.js';
import type { NftSet } from '../../src/index.js';
import { compileRule, compiledSetResolver, renderRule, ruleKey } from '../../src/rules/index.js';
import { CHAIN_NAME, INTERFACES, comparable, runOracle, setShape, type OracleResult } from './oracle.js';

type Fam = 'ip' | 'ip6' | 'inet';
type Chain = 'pre' | 'post' | 'fwd';
interface KeyedRule { family: Fam; chain: Chain; text: string; canonical?: string; nft?: string }

const k = (family: Fam, chain: Chain, text: string, extra: Partial<Pick<KeyedRule, 'canonical' | 'nft'>> = {}): KeyedRule =>
  ({ family, chain, text, ...extra });

/** Named sets and maps each family's table holds (kube-proxy's names among them). */
const SETUP: Record<Fam, string[]> = {
  ip: [
    'add set ip nfk s4 { type ipv4_addr; }',
    'add set ip nfk sint { type ipv4_addr; flags interval; }',
    'add set ip nfk svc { type ipv4_addr . inet_proto . inet_service; }',
    'add set ip nfk ports { type inet_service; }',
    'add set ip nfk marks { type mark; }',
    'add set ip nfk ifs { type ifname; }',
    'add set ip nfk tof { typeof ip saddr . tcp dport; }',
    'add set ip nfk cluster-ips { type ipv4_addr; comment "Active ClusterIPs"; }',
    'add map ip nfk service-ips { type ipv4_addr . inet_proto . inet_service : verdict; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"; }',
    'add map ip nfk service-nodeports { type inet_proto . inet_service : verdict; }',
    'add map ip nfk vm4 { type ipv4_addr : verdict; }',
    'add map ip nfk dm { type ipv4_addr : ipv4_addr; }',
    'add map ip nfk dmp { type ipv4_addr . inet_service : ipv4_addr . inet_service; }',
    'add map ip nfk pm { type inet_service : ipv4_addr . inet_service; }',
    'add map ip nfk ngm { typeof numgen inc mod 2 : verdict; }',
    'add set ip nfk dyn { type ipv4_addr; flags dynamic,timeout; timeout 1m; }',
    'add set ip nfk dyn2 { type ipv4_addr . inet_service; flags dynamic; }',
    'add set ip nfk dyn3 { type ipv4_addr; flags dynamic; }',
    'add set ip nfk firewall-allow { type ipv4_addr . inet_proto . inet_service . ipv4_addr; flags interval; }',
    'add set ip nfk mk { type mark . ipv4_addr; flags interval; }',
    'add set ip nfk mki { type mark; flags interval; }',
    'add map ip nfk markmap { type ipv4_addr : mark; }',
    'add map ip nfk ngi { typeof numgen inc mod 10 : ip daddr; flags interval; }',
    'add map ip nfk dynmark { type ipv4_addr : mark; flags dynamic; }',
  ],
  ip6: [
    'add set ip6 nfk s6 { type ipv6_addr; }',
    'add set ip6 nfk s6p { type ipv6_addr . inet_service; }',
    'add map ip6 nfk dm6 { type ipv6_addr : ipv6_addr; }',
    'add map ip6 nfk dm6p { type ipv6_addr . inet_service : ipv6_addr . inet_service; }',
    'add map ip6 nfk vm6 { type ipv6_addr . inet_proto . inet_service : verdict; }',
  ],
  inet: [
    'add set inet nfk s4 { type ipv4_addr; }',
    'add set inet nfk s6p { type ipv6_addr . inet_service; }',
    'add map inet nfk service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }',
    'add map inet nfk dm { type ipv4_addr : ipv4_addr; }',
    'add map inet nfk dm6p { type ipv6_addr . inet_service : ipv6_addr . inet_service; }',
    'add set inet nfk dyn6 { type ipv6_addr; flags dynamic,timeout; }',
  ],
};

export const KEYED: KeyedRule[] = [
  // named sets
  k('ip', 'pre', 'ip daddr @s4'),
  k('ip', 'pre', 'ip daddr != @s4 accept'),
  k('ip', 'post', 'ip saddr @sint counter return'),
  k('ip', 'fwd', 'tcp dport @ports accept'),
  k('ip', 'fwd', 'meta mark @marks'),
  k('ip', 'fwd', 'iifname @ifs accept'),
  k('ip', 'fwd', 'ip saddr . tcp dport @tof'),
  k('ip', 'fwd', 'ip daddr . meta l4proto . th dport @svc'),
  k('ip', 'fwd', 'ip daddr . meta l4proto . th dport != @svc drop'),
  k('ip', 'pre', 'ip daddr @cluster-ips counter'),
  // named verdict maps, kube-proxy's nftables mode
  k('ip', 'pre', 'ip daddr . meta l4proto . th dport vmap @service-ips'),
  k('ip', 'pre', 'fib daddr type local meta l4proto . th dport vmap @service-nodeports'),
  k('ip', 'fwd', 'ip daddr vmap @vm4'),
  k('ip', 'fwd', 'numgen inc mod 2 vmap @ngm'),
  // anonymous concatenations
  k('ip', 'fwd', 'ip daddr . tcp dport { 10.0.0.1 . 80, 10.0.0.2 . 443 }'),
  k('ip', 'fwd', 'ip daddr . tcp dport { 10.0.0.1 . 80, 10.0.0.1 . 80 } accept', { nft: 'ip daddr . tcp dport { 10.0.0.1 . 80 } accept' }),
  k('ip', 'fwd', 'ip daddr . tcp dport != { 10.0.0.1 . 80, 10.0.0.2 . 443 } drop'),
  k('ip', 'fwd', 'tcp dport . ip daddr { 80 . 10.0.0.1 }'),
  k('ip', 'fwd', 'ip saddr . ip daddr { 10.0.0.0/8 . 10.1.0.1, 192.168.0.0/16 . 10.2.0.0/16 }'),
  k('ip', 'fwd', 'ip saddr . tcp dport { 10.0.0.0/8 . 80-90, 192.168.1.1 . 443 }'),
  k('ip', 'fwd', 'ip saddr . iifname { 10.0.0.1 . "eth0", 10.0.0.2 . "veth*" }'),
  k('ip', 'fwd', 'ip daddr . th dport { 10.0.0.1 . 80 }'),
  k('ip', 'fwd', 'ip protocol . th dport { tcp . 80, udp . 53 }', { nft: 'ip protocol . th dport { udp . 53, tcp . 80 }' }),
  k('ip', 'fwd', 'meta l4proto . th dport { tcp . 80, udp . 53 } accept', { nft: 'meta l4proto . th dport { udp . 53, tcp . 80 } accept' }),
  k('ip', 'fwd', 'ct mark . ip saddr { 0x00000001 . 10.0.0.1 }'),
  k('ip', 'fwd', 'tcp dport 80 ip daddr . tcp sport { 10.0.0.1 . 1024 }'),
  // host-order parts of concatenated intervals, converted to network order (kube-proxy's firewall-allow)
  k('ip', 'fwd', 'ip daddr . meta l4proto . th dport . ip saddr @firewall-allow'),
  k('ip', 'fwd', 'meta mark . ip saddr @mk'),
  k('ip', 'fwd', 'meta l4proto . th dport { tcp . 80-90 }'),
  k('ip', 'fwd', 'meta mark . ip saddr { 0x00000001 . 10.0.0.0/8, 0x00000100 . 192.168.1.1 }'),
  k('ip', 'fwd', 'meta l4proto . th dport vmap { tcp . 80-90 : accept, udp . 53 : drop }'),
  k('ip', 'fwd', 'ct mark . tcp dport { 0x00000010 . 1-5 }'),
  // th
  k('ip', 'fwd', 'th dport 53 accept'),
  k('ip', 'fwd', 'th sport 1000-2000'),
  k('ip', 'fwd', 'th dport != 22'),
  k('ip', 'fwd', 'th dport { 80, 443 }'),
  k('ip', 'fwd', 'meta l4proto tcp th dport 80 accept', { canonical: 'tcp dport 80 accept' }),
  k('ip', 'fwd', 'meta l4proto { tcp, udp } th dport 53'),
  // anonymous verdict maps
  k('ip', 'fwd', 'ip daddr . meta l4proto . th dport vmap { 10.0.0.1 . tcp . 80 : goto a, 10.0.0.2 . udp . 53 : jump b }',
    { nft: 'ip daddr . meta l4proto . th dport vmap { 10.0.0.2 . udp . 53 : jump b, 10.0.0.1 . tcp . 80 : goto a }' }),
  k('ip', 'fwd', 'ip saddr vmap { 10.0.0.1 : accept, 10.0.0.2 : drop }'),
  k('ip', 'fwd', 'tcp dport vmap { 80 : accept, 443 : jump a }'),
  k('ip', 'fwd', 'tcp dport vmap { 25:accept, 28 :drop, 29: jump a }', { canonical: 'tcp dport vmap { 25 : accept, 28 : drop, 29 : jump a }' }),
  k('ip', 'fwd', 'tcp dport vmap { 80 : accept, 80 : accept }', { nft: 'tcp dport vmap { 80 : accept }' }),
  k('ip', 'fwd', 'meta mark vmap { 0x00000001 : accept, 0x00000002 : drop }'),
  k('ip', 'fwd', 'iifname vmap { "eth0" : accept, "veth*" : drop }'),
  k('ip', 'fwd', 'ip saddr vmap { 10.0.0.0/8 : accept, 11.0.0.0/8 : accept }'),
  k('ip', 'fwd', 'ip saddr vmap { 0.0.0.0/8 : accept, 11.0.0.0/8 : drop, 12.0.0.1 : continue }'),
  k('ip', 'fwd', 'ip saddr vmap { 10.0.0.0/8 : accept, 11.0.0.0-255.255.255.255 : drop }'),
  k('ip', 'fwd', 'ip daddr . tcp dport vmap { 10.0.0.1 . 80 : goto a, 10.0.0.0/8 . 443 : goto b }',
    {
      canonical: 'ip daddr . tcp dport vmap { 10.0.0.0/8 . 443 : goto b, 10.0.0.1 . 80 : goto a }',
      nft: 'ip daddr . tcp dport vmap { 10.0.0.1 . 80 : goto a, 10.0.0.0/8 . 443 : goto b }',
    }),
  k('ip', 'fwd', 'iifname . ip saddr vmap { "eth0" . 10.0.0.1 : accept, "eth1" . 10.0.0.2 : return }'),
  k('ip', 'fwd', 'tcp dport vmap { 22 : accept, 80 : accept } counter drop'),
  // generators
  k('ip', 'fwd', 'numgen random mod 2 vmap { 0 : goto a, 1 : goto b }'),
  k('ip', 'fwd', 'numgen inc mod 3 vmap { 0 : goto a, 1 : goto b, 2 : accept }'),
  k('ip', 'fwd', 'numgen random mod 4 offset 10 vmap { 10 : goto a, 11 : goto b }'),
  k('ip', 'fwd', 'jhash ip saddr mod 2 vmap { 0 : goto a, 1 : goto b }'),
  k('ip', 'fwd', 'jhash ip saddr . tcp dport mod 4 seed 0xdead vmap { 0 : goto a, 1 : goto b }'),
  k('ip', 'fwd', 'jhash ip saddr mod 4 offset 100 vmap { 100 : goto a }'),
  k('ip', 'fwd', 'symhash mod 2 vmap { 0 : goto a, 1 : goto b }'),
  k('ip', 'fwd', 'symhash mod 4 offset 2 vmap { 2 : goto a }'),
  k('ip', 'fwd', 'numgen inc mod 2 0 accept'),
  k('ip', 'fwd', 'numgen inc mod 2 == 0 accept', { canonical: 'numgen inc mod 2 0 accept' }),
  k('ip', 'fwd', 'numgen inc mod 2 != 1 accept'),
  k('ip', 'fwd', 'jhash ip saddr mod 2 1 accept'),
  k('ip', 'fwd', 'numgen inc mod 2 { 0, 1 }'),
  k('ip', 'fwd', 'numgen random mod 10 vmap { 0-4 : accept, 5-9 : drop }'),
  k('ip', 'fwd', 'jhash ip saddr mod 4 vmap { 0-1 : accept, 2 : drop, 3 : goto a }'),
  k('ip', 'fwd', 'meta mark @mki accept'),
  k('ip', 'pre', 'dnat to numgen inc mod 10 map @ngi'),
  k('ip', 'pre', 'dnat to numgen inc mod 10 map { 0-5 : 192.168.10.100, 6-9 : 192.168.20.200 }'),
  // mark set from a generator or a map
  k('ip', 'fwd', 'meta mark set jhash ip saddr mod 2 seed 0xdead'),
  k('ip', 'fwd', 'ct mark set numgen inc mod 2'),
  k('ip', 'fwd', 'ct mark set mark map { 1 : 10, 2 : 20, 3 : 30 }',
    { canonical: 'ct mark set meta mark map { 0x00000001 : 0x0000000a, 0x00000002 : 0x00000014, 0x00000003 : 0x0000001e }' }),
  k('ip', 'fwd', 'ct mark set meta mark . ip saddr map { 0x00000001 . 10.0.0.1 : 0x00000002 }'),
  k('ip', 'fwd', 'ct mark set meta mark'),
  k('ip', 'fwd', 'ct mark set symhash mod 4 offset 10 accept'),
  k('ip', 'fwd', 'meta mark set ip saddr map { 10.0.0.1 : 0x00000001, 10.0.0.2 : 0x00000002 }'),
  k('ip', 'fwd', 'meta mark set numgen random mod 4 map { 0 : 0x00000010, 1-3 : 0x00000020 }'),
  k('ip', 'fwd', 'meta mark set ip saddr . tcp dport map { 10.0.0.1 . 80 : 0x00000001 }'),
  k('ip', 'fwd', 'mark set ip saddr map @markmap', { canonical: 'meta mark set ip saddr map @markmap' }),
  // NAT data maps
  k('ip', 'pre', 'dnat to ip daddr map @dm'),
  k('ip', 'pre', 'dnat ip to ip daddr . tcp dport map @dmp'),
  k('ip', 'pre', 'dnat ip to tcp dport map @pm'),
  k('ip', 'pre', 'dnat to ip daddr map { 10.0.0.1 : 10.1.0.1, 10.0.0.2 : 10.1.0.2 }'),
  k('ip', 'pre', 'dnat to tcp dport map { 80 : 10.1.0.1, 443 : 10.1.0.2 }'),
  k('ip', 'pre', 'dnat ip to tcp dport map { 80 : 10.1.0.1 . 8080 }'),
  k('ip', 'pre', 'dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080, 10.0.0.2 . 443 : 10.1.0.2 . 8443 }'),
  k('ip', 'pre', 'dnat to numgen inc mod 2 map { 0 : 10.0.0.1, 1 : 10.0.0.2 }'),
  k('ip', 'pre', 'dnat to jhash ip saddr mod 2 map { 0 : 10.0.0.1, 1 : 10.0.0.2 }'),
  // NAT (and a store) from a map on other keys: osf name, ct zone
  k('ip', 'pre', 'dnat to osf name map { "Linux" : 1.2.3.4 }'),
  k('ip', 'pre', 'dnat to ct zone map { 1 : 1.2.3.4, 2 : 1.2.3.5 }'),
  k('ip', 'pre', 'ip daddr set osf name map { "Linux" : 1.2.3.4 }'),
  k('ip', 'pre', 'dnat to ip daddr map @dm persistent'),
  // raw payload keys: nft lists a map's one raw key in decimal, and names the bytes after the header
  // field there (`ip saddr map { 1 : … }`), which reads back as a map keyed by addresses; the text
  // keeps the raw payload, which reads back to the kernel's rule
  k('ip', 'pre', 'dnat to @ih,0,32 map { 0x1 : 10.0.0.2 }', { canonical: 'dnat to @ih,0,32 map { 1 : 10.0.0.2 }' }),
  k('ip', 'pre', 'dnat to @nh,96,32 map { 1 : 10.0.0.2 }', { nft: 'dnat to ip saddr map { 1 : 10.0.0.2 }' }),
  k('ip', 'pre', 'ip daddr set @nh,96,32 map { 0x01020304 : 10.0.0.1 }',
    { canonical: 'ip daddr set @nh,96,32 map { 16909060 : 10.0.0.1 }', nft: 'ip daddr set ip saddr map { 16909060 : 10.0.0.1 }' }),
  k('ip', 'pre', 'ip daddr set @ih,0,32 map { 1 : 10.0.0.2 }'),
  k('ip', 'pre', 'tcp dport set @ih,0,32 map { 1 : 22 }'),
  k('ip', 'fwd', 'ct mark set @nh,96,32 map { 1 : 0x00000002 }', { nft: 'ct mark set ip saddr map { 1 : 0x00000002 }' }),
  k('ip', 'fwd', 'meta mark set @ih,0,32 map { 1 : 0x00000002 }'),
  k('ip', 'fwd', 'ct zone set @nh,96,32 map { 1 : 2 }', { nft: 'ct zone set ip saddr map { 1 : 2 }' }),
  k('ip', 'fwd', 'dup to @nh,96,32 map { 1 : 1.1.1.1 }', { nft: 'dup to ip saddr map { 1 : 1.1.1.1 }' }),
  k('ip', 'fwd', '@th,64,16 vmap { 0x50 : accept }', { canonical: '@th,64,16 vmap { 80 : accept }' }),
  k('ip', 'fwd', '@nh,96,32 . tcp dport vmap { 0x1 . 22 : accept }', { nft: 'ip saddr . tcp dport vmap { 0x1 . 22 : accept }' }),
  k('ip', 'fwd', '@nh,96,32 { 0x1020304, 0x1 }', { canonical: '@nh,96,32 { 0x1, 0x1020304 }', nft: 'ip saddr { 0x1, 0x1020304 }' }),
  k('inet', 'fwd', 'meta nfproto ipv4 @nh,96,32 { 0x1, 0x2 }', { nft: 'ip saddr { 0x1, 0x2 }' }),
  k('inet', 'pre', 'meta nfproto ipv4 dnat ip to @nh,96,32 map { 1 : 10.0.0.2 }', { nft: 'dnat ip to ip saddr map { 1 : 10.0.0.2 }' }),
  // a port map's key does not give the NAT its transport protocol: the match before it stays
  k('ip', 'pre', 'meta l4proto tcp dnat to ct zone map { 1 : 10.0.0.3 } : tcp dport map { 80 : 8080 }',
    { canonical: 'meta l4proto tcp dnat to ct zone map { 1 : 10.0.0.3 }:tcp dport map { 80 : 8080 }' }),
  k('inet', 'pre', 'meta l4proto tcp dnat ip to ct zone map { 1 : 10.0.0.3 }:tcp dport map { 80 : 8080 }'),
  k('ip', 'post', 'snat to ip saddr map { 10.0.0.1 : 192.168.0.1 }'),
  k('ip', 'post', 'meta l4proto { tcp, udp } snat ip to ip saddr . th dport map { 10.141.11.4 . 20 : 192.168.2.3 . 80 }'),
  k('ip', 'pre', 'meta l4proto tcp dnat ip to ip daddr . th dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080 }',
    { canonical: 'dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080 }' }),
  k('ip', 'post', 'snat to ip saddr map { 10.0.0.0/8 : 192.168.0.1, 172.16.0.1 : 192.168.0.2 }'),
  // ranges and prefixes as NAT data (nft's interval data), and `prefix to` (NETMAP)
  k('ip', 'post', 'snat ip to ip saddr map { 10.141.11.4 : 192.168.2.2-192.168.2.4, 10.141.11.5 : 192.168.3.0/24 }'),
  k('ip', 'pre', 'dnat ip to ip saddr . tcp dport map { 192.168.1.2 . 80 : 10.141.10.0/24 . 8888-8999, 192.168.1.3 . 80 : 10.141.10.2 . 80-81 }'),
  k('ip', 'pre', 'tcp dport 80 dnat ip to ip saddr map { 10.141.11.4 : 192.168.2.2-192.168.2.4 . 80 }'),
  k('ip', 'post', 'snat ip prefix to ip saddr map { 10.141.11.0/24 : 192.168.2.0/24 }'),
  k('ip', 'pre', 'ip protocol tcp th dport 8000 dnat ip addr . port to 10.88.0.2 . 80',
    { canonical: 'ip protocol tcp tcp dport 8000 dnat ip addr . port to 10.88.0.2 . 80', nft: 'tcp dport 8000 dnat to 10.88.0.2:80' }),
  k('ip', 'pre', 'tcp dport 80 dnat ip addr . port to ip daddr map { 10.0.0.1 : 10.1.0.1 . 8080 }',
    { canonical: 'tcp dport 80 dnat ip to ip daddr map { 10.0.0.1 : 10.1.0.1 . 8080 }' }),
  // dynset
  k('ip', 'fwd', 'add @dyn3 { ip saddr }'),
  k('ip', 'fwd', 'update @dyn { ip saddr timeout 10s }'),
  k('ip', 'fwd', 'update @dyn { ip saddr timeout 1m30s } accept'),
  k('ip', 'fwd', 'update @dyn { ip saddr }'),
  k('ip', 'fwd', 'ct state new add @dyn2 { ip saddr . tcp dport }'),
  k('ip', 'fwd', 'ip saddr @dyn3 drop'),
  k('ip', 'fwd', 'add @dynmark { ip saddr : 0x1 }', { canonical: 'add @dynmark { ip saddr : 0x00000001 }' }),
  // ip6
  k('ip6', 'fwd', 'ip6 daddr @s6'),
  k('ip6', 'fwd', 'ip6 daddr . tcp dport @s6p accept'),
  k('ip6', 'fwd', 'ip6 daddr . meta l4proto . th dport vmap @vm6'),
  k('ip6', 'fwd', 'ip6 daddr . th dport { fd00::1 . 80 }'),
  k('ip6', 'fwd', 'ip6 saddr vmap { fd00::/64 : accept, fd01::1 : drop }'),
  k('ip6', 'fwd', 'jhash ip6 saddr mod 2 vmap { 0 : accept, 1 : drop }'),
  k('ip6', 'pre', 'dnat to ip6 daddr map @dm6'),
  k('ip6', 'pre', 'dnat ip6 to ip6 daddr . tcp dport map @dm6p'),
  k('ip6', 'pre', 'dnat to ip6 daddr map { fd00::1 : fd01::1 }'),
  k('ip6', 'pre', 'dnat ip6 to ip6 daddr . tcp dport map { fd00::1 . 80 : fd01::1 . 8080 }'),
  k('ip6', 'pre', 'dnat ip6 to ip6 daddr map { fd00::1 : fd01::1-fd01::9, fd00::2 : fd02::/64 }'),
  // inet
  k('inet', 'fwd', 'ip daddr @s4'),
  k('inet', 'fwd', 'ip daddr . tcp dport { 10.0.0.1 . 80, 10.0.0.2 . 443 }'),
  k('inet', 'fwd', 'tcp dport . ip daddr { 80 . 10.0.0.1 }'),
  k('inet', 'fwd', 'ip6 daddr . tcp dport @s6p'),
  k('inet', 'pre', 'ip daddr . meta l4proto . th dport vmap @service-ips'),
  k('inet', 'fwd', 'th dport 80'),
  k('inet', 'fwd', 'jhash ip6 saddr mod 2 vmap { 0 : accept, 1 : drop }'),
  k('inet', 'fwd', 'numgen inc mod 2 vmap { 0 : accept, 1 : drop }'),
  k('inet', 'pre', 'dnat ip to ip daddr map @dm'),
  k('inet', 'pre', 'meta nfproto ipv4 dnat to ip daddr map @dm', { canonical: 'dnat ip to ip daddr map @dm' }),
  k('inet', 'pre', 'dnat ip6 to ip6 daddr . tcp dport map @dm6p'),
  k('inet', 'pre', 'dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080 }'),
  k('inet', 'fwd', 'update @dyn6 { ip6 saddr timeout 1h }'),
  // Named maps behind dup and a masked mark map key, ether and fib keys in named sets' company
  k('ip', 'fwd', 'dup to ip saddr map @dm'),
  k('ip6', 'fwd', 'dup to ip6 saddr map @dm6'),
  k('ip', 'fwd', 'meta mark set ip saddr & 255.255.0.0 map @markmap'),
  k('ip', 'fwd', 'fib daddr . iif type vmap { unicast : accept, blackhole : drop }'),
  k('inet', 'fwd', 'ether saddr . ip saddr { 00:01:02:03:04:05 . 10.0.0.1 }'),
];

const results = new Map<KeyedRule, OracleResult>();

beforeAll(async () => {
  for (const family of ['ip', 'ip6', 'inet'] as Fam[]) {
    const rules = KEYED.filter((c) => c.family === family);
    const chain = (c: Chain) => (c === 'pre' ? CHAIN_NAME.pre! : c === 'post' ? CHAIN_NAME.post! : CHAIN_NAME.fwd!);
    const out = await runOracle(family, rules.map((c) => ({ text: c.text, chain: chain(c.chain) })), { setup: SETUP[family] });
    rules.forEach((c, i) => results.set(c, out[i]!));
  }
}, 180_000);

afterAll(() => results.clear());

describe('sets and maps in rules against nft 1.0.6', () => {
  it.each(KEYED.map((c) => [`${c.family} ${c.chain}: ${c.text}`, c] as const))('%s', (_name, c) => {
    const r = results.get(c)!;
    const canonical = c.canonical ?? c.text;
    const anon = compiledSetResolver(r.compiled);
    // the rule's anonymous sets, else the table's named ones
    const own = (name: string, id?: number) => anon(name, id) ?? (name.startsWith('__') ? undefined : r.nfk.sets(name));
    expect(comparable(r.nfk.rule.exprs, r.nfk.sets)).toEqual(comparable(r.nft.rule.exprs, r.nft.sets));
    expect(comparable(r.compiled.exprs, own)).toEqual(comparable(r.nfk.rule.exprs, r.nfk.sets));
    expect(r.nfk.used.map(setShape)).toEqual(r.nft.used.map(setShape));
    const anonymous = r.nft.used.filter((s) => s.set.name.startsWith('__'));
    expect(r.compiled.sets.map((s) => setShape({ set: s, elements: s.elements ?? [] }))).toEqual(anonymous.map(setShape));
    // the data side of maps too (setShape leaves it out)
    const data = (s: { set: NftSet; elements: { key?: string; keyEnd?: string; data?: string; verdict?: string; chain?: string }[] }) => ({
      dataType: s.set.dataType, dataLen: s.set.dataLen,
      els: s.elements.map((e) => [e.key, e.keyEnd, e.data, e.verdict, e.chain].join('/')).sort(),
    });
    expect(r.compiled.sets.map((s) => data({ set: s, elements: s.elements ?? [] }))).toEqual(anonymous.map(data));
    const key = ruleKey(r.compiled, own);
    expect(ruleKey(r.nft.rule, r.nft.sets)).toBe(key);
    expect(ruleKey(r.nfk.rule, r.nfk.sets)).toBe(key);
    expect(r.nfk.line).toBe(r.nft.line);
    expect(r.nft.line).toBe(c.nft ?? canonical);
    expect(r.compiled.text).toBe(canonical);
    const rendered = renderRule(r.nft.rule, c.family, r.nft.sets, { interfaces: INTERFACES });
    expect(rendered).toBe(canonical);
    // kernel rule -> render -> compile: the same rule
    const names = r.nft.rule.exprs.flatMap((e) => (e.kind === 'lookup' || e.kind === 'dynset' ? [e.set] : []));
    const sets = new Map(names.flatMap((n) => { const f = r.nft.sets(n); return f ? [[n, f.set] as const] : []; }));
    const again = compileRule(rendered, { family: c.family, table: 'nfk', chain: 'c', sets });
    const againAnon = compiledSetResolver(again);
    expect(ruleKey(again, (name, id) => againAnon(name, id) ?? (name.startsWith('__') ? undefined : r.nfk.sets(name)))).toBe(key);
  });
});

describe('refusals with positions', () => {
  const S = (name: string, keyType: number, keyLen: number, extra: Partial<NftSet> = {}): [string, NftSet] =>
    [name, { family: 'ip', table: 't', name, flags: 0, keyType, keyLen, ...extra }];
  const sets = new Map<string, NftSet>([
    S('s4', 7, 4),
    S('svc', (7 * 64 + 12) * 64 + 13, 12),
    S('vm', (7 * 64 + 12) * 64 + 13, 12, { flags: 8, dataType: 0xffffff00, dataLen: 16 }),
    S('dm', 7, 4, { flags: 8, dataType: 7, dataLen: 4 }),
    S('d46', 7, 4, { flags: 8, dataType: 8, dataLen: 16 }),
    S('dyn', 7, 4, { flags: 0x20 }),
  ]);
  const cases: [string, 'ip' | 'ip6' | 'inet', number, string, RegExp][] = [
    ['ip daddr @nope accept', 'ip', 10, '@nope', /set 'nope' does not exist/],
    ['tcp dport @s4', 'ip', 11, '@s4', /datatype mismatch: set 's4' is keyed by ipv4_addr/],
    ['ip daddr . tcp dport @svc', 'ip', 22, '@svc', /keyed by ipv4_addr \. inet_proto \. inet_service/],
    ['ip daddr vmap @dm', 'ip', 15, '@dm', /map 'dm' maps to ipv4_addr, not to verdicts/],
    ['ip daddr vmap @s4', 'ip', 15, '@s4', /'s4' is a set, not a map/],
    ['dnat to ip daddr map @s4', 'ip', 22, '@s4', /'s4' is a set, not a map/],
    ['dnat to ip daddr . meta l4proto . th dport map @vm', 'ip', 48, '@vm', /maps to verdict/],
    ['dnat to ip daddr map @d46', 'ip', 22, '@d46', /map 'd46' maps to ipv6_addr/],
    ['dnat to ip daddr map @dm', 'inet', 1, 'dnat', /ip or ip6 must be specified/],
    ['ip daddr . tcp dport { 10.0.0.1 }', 'ip', 33, '}', /the key has 2 parts/],
    ['ip daddr . tcp dport { 10.0.0.1 . 80 . 90 }', 'ip', 38, '.', /the key has 2 parts/],
    ['tcp dport vmap { 80 accept }', 'ip', 21, 'accept', /' : '/],
    ['tcp dport vmap { 80 : accept, 80 : drop }', 'ip', 31, '80', /already in this map with other data/],
    ['ip saddr vmap { 10.0.0.0/8 : accept, 10.1.0.0/16 : drop }', 'ip', 38, '10.1.0.0/16', /conflicting intervals/],
    ['ip daddr . tcp dport { 10.0.0.1 . 80-90, 10.0.0.1 . 80 }', 'ip', 42, '10.0.0.1', /overlaps/],
    ['th sport 1 th dport 2', 'ip', 12, 'th', /merges 'th sport' and 'th dport'/],
    ['numgen inc mod 2 . ip saddr { 0 . 10.0.0.1 }', 'ip', 1, 'numgen', /cannot be part of a concatenation/],
    ['dnat ip to ip daddr map { 10.0.0.1 : 10.1.0.1 . 80 }', 'ip', 25, '{', /only valid after transport protocol match/],
    ['dnat ip to ip daddr map { 10.0.0.1 : fd00::1 }', 'ip', 38, 'fd00::1', /address family mismatch/],
    ['dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080, 10.0.0.2 . 80 : 10.1.0.2 }', 'ip', 88, '10.1.0.2', /same kind of target/],
    ['socket mark . ip saddr { 1 . 10.0.0.1 }', 'ip', 1, 'socket', /socket mark cannot be a set or map key/],
    ['numgen inc mod 0 vmap { 0 : accept }', 'ip', 16, '0', /a modulus/],
    ['ip daddr vmap { 10.0.0.1 : jump }', 'ip', 33, '}', /a chain name/],
    ['tcp dport vmap @', 'ip', 16, '@', /a set name/],
    ['update @dyn { ip saddr timeout 10s }', 'ip', 32, '10s', /set 'dyn' has no timeout flag/],
    ['add @dm { ip saddr }', 'ip', 5, '@dm', /'dm' is a map: give the data/],
    ['add @dyn { tcp dport }', 'ip', 5, '@dyn', /datatype mismatch/],
    ['add @dyn { ip saddr : 1 }', 'ip', 23, '1', /'dyn' is a set, not a map/],
    ['add @dm { ip saddr : tcp dport }', 'ip', 22, 'tcp', /datatype mismatch: map 'dm' maps to ipv4_addr/],
    ['snat ip to ip saddr map { 10.0.0.1 : 192.168.2.2-192.168.2.4, 10.0.0.2 : 192.168.3.1 }', 'ip', 74, '192.168.3.1', /ranges in all or in none/],
    ['tcp dport 80 dnat ip6 to ip6 saddr map { ::1 : ::2-::5 . 80-90 }', 'ip6', 48, '::2-::5', /ENODATA/],
    ['tcp dport 80 dnat ip6 addr . port to fd00::2 . 53', 'ip6', 23, 'addr', /nft 1.0.6 cannot encode/],
    ['tcp dport 80 dnat ip addr . port to ip saddr map { 10.0.0.1 : 10.0.0.2 }', 'ip', 50, '{', /expected concatenation/],
    ['tcp dport 80 dnat ip prefix to 10.0.0.0/8', 'ip', 32, '10.0.0.0/8', /'prefix to' only with a map/],
    ['meta mark set ip saddr map @dm', 'ip', 28, '@dm', /map 'dm' maps to ipv4_addr, not to marks/],
    ['meta mark set ip saddr counter', 'ip', 24, 'counter', /'map'/],
    ['update @dyn { ip saddr timeout soon }', 'ip', 32, 'soon', /a time such as 10s/],
    ['dnat to ct zone map { 1 : 10.0.0.3 } : tcp dport map { 80 : 8080 }', 'ip', 40, 'tcp', /only valid after transport protocol match/],
    ['dnat to ip saddr map { 1.1.1.1 : 2.2.2.2 }:tcp dport map { 80 : 8080 }', 'ip', 44, 'tcp', /only valid after transport protocol match/],
  ];
  it.each(cases)('%s (%s)', (text, family, col, token, why) => {
    let err: unknown;
    try {
      compileRule(text, { family, table: 't', chain: 'c', sets });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RuleSyntaxError);
    const e = err as RuleSyntaxError;
    expect(e.message).toMatch(why);
    expect([e.column, e.token]).toEqual([col, token]);
  });

  it('looks named sets up only in the table it is given', () => {
    expect(() => compileRule('ip daddr @s4', { family: 'ip', table: 't', chain: 'c' })).toThrow(/set 's4' does not exist/);
  });
});
