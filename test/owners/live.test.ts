/** Registered owners are live ids for foreign GC, in the one-shot `nfkeeper gc` and in the daemon's GC loop. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { beforeEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { GcLoop } from '../../src/gc/index.js';
import { DEAD, DEAD_CHAIN, LIVE, LIVE_CHAIN, restoreNomad, save } from '../gc/fixtures.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { ownersYaml } from './fixtures.js';

function configWithGc(dir: string, live: string): string {
  const f = join(dir, 'config.yaml');
  writeFileSync(f, `${ownersYaml(dir)}gc:\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  live:\n    file: ${live}\n  grace: 0s\n  enabled: true\n`);
  return f;
}

describe('owners as live ids for foreign GC', () => {
  const ns = netnsPerTest('own-live', restoreNomad);
  /** A temp dir with an empty live set (live.json) in it. */
  let dir: string;
  let live: string;
  beforeEach(() => {
    dir = tempDir('live');
    live = join(dir, 'live.json');
    writeFileSync(live, '[]');
  });

  it('nfkeeper gc keeps rules tagged with a registered owner id, even when the live set lacks it', async () => {
    const config = configWithGc(dir, live);
    mkdirSync(join(dir, 'state'));
    writeFileSync(join(dir, 'state', 'owners.json'), JSON.stringify({ version: 1, owners: { [LIVE]: {} } }));
    const r = await cli('gc', '--config', config, '--netns', ns.path, '--json');
    expect(r.err).toBe('');
    expect(JSON.parse(r.out).garbage.map((g: { id: string }) => g.id)).toEqual([DEAD]);
    expect(save(ns)).toContain(LIVE_CHAIN);
    expect(save(ns)).not.toContain(DEAD_CHAIN);
  });

  it('the daemon\'s GC loop reads the registered owners on every pass', async () => {
    const gc = parseConfig(`tables: []\ngc:\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  grace: 0s\n  enabled: true\n`).gc!;
    let owners = [LIVE, DEAD];
    const loop = new GcLoop({ gc, netns: ns.path, logger: pino({ level: 'silent' }), liveIds: () => owners });
    try {
      let r = await loop.runOnce();
      expect(r?.garbage).toEqual([]);
      owners = [LIVE];
      r = await loop.runOnce();
      expect(r?.garbage.map((g) => g.id)).toEqual([DEAD]);
      expect(save(ns)).toContain(LIVE_CHAIN);
      expect(save(ns)).not.toContain(DEAD_CHAIN);
    } finally {
      await loop.stop();
    }
  });
});
