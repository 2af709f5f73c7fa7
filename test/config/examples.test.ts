/**
 * The example rulesets Debian's nftables package ships (/usr/share/doc/nftables/examples), used
 * as a new user would: as `--config`. Each one in scope (ip, ip6 and inet tables, their stateful
 * objects, sets and maps) validates, installs into an empty namespace exactly as `nft -f` installs
 * it (listing and netlink dump, objects as the kernel dumps them), is in sync with nft's install,
 * and a running keeper puts back a rule, and an object with the rule using it, deleted behind its
 * back. The others are refused at their position (docs/config.md lists which and why).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig, namespaceInterfaces } from '../../src/config/config.js';
import { readNftFile } from '../../src/config/nftfile.js';
import { ConfigError } from '../../src/base/errors.js';
import { cli } from '../helpers/cli.js';
import { startKeeper } from '../helpers/keeper.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { byChain, netlinkDump } from '../helpers/peers/dump.js';
import { open } from '../../src/netlink/socket.js';
import type { Family } from '../../src/netlink/expr.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';

const DIR = '/usr/share/doc/nftables/examples';

/** In scope: ip, ip6 and inet tables. */
const IN_SCOPE = ['inet-filter', 'inet-nat', 'ipv4-filter', 'ipv4-mangle', 'ipv4-nat', 'ipv4-raw',
  'ipv6-filter', 'ipv6-mangle', 'ipv6-nat', 'ipv6-raw', 'overview', 'workstation', 'nat', 'ct_helpers', 'sets_and_maps'];

/**
 * What nft needs in the namespace before `nft -f` (sets_and_maps.nft starts with `delete table
 * filter`, which fails where there is none; nfkeeper owns the table and replaces it whole).
 */
const BEFORE_NFT: Record<string, string> = { sets_and_maps: 'add table ip filter\n' };

/** An object each example declares, with the rule that uses it (the kernel keeps an object in use): deleted together. */
const OBJECT: Record<string, { family: string; table: string; type: string; name: string; rule: RegExp }> = {
  ct_helpers: { family: 'inet', table: 'filter', type: 'ct helper', name: 'ftp-standard', rule: /ct helper set "ftp-standard"/ },
};

/** Refused, and where: [example, file named in the error, line, column, reason]. */
const REFUSED: [string, string, number, number, RegExp][] = [
  // its includes are read (./ from the working directory, as nft reads them) up to the netdev table
  ['all-in-one', './netdev-ingress.nft', 3, 50, /netdev devices are not supported/],
  ['load_balancing', `${DIR}/load_balancing.nft`, 44, 28, /netdev devices are not supported/],
  ['arp-filter', `${DIR}/arp-filter.nft`, 1, 1, /family/],
  ['bridge-filter', `${DIR}/bridge-filter.nft`, 1, 1, /family/],
  ['netdev-ingress', `${DIR}/netdev-ingress.nft`, 3, 50, /netdev devices are not supported/],
];

const tablesOf = (file: string) => readNftFile(`include "${file}"\n`, file).raw.tables.map((t) => [t.family, t.name] as const);

/** Interfaces an example's iif/oif rules name (the kernel matches their indexes: nft refuses a missing one). */
const LINKS: Record<string, [string, string][]> = { overview: [['bond0', 'bond1']], sets_and_maps: [['eth0', 'eth1'], ['eth2', 'eth3']] };

/** An empty namespace with the example's interfaces, made in the same order (so with the same indexes). */
async function withExampleNetns<T>(name: string, fn: (ns: Netns) => Promise<T>, tag: string): Promise<T> {
  return withNetns(async (ns) => {
    // (veth pairs: this kernel has no dummy links)
    for (const [x, y] of LINKS[name] ?? []) ns.exec('ip', ['link', 'add', x, 'type', 'veth', 'peer', 'name', y]);
    return fn(ns);
  }, tag);
}

/** A table's stateful objects as the kernel dumps them, without handles and use counts, by type and name. */
async function objectsOf(ns: Netns, family: string, table: string): Promise<unknown[]> {
  const sock = open({ netns: ns.path });
  try {
    const objs = await sock.listObjs({ family: family as Family, table });
    return objs.map(({ handle: _h, use: _u, ...o }) => o).sort((x, y) => `${x.type} ${x.name}`.localeCompare(`${y.type} ${y.name}`));
  } finally {
    sock.close();
  }
}

/** The first rule's (or the first matching `like`'s) chain and handle, by `nft -a list table`. */
function firstRuleHandle(ns: Netns, family: string, table: string, like?: RegExp): { chain: string; handle: string } | undefined {
  const listing = ns.exec('nft', ['-a', 'list', 'table', family, table]);
  let chain: string | undefined;
  for (const line of listing.split('\n')) {
    const c = /^\tchain (\S+) \{/.exec(line);
    if (c) chain = c[1];
    const r = /^\t\t(?!type )\S.* # handle (\d+)$/.exec(line);
    if (r && chain && (!like || like.test(line))) return { chain, handle: r[1]! };
  }
  return undefined;
}

describe("Debian's nftables examples as --config", () => {
  it('the examples are installed (the nftables package)', () => {
    expect(existsSync(join(DIR, 'nat.nft')), `${DIR} is missing: install Debian's nftables package`).toBe(true);
  });

  for (const name of IN_SCOPE) {
    it(`${name}.nft: validate ok, nft's install and nfkeeper's list and dump alike, check in sync, a deleted rule repaired`, async () => {
      const file = join(DIR, `${name}.nft`);
      const validate = await cli('validate', '--config', file);
      expect([validate.code, validate.err]).toEqual([0, '']);
      const tables = tablesOf(file);
      expect(tables.length).toBeGreaterThan(0);
      await withExampleNetns(name, async (a) => {
        if (BEFORE_NFT[name]) a.nft(BEFORE_NFT[name]!);
        a.exec('nft', ['-f', file]);
        await withExampleNetns(name, async (b) => {
          const apply = await cli('apply', '--config', file, '--netns', b.path);
          expect([apply.code, apply.err]).toEqual([0, '']);
          for (const [family, table] of tables) {
            expect(b.exec('nft', ['list', 'table', family, table]), `${family} ${table}`).toBe(a.exec('nft', ['list', 'table', family, table]));
            expect(netlinkDump(b, family, table), `${family} ${table}`).toBe(netlinkDump(a, family, table));
            expect(await objectsOf(b, family, table), `${family} ${table}`).toEqual(await objectsOf(a, family, table));
          }
        }, 'examples-b');
        const check = await cli('check', '--config', file, '--netns', a.path);
        expect([check.code, check.err], check.out).toEqual([0, '']);
      }, 'examples-a');
      // A keeper on the example repairs a rule deleted behind its back.
      await withExampleNetns(name, async (ns) => {
        const keeper = await startKeeper(ns, { config: loadConfig(file, { interfaces: namespaceInterfaces(ns.path) }) });
        try {
          const [family, table] = tables.find(([f, t]) => firstRuleHandle(ns, f, t)) ?? tables[0]!;
          const before = ns.exec('nft', ['list', 'table', family, table]);
          const rule = firstRuleHandle(ns, family, table);
          if (!rule) return;  // (an example with no rules: nothing to delete)
          ns.exec('nft', ['delete', 'rule', family, table, rule.chain, 'handle', rule.handle]);
          await until(`${name}: the deleted rule is back`, () => ns.exec('nft', ['list', 'table', family, table]) === before, 20_000, 50);
          const o = OBJECT[name];
          if (o) {
            // (the object and the rule come back with new handles: listed last, so compared block by block)
            const listed = () => byChain(ns.exec('nft', ['list', 'table', o.family, o.table]));
            const whole = listed();
            const user = firstRuleHandle(ns, o.family, o.table, o.rule)!;
            ns.nft(`delete rule ${o.family} ${o.table} ${user.chain} handle ${user.handle}\ndelete ${o.type} ${o.family} ${o.table} ${o.name}\n`);
            expect(ns.exec('nft', ['list', 'table', o.family, o.table])).not.toContain(`${o.type} ${o.name} {`);
            await until(`${name}: the deleted ${o.type} and its rule are back`, () => listed() === whole, 20_000, 50);
          }
        } finally {
          await keeper.stop();
        }
      }, 'examples-k');
    });
  }

  it("sets_and_maps.nft with elements in its named set and maps: nft's install and nfkeeper's alike, check in sync, a running keeper puts back a deleted element of each", async () => {
    // No example fills a named set; this one is Debian's, included whole, then given elements (by
    // interface index: nfkeeper takes iface_index elements as numbers, nft lists them by name).
    const file = join(tempDir('examples'), 'sets_and_maps-elements.nft');
    writeFileSync(file, `include "${DIR}/sets_and_maps.nft"\n\n` +
      'add element filter local_ifs { 2, 4 }\n' +
      'add element filter nat_map { 2 : 10.0.0.1, 5 : 192.168.0.1 }\n' +
      'add element filter jump_map { 2 : jump input_1, 3 : goto input_2 }\n');
    const validate = await cli('validate', '--config', file);
    expect([validate.code, validate.err]).toEqual([0, '']);
    await withExampleNetns('sets_and_maps', async (a) => {
      a.nft(BEFORE_NFT.sets_and_maps!);
      a.exec('nft', ['-f', file]);
      const listing = a.exec('nft', ['list', 'table', 'ip', 'filter']);
      expect(listing).toContain('elements = { "eth1" : 10.0.0.1');
      await withExampleNetns('sets_and_maps', async (b) => {
        const apply = await cli('apply', '--config', file, '--netns', b.path);
        expect([apply.code, apply.err]).toEqual([0, '']);
        expect(b.exec('nft', ['list', 'table', 'ip', 'filter'])).toBe(listing);
        expect(netlinkDump(b, 'ip', 'filter')).toBe(netlinkDump(a, 'ip', 'filter'));
      }, 'examples-eb');
      const check = await cli('check', '--config', file, '--netns', a.path);
      expect([check.code, check.err], check.out).toEqual([0, '']);
    }, 'examples-ea');
    await withExampleNetns('sets_and_maps', async (ns) => {
      const keeper = await startKeeper(ns, { config: loadConfig(file, { interfaces: namespaceInterfaces(ns.path) }) });
      try {
        const before = ns.exec('nft', ['list', 'table', 'ip', 'filter']);
        for (const [set, key] of [['local_ifs', '2'], ['nat_map', '5'], ['jump_map', '3']] as const) {
          ns.exec('nft', ['delete', 'element', 'ip', 'filter', set, `{ ${key} }`]);
          expect(ns.exec('nft', ['list', 'table', 'ip', 'filter'])).not.toBe(before);
          await until(`sets_and_maps: the deleted element of ${set} is back`, () => ns.exec('nft', ['list', 'table', 'ip', 'filter']) === before, 20_000, 50);
        }
      } finally {
        await keeper.stop();
      }
    }, 'examples-ek');
  });

  it('secmark.nft: validate ok; the kernel refuses its secmark objects without SELinux, to nfkeeper as to nft, and nothing is installed', async () => {
    const file = join(DIR, 'secmark.nft');
    const validate = await cli('validate', '--config', file);
    expect([validate.code, validate.err]).toEqual([0, '']);
    await withNetns(async (ns) => {
      expect(() => ns.exec('nft', ['-f', file])).toThrow();
      const apply = await cli('apply', '--config', file, '--netns', ns.path);
      expect(apply.code).not.toBe(0);
      expect(apply.err).toMatch(/secmark/);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
    }, 'examples-s');
  });

  it('the rest is refused at its position, naming the file it is in (an included one too)', () => {
    const cwd = process.cwd();
    try {
      process.chdir(DIR);
      for (const [name, file, line, col, why] of REFUSED) {
        let e: unknown;
        try {
          loadConfig(name === 'all-in-one' ? 'all-in-one.nft' : join(DIR, `${name}.nft`));
        } catch (x) {
          e = x;
        }
        expect(e, name).toBeInstanceOf(ConfigError);
        const c = e as ConfigError;
        expect([c.file, c.line, c.column, c.reason], name).toEqual([file, line, col, expect.stringMatching(why)]);
      }
    } finally {
      process.chdir(cwd);
    }
  });
});
