/**
 * Random tables (the whole-table proof): generated tables of base and regular
 * chains, jumps between them and rules from the generated rule vocabulary
 * (test/rules/generate.ts) go through compile → kernel → decode → render →
 * compile, and that is a fixed point:
 *
 *   the table's file, loaded (compile), installed by `nfkeeper apply`
 *   (kernel), read back by `nfkeeper export` (decode, render) and loaded
 *   again (compile) is the same desired state, rule for rule (ruleKey);
 *   the export is in sync with the kernel (`check` = 0), exporting it again
 *   gives the same text, and nft's own install of the file lists and dumps
 *   exactly as nfkeeper's.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { anyInterface, namespaceInterfaces, parseNftConfig, type Config } from '../../src/config/config.js';
import { compileRule, ruleKey } from '../../src/rules/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import type { CorpusChain, CorpusFamily } from '../rules/corpus.js';
import { ruleArb, type GenRule } from '../rules/generate.js';

const dir = tempDir('tables-prop');
const interfaces = anyInterface();

const BASE: Record<CorpusChain, string> = {
  pre: 'type nat hook prerouting priority dstnat; policy accept;',
  out: 'type nat hook output priority -100; policy accept;',
  in: 'type nat hook input priority 100; policy accept;',
  post: 'type nat hook postrouting priority srcnat; policy accept;',
  fwd: 'type filter hook forward priority filter; policy accept;',
};
/** The regular chains ruleArb's verdicts jump to. */
const TARGETS = ['KUBE-MARK-MASQ', 'CNI-X'];
const NAT = /\b(masquerade|snat|dnat|redirect)\b/;

interface GenTable {
  family: CorpusFamily;
  name: string;
  base: { label: CorpusChain; name: string; rules: string[] }[];
  regular: { name: string; rules: string[] }[];
}

const compiles = (family: CorpusFamily, text: string) => {
  try {
    compileRule(text, { family, table: 't', chain: 'c', interfaces });
    return true;
  } catch {
    return false;
  }
};

/** Rules of one family for one chain label, the ones the compiler takes (the generator is wider on purpose). */
const rulesFor = (family: CorpusFamily, label: CorpusChain | 'regular', max: number) =>
  fc.array(ruleArb(), { minLength: max * 15, maxLength: max * 15 }).map((rs: GenRule[]) => rs.filter((r) => r.family === family
    && (label === 'regular' ? !NAT.test(r.text) && !/\b(jump|goto)\b/.test(r.text) : r.chain === label)
    && compiles(family, r.text)).slice(0, max).map((r) => r.text));

const tableArb: fc.Arbitrary<GenTable> = fc.record({
  family: fc.constantFrom<CorpusFamily>('ip', 'ip6', 'inet'),
  name: fc.stringMatching(/^[a-z][a-z0-9_-]{0,14}$/),
  labels: fc.uniqueArray(fc.constantFrom<CorpusChain>('pre', 'out', 'in', 'post', 'fwd'), { minLength: 1, maxLength: 3 }),
}).chain(({ family, name, labels }) => fc.record({
  base: fc.tuple(...labels.map((label) => rulesFor(family, label, 6).map((rules) => ({ label, name: `c_${label}`, rules })))),
  regular: fc.tuple(...TARGETS.map((t) => rulesFor(family, 'regular', 3).map((rules) => ({ name: t, rules })))),
}).map(({ base, regular }) => ({ family, name, base, regular })));

function fileOf(t: GenTable): string {
  const out = [`table ${t.family} ${t.name} {`];
  for (const c of t.base) out.push(`\tchain ${c.name} {`, `\t\t${BASE[c.label]}`, ...c.rules.map((r) => `\t\t${r}`), '\t}');
  for (const c of t.regular) out.push(`\tchain ${c.name} {`, ...c.rules.map((r) => `\t\t${r}`), '\t}');
  return [...out, '}', ''].join('\n');
}

/** The desired state a config holds, rule by rule as the reconciler compares it. */
const desired = (c: Config) => c.tables.map((t) => ({
  family: t.family, name: t.name,
  chains: t.chains.map((ch) => ({ name: ch.name, base: ch.base, rules: ch.rules.map((r) => ruleKey(r.compiled)) }))
    .sort((a, b) => (a.name < b.name ? -1 : 1)),
}));

describe('random tables: compile → kernel → decode → render → compile is a fixed point', () => {
  it('holds for generated tables, and nft installs them as nfkeeper does', { timeout: 600_000 }, async () => {
    let n = 0;
    let rules = 0;
    await fc.assert(fc.asyncProperty(tableArb, async (t) => {
      const text = fileOf(t);
      const file = join(dir, `t${++n}.nft`);
      writeFileSync(file, text);
      await withNetns(async (ns) => {
        // iif/oif names resolve in the namespace, as apply resolves them (`iif 1` exports as `iif "lo"`).
        const here = namespaceInterfaces(ns.path);
        const first = parseNftConfig(text, file, { interfaces: here });
        rules += first.tables[0]!.chains.reduce((k, c) => k + c.rules.length, 0);
        const apply = await cli('apply', '--config', file, '--netns', ns.path);
        expect(apply.err, text).toBe('');
        expect(apply.code, text).toBe(0);
        const exported = await cli('export', '--table', t.family, t.name, '--netns', ns.path);
        expect(exported.err, text).toBe('');
        expect(exported.code, text).toBe(0);
        const back = join(dir, `t${n}-export.nft`);
        writeFileSync(back, exported.out);
        expect(desired(parseNftConfig(exported.out, back, { interfaces: here })), `${text}\n---\n${exported.out}`).toEqual(desired(first));
        const check = await cli('check', '--config', back, '--netns', ns.path);
        expect(check.code, `${exported.out}\n${check.out}`).toBe(0);
        const again = await cli('export', '--table', t.family, t.name, '--netns', ns.path);
        expect(again.out).toBe(exported.out);
        await withNetns((byNft) => {
          byNft.nft(text);
          expect(ns.exec('nft', ['list', 'table', t.family, t.name]), text).toBe(byNft.exec('nft', ['list', 'table', t.family, t.name]));
          expect(netlinkDump(ns, t.family, t.name), text).toBe(netlinkDump(byNft, t.family, t.name));
        }, 'tprop-nft');
      }, 'tprop');
    }), { numRuns: 25, seed: Number(process.env.NFK_PROPERTY_SEED ?? 1303) });
    // The generator is not vacuous: the tables held rules (about 11 a table, 280-300 a run).
    console.log(`random tables: ${n} tables, ${rules} rules`);
    expect(rules).toBeGreaterThan(100);
  });
});
