// The shape of the source tree, read from its import lines: layers that do not import each other
// in a circle, and file names that say which file is meant.
import { readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const repo = resolve(import.meta.dirname, '..');
const src = join(repo, 'src');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    return e.isDirectory() ? files(p) : [p];
  });
}

// Static imports, `export … from`, side-effect imports and import() alike: a dynamic import is
// still a dependency of the layer that makes it.
const importRe = /(?:\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g;

/** Every relative import in src/, as [importing file, imported file], both relative to src/. */
function imports(): [string, string][] {
  const out: [string, string][] = [];
  for (const f of files(src).filter((p) => p.endsWith('.ts'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(importRe)) {
      const target = resolve(dirname(f), m[1]!.replace(/\.js$/, '.ts'));
      out.push([relative(src, f), relative(src, target)]);
    }
  }
  return out;
}

/** src/keeper/plan.ts is in folder "keeper"; src/cli.ts in folder "src". */
const folder = (file: string): string => (file.includes('/') ? file.split('/')[0]! : 'src');

/** The cycles of a directed graph, each as the path that closes it (a → b → … → a). */
function cycles(edges: Map<string, Set<string>>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (n: string): void => {
    state.set(n, 'open');
    path.push(n);
    for (const m of [...(edges.get(n) ?? [])].sort()) {
      if (state.get(m) === 'open') found.push([...path.slice(path.indexOf(m)), m]);
      else if (!state.has(m)) visit(m);
    }
    path.pop();
    state.set(n, 'done');
  };
  for (const n of [...edges.keys()].sort()) if (!state.has(n)) visit(n);
  return found;
}

function graph(pairs: [string, string][]): Map<string, Set<string>> {
  const g = new Map<string, Set<string>>();
  for (const [a, b] of pairs) {
    if (a === b) continue;
    if (!g.has(a)) g.set(a, new Set());
    g.get(a)!.add(b);
  }
  return g;
}

/** The imports that make the edge a → b, for the failure message. */
const why = (pairs: [string, string][], a: string, b: string, key: (f: string) => string): string[] =>
  pairs.filter(([x, y]) => key(x) === a && key(y) === b).map(([x, y]) => `${x} -> ${y}`);

describe('architecture', () => {
  const pairs = imports();

  it('reads the imports it checks', () => {
    // A regex that stopped matching would pass every check below.
    expect(pairs.length).toBeGreaterThan(300);
    expect(pairs.some(([a, b]) => a.startsWith('rules/') && b.startsWith('netlink/'))).toBe(true);
    // And a cycle finder that found none would too.
    expect(cycles(graph([['a', 'b'], ['b', 'c'], ['c', 'a'], ['c', 'd']]))).toEqual([['a', 'b', 'c', 'a']]);
    expect(cycles(graph([['a', 'b'], ['a', 'c'], ['b', 'c']]))).toEqual([]);
  });

  it('no two src/ folders import each other, directly or round a circle', () => {
    const g = graph(pairs.map(([a, b]) => [folder(a), folder(b)]));
    // Each cycle with one import per step, to say where to cut it.
    const found = cycles(g).map((c) => c.slice(1).map((b, i) => why(pairs, c[i]!, b, folder)[0]).join(', '));
    expect(found).toEqual([]);
  });

  it('each folder imports only the layers below it', () => {
    // Top to bottom; keeper and gc share a rank. The desired-state types live in model, below
    // config (which builds them from files) and the keeper and owners (which consume them).
    const rank: Record<string, number> = {
      src: 0, keeper: 1, gc: 1, owners: 2, config: 3, model: 4, rules: 5, netlink: 6, base: 7,
    };
    const upward = pairs
      .filter(([a, b]) => folder(a) !== folder(b))
      .filter(([a, b]) => (rank[folder(a)] ?? -1) >= (rank[folder(b)] ?? -1))
      .map(([a, b]) => `${a} -> ${b}`);
    expect(Object.keys(rank).sort()).toEqual([...new Set(pairs.map(([a]) => folder(a)))].sort());
    expect(upward).toEqual([]);
  });

  it('no file cycles inside src/netlink and src/rules', () => {
    for (const dir of ['netlink', 'rules']) {
      const g = graph(pairs.filter(([a, b]) => folder(a) === dir && folder(b) === dir));
      expect(cycles(g).map((c) => c.join(' -> ')), dir).toEqual([]);
    }
  });

  it('the keeper reads the time from the global performance, which a test\'s fake timers replace', () => {
    const keeper = files(join(src, 'keeper')).filter((f) => f.endsWith('.ts'));
    expect(keeper.length).toBeGreaterThan(10);
    expect(keeper.filter((f) => /\bperformance\b[^;]*from\s+['"](node:)?perf_hooks['"]/.test(readFileSync(f, 'utf8'))).map((f) => relative(src, f))).toEqual([]);
  });

  it('what the kernel holds is kept by the kernel view alone: only view.ts and its parts import them', () => {
    // The parts that move the one record per owned table (the rules, the followed handles and
    // elements); owned-table.ts is its shape, which others may name; the planner (plan.ts) plans from it.
    const parts = new Set(['keeper/known.ts', 'keeper/follow-commit.ts', 'keeper/follow-events.ts', 'keeper/follow-seed.ts', 'keeper/followed-view.ts']);
    const outside = pairs.filter(([a, b]) => parts.has(b) && a !== 'keeper/view.ts' && !parts.has(a));
    expect(outside.map(([a, b]) => `${a} -> ${b}`)).toEqual([]);
  });

  it('no two files under src/, nor under native/, share a name', () => {
    for (const tree of ['src', 'native']) {
      const seen = new Map<string, string[]>();
      for (const f of files(join(repo, tree))) {
        const name = basename(f);
        // A folder's index.ts is its public face, named by the folder.
        if (name === 'index.ts' || f.includes('/fuzz/corpus/')) continue;
        seen.set(name, [...(seen.get(name) ?? []), relative(repo, f)]);
      }
      expect([...seen.values()].filter((v) => v.length > 1), tree).toEqual([]);
    }
  });
});
