/**
 * Real peer rulesets as whole tables (the whole-table proof), generated the way
 * each program writes them (test/helpers/peers): kube-proxy's nftables mode,
 * Calico's NAT table, the CNI portmap table, flannel's tables and Docker's
 * NAT rules translated from iptables-nft.
 *
 * The proof, for a table: nft's install is in sync with the file, nfkeeper's
 * install into an empty namespace lists and dumps (`nft --debug=netlink`)
 * exactly as nft's, nft's own listing given back is in sync too, and a
 * running daemon repairs a foreign deletion of one element (when the table
 * has any), one rule and one chain. Where nft's listing is lossy (a peer's
 * `lossyListing`: CNI portmap's `ip protocol tcp th dport … dnat ip addr .
 * port to …` lists as `tcp dport … dnat to A:P`, which nft installs as other
 * expressions), the listing is checked against nft's install of the listing,
 * and the two installs are shown to differ.
 *
 * 1. A whole file the loader accepts gets the proof.
 * 2. Of a file it does not accept yet, what it holds today (the loader's
 *    accepted subset, test/helpers/peers/reduce.ts) gets the proof, and
 *    everything taken out was refused with a file:line:column position. The
 *    whole file is refused at a position with nothing written to the kernel,
 *    and its own proof is a todo naming that first refusal; it becomes a
 *    test by itself once the loader accepts the file.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { nfk, waitFor } from '../cli/spawn.js';
import { cli } from '../helpers/cli.js';
import { createNetns, withNetns, type Netns } from '../helpers/netns.js';
import { byChain, netlinkDump } from '../helpers/peers/dump.js';
import { PEERS, type Peer, type PeerTable } from '../helpers/peers/index.js';
import { reduce } from '../helpers/peers/reduce.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('peers');
const slug = (s: string) => s.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase();

/** Each peer's file, made once (Docker's needs iptables-restore-translate, run in a namespace of its own). */
const FILES = new Map<string, string>();
function fileOf(peer: Peer): string {
  let text = FILES.get(peer.name);
  if (text === undefined) {
    const ns = createNetns('peers-gen');
    try {
      text = peer.file(ns, dir);
    } finally {
      ns.remove();
    }
    FILES.set(peer.name, text);
  }
  return text;
}

function save(name: string, text: string): string {
  const path = join(dir, `${slug(name)}.nft`);
  writeFileSync(path, text);
  return path;
}

const listing = (ns: Netns, t: PeerTable) => ns.exec('nft', ['list', 'table', t.family, t.table]);
const listings = (ns: Netns, tables: PeerTable[]) => tables.map((t) => listing(ns, t)).join('');
const dumps = (ns: Netns, tables: PeerTable[]) => tables.map((t) => netlinkDump(ns, t.family, t.table)).join('\n');

describe('peer tables: what nfkeeper holds of each today is kept exactly as nft installs it', () => {
  for (const peer of PEERS) {
    it(`${peer.name}: the accepted subset`, { timeout: 600_000 }, async () => {
      const text = fileOf(peer);
      const r = reduce(text, `${slug(peer.name)}.nft`);
      // Something of every peer is held, and every refusal names a line of the file.
      expect(r.rules.kept, peer.name).toBeGreaterThan(0);
      const lines = text.split('\n');
      for (const x of [...r.refused, ...r.stripped]) {
        expect(lines[x.line - 1], `${peer.name}: ${x.reason}`).toBe(x.text);
        expect(x.text.trim(), x.reason).not.toBe('');
      }
      // A file accepted whole gets its proof below.
      if (r.first === undefined) return;
      const tables = peer.tables.filter((t) => r.text.includes(` ${t.family} ${t.table}`));
      await fullProof(`${peer.name} (subset)`, tables, r.text, peer.lossyListing);
    });
  }
});

/** The rule printed last in `nft -a list table`, and the chain it is in. */
function lastRule(ns: Netns, t: PeerTable): { chain: string; handle: string } | undefined {
  let chain = '';
  let found: { chain: string; handle: string } | undefined;
  for (const line of ns.exec('nft', ['-a', 'list', 'table', t.family, t.table]).split('\n')) {
    const c = /^\tchain (\S+) \{/.exec(line);
    if (c) chain = c[1]!;
    const h = /^\t\t(?!type ).* # handle (\d+)$/.exec(line);
    if (h && chain) found = { chain, handle: h[1]! };
  }
  return found;
}

/** The last base chain of the listing (no rule can refer to one, so it can be deleted from outside). */
function lastBaseChain(ns: Netns, t: PeerTable): string | undefined {
  let chain = '';
  let found: string | undefined;
  for (const line of listing(ns, t).split('\n')) {
    const c = /^\tchain (\S+) \{/.exec(line);
    if (c) chain = c[1]!;
    if (/^\t\ttype \S+ hook /.test(line)) found = chain;
  }
  return found;
}

async function fullProof(name: string, tables: PeerTable[], text: string, lossyListing?: string): Promise<void> {
  const peer = { name, tables };
  const path = save(name, text);
  await withNetns(async (a) => {
    a.nft(text);
    const expected = listings(a, peer.tables);
    // The file and nft's listing of its install are both in sync with the install.
    const listingPath = save(`${peer.name}-listing`, expected);
    for (const [what, source] of [['file', path], ['listing', listingPath]] as const) {
      if (what === 'listing' && lossyListing) continue;
      const check = await cli('check', '--config', source, '--netns', a.path);
      expect(check.err, what).toBe('');
      expect(check.code, `${what}: ${check.out}`).toBe(0);
    }
    if (lossyListing) {
      // nft's listing is not its install (lossyListing says why): the listing is in sync with what
      // nft installs from the listing, and that is another ruleset than the file's
      await withNetns(async (l) => {
        l.nft(expected);
        expect(dumps(l, peer.tables), lossyListing).not.toBe(dumps(a, peer.tables));
        const check = await cli('check', '--config', listingPath, '--netns', l.path);
        expect(check.err, 'listing').toBe('');
        expect(check.code, `listing: ${check.out}`).toBe(0);
      }, 'peers-listing');
    }
    await withNetns(async (b) => {
      const apply = await cli('apply', '--config', path, '--netns', b.path);
      expect(apply.err).toBe('');
      expect(apply.code).toBe(0);
      expect(listings(b, peer.tables)).toBe(expected);
      expect(dumps(b, peer.tables)).toBe(dumps(a, peer.tables));
    }, 'peers-apply');
    // A running daemon installs it into an empty namespace and repairs what others delete.
    await withNetns(async (c) => {
      const daemon = nfk(['run', '--config', path, '--netns', c.path, '--no-metrics']);
      // After a chain is created again it is listed last: compare chain by chain.
      const want = byChain(expected);
      const same = () => {
        try {
          return byChain(listings(c, peer.tables)) === want;
        } catch {
          return false;
        }
      };
      try {
        await waitFor(`${peer.name} installed by the daemon`, same, 120_000);
        const t = peer.tables[0]!;
        const element = /^add element (\S+) (\S+) (\S+) \{ (.*?)(?: comment "[^"]*")?(?: : .*)? \}$/m.exec(text);
        if (element) {
          // (The daemon may have repaired it before the next line runs: nft's exit status is the proof of the deletion.)
          c.exec('nft', ['delete', 'element', element[1]!, element[2]!, element[3]!, `{ ${element[4]} }`]);
          await waitFor(`${peer.name}: the element repaired`, same, 120_000);
        }
        const rule = lastRule(c, t);
        expect(rule, peer.name).toBeDefined();
        c.exec('nft', ['delete', 'rule', t.family, t.table, rule!.chain, 'handle', rule!.handle]);
        await waitFor(`${peer.name}: the rule repaired`, same, 120_000);
        expect(lastRule(c, t)!.handle, 'a new rule, not the deleted one').not.toBe(rule!.handle);
        const chain = lastBaseChain(c, t);
        expect(chain, peer.name).toBeDefined();
        c.nft(`flush chain ${t.family} ${t.table} ${chain}\ndelete chain ${t.family} ${t.table} ${chain}\n`);
        await waitFor(`${peer.name}: the chain repaired`, same, 120_000);
        expect(byChain(dumps(c, peer.tables))).toBe(byChain(dumps(a, peer.tables)));
      } finally {
        daemon.child.kill('SIGTERM');
        await daemon.exited;
      }
    }, 'peers-daemon');
  }, 'peers-nft');
}

describe('peer tables, whole', () => {
  for (const peer of PEERS) {
    const text = fileOf(peer);
    let refusal: ConfigError | undefined;
    try {
      parseNftConfig(text, `${slug(peer.name)}.nft`);
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      refusal = e;
    }
    if (!refusal) {
      it(`${peer.name}: nft's install is in sync, nfkeeper's is nft's, a daemon repairs an element, a rule and a chain`,
        { timeout: 600_000 }, () => fullProof(peer.name, peer.tables, text, peer.lossyListing));
      continue;
    }
    it.todo(`${peer.name}: the whole table (the loader refuses it first at ${refusal.message.split('\n')[0]})`);
    it(`${peer.name}: refused at a position, nothing written`, async () => {
      const path = save(peer.name, text);
      const line = text.split('\n')[refusal.line - 1] ?? '';
      expect(refusal.column).toBeGreaterThanOrEqual(1);
      expect(refusal.column).toBeLessThanOrEqual(line.length + 1);
      await withNetns(async (ns) => {
        const r = await cli('apply', '--config', path, '--netns', ns.path);
        expect(r.code).toBe(2);
        expect(r.err.split('\n')[0]).toContain(`${path}:${refusal.line}:${refusal.column}: ${refusal.reason.split('\n')[0]}`);
        expect(ns.exec('nft', ['list', 'tables'])).toBe('');
      }, 'peers-refused');
    });
  }
});
