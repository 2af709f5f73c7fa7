/**
 * Registering or removing one owner costs that owner, not every owner: one batch of the
 * owner's own ops, touching its chain and its jump in the dispatch chain only, planned without
 * reading the kernel (src/keeper/known.ts); a commit elsewhere is confirmed by rule digests without
 * decoding a rule; tampering is still found and repaired. Op counts and calls, never timings.
 */
import { describe, expect, it } from 'vitest';
import type { Op } from '../../src/netlink/ops.js';
import type { NftConn } from '../../src/netlink/conn.js';
import { Batch } from '../../src/netlink/batch.js';
import { loadOwners } from '../../src/owners/index.js';
import { listTable, ownerSpec, startDaemon, withDaemon } from './fixtures.js';
import { withNetns } from '../helpers/netns.js';

/** Records the keeper socket's commits and reads. */
function spy(conn: NftConn) {
  const seen = { commits: [] as Op[][], listRules: 0, listRuleDigests: 0, chains: 0 };
  const c = conn as NftConn & Record<string, unknown>;
  const commit = conn.commit.bind(conn);
  c.commit = (batch: Batch | readonly Op[], options?: object) => {
    seen.commits.push([...(batch instanceof Batch ? batch.ops : batch)]);
    return commit(batch, options);
  };
  const listRules = conn.listRules.bind(conn);
  c.listRules = (f: Parameters<NftConn["listRules"]>[0]) => { seen.listRules++; return listRules(f); };
  const digests = conn.listRuleDigests!.bind(conn);
  c.listRuleDigests = (f: Parameters<NonNullable<NftConn['listRuleDigests']>>[0]) => { seen.listRuleDigests++; return digests(f); };
  const listChains = conn.listChains.bind(conn);
  c.listChains = (f: Parameters<NftConn['listChains']>[0]) => { seen.chains++; return listChains(f); };
  const getChain = conn.getChain.bind(conn);
  c.getChain = (...a: Parameters<NftConn['getChain']>) => { seen.chains++; return getChain(...a); };
  return seen;
}

const id = (i: number) => `o${String(i).padStart(3, '0')}`;

describe('owners one at a time', () => {
  it('a registration among 60 owners is one batch of that owner\'s ops, planned without a read; a removal too', async () => {
    await withDaemon('own-one', async ({ d, sock }) => {
      for (let i = 0; i < 60; i += 20) {
        await Promise.all(Array.from({ length: 20 }, (_, k) => d.api('PUT', `/v1/owners/${id(i + k)}`, ownerSpec(i + k, 10))));
      }
      // Batches of 20 owners are too big to echo their handles: one read makes them known.
      await d.keeper.readBack('manual', 0);
      const seen = spy(d.keeper.socket!);
      const dumps = async () => (await d.keeper.metrics.dumps.get()).values[0]?.value ?? 0;
      const before = await dumps();
      const gen = sock.generation();

      // In the middle of the id order: its jump goes after o029's, by that rule's handle.
      const r = await d.api('PUT', '/v1/owners/o029x', ownerSpec(1000, 10));
      expect(r.status).toBe(201);
      expect(sock.generation()).toBe(gen + 1);
      expect(seen.commits).toHaveLength(1);
      const ops = seen.commits[0]!;
      expect(ops).toHaveLength(11);  // its chain, its 9 rules, its jump
      expect(ops.every((op) => op.object === 'chain' ? op.name === 'o/o029x/masq'
        : op.object === 'rule' && (op.chain === 'o/o029x/masq' || (op.chain === 'postrouting' && op.verb === 'add')))).toBe(true);
      const jump = ops.find((op) => op.object === 'rule' && op.chain === 'postrouting') as Extract<Op, { object: 'rule' }>;
      const post = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
      const o029 = post.findIndex((x) => x.exprs.some((e) => e.kind === 'immediate' && e.chain === 'o/o029/masq'));
      expect(jump.position).toBe(post[o029]!.handle);
      expect(post[o029 + 1]!.exprs.some((e) => e.kind === 'immediate' && e.chain === 'o/o029x/masq')).toBe(true);
      expect(seen.listRules + seen.listRuleDigests).toBe(0);
      expect(await dumps()).toBe(before);

      // Removal: its jump by handle, its chain flushed and deleted; nothing else, nothing read.
      expect((await d.api('DELETE', '/v1/owners/o029x')).status).toBe(200);
      expect(seen.commits).toHaveLength(2);
      expect(seen.commits[1]!.map((op) => `${op.verb} ${op.object}`).sort()).toEqual(['delete chain', 'delete rule', 'flush chain']);
      expect(seen.listRules + seen.listRuleDigests).toBe(0);
      // A re-registration with a changed spec replaces only what changed (the rule that differs, by handle).
      const changed = ownerSpec(5, 10);
      changed.chains[0]!.rules[3] = 'ip daddr 172.31.3.0/24 tcp dport 1003 return';
      expect((await d.api('PUT', `/v1/owners/${id(5)}`, changed)).status).toBe(200);
      expect(seen.commits[2]!.map((op) => `${op.verb} ${op.object}`)).toEqual(['replace rule']);
      expect(seen.listRules + seen.listRuleDigests).toBe(0);

      // What the keeper planned from is what the kernel holds: a read (the tick's, by digests: the
      // known rules proved by their desired rules' digests) finds nothing to do.
      const check = await d.keeper.readBack('manual', 0, true);
      expect(check).toMatchObject({ status: 'in-sync', ops: 0 });
      expect(seen.listRules + seen.listRuleDigests).toBeGreaterThan(0);
      const chains = (await sock.listChains({ family: 'ip', table: 'nfkeeper' })).map((c) => c.name);
      expect(chains).toHaveLength(62);
      expect(chains).not.toContain('o/o029x/masq');
    });
  }, 120_000);

  it('a group of owners is learnt from the kernel\'s echo of its batch, nothing read, however big the group', async () => {
    await withDaemon('own-group', async ({ d, sock }) => {
      await Promise.all(Array.from({ length: 40 }, (_, i) => d.api('PUT', `/v1/owners/${id(i)}`, ownerSpec(i, 4))));
      await d.keeper.idle();
      const seen = spy(d.keeper.socket!);
      const dumps = async () => (await d.keeper.metrics.dumps.get()).values[0]?.value ?? 0;
      const groups = d.registry.groups;
      const dumps0 = await dumps();
      // 20 at once: one group (or a few), batches over the 64 messages acked one by one, echoed all the same.
      const r = await Promise.all(Array.from({ length: 20 }, (_, k) => d.api('PUT', `/v1/owners/g${k}`, ownerSpec(200 + k, 4))));
      expect(r.every((x) => x.status === 201)).toBe(true);
      expect(d.registry.groups - groups).toBeLessThan(20);
      expect(seen.commits.some((c) => c.length > 64)).toBe(true);
      expect(seen.listRules + seen.listRuleDigests + seen.chains).toBe(0);
      expect(await dumps()).toBe(dumps0);
      // 20 owners of 60 rules at once: batches past the 1,024 messages once echoed whole, their new
      // rules' handles derived from a few echoed ones (src/netlink/handles.ts): nothing read either.
      const r2 = await Promise.all(Array.from({ length: 20 }, (_, k) => d.api('PUT', `/v1/owners/b${k}`, ownerSpec(300 + k, 60))));
      expect(r2.every((x) => x.status === 201)).toBe(true);
      expect(seen.commits.some((c) => c.length > 1024)).toBe(true);
      expect(seen.listRules + seen.listRuleDigests).toBe(0);
      const digests = seen.listRuleDigests;
      const commits = seen.commits.length;
      expect((await d.api('PUT', '/v1/owners/h0', ownerSpec(400, 4))).status).toBe(201);
      expect(seen.commits).toHaveLength(commits + 1);
      expect(seen.commits[commits]!).toHaveLength(5);  // its chain, its 3 rules, its jump
      expect(seen.listRules).toBe(0);
      expect(seen.listRuleDigests).toBe(digests);
      // What the keeper knows is what the kernel holds: a full read finds nothing to do.
      expect(await d.keeper.readBack('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0 });
      expect((await sock.listChains({ family: 'ip', table: 'nfkeeper' })).length).toBe(2 + 40 + 20 + 20 + 1);
    });
  }, 120_000);

  it('right after a registration (the followed part not seeded yet), a commit elsewhere costs no read at all; one in the owned table is still read and repaired', async () => {
    await withDaemon('own-proof', async ({ d, sock, ns }) => {
      await Promise.all(Array.from({ length: 70 }, (_, i) => d.api('PUT', `/v1/owners/${id(i)}`, ownerSpec(i, 4))));
      expect(await d.keeper.readBack('manual', 0)).toMatchObject({ status: 'in-sync' });
      const seen = spy(d.keeper.socket!);
      const reads = () => seen.listRules + seen.listRuleDigests + seen.chains;
      for (let k = 0; k < 3; k++) {
        // A registration changes the desired state: the followed part is off until a read or the known state reseeds it.
        expect((await d.api('PUT', `/v1/owners/n${k}`, ownerSpec(100 + k, 4))).status).toBe(201);
        expect(d.keeper.followState()?.exact).toBe(false);
        ns.nft(`add table ip elsewhere${k}`);
        const gen = sock.generation();
        // The events prove the commit touched no owned table: the known state holds at the new generation.
        expect(await d.keeper.request('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0, generation: gen });
        expect(reads()).toBe(0);
      }
      // A commit in the owned table is a touch: the keeper reads (digests or the followed part's seed) and repairs it.
      const rules = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'o/o007/masq' });
      expect((await d.api('PUT', '/v1/owners/n9', ownerSpec(109, 4))).status).toBe(201);
      ns.nft(`delete rule ip nfkeeper o/o007/masq handle ${rules[1]!.handle}`);
      const ticks = await d.keeper.request('manual', 0);
      expect(ticks.status).toBe('repaired');
      expect(reads()).toBeGreaterThan(0);
      const after = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'o/o007/masq' });
      expect(after).toHaveLength(rules.length);
      expect((await d.keeper.request('manual', 0)).status).toBe('in-sync');
    });
  }, 120_000);

  // Without the followed part, which proves a commit elsewhere left the owned tables alone without any read.
  it('after a commit elsewhere, a pass confirms the owners by digests and decodes nothing; tampering is still repaired', async () => {
    await withDaemon('own-digest', async ({ d, sock, ns }) => {
      await Promise.all(Array.from({ length: 70 }, (_, i) => d.api('PUT', `/v1/owners/${id(i)}`, ownerSpec(i, 4))));
      // A decoding read teaches the keeper every rule's digest.
      expect(await d.keeper.readBack('manual', 0)).toMatchObject({ status: 'in-sync' });
      const seen = spy(d.keeper.socket!);

      ns.nft('add table ip elsewhere');
      expect(await d.keeper.request('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0, generation: sock.generation() });
      expect(seen.listRules).toBe(0);
      expect(seen.listRuleDigests).toBeGreaterThan(0);

      // A rule of one owner changed in place (same handle): its digest differs, so the keeper decodes and repairs.
      const rules = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'o/o007/masq' });
      ns.nft(`replace rule ip nfkeeper o/o007/masq handle ${rules[1]!.handle} ip daddr 172.16.1.0/24 tcp dport 1001 accept comment "nfkeeper-owner=o007"`);
      const repaired = await d.keeper.request('manual', 0);
      expect(repaired).toMatchObject({ status: 'repaired', ops: 1 });
      expect(seen.listRules).toBeGreaterThan(0);
      const after = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'o/o007/masq' });
      expect(after.map((r) => r.handle)).toEqual(rules.map((r) => r.handle));
      expect(ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'o/o007/masq'])).toContain('tcp dport 1001 return');
    }, { follow: false });
  }, 120_000);

  it('many concurrent PUTs, re-PUTs and DELETEs of the same ids: the state file, the registry and the kernel agree; a bad request among them changes nothing', async () => {
    await withDaemon('own-mixed', async ({ d, sock, ns }) => {
      await Promise.all(Array.from({ length: 40 }, (_, i) => d.api('PUT', `/v1/owners/${id(i)}`, ownerSpec(i, 4))));
      // Out of id order, and the same id put, put anew and deleted within one burst.
      const order = Array.from({ length: 120 }, (_, k) => (k * 37) % 120);
      const bad = d.api('PUT', '/v1/owners/o500', { chains: [{ name: 'masq', rules: ['ip daddr 10.0.0.1 masquerad'] }] });
      const rs = await Promise.all(order.map((k) => {
        const i = k % 60;
        if (k >= 100 && i < 40) return d.api('DELETE', `/v1/owners/${id(i)}`);
        return d.api('PUT', `/v1/owners/${id(i)}`, ownerSpec(i + (k >= 60 ? 1000 : 0), 4));
      }));
      expect(rs.every((r) => r.status === 200 || r.status === 201 || r.status === 404), JSON.stringify(rs.filter((r) => r.status >= 300))).toBe(true);
      const refused = await bad;
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatch(/^chains\[0\]\.rules\[0\]: /);
      const registered = d.registry.list().map((o) => o.id);
      expect(registered).not.toContain('o500');
      // The state as a restart loads it (the file and its journal, if any).
      expect(loadOwners(d.config).map((o) => o.id).sort()).toEqual(registered);
      const chains = (await sock.listChains({ family: 'ip', table: 'nfkeeper' })).map((c) => c.name).filter((n) => n.startsWith('o/')).sort();
      expect(chains).toEqual(registered.map((i) => `o/${i}/masq`));
      // Every jump in the dispatch chain, in id order, each to its owner's chain; the owner's rules as put last.
      const post = await sock.listRules({ family: 'ip', table: 'nfkeeper', chain: 'postrouting' });
      const targets = post.flatMap((r) => r.exprs.flatMap((e) => (e.kind === 'immediate' && e.chain ? [e.chain] : [])));
      expect(targets).toEqual(registered.map((i) => `o/${i}/masq`));
      // Each jump as its owner's last PUT said (the address differs between the two specs put).
      const listed = ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting']);
      for (const o of d.registry.list()) {
        const addr = /ip saddr ([\d.]+)\/32 jump masq/.exec(o.spec.jumps.postrouting![0]!)![1];
        expect(listed).toContain(`ip saddr ${addr} jump o/${o.id}/masq`);
      }
      expect(await d.keeper.request('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0 });
    });
  }, 120_000);
});


describe('owners registered in flight, planned from the chains that changed', () => {
  it('after hundreds of PUTs, re-PUTs and DELETEs in flight, the kernel holds what a fresh daemon installs from the state file, and the keeper\'s known state is the kernel\'s', async () => {
    await withDaemon('own-flight', async ({ d, ns, dir }) => {
      let seed = 11;
      const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), Math.floor(seed / 65536) % n);
      const seen = spy(d.keeper.socket!);
      const live = new Set<string>();
      // Rounds of 1 to 24 requests in flight: new ids anywhere in the id order, changed specs, removals.
      for (let round = 0; round < 40; round++) {
        const n = 1 + rand(24);
        const reqs: Promise<unknown>[] = [];
        const ids = new Set<string>();
        for (let k = 0; k < n; k++) {
          const i = rand(400);
          const oid = id(i);
          if (ids.has(oid)) continue;  // one request per id a round: the answers then say what it is now
          ids.add(oid);
          if (live.has(oid) && rand(4) === 0) {
            live.delete(oid);
            reqs.push(d.api('DELETE', `/v1/owners/${oid}`).then((r) => expect(r.status).toBe(200)));
          } else {
            live.add(oid);
            reqs.push(d.api('PUT', `/v1/owners/${oid}`, ownerSpec(i + 1000 * rand(3), 2 + rand(6))).then((r) => expect([200, 201]).toContain(r.status)));
          }
        }
        await Promise.all(reqs);
      }
      expect(live.size).toBeGreaterThan(150);
      await d.keeper.idle();
      // Planned without reading: after the first group, no owners pass dumped a rule.
      expect(seen.listRules).toBe(0);

      // The known state is the kernel's: every chain's handles in order, and each rule the desired one.
      const desired = d.keeper.state.desired;
      const owned = desired.find((t) => t.name === 'nfkeeper')!;
      const kt = d.keeper.state.view.rulesOf(owned)!;
      expect(kt).toBeDefined();
      const kernel = await d.keeper.socket!.listRules({ family: 'ip', table: 'nfkeeper' });
      const byChain = new Map<string, number[]>();
      for (const r of kernel) byChain.set(r.chain, [...(byChain.get(r.chain) ?? []), r.handle!]);
      expect([...kt.observed.rules.keys()].sort()).toEqual(owned.chains.map((c) => c.name).sort());
      for (const c of owned.chains) {
        const rules = kt.observed.rules.get(c.name)!;
        expect(rules.map((r) => r.handle), c.name).toEqual(byChain.get(c.name) ?? []);
        rules.forEach((r, j) => expect(r.exprs, `${c.name} rule ${j}`).toBe(c.rules[j]!.compiled.exprs));
      }
      // And a full read (digests, then a decoding read where they fail) finds nothing to do.
      expect(await d.keeper.readBack('manual', 0)).toMatchObject({ status: 'in-sync', ops: 0 });

      // A fresh daemon in another namespace, from the state file alone, installs the same ruleset.
      const registered = listTable(ns);
      await d.stop();
      await withNetns(async (fresh) => {
        const d2 = await startDaemon(fresh, dir);
        try {
          expect(d2.registry.size).toBe(live.size);
          // Chains are listed in the order they were created: compared as a set of chains, each whole.
          const chains = (text: string) => text.trim().replace(/\n}$/, '').split('\n\tchain ').map((c) => c.trim()).sort();
          const want = chains(registered);
          expect(want.length).toBe(2 + live.size + 1);
          expect(chains(listTable(fresh))).toEqual(want);
        } finally {
          await d2.stop();
        }
      }, 'own-fresh');
    });
  }, 240_000);
});
