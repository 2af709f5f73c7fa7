/**
 * The registry's queue, with a fake apply (pure logic; the kernel side is registration.test.ts).
 * An in-process caller that awaits each change and sends the next at once must not find the queue
 * without a drain: the drain used to clear its flag in a .finally() callback, after the caller had
 * already queued its next change, which then waited for ever.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { OwnerRegistry } from '../../src/owners/index.js';
import type { Owner } from '../../src/owners/index.js';
import { tempDir } from '../helpers/tmp.js';
import { ownerSpec, ownersYaml } from './fixtures.js';

describe('OwnerRegistry queue', () => {
  it('one change after another from the same turn: each is applied, in its own group', async () => {
    const dir = tempDir('registry-seq');
    const config = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
    const applied: number[] = [];
    const registry = new OwnerRegistry(config, [], async (owners: readonly Owner[]) => { applied.push(owners.length); });
    try {
      for (let i = 0; i < 5; i++) {
        // Awaited directly (a race with a timer adds turns that hid the hang): the test's timeout catches it.
        expect(await registry.put(`o${i}`, ownerSpec(i, 3)), `put ${i}`).toEqual({ existed: false, changed: true });
      }
      expect(await registry.remove('o2')).toEqual({ existed: true, changed: true });
      expect(applied).toEqual([1, 2, 3, 4, 5, 4]);
      expect(registry.list().map((o) => o.id)).toEqual(['o0', 'o1', 'o3', 'o4']);
    } finally {
      registry.close();
    }
  }, 10_000);

  it('counts a registration as live for foreign GC from its request on, while its commit and write are in flight', async () => {
    const dir = tempDir('registry-live');
    const config = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
    const during: string[][] = [];
    let registry!: OwnerRegistry;
    // The kernel's commit of the group: list() lacks the owner until the disk has it too.
    registry = new OwnerRegistry(config, [], async () => { during.push(registry.liveIds()); });
    try {
      const put = registry.put('o1', ownerSpec(1, 3));
      expect(registry.liveIds()).toEqual(['o1']);
      await put;
      expect(during).toEqual([['o1']]);
      expect(registry.liveIds()).toEqual(['o1']);
      expect(await registry.remove('o1')).toEqual({ existed: true, changed: true });
      expect(registry.liveIds()).toEqual([]);
    } finally {
      registry.close();
    }
  }, 10_000);
});
