/**
 * The compile cache (src/config/compile-cache.ts): a load whose every traced input is unchanged
 * gives the config a compile would give, object for object, and compiles nothing; any input
 * changed (a file's content, a file added where a glob looks, an environment variable, an
 * interface's index or name) or a cache file cut short or changed at any byte is an ordinary
 * compile of what is there now, with the reason, never an error.
 */
import { appendFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { deserialize } from 'node:v8';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { loadConfig, type Config, type LoadOptions } from '../../src/config/config.js';
import { changedInput, compileCachePathOf, encodedPathOf, loadConfigCached, unfaithful } from '../../src/config/compile-cache.js';
import type { CompileInput } from '../../src/base/compile-inputs.js';
import { sha256 } from '../../src/base/sha256.js';
import { writeSealed } from '../../src/base/sealed-file.js';
import { runNow } from '../../src/base/sliced.js';
import { chainDigestsSteps, desiredDigest } from '../../src/model/desired-digest.js';
import { localIsUtc } from '../../src/rules/intvalues.js';
import { compactAsCompiled } from '../../src/model/compact.js';
import { appendRules, encodedRuleAt, ruleAt, ruleCount, rulesMade, type TableConfig } from '../../src/model/desired.js';
import { addonDigest, addonFileId, loadAddon } from '../../src/netlink/addon.js';
import { Batch } from '../../src/netlink/batch.js';
import { EncodedRuleOp } from '../../src/netlink/ops.js';
import { encodeHints, encodeRuleExprs, open } from '../../src/netlink/socket.js';
import { withNetns } from '../helpers/netns.js';
import { planTable } from '../../src/keeper/plan.js';
import { renderDrift } from '../../src/keeper/render-drift.js';
import { followCommit } from '../../src/keeper/follow-commit.js';
import { tableKey } from '../../src/keeper/owned-table.js';
import type { ObservedTable } from '../../src/netlink/objects.js';
import type { TableDiff } from '../../src/keeper/table.js';
import { interfaceTable, type InterfaceResolver } from '../../src/rules/render.js';
import { tempDir } from '../helpers/tmp.js';
import { damagedCopies } from '../helpers/mutate.js';
import { everyKindNft } from '../helpers/every-kind.js';
import { postroutingYaml } from '../keeper/helpers.js';

// Every rule compiled, counted: a load from the cache compiles none.
const compiles = vi.hoisted(() => ({ n: 0, made: 0 }));
vi.mock('../../src/rules/compile.js', async (original) => {
  const m = await original<typeof import('../../src/rules/compile.js')>();
  return { ...m, compileRule: (...a: Parameters<typeof m.compileRule>) => { compiles.n++; return m.compileRule(...a); },
    // (and every rule made, by the cache's load too)
    withRenderedText: (...a: Parameters<typeof m.withRenderedText>) => { compiles.made++; return m.withRenderedText(...a); } };
});

/** Every kind of thing a compiled config holds: sets and maps (a verdict map), objects, comments, anonymous sets, interfaces, a service name. */
const NFT = (dir: string) => `${everyKindNft('keep', { iif: 'lo', oif: 'eth7' },
  ['ip saddr 10.1.0.1 tcp dport 22 counter accept', 'ip saddr 10.1.0.2 tcp dport 22 counter accept'])}include "${dir}/conf.d/*.nft"
`;
const EXAMPLES = join(import.meta.dirname, '..', '..', 'examples');
const PART = (n: number) => `table ip part${n} {\n\tchain c {\n\t\tip daddr 198.51.100.${n} return\n\t}\n}\n`;

const YAML = `env:\n  files: [ENVFILE]\n${postroutingYaml('env', ['ip saddr ${NET} ip daddr != 224.0.0.0/4 masquerade', 'ip daddr ${ADDR} return'])}`;

/**
 * `a` and `b` are the same object graph: the same prototypes, own keys in order (a key with no
 * value too), values, frozenness, and an object reached twice in one exactly where in the other.
 * A compiled rule's lazy text is compared as read.
 */
function expectSameGraph(a: unknown, b: unknown): void {
  const pairs = new Map<object, object>();
  const back = new Map<object, object>();
  const walk = (x: unknown, y: unknown, at: string): void => {
    if (typeof x !== 'object' || x === null) {
      expect(y, at).toBe(x);
      return;
    }
    expect(typeof y === 'object' && y !== null, at).toBe(true);
    const yo = y as object;
    if (pairs.has(x) || back.has(yo)) {
      expect(pairs.get(x) === yo && back.get(yo) === x, `${at}: shared differently`).toBe(true);
      return;
    }
    pairs.set(x, yo);
    back.set(yo, x);
    expect(Object.getPrototypeOf(yo), `${at}: prototype`).toBe(Object.getPrototypeOf(x));
    expect(Object.isFrozen(yo), `${at}: frozen`).toBe(Object.isFrozen(x));
    expect(Reflect.ownKeys(yo), `${at}: keys`).toEqual(Reflect.ownKeys(x));
    for (const k of Reflect.ownKeys(x)) walk((x as Record<string | symbol, unknown>)[k], (yo as Record<string | symbol, unknown>)[k], `${at}.${String(k)}`);
  };
  walk(a, b, 'config');
}

describe('the compile cache', () => {
  let dir: string;
  let cacheDir: string;
  let links: Record<string, number>;
  let env: Record<string, string | undefined>;
  const resolver = (): InterfaceResolver => interfaceTable({ ...links });
  const options = (): LoadOptions => ({ interfaces: resolver(), compiled: compactAsCompiled(), environment: env });
  const cache = () => ({ dir: cacheDir, version: 'test' });
  /** A load through the cache, its store done; what it did and how many rules it compiled. */
  const load = (file: string) => {
    compiles.n = 0;
    const r = loadConfigCached(file, options(), cache());
    const compiled = compiles.n;
    const stored = r.store ? runNow(r.store()) : undefined;
    return { ...r, compiled, stored };
  };
  const fresh = (file: string): Config => loadConfig(file, options());

  beforeEach(() => {
    dir = tempDir('compile-cache');
    cacheDir = join(dir, 'cache');
    mkdirSync(join(dir, 'conf.d'));
    writeFileSync(join(dir, 'conf.d', '1.nft'), PART(1));
    writeFileSync(join(dir, 'main.nft'), NFT(dir));
    writeFileSync(join(dir, 'vars.env'), 'NET=10.244.0.0/16\n');
    writeFileSync(join(dir, 'c.yaml'), YAML.replace('ENVFILE', join(dir, 'vars.env')));
    links = { lo: 1, eth7: 7 };
    env = { ADDR: '192.0.2.9', UNRELATED: 'x' };
  });

  it('an unchanged config: the same objects as its compile, no rule compiled, the cache 0600 in a 0700 directory', () => {
    for (const file of [join(dir, 'main.nft'), join(dir, 'c.yaml')]) {
      const first = load(file);
      expect(first.cache).toMatchObject({ used: false, why: expect.stringMatching(/^there is none/) });
      expect(first.stored).toBeUndefined();
      expect(first.compiled).toBeGreaterThan(0);
      const again = load(file);
      expect(again.cache.used).toBe(true);
      expect(again.compiled).toBe(0);
      expectSameGraph(fresh(file), again.config);
      // And as the keeper reads them: each rule's text (rendered when first read).
      expect(again.config.tables.flatMap((t) => t.chains.flatMap((c) => c.rules.map((r) => r.compiled.text))))
        .toEqual(fresh(file).tables.flatMap((t) => t.chains.flatMap((c) => c.rules.map((r) => r.compiled.text))));
    }
    const st = readdirSync(cacheDir).filter((f) => f.endsWith('.json')).map((f) => readFileSync(join(cacheDir, f)).length);
    expect(st).toHaveLength(2);
  });

  it('rules made late: none until read; made a slice at a time by the work for after ready, or by a read half-way through it, held once', () => {
    const file = join(dir, 'big.yaml');
    const rules = Array.from({ length: 20_000 }, (_, i) => `          - ip saddr 10.${i >> 16}.${(i >> 8) & 255}.${i & 255} accept`);
    writeFileSync(file, ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c', '        rules:', ...rules,
      '      - name: d', '        rules:', '          - ip daddr 192.0.2.1 drop', ''].join('\n'));
    expect(load(file).stored).toBeUndefined();
    const hit = load(file);
    expect(hit.cache.used).toBe(true);
    const [c, d] = hit.config.tables[0]!.chains;
    expect([rulesMade(c!), rulesMade(d!), ruleCount(c!), ruleCount(d!)]).toEqual([false, false, 20_000, 1]);
    // (rules made alone before: the ones held, whoever makes the rest)
    const alone = [ruleAt(c!, 5), ruleAt(d!, 0)];
    const work = hit.make!();
    for (let i = 0; i < 4; i++) expect(work.next().done).toBe(false);
    expect(rulesMade(c!)).toBe(false);
    const read = c!.rules;
    expect(rulesMade(c!)).toBe(true);
    expect(rulesMade(d!)).toBe(false);
    runNow(work);
    expect(c!.rules).toBe(read);
    expect(rulesMade(d!)).toBe(true);
    expect([c!.rules[5], d!.rules[0]]).toEqual(alone);
    expect(c!.rules[5] === alone[0] && d!.rules[0] === alone[1]).toBe(true);
    expectSameGraph(fresh(file), hit.config);
  });

  it('a rule made alone (ruleAt) at the first, a middle and the last place: only it made, the same object in the chain once made, as compiled', () => {
    const file = join(dir, 'big.yaml');
    // Many slices of the work: half-way through the scan for the rules' lines, or half-way through
    // the making (the middle rule made by the work, the last not).
    const n = 6000;
    const rules = Array.from({ length: n }, (_, i) => `          - ip saddr 10.${i >> 16}.${(i >> 8) & 255}.${i & 255} tcp dport ${1 + (i % 1000)} counter accept`);
    writeFileSync(file, ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c', '        rules:', ...rules,
      '      - name: d', '        rules:', '          - ip daddr 192.0.2.1 drop', ''].join('\n'));
    expect(load(file).stored).toBeUndefined();
    const want = fresh(file).tables[0]!.chains[0]!.rules;
    for (const steps of [0, 1, 16]) {
      const half = steps > 0;
      const hit = load(file);
      expect(hit.cache.used).toBe(true);
      const [c, d] = hit.config.tables[0]!.chains;
      // Half-way through the work for after ready, or before it.
      const work = hit.make!();
      for (let i = 0; i < steps; i++) expect(work.next().done).toBe(false);
      const places = [0, n >> 1, n - 1];
      const alone = places.map((j) => ruleAt(c!, j)!);
      expect(ruleAt(c!, n)).toBeUndefined();
      expect(ruleAt(c!, -1)).toBeUndefined();
      expect(rulesMade(c!)).toBe(false);
      expect(rulesMade(d!)).toBe(false);
      for (const [k, j] of places.entries()) {
        expect(alone[k]!.text).toBe(want[j]!.text);
        expect(alone[k]!.compiled.exprs).toEqual(want[j]!.compiled.exprs);
        expect(Object.isFrozen(alone[k]!.compiled.exprs)).toBe(true);
        expect(ruleAt(c!, j)).toBe(alone[k]);
      }
      // The chain's rules, made after (by a read, or by the work), hold the rules made alone.
      const all = half ? (runNow(work), c!.rules) : c!.rules;
      for (const [k, j] of places.entries()) expect(all[j]).toBe(alone[k]);
      expect(ruleAt(c!, n >> 1)).toBe(alone[1]);
      runNow(work);
      expect(c!.rules).toBe(all);
      expectSameGraph(fresh(file), hit.config);
    }
  });

  it("carries its chains' digests the restart record's desired digest is composed of, and the digests of the files it compiled", () => {
    for (const file of [join(dir, 'main.nft'), join(dir, 'c.yaml')]) {
      const first = load(file);
      expect(first.files?.get(file)).toBe(sha256(readFileSync(file), 'hex'));
      const text = readFileSync(compileCachePathOf(cacheDir, undefined, file), 'utf8');
      const stored = (JSON.parse(text.slice(0, text.indexOf('\n'))) as { chains: string[][] }).chains;
      // The digests walked from a compile of its own, never given them.
      const compiled = fresh(file).tables;
      expect(stored).toEqual(runNow(chainDigestsSteps(compiled)));
      const want = desiredDigest(compiled);
      const again = load(file);
      expect(again.cache.used).toBe(true);
      expect(again.files?.get(file)).toBe(sha256(readFileSync(file), 'hex'));
      expect(desiredDigest(again.config.tables)).toBe(want);
      // And owners merged in (a new list of the same tables, a table copied with the same chains)
      // compose it too, without making a rule; another list does not give it.
      expect(desiredDigest(again.config.tables.map((t) => ({ ...t, chains: [...t.chains] })))).toBe(want);
      expect(again.config.tables.flatMap((t) => t.chains).filter((c) => ruleCount(c) > 0).every((c) => !rulesMade(c))).toBe(true);
      if (again.config.tables.length > 1) expect(desiredDigest(again.config.tables.slice(1))).not.toBe(want);
      // A chain with rules appended (a dispatch chain with the owners' jumps): its digest composed of
      // the cached chain's and the jumps', the same as a fresh compile's, still without making a rule.
      const big = (tables: readonly TableConfig[]) => tables.flatMap((t) => t.chains).reduce((a, c) => (ruleCount(c) > ruleCount(a) ? c : a));
      const jumps = fresh(file).tables.flatMap((t) => t.chains).flatMap((c) => c.rules).slice(0, 2);
      const withJumps = (tables: readonly TableConfig[], extra = jumps) =>
        tables.map((t) => ({ ...t, chains: t.chains.map((c) => (c === big(tables) ? appendRules(c, extra) : c)) }));
      const joined = withJumps(again.config.tables);
      expect(desiredDigest(joined)).toBe(desiredDigest(withJumps(compiled)));
      expect(desiredDigest(joined)).not.toBe(want);
      expect(desiredDigest(joined)).not.toBe(desiredDigest(withJumps(compiled, jumps.slice(1))));
      expect(rulesMade(big(again.config.tables))).toBe(false);
      const appended = big(joined);
      expect(rulesMade(appended)).toBe(false);
      expect(ruleCount(appended)).toBe(ruleCount(big(compiled)) + 2);
      // Its rules once read: the chain's, then the jumps, the same objects as rule by rule.
      const last = ruleAt(appended, ruleCount(appended) - 1);
      expect(last).toBe(jumps[1]);
      expect(appended.rules.slice(0, -2)).toEqual(big(compiled).rules);
      expect(appended.rules.at(-1)).toBe(last);
    }
  });

  it("each rule's stored encoding is encodeExprs' of the rule the load makes, known before it is made; a rule with anonymous sets has them too, as the compile's", () => {
    const files = [join(dir, 'main.nft'), join(dir, 'c.yaml'),
      ...readdirSync(EXAMPLES).filter((f) => /\.(ya?ml|nft)$/.test(f)).map((f) => join(EXAMPLES, f))];
    let encoded = 0, withUserdata = 0, withSets = 0;
    for (const file of files) {
      load(file);
      const hit = load(file);
      expect(hit.cache.used, file).toBe(true);
      const want = fresh(file);
      for (const [ti, t] of hit.config.tables.entries()) {
        for (const [ci, c] of t.chains.entries()) {
          const n = ruleCount(c);
          const got = Array.from({ length: n }, (_, j) => encodedRuleAt(c, j));
          expect(encodedRuleAt(c, n)).toBeUndefined();
          // Known without making a rule.
          if (n > 0) expect(rulesMade(c), `${file} ${c.name}`).toBe(false);
          for (let j = 0; j < n; j++) {
            const w = want.tables[ti]!.chains[ci]!.rules[j]!.compiled;
            const x = got[j];
            // Its sets (the ops before it), the compile's; absent for a rule with none.
            if (w.sets.length > 0) withSets++;
            expect(x?.sets, `${file} ${c.name} ${j}`).toEqual(w.sets.length > 0 ? w.sets : undefined);
            encoded++;
            if (w.userdata !== undefined) withUserdata++;
            expect(x?.userdata, `${file} ${c.name} ${j}`).toBe(w.userdata);
            // The bytes of the rule the load makes, and of the compile's: the encoder's, byte for byte.
            expect(x?.exprs.equals(loadAddon().encodeExprs(ruleAt(c, j)!.compiled.exprs)), `${file} ${c.name} ${j}`).toBe(true);
            expect(x?.exprs.equals(loadAddon().encodeExprs(w.exprs)), `${file} ${c.name} ${j}`).toBe(true);
          }
        }
      }
    }
    expect([encoded >= 10, withUserdata > 0, withSets > 0]).toEqual([true, true, true]);
  });

  it("an install's commit hands back each rule's expressions as sent: encodeRuleExprs' bytes for every kind; a store given them encodes none and writes the same entry", async () => {
    const files = [join(dir, 'main.nft'), join(dir, 'c.yaml'),
      ...readdirSync(EXAMPLES).filter((f) => /\.(ya?ml|nft)$/.test(f)).map((f) => join(EXAMPLES, f))];
    const addon = loadAddon();
    let handed = 0;
    const kinds = new Set<string>();
    for (const [fi, file] of files.entries()) {
      const first = loadConfigCached(file, options(), cache());
      expect(first.cache.used, file).toBe(false);
      const rules = first.config.tables.flatMap((t) => t.chains.flatMap((c) => c.rules.map((r) => r.compiled))).filter((x) => x.bound === undefined);
      if (rules.length === 0) continue;
      // The install a first start commits: every table planned into an empty kernel, one batch.
      const batch = new Batch();
      for (const t of first.config.tables) {
        planTable(batch, t, { table: undefined, chains: new Map(), rules: new Map() },
          { drift: [{ kind: 'table-missing', family: t.family, table: t.name, detail: '' }], chains: new Map(), elements: new Map() } as unknown as TableDiff);
      }
      const sent = await withNetns(async (ns) => {
        const s = open({ netns: ns.path });
        try {
          return (await s.commit(batch, { exprs: true }))?.exprs;
        } finally {
          s.close();
        }
      });
      expect(sent, file).toBeDefined();
      for (const [i, x] of rules.entries()) {
        const b = sent!.of(x.exprs);
        expect(b?.equals(encodeRuleExprs(x.exprs)), `${file} rule ${i}`).toBe(true);
        handed++;
        for (const e of x.exprs) kinds.add(e.kind);
      }
      // Stored with them: no rule encoded again, and the entry byte for byte a store's that encodes each (apart from its token).
      const encodes = vi.spyOn(addon, 'encodeExprs');
      try {
        expect(runNow(first.store!(undefined, sent)), file).toBeUndefined();
        expect(encodes, file).not.toHaveBeenCalled();
      } finally {
        encodes.mockRestore();
      }
      const other = join(dir, `other-${fi}`);
      const again = loadConfigCached(file, options(), { dir: other, version: 'test' });
      expect(runNow(again.store!()), file).toBeUndefined();
      const entry = (d: string) => readFileSync(encodedPathOf(compileCachePathOf(d, undefined, file))).subarray(36, -66);
      expect(entry(cacheDir).equals(entry(other)), file).toBe(true);
    }
    // (every kind of expression, one by one, in test/netlink/roundtrip.test.ts)
    expect(handed).toBeGreaterThan(10);
    expect(kinds.size).toBeGreaterThanOrEqual(9);
  });

  it("a store keeps each encoded rule's text rendered before it (apply's plan), but one rendered with an interface's name; a plan from the cache prints them without making a rule", () => {
    const files = [join(dir, 'main.nft'), join(dir, 'c.yaml'),
      ...readdirSync(EXAMPLES).filter((f) => /\.(ya?ml|nft)$/.test(f)).map((f) => join(EXAMPLES, f))];
    let kept = 0, named = 0;
    for (const file of files) {
      const first = loadConfigCached(file, options(), cache());
      // (read as apply's plan reads them, before its store)
      for (const t of first.config.tables) for (const c of t.chains) for (const r of c.rules) void r.compiled.text;
      expect(runNow(first.store!()), file).toBeUndefined();
      const hit = load(file);
      expect(hit.cache.used, file).toBe(true);
      const want = fresh(file);
      for (const [ti, t] of hit.config.tables.entries()) {
        for (const [ci, c] of t.chains.entries()) {
          for (let j = 0; j < ruleCount(c); j++) {
            const w = want.tables[ti]!.chains[ci]!.rules[j]!.compiled;
            const x = encodedRuleAt(c, j);
            if (x === undefined) continue;
            // (iif and oif are interface indexes, rendered by name: another index's name may change without the rule)
            if (/\b[io]if "/.test(w.text)) {
              named++;
              expect(x.text, `${file} ${c.name} ${j}`).toBeUndefined();
            } else {
              kept++;
              expect(x.text, `${file} ${c.name} ${j}`).toBe(w.text);
            }
          }
          // The plan's lines of the chain, from the kept texts: the same as the compile's, no rule made but those without one.
          const missing = { drift: [{ kind: 'chain-missing', family: t.family, table: t.name, chain: c.name, detail: '' }] } as unknown as TableDiff;
          const untexted = Array.from({ length: ruleCount(c) }, (_, j) => encodedRuleAt(c, j)?.text).filter((x) => x === undefined).length;
          compiles.made = 0;
          const lines = renderDrift(t, missing);
          expect(compiles.made, `${file} ${c.name}`).toBe(untexted);
          expect(lines, `${file} ${c.name}`).toEqual(renderDrift(want.tables[ti]!, missing));
        }
      }
    }
    expect([kept >= 10, named > 0]).toEqual([true, true]);
  });

  it('a store renders no text: it keeps only the texts already rendered (none for the daemon, nor an apply to /dev/null)', () => {
    const file = join(dir, 'c.yaml');
    const first = loadConfigCached(file, options(), cache());
    const rules = first.config.tables.flatMap((t) => t.chains.flatMap((c) => c.rules));
    expect(rules.length).toBeGreaterThan(1);
    void rules[0]!.compiled.text;
    expect(runNow(first.store!())).toBeUndefined();
    const hit = load(file);
    const texts = hit.config.tables.flatMap((t) => t.chains.flatMap((c) => Array.from({ length: ruleCount(c) }, (_, j) => encodedRuleAt(c, j)?.text)));
    expect(texts).toEqual([rules[0]!.compiled.text, ...rules.slice(1).map(() => undefined)]);
  });

  it("a plan printed from an entry that kept no texts keeps the texts it rendered (keepTexts): the next plan from the entry makes no rule, the rules' bytes and the token as they were", () => {
    for (const file of [join(dir, 'main.nft'), join(dir, 'c.yaml')]) {
      // Stored by a process that printed no plan (the daemon, an apply to /dev/null): no texts.
      expect(runNow(loadConfigCached(file, options(), cache()).store!()), file).toBeUndefined();
      const encoded = encodedPathOf(compileCachePathOf(cacheDir, undefined, file));
      const hit = load(file);
      const chains = (x: typeof hit) => x.config.tables.flatMap((t) => t.chains.map((c) => ({ t, c })));
      const encodedOf = (x: typeof hit) => chains(x).map(({ c }) => Array.from({ length: ruleCount(c) }, (_, j) => encodedRuleAt(c, j)));
      expect(encodedOf(hit).flat().filter((e) => e !== undefined).every((e) => e!.text === undefined), file).toBe(true);
      // Nothing rendered yet: nothing written.
      const before = readFileSync(encoded);
      expect(hit.keepTexts!(), file).toBeUndefined();
      expect(readFileSync(encoded).equals(before), file).toBe(true);
      // The plan of every chain missing: its rules made and rendered, then kept.
      const missing = (t: TableConfig, c: { name: string }) => ({ drift: [{ kind: 'chain-missing', family: t.family, table: t.name, chain: c.name, detail: '' }] } as unknown as TableDiff);
      const plan = chains(hit).map(({ t, c }) => renderDrift(t, missing(t, c)));
      const was = encodedOf(hit);
      expect(hit.keepTexts!(), file).toBeUndefined();
      const again = load(file);
      expect(again.cache.used, file).toBe(true);
      expect((again.cache as { token?: string }).token, file).toBe((hit.cache as { token?: string }).token);
      const want = fresh(file);
      let kept = 0;
      encodedOf(again).forEach((rules, g) => rules.forEach((x, j) => {
        const at = `${file} chain ${g} rule ${j}`;
        const w = was[g]![j];
        expect(x === undefined, at).toBe(w === undefined);
        if (x === undefined || w === undefined) return;
        expect([x.exprs.equals(w.exprs), x.userdata, x.sets], at).toEqual([true, w.userdata, w.sets]);
        const text = want.tables.flatMap((t) => t.chains)[g]!.rules[j]!.compiled.text;
        // (a text rendered with an interface's name is not kept: another index's name may change without the rule)
        if (/\b[io]if "/.test(text)) expect(x.text, at).toBeUndefined();
        else {
          expect(x.text, at).toBe(text);
          kept++;
        }
      }));
      expect(kept, file).toBeGreaterThan(0);
      // The next plan: the same lines, no rule made but those whose text is not kept.
      compiles.made = 0;
      expect(chains(again).map(({ t, c }) => renderDrift(t, missing(t, c))), file).toEqual(plan);
      expect(compiles.made, file).toBe(encodedOf(again).flat().filter((x) => x !== undefined && x.text === undefined).length);
      // Kept once: a load that renders the same again adds nothing, writes nothing.
      const third = readFileSync(encoded);
      for (const { t, c } of chains(again)) renderDrift(t, missing(t, c));
      expect(again.keepTexts!(), file).toBeUndefined();
      expect(readFileSync(encoded).equals(third), file).toBe(true);
    }
  });

  it("keepTexts writes nothing over another store's encoded rules (another token): that entry's rules stay its own", () => {
    const file = join(dir, 'c.yaml');
    expect(runNow(loadConfigCached(file, options(), cache()).store!())).toBeUndefined();
    const hit = load(file);
    for (const t of hit.config.tables) for (const c of t.chains) renderDrift(t, { drift: [{ kind: 'chain-missing', family: t.family, table: t.name, chain: c.name, detail: '' }] } as unknown as TableDiff);
    // Another process stores the entry again meanwhile (a new token).
    expect(runNow(loadConfigCached(file, options(), { ...cache(), version: 'other' }).store!())).toBeUndefined();
    const encoded = encodedPathOf(compileCachePathOf(cacheDir, undefined, file));
    const theirs = readFileSync(encoded);
    expect(hit.keepTexts!()).toBeUndefined();
    expect(readFileSync(encoded).equals(theirs)).toBe(true);
  });

  it("the encoded rules' file cut, changed at a byte, gone, or another store's: no rule encoded, the cache used all the same", () => {
    const file = join(dir, 'main.nft');
    load(file);
    const main = compileCachePathOf(cacheDir, undefined, file);
    const path = encodedPathOf(main);
    const whole = readFileSync(path);
    const encodedRules = (c: Config) => c.tables.flatMap((t) => t.chains.flatMap((ch) => Array.from({ length: ruleCount(ch) }, (_, j) => encodedRuleAt(ch, j))))
      .filter((x) => x !== undefined).length;
    expect(encodedRules(load(file).config)).toBeGreaterThan(5);
    // Another store's file: the config stored again (a new token), the earlier file put back.
    rmSync(main);
    expect(load(file).stored).toBeUndefined();
    const flipped = Buffer.from(whole);
    flipped[whole.length >> 1] = flipped[whole.length >> 1]! ^ 1;
    for (const [what, bytes] of [['cut', whole.subarray(0, whole.length - 9)], ['flipped', flipped], ['gone', undefined], ['another store\'s', whole]] as const) {
      if (bytes === undefined) rmSync(path);
      else writeFileSync(path, bytes, { mode: 0o600 });
      const hit = load(file);
      expect(hit.cache.used, what).toBe(true);
      expect(encodedRules(hit.config), what).toBe(0);
      expectSameGraph(fresh(file), hit.config);
    }
  });

  it('an install from the cache into an empty table adds its rules encoded, with their anonymous sets, planned, checked and encoded without making one', () => {
    const file = join(dir, 'main.nft');
    load(file);
    const hit = load(file);
    const want = fresh(file);
    let withSets = 0;
    for (const [ti, t] of hit.config.tables.entries()) {
      const batch = new Batch();
      planTable(batch, t, { table: undefined, chains: new Map(), rules: new Map() },
        { drift: [{ kind: 'table-missing', family: t.family, table: t.name, detail: '' }], chains: new Map(), elements: new Map() } as unknown as TableDiff);
      const hints = encodeHints(batch.ops);
      const rules = batch.ops.filter((op) => op.object === 'rule');
      const all = want.tables[ti]!.chains.flatMap((c) => c.rules);
      expect(rules.filter((op) => op instanceof EncodedRuleOp)).toHaveLength(all.length);
      expect(hints.length).toBeGreaterThan(0);
      for (const c of t.chains) if (ruleCount(c) > 0) expect(rulesMade(c), c.name).toBe(false);
      // Each rule's anonymous sets added just before it, as the compile's (the rule's lookups name their ids).
      const anonymous = (op: (typeof batch.ops)[number]) => op.object === 'set' && op.name.startsWith('__');
      expect(batch.ops.filter((op) => op.object === 'rule' || anonymous(op)).map((op) => (op.object === 'rule' ? 'rule' : op)))
        .toEqual(want.tables[ti]!.chains.flatMap((c) => c.rules.flatMap((r) => [
          ...r.compiled.sets.map((s) => ({ ...s, family: t.family, table: t.name, verb: 'add', object: 'set' })), 'rule'])));
      withSets += all.filter((r) => r.compiled.sets.length > 0).length;
      // An op's expressions, read, are the rule's (made then).
      const op = rules.find((x) => x instanceof EncodedRuleOp) as EncodedRuleOp | undefined;
      if (op) expect(op.exprs).toBe(ruleAt(t.chains.find((c) => c.name === op.chain)!, 0)!.compiled.exprs);
    }
    expect(withSets).toBeGreaterThan(0);
  });

  it("the commit of that install followed from its echo without making a rule: each known rule the desired rule at its place, looked up when read", () => {
    const file = join(dir, 'c.yaml');
    load(file);
    const t = load(file).config.tables[0]!;
    const observed: ObservedTable = { family: t.family, name: t.name, chains: new Map(), rules: new Map(), sets: new Map() };
    const batch = new Batch();
    planTable(batch, t, observed, { drift: [{ kind: 'table-missing', family: t.family, table: t.name, detail: '' }], chains: new Map(), elements: new Map() } as unknown as TableDiff);
    const handles = new Map(batch.ops.flatMap((op, i) => (op.object === 'rule' ? [[i, 100 + i] as const] : [])));
    expect(handles.size).toBeGreaterThan(1);
    compiles.made = 0;
    const out = followCommit([t], [observed], batch, { handles }, undefined, undefined, 7);
    expect(compiles.made).toBe(0);
    const c = t.chains.find((x) => ruleCount(x) > 1)!;
    const known = out?.get(tableKey(t))?.observed.rules.get(c.name);
    expect(known?.map((r) => r.handle)).toEqual([...handles.values()].slice(0, ruleCount(c)));
    expect(compiles.made).toBe(0);
    expect(known!.map((r) => r.exprs)).toEqual(Array.from({ length: ruleCount(c) }, (_, j) => ruleAt(c, j)!.compiled.exprs));
    expect(known![1]!.exprs).toBe(ruleAt(c, 1)!.compiled.exprs);
  });

  it('the examples: stored, and the same objects from the cache', () => {
    for (const name of readdirSync(EXAMPLES).filter((f) => /\.(ya?ml|nft)$/.test(f))) {
      const file = join(EXAMPLES, name);
      expect(load(file).stored, name).toBeUndefined();
      const again = load(file);
      expect(again.cache.used, name).toBe(true);
      expectSameGraph(fresh(file), again.config);
    }
  });

  it('the trace holds every input the compile read', () => {
    const file = join(dir, 'main.nft');
    load(file);
    const text = readFileSync(compileCachePathOf(cacheDir, undefined, file), 'utf8');
    const inputs = JSON.parse(text.slice(0, text.indexOf('\n'))).inputs as { kind: string; path?: string; name?: string }[];
    const said = inputs.map((i) => `${i.kind} ${i.path ?? i.name}`);
    expect(said).toEqual(expect.arrayContaining([`file ${file}`, `file ${join(dir, 'conf.d', '1.nft')}`, `dir ${join(dir, 'conf.d')}`,
      'file /etc/services', 'link lo', 'link eth7']));
    const yaml = join(dir, 'c.yaml');
    load(yaml);
    const y = readFileSync(compileCachePathOf(cacheDir, undefined, yaml), 'utf8');
    const yi = (JSON.parse(y.slice(0, y.indexOf('\n'))).inputs as { kind: string; path?: string; name?: string }[]).map((i) => `${i.kind} ${i.path ?? i.name}`);
    expect(yi).toEqual(expect.arrayContaining([`file ${yaml}`, `file ${join(dir, 'vars.env')}`, 'env NET', 'env ADDR']));
    // A variable the config does not use is not an input.
    expect(yi).not.toContain('env UNRELATED');
  });

  const changes: [string, string, () => void, RegExp][] = [
    ['the config changed', 'main.nft', () => appendFileSync(join(dir, 'main.nft'), PART(9)), /main\.nft changed/],
    ['an included file changed', 'main.nft', () => writeFileSync(join(dir, 'conf.d', '1.nft'), PART(5)), /1\.nft changed/],
    ['a file added where the glob looks', 'main.nft', () => writeFileSync(join(dir, 'conf.d', '2.nft'), PART(2)), /conf\.d lists other files/],
    ['an included file removed', 'main.nft', () => writeFileSync(join(dir, 'main.nft'), NFT(dir).replace('include', '#')), /main\.nft changed/],
    ['an interface renumbered', 'main.nft', () => { links = { lo: 1, eth7: 8 }; }, /eth7 has index 8 now, not 7/],
    ['interfaces renamed (eth7 and eth9 swap names)', 'main.nft', () => { links = { lo: 1, eth9: 7, eth7: 9 }; }, /eth7 has index 9 now, not 7/],
    ['an env file changed', 'c.yaml', () => writeFileSync(join(dir, 'vars.env'), 'NET=10.88.0.0/16\n'), /vars\.env changed/],
    ['an environment variable changed', 'c.yaml', () => { env = { ...env, ADDR: '192.0.2.10' }; }, /variable ADDR has another value/],
    ['an environment variable set that an env file overrides', 'c.yaml', () => { env = { ...env, NET: '10.0.0.0/8' }; }, /variable NET is set now/],
  ];
  for (const [what, name, change, why] of changes) {
    it(`${what}: compiled again, as the input is now`, () => {
      const file = join(dir, name);
      load(file);
      expect(load(file).cache.used).toBe(true);
      change();
      const after = load(file);
      expect(after.cache).toMatchObject({ used: false, why: expect.stringMatching(why) });
      expect(after.compiled).toBeGreaterThan(0);
      expectSameGraph(fresh(file), after.config);
      // Stored again: the next load with the new input uses it.
      const next = load(file);
      expect(next.cache.used).toBe(true);
      expectSameGraph(fresh(file), next.config);
    });
  }

  it('every kind of input, changed, is said', () => {
    const o = options();
    const utc = localIsUtc(Date.now());
    const now: CompileInput[] = [
      { kind: 'file', path: join(dir, 'main.nft'), sha256: sha256(readFileSync(join(dir, 'main.nft')), 'hex') },
      { kind: 'file', path: join(dir, 'none'), sha256: null },
      { kind: 'path', path: join(dir, 'conf.d'), is: 'dir' },
      { kind: 'dir', path: join(dir, 'conf.d'), names: readdirSync(join(dir, 'conf.d')) },
      { kind: 'env', name: 'ADDR', value: '192.0.2.9' },
      { kind: 'link', name: 'eth7', index: 7 },
      { kind: 'linkName', index: 7, name: 'eth7' },
      { kind: 'utc', at: null, utc },
    ];
    expect(changedInput(now, o)).toBeUndefined();
    const changed: [CompileInput, RegExp][] = [
      [{ ...now[0]!, sha256: 'x' } as CompileInput, /main\.nft changed/],
      [{ ...now[1]!, path: join(dir, 'main.nft') } as CompileInput, /main\.nft can be read now/],
      [{ ...now[2]!, is: 'none' } as CompileInput, /conf\.d is a directory now/],
      [{ ...now[3]!, names: [] } as CompileInput, /conf\.d lists other files now/],
      [{ ...now[4]!, value: null } as CompileInput, /ADDR is set now/],
      [{ ...now[5]!, index: null } as CompileInput, /eth7 exists now/],
      [{ ...now[6]!, name: 'eth8' } as CompileInput, /index 7 is eth7 now, not eth8/],
      [{ ...now[7]!, utc: !utc } as CompileInput, /time zone changed/],
    ];
    for (const [input, why] of changed) expect(changedInput([...now, input], o)).toMatch(why);
  });

  it('an unchanged input that was not unset before (the config did not use the variable): still used', () => {
    const file = join(dir, 'c.yaml');
    load(file);
    env = { ...env, UNRELATED: 'y', OTHER: 'z' };
    expect(load(file).cache.used).toBe(true);
  });

  it("the addon: a load that finds the file whose digest the store took (by its identity) does not hash it again; another file is hashed, and used only with the same digest", () => {
    const file = join(dir, 'main.nft');
    load(file);
    const main = compileCachePathOf(cacheDir, undefined, file);
    const stored = readFileSync(main);
    const h = JSON.parse(stored.toString('utf8', 0, stored.indexOf(0x0a))) as { addon: string; addonFile?: string };
    expect(h.addon).toBe(addonDigest());
    expect(h.addonFile).toBe(addonFileId());
    expect(h.addonFile).toMatch(/^\d+:\d+:\d+:\d+:\d+$/);
    // The header's addon fields changed, the file sealed again (its body then its SHA-256 line).
    const withAddon = (addon: string, addonFile: string | undefined) => {
      const body = stored.subarray(0, stored.lastIndexOf(0x0a, stored.length - 2));
      const nl = body.indexOf(0x0a);
      const head = { ...JSON.parse(body.toString('utf8', 0, nl)), addon, addonFile };
      const out = Buffer.concat([Buffer.from(JSON.stringify(head), 'utf8'), body.subarray(nl)]);
      writeFileSync(main, Buffer.concat([out, Buffer.from(`\n${sha256(out, 'hex')}\n`, 'latin1')]), { mode: 0o600 });
      return loadConfigCached(file, options(), cache()).cache;
    };
    const other = '0'.repeat(64);
    // The same file: its digest is not taken again (one that no longer matches is not looked at).
    expect(withAddon(other, h.addonFile)).toMatchObject({ used: true });
    // Another file's identity, or none (a store that could not note it): hashed, the same digest, used.
    expect(withAddon(h.addon, '1:2:3:4:5')).toMatchObject({ used: true });
    expect(withAddon(h.addon, undefined)).toMatchObject({ used: true });
    // Another file and another digest, or none and another digest: not used.
    for (const id of ['1:2:3:4:5', undefined]) {
      expect(withAddon(other, id)).toMatchObject({ used: false, why: "it was written with another build of nfkeeper's native addon" });
    }
  });

  it('another version, another include path, another config file: not used', () => {
    const file = join(dir, 'main.nft');
    load(file);
    expect(loadConfigCached(file, options(), { dir: cacheDir, version: 'other' }).cache).toMatchObject({ used: false, why: expect.stringMatching(/written by nfkeeper test, this is other/) });
    expect(loadConfigCached(file, { ...options(), includePath: ['/nowhere'] }, cache()).cache).toMatchObject({ used: false, why: expect.stringMatching(/another config file or include path/) });
  });

  it("an entry of format 7 (the serialized rest in base64): not used, said, compiled and stored again in this build's format", () => {
    for (const file of [join(dir, 'main.nft'), join(dir, 'c.yaml')]) {
      load(file);
      const path = compileCachePathOf(cacheDir, undefined, file);
      // The stored entry as format 7 wrote it: its header's format 7, the rest (after the rules' lines) in base64.
      const whole = readFileSync(path);
      const body = whole.subarray(0, whole.length - 66);
      let at = 0;
      const line = () => {
        const nl = body.indexOf(0x0a, at);
        const s = body.toString('latin1', at, nl);
        at = nl + 1;
        return s;
      };
      const header = JSON.parse(line()) as { format: number };
      expect(header.format).toBe(9);
      const counts = JSON.parse(line()) as number[][];
      for (let n = Number(line()); n > 0; n--) line();
      for (const _ of counts.flat()) {
        const n = Number(line());
        at += n;
      }
      const rest = body.subarray(at);
      expect(deserialize(rest)).toMatchObject({ tables: expect.any(Array) });
      writeSealed(path, cacheDir, [Buffer.from(`${JSON.stringify({ ...header, format: 7 })}\n`), body.subarray(body.indexOf(0x0a) + 1, at),
        Buffer.from(rest.toString('base64'))]);
      const old = load(file);
      expect(old.cache).toMatchObject({ used: false, why: expect.stringMatching(/is of format 7, not 9$/) });
      expect(old.compiled).toBeGreaterThan(0);
      expectSameGraph(fresh(file), old.config);
      const again = load(file);
      expect([again.cache.used, again.compiled]).toEqual([true, 0]);
      expectSameGraph(fresh(file), again.config);
    }
  });

  it('an interface gone: the compile\'s error, as loadConfig throws it (a cache does not hide it)', () => {
    const file = join(dir, 'main.nft');
    load(file);
    links = { lo: 1, eth9: 7 };
    expect(() => loadConfigCached(file, options(), cache())).toThrow(/interface 'eth7' does not exist/);
  });

  it('a config that fails to compile: its error, as loadConfig throws it, and nothing stored', () => {
    const file = join(dir, 'main.nft');
    load(file);
    writeFileSync(file, 'table ip x {\n\tchain c {\n\t\tip saddr nonsense accept\n\t}\n}\n');
    expect(() => loadConfigCached(file, options(), cache())).toThrow(/main\.nft:3/);
  });

  it('cut short or changed at any byte: the ordinary compile, with the reason, never an error', { timeout: 300_000 }, () => {
    const file = join(dir, 'small.yaml');
    writeFileSync(file, 'tables:\n  - family: ip\n    name: s\n    chains:\n      - name: c\n        rules: ["ip daddr 192.0.2.1 return"]\n');
    load(file);
    const path = compileCachePathOf(cacheDir, undefined, file);
    const whole = readFileSync(path);
    const want = fresh(file);
    const variants = damagedCopies(whole);
    const reasons = new Set<string>();
    for (const [what, bytes] of variants) {
      writeFileSync(path, bytes, { mode: 0o600 });
      compiles.n = 0;
      const r = loadConfigCached(file, options(), cache());
      expect(r.cache.used, what).toBe(false);
      expect(compiles.n, what).toBe(1);
      if (!r.cache.used) reasons.add(r.cache.why.replace(/\/[^ ]*/g, 'FILE'));
      expectSameGraph(want, r.config);
    }
    expect([...reasons]).toEqual(['FILE is cut short or corrupt (its checksum does not match)']);
    // The last load stored it whole again.
    writeFileSync(path, whole, { mode: 0o600 });
    expect(load(file).cache.used).toBe(true);
  });

  it('a cache another user could write: not trusted, compiled', () => {
    const file = join(dir, 'main.nft');
    load(file);
    const path = compileCachePathOf(cacheDir, undefined, file);
    const { chmodSync } = require('node:fs') as typeof import('node:fs');
    chmodSync(path, 0o666);
    expect(load(file).cache).toMatchObject({ used: false, why: expect.stringMatching(/^not trusted: .* may be written by others/) });
  });

  it('a rule that binds an anonymous chain: compiled at every load, and said why', () => {
    const file = join(dir, 'bound.nft');
    writeFileSync(file, 'table ip b {\n\tchain c {\n\t\tip daddr 192.0.2.1 jump { counter accept; }\n\t}\n}\n');
    const first = load(file);
    expect(first.stored).toMatch(/binds an anonymous chain/);
    expect(load(file).cache.used).toBe(false);
  });

  it('what the store refuses is found wherever it is, past the expressions rules share, and said with its place', () => {
    const file = join(dir, 'shared.yaml');
    writeFileSync(file, ['tables:', '  - family: ip', '    name: t', '    chains:', '      - name: c', '        rules:',
      ...[0, 1, 2, 3].map((i) => `          - ip saddr 10.0.0.${i} tcp dport 22 counter accept`)].join('\n') + '\n');
    const config = (): Config => fresh(file);
    const rules = (c: Config) => c.tables[0]!.chains[0]!.rules;
    const c0 = config();
    expect(runNow(unfaithful(c0))).toBeUndefined();
    // The rules share expressions at the same place (what the store skips as checked already).
    expect(rules(c0)[3]!.compiled.exprs[2]).toBe(rules(c0)[2]!.compiled.exprs[2]);
    /** Rule `ri`'s expression at `i` replaced by `e` (the list frozen again, as the compaction leaves it). */
    const withExpr = (c: Config, ri: number, i: number, e: object) => {
      const x = rules(c)[ri]!.compiled;
      (x as { exprs: readonly object[] }).exprs = Object.freeze(x.exprs.map((y, j) => (j === i ? e : y)));
      return c;
    };
    // In the last rule, at a place every rule before it shares: not frozen, or with a value JSON would not keep.
    const c1 = config();
    expect(runNow(unfaithful(withExpr(c1, 3, 2, { ...rules(c1)[3]!.compiled.exprs[2]! })))).toBe('rule 4 of chain c: an expression is not compacted');
    const c2 = config();
    expect(runNow(unfaithful(withExpr(c2, 3, 2, Object.freeze({ ...rules(c2)[3]!.compiled.exprs[2]!, extra: { deep: [1, Number.NaN] } })))))
      .toBe('rule 4 of chain c: extra.deep is NaN');
    const c3 = config();
    expect(runNow(unfaithful(withExpr(c3, 1, 1, Object.freeze({ ...rules(c3)[1]!.compiled.exprs[1]!, data: undefined })))))
      .toBe('rule 2 of chain c: data is a key with no value');
    // Outside the rules: a path of keys to a function.
    const c4 = config();
    (c4.tables[0]!.chains[0] as unknown as Record<string, unknown>).extra = { deep: [1, { f: () => 0 }] };
    expect(runNow(unfaithful(c4))).toBe('chain c: extra.deep.f is a function');
  });
});
