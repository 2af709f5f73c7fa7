/**
 * bench/apply-ab.ts's tables for any subset of its kinds (--kinds): what was run is printed, a
 * ratio or a pair only where both of its runs were made (`--kinds warm,before` threw, reading the
 * nft runs it had not made).
 */
import { describe, expect, it } from 'vitest';
import { applyAbTables, type Kind, type WorkRuns } from '../../bench/lib/apply-ab-summary.js';

const run = (ms: number) => ({ wallUs: ms * 1000, cpuUs: ms * 800, sysUs: ms * 100, rssKiB: 65_536, status: 0 });
const works = (kinds: readonly Kind[]): WorkRuns[] => ['10,000 rules', 'kube-proxy'].map((work) => ({
  work,
  runs: Object.fromEntries(kinds.map((k, i) => [k, [run(100 + i), run(110 + i), run(90 + i)]])),
}));
const subsets = (all: readonly Kind[]): Kind[][] =>
  Array.from({ length: (1 << all.length) - 1 }, (_, m) => all.filter((_k, i) => (m + 1) & (1 << i)));
const cells = (line: string) => line.split('|').length;

describe('apply-ab tables', () => {
  for (const [command, all] of [['apply', ['off', 'cold', 'warm', 'before', 'nft']], ['apply', ['after', 'before', 'nft']], ['check', ['off', 'cold', 'warm']]] as const) {
    it(`${command}, every subset of ${all.join(',')}: a row per work, as wide as its header; pairs only of kinds run`, () => {
      for (const kinds of subsets(all)) {
        const lines = applyAbTables(kinds, command, works(kinds), 3);
        const [head, rule, ...rest] = lines;
        const rows = rest.slice(0, 2);
        expect(rule, kinds.join(',')).toMatch(/^\|---\|/);
        for (const r of rows) expect(cells(r), `${kinds.join(',')}: ${r}`).toBe(cells(head!));
        expect(lines.join('\n')).not.toMatch(/NaN|undefined|Infinity/);
        for (const l of lines.filter((x) => x.includes('(lower in '))) {
          const [x, y] = l.split('|')[2]!.trim().split(' (')[0]!.split(' / ');
          expect(kinds, l).toContain(x);
          expect(kinds, l).toContain(y);
        }
      }
    });
  }

  it('warm,before: the ratio to before and its pair, nothing of nft', () => {
    const lines = applyAbTables(['warm', 'before'], 'apply', works(['warm', 'before']), 3);
    expect(lines[0]).toBe('| work | warm: wall / CPU p50 | before: wall / CPU p50 | warm: CPU / before | rounds |');
    expect(lines.filter((l) => l.includes('| warm / before |'))).toHaveLength(2);
    expect(lines.join('\n')).not.toMatch(/nft/);
  });
});
