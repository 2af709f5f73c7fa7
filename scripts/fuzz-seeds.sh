#!/usr/bin/env bash
# Regenerates native/fuzz/corpus/ from real kernel traffic: in a throwaway
# network namespace, nft and iptables-nft install a small but varied NAT
# ruleset, and native/fuzz/capture.c saves every recv() buffer of its dumps
# and of the events the installation raised. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ns="nfk-fuzzseed-$$"
work=$(mktemp -d)
cleanup() { ip netns del "$ns" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
ip netns add "$ns"
gcc -O1 native/fuzz/capture.c $(pkg-config --cflags --libs libnftnl libmnl) -o "$work/capture"
mkdir -p "$work/out"

ip netns exec "$ns" "$work/capture" monitor "$work/out" 1500 > "$work/ready" &
mon=$!
while [ ! -s "$work/ready" ]; do sleep 0.05; done
ip netns exec "$ns" nft -f - <<'NFT'
table ip nfkeeper {
  set pods { type ipv4_addr; flags interval; elements = { 10.244.0.0/16, 10.96.0.0/12 } }
  map svc { type ipv4_addr . inet_service : ipv4_addr . inet_service; elements = { 10.96.0.10 . 53 : 10.244.1.5 . 53 } }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
    ip saddr @pods ip daddr != 224.0.0.0/4 counter masquerade fully-random comment "flannel"
    ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return
    meta mark & 0x4000 == 0x4000 meta mark set meta mark ^ 0x4000 masquerade
    oifname "eth0" ip saddr 192.168.0.0/16 snat to 203.0.113.1
    ip protocol tcp jump helper
  }
  chain prerouting {
    type nat hook prerouting priority dstnat;
    dnat ip addr . port to ip daddr . tcp dport map @svc
    tcp dport { 80, 443 } dnat to 10.244.1.7:8080
    udp dport 53 redirect to :5353
    ip daddr 10.96.0.1 tcp dport 443 ct state new counter dnat to 10.0.0.1
  }
  chain helper {
    tcp dport 22 accept
    ip saddr 10.0.0.0/8 tcp flags & (syn|ack) == syn log prefix "syn " drop
    meta l4proto udp numgen random mod 2 vmap { 0 : return, 1 : accept }
    add @seen { ip saddr limit rate 10/second }
    update @counted { ip saddr counter quota over 5 mbytes }
  }
  set seen { type ipv4_addr; flags dynamic; }
  set counted { type ipv4_addr; flags dynamic; counter quota over 5 mbytes; }
  set stats { type ipv4_addr; counter; elements = { 10.0.0.1 counter packets 5 bytes 100, 10.0.0.2 } }
}
table inet filter6 {
  chain input { type filter hook input priority 0; ip6 saddr fe80::/10 icmpv6 type { nd-neighbor-solicit, nd-router-advert } accept; ct state established,related accept; }
}
NFT
ip netns exec "$ns" iptables-nft -t nat -A POSTROUTING -s 10.88.0.0/16 -m comment --comment 'name: "nomad" id: "7f3c"' -j MASQUERADE
ip netns exec "$ns" iptables-nft -t nat -N CNI-7f3c
ip netns exec "$ns" iptables-nft -t nat -A CNI-7f3c -d 10.88.0.0/16 -j ACCEPT
ip netns exec "$ns" iptables-nft -t nat -A PREROUTING -p tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80
ip netns exec "$ns" nft delete rule ip nfkeeper helper handle "$(ip netns exec "$ns" nft -a list chain ip nfkeeper helper | sed -n 's/.*tcp dport 22 accept # handle //p')"
ip netns exec "$ns" nft flush chain ip nfkeeper prerouting
wait "$mon"
ip netns exec "$ns" "$work/capture" dump "$work/out"

rm -rf native/fuzz/corpus.new
mkdir -p native/fuzz/corpus.new
cp "$work"/out/* native/fuzz/corpus.new/
# Keep regression inputs (crash-*) that earlier fuzzing found.
cp native/fuzz/corpus/crash-* native/fuzz/corpus.new/ 2>/dev/null || true
rm -rf native/fuzz/corpus
mv native/fuzz/corpus.new native/fuzz/corpus
echo "fuzz seeds: $(ls native/fuzz/corpus | wc -l) files, $(du -sk native/fuzz/corpus | cut -f1) KiB in native/fuzz/corpus"
