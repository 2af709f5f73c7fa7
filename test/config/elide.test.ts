/**
 * A big YAML config is parsed with its long runs of rules left out of yaml's parse tree and put
 * back afterwards (elideRuns, restoreRuns: they lower the start-up's peak), and its document is dropped
 * before the rules are compiled: an error's position is found by parsing the text again. These
 * check that the elided read gives the same tree as yaml's own parse, and that errors late in a big
 * file keep their exact line and column, inside a rule's text and after a substitution.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadCorpus } from '../rules/fidelity/run.js';
import { ruleArb } from '../rules/generate.js';
import { elideRuns, parseConfig, restoreRuns } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';

const addr = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const rule = (i: number) => `ip saddr ${addr(i)} ip daddr 192.0.2.1 return`;
const HEAD = 'tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n';
const item = (r: string) => `          - ${r}\n`;

function bigConfig(n: number, at: (i: number) => string = rule): string {
  let text = HEAD;
  for (let i = 0; i < n; i++) text += item(at(i));
  return text;
}

function configError(text: string, environment: Record<string, string> = {}): ConfigError {
  try {
    parseConfig(text, 'c.yaml', { environment });
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

/** The 1-based line of the first line of `text` that is `line`. */
const lineOf = (text: string, line: string) => text.split('\n').indexOf(line) + 1;
const at = (text: string, e: { line: number; column: number }) => text.split('\n')[e.line - 1]!.slice(e.column - 1);

describe('a big YAML config, its rules elided from the parse', () => {
  it('elides the chain and loads the same rules', () => {
    const text = bigConfig(2000);
    const elided = elideRuns(text)!;
    expect(elided.runs).toHaveLength(1);
    expect(elided.runs[0]).toHaveLength(2000);
    expect(elided.text.length).toBeLessThan(400);
    const c = parseConfig(text, 'c.yaml');
    const rules = c.tables[0]!.chains[0]!.rules;
    expect(rules).toHaveLength(2000);
    expect(rules.map((r) => r.text)).toEqual(Array.from({ length: 2000 }, (_, i) => rule(i)));
  });

  it('a bad rule at the end of a 2,000-rule chain: its line, and the column of the bad word in it', () => {
    const bad = `${rule(1999)} bogus`;
    const text = bigConfig(2000, (i) => (i === 1999 ? bad : rule(i)));
    // (the bad rule is elided with the others: the YAML is fine, the compile refuses it)
    expect(elideRuns(text)?.runs[0]).toHaveLength(2000);
    const e = configError(text);
    expect(e.line).toBe(lineOf(text, `          - ${bad}`));
    expect(e.line).toBe(10 + 1999);
    expect(at(text, e)).toBe('bogus');
    expect(e.reason).toMatch(/^rule 2000 of chain c: /);
    expect(e.reason).not.toMatch(/after substitution/);
  });

  it('two bad rules in the run: both exact', () => {
    const text = bigConfig(2000, (i) => (i === 700 || i === 1990 ? `${rule(i)} bogus` : rule(i)));
    const e = configError(text);
    expect(e.all.map((x) => [x.line, x.reason.split(':')[0]])).toEqual([[10 + 700, 'rule 701 of chain c'], [10 + 1990, 'rule 1991 of chain c']]);
    for (const x of e.all) expect(at(text, x)).toBe('bogus');
  });

  it('a bad value from a ${VAR} late in the chain: the position of the rule as written, and the text it became', () => {
    const written = 'ip saddr ${SRC} ip daddr 192.0.2.1 return';
    const text = bigConfig(2000, (i) => (i === 1998 ? written : rule(i)));
    const e = configError(text, { SRC: '10.0.0.1 bogus' });
    expect(e.line).toBe(10 + 1998);
    expect(e.column).toBe(13);
    expect(at(text, e)).toBe(written);
    expect(e.reason).toBe('rule 1999 of chain c: ' + e.reason.slice('rule 1999 of chain c: '.length));
    expect(e.reason).toMatch(/ \(after substitution: "ip saddr 10\.0\.0\.1 bogus ip daddr 192\.0\.2\.1 return"\)$/);
    // And substituted well, it loads, the variable recorded.
    const c = parseConfig(text, 'c.yaml', { environment: { SRC: '10.0.0.1' } });
    expect(c.tables[0]!.chains[0]!.rules[1998]!.text).toBe(rule(1998).replace(addr(1998), '10.0.0.1'));
    expect(c.env.used).toEqual(['SRC']);
    // An unset one: at its ${, after the run.
    const unset = configError(text);
    expect(unset.line).toBe(10 + 1998);
    expect(at(text, unset)).toMatch(/^\$\{SRC\} ip daddr/);
  });

  it('errors after the run that are not a rule\'s: the schema, YAML syntax, the jump graph, a duplicate table', () => {
    const tail = (s: string) => bigConfig(2000) + s;
    const policy = tail('      - name: d\n        policy: maybe\n');
    let e = configError(policy);
    expect([e.line, at(policy, e)]).toEqual([lineOf(policy, '        policy: maybe'), 'maybe']);
    const syntax = tail('      - name: [oops\n');
    e = configError(syntax);
    expect(e.line).toBeGreaterThanOrEqual(2010);
    const jump = tail('      - name: d\n        rules:\n          - jump nowhere\n');
    e = configError(jump);
    expect([e.line, at(jump, e)]).toEqual([lineOf(jump, '          - jump nowhere'), 'jump nowhere']);
    const twice = tail('  - family: ip\n    name: t\n');
    e = configError(twice);
    expect([e.line, at(twice, e)]).toEqual([10 + 2000 + 1, 't']);
    expect(e.reason).toMatch(/table ip t is listed twice/);
  });

  it('gives the tree yaml gives, whatever is around and inside the runs', () => {
    const run = (indent: string, n: number, f: (i: number) => string = rule) => Array.from({ length: n }, (_, i) => `${indent}- ${f(i)}\n`).join('');
    const filler = run('  ', 1500);
    const more = `z:\n${filler}`;
    // Each document, and the runs elided from it (the filler's last).
    const docs: [string, number[] | undefined][] = [
      // column 0, a comment between, a blank line, a trailing comment, trailing spaces
      [`a:\n${run('', 100)}# c\n${run('', 100)}\n${run('', 100)}- x # c\n- y  \n${run('', 100)}b: 1\n`, [100, 100, 100, 100, 1500]],
      // a block scalar whose lines look like items, and a folded one
      [`a: |\n${run('  ', 200)}b: >\n${run('  ', 200)}c:\n${filler}`, [1500]],
      // a flow sequence over lines, quoted items, nested sequences
      [`a: [\n${run('  ', 100).replaceAll('- ', '"').replaceAll('\n', '",\n')} "z"]\nb:\n${run('  ', 100, (i) => `"${rule(i)}"`)}c:\n  - - a\n${run('    ', 100)}`, [100, 1500]],
      // values that are not strings, or not what the line says: null, booleans, numbers, $, continuations
      [`a:\n${run('  ', 100, (i) => ['null', 'true', 'False', '12', '0x1f', '.inf', '~', 'x $y', `x${i}`][i % 9]!)}  - x\n    continued\n${filler}`, [1500]],
      [`a:\n${run('  ', 400, (i) => (i === 100 ? 'true' : i === 250 ? 'Null' : `x${i}`))}`, [100, 149, 149, 1500]],
      // a mapping in the list, a plain scalar continued on the next line after a run, and lines
      // that look like a list but continue the plain scalar `2` (more indented than its key)
      [`a:\n${run('  ', 100)}  - k: v\n${run('  ', 100)}  - last\n    more\nb: 2\n${filler}`, [100, 100]],
      // CRLF: not elided
      [`a:\r\n${run('  ', 2000).replaceAll('\n', '\r\n')}`, undefined],
      // a run, then a deeper list's run under an item, then the outer one again
      [`a:\n${run('  ', 100)}  -\n${run('    ', 100)}${run('  ', 100)}`, [100, 100, 100, 1500]],
    ];
    for (const [doc, runs] of docs) {
      const big = doc.startsWith('a:\r\n') || doc.includes(filler) ? doc : doc + more;
      expect(big.length).toBeGreaterThan(64 << 10);
      const elided = elideRuns(big);
      expect(elided?.runs.map((r) => r.length), doc.slice(0, 80)).toEqual(runs);
      const want = parse(big, { uniqueKeys: true });
      if (elided) {
        const got = parse(elided.text, { uniqueKeys: true });
        expect(restoreRuns(got, elided.runs)).toBe(true);
        expect(got).toEqual(want);
      }
    }
  });

  it('rules we did not write: the fidelity corpora (nft\'s own tests, peers) and generated ones, as items, read as yaml reads them', () => {
    // Each rule as a plain list item, whatever it holds (some hold `: `, ` #`, quotes, braces):
    // the elided read must give yaml's tree, or fail where yaml fails (readElided then reads the
    // whole file, which says why), never accept what yaml refuses.
    const corpus = ['nft-py.corpus', 'peers.corpus', 'extra.corpus'].flatMap((f) => loadCorpus(`./${f}`).map((e) => e.text));
    const generated = fc.sample(ruleArb(), { numRuns: 2000, seed: 14 }).map((g) => g.text);
    expect(corpus.length).toBeGreaterThan(3000);
    let compared = 0;
    let chunks = 0;
    for (const rules of [corpus, generated, [...corpus, ...generated].sort()]) {
      for (let from = 0; from < rules.length; from += 50) {
        chunks++;
        const text = HEAD + rules.slice(from, from + 50).map(item).join('') + bigConfig(1500).slice(HEAD.length);
        expect(text.length).toBeGreaterThan(64 << 10);
        const elided = elideRuns(text);
        // Not elided: one rule in it made the whole file one to parse as written (`log prefix "x: "`
        // is a mapping whose value opens a quote), as it is read then.
        if (!elided) continue;
        let want: unknown;
        let wantError: unknown;
        try {
          want = parse(text, { uniqueKeys: true });
        } catch (e) {
          wantError = e;
        }
        let got: unknown;
        try {
          got = parse(elided.text, { uniqueKeys: true });
        } catch {
          expect(wantError, `yaml reads rules ${from}-${from + 50}, the elided text does not`).toBeDefined();
          continue;
        }
        expect(wantError, `yaml refuses rules ${from}-${from + 50}, the elided text is read`).toBeUndefined();
        expect(restoreRuns(got, elided.runs)).toBe(true);
        expect(got).toEqual(want);
        compared++;
      }
    }
    console.log(`[elide] ${compared} of ${chunks} documents of 50 corpus or generated rules elided and compared with yaml's own tree`);
    expect(compared).toBeGreaterThan(chunks / 2);
  });

  it('is not used for a file with an alias, a tag or a directive, or a small file', () => {
    const text = bigConfig(2000);
    expect(elideRuns(text)).toBeDefined();
    expect(elideRuns(text.replace('tables:\n', 'x: &a 1\ny: *a\ntables:\n'))).toBeUndefined();
    expect(elideRuns(text.replace('rules:\n', 'rules: !!seq\n'))).toBeUndefined();
    expect(elideRuns(`%YAML 1.1\n---\n${text}`)).toBeUndefined();
    expect(elideRuns(bigConfig(100))).toBeUndefined();
    // An aliased list of rules loads as yaml reads it.
    const aliased = text.replace('        rules:\n', '        rules: &r\n') + '      - name: d\n        rules: *r\n';
    const c = parseConfig(aliased, 'c.yaml');
    expect(c.tables[0]!.chains[1]!.rules).toHaveLength(2000);
  });
});
