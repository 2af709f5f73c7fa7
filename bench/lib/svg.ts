/** Hand-written SVG line charts (no browser, no dependency): cost against N, log scales. */

export interface Series {
  name: string;
  color: string;
  dashed?: boolean;
  /** [N, value] pairs; values ≤ 0 or not finite are left out (a log axis cannot show them). */
  points: (readonly [number, number])[];
}

export interface LogChart {
  title: string;
  xLabel: string;
  /** Tick label for 10^e of the y unit. */
  yDecade: (e: number) => string;
  series: Series[];
  /** Extra legend lines under the series (for example what dashed means). */
  legendNotes?: { text: string; dashed: boolean }[];
  footer: string;
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** 10^e µs as a round label: 1 µs, 10 µs, 100 µs, 1 ms, ... */
export function usDecade(e: number): string {
  const units = ['µs', 'ms', 's'];
  const u = Math.min(2, Math.max(0, Math.floor(e / 3)));
  return `${10 ** (e - 3 * u)} ${units[u]}`;
}

/** One line per series against N on log-log axes; N = 0 is drawn at the left edge (as 100). */
export function renderLogChart(c: LogChart): string {
  // The legend column is as wide as its longest line (≈ 7 px a character at 12 px), so names are never cut off.
  const longest = Math.max(0, ...c.series.map((s) => s.name.length), ...(c.legendNotes ?? []).map((n) => n.text.length));
  const R = Math.max(270, 52 + Math.ceil(longest * 7) + 10);
  const H = 480, L = 80, T = 40, B = 60, W = 860 - 270 + R;
  const series = c.series.map((s) => ({ ...s, points: s.points.filter(([, v]) => Number.isFinite(v) && v > 0) }));
  const ns = [...new Set(series.flatMap((s) => s.points.map(([n]) => n)))].sort((a, b) => a - b);
  const xN = (n: number) => Math.log10(Math.max(n, 100));
  const xmin = xN(ns[0] ?? 0), xmax = xN(ns[ns.length - 1] ?? 1000);
  const vals = series.flatMap((s) => s.points.map(([, v]) => v));
  const ymin = Math.floor(Math.log10(Math.min(...vals, 1e9))), ymax = Math.ceil(Math.log10(Math.max(...vals, 1e-9)));
  const px = (n: number) => L + ((xN(n) - xmin) / (xmax - xmin || 1)) * (W - L - R);
  const py = (v: number) => T + (1 - (Math.log10(v) - ymin) / (ymax - ymin || 1)) * (H - T - B);
  const o: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${L}" y="22" font-size="15" font-weight="bold">${esc(c.title)}</text>`];
  for (let e = ymin; e <= ymax; e++) {
    const y = py(10 ** e);
    o.push(`<line x1="${L}" y1="${y}" x2="${W - R}" y2="${y}" stroke="#ddd"/>`,
      `<text x="${L - 6}" y="${y + 4}" text-anchor="end">${esc(c.yDecade(e))}</text>`);
  }
  for (const n of ns) {
    const x = px(n);
    o.push(`<line x1="${x}" y1="${T}" x2="${x}" y2="${H - B}" stroke="#eee"/>`,
      `<text x="${x}" y="${H - B + 18}" text-anchor="middle">${n.toLocaleString('en-US')}</text>`);
  }
  o.push(`<text x="${(L + W - R) / 2}" y="${H - 18}" text-anchor="middle">${esc(c.xLabel)}</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`);
  let ly = T + 10;
  const legend = new Set<string>();
  for (const s of series) {
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    o.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2"${dash} points="${s.points.map(([n, v]) => `${px(n).toFixed(1)},${py(v).toFixed(1)}`).join(' ')}"/>`);
    for (const [n, v] of s.points) o.push(`<circle cx="${px(n).toFixed(1)}" cy="${py(v).toFixed(1)}" r="3" fill="${s.color}"/>`);
    if (legend.has(s.name)) continue;
    legend.add(s.name);
    o.push(`<line x1="${W - R + 15}" y1="${ly}" x2="${W - R + 45}" y2="${ly}" stroke="${s.color}" stroke-width="2"/>`,
      `<text x="${W - R + 52}" y="${ly + 4}">${esc(s.name)}</text>`);
    ly += 20;
  }
  ly += 10;
  for (const note of c.legendNotes ?? []) {
    const dash = note.dashed ? ' stroke-dasharray="6 4"' : '';
    o.push(`<line x1="${W - R + 15}" y1="${ly}" x2="${W - R + 45}" y2="${ly}" stroke="#333" stroke-width="2"${dash}/>`,
      `<text x="${W - R + 52}" y="${ly + 4}">${esc(note.text)}</text>`);
    ly += 20;
  }
  o.push(`<text x="${L}" y="${H - 2}" font-size="10" fill="#666">${esc(c.footer)}</text>`, '</svg>', '');
  return o.join('\n');
}
