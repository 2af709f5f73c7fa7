/**
 * Rules written by iptables-nft decode without loss: -s/-d as native
 * payload/cmp, -m comment as an xt match whose info holds the comment, and
 * -j MASQUERADE / -j DNAT as xt targets. Replaying the decoded rules through
 * our commit in a fresh namespace gives the same iptables-nft-save text.
 */
import { describe, expect, it } from 'vitest';
import { open, type NftSocket, type Op } from '../../src/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { commentText, ip4, kubeProxyRestore, masqueradeInfo } from './fixtures.js';

const NOMAD_TAG = 'name: "nomad" id: "9d1e2f3a-0000-4c1b-8d2e-112233445566"';

/** iptables-nft-save -t nat without the timestamped comment lines. */
function saveNat(ns: Netns): string {
  return ns.exec('iptables-nft-save', ['-t', 'nat']).split('\n').filter((l) => !l.startsWith('#')).join('\n');
}

/** Ops that recreate the `ip nat` table, its chains and rules, from our own dumps. */
async function replayOps(s: NftSocket): Promise<Op[]> {
  const chains = await s.listChains({ family: 'ip', table: 'nat' });
  const rules = await s.listRules({ family: 'ip', table: 'nat' });
  const ops: Op[] = [{ verb: 'add', object: 'table', family: 'ip', name: 'nat' }];
  for (const { handle: _h, use: _u, ...c } of chains) ops.push({ verb: 'add', object: 'chain', ...c });
  for (const r of rules) {
    const op: Op = { verb: 'add', object: 'rule', family: r.family, table: r.table, chain: r.chain, exprs: r.exprs };
    if (r.userdata !== undefined) op.userdata = r.userdata;
    if (r.compat !== undefined) op.compat = r.compat;
    ops.push(op);
  }
  return ops;
}

async function replayInFreshNamespace(source: Netns): Promise<{ text: string; exprs: unknown[] }> {
  const src = open({ netns: source.path });
  let ops: Op[];
  let exprs: unknown[];
  try {
    ops = await replayOps(src);
    exprs = (await src.listRules({ family: 'ip', table: 'nat' })).map((r) => r.exprs);
  } finally {
    src.close();
  }
  return withNetns(async (dst) => {
    const s = open({ netns: dst.path });
    try {
      await s.commit(ops);
      const replayed = (await s.listRules({ family: 'ip', table: 'nat' })).map((r) => r.exprs);
      expect(replayed).toEqual(exprs);
    } finally {
      s.close();
    }
    return { text: saveNat(dst), exprs };
  }, 'ipt-dst');
}

describe('rules written by iptables-nft', () => {
  it('decode -s/-d, -m comment and -j MASQUERADE without loss', async () => {
    await withNetns(async (ns) => {
      ns.exec('iptables-nft', ['-t', 'nat', '-A', 'POSTROUTING', '-s', '10.0.0.0/24', '-d', '10.1.2.3',
        '-m', 'comment', '--comment', NOMAD_TAG, '-j', 'MASQUERADE']);
      const s = open({ netns: ns.path });
      try {
        const rules = await s.listRules({ family: 'ip', table: 'nat', chain: 'POSTROUTING' });
        expect(rules).toHaveLength(1);
        const exprs = rules[0]!.exprs;
        // -s 10.0.0.0/24: iptables-nft compares the first three bytes only.
        // -d 10.1.2.3: four bytes. The comment and MASQUERADE are xt.
        expect(exprs).toEqual([
          { kind: 'payload', base: 'network', offset: 12, len: 3, dreg: 1 },
          { kind: 'cmp', sreg: 1, op: 'eq', data: '0a0000' },
          { kind: 'payload', base: 'network', offset: 16, len: 4, dreg: 1 },
          { kind: 'cmp', sreg: 1, op: 'eq', data: ip4('10.1.2.3') },
          { kind: 'match', name: 'comment', rev: 0, info: expect.any(String) },
          { kind: 'counter', packets: 0, bytes: 0 },
          { kind: 'target', name: 'MASQUERADE', rev: 0, info: masqueradeInfo() },
        ]);
        const match = exprs[4]!;
        if (match.kind !== 'match') throw new Error('not a match');
        expect(match.info).toHaveLength(512); // 256 bytes
        expect(commentText(match.info)).toBe(NOMAD_TAG);
        // No -p: iptables-nft's compat is protocol 0.
        expect(rules[0]!.compat).toEqual({ proto: 0, flags: 0 });
        // nft shows such rules without the comment: it lives only in xt info.
        expect(ns.exec('nft', ['list', 'chain', 'ip', 'nat', 'POSTROUTING'])).not.toContain('nomad');
      } finally {
        s.close();
      }
      const before = saveNat(ns);
      expect(before).toContain(`-m comment --comment "name: \\"nomad\\" id: \\"9d1e2f3a-0000-4c1b-8d2e-112233445566\\""`);
      const { text } = await replayInFreshNamespace(ns);
      expect(text).toBe(before);
    }, 'ipt');
  });

  it('replays a mixed iptables-nft ruleset (xt DNAT, MASQUERADE --to-ports, user chains, negation)', async () => {
    await withNetns(async (ns) => {
      const ipt = (...args: string[]) => ns.exec('iptables-nft', ['-t', 'nat', ...args]);
      ipt('-A', 'POSTROUTING', '-s', '10.0.0.0/24', '-d', '10.1.2.3', '-m', 'comment', '--comment', NOMAD_TAG, '-j', 'MASQUERADE');
      ipt('-A', 'POSTROUTING', '-o', 'eth0', '-p', 'tcp', '-j', 'MASQUERADE', '--to-ports', '1024-2048');
      ipt('-A', 'PREROUTING', '-p', 'tcp', '-m', 'tcp', '--dport', '80', '-j', 'DNAT', '--to-destination', '10.0.0.5:8080');
      ipt('-N', 'NOMAD');
      ipt('-A', 'PREROUTING', '-j', 'NOMAD');
      ipt('-A', 'NOMAD', '!', '-s', '10.0.0.0/8', '-j', 'RETURN');
      ipt('-A', 'NOMAD', '-i', 'veth+', '-m', 'comment', '--comment', 'wildcard iface', '-j', 'ACCEPT');
      const before = saveNat(ns);
      expect(before.split('\n').filter((l) => l.startsWith('-A'))).toHaveLength(6);
      const { text, exprs } = await replayInFreshNamespace(ns);
      expect(text).toBe(before);
      const kinds = (exprs as { kind: string; name?: string }[][]).flat().map((e) => (e.name ? `${e.kind}:${e.name}` : e.kind));
      expect(kinds).toContain('target:DNAT');
      expect(kinds).toContain('target:MASQUERADE');
      expect(kinds).not.toContain('unknown');
    }, 'ipt');
  });

  it('replays a kube-proxy-like iptables-nft-restore ruleset', async () => {
    await withNetns(async (ns) => {
      ns.exec('iptables-nft-restore', [], kubeProxyRestore(200));
      const before = saveNat(ns);
      expect(before.split('\n').filter((l) => l.startsWith('-A')).length).toBe(205);

      // `-p tcp -m tcp` is an xt tcp match, which the kernel loads only with
      // NFTA_RULE_COMPAT proto 6; the dump does not carry it, listRules derives it.
      const src = open({ netns: ns.path });
      let ops: Op[];
      try {
        ops = await replayOps(src);
      } finally {
        src.close();
      }
      const withTcpMatch = ops.filter((o) => o.object === 'rule' && o.verb === 'add'
        && o.exprs?.some((e) => e.kind === 'match' && e.name === 'tcp'));
      expect(withTcpMatch.length).toBe(50); // the KUBE-SEP- DNAT rules (`--dport` alone is native payload)
      for (const o of withTcpMatch) expect(o.object === 'rule' && o.compat).toEqual({ proto: 6, flags: 0 });
      await withNetns(async (dst) => {
        const s = open({ netns: dst.path });
        try {
          const stripped = ops.map((o) => (o.object === 'rule' ? { ...o, compat: undefined } : o));
          const e = await s.commit(stripped).then(() => undefined, (x: unknown) => x);
          expect(e).toMatchObject({ errnoName: 'EINVAL' });
          expect(await s.listTables()).toEqual([]);
        } finally {
          s.close();
        }
      }, 'ipt-nocompat');

      const { text } = await replayInFreshNamespace(ns);
      expect(text).toBe(before);
    }, 'ipt');
  });
});
