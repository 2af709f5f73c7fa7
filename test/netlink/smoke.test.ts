import { describe, expect, it } from 'vitest';
import { open } from '../../src/index.js';
import { withNetns } from '../helpers/netns.js';

describe('smoke', () => {
  it('opens a socket in a namespace and reads the generation', async () => {
    await withNetns(async (ns) => {
      const s = open({ netns: ns.path });
      const g = s.generation();
      expect(typeof g).toBe('number');
      ns.nft('add table ip t');
      expect(s.generation()).toBe(g + 1);
      expect(await s.listTables()).toEqual([expect.objectContaining({ family: 'ip', name: 't' })]);
      s.close();
    });
  });
});
