/**
 * Foreign GC and `cleanup` on a busy node: another program commits to a table of its own all the
 * time. Their batches are guarded by the generation their reads were made at; refused by such a
 * commit, they open the resend proof (a monitor of the tables they read, GuardOptions.proof) and,
 * from the next plan on, a refused batch is sent again, guarded by the later generation, where no
 * commit since the plan named a table the plan read or the batch touches. A commit that did (a
 * live-tagged rule added to the chain GC deletes) makes it scan again: nothing re-created live is
 * deleted.
 */
import { describe, expect, it } from 'vitest';
import { GraceTracker, GcLoop, collect } from '../../src/gc/index.js';
import { loadConfig, parseConfig } from '../../src/config/config.js';
import { cleanup, tablesProof } from '../../src/keeper/oneshot.js';
import { TableOwnedError } from '../../src/keeper/table.js';
import { kernelHost } from '../../src/netlink/host.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import pino from 'pino';
import { cli } from '../helpers/cli.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import type { Netns } from '../helpers/netns.js';
import { nfk, waitFor } from '../cli/spawn.js';
import { DEAD, DEAD_CHAIN, LIVE, LIVE_CHAIN, file, gcYaml, restoreNomad, save, tag } from './fixtures.js';

const foreign = parseConfig(gcYaml()).gc!.foreign;
/** What GC must leave of the Nomad seed: every line but the dead allocation's. */
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

/**
 * `sock`'s commits and resends, each refused or not; `between(n)` runs before its n-th commit (from 1).
 * The commit socket of the code under test, as guard-resend's tests wrap it.
 */
function traced(sock: NftSocket, between: (n: number) => void) {
  const sent: { how: 'commit' | 'recommit'; generation?: number; refused?: boolean }[] = [];
  const commit = sock.commit.bind(sock);
  const recommit = sock.recommit.bind(sock);
  let commits = 0;
  sock.commit = async (batch, options = {}) => {
    const s: (typeof sent)[number] = { how: 'commit', generation: options.expectGeneration };
    sent.push(s);
    between(++commits);
    try {
      return await commit(batch, options);
    } catch (e) {
      s.refused = true;
      throw e;
    }
  };
  sock.recommit = async (batch, generation) => {
    const s: (typeof sent)[number] = { how: 'recommit', generation };
    sent.push(s);
    const r = await recommit(batch, generation);
    if (r === false) s.refused = true;
    return r;
  };
  return sent;
}

const proofIn = (ns: Netns) => tablesProof(kernelHost(ns.path).watch);

describe('foreign GC under a neighbour', () => {
  const ns = netnsPerTest('gc-neigh', restoreNomad);

  it('nfkeeper gc exits 0 under a neighbour committing as fast as it can, and removes exactly the dead allocation', async () => {
    const before = save(ns);
    const neighbour = await startNeighbour(ns.path, 'max');
    let r: Awaited<ReturnType<typeof cli>>;
    let counts: { commits: number; failed: number };
    try {
      r = await cli('gc', '--config', file(gcYaml(), 'yaml'), '--netns', ns.path, '--live-file', file(JSON.stringify([LIVE])), '--grace', '0s', '--json');
    } finally {
      counts = await neighbour.stop();
    }
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ collected: true, garbage: [{ id: DEAD }] });
    expect(counts.commits).toBeGreaterThan(100);
    expect(save(ns)).toBe(collected(before));
  });

  it('the daemon\'s GC pass collects under the same neighbour, exactly', async () => {
    const before = save(ns);
    const gc = parseConfig(`tables: []\ngc:\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  grace: 0s\n  enabled: true\n`).gc!;
    const loop = new GcLoop({ gc, netns: ns.path, logger: pino({ level: 'silent' }), liveIds: () => [LIVE], proof: proofIn(ns) });
    const neighbour = await startNeighbour(ns.path, 'max');
    try {
      const r = await loop.runOnce();
      expect(r).toMatchObject({ collected: true });
      expect(r!.garbage.map((g) => g.id)).toEqual([DEAD]);
    } finally {
      await neighbour.stop();
      await loop.stop();
    }
    expect(loop.totals.errors).toBe(0);
    expect(save(ns)).toBe(collected(before));
  });

  it('nfkeeper run\'s periodic GC collects under the same neighbour, with no failed pass', { timeout: 120_000 }, async () => {
    const before = save(ns);
    const config = file(gcYaml('  grace: 0s\n  interval: 1s\n  enabled: true\n', file(JSON.stringify([LIVE]))), 'yaml');
    const neighbour = await startNeighbour(ns.path, 'max');
    const r = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--no-cache-dir', '--socket', `${file('', 'sock')}.s`]);
    try {
      await waitFor('foreign garbage collected', () => r.logs().some((l) => l.msg === 'foreign garbage collected' || String(l.msg).startsWith('foreign gc pass failed'))
        || r.child.exitCode !== null, 90_000);
      expect(r.logs().filter((l) => String(l.msg).startsWith('foreign gc pass failed'))).toEqual([]);
      expect(r.logs().find((l) => l.msg === 'foreign garbage collected')).toMatchObject({ ids: [DEAD] });
    } finally {
      await neighbour.stop();
      r.child.kill('SIGTERM');
    }
    expect((await r.exited).code).toBe(0);
    expect(save(ns)).toBe(collected(before));
  });

  it('a batch refused by a commit to another table is sent again as planned, from the plan after the first refusal', async () => {
    const before = save(ns);
    const sock = open({ netns: ns.path });
    const other = open({ netns: ns.path });
    try {
      let n = 0;
      // Before each of the first two commits another socket commits to a table of its own.
      const sent = traced(sock, (k) => {
        if (k <= 2) other.commitNow([{ verb: n++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
      });
      const r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs: 0, tracker: new GraceTracker(), proof: proofIn(ns) });
      // The first plan, read before the monitor joined: scanned again; the second, proved: sent again.
      expect(sent.map((s) => [s.how, !!s.refused])).toEqual([['commit', true], ['commit', true], ['recommit', false]]);
      expect(sent[2]!.generation).toBeGreaterThan(sent[1]!.generation!);
      expect(r).toMatchObject({ collected: true, attempts: 2 });
      expect(save(ns)).toBe(collected(before));
    } finally {
      other.close();
      sock.close();
    }
  });

  it('an id that became live (an owner registered) after the scan fails the proof: it scans again and keeps that id\'s rules', async () => {
    const before = save(ns);
    const sock = open({ netns: ns.path });
    const other = open({ netns: ns.path });
    const registered = [LIVE];
    try {
      let n = 0;
      const sent = traced(sock, (k) => {
        if (k <= 2) other.commitNow([{ verb: n++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
        // The daemon's registry takes the dead id's owner before the second plan's commit.
        if (k === 2) registered.push(DEAD);
      });
      const r = await collect(sock, { foreign, live: new Set(), liveIds: () => registered, graceMs: 0, tracker: new GraceTracker(), proof: proofIn(ns) });
      expect(sent.map((s) => s.how)).toEqual(['commit', 'commit']);
      expect(r).toMatchObject({ collected: false, garbage: [] });
      expect(save(ns)).toBe(before);
    } finally {
      other.close();
      sock.close();
    }
  });

  it('a live rule added by iptables-nft to the chain it deletes fails the proof: it scans again and keeps the chain and that rule', async () => {
    const sock = open({ netns: ns.path });
    const other = open({ netns: ns.path });
    const liveRule = ['-t', 'nat', '-A', DEAD_CHAIN, '-d', '10.9.9.9/32', '-m', 'comment', '--comment', `name: "nomad" id: "${LIVE}"`, '-j', 'ACCEPT'];
    try {
      const sent = traced(sock, (k) => {
        // The first refusal opens the proof; before the second plan's commit the neighbour commits
        // and, after it, iptables-nft adds a live-tagged rule to the dead allocation's chain.
        if (k === 1) other.commitNow([{ verb: 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
        if (k === 2) {
          other.commitNow([{ verb: 'delete', object: 'table', family: 'ip', name: 'neighbour' }]);
          ns.exec('iptables-nft', liveRule);
        }
      });
      const r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs: 0, tracker: new GraceTracker(), proof: proofIn(ns) });
      // Never sent again as planned: the third plan saw the live rule.
      expect(sent.map((s) => s.how)).toEqual(['commit', 'commit', 'commit']);
      expect(r.attempts).toBe(3);
      const after = save(ns);
      expect(after).toContain(`:${DEAD_CHAIN} - [0:0]`);
      expect(after).toContain(`-A ${DEAD_CHAIN} -d 10.9.9.9/32 -m comment --comment ${tag(LIVE)} -j ACCEPT`);
      // The dead id's own rules go; the chain, which a live rule is in now, stays.
      expect(after.split('\n').filter((l) => l.includes(DEAD))).toEqual([]);
      expect(after).toContain(LIVE_CHAIN);
    } finally {
      other.close();
      sock.close();
    }
  });
});

describe('cleanup under a neighbour', () => {
  const ns = netnsPerTest('cleanup-neigh');
  const config = () => file('tables:\n'
    + '  - { family: ip, name: a, chains: [{ name: post, type: nat, hook: postrouting, priority: srcnat, rules: [masquerade] }] }\n'
    + '  - { family: inet, name: b, chains: [{ name: c, rules: ["tcp dport 22 accept"] }] }\n', 'yaml');

  it('nfkeeper cleanup exits 0 under a neighbour committing as fast as it can, and removes exactly its tables', async () => {
    const c = config();
    expect((await cli('apply', '--config', c, '--netns', ns.path, '--no-cache-dir')).code).toBe(0);
    ns.nft('add table ip kept\nadd chain ip kept k\n');
    const neighbour = await startNeighbour(ns.path, 'max');
    let r: Awaited<ReturnType<typeof cli>>;
    try {
      r = await cli('cleanup', '--config', c, '--netns', ns.path, '--json');
    } finally {
      await neighbour.stop();
    }
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toEqual({ removed: ['ip a', 'inet b'] });
    expect(ns.exec('nft', ['list', 'tables']).split('\n').filter((l) => l && !l.includes('neighbour'))).toEqual(['table ip kept']);
  });

  it('a batch refused by a commit to another table is sent again as planned, from the plan after the first refusal', async () => {
    const sock = open({ netns: ns.path });
    const other = open({ netns: ns.path });
    try {
      ns.nft('add table ip a\nadd table inet b\n');
      let n = 0;
      const sent = traced(sock, (k) => {
        if (k <= 2) other.commitNow([{ verb: n++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
      });
      const removed = await cleanup(sock, loadConfig(config()), { proof: proofIn(ns) });
      expect(sent.map((s) => [s.how, !!s.refused])).toEqual([['commit', true], ['commit', true], ['recommit', false]]);
      expect(removed).toEqual(['ip a', 'inet b']);
      expect(ns.exec('nft', ['list', 'tables'])).toBe('');
    } finally {
      other.close();
      sock.close();
    }
  });

  it('a table taken over between its read and the commit (another socket owns it now) is read again and not deleted', async () => {
    const sock = open({ netns: ns.path });
    const other = open({ netns: ns.path });
    try {
      const c = parseConfig('tables:\n  - { family: ip, name: a, chains: [] }\n');
      ns.nft('table ip a { }\n');
      traced(sock, (k) => {
        // Deleted and created again, owned by the other socket (protect mode's owner flag).
        if (k === 1) other.commitNow([{ verb: 'delete', object: 'table', family: 'ip', name: 'a' }, { verb: 'add', object: 'table', family: 'ip', name: 'a', flags: 0x2 }]);
      });
      const e = await cleanup(sock, c, { proof: proofIn(ns) }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(TableOwnedError);
      expect(ns.exec('nft', ['list', 'tables'])).toContain('table ip a');
    } finally {
      other.close();
      sock.close();
    }
  });
});
