/**
 * Owners are confined: every jump or goto an owner writes, plain or in a verdict map, goes only to
 * the owner's own chains and is renamed to their kernel names; a verdict map into a config chain
 * is refused with its position, as a plain jump is. And all owners together hold at most
 * owners.limits rules and bytes: beyond, a 507 naming the limit, and nothing changes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { OwnerLimitError, OwnerRegistry, OwnerSpecError, compileOwner, type Owner } from '../../src/owners/index.js';
import { withNetns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { listTable, ownerSpec, ownersYaml, withDaemon } from './fixtures.js';

/** ownersYaml with a regular config chain `helper` beside the dispatch chains. */
function withHelper(dir: string): string {
  return ownersYaml(dir).replace('owners:\n', '      - name: helper\n        rules:\n          - accept\nowners:\n');
}

function refusal(body: unknown, yaml = withHelper(tempDir('confine'))): OwnerSpecError {
  const config = parseConfig(yaml, 'c.yaml');
  try {
    compileOwner('x', body, config.owners!, config.tables[0]!);
  } catch (e) {
    if (e instanceof OwnerSpecError) return e;
    throw e;
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

describe('owner jumps are confined to the owner\'s chains', () => {
  it('refuses every form of jump or goto to a chain that is not the owner\'s, with its position', () => {
    const cases: [unknown, RegExp][] = [
      [{ jumps: { postrouting: ['jump helper'] } }, /^jumps\.postrouting\[0\]: jump to chain 'helper', which this owner does not define$/],
      [{ jumps: { postrouting: ['meta mark vmap { 1 : jump helper }'] } }, /^jumps\.postrouting\[0\]: jump to chain 'helper', which this owner does not define$/],
      [{ jumps: { postrouting: ['meta mark vmap { 1 : accept, 2 : goto helper }'] } }, /^jumps\.postrouting\[0\]: goto to chain 'helper'/],
      [{ jumps: { postrouting: ['ip saddr . tcp dport vmap { 10.0.0.1 . 80 : jump helper }'] } }, /^jumps\.postrouting\[0\]: jump to chain 'helper'/],
      [{ chains: [{ name: 'c', rules: ['counter', 'tcp dport vmap { 22 : jump prerouting }'] }] }, /^chains\[0\]\.rules\[1\]: jump to chain 'prerouting'/],
      [{ chains: [{ name: 'c', rules: ['meta mark vmap { 1 : jump c2 }'] }] }, /^chains\[0\]\.rules\[0\]: jump to chain 'c2', which this owner does not define/],
      // Kernel names are not a way out: an owner names its chains by their local names only.
      [{ chains: [{ name: 'c', rules: ['meta mark vmap { 1 : jump o/y/c }'] }] }, /^chains\[0\]\.rules\[0\]: /],
      // Named sets and maps (and so dynamic set updates) are not an owner's: refused at the reference.
      [{ chains: [{ name: 'c', rules: ['meta mark vmap @m'] }] }, /^chains\[0\]\.rules\[0\]: set 'm' does not exist/],
      [{ chains: [{ name: 'c', rules: ['add @s { ip saddr }'] }] }, /^chains\[0\]\.rules\[0\]: set 's' does not exist/],
    ];
    for (const [body, message] of cases) expect(refusal(body).message, JSON.stringify(body)).toMatch(message);
  });

  it('checks what a verdict map reaches as a jump does: hooks, loops', () => {
    expect(refusal({
      chains: [{ name: 'a', rules: ['reject'] }],
      jumps: { postrouting: ['meta mark vmap { 1 : jump a }'] },
    }).message).toMatch(/^chains\[0\]\.rules\[0\]: reject is only valid in prerouting, input, forward and output chains \(chain a is reached from the postrouting hook\)$/);
    expect(refusal({
      chains: [{ name: 'a', rules: ['meta mark vmap { 1 : jump b }'] }, { name: 'b', rules: ['tcp dport vmap { 1 : goto a }'] }],
    }).message).toMatch(/leads back to it: the kernel refuses loops/);
    expect(refusal({
      chains: [{ name: 'a', rules: ['ip daddr 10.0.0.1 dnat to 10.0.0.2'] }],
      jumps: { postrouting: ['meta mark vmap { 1 : goto a }'] },
    }).message).toMatch(/^chains\[0\]\.rules\[0\]: dnat and redirect are only valid in prerouting and output chains/);
  });

  it('renames verdict map targets to the owner\'s kernel chain names, as plain jumps', () => {
    const config = parseConfig(ownersYaml(tempDir('confine')), 'c.yaml');
    const o = compileOwner('x', {
      chains: [{ name: 'a', rules: ['meta mark vmap { 1 : jump b, 2 : goto b }'] }, { name: 'b', rules: ['masquerade'] }],
      jumps: { postrouting: ['tcp dport vmap { 80 : jump a }'] },
    }, config.owners!, config.tables[0]!);
    const targets = (r: Owner['chains'][number]['rules'][number]) => r.compiled.sets.flatMap((s) => (s.elements ?? []).map((e) => `${e.verdict} ${e.chain}`));
    expect(targets(o.chains[0]!.rules[0]!)).toEqual(['jump o/x/b', 'goto o/x/b']);
    expect(targets(o.jumps.get('postrouting')![0]!)).toEqual(['jump o/x/a']);
    expect(o.chains[0]!.rules[0]!.compiled.text).toMatch(/jump o\/x\/b/);
  });

  it('in the kernel: a verdict map into the owner\'s chain is installed renamed (201); into a config chain, 400 and nothing changes', () =>
    withDaemon('confine', async ({ ns, d, dir, sock }) => {
      const body = { chains: [{ name: 'c', rules: ['masquerade'] }], jumps: { postrouting: ['meta mark vmap { 1 : jump c, 2 : goto c }'] } };
      let r = await d.api('PUT', '/v1/owners/v', body);
      expect(r).toMatchObject({ status: 201, body: { created: true } });
      expect(listTable(ns)).toMatch(/meta mark vmap \{ 0x00000001 : jump o\/v\/c, 0x00000002 : goto o\/v\/c \} comment "nfkeeper-owner=v"/);
      // What the kernel holds is what was desired (the renamed map elements compare equal), and
      // the same body again has nothing to do.
      expect(await d.keeper.request('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0 });
      // nft is the oracle: its own load of the listed table dumps the same netlink expressions.
      await withNetns((copy) => {
        copy.nft(ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper']));
        expect(netlinkDump(copy, 'ip', 'nfkeeper')).toBe(netlinkDump(ns, 'ip', 'nfkeeper'));
      }, 'confine-copy');
      const gen = sock.generation();
      r = await d.api('PUT', '/v1/owners/v', body);
      expect(r).toMatchObject({ status: 200, body: { changed: false } });
      const table = listTable(ns);
      const state = readFileSync(join(dir, 'state', 'owners.json'), 'utf8');
      for (const target of ['helper', 'postrouting', 'prerouting', 'o/v/c']) {
        r = await d.api('PUT', '/v1/owners/w', { chains: [{ name: 'c', rules: [] }], jumps: { postrouting: [`meta mark vmap { 1 : jump ${target} }`] } });
        expect(r.status, target).toBe(400);
        expect(r.body).toMatchObject({ path: 'jumps.postrouting[0]' });
        expect(r.body.error).toMatch(`jump to chain '${target}', which this owner does not define`);
      }
      expect(sock.generation()).toBe(gen);
      expect(listTable(ns)).toBe(table);
      expect(readFileSync(join(dir, 'state', 'owners.json'), 'utf8')).toBe(state);
    }, (dir) => ({ yaml: withHelper(dir) })));
});

describe('totals across owners', () => {
  const limited = (dir: string, rules: number, bytes: number) => `${withHelper(dir)}  limits:\n    rules: ${rules}\n    bytes: ${bytes}\n`;

  it('defaults in the config, and a config can set both', () => {
    const dir = tempDir('limits');
    expect(parseConfig(ownersYaml(dir), 'c.yaml').owners!.limits).toEqual({ rules: 50_000, bytes: 8 << 20 });
    expect(parseConfig(limited(dir, 7, 900), 'c.yaml').owners!.limits).toEqual({ rules: 7, bytes: 900 });
    expect(() => parseConfig(limited(dir, 0, 900), 'c.yaml')).toThrow(/owners\.limits\.rules/);
  });

  it('refuses a put past the rules or bytes limit alone, in the same group as puts that fit; shrinking and deleting stay possible', async () => {
    const dir = tempDir('limits');
    const config = parseConfig(limited(dir, 10, 100_000), join(dir, 'config.yaml'));
    const applied: number[] = [];
    const registry = new OwnerRegistry(config, [], async (owners: readonly Owner[]) => { applied.push(owners.length); });
    try {
      // Three at once, in one group: 3 + 5 fit, the third's 4 would make 12.
      const rs = await Promise.allSettled([registry.put('a', ownerSpec(1, 3)), registry.put('b', ownerSpec(2, 5)), registry.put('c', ownerSpec(3, 4))]);
      expect(rs.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
      const e = (rs[2] as PromiseRejectedResult).reason;
      expect(e).toBeInstanceOf(OwnerLimitError);
      expect(e.message).toBe('owners would hold 12 rules in all with this one (4), past owners.limits.rules (10); remove or shrink an owner first');
      expect(registry.totals.rules).toBe(8);
      expect(registry.list().map((o) => o.id)).toEqual(['a', 'b']);
      // A replace counts the owner once: b grows from 5 to 7 (10 in all) and fits; to 8 it does not.
      await registry.put('b', ownerSpec(2, 7));
      await expect(registry.put('b', ownerSpec(2, 8))).rejects.toThrow(/11 rules in all/);
      await registry.remove('a');
      await registry.put('c', ownerSpec(3, 3));
      expect(registry.totals.rules).toBe(10);
      expect(applied).toEqual([2, 2, 1, 2]);
    } finally {
      registry.close();
    }
    const bdir = tempDir('limits');
    const small = parseConfig(limited(bdir, 1000, 300), join(bdir, 'config.yaml'));
    const reg2 = new OwnerRegistry(small, [], async () => undefined);
    try {
      await reg2.put('a', ownerSpec(1, 3));
      const total = reg2.totals.bytes;
      expect(total).toBeGreaterThan(150);
      expect(total).toBeLessThan(250);
      await expect(reg2.put('b', ownerSpec(2, 3))).rejects.toThrow(/bytes in all with this one \(\d+\), past owners\.limits\.bytes \(300\)/);
    } finally {
      reg2.close();
    }
  });

  it('over the control socket: 507 naming the limit, and the kernel and the state file unchanged', () =>
    withDaemon('limits', async ({ ns, d, dir, sock }) => {
      expect((await d.api('PUT', '/v1/owners/a', ownerSpec(1, 4))).status).toBe(201);
      const gen = sock.generation();
      const table = listTable(ns);
      const state = readFileSync(join(dir, 'state', 'owners.json'), 'utf8');
      const r = await d.api('PUT', '/v1/owners/b', ownerSpec(2, 3));
      expect(r.status).toBe(507);
      expect(r.body).toMatchObject({ limit: 'owners.limits.rules', max: 6, total: 7 });
      expect(r.body.error).toMatch(/past owners\.limits\.rules \(6\)/);
      expect(sock.generation()).toBe(gen);
      expect(listTable(ns)).toBe(table);
      expect(readFileSync(join(dir, 'state', 'owners.json'), 'utf8')).toBe(state);
      // Room made, the same request goes through.
      expect((await d.api('PUT', '/v1/owners/a', ownerSpec(1, 2))).status).toBe(200);
      expect((await d.api('PUT', '/v1/owners/b', ownerSpec(2, 3))).status).toBe(201);
    }, (dir) => ({ yaml: limited(dir, 6, 1 << 20) })));
});
