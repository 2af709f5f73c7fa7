/**
 * A short hostile neighbour (the 20 s run with the daemon's defaults is
 * bench/hostile.ts): another socket deletes the masquerade rule every 10 ms.
 * The back-off engages and is reported, repairs stay well below deletions,
 * the rules are back within one back-off step after the neighbour stops, and
 * the fight ends by itself in a quiet namespace, with no commit by anyone.
 */
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { Batch } from '../../src/index.js';
import { withKeeper } from '../helpers/keeper.js';
import { sleep } from '../helpers/wait.js';
import { FLANNEL_RULES, captureLog, chainLines, flannelConfig } from '../keeper/helpers.js';

const CHAIN = { family: 'ip', table: 'nfkeeper', chain: 'postrouting' } as const;
const FIGHT = { threshold: 3, windowMs: 5000, baseMs: 50, capMs: 400, quietMs: 800 };

describe('hostile neighbour (short)', () => {
  it('backs off, reports it, is back within one step after, and the fight ends in a quiet namespace', async () => {
    const log = captureLog();
    await withKeeper({ tag: 'hostile', config: flannelConfig(), intervalMs: 100, fight: FIGHT, logger: log.logger }, async ({ ns, keeper, sock }) => {
      const levels: number[] = [];
      keeper.on('fight', (l: number) => levels.push(l));
      let deletions = 0;
      const t0 = performance.now();
      while (performance.now() - t0 < 2000) {
        const masq = (await sock.listRules(CHAIN)).find((r) => r.exprs.some((e) => e.kind === 'masq'));
        if (masq) await sock.commit(new Batch().delete('rule', { ...CHAIN, handle: masq.handle! })).then(() => deletions++, () => undefined);
        await sleep(10);
      }
      const repairs = (await keeper.metrics.repairs.get()).values.reduce((a, v) => a + v.value, 0);
      const peak = Math.max(...levels);
      expect(peak).toBeGreaterThanOrEqual(2);
      expect((await keeper.metrics.fightLevel.get()).values[0]!.value).toBeGreaterThanOrEqual(1);
      expect(repairs).toBeLessThan(deletions);
      // One warning per escalation, at warn severity (a field named `level` once overwrote pino's own).
      const warnings = log.lines.filter((l) => String(l.msg).startsWith('something keeps undoing'));
      expect(warnings.length).toBe(levels.filter((l) => l > 0).length);
      for (const w of warnings) expect(w).toMatchObject({ level: 40, fightLevel: expect.any(Number) });

      // Back within one back-off step (at most the 400 ms cap here), with slack for a loaded machine.
      const tStop = performance.now();
      while (chainLines(ns, 'ip', 'nfkeeper', 'postrouting').length !== 4 && performance.now() - tStop < 5000) await sleep(20);
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual(FLANNEL_RULES);
      expect(performance.now() - tStop).toBeLessThan(FIGHT.capMs + 1500);

      // Nobody commits any more: the 100 ms ticks alone must end the fight.
      await keeper.idle();
      const gen = sock.generation();
      const quietStart = performance.now();
      while (levels.at(-1) !== 0 && performance.now() - quietStart < 8000) await sleep(50);
      expect(levels.at(-1)).toBe(0);
      expect((await keeper.metrics.fightLevel.get()).values[0]!.value).toBe(0);
      expect(sock.generation()).toBe(gen);
    });
  }, 60_000);
});
