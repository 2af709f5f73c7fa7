/**
 * Random whole tables with chain bindings (fast-check's rule generator, fixed seed): random rules
 * of every base chain, some of them gathered into `jump { … }` / `goto { … }` bindings behind a
 * match, as an .nft file. nft installs it in one namespace and `apply` in another: the listings and
 * the netlink dumps are the same (the kernel's `__chain%d` names aside), `check` finds nft's install
 * in sync, and compile → kernel → export → compile is a fixed point (the export compiles to the
 * file's rule keys and is nft's own listing).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import { interfaceTable, ruleKey } from '../../src/rules/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import type { CorpusFamily } from './corpus.js';
import { ruleArb, type GenRule } from './generate.js';
import { BASE_CHAINS, CHAIN_NAME } from './oracle.js';

const SEED = 20261204;
const TABLES_PER_FAMILY = 4;
const dir = tempDir('binding-gen');

/** The matches a binding sits behind (none, or one that every family takes). */
const PREFIXES = ['', 'meta mark 0x00000001 ', 'meta l4proto tcp ', 'iifname "lo" ', 'ct state established '];

/** One table's text: each base chain's rules, runs of them gathered into bindings. */
function tableText(family: CorpusFamily, rules: GenRule[], shape: number[]): string {
  const byChain = new Map<string, string[]>();
  let k = 0;
  for (let i = 0; i < rules.length;) {
    const chain = CHAIN_NAME[rules[i]!.chain]!;
    const pick = shape[k++ % shape.length]!;
    // 0-2: a plain rule; otherwise a binding of the next rules of the same chain (up to pick-2 of them)
    const list = byChain.get(chain) ?? [];
    byChain.set(chain, list);
    if (pick < 3) {
      list.push(`\t\t${rules[i]!.text}`);
      i++;
      continue;
    }
    const inner: string[] = [];
    while (i < rules.length && inner.length < pick - 2 && CHAIN_NAME[rules[i]!.chain] === chain) inner.push(rules[i++]!.text);
    const verdict = pick % 2 === 0 ? 'jump' : 'goto';
    list.push(`\t\t${PREFIXES[pick % PREFIXES.length]}${verdict} {\n${inner.map((r) => `\t\t\t${r}\n`).join('')}\t\t}`);
  }
  const out = [`table ${family} t {`];
  for (const [name, c] of Object.entries(BASE_CHAINS)) {
    out.push(`\tchain ${name} {`, `\t\ttype ${c.type} hook ${c.hook} priority ${c.priority}; policy accept;`, ...(byChain.get(name) ?? []), '\t}');
  }
  // the generator's jump targets
  out.push('\tchain KUBE-MARK-MASQ {', '\t}', '\tchain CNI-X {', '\t}', '}');
  return out.join('\n') + '\n';
}

const samples = fc.sample(fc.tuple(fc.array(ruleArb(), { minLength: 24, maxLength: 40 }), fc.array(fc.integer({ min: 0, max: 6 }), { minLength: 8, maxLength: 8 })),
  { numRuns: 3 * TABLES_PER_FAMILY * 3, seed: SEED });

/** Per family, the first tables that compile (some generated rules are refused, as generate.ts says). */
const tables: { family: CorpusFamily; text: string }[] = [];
for (const family of ['ip', 'ip6', 'inet'] as const) {
  let n = 0;
  for (const [rules, shape] of samples) {
    if (n === TABLES_PER_FAMILY) break;
    const mine = rules.filter((r) => r.family === family);
    if (mine.length < 4) continue;
    const text = tableText(family, mine.sort((a, b) => a.chain.localeCompare(b.chain)), shape);
    try {
      parseNftConfig(text, 'gen.nft', { interfaces: interfaceTable({ lo: 1 }) });
    } catch {
      // drop the rules the compiler refuses, one table at a time
      const ok = mine.filter((r) => {
        try {
          parseNftConfig(tableText(family, [r], [0]), 'one.nft', { interfaces: interfaceTable({ lo: 1 }) });
          return true;
        } catch {
          return false;
        }
      });
      if (ok.length < 4) continue;
      tables.push({ family, text: tableText(family, ok, shape) });
      n++;
      continue;
    }
    tables.push({ family, text });
    n++;
  }
}

/** Namespaces here have lo as 1; the CLI resolves iif names there, the test does likewise. */
const LO = { interfaces: interfaceTable({ lo: 1 }) };
const unnamed = (s: string) => s.replace(/__chain\d+/g, '__chainN');

describe(`random tables with chain bindings against nft 1.0.6 (seed ${SEED})`, () => {
  it('has tables with bindings in every family', () => {
    for (const family of ['ip', 'ip6', 'inet']) {
      const mine = tables.filter((t) => t.family === family);
      expect(mine.length).toBe(TABLES_PER_FAMILY);
      expect(mine.some((t) => /(?:jump|goto) \{/.test(t.text))).toBe(true);
    }
    const bindings = tables.reduce((n, t) => n + (t.text.match(/(?:jump|goto) \{/g)?.length ?? 0), 0);
    const rules = tables.reduce((n, t) => n + t.text.split('\n').filter((l) => /^\t\t\t?[^\t}]/.test(l) && !/^\t\ttype /.test(l)).length, 0);
    expect(bindings).toBeGreaterThanOrEqual(2 * tables.length);
  });

  it.each(tables.map((t, i) => [`${t.family} table ${i}`, t] as const))('%s: nft and apply agree; export is a fixed point', async (_n, t) => {
    const file = join(dir, `gen-${_n.replace(/\W+/g, '-')}.nft`);
    writeFileSync(file, t.text);
    const want = parseNftConfig(t.text, file, LO).tables[0]!.chains.map((c) => c.rules.map((r) => ruleKey(r.compiled)));
    await withNetns(async (nft) => {
      nft.nft(t.text);
      await withNetns(async (ours) => {
        const r = await cli('apply', '--config', file, '--netns', ours.path);
        expect(r.code, r.err).toBe(0);
        const listing = nft.exec('nft', ['list', 'table', t.family, 't']);
        expect(ours.exec('nft', ['list', 'table', t.family, 't'])).toBe(listing);
        expect(unnamed(netlinkDump(ours, t.family, 't'))).toBe(unnamed(netlinkDump(nft, t.family, 't')));
        expect((await cli('check', '--config', file, '--netns', nft.path)).out).toBe('in sync');
        const exp = await cli('export', '--netns', ours.path, '--format', 'nft', '--table', t.family, 't');
        expect(exp.code, exp.err).toBe(0);
        const back = join(dir, 'export.nft');
        writeFileSync(back, exp.out + '\n');
        expect(parseNftConfig(exp.out, back, LO).tables[0]!.chains.map((c) => c.rules.map((x) => ruleKey(x.compiled)))).toEqual(want);
        expect((await cli('check', '--config', back, '--netns', nft.path)).out).toBe('in sync');
      }, 'bgen-ours');
    }, 'bgen-nft');
  });
});
