/** Foreign GC in the daemon: report-only until gc.enabled, grace clocks in memory. */
import pino from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { GcLoop } from '../../src/gc/index.js';
import { open } from '../../src/netlink/socket.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { sleep } from '../helpers/wait.js';
import { DEAD, DEAD_CHAIN, LIVE, file, gcYaml, restoreNomad, save } from './fixtures.js';

function logger() {
  const lines: { level: number; msg: string; ids?: string[]; wouldRemove?: string[] }[] = [];
  const stream = new Writable({ write(chunk: Buffer, _e, cb) { lines.push(JSON.parse(chunk.toString())); cb(); } });
  return { log: pino({ level: 'debug' }, stream), lines };
}

describe('GcLoop (the daemon)', () => {
  const ns = netnsPerTest('gcd', restoreNomad);

  it('reports without changing anything until gc.enabled, then collects after the grace period', async () => {
    const live = file(JSON.stringify([LIVE]));
    const gc = parseConfig(gcYaml('  grace: 5m\n', live)).gc!;
    const { log, lines } = logger();
    const loop = new GcLoop({ gc, netns: ns.path, logger: log });
    const before = save(ns);
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    try {
      const t0 = 10_000_000;
      let r = await loop.runOnce(t0);
      expect(r?.pending.map((p) => p.id)).toEqual([DEAD]);
      r = await loop.runOnce(t0 + 5 * 60_000);
      expect(r?.garbage.map((g) => g.id)).toEqual([DEAD]);
      expect(r?.collected).toBe(false);
      expect(sock.generation()).toBe(gen);
      expect(save(ns)).toBe(before);
      const warn = lines.find((l) => l.msg.startsWith('foreign garbage found'))!;
      expect(warn.ids).toEqual([DEAD]);
      expect(warn.wouldRemove?.join('\n')).toContain(`delete chain ip nat ${DEAD_CHAIN}`);

      loop.setConfig({ ...gc, enabled: true });
      r = await loop.runOnce(t0 + 6 * 60_000);
      expect(r?.collected).toBe(true);
      expect(sock.generation()).toBe(gen + 1);
      expect(save(ns)).not.toContain(DEAD_CHAIN);
      expect(loop.totals).toMatchObject({ runs: 3, found: 2, collected: 1, errors: 0 });
    } finally {
      sock.close();
      await loop.stop();
    }
  });

  it('a live set that cannot be read is logged and nothing is collected', async () => {
    const gc = parseConfig(gcYaml('  grace: 0s\n  enabled: true\n', file('not json'))).gc!;
    const { log, lines } = logger();
    const loop = new GcLoop({ gc, netns: ns.path, logger: log });
    const before = save(ns);
    expect(await loop.runOnce()).toBeUndefined();
    await loop.stop();
    expect(save(ns)).toBe(before);
    expect(lines.some((l) => l.msg.startsWith('foreign gc pass failed'))).toBe(true);
    expect(loop.totals.errors).toBe(1);
  });

  it('start() runs on its own timer and stop() ends it', async () => {
    const gc = parseConfig(gcYaml('  grace: 0s\n  enabled: true\n  interval: 1s\n', file(JSON.stringify([LIVE])))).gc!;
    const { log } = logger();
    const loop = new GcLoop({ gc, netns: ns.path, logger: log });
    loop.start();
    for (let i = 0; i < 50 && save(ns).includes(DEAD_CHAIN); i++) await sleep(50);
    await loop.stop();
    expect(save(ns)).not.toContain(DEAD_CHAIN);
    expect(loop.totals.collected).toBe(1);
  });
});
