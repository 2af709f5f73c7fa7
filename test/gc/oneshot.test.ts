/** The one-shot command and the grace period: pending without a state file, remembered with one. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { tempPathOf } from '../../src/base/atomic-file.js';
import { cli } from '../helpers/cli.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { DEAD, DEAD_CHAIN, LIVE, dir, file, gcYaml, restoreNomad, save } from './fixtures.js';

describe('nfkeeper gc and the grace period', () => {
  const ns = netnsPerTest('gcone', restoreNomad);

  it('with the configured grace and no state file, a not-live id is pending and nothing changes (exit 0)', async () => {
    const before = save(ns);
    const config = file(gcYaml('  grace: 5m\n', file(JSON.stringify([LIVE]))), 'yaml');
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    const r = await cli('gc', '--config', config, '--netns', ns.path);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`# id ${DEAD}: not live, kept for its grace period`);
    expect(r.out).toContain('no garbage');
    expect(sock.generation()).toBe(gen);
    sock.close();
    expect(save(ns)).toBe(before);
  });

  it('with gc.state, the first run starts the clock and a run after the grace collects', async () => {
    const state = join(dir, `state-${process.pid}.json`);
    const config = file(gcYaml(`  grace: 5m\n  state: ${state}\n`, file(JSON.stringify([LIVE]))), 'yaml');
    let r = await cli('gc', '--config', config, '--netns', ns.path, '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ collected: false, pending: [{ id: DEAD }] });
    const first = JSON.parse(readFileSync(state, 'utf8')) as { firstMissing: Record<string, number> };
    expect(Object.keys(first.firstMissing)).toEqual([DEAD]);
    // A dry run neither collects nor moves the clock.
    r = await cli('gc', '--config', config, '--netns', ns.path, '--dry-run');
    expect(r.code).toBe(0);
    expect(save(ns)).toContain(DEAD_CHAIN);
    // Six minutes later (as far as the state file knows).
    writeFileSync(state, JSON.stringify({ firstMissing: { [DEAD]: Date.now() - 6 * 60_000 } }));
    r = await cli('gc', '--config', config, '--netns', ns.path, '--dry-run');
    expect(r.code).toBe(1);
    r = await cli('gc', '--config', config, '--netns', ns.path);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/collected 1 ids in one batch \(3 operations\)/);
    expect(save(ns)).not.toContain(DEAD_CHAIN);
    expect(JSON.parse(readFileSync(state, 'utf8'))).toEqual({ firstMissing: {} });
    expect(existsSync(tempPathOf(state))).toBe(false);
  });

  it('a corrupt state file is an error and changes nothing', async () => {
    const state = file('{"firstMissing": {"x": "yesterday"}}');
    const config = file(gcYaml(`  grace: 5m\n  state: ${state}\n`, file(JSON.stringify([LIVE]))), 'yaml');
    const before = save(ns);
    const r = await cli('gc', '--config', config, '--netns', ns.path);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/gc state .* corrupt/);
    expect(save(ns)).toBe(before);
  });

  it('validate accepts a gc-only config', async () => {
    const r = await cli('validate', '--config', file(gcYaml('', '/var/lib/nomad/live-allocs.json'), 'yaml'));
    expect(r.code).toBe(0);
  });
});
