/**
 * The rest of nft's table grammar in whole rulesets, nft 1.0.6 as the oracle: each table here is
 * installed by `nft -f` into one empty namespace and by `nfkeeper apply` into another; both list
 * and dump (`nft --debug=netlink`) alike, the kernel's set dumps (anonymous sets included) are
 * equal, `check` finds nft's install in sync, and `export` of it (nft and YAML) is in sync with
 * nfkeeper's install. What stays refused is refused at its file position; a running keeper puts
 * back a catch-all element deleted behind its back.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { SET_ELEM_F } from '../../src/netlink/objects.js';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withKeeper } from '../helpers/keeper.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { nextRepair } from '../keeper/helpers.js';
import { until } from '../helpers/wait.js';

const dir = tempDir('grammar');

/** Tables nft and nfkeeper must install alike: [name, the file's text (one table, ip t)]. */
const CASES: [string, string][] = [
  ['catch-all elements', `table ip t {
  map m {
    type ipv4_addr : verdict
    elements = { 1.2.3.4 : accept, * : drop }
  }
  map mi {
    type ipv4_addr : mark
    flags interval
    elements = { 1.2.3.0/24 : 1, * : 2 }
  }
  map mc {
    type ipv4_addr . inet_service : mark
    flags interval
    elements = { 1.2.3.0/24 . 22 : 1, * : 2 }
  }
  set s {
    type ipv4_addr
    elements = { 1.2.3.4, * }
  }
  set sk {
    type ipv4_addr
    flags constant
    elements = { 1.2.3.4, * comment "all" }
  }
  set s2 {
    type ipv4_addr
    flags timeout
    elements = { * timeout 1h comment "x" }
  }
  chain c {
    ip saddr vmap @m
    ip daddr @s accept
    meta mark set ip daddr map @mi
    tcp dport vmap { 22 : accept, * : drop }
  }
}
`],
  ['tcp_flag keys', `table ip t {
  set sf {
    type tcp_flag
    elements = { syn, ack, syn | ack, 0x3, fin|psh }
  }
  set st {
    typeof tcp flags
    elements = { syn }
  }
  map mf {
    type tcp_flag : verdict
    elements = { fin : drop, * : accept }
  }
  map mt {
    typeof tcp flags . tcp dport : mark
    elements = { syn . 22 : 1 }
  }
  chain c {
    tcp flags @sf accept
    tcp flags @st accept
    tcp flags vmap @mf
    meta mark set tcp flags . tcp dport map @mt
  }
}
`],
  ['add and update @map { KEY : DATA }, constants in the key', `table ip t {
  map m {
    type ipv4_addr : mark
    flags dynamic,timeout
  }
  map m2 {
    type ipv4_addr : ipv4_addr
    flags dynamic
  }
  map m3 {
    typeof ip saddr . tcp dport : meta mark
    flags dynamic
  }
  map m4 {
    type ipv4_addr : inet_service
    flags dynamic
  }
  chain c {
    update @m { ip saddr : 0x1 }
    update @m { ip saddr timeout 10s : 0x2 }
    add @m2 { ip saddr : ip daddr }
    update @m3 { ip saddr . tcp dport : meta mark }
    add @m4 { ip saddr : tcp dport }
    add @m4 { ip saddr : 22 }
    add @m3 { ip saddr . 22 : 3 }
  }
}
`],
  ['anonymous object maps', `table ip t {
  counter c80 {
  }
  counter c1 {
  }
  quota q {
    10 mbytes
  }
  ct helper ftp {
    type "ftp" protocol tcp
    l3proto ip
  }
  chain c {
    counter name tcp dport map { 80 : "c80", 443 : "c1" }
    quota name ip saddr map { 1.2.3.4 : "q" }
    counter name ip saddr . tcp dport map { 1.2.3.4 . 80 : "c80", 5.6.7.8 . 22 : "c1" }
  }
  chain pre {
    type filter hook prerouting priority filter; policy accept;
    ct helper set tcp dport map { 21 : "ftp", 2121 : "ftp" }
  }
}
`],
  ['typeof integer header fields', `table ip t {
  set ul {
    typeof udp length
    elements = { 10, 20 }
  }
  set ttl {
    typeof ip ttl
    flags interval
    elements = { 1-10, 64 }
  }
  map tm {
    typeof tcp window : meta mark
    elements = { 1024 : 1 }
  }
  chain c {
    udp length @ul accept
    ip ttl @ttl drop
    meta mark set tcp window map @tm
  }
}
`],
  ['NAT and header stores from a map on any key', `table ip t {
  map pm {
    type ifname : inet_service
    elements = { "lo" : 8080 }
  }
  chain c {
    type nat hook prerouting priority dstnat; policy accept;
    dnat to iifname map { "eth0" : 1.2.3.4 }
    dnat to numgen inc mod 2 map { 0 : 1.2.3.4, 1 : 1.2.3.5 }
    ip daddr set iifname map { "eth0" : 1.2.3.4 }
    ip saddr set numgen inc mod 2 map { 0 : 10.0.0.1, 1 : 10.0.0.2 }
    tcp dport set iifname map { "eth0" : 8080 }
    udp sport set iifname map @pm
  }
}
`],
  ['statements on sets, maps and elements', `table ip t {
  set s {
    type ipv4_addr
    counter
    elements = { 10.0.0.1 counter packets 5 bytes 100, 10.0.0.2 }
  }
  set q {
    type ipv4_addr
    flags dynamic,timeout
    counter quota 100 mbytes
    timeout 1m
  }
  set l {
    type ipv4_addr
    flags dynamic
    limit rate 10/second
  }
  set lo {
    typeof ip saddr
    size 1024
    flags dynamic
    limit rate over 5/minute burst 3 packets
    elements = { 1.2.3.4 limit rate over 5/minute burst 3 packets comment "x" }
  }
  set cc {
    type ipv4_addr
    flags dynamic
    ct count over 4
  }
  map m {
    type ipv4_addr : verdict
    counter
    elements = { 10.0.0.3 counter : accept, 10.0.0.4 counter packets 1 bytes 2 : drop }
  }
  map qm {
    type ipv4_addr : mark
    flags interval
    quota over 10 mbytes
    elements = { 10.0.0.0/24 : 1 }
  }
  chain c {
    ip saddr @s accept
    ip saddr vmap @m
  }
}
`],
  ['statements in add and update @set', `table ip t {
  set n {
    type ipv4_addr
    flags dynamic
  }
  set n2 {
    type ipv4_addr . inet_service
    flags dynamic,timeout
    timeout 1h
  }
  map nm {
    type ipv4_addr : mark
    flags dynamic
  }
  set l {
    type ipv4_addr
    flags dynamic
    limit rate 10/second
  }
  set q {
    type ipv4_addr
    flags dynamic
    counter quota 100 mbytes
  }
  chain c {
    add @n { ip saddr limit rate 10/second }
    update @n { ip daddr counter }
    add @n { ip saddr ct count over 4 }
    update @n2 { ip saddr . tcp dport timeout 1m counter quota over 5 mbytes }
    update @nm { ip saddr counter : 0x1 }
    add @l { ip saddr limit rate 10/second }
    add @l { ip daddr }
    update @q { ip saddr counter quota 100 mbytes }
  }
}
`],
  ['meters', `table ip t {
  chain c {
    type filter hook input priority filter; policy accept;
    meter foo { ip saddr limit rate over 5/minute burst 3 packets } drop
    meter bar size 100 { ip saddr . tcp dport counter }
    meter baz { ip daddr quota over 10 mbytes }
    meter tm size 8192 { ip saddr timeout 30s counter }
  }
}
`],
];

/** Refused at [line, column] with a reason. */
const REFUSED: [string, number, number, RegExp][] = [
  ['table ip t {\n  map m { type ipv4_addr : verdict; elements = { * : drop, * : accept } }\n}\n', 2, 60, /a second catch-all element/],
  ['table ip t {\n  map m { type ipv4_addr : verdict; elements = { * } }\n}\n', 2, 51, /needs ': verdict'/],
  ['table ip t {\n  set s { type ipv4_addr; elements = { * . 22 } }\n}\n', 2, 42, /too many parts/],
  // nft 1.0.6 refuses a constant in a concatenation it matches ("Can't parse symbolic invalid expressions")
  ['table ip t {\n  chain c {\n    ip saddr . 22 { 1.2.3.4 . 22 } accept\n  }\n}\n', 3, 16, /unknown or unsupported keyword/],
  ['table ip t {\n  set s { type tcp_flag; elements = { syn | bogus } }\n}\n', 2, 39, /'syn\|bogus' is not TCP flags/],
  ['table ip t {\n  map m { type ipv4_addr : mark; flags dynamic; }\n  set s { type ipv4_addr; flags dynamic; }\n  map v { type ipv4_addr : verdict; flags dynamic; }\n  chain c {\n    add @m { ip saddr }\n  }\n}\n', 6, 9, /'m' is a map: give the data/],
  ['table ip t {\n  map m { type ipv4_addr : mark; flags dynamic; }\n  set s { type ipv4_addr; flags dynamic; }\n  map v { type ipv4_addr : verdict; flags dynamic; }\n  chain c {\n    add @s { ip saddr : 1 }\n  }\n}\n', 6, 25, /'s' is a set, not a map/],
  ['table ip t {\n  map m { type ipv4_addr : mark; flags dynamic; }\n  set s { type ipv4_addr; flags dynamic; }\n  map v { type ipv4_addr : verdict; flags dynamic; }\n  chain c {\n    add @v { ip saddr : 1 }\n  }\n}\n', 6, 9, /verdict map/],
  ['table ip t {\n  map m { type ipv4_addr : mark; flags dynamic; }\n  set s { type ipv4_addr; flags dynamic; }\n  map v { type ipv4_addr : verdict; flags dynamic; }\n  chain c {\n    add @m { ip saddr : ip daddr }\n  }\n}\n', 6, 25, /datatype mismatch: map 'm' maps to mark, not ipv4_addr/],
  ['table ip t {\n  map m { type ipv4_addr : mark; flags dynamic; }\n  set s { type ipv4_addr; flags dynamic; }\n  map v { type ipv4_addr : verdict; flags dynamic; }\n  chain c {\n    add @m { ip saddr : bogus }\n  }\n}\n', 6, 25, /'bogus' is not a 32-bit mark/],
  ['table ip t {\n  map m { type ipv4_addr . inet_service : mark; flags dynamic; }\n  chain c {\n    add @m { ip saddr . 99999 : 1 }\n  }\n}\n', 4, 25, /'99999' is not a port number/],
  ['table ip t {\n  map m { type ipv4_addr . inet_service : mark; flags dynamic; }\n  chain c {\n    add @m { 1.2.3.4 . 22 . 1 : 1 }\n  }\n}\n', 4, 14, /constant in the key of set 'm'/],
  ['table ip t {\n  map pm { type ifname : inet_service; }\n  chain c {\n    ip daddr set iifname map @pm\n  }\n}\n', 4, 30, /map 'pm' maps to inet_service, not ipv4_addr/],
  ['table ip t {\n  set sf { type tcp_flag; }\n  chain c {\n    ip protocol @sf\n  }\n}\n', 4, 17, /set 'sf' is keyed by tcp_flag/],
  // the kernel dumps no statements of a dynset whose set has its own: only the set's are taken
  ['table ip t {\n  set l { type ipv4_addr; flags dynamic; limit rate 10/second; }\n  chain c {\n    add @l { ip saddr limit rate 5/second }\n  }\n}\n', 4, 23, /set 'l' has statements of its own/],
  ['table ip t {\n  set n { type ipv4_addr; flags dynamic; }\n  chain c {\n    add @n { ip saddr counter counter counter }\n  }\n}\n', 4, 23, /at most 2 per element/],
  ['table ip t {\n  set s { type ipv4_addr; counter; elements = { 1.2.3.4 limit rate 1/second } }\n}\n', 2, 49, /not those of set s/],
  ['table ip t {\n  set s { type ipv4_addr; counter; elements = { 1.2.3.4 counter packets x } }\n}\n', 2, 73, /packet count/],
  ['table ip t {\n  set s { type ipv4_addr; accept; }\n}\n', 2, 27, /not a property of a set/],
  ['table ip t {\n  chain c {\n    meter m { ip saddr } drop\n  }\n}\n', 3, 24, /a statement for each key/],
  ['table ip t {\n  chain c {\n    meter m { ip saddr counter quota 1 mbytes }\n  }\n}\n', 3, 24, /a meter takes one statement/],
  ['table ip t {\n  set m { type ipv4_addr; }\n  chain c {\n    meter m { ip saddr counter }\n  }\n}\n', 4, 11, /has a set 'm' already/],
  ['table ip t {\n  set s { type ipv4_addr; counter quota 1 mbytes; elements = { 1.2.3.4 counter quota 1 mbytes } }\n}\n', 2, 72, /an element takes one statement/],
  // chain bindings as nft 1.0.6 takes them: a separator after the last rule too, none inside another
  ['table ip t {\n  chain c {\n    jump { accept }\n  }\n}\n', 3, 19, /separator after a chain binding's last rule/],
  ['table ip t {\n  chain c {\n    jump {\n      goto { accept; }\n    }\n  }\n}\n', 4, 12, /too many levels of nesting/],
  ['table ip t {\n  set s { typeof ct zone; }\n}\n', 2, 18, /typeof ct zone: not an expression nfkeeper can key a set by/],
  ['table ip t {\n  set s { type ipv4_addr; last; }\n}\n', 2, 27, /'last' statement on a set is not supported/],
];

/** `nft list table ip t`, less the time an element with a timeout has left (the kernel counts it down). */
const listing = (ns: Netns) => ns.exec('nft', ['list', 'table', 'ip', 't']).replace(/ expires \S+/g, '');

const dump = (ns: Netns) => netlinkDump(ns, 'ip', 't').replace(/ expires \S+/g, '');

function refusal(text: string): ConfigError {
  try {
    parseNftConfig(text, 'f.nft');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return ((e as ConfigError & { all?: ConfigError[] }).all?.[0] ?? e) as ConfigError;
  }
  throw new Error(`accepted: ${text}`);
}

/** Every set of ip t with its elements, as the kernel dumps them (no handles, no time left). */
async function setDump(ns: Netns): Promise<unknown[]> {
  const sock = open({ netns: ns.path });
  try {
    const out: unknown[] = [];
    for (const { handle: _h, ...def } of await sock.listSets({ family: 'ip', table: 't' })) {
      const elements = (await sock.listElements({ family: 'ip', table: 't', set: def.name })).map(({ expiration: _e, ...e }) => JSON.stringify(e)).sort();
      out.push({ def, elements });
    }
    return out.sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)));
  } finally {
    sock.close();
  }
}

describe('whole-table grammar: what is refused, where', () => {
  it('refuses at file:line:column', () => {
    for (const [text, line, col, why] of REFUSED) {
      const e = refusal(text);
      expect([e.line, e.column, e.reason], text).toEqual([line, col, expect.stringMatching(why)]);
    }
  });

  it('the catch-all element in the block form, the command form and YAML is one kernel element', () => {
    const shape = (c: ReturnType<typeof parseConfig>) => c.tables.map((t) => (t.sets ?? []).map((x) => x.elements));
    const block = parseNftConfig('table ip t {\n  map m { type ipv4_addr : verdict; elements = { 1.2.3.4 : accept, * : drop } }\n}\n', 'b.nft');
    const commands = parseNftConfig('add table ip t\nadd map ip t m { type ipv4_addr : verdict; }\nadd element ip t m { * : drop, 1.2.3.4 : accept }\n', 'c.nft');
    const yaml = parseConfig('tables:\n  - family: ip\n    name: t\n    maps:\n      - { name: m, type: "ipv4_addr : verdict", elements: ["1.2.3.4 : accept", "* : drop"] }\n', 'c.yaml');
    expect(shape(block)).toEqual([[[{ key: '01020304', flags: 0, verdict: 'accept' }, { flags: SET_ELEM_F.CATCHALL, verdict: 'drop' }]]]);
    expect(shape(yaml)).toEqual(shape(block));
    expect(shape(commands).map((t) => t.map((els) => [...els].sort((a) => (a.key ? -1 : 1))))).toEqual(shape(block));
  });
});

describe('whole-table grammar against nft', () => {
  for (const [name, text] of CASES) {
    it(name, async () => {
      const file = join(dir, `${name}.nft`);
      writeFileSync(file, text);
      const validate = await cli('validate', '--config', file);
      expect([validate.code, validate.err]).toEqual([0, '']);
      await withNetns(async (a) => {
        a.exec('nft', ['-f', file]);
        await withNetns(async (b) => {
          const apply = await cli('apply', '--config', file, '--netns', b.path);
          expect([apply.code, apply.err]).toEqual([0, '']);
          expect(listing(b)).toBe(listing(a));
          expect(dump(b)).toBe(dump(a));
          // the sets as the kernel holds them (anonymous ones too: flags, userdata, size, objects)
          expect(await setDump(b)).toEqual(await setDump(a));
          // export of nft's install, in both formats, is in sync with nfkeeper's
          for (const format of ['nft', 'yaml']) {
            const exp = await cli('export', '--netns', a.path, '--format', format, '--table', 'ip', 't');
            expect([exp.code, exp.err]).toEqual([0, '']);
            const back = join(dir, `${name}-export.${format}`);
            writeFileSync(back, exp.out + '\n');
            const again = await cli('check', '--config', back, '--netns', b.path);
            expect([again.code, again.out], exp.out).toEqual([0, 'in sync']);
          }
        }, 'gram-b');
        const check = await cli('check', '--config', file, '--netns', a.path);
        expect([check.code, check.err], check.out).toEqual([0, '']);
      }, 'gram-a');
    });
  }
});

describe('whole-table grammar: repaired by a running keeper', () => {
  it('a catch-all element deleted behind its back is put back with element operations', async () => {
    const config = parseNftConfig(CASES.find(([n]) => n === 'catch-all elements')![1], 'c.nft');
    await withKeeper({ config, tag: 'gram-k' }, async ({ ns, keeper }) => {
      const before = listing(ns);
      // (nft 1.0.6 cannot delete the catch-all element of an interval map: 'BUG: invalid range expression type')
      for (const cmd of [['delete', 'element', 'ip', 't', 'm', '{ * }'], ['delete', 'element', 'ip', 't', 's', '{ * }'],
        ['delete', 'element', 'ip', 't', 'mc', '{ * }']]) {
        const repaired = nextRepair(keeper);
        ns.exec('nft', cmd);
        const r = await repaired;
        expect(r.drift.map((d) => d.kind)).toEqual(['elements-differ']);
        expect(listing(ns)).toBe(before);
      }
    });
  });
});


describe('statements on sets: repaired by a running keeper without resetting what they count', () => {
  const TABLE = `table ip t {
  set s {
    type ipv4_addr
    counter
    elements = { 127.0.0.1, 10.9.9.9 counter }
  }
  set n {
    type ipv4_addr
    flags dynamic
  }
  chain out {
    type filter hook output priority filter; policy accept;
    ip daddr @s
    update @n { ip daddr counter }
    meter m { ip daddr counter }
  }
}
`;

  it('an element, a rule, a dynset rule and a meter put back; the counters of elements that stayed keep counting', async () => {
    const file = join(dir, 'stateful-keeper.nft');
    writeFileSync(file, TABLE);
    const config = parseNftConfig(TABLE, file);
    await withKeeper({ config, tag: 'gram-st' }, async ({ ns, keeper, sock }) => {
      ns.exec('ip', ['link', 'set', 'lo', 'up']);
      const send = (n: number) => ns.exec('bash', ['-c', `for i in $(seq ${n}); do echo x > /dev/udp/127.0.0.1/9; done`]);
      const packets = async (set: string) => {
        const e = (await sock.listElements({ family: 'ip', table: 't', set })).find((x) => x.key === '7f000001');
        const c = e?.exprs?.[0];
        return c?.kind === 'counter' ? c.packets ?? 0 : -1;
      };
      const inSync = async () => {
        await keeper.idle();
        return (await cli('check', '--config', file, '--netns', ns.path)).out === 'in sync';
      };
      const handle = (i: number) => {
        const lines = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 't', 'out']).split('\n').filter((l) => /# handle \d+$/.test(l) && !/^\s*chain /.test(l));
        return Number(/# handle (\d+)$/.exec(lines[i]!)![1]);
      };
      send(4);
      expect(await packets('s')).toBeGreaterThanOrEqual(4);
      expect(await packets('n')).toBeGreaterThanOrEqual(4);
      const tampers: [string, () => void][] = [
        ['a deleted element', () => ns.nft('delete element ip t s { 10.9.9.9 }\n')],
        ['a deleted lookup rule', () => ns.nft(`delete rule ip t out handle ${handle(0)}\n`)],
        ['a deleted dynset rule', () => ns.nft(`delete rule ip t out handle ${handle(1)}\n`)],
        ['a deleted meter rule', () => ns.nft(`delete rule ip t out handle ${handle(2)}\n`)],
      ];
      for (const [what, tamper] of tampers) {
        send(2);
        const before = [await packets('s'), await packets('n')];
        tamper();
        await until(`${what} to be repaired`, inSync, 20_000);
        send(2);
        // the set and its element were not created again: their counters go on from where they were
        expect(await packets('s'), what).toBeGreaterThanOrEqual(before[0]! + 2);
        expect(await packets('n'), what).toBeGreaterThanOrEqual(before[1]! + 2);
      }
      expect((await sock.listElements({ family: 'ip', table: 't', set: 's' })).map((e) => e.key).sort()).toEqual(['0a090909', '7f000001']);
      // and it rests: no repair follows its own
      const more = await Promise.race([nextRepair(keeper).then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 3000))]);
      expect(more).toBe(false);
    });
  });
});
