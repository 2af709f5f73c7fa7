/**
 * The words nft 1.0.6's scanner returns as keywords wherever they stand, which its grammar then
 * refuses where a set or map name is expected (`set th { … }`: "syntax error, unexpected th,
 * expecting string"). Measured by offering each token name of nft 1.0.6's parser as `add set ip
 * t NAME { type ipv4_addr; }` to `nft -c`: words its scanner knows only after another keyword
 * (`saddr`, `nh`, `ll`, …) are names there, and are not listed.
 */
export const NFT_KEYWORDS: ReadonlySet<string> = new Set([
  'accept', 'add', 'ah', 'all', 'arp', 'auto-merge', 'bridge', 'cgroup', 'chain', 'comment', 'comp',
  'constant', 'continue', 'counter', 'cpu', 'create', 'ct', 'day', 'dccp', 'define', 'delete', 'describe',
  'device', 'devices', 'dnat', 'drop', 'dst', 'dup', 'dynamic', 'ecn', 'element', 'elements', 'esp', 'ether',
  'exists', 'expires', 'export', 'exthdr', 'fib', 'flags', 'flow', 'flowtable', 'flush', 'frag', 'fwd',
  'gc-interval', 'get', 'goto', 'handle', 'hbh', 'hook', 'hour', 'ibriport', 'ibrname', 'icmp', 'icmpv6',
  'igmp', 'iif', 'iifgroup', 'iifname', 'iiftype', 'import', 'include', 'index', 'inet', 'insert', 'interval',
  'ip', 'ip6', 'ipsec', 'jhash', 'jump', 'limit', 'list', 'log', 'map', 'mark', 'masquerade', 'meta', 'meter',
  'mh', 'missing', 'monitor', 'netdev', 'nftrace', 'notrack', 'numgen', 'obriport', 'obrname', 'offload',
  'oif', 'oifgroup', 'oifname', 'oiftype', 'osf', 'pkttype', 'policy', 'position', 'priority', 'queue',
  'quota', 'random', 'redefine', 'redirect', 'reject', 'rename', 'replace', 'reset', 'return', 'rt', 'rt0',
  'rt2', 'rtclassid', 'rule', 'ruleset', 'sctp', 'secmark', 'set', 'size', 'skgid', 'skuid', 'snat', 'socket',
  'srh', 'symhash', 'synproxy', 'table', 'tcp', 'th', 'time', 'timeout', 'tproxy', 'type', 'typeof', 'udp',
  'udplite', 'undefine', 'update', 'vlan', 'vmap', 'xt',
]);

/**
 * The words nft 1.0.6's scanner returns as keywords after an object's type keyword
 * (`counter packets { }`: "unexpected packets"), beside NFT_KEYWORDS: refused as names of objects
 * of that type. Measured the same way, offering each word as the name of an object of the type
 * to `nft -c`.
 */
const CT_OBJECT_WORDS = [
  'avgpkt', 'bytes', 'count', 'daddr', 'direction', 'dport', 'event', 'expectation', 'expiration',
  'helper', 'helpers', 'id', 'l3proto', 'label', 'original', 'over', 'packets', 'proto-dst',
  'proto-src', 'protocol', 'reply', 'saddr', 'state', 'status', 'zone',
];
export const NFT_OBJECT_KEYWORDS: Readonly<Record<string, ReadonlySet<string>>> = {
  counter: new Set(['bytes', 'name', 'packets']),
  quota: new Set(['bytes', 'name', 'over', 'until', 'used']),
  limit: new Set(['burst', 'bytes', 'minute', 'name', 'over', 'packets', 'rate', 'second', 'week']),
  'ct helper': new Set(CT_OBJECT_WORDS),
  'ct timeout': new Set(CT_OBJECT_WORDS),
  'ct expectation': new Set(CT_OBJECT_WORDS),
  synproxy: new Set(['mss', 'name', 'sack-permitted', 'timestamp', 'wscale']),
};
