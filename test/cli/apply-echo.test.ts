/**
 * `nfkeeper apply` verifies its commit from the commit's echo, not by reading the chain back: the
 * kernel echoes every rule it added with the digest of what it holds, each the digest of what was
 * sent, and the guard proves the batch was the only commit since its observation. Where that proof
 * fails it reads back as before, and repairs what the read finds: another writer between the commit
 * and the verification, an echo the receive buffer cut (ENOBUFS), a rule echoed otherwise than
 * sent. Rules that look up anonymous sets (kube-proxy's service chains) are proved by their digests
 * with those sets unnamed: the sets are the ones the batch created for them.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { checkOnce } from '../../src/keeper/oneshot.js';
import type { CommitResult } from '../../src/netlink/conn.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { open } from '../../src/netlink/socket.js';
import { watchedSocket } from '../helpers/watched-socket.js';

const N = 2000;
const ip = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

/** Chain c of n rules, then `extra`; with `d`, a regular chain d (that extra rules jump to). */
function yaml(n: number, extra: string[] = [], d = false): string {
  const rules = [...Array.from({ length: n }, (_, i) => `ip saddr ${ip(i)} tcp dport ${1 + i} counter accept`), ...extra.map((r) => JSON.stringify(r))];
  return ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c', '        type: filter', '        hook: forward',
    '        priority: filter', '        policy: accept', '        rules:', ...rules.map((r) => `          - ${r}`),
    ...(d ? ['      - name: d', '        rules: []'] : []), ''].join('\n');
}
const config = (n = N, extra?: string[], d?: boolean): Config => parseConfig(yaml(n, extra, d), 'big.yaml');

const chainRules = (ns: Netns) => ns.exec('nft', ['list', 'chain', 'ip', 'big', 'c']).split('\n').filter((l) => /accept|drop|return/.test(l) && !l.includes('policy'));

describe('apply verified from its commit\'s echo', { timeout: 120_000 }, () => {
  const ns = netnsPerTest('applyecho');

  it('an install of thousands of rules: no read after the commit; check then finds it in sync by a full read', async () => {
    const w = watchedSocket(ns);
    try {
      const r = await checkOnce(w.conn, config(), true);
      expect(r.ops).toBe(N + 2);
      // The observation before the commit found no table (nothing to read); after it, the echo.
      expect(w.seen.ruleReads).toBe(0);
      const echoed = w.seen.commits[0]!.result as CommitResult;
      expect(echoed.handles?.size).toBe(N);
      // Every rule's digest as echoed is the one sent (the table and the chain are not rules).
      expect(echoed.held!.slice(2)).toEqual(echoed.digests!.slice(2));
      expect(echoed.held!.slice(2).every((d) => /^[0-9a-f]{32}$/.test(d))).toBe(true);
    } finally {
      w.close();
    }
    expect(chainRules(ns)).toHaveLength(N);
    const again = await checkOnce(open({ netns: ns.path }), config(), false);
    expect(again.drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it("checkOnce's found: what the first observation found, once, before the commit (what apply renders its plan from meanwhile)", async () => {
    const w = watchedSocket(ns);
    try {
      const found: { drift: unknown; commitsBefore: number; rulesInKernel: number }[] = [];
      const r = await checkOnce(w.conn, config(10), true, [], {
        found: (drift) => found.push({ drift, commitsBefore: w.seen.commits.length, rulesInKernel: ns.exec('nft', ['list', 'ruleset']).split('\n').filter((l) => l.includes('accept')).length }),
      });
      expect(found).toEqual([{ drift: r.drift, commitsBefore: 0, rulesInKernel: 0 }]);
      expect(r.drift[0]!.drift.map((d) => d.kind)).toEqual(['table-missing']);
      expect(chainRules(ns)).toHaveLength(10);
    } finally {
      w.close();
    }
  });

  it('the command: applies, then says in sync; a second apply changes nothing', async () => {
    const dir = tempDir('applyecho');
    const file = join(dir, 'big.yaml');
    writeFileSync(file, yaml(N));
    const a = await cli('apply', '--config', file, '--netns', ns.path);
    expect(a.code).toBe(0);
    expect(a.out).toMatch(`applied ${N + 2} operations in one batch`);
    const before = ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
    const c = await cli('check', '--config', file, '--netns', ns.path);
    expect(c.code).toBe(0);
    const again = await cli('apply', '--config', file, '--netns', ns.path);
    expect(again.code).toBe(0);
    expect(ns.exec('nft', ['--debug=netlink', 'list', 'ruleset'])).toBe(before);
  });

  it('another writer deletes a rule between the commit and its verification: apply reads, finds it gone, and puts it back', async () => {
    let once = true;
    const w = watchedSocket(ns, {
      afterCommit: () => {
        if (!once) return;
        once = false;
        const handle = /handle (\d+)/.exec(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'big', 'c']).split('\n').find((l) => l.includes(`${ip(7)} `))!)![1];
        ns.nft(`delete rule ip big c handle ${handle}\n`);
      },
    });
    try {
      const r = await checkOnce(w.conn, config(), true);
      expect(w.seen.commits).toHaveLength(2);
      expect(r.ops).toBe(N + 2 + 1);
      expect(w.seen.ruleReads).toBeGreaterThan(0);
    } finally {
      w.close();
    }
    const rules = chainRules(ns);
    expect(rules).toHaveLength(N);
    expect(rules[7]).toMatch(`ip saddr ${ip(7)} tcp dport 8 counter`);
  });

  it('an echo cut by a full receive buffer (ENOBUFS): apply reads back instead, never takes it as verified', async () => {
    const w = watchedSocket(ns, { receiveBufferLimit: 64 * 1024 });
    try {
      const r = await checkOnce(w.conn, config(), true);
      expect(w.seen.commits[0]!.result).toMatchObject({ echoCut: true });
      expect(r.ops).toBe(N + 2);
      expect(w.seen.ruleReads).toBe(1);
    } finally {
      w.close();
    }
    expect(chainRules(ns)).toHaveLength(N);
  });

  it('a rule echoed otherwise than it was sent: apply reads back, and the read decides', async () => {
    const w = watchedSocket(ns, {
      afterCommit: (r) => {
        if (!r?.held) return;
        const held = r.held.slice();
        held[N - 5] = '0'.repeat(32);
        return { ...r, held };
      },
    });
    try {
      const r = await checkOnce(w.conn, config(), true);
      expect(r.ops).toBe(N + 2);
      // One digest dump of the chain, which shows every rule as desired: nothing more to do.
      expect(w.seen.ruleReads).toBe(1);
      expect(w.seen.commits).toHaveLength(1);
    } finally {
      w.close();
    }
  });

  const ANONYMOUS = ['ip daddr { 192.0.2.1, 192.0.2.9 } drop', 'numgen random mod 2 vmap { 0 : jump d, 1 : goto d }',
    'ip daddr . tcp dport { 192.0.2.1 . 80, 192.0.2.2 . 443 } drop'];
  const withAnonymous = (extra: string[]) => config(N, extra, true);

  it('rules that look up anonymous sets and maps: verified from the echo too, no read; check then finds them in sync', async () => {
    const w = watchedSocket(ns);
    try {
      const r = await checkOnce(w.conn, withAnonymous(ANONYMOUS), true);
      expect(r.ops).toBeGreaterThan(N + 3 + ANONYMOUS.length);
      expect(w.seen.ruleReads).toBe(0);
      const echoed = w.seen.commits[0]!.result as CommitResult;
      const anonymous = echoed.unnamed!.flatMap((d, i) => (d === undefined ? [] : [i]));
      expect(anonymous).toHaveLength(ANONYMOUS.length);
      for (const i of anonymous) expect(echoed.held![i]).toBe(echoed.unnamed![i]);
    } finally {
      w.close();
    }
    // (chainRules counts the rules with a verdict of their own: not the vmap's)
    expect(chainRules(ns)).toHaveLength(N + 2);
    expect(ns.exec('nft', ['list', 'chain', 'ip', 'big', 'c'])).toMatch(/numgen random mod 2 vmap \{ 0 : jump d, 1 : goto d \}/);
    const again = await checkOnce(open({ netns: ns.path }), withAnonymous(ANONYMOUS), false);
    expect(again.drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('a rule with an anonymous set echoed otherwise than it was sent: apply reads back, and the read decides', async () => {
    const w = watchedSocket(ns, {
      afterCommit: (r) => {
        if (!r?.held || !r.unnamed) return;
        const held = r.held.slice();
        const i = r.unnamed.findIndex((d) => d !== undefined);
        held[i] = '0'.repeat(32);
        return { ...r, held };
      },
    });
    try {
      const r = await checkOnce(w.conn, withAnonymous(ANONYMOUS), true);
      expect(w.seen.ruleReads).toBeGreaterThan(0);
      expect(w.seen.commits).toHaveLength(1);
      expect(r.ops).toBeGreaterThan(N + 3);
    } finally {
      w.close();
    }
    const again = await checkOnce(open({ netns: ns.path }), withAnonymous(ANONYMOUS), false);
    expect(again.drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('a table that holds anonymous sets already: a batch that adds none reads back; one that adds some is verified from the echo', async () => {
    const first = withAnonymous(ANONYMOUS.slice(0, 1));
    await checkOnce(open({ netns: ns.path }), first, true);
    // Another plain rule: the sets the observation saw are not the batch's.
    let w = watchedSocket(ns);
    try {
      await checkOnce(w.conn, withAnonymous([...ANONYMOUS.slice(0, 1), 'ip daddr 192.0.2.77 drop']), true);
      expect(w.seen.commits).toHaveLength(1);
      expect(w.seen.ruleReads).toBeGreaterThan(w.seen.readsBeforeCommit);
    } finally {
      w.close();
    }
    // Another rule with an anonymous map: every rule that looks one up is proved, the old ones by the observation.
    w = watchedSocket(ns);
    const last = withAnonymous([...ANONYMOUS.slice(0, 1), 'ip daddr 192.0.2.77 drop', ...ANONYMOUS.slice(1)]);
    try {
      await checkOnce(w.conn, last, true);
      // The observation read the table; after the commit nothing is read.
      expect(w.seen.commits).toHaveLength(1);
      expect(w.seen.readsBeforeCommit).toBeGreaterThan(0);
      expect(w.seen.ruleReads).toBe(w.seen.readsBeforeCommit);
      const again = watchedSocket(ns);
      try {
        await checkOnce(again.conn, last, true);
        expect(again.seen.commits).toHaveLength(0);
      } finally {
        again.close();
      }
    } finally {
      w.close();
    }
    expect(chainRules(ns)).toHaveLength(N + 3);
  });
});
