/**
 * The example rulesets Debian's nftables package ships (/usr/share/doc/nftables/examples), used
 * as a new user would: as `--config`. Each one in scope (ip, ip6 and inet tables without stateful
 * objects) validates, installs into an empty namespace exactly as `nft -f` installs it (listing
 * and netlink dump), is in sync with nft's install, and a running keeper puts back a rule deleted
 * behind its back. The others are refused at the position nft's own grammar would reach them.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig, namespaceInterfaces } from '../../src/config/config.js';
import { readNftFile } from '../../src/config/nftfile.js';
import { ConfigError } from '../../src/base/errors.js';
import { cli } from '../helpers/cli.js';
import { startKeeper } from '../helpers/keeper.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { until } from '../helpers/wait.js';

const DIR = '/usr/share/doc/nftables/examples';

/** In scope: ip, ip6 and inet tables, no stateful objects. */
const IN_SCOPE = ['inet-filter', 'inet-nat', 'ipv4-filter', 'ipv4-mangle', 'ipv4-nat', 'ipv4-raw',
  'ipv6-filter', 'ipv6-mangle', 'ipv6-nat', 'ipv6-raw', 'overview', 'workstation', 'nat'];

/** Refused, and where: [example, file named in the error, line, column, reason]. */
const REFUSED: [string, string, number, number, RegExp][] = [
  // its includes are read (./ from the working directory, as nft reads them) up to the netdev table
  ['all-in-one', './netdev-ingress.nft', 3, 50, /netdev devices are not supported/],
  ['load_balancing', `${DIR}/load_balancing.nft`, 44, 28, /netdev devices are not supported/],
  ['arp-filter', `${DIR}/arp-filter.nft`, 1, 1, /family/],
  ['bridge-filter', `${DIR}/bridge-filter.nft`, 1, 1, /family/],
  ['netdev-ingress', `${DIR}/netdev-ingress.nft`, 3, 50, /netdev devices are not supported/],
  // a set of interface indexes (iface_index) is not a set type nfkeeper holds yet
  ['sets_and_maps', `${DIR}/sets_and_maps.nft`, 26, 8, /unknown datatype iface_index/],
];

const tablesOf = (file: string) => readNftFile(`include "${file}"\n`, file).raw.tables.map((t) => [t.family, t.name] as const);

/** Interfaces an example's iif/oif rules name (the kernel matches their indexes: nft refuses a missing one). */
const LINKS: Record<string, [string, string][]> = { overview: [['bond0', 'bond1']] };

/** An empty namespace with the example's interfaces, made in the same order (so with the same indexes). */
async function withExampleNetns<T>(name: string, fn: (ns: Netns) => Promise<T>, tag: string): Promise<T> {
  return withNetns(async (ns) => {
    // (veth pairs: this kernel has no dummy links)
    for (const [x, y] of LINKS[name] ?? []) ns.exec('ip', ['link', 'add', x, 'type', 'veth', 'peer', 'name', y]);
    return fn(ns);
  }, tag);
}

/** Rule handles of a chain, by `nft -a list chain`. */
function firstRuleHandle(ns: Netns, family: string, table: string): { chain: string; handle: string } | undefined {
  const listing = ns.exec('nft', ['-a', 'list', 'table', family, table]);
  let chain: string | undefined;
  for (const line of listing.split('\n')) {
    const c = /^\tchain (\S+) \{/.exec(line);
    if (c) chain = c[1];
    const r = /^\t\t(?!type )\S.* # handle (\d+)$/.exec(line);
    if (r && chain) return { chain, handle: r[1]! };
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
        a.exec('nft', ['-f', file]);
        await withExampleNetns(name, async (b) => {
          const apply = await cli('apply', '--config', file, '--netns', b.path);
          expect([apply.code, apply.err]).toEqual([0, '']);
          for (const [family, table] of tables) {
            expect(b.exec('nft', ['list', 'table', family, table]), `${family} ${table}`).toBe(a.exec('nft', ['list', 'table', family, table]));
            expect(netlinkDump(b, family, table), `${family} ${table}`).toBe(netlinkDump(a, family, table));
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
        } finally {
          await keeper.stop();
        }
      }, 'examples-k');
    });
  }

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
