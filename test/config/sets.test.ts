/**
 * Named sets and maps as objects of an owned table, with nft 1.0.6 as the
 * oracle: nft's install of a file and nfkeeper's apply of the same file list
 * alike and dump alike (set definitions with their userdata, elements with
 * theirs); `check` is in sync with nft's install; foreign element changes are
 * repaired with element operations only; bad declarations are refused with
 * file:line:column and change nothing.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig, type Config } from '../../src/config/config.js';
import { interfaceTable } from '../../src/rules/index.js';
import { ConfigError } from '../../src/base/errors.js';
import { NFT_KEYWORDS } from '../../src/rules/keywords.js';
import { Batch } from '../../src/netlink/batch.js';
import type { Family } from '../../src/netlink/expr.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { diffTable } from '../../src/keeper/table.js';
import { observeTable } from '../../src/keeper/observe.js';
import { planTable } from '../../src/keeper/plan.js';
import { renderDrift } from '../../src/keeper/render-drift.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { withKeeper } from '../helpers/keeper.js';
import { nextRepair } from '../keeper/helpers.js';
import { rng } from '../keeper/plan-fixtures.js';

const dir = tempDir('sets');

/** Sets and maps of every kind the config takes, as nft's block form. */
const FILE = `table inet keep {
	set s4 {
		type ipv4_addr
		elements = { 10.0.0.1, 10.0.0.2 }
	}
	set cidrs {
		type ipv4_addr
		flags interval
		auto-merge
		comment "cidrs"
		elements = { 10.0.0.0/8, 11.0.0.0/8, 192.168.1.1-192.168.1.9 comment "r", 255.0.0.0/8 }
	}
	set adj {
		type ipv4_addr
		flags interval
		elements = { 10.0.0.0/8, 11.0.0.0/8 }
	}
	set v6 { type ipv6_addr; flags interval; elements = { ::1, 2001:db8::/32 } }
	set svc {
		type ipv4_addr . inet_proto . inet_service
		elements = { 10.0.0.1 . tcp . 80, 10.0.0.2 . udp . 53 }
	}
	map vm {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.0.0.1 . tcp . 80 : goto svc1, 10.0.0.2 . udp . 53 : drop, 10.0.0.3 . tcp . 443 comment "x" : jump svc1 }
	}
	map natm {
		type ipv4_addr : ipv4_addr . inet_service
		elements = { 1.1.1.1 : 2.2.2.2 . 80 }
	}
	map im { type ipv4_addr : ipv4_addr; flags interval; elements = { 10.0.0.0/8 : 1.2.3.4 } }
	set st {
		type ipv4_addr
		flags timeout
		timeout 1h
		size 65535
		policy memory
	}
	set gc { type ipv4_addr; flags timeout; gc-interval 10s; }
	set dyn { type ipv4_addr; flags dynamic,timeout; timeout 30s; }
	set tmo { type ipv4_addr; flags timeout; elements = { 1.1.1.1 timeout 1h, 2.2.2.2 timeout 10m expires 5m } }
	set tf {
		typeof ip daddr . tcp dport
		elements = { 1.2.3.4 . 22 }
	}
	set tm { typeof meta mark; }
	map tmap { typeof ip saddr : meta mark; elements = { 1.1.1.1 : 0x10 } }
	map tvm { typeof ip daddr . tcp dport : verdict; }
	set ci { type ipv4_addr . inet_service; flags interval; elements = { 10.0.0.0/8 . 80-90, 1.1.1.1 . 53 } }
	set cn { type ipv4_addr; flags constant; elements = { 1.1.1.1 } }
	set cni { type ipv4_addr; flags constant,interval; elements = { 1.1.1.0/24, 2.2.2.2 } }
	set ifs { type ifname; elements = { "eth0", "lo" } }
	set ifw { type ifname; flags interval; elements = { "veth*", "lo" } }
	set marks { type mark; elements = { 0x1, 0x4000 } }
	set mr { type mark; flags interval; elements = { 0x10-0x20 } }
	set eth { type ether_addr; elements = { 00:11:22:33:44:55, 0:1:2:3:4:5 } }
	set protos { type inet_proto; elements = { tcp, udp } }
	set ports { type inet_service; flags interval; elements = { 80, 8000-8080 } }
	set pp { type inet_proto . inet_service; }
	chain svc1 {
	}
}
`;

/** The same declarations in the command form, as knftables and kube-proxy write them. */
const COMMANDS = `add table inet keep
add chain inet keep svc1
flush chain inet keep svc1
add set inet keep s4 { type ipv4_addr ; }
add element inet keep s4 { 9.9.9.9 }
flush set inet keep s4
add element inet keep s4 { 10.0.0.1 }
add element inet keep s4 { 10.0.0.2 }
add map inet keep vm { type ipv4_addr . inet_proto . inet_service : verdict ; }
flush map inet keep vm
add element inet keep vm { 10.0.0.1 . tcp . 80 : goto svc1 }
add element inet keep vm { 10.0.0.2 . udp . 53 : drop, 10.0.0.3 . tcp . 443 comment "x" : jump svc1 }
`;

/**
 * `nft list table` with each set's elements in one sorted list: a hashed
 * set lists in the kernel's hash order, which a per-set random seed decides,
 * and the expiry of an element with a timeout counts down.
 */
function listing(ns: Netns, family: string, table: string): string {
  return ns.exec('nft', ['list', 'table', family, table])
    .replace(/,\n\t+ +/g, ', ')
    .replace(/ expires [0-9dhms]+/g, '')
    .replace(/elements = \{ (.*) \}/g, (_m, list: string) => `elements = { ${list.split(', ').sort().join(', ')} }`);
}

/** `nft --debug=netlink list table`, each set's element lines sorted (hash order), expiries left out. */
function netlinkDump(ns: Netns, family: string, table: string): string {
  const out: string[] = [];
  let elements: string[] = [];
  for (const raw of ns.exec('nft', ['--debug=netlink', 'list', 'table', family, table]).split('\n')) {
    const line = raw.replace(/ expires [0-9dhms]+/g, '');
    if (line.startsWith('\telement ')) { elements.push(line); continue; }
    out.push(...elements.sort());
    elements = [];
    out.push(line);
  }
  return [...out, ...elements.sort()].join('\n');
}

/** Set definitions and elements as the kernel dumps them, handles and expiries left out. */
async function setDump(ns: Netns, family: Family, table: string): Promise<unknown[]> {
  const sock = open({ netns: ns.path });
  try {
    const sets = await sock.listSets({ family, table });
    const out: unknown[] = [];
    for (const s of sets) {
      const { handle: _h, ...def } = s;
      const elements = (await sock.listElements({ family, table, set: s.name }))
        .map(({ expiration: _e, ...e }) => JSON.stringify(e)).sort();
      out.push({ def, elements });
    }
    return out.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
  } finally {
    sock.close();
  }
}

function save(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

function refusal(text: string, file = 'f.nft'): ConfigError {
  try {
    if (file.endsWith('.nft')) parseNftConfig(text, file);
    else parseConfig(text, file);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error(`accepted: ${text}`);
}

const shape = (c: Config) => c.tables.map((t) => (t.sets ?? []).map((s) => ({ set: s.set, elements: s.elements })));

describe('named sets and maps in the config', () => {
  it('iface_index elements by name take the index of the interface in the target namespace; an unknown name is an error at its position', () => {
    const interfaces = interfaceTable({ lo: 1, eth0: 7 });
    const text = 'table ip t {\n\tset s { type iface_index; elements = { lo, "eth0", 3 } }\n\tmap m { type iface_index : verdict; elements = { eth0 : drop } }\n}\n';
    const [s, m] = parseNftConfig(text, 'i.nft', { interfaces }).tables[0]!.sets!;
    const indexes = (set: typeof s) => set!.elements.map((e) => e.key!.match(/../g)!.reverse().join('')).map((h) => parseInt(h, 16));
    expect(indexes(s)).toEqual([1, 7, 3]);
    expect(indexes(m)).toEqual([7]);
    expect(() => parseNftConfig(text.replace('"eth0"', 'eth9'), 'i.nft', { interfaces })).toThrow(/^i\.nft:2:45: .*interface 'eth9' does not exist/);
  });

  it('YAML sets:/maps:, the block form and the command form give the same kernel objects', () => {
    const yaml = `tables:
  - family: inet
    name: keep
    sets:
      - name: s4
        type: ipv4_addr
        elements: [10.0.0.1, 10.0.0.2]
    maps:
      - name: vm
        type: "ipv4_addr . inet_proto . inet_service : verdict"
        elements:
          - "10.0.0.1 . tcp . 80 : goto svc1"
          - "10.0.0.2 . udp . 53 : drop"
          - '10.0.0.3 . tcp . 443 comment "x" : jump svc1'
    chains:
      - name: svc1
`;
    const block = `table inet keep {
\tset s4 { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.2 }; }
\tmap vm { type ipv4_addr . inet_proto . inet_service : verdict; elements = { 10.0.0.1 . tcp . 80 : goto svc1,
\t\t10.0.0.2 . udp . 53 : drop, 10.0.0.3 . tcp . 443 comment "x" : jump svc1 } }
\tchain svc1 { }
}
`;
    const want = shape(parseConfig(yaml, 'c.yaml'));
    expect(want[0]!.length).toBe(2);
    expect(shape(parseNftConfig(block, 'b.nft'))).toEqual(want);
    expect(shape(parseNftConfig(COMMANDS, 'c.nft'))).toEqual(want);
  });

  it('refuses bad declarations at file:line:column, in both syntaxes', () => {
    const cases: [string, number, number, RegExp][] = [
      ['table ip t {\n  set s { type ipv4_adr; }\n}\n', 2, 16, /unknown datatype ipv4_adr/],
      ['table ip t {\n  set s { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.300 } }\n}\n', 2, 50, /'10\.0\.0\.300' is not an IPv4 address/],
      ['table ip t {\n  set s { type ipv4_addr; elements = { 10.0.0.0/8 } }\n}\n', 2, 40, /flags interval/],
      ['table ip t {\n  set s { type ipv4_addr; flags interval; elements = { 10.0.0.0/8,\n    10.1.0.0/16 } }\n}\n', 3, 5, /conflicting intervals/],
      ['table ip t {\n  map m { type ipv4_addr : verdict; elements = { 10.0.0.1 } }\n}\n', 2, 58, /needs ': verdict'/],
      ['table ip t {\n  set s { type ipv4_addr; elements = { 10.0.0.1 : accept } }\n}\n', 2, 49, /set is not a map/],
      ['table ip t {\n  set s { type ipv4_addr; flags interval, bogus; }\n}\n', 2, 43, /'bogus' is not a set flag/],
      ['table ip t {\n  set s { typeof ip dadr; }\n}\n', 2, 18, /typeof ip dadr/],
      ['table ip t {\n  set s { type ipv4_addr; last; }\n}\n', 2, 27, /'last' statement on a set is not supported/],
      ['add table ip t\nadd element ip t s { 1.1.1.1 }\n', 2, 18, /set s is not declared/],
      ['table ip t {\n  set s { type ipv4_addr . inet_service; elements = { 1.1.1.1 . 80 . 3 } }\n}\n', 2, 68, /too many parts/],
      ['table ip t {\n  map m { type ipv4_addr : verdict; elements = { 1.1.1.1 : goto nowhere } }\n}\n', 2, 50, /chain nowhere/],
      ['table ip t {\n  map m { type ipv4_addr : ipv4_addr; auto-merge; flags interval; }\n}\n', 2, 39, /auto-merge is for sets/],
    ];
    for (const [text, line, col, why] of cases) {
      const e = refusal(text);
      expect([e.line, e.column, e.reason], text).toEqual([line, col, expect.stringMatching(why)]);
    }
    const yaml = 'tables:\n  - family: ip\n    name: t\n    sets:\n      - name: s\n        type: ipv4_addr\n        elements:\n          - 10.0.0.1\n          - "10.0.0.2 . 80"\n';
    const e = refusal(yaml, 'c.yaml');
    expect([e.line, e.column]).toEqual([9, 23]);
    expect(e.reason).toMatch(/set s, element 2/);
  });
});

describe('set and map names nft takes as keywords', () => {
  it("every word of nft 1.0.6's grammar is refused as a set or map name, at its position, exactly where nft -c refuses it", async () => {
    // the token names of nft's parser ("\"th\"" in bison's table), read from the library nft runs
    const lib = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).match(/libnftables\.so\.1 \(.*?\) => (\S+)/)![1]!;
    const words = [...new Set([...readFileSync(lib).toString('latin1').matchAll(/"([a-z][a-z0-9_-]*)"\0/g)].map((m) => m[1]!))];
    expect(words.length).toBeGreaterThan(300);
    await withNetns(async (ns) => {
      const all = [...words, 'u', 'foo'];
      // one shell in the namespace runs nft -c on each word's table (nft stops reading a file after a few errors)
      const nftRefuses = ns.exec('sh', ['-c', 'while read w; do printf "table ip t {\\n set %s { type ipv4_addr; }\\n}\\n" "$w" | nft -c -f - 2>/dev/null || echo "$w"; done'],
        all.join('\n') + '\n').split('\n').filter(Boolean);
      const ours: string[] = [];
      for (const w of all) {
        for (const [text, line, col] of [[`table ip t {\n  set ${w} { type ipv4_addr; }\n}\n`, 2, 7],
          [`add table ip t\nadd map ip t ${w} { type ipv4_addr : ipv4_addr; }\n`, 2, 14]] as const) {
          try {
            parseNftConfig(text, 'k.nft');
            if (text.startsWith('table')) expect(NFT_KEYWORDS.has(w)).toBe(false);
          } catch (e) {
            const err = e as ConfigError;
            expect([err.line, err.column, err.reason], text).toEqual([line, col, expect.stringMatching(/keyword of nft's language/)]);
            if (text.startsWith('table')) ours.push(w);
          }
        }
      }
      expect(ours).toEqual(nftRefuses);
      expect(nftRefuses).toContain('th');
      expect(nftRefuses).not.toContain('u');
    });
    const e = refusal('tables:\n  - family: ip\n    name: t\n    sets:\n      - name: th\n        type: ipv4_addr\n', 'c.yaml');
    expect([e.line, e.column, e.reason]).toEqual([5, 15, expect.stringMatching(/'th' is a keyword/)]);
  });
});

describe('named sets and maps: nft is the oracle', () => {
  it("nfkeeper's apply of a file lists and dumps as nft's install of it (definitions, userdata, elements); check is in sync", async () => {
    const file = save('all.nft', FILE);
    await withNetns(async (a) => {
      a.nft(FILE);
      await withNetns(async (b) => {
        const apply = await cli('apply', '--config', file, '--netns', b.path);
        expect(apply.err).toBe('');
        expect(apply.code).toBe(0);
        expect(listing(b, 'inet', 'keep')).toBe(listing(a, 'inet', 'keep'));
        expect(netlinkDump(b, 'inet', 'keep')).toBe(netlinkDump(a, 'inet', 'keep'));
        expect(await setDump(b, 'inet', 'keep')).toEqual(await setDump(a, 'inet', 'keep'));
        expect(await setDump(a, 'inet', 'keep')).toHaveLength(27);
        // Elements decoded through JSON (the dump's fast path) are the objects DecodeSetElems builds.
        const sock = open({ netns: b.path });
        try {
          const native = (sock as unknown as { native: import('../../src/netlink/addon.js').NativeSocket }).native;
          let n = 0;
          for (const set of await sock.listSets({ family: 'inet', table: 'keep' })) {
            const viaJson = await native.dump('element', 'inet', 'keep', set.name, false);
            const viaObjects = await native.dump('element', 'inet', 'keep', set.name, false, true);
            expect(JSON.stringify(viaJson.map((e) => ({ ...(e as object), expiration: 0 }))))
              .toBe(JSON.stringify(viaObjects.map((e) => ({ ...(e as object), expiration: 0 }))));
            n += viaJson.length;
          }
          expect(n).toBeGreaterThan(50);
        } finally {
          sock.close();
        }
      }, 'sets-b');
      const check = await cli('check', '--config', file, '--netns', a.path);
      expect(check.code, check.out).toBe(0);
      // nft's listing of its install, given back, is in sync too; so is the command form.
      const listed = save('listed.nft', a.exec('nft', ['list', 'table', 'inet', 'keep']));
      expect((await cli('check', '--config', listed, '--netns', a.path)).code).toBe(0);
      // export, in both forms, reads back in sync.
      for (const format of ['nft', 'yaml'] as const) {
        const out = await cli('export', '--table', 'inet', 'keep', '--netns', a.path, '--format', format);
        expect(out.err).toBe('');
        expect(out.code).toBe(0);
        const exported = save(`export.${format}`, out.out);
        const check2 = await cli('check', '--config', exported, '--netns', a.path);
        expect(check2.code, `${format}: ${check2.out}`).toBe(0);
      }
    }, 'sets-a');
    await withNetns(async (a) => {
      a.nft(COMMANDS);
      await withNetns(async (b) => {
        expect((await cli('apply', '--config', save('commands.nft', COMMANDS), '--netns', b.path)).code).toBe(0);
        expect(netlinkDump(b, 'inet', 'keep')).toBe(netlinkDump(a, 'inet', 'keep'));
        expect(await setDump(b, 'inet', 'keep')).toEqual(await setDump(a, 'inet', 'keep'));
      }, 'sets-d');
    }, 'sets-c');
  });
});

/** Sets keyed by typeof on the other keys nft 1.0.6 takes: host-order integers, a string, raw payloads, generators. */
const TYPEOF_FILE = `table ip t {
	set s { typeof symhash mod 2 offset 5; }
	set n { typeof numgen inc mod 2 offset 7; elements = { 1 }; }
	set z { typeof ct zone; elements = { 10, 300 }; }
	set zo { typeof ct original zone; flags interval; elements = { 10-20, 300 }; }
	set r { typeof @nh,8,8 . @ih,0,16; elements = { 3 . 4 }; }
	set o { typeof osf name; elements = { "Linux" }; }
	set zc { typeof ct zone . ip saddr; elements = { 10 . 1.2.3.4 }; }
	map m { typeof ct zone : ip saddr; elements = { 1 : 1.2.3.4 }; }
	map m2 { typeof ip saddr : ct zone; elements = { 1.2.3.4 : 2 }; }
	set thp { typeof @th,16,16; elements = { 22 }; }
	set ulen { typeof udp length; elements = { 8 }; }
	chain c {
		ct zone @z accept
		osf name @o
		ct zone . ip saddr @zc
	}
}
`;

describe('typeof on every key nft takes: nft is the oracle', () => {
  it('ct zone (with a direction, in a concatenation, as map data), osf name, raw payloads, numgen, symhash: the same sets, userdata and elements as nft\'s; check, export and its check in sync', async () => {
    const file = save('typeof.nft', TYPEOF_FILE);
    await withNetns(async (a) => {
      a.nft(TYPEOF_FILE);
      await withNetns(async (b) => {
        const apply = await cli('apply', '--config', file, '--netns', b.path);
        expect([apply.code, apply.err]).toEqual([0, '']);
        expect(listing(b, 'ip', 't')).toBe(listing(a, 'ip', 't'));
        expect(netlinkDump(b, 'ip', 't')).toBe(netlinkDump(a, 'ip', 't'));
        expect(await setDump(b, 'ip', 't')).toEqual(await setDump(a, 'ip', 't'));
      }, 'typeof-b');
      expect((await cli('check', '--config', file, '--netns', a.path)).out).toBe('in sync');
      for (const format of ['nft', 'yaml'] as const) {
        const out = await cli('export', '--table', 'ip', 't', '--netns', a.path, '--format', format);
        expect([out.code, out.err]).toEqual([0, '']);
        const check = await cli('check', '--config', save(`typeof-export.${format}`, out.out), '--netns', a.path);
        expect(check.out, out.out).toBe('in sync');
      }
    }, 'typeof-a');
  });
});

/** A random set declaration of nft's words: types, intervals (overlapping under auto-merge), maps. */
function randomSet(rand: () => number, name: string): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const n = Math.floor(rand() * 12);
  const v4 = () => `${pick([0, 10, 10, 192, 255])}.${Math.floor(rand() * 4)}.${Math.floor(rand() * 256)}.${Math.floor(rand() * 256)}`;
  const kinds = ['v4', 'v4i', 'v4im', 'port', 'porti', 'mark', 'marki', 'proto', 'ifname', 'ifnamei', 'concat', 'concati', 'vmap', 'natmap', 'v6i'] as const;
  const kind = pick(kinds);
  const uniq = (xs: string[]) => [...new Set(xs)];
  let decl: string;
  let els: string[];
  switch (kind) {
    case 'v4': decl = 'set %s { type ipv4_addr; '; els = uniq(Array.from({ length: n }, v4)); break;
    case 'v4i': {
      // Without auto-merge nft refuses overlaps: disjoint /24s of different third octets.
      const thirds = uniq(Array.from({ length: n }, () => String(Math.floor(rand() * 200))));
      decl = 'set %s { type ipv4_addr; flags interval; ';
      els = thirds.map((t) => pick([`10.1.${t}.0/24`, `10.1.${t}.5-10.1.${t}.9`, `10.1.${t}.7`]));
      if (rand() < 0.3) els.push('255.255.255.0/24');
      break;
    }
    case 'v4im': decl = 'set %s { type ipv4_addr; flags interval; auto-merge; '; els = Array.from({ length: n }, () => `${v4()}/${pick([8, 16, 24, 30, 32])}`); break;
    case 'port': decl = 'set %s { type inet_service; '; els = uniq(Array.from({ length: n }, () => String(Math.floor(rand() * 65536)))); break;
    case 'porti': {
      const starts = uniq(Array.from({ length: n }, () => String(Math.floor(rand() * 600) * 100)));
      decl = 'set %s { type inet_service; flags interval; ';
      els = starts.map((p) => (rand() < 0.5 ? p : `${p}-${Number(p) + Math.floor(rand() * 99)}`));
      if (rand() < 0.3) els.push('65500-65535');
      break;
    }
    case 'mark': decl = 'set %s { type mark; '; els = uniq(Array.from({ length: n }, () => `0x${Math.floor(rand() * 2 ** 32).toString(16)}`)); break;
    case 'marki': {
      const starts = uniq(Array.from({ length: n }, () => String(Math.floor(rand() * 1000) * 1000)));
      decl = 'set %s { type mark; flags interval; ';
      els = starts.map((p) => `${p}-${Number(p) + Math.floor(rand() * 999)}`);
      break;
    }
    case 'proto': decl = 'set %s { type inet_proto; '; els = uniq(Array.from({ length: n }, () => pick(['tcp', 'udp', 'icmp', '47', 'sctp']))); break;
    case 'ifname': decl = 'set %s { type ifname; '; els = uniq(Array.from({ length: n }, () => `"${pick(['eth', 'veth', 'lo', 'cni'])}${Math.floor(rand() * 20)}"`)); break;
    case 'ifnamei': decl = 'set %s { type ifname; flags interval; '; els = uniq(Array.from({ length: n }, () => `"${pick(['eth', 'veth', 'cni', 'wg', 'br-'])}*"`)); break;
    case 'concat': decl = 'set %s { type ipv4_addr . inet_proto . inet_service; '; els = uniq(Array.from({ length: n }, () => `${v4()} . ${pick(['tcp', 'udp'])} . ${Math.floor(rand() * 65536)}`)); break;
    case 'concati': {
      const thirds = uniq(Array.from({ length: n }, () => String(Math.floor(rand() * 200))));
      decl = 'set %s { type ipv4_addr . inet_service; flags interval; ';
      els = thirds.map((t) => `10.2.${t}.0/24 . ${pick(['80', '1000-2000', '53'])}`);
      break;
    }
    case 'vmap': decl = 'map %s { type ipv4_addr . inet_proto . inet_service : verdict; '; els = uniq(Array.from({ length: n }, () => `${v4()} . tcp . ${Math.floor(rand() * 65536)}`)).map((k) => `${k} : ${pick(['accept', 'drop', 'goto c', 'jump c', 'return'])}`); break;
    case 'natmap': decl = 'map %s { type ipv4_addr : ipv4_addr . inet_service; '; els = uniq(Array.from({ length: n }, v4)).map((k) => `${k} : ${v4()} . ${Math.floor(rand() * 65536)}`); break;
    case 'v6i': {
      const groups = uniq(Array.from({ length: n }, () => Math.floor(rand() * 65536).toString(16)));
      decl = 'set %s { type ipv6_addr; flags interval; ';
      els = groups.map((g) => pick([`2001:db8:${g}::/48`, `2001:db8:${g}::1`, `fd00:${g}::/32`.replace(/fd00:([0-9a-f]+)::\/32/, 'fd00:$1::/32')]));
      els = uniq(els).filter((e, i, all) => !e.startsWith('fd00') || all.findIndex((x) => x.startsWith('fd00')) === i);
      break;
    }
  }
  if (rand() < 0.2) decl += 'comment "r"; ';
  const elements = els.map((e) => (rand() < 0.1 && !kind.endsWith('map') ? `${e} comment "e"` : e));
  return decl.replace('%s', name) + (elements.length ? `elements = { ${elements.join(', ')} }; ` : '') + '}';
}

/** One guarded observation and plan, as the keeper makes it: the batch it would commit. */
async function plan(sock: NftSocket, config: Config): Promise<{ batch: Batch; check: string[] }> {
  const t = config.tables[0]!;
  const have = await observeTable(sock, t.family, t.name, t.chains.map((c) => c.name));
  const diff = diffTable(t, have);
  const batch = new Batch();
  planTable(batch, t, have, diff);
  return { batch, check: renderDrift(t, diff) };
}

describe('named sets and maps: random declarations', () => {
  it("nfkeeper's install of random sets dumps as nft's, and a random foreign element change is repaired with element ops", async () => {
    const rand = rng(Number(process.env.NFK_SETS_SEED ?? 1313));
    await withNetns(async (a) => {
      await withNetns(async (b) => {
        let compared = 0;
        for (let trial = 0; trial < 12; trial++) {
          const decls = Array.from({ length: 6 }, (_, i) => randomSet(rand, `s${i}`));
          const text = `table ip r {\n\tchain c { }\n${decls.map((d) => `\t${d}`).join('\n')}\n}\n`;
          a.nft(`flush ruleset\n${text}`);
          b.nft('flush ruleset');
          const path = save(`random-${trial}.nft`, text);
          const apply = await cli('apply', '--config', path, '--netns', b.path);
          expect(apply.err, text).toBe('');
          expect(await setDump(b, 'ip', 'r'), text).toEqual(await setDump(a, 'ip', 'r'));
          expect(netlinkDump(b, 'ip', 'r'), text).toBe(netlinkDump(a, 'ip', 'r'));
          expect((await cli('check', '--config', path, '--netns', a.path)).code, text).toBe(0);
          // A foreign element deletion (any kernel element, an interval's end alone too) is repaired by element ops.
          const sock = open({ netns: b.path });
          try {
            const sets = (await sock.listSets({ family: 'ip', table: 'r' })).filter((x) => x.name.startsWith('s'));
            const withElements: { name: string; els: import('../../src/netlink/objects.js').SetElement[] }[] = [];
            for (const x of sets) {
              const els = await sock.listElements({ family: 'ip', table: 'r', set: x.name });
              if (els.length > 0) withElements.push({ name: x.name, els });
            }
            if (withElements.length > 0) {
              const victim = withElements[Math.floor(rand() * withElements.length)]!;
              const e = victim.els[Math.floor(rand() * victim.els.length)]!;
              await sock.commit([{ verb: 'delete', object: 'element', family: 'ip', table: 'r', set: victim.name,
                elements: [{ key: e.key, ...(e.keyEnd ? { keyEnd: e.keyEnd } : {}), flags: e.flags ?? 0 }] }]);
              const { batch } = await plan(sock, parseNftConfig(text, path));
              expect(batch.ops.map((o) => `${o.verb} ${o.object}`), text).toEqual(['add element']);
              await sock.commit(batch, { expectGeneration: sock.generation() });
              expect(await setDump(b, 'ip', 'r'), text).toEqual(await setDump(a, 'ip', 'r'));
            }
          } finally {
            sock.close();
          }
          compared++;
        }
        expect(compared).toBe(12);
      }, 'sets-rand-b');
    }, 'sets-rand-a');
  });
});

describe('named sets and maps: repairs', () => {
  it('a foreign element deletion and addition are repaired with element ops only; the set keeps its handle', async () => {
    await withNetns(async (ns) => {
      const config = parseNftConfig(FILE, 'all.nft');
      const file = save('repair.nft', FILE);
      expect((await cli('apply', '--config', file, '--netns', ns.path)).code).toBe(0);
      const handle = () => ns.exec('nft', ['-a', 'list', 'map', 'inet', 'keep', 'vm']).match(/# handle (\d+)/)![1];
      const before = { vmap: handle(), listing: listing(ns, 'inet', 'keep') };
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 'vm', '{ 10.0.0.1 . tcp . 80 }']);
      ns.exec('nft', ['add', 'element', 'inet', 'keep', 'vm', '{ 9.9.9.9 . udp . 1 : accept }']);
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 'cidrs', '{ 192.168.1.1-192.168.1.9 }']);
      ns.exec('nft', ['add', 'element', 'inet', 'keep', 's4', '{ 7.7.7.7 }']);
      // A changed element's data: delete + add of that element.
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 'natm', '{ 1.1.1.1 }']);
      ns.exec('nft', ['add', 'element', 'inet', 'keep', 'natm', '{ 1.1.1.1 : 3.3.3.3 . 80 }']);
      const sock = open({ netns: ns.path });
      try {
        const { batch, check } = await plan(sock, config);
        expect(batch.ops.map((o) => `${o.verb} ${o.object} ${'set' in o ? o.set : ''} ${'elements' in o ? o.elements?.length : ''}`).sort()).toEqual([
          'add element cidrs 2', 'add element natm 1', 'add element vm 1',
          'delete element natm 1', 'delete element s4 1', 'delete element vm 1',
        ]);
        expect(check).toContain('- delete element inet keep vm { 9.9.9.9 . udp . 1 : accept }');
        expect(check).toContain('+ add element inet keep vm { 10.0.0.1 . tcp . 80 : goto svc1 }');
        expect(check).toContain('+ add element inet keep cidrs { 192.168.1.1-192.168.1.9 comment "r" }');
        expect(check).toContain('- delete element inet keep natm { 1.1.1.1 : 3.3.3.3 . 80 }');
        expect(check).toContain('+ add element inet keep natm { 1.1.1.1 : 2.2.2.2 . 80 }');
        const gen = sock.generation();
        await sock.commit(batch, { expectGeneration: gen });
        expect(sock.generation()).toBe(gen + 1);
        expect(listing(ns, 'inet', 'keep')).toBe(before.listing);
        expect(handle()).toBe(before.vmap);
        expect((await plan(sock, config)).batch.length).toBe(0);
      } finally {
        sock.close();
      }
      // The same through the CLI: check names the drift and exits 1, apply repairs it.
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 'ports', '{ 8000-8080 }']);
      const check = await cli('check', '--config', file, '--netns', ns.path);
      expect(check.code).toBe(1);
      expect(check.out).toContain('+ add element inet keep ports { 8000-8080 }');
      const apply = await cli('apply', '--config', file, '--netns', ns.path);
      expect(apply.out).toMatch(/applied 1 operations? in one batch/);
      expect(listing(ns, 'inet', 'keep')).toBe(before.listing);
    }, 'sets-repair');
  });

  it('the daemon repairs a foreign element deletion and addition from the event with element ops only', async () => {
    const config = parseNftConfig(FILE, 'all.nft');
    await withKeeper({ config, tag: 'sets-daemon' }, async ({ ns, keeper, sock }) => {
      const handle = () => ns.exec('nft', ['-a', 'list', 'map', 'inet', 'keep', 'vm']).match(/# handle (\d+)/)![1];
      const before = { vm: handle(), listing: listing(ns, 'inet', 'keep') };
      for (const [cmd, elem] of [['delete', '{ 10.0.0.2 . udp . 53 }'], ['add', '{ 8.8.8.8 . tcp . 1 : drop }']] as const) {
        const repaired = nextRepair(keeper);
        const gen = sock.generation();
        ns.exec('nft', [cmd, 'element', 'inet', 'keep', 'vm', elem]);
        const r = await repaired;
        expect(r.drift.map((d) => d.kind)).toEqual(['elements-differ']);
        expect(r.ops).toBe(1);
        expect(r.generation).toBe(gen + 2);  // the foreign commit and the repair
        expect(listing(ns, 'inet', 'keep')).toBe(before.listing);
        expect(handle()).toBe(before.vm);
      }
    });
  });

  it('elements given a timeout are left to the kernel; a dynamic set keeps what the data path added', async () => {
    await withNetns(async (ns) => {
      const config = parseNftConfig(FILE, 'all.nft');
      expect((await cli('apply', '--config', save('t.nft', FILE), '--netns', ns.path)).code).toBe(0);
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 'tmo', '{ 2.2.2.2 }']);  // as if it expired
      ns.exec('nft', ['add', 'element', 'inet', 'keep', 'dyn', '{ 5.5.5.5 }']);
      const sock = open({ netns: ns.path });
      try {
        expect((await plan(sock, config)).batch.length).toBe(0);
      } finally {
        sock.close();
      }
    }, 'sets-timeout');
  });

  it('a set defined differently is created again in one batch, with a foreign rule that uses it gone first', async () => {
    await withNetns(async (ns) => {
      const text = 'table ip t {\n\tset s { type ipv4_addr; elements = { 1.1.1.1 }; }\n\tchain c { }\n}\n';
      ns.nft(text.replace('type ipv4_addr;', 'type ipv4_addr; comment "old";'));
      ns.exec('nft', ['add', 'rule', 'ip', 't', 'c', 'ip', 'saddr', '@s', 'accept']);
      const sock = open({ netns: ns.path });
      try {
        const config = parseNftConfig(text, 'r.nft');
        const { batch, check } = await plan(sock, config);
        expect(check.join('\n')).toMatch(/set s is defined differently .*userdata/);
        // The rule goes (by handle or with its chain's flush) before the set is deleted and added again.
        expect(batch.ops.map((o) => `${o.verb} ${o.object}`)).toEqual([expect.stringMatching(/^(delete rule|flush chain)$/), 'delete set', 'add set']);
        await sock.commit(batch, { expectGeneration: sock.generation() });
        expect((await plan(sock, config)).batch.length).toBe(0);
      } finally {
        sock.close();
      }
    }, 'sets-redefine');
  });

  it('a set that the config\'s rules use, defined differently, is created again with their chains rewritten, in one batch', async () => {
    const text = `table inet keep {
\tset s4 { type ipv4_addr; elements = { 10.0.0.1 }; }
\tmap vm { type ipv4_addr . inet_proto . inet_service : verdict; elements = { 10.0.0.1 . tcp . 80 : goto svc1 }; }
\tchain svc1 { }
\tchain pre {
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\tip saddr @s4 counter
\t\tip daddr . meta l4proto . th dport vmap @vm
\t}
}
`;
    await withNetns(async (ns) => {
      ns.nft(text.replace('type ipv4_addr;', 'type ipv4_addr; size 100;'));
      await withNetns(async (oracle) => {
        oracle.nft(text);
        const sock = open({ netns: ns.path });
        try {
          const config = parseNftConfig(text, 'use.nft');
          const { batch, check } = await plan(sock, config);
          expect(check.join('\n')).toMatch(/set s4 is defined differently/);
          expect(batch.ops.map((o) => `${o.verb} ${o.object}${o.object === 'rule' ? ` ${o.chain}` : ''}`)).toEqual([
            'flush chain', 'delete set', 'add set', 'add rule pre', 'add rule pre',
          ]);
          await sock.commit(batch, { expectGeneration: sock.generation() });
          // The set created again comes after the map now (sets list in handle order): compare each.
          expect(await setDump(ns, 'inet', 'keep')).toEqual(await setDump(oracle, 'inet', 'keep'));
          const rules = (n: Netns) => n.exec('nft', ['--debug=netlink', 'list', 'chain', 'inet', 'keep', 'pre'])
            .split('\n').filter((l) => !l.startsWith('inet keep @') && !l.startsWith('\telement '))
            .map((l) => l.replace(/^inet keep pre [\d ]+$/, 'inet keep pre')).join('\n');  // handles differ
          expect(rules(ns)).toBe(rules(oracle));
          expect((await plan(sock, config)).batch.length).toBe(0);
        } finally {
          sock.close();
        }
      }, 'sets-use-oracle');
    }, 'sets-use');
  });

  it('a bad declaration changes nothing in the kernel', async () => {
    await withNetns(async (ns) => {
      const good = save('good.nft', FILE);
      expect((await cli('apply', '--config', good, '--netns', ns.path)).code).toBe(0);
      const before = netlinkDump(ns, 'inet', 'keep');
      ns.exec('nft', ['delete', 'element', 'inet', 'keep', 's4', '{ 10.0.0.1 }']);
      const drifted = netlinkDump(ns, 'inet', 'keep');
      const bad = save('bad.nft', FILE.replace('10.0.0.1 . tcp . 80 : goto svc1', '10.0.0.1 . tcp . 80 : goto nowhere'));
      const r = await cli('apply', '--config', bad, '--netns', ns.path);
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/bad\.nft:\d+:\d+: map vm: an element jumps to chain nowhere/);
      expect(netlinkDump(ns, 'inet', 'keep')).toBe(drifted);
      expect(drifted).not.toBe(before);
    }, 'sets-bad');
  });
});
