/**
 * Sets and maps in rules through the keeper, with nft as the oracle: an nft file whose rules use
 * anonymous verdict maps, NAT maps, concatenations, numgen/jhash/symhash and th, installed by nft
 * in one namespace and by `nfkeeper apply` in another, lists and dumps (`nft --debug=netlink`)
 * alike, and `nfkeeper check` finds nft's install in sync, for the file and for nft's listing of it.
 * A foreign deletion of the vmap rule is found by `check` and repaired by `apply`.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('keyed-file');

/** kube-proxy's nftables shapes with named sets and maps (the sets branch keeps their definitions). */
const KUBE_PROXY = `table ip kube-proxy {
	set cluster-ips {
		type ipv4_addr
		elements = { 10.96.0.1, 10.96.0.10 }
	}
	set firewall-allow {
		type ipv4_addr . inet_proto . inet_service . ipv4_addr
		flags interval
		elements = { 10.96.0.1 . tcp . 443 . 10.0.0.0/8 }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.1 . tcp . 443 : goto service-a, 10.96.0.10 . udp . 53 : goto service-b }
	}
	map service-nodeports {
		type inet_proto . inet_service : verdict
		elements = { tcp . 30080 : goto service-a }
	}
	set seen {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 1m
	}
	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		fib daddr type local meta l4proto . th dport vmap @service-nodeports
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain filter-fw {
		type filter hook forward priority filter; policy accept;
		ip daddr @cluster-ips ip daddr . meta l4proto . th dport . ip saddr != @firewall-allow drop
		update @seen { ip saddr timeout 30s }
	}
	chain service-a {
		numgen random mod 2 vmap { 0 : goto endpoint-1, 1 : goto endpoint-2 }
	}
	chain service-b {
		jhash ip saddr mod 2 vmap { 0 : goto endpoint-1, 1 : goto endpoint-2 }
	}
	chain endpoint-1 {
		ip saddr 10.244.1.5 meta mark set meta mark | 0x00004000
		meta l4proto tcp dnat to 10.244.1.5:8443
	}
	chain endpoint-2 {
		meta l4proto tcp dnat to 10.244.2.5:8443
	}
}
`;

const FILE: Record<'ip' | 'inet', string> = {
  ip: `table ip lb {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . meta l4proto . th dport vmap { 10.96.0.1 . tcp . 443 : goto svc-a, 10.96.0.10 . udp . 53 : goto svc-b }
		dnat ip to ip daddr . tcp dport map { 10.0.0.1 . 80 : 10.1.0.1 . 8080, 10.0.0.2 . 80 : 10.1.0.2 . 8080 }
		dnat to numgen inc mod 10 map { 0-5 : 192.168.10.100, 6-9 : 192.168.20.200 }
	}
	chain svc-a {
		numgen random mod 2 vmap { 0 : goto ep-1, 1 : goto ep-2 }
	}
	chain svc-b {
		jhash ip saddr . udp sport mod 2 seed 0xfeed vmap { 0 : goto ep-1, 1 : goto ep-2 }
	}
	chain ep-1 {
		meta l4proto tcp dnat to 10.244.1.5:8443
	}
	chain ep-2 {
		meta mark set symhash mod 4 offset 10
		ct mark set ip saddr map { 10.0.0.1 : 0x00000001, 10.0.0.2 : 0x00000002 }
		ip saddr . iifname { 10.0.0.0/8 . "veth*", 192.168.0.1 . "eth0" } accept
		meta l4proto . th dport { tcp . 80-90, udp . 53 } counter
		th dport 53 ip saddr vmap { 10.0.0.0/8 : accept, 11.0.0.0-255.255.255.255 : drop }
	}
}
`,
  inet: `table inet lb {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . tcp dport vmap { 10.96.0.1 . 443 : goto svc-a }
		dnat ip6 to ip6 daddr . tcp dport map { fd00::1 . 80 : fd01::1 . 8080 }
		dnat ip to ip daddr map { 10.0.0.1 : 10.1.0.1 }
	}
	chain svc-a {
		jhash ip6 saddr mod 2 vmap { 0 : accept, 1 : drop }
		numgen inc mod 2 0 accept
	}
}
`,
};

function netlinkDump(ns: Netns, family: string, table: string): string {
  const out: string[] = [];
  let elements: string[] = [];
  for (const line of ns.exec('nft', ['--debug=netlink', 'list', 'table', family, table]).split('\n')) {
    if (line.startsWith('\telement ')) { elements.push(line); continue; }
    out.push(...elements.sort());
    elements = [];
    out.push(line);
  }
  return [...out, ...elements.sort()].join('\n');
}

async function sameInstall(label: string, source: string, byNft: Netns, byUs: Netns, family: string): Promise<void> {
  const apply = await cli('apply', '--config', source, '--netns', byUs.path);
  expect(apply.err, label).toBe('');
  expect(apply.code, label).toBe(0);
  expect(byUs.exec('nft', ['list', 'table', family, 'lb']), label).toBe(byNft.exec('nft', ['list', 'table', family, 'lb']));
  expect(netlinkDump(byUs, family, 'lb'), label).toBe(netlinkDump(byNft, family, 'lb'));
  const check = await cli('check', '--config', source, '--netns', byNft.path);
  expect(check.err, label).toBe('');
  expect(check.code, `${label}: ${check.out}`).toBe(0);
}

describe('sets and maps in rules, kept by nfkeeper with nft as the oracle', () => {
  for (const family of ['ip', 'inet'] as const) {
    it(`an ${family} table: nfkeeper's install is nft's, nft's is in sync (file and listing)`, async () => {
      const file = join(dir, `${family}-file.nft`);
      writeFileSync(file, FILE[family]);
      await withNetns(async (a) => {
        a.nft(FILE[family]);
        const listing = join(dir, `${family}-listing.nft`);
        writeFileSync(listing, a.exec('nft', ['list', 'table', family, 'lb']));
        await withNetns((b) => sameInstall(`${family} file`, file, a, b, family), 'keyed-b');
        await withNetns((d) => sameInstall(`${family} listing`, listing, a, d, family), 'keyed-d');
      }, 'keyed-a');
    });
  }

  it('a kube-proxy-like table with named sets and maps: nfkeeper installs what nft installs, and each is in sync', async () => {
    const file = join(dir, 'kube-proxy.nft');
    writeFileSync(file, KUBE_PROXY);
    await withNetns(async (a) => {
      a.nft(KUBE_PROXY);
      await withNetns(async (b) => {
        const apply = await cli('apply', '--config', file, '--netns', b.path);
        expect(apply.code, apply.err).toBe(0);
        expect(b.exec('nft', ['list', 'table', 'ip', 'kube-proxy'])).toBe(a.exec('nft', ['list', 'table', 'ip', 'kube-proxy']));
        expect(netlinkDump(b, 'ip', 'kube-proxy')).toBe(netlinkDump(a, 'ip', 'kube-proxy'));
        for (const ns of [a, b]) {
          const check = await cli('check', '--config', file, '--netns', ns.path);
          expect(check.code, check.out).toBe(0);
        }
      }, 'keyed-kp-b');
    }, 'keyed-kp-a');
  });

  it('a foreign deletion of a vmap rule is drift to check and is repaired by apply', async () => {
    const file = join(dir, 'repair.nft');
    writeFileSync(file, FILE.ip);
    await withNetns(async (ns) => {
      expect((await cli('apply', '--config', file, '--netns', ns.path)).code).toBe(0);
      const handle = /numgen random mod 2 vmap .* # handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'lb', 'svc-a']))?.[1];
      expect(handle).toBeDefined();
      ns.exec('nft', ['delete', 'rule', 'ip', 'lb', 'svc-a', 'handle', handle!]);
      const drift = await cli('check', '--config', file, '--netns', ns.path);
      expect(drift.code).toBe(1);
      expect(drift.out).toContain('numgen random mod 2 vmap { 0 : goto ep-1, 1 : goto ep-2 }');
      expect((await cli('apply', '--config', file, '--netns', ns.path)).code).toBe(0);
      expect((await cli('check', '--config', file, '--netns', ns.path)).code).toBe(0);
    }, 'keyed-repair');
  });
});
