/**
 * Summarises a V8 .cpuprofile (node --cpu-prof): self time by function, and inclusive time of the
 * functions named on the command line (a function's time with everything it called, counted once
 * per sample even when it recurses).
 *
 *   npx tsx bench/lib/cpuprofile.ts FILE [--top 40] [--per 1000] [--incl name,name…]
 *
 * --per N divides every time by N (say, the PUTs in the profile) and prints milliseconds.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from './args.js';

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }

const cli = parseArgs(import.meta.url, { '--top': 1, '--per': 1, '--incl': 1, '--categories': 1, '--stacks': 1 },
  { positional: 1, usage: 'cpuprofile.ts FILE [--top 40] [--per 1000] [--incl name,name…] [--categories name=fnA|fnB;…] [--stacks NAME]' });
const file = cli.positional[0]!;
const arg = cli.value;
const top = Number(arg('--top') ?? 40);
const per = Number(arg('--per') ?? 1);
const incl = (arg('--incl') ?? '').split(',').filter(Boolean);
// --categories 'name=fnA|fnB;name2=fnC': each sample goes to the category of the nearest frame
// (itself, then its callers) whose function is listed; the rest is "other".
const categories = (arg('--categories') ?? '').split(';').filter(Boolean).map((c) => {
  const [name, fns] = c.split('=');
  return { name: name!, fns: new Set(fns!.split('|')) };
});
const byCategory = new Map<string, number>();
// --stacks NAME: the callers of NAME's samples (five frames up), heaviest first.
const stacksOf = arg('--stacks');
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const label = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/^.*\/(src|dist|node_modules)\//, '$1/')}:${n.callFrame.lineNumber + 1}`;
const self = new Map<string, number>();
const inclusive = new Map<string, number>();
const stacks = new Map<string, number>();
let total = 0;
p.samples.forEach((id, i) => {
  const dt = p.timeDeltas[i] ?? 0;
  total += dt;
  const n = byId.get(id)!;
  self.set(label(n), (self.get(label(n)) ?? 0) + dt);
  if (stacksOf && n.callFrame.functionName === stacksOf) {
    const path: string[] = [];
    for (let x = byId.get(parent.get(n.id) ?? -1); x && path.length < 5; x = byId.get(parent.get(x.id) ?? -1)) path.push(x.callFrame.functionName || '(anonymous)');
    stacks.set(path.join(' < '), (stacks.get(path.join(' < ')) ?? 0) + dt);
  }
  if (categories.length) {
    let cat = 'other';
    find: for (let x: Node | undefined = n; x; x = byId.get(parent.get(x.id) ?? -1)) {
      for (const c of categories) if (c.fns.has(x.callFrame.functionName)) { cat = c.name; break find; }
    }
    byCategory.set(cat, (byCategory.get(cat) ?? 0) + dt);
  }
  const seen = new Set<string>();
  for (let x: Node | undefined = n; x; x = byId.get(parent.get(x.id) ?? -1)) {
    const f = x.callFrame.functionName;
    for (const want of incl) if (f === want && !seen.has(want)) { seen.add(want); inclusive.set(want, (inclusive.get(want) ?? 0) + dt); }
  }
});
const fmt = (us: number) => (per > 1 ? `${(us / 1000 / per).toFixed(3)} ms` : `${(us / 1000).toFixed(1)} ms`);
console.log(`total ${fmt(total)} (${(total / 1e6).toFixed(2)} s sampled)`);
for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${fmt(v).padStart(12)}  ${(100 * v / total).toFixed(1).padStart(5)} %  ${k}`);
if (incl.length) {
  console.log('inclusive:');
  for (const w of incl) console.log(`${fmt(inclusive.get(w) ?? 0).padStart(12)}  ${(100 * (inclusive.get(w) ?? 0) / total).toFixed(1).padStart(5)} %  ${w}`);
}
if (stacksOf) {
  console.log(`callers of ${stacksOf}:`);
  for (const [k, v] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${fmt(v).padStart(12)}  ${k}`);
}
if (categories.length) {
  console.log('by category:');
  for (const [k, v] of [...byCategory].sort((a, b) => b[1] - a[1])) console.log(`${fmt(v).padStart(12)}  ${(100 * v / total).toFixed(1).padStart(5)} %  ${k}`);
}
