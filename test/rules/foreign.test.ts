/**
 * Rules written by iptables-nft (as Nomad/CNI and Docker do) are read back
 * from a real kernel: they render, with xt matches and targets marked and the
 * `-m comment` tags readable, instead of failing.
 */
import { describe, expect, it } from 'vitest';
import { open } from '../../src/index.js';
import { renderRule, xtComments } from '../../src/rules/index.js';
import { withNetns } from '../helpers/netns.js';

const TAG = 'name: "nomad" id: "3e803d29-4f9d-ad8b-adb6-31456a39db69"';

describe('iptables-nft rules from the kernel', () => {
  it('render with xt parts marked and xt comments decoded', async () => {
    await withNetns(async (ns) => {
      const ipt = (...args: string[]) => ns.exec('iptables-nft', ['-t', 'nat', ...args]);
      ipt('-N', 'CNI-6fcd2f53d5f720ec4eb5f04d');
      ipt('-A', 'POSTROUTING', '-s', '172.26.64.102', '-m', 'comment', '--comment', TAG, '-j', 'CNI-6fcd2f53d5f720ec4eb5f04d');
      ipt('-A', 'CNI-6fcd2f53d5f720ec4eb5f04d', '!', '-d', '224.0.0.0/4', '-m', 'comment', '--comment', TAG, '-j', 'MASQUERADE');
      ipt('-A', 'POSTROUTING', '-m', 'mark', '--mark', '0x2000/0x2000', '-j', 'MASQUERADE');
      ipt('-A', 'POSTROUTING', '-s', '172.17.0.0/16', '!', '-o', 'docker0', '-j', 'MASQUERADE');
      ipt('-A', 'POSTROUTING', '-p', 'tcp', '--dport', '1000:2000', '-j', 'RETURN');
      const sock = open({ netns: ns.path });
      try {
        const rules = await sock.listRules({ family: 'ip', table: 'nat' });
        const text = rules.map((r) => `${r.chain}: ${renderRule(r, 'ip')}`);
        const tagText = JSON.stringify(TAG);
        expect(text).toEqual([
          `CNI-6fcd2f53d5f720ec4eb5f04d: ip daddr != 224.0.0.0/4 <unsupported: xt match "comment" ${tagText}> counter <unsupported: xt target "MASQUERADE">`,
          `POSTROUTING: ip saddr 172.26.64.102 <unsupported: xt match "comment" ${tagText}> counter jump CNI-6fcd2f53d5f720ec4eb5f04d`,
          'POSTROUTING: meta mark & 0x00002000 == 0x00002000 counter <unsupported: xt target "MASQUERADE">',
          'POSTROUTING: oifname != "docker0" ip saddr 172.17.0.0/16 counter <unsupported: xt target "MASQUERADE">',
          'POSTROUTING: tcp dport 1000-2000 counter return',
        ]);
        expect(rules.map((r) => xtComments(r))).toEqual([[TAG], [TAG], [], [], []]);
      } finally {
        sock.close();
      }
    }, 'ipt');
  });
});
