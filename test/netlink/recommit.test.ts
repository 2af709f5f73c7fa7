/**
 * NftSocket.recommit: the batch the kernel last refused by its generation, sent again as encoded
 * with another generation (src/netlink/guard.ts sends it after proving its tables unchanged).
 */
import { describe, expect, it } from 'vitest';
import { GenerationMismatchError } from '../../src/base/errors.js';
import { Batch } from '../../src/netlink/batch.js';
import { open } from '../../src/netlink/socket.js';
import { socketPerTest } from '../helpers/netns-hooks.js';

const T = { family: 'ip' as const, name: 'own' };

describe('recommit', () => {
  const t = socketPerTest('recommit');

  function batch(rules: number): Batch {
    const b = new Batch().add('table', T).add('chain', { family: 'ip', table: 'own', name: 'c' });
    for (let i = 0; i < rules; i++) b.add('rule', { family: 'ip', table: 'own', chain: 'c', exprs: [{ kind: 'counter' }] });
    return b;
  }

  for (const rules of [2, 500]) {
    it(`sends the refused batch again under the new generation (${rules} rules: ${rules > 60 ? 'on the worker' : 'inline'})`, async () => {
      const { ns, sock } = t;
      const g = sock.generation();
      ns.nft('add table ip other\n');
      const b = batch(rules);
      await expect(sock.commit(b, { expectGeneration: g, echo: true })).rejects.toBeInstanceOf(GenerationMismatchError);
      // Still stale: refused again, and kept again.
      await expect(sock.recommit(b, g)).rejects.toBeInstanceOf(GenerationMismatchError);
      const r = await sock.recommit(b, sock.generation());
      expect(r && r.handles?.size).toBe(rules);
      expect((await sock.listRules({ family: 'ip', table: 'own', chain: 'c' })).length).toBe(rules);
      // Sent: nothing kept any more.
      expect(await sock.recommit(b, sock.generation())).toBe(false);
    });
  }

  it('sends nothing for another batch, or after another commit', async () => {
    const { ns, sock } = t;
    const g = sock.generation();
    ns.nft('add table ip other\n');
    const b = batch(2);
    await expect(sock.commit(b, { expectGeneration: g })).rejects.toBeInstanceOf(GenerationMismatchError);
    expect(await sock.recommit(batch(2), sock.generation())).toBe(false);
    await expect(sock.commit(b, { expectGeneration: g })).rejects.toBeInstanceOf(GenerationMismatchError);
    await sock.commit(new Batch().add('table', { family: 'ip', name: 'third' }));
    expect(await sock.recommit(b, sock.generation())).toBe(false);
    const other = open({ netns: ns.path });
    try {
      expect(await other.getTable('ip', 'own')).toBeUndefined();
    } finally {
      other.close();
    }
  });
});
