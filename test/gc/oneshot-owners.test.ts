/**
 * The one-shot `gc` beside a daemon that registers owners: an owner registered while gc runs (its
 * state file written, so acknowledged) is live for gc's plan, as the daemon's own gc asks its
 * registry (live-ids.test.ts). Here the state file is written while gc's scan reads the kernel.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config/config.js';
import { gcOnce } from '../../src/gc/command.js';
import { NftSocket } from '../../src/netlink/socket.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { tempDir } from '../helpers/tmp.js';
import { DEAD, DEAD_CHAIN, LIVE, file, restoreNomad, save } from './fixtures.js';

const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

describe('one-shot gc and owners registered while it runs', () => {
  const ns = netnsPerTest('gc-own', restoreNomad);
  afterEach(() => { vi.restoreAllMocks(); });

  async function run(registerDuringScan: boolean) {
    const dir = tempDir('gc-own');
    const config = file(`${ownersYaml(dir)}gc:
  grace: 0s
  foreign:
    - family: ip
      table: nat
      owner: nomad
  live:
    file: ${file(JSON.stringify([LIVE]))}
`, 'yaml');
    const stateFile = `${dir}/state/owners.json`;
    mkdirSync(dirname(stateFile), { recursive: true });
    const getTable = NftSocket.prototype.getTable;
    let registered = false;
    vi.spyOn(NftSocket.prototype, 'getTable').mockImplementation(async function (this: NftSocket, ...args: Parameters<typeof getTable>) {
      if (registerDuringScan && !registered) {
        // The daemon registers DEAD's allocation as an owner: its state file holds it from now on.
        registered = true;
        writeFileSync(stateFile, JSON.stringify({ version: 1, owners: { [DEAD]: ownerSpec(0) } }));
      }
      return getTable.apply(this, args);
    });
    const before = save(ns);
    const r = await gcOnce(loadConfig(config), { netns: ns.path });
    return { r, before, after: save(ns), registered };
  }

  it('an owner registered while the scan reads is live: its id\'s rules stay', async () => {
    const { r, before, after, registered } = await run(true);
    expect(registered).toBe(true);
    expect(r.garbage).toEqual([]);
    expect(after).toBe(before);
  });

  it('without one, the dead allocation is collected (the same run, the control)', async () => {
    const { r, before, after } = await run(false);
    expect(r.garbage.map((g) => g.id)).toEqual([DEAD]);
    expect(r.collected).toBe(true);
    expect(after).toBe(collected(before));
  });
});
