/**
 * bench/apply-ab.ts's tables from its runs: medians per kind, the system time, the ratios by pairs.
 * Any subset of the kinds (--kinds): a ratio or a pair is printed only where both of its runs were made.
 */
import { summarizeRuns, type ProcessRun } from './whole.js';

export type Kind = 'off' | 'cold' | 'warm' | 'boot' | 'after' | 'before' | 'before-cold' | 'before-warm' | 'before-boot' | 'nft';

/** The other build's kinds, each the reference of ours of the same way (before-cold: cold's). */
const BEFORE_OF: Partial<Record<Kind, Kind>> = { cold: 'before-cold', warm: 'before-warm', boot: 'before-boot' };

/** One work's runs, per kind run, each kind the same number of rounds (a pair is a round's two). */
export interface WorkRuns { work: string; runs: Partial<Record<Kind, ProcessRun[]>> }

export const fmt = (us: number) => (us >= 1e6 ? `${(us / 1e6).toFixed(2)} s` : `${(us / 1e3).toFixed(0)} ms`);

/** The lines apply-ab prints once every work has run. */
export function applyAbTables(kinds: readonly Kind[], command: 'apply' | 'check', works: readonly WorkRuns[], reps: number): string[] {
  const has = (...ks: Kind[]) => ks.every((k) => kinds.includes(k));
  const ourKinds = kinds.filter((k) => !k.startsWith('before') && k !== 'nft');
  type Sum = (k: Kind) => ReturnType<typeof summarizeRuns>;
  // The ratios (of medians) of each of our kinds to the references run.
  const ratios = command === 'check' ? [] : ourKinds.flatMap((k) => [
    ...(has('before') ? [{ title: `${k}: CPU / before`, of: (sum: Sum) => sum(k).cpu.median / sum('before').cpu.median }] : []),
    ...(has('nft') ? [
      { title: `${k}: CPU / nft`, of: (sum: Sum) => sum(k).cpu.median / sum('nft').cpu.median },
      { title: `${k}: wall / nft`, of: (sum: Sum) => sum(k).wall.median / sum('nft').wall.median },
    ] : []),
  ]);
  const rows: string[] = [];
  const sysRows: string[] = [];
  const pairRows: string[] = [];
  for (const { work, runs } of works) {
    const sum = (k: Kind) => summarizeRuns(runs[k]!);
    // Pair by pair (x / y of the same round): the median ratio and how often x was lower.
    const pairs = (x: Kind, y: Kind, f: (r: ProcessRun) => number) => {
      const q = runs[x]!.map((r, i) => f(r) / f(runs[y]![i]!)).sort((u, v) => u - v);
      return `${q[q.length >> 1]!.toFixed(3)} (lower in ${q.filter((u) => u < 1).length} of ${q.length})`;
    };
    const rss = (x: Kind, y: Kind) => `${(sum(y).rssKiB / 1024).toFixed(0)} / ${(sum(x).rssKiB / 1024).toFixed(0)} MiB`;
    const pair = (x: Kind, y: Kind, what: string, withRss: boolean) =>
      pairRows.push(`| ${work} | ${what} | ${pairs(x, y, (r) => r.cpuUs)} | ${pairs(x, y, (r) => r.wallUs)} | ${withRss ? rss(x, y) : ''} |`);
    if (command === 'check') {
      if (has('warm', 'off')) pair('warm', 'off', 'warm / off (a hit against the compile)', true);
      if (has('cold', 'off')) pair('cold', 'off', 'cold / off (the compaction and the store)', true);
    } else {
      for (const k of ourKinds) {
        if (has('before')) pair(k, 'before', `${k} / before`, true);
        const same = BEFORE_OF[k];
        if (same && has(same)) pair(k, same, `${k} / ${same}`, true);
        if (has('nft')) pair(k, 'nft', `${k} / nft`, false);
      }
      if (has('cold', 'off')) pair('cold', 'off', "cold / off (the store's cost)", false);
      // The kernel's own share: the system time of each (median), beside the CPU.
      const sys = (rs: ProcessRun[]) => fmt(rs.map((r) => r.sysUs ?? NaN).sort((x, y) => x - y)[rs.length >> 1]!);
      sysRows.push(`| ${work} | ${kinds.map((k) => sys(runs[k]!)).join(' | ')} |`);
    }
    rows.push(`| ${work} | ${[...kinds.map((k) => `${fmt(sum(k).wall.median)} / ${fmt(sum(k).cpu.median)}`), ...ratios.map((r) => `${r.of(sum).toFixed(2)}×`)].join(' | ')} | ${reps} |`);
  }
  const columns = [...kinds.map((k) => `${k}: wall / CPU p50`), ...ratios.map((r) => r.title)];
  return [
    `| work | ${columns.join(' | ')} | rounds |`,
    `|---|${columns.map(() => '---:').join('|')}|---:|`,
    ...rows,
    '',
    `| work | ${kinds.map((k) => `${k}: system CPU p50`).join(' | ')} |`,
    `|---|${kinds.map(() => '---:').join('|')}|`,
    ...sysRows,
    '',
    '| work | pair | CPU ratio, by pairs | wall ratio, by pairs | peak RSS before / this |',
    '|---|---|---:|---:|---:|',
    ...pairRows,
  ];
}
