/**
 * Property tests for the config loader (hostile input): random text,
 * random YAML documents and mutations of real configs either load into a
 * consistent Config or are refused with a ConfigError whose position lies
 * inside the text. Never another exception. And a refused config, handed to
 * the CLI, changes nothing in the kernel.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parseConfig, type Config } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { FLANNEL_YAML } from '../keeper/helpers.js';

const RICH = `# every kind of key the schema has
tables:
  - family: ip
    name: nat_keeper
    protect: true
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat + 5
        policy: accept
        rules:
          - ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random
          - "ip saddr { 10.0.0.0/8, 192.168.0.0/16 } jump helper comment \\"to helper\\""
      - name: prerouting
        type: nat
        hook: prerouting
        priority: -100
        rules: ['tcp dport 80 dnat to 10.0.0.1:8080']
      - name: helper
        rules: [counter return]
  - {family: inet, name: other, chains: []}
gc:
  foreign:
    - family: ip
      table: nat
      owner: nomad
  live:
    file: /run/nomad/live.json
  grace: 30s
  interval: 1m
`;
const SEEDS = [FLANNEL_YAML, RICH, readFileSync(join(__dirname, '..', '..', 'examples', 'flannel.yaml'), 'utf8')];

type Outcome = { ok: true; config: Config } | { ok: false; error: ConfigError };

/** Loads `text`; anything but a Config or a well-placed ConfigError fails the test. */
function loadOrRefuse(text: string): Outcome {
  let config: Config;
  try {
    config = parseConfig(text, 'p.yaml');
  } catch (e) {
    if (!(e instanceof ConfigError)) throw new Error(`not a ConfigError for ${JSON.stringify(text)}: ${String(e)}`);
    const lines = text.split(/\r\n|\r|\n/).length;
    expect(e.file).toBe('p.yaml');
    expect(e.line).toBeGreaterThanOrEqual(1);
    expect(e.line).toBeLessThanOrEqual(lines + 1);
    expect(e.column).toBeGreaterThanOrEqual(1);
    expect(e.reason.length).toBeGreaterThan(0);
    expect(e.message).toBe(`p.yaml:${e.line}:${e.column}: ${e.reason}`);
    return { ok: false, error: e };
  }
  // Whatever loads is complete: every rule compiled, base chains whole, names unique.
  const keys = new Set<string>();
  for (const t of config.tables) {
    expect(['ip', 'ip6', 'inet']).toContain(t.family);
    expect(keys.has(`${t.family} ${t.name}`)).toBe(false);
    keys.add(`${t.family} ${t.name}`);
    for (const c of t.chains) {
      if (c.base) expect(Number.isInteger(c.base.priority)).toBe(true);
      for (const r of c.rules) expect(r.compiled.exprs.length).toBeGreaterThan(0);
    }
  }
  return { ok: true, config };
}

// Pieces YAML and the schema care about: structure, quoting, anchors, tags, rule words.
const TOKENS = [':', ': ', '-', '- ', '  ', '\t', '\n', '"', "'", '[', ']', '{', '}', ',', '#', '&a ', '*a', '!!str ',
  '!!binary ', '<<: *a', '|', '>', '%YAML 1.2\n', '---\n', '...\n', '~', 'null', 'true', '0x10', '1e400', '-0',
  'tables', 'chains', 'rules', 'family', 'name', 'type', 'hook', 'priority', 'policy', 'protect', 'gc', 'ip6', 'inet',
  'nat', 'filter', 'srcnat', 'dstnat - 7', 'masquerade', 'dnat to', 'jump', 'goto', 'helper', 'ip saddr', '10.0.0.0/8',
  '{ 1, 2 }', 'comment "x"', '\u0000', '\u00e9', '\ufeff', '💥'];

/** One mutation of `text`, as a function of random numbers. */
const mutation = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), token: fc.constantFrom(...TOKENS) }),
  fc.record({ kind: fc.constant('insertRandom' as const), at: fc.nat(), token: fc.string({ maxLength: 8, unit: 'binary' }) }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 12 }) }),
  fc.record({ kind: fc.constant('dupLine' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('swapLines' as const), at: fc.nat(), with: fc.nat() }),
  fc.record({ kind: fc.constant('replaceValue' as const), at: fc.nat(), token: fc.oneof(fc.constantFrom(...TOKENS),
    fc.integer().map(String), fc.string({ maxLength: 12 })) }),
);
type Mutation = typeof mutation extends fc.Arbitrary<infer M> ? M : never;

function mutate(text: string, m: Mutation): string {
  const at = m.at % (text.length + 1);
  const lines = text.split('\n');
  const li = m.at % lines.length;
  switch (m.kind) {
    case 'insert':
    case 'insertRandom':
      return text.slice(0, at) + m.token + text.slice(at);
    case 'delete':
      return text.slice(0, at) + text.slice(at + m.len);
    case 'dupLine':
      lines.splice(li, 0, lines[li]!);
      return lines.join('\n');
    case 'swapLines': {
      const lj = m.with % lines.length;
      [lines[li], lines[lj]] = [lines[lj]!, lines[li]!];
      return lines.join('\n');
    }
    case 'replaceValue': {
      const line = lines[li]!;
      const colon = line.indexOf(': ');
      lines[li] = colon >= 0 ? `${line.slice(0, colon + 2)}${m.token}` : line.replace(/- .*/, `- ${m.token}`);
      return lines.join('\n');
    }
  }
}

const mutatedConfig = fc.tuple(fc.constantFrom(...SEEDS), fc.array(mutation, { minLength: 1, maxLength: 4 }))
  .map(([seed, ms]) => ms.reduce(mutate, seed));

// Documents with the right shape and wrong values: keys from the schema, values of any type.
const anyValue = fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
  fc.constantFrom('ip', 'ip6', 'inet', 'nat', 'postrouting', 'srcnat', 'masquerade', 'accept', 'drop', '30s'));
const chainArb = fc.record({
  name: fc.oneof(anyValue, fc.constantFrom('c', 'helper', 'postrouting')),
  type: fc.oneof(anyValue, fc.constantFrom('nat', 'filter')),
  hook: fc.oneof(anyValue, fc.constantFrom('postrouting', 'prerouting', 'input')),
  priority: fc.oneof(anyValue, fc.integer({ min: -400, max: 400 }), fc.constantFrom('srcnat', 'dstnat + 3')),
  policy: anyValue,
  rules: fc.oneof(anyValue, fc.array(fc.oneof(anyValue, fc.constantFrom('masquerade', 'jump helper', 'counter return',
    'ip saddr 10.0.0.0/8 masquerade', 'tcp dport 53 dnat to 10.0.0.1')), { maxLength: 4 })),
}, { requiredKeys: [] });
const tableArb = fc.record({
  family: fc.oneof(anyValue, fc.constantFrom('ip', 'ip6', 'inet')),
  name: fc.oneof(anyValue, fc.constantFrom('t', 'nfkeeper')),
  protect: anyValue,
  chains: fc.oneof(anyValue, fc.array(chainArb, { maxLength: 3 })),
  colour: anyValue,
}, { requiredKeys: [] });
const documentArb = fc.record({
  tables: fc.oneof(anyValue, fc.array(tableArb, { maxLength: 3 })),
  gc: fc.oneof(anyValue, fc.record({ foreign: fc.array(fc.record({ family: anyValue, table: anyValue, owner: anyValue,
    tag: anyValue }, { requiredKeys: [] }), { maxLength: 2 }), live: anyValue, grace: anyValue }, { requiredKeys: [] })),
}, { requiredKeys: [] });

describe('config loader with hostile input', () => {
  it('the seeds themselves load', () => {
    for (const s of SEEDS) expect(loadOrRefuse(s).ok).toBe(true);
  });

  it('arbitrary text: a Config or a ConfigError with a position, never a crash', () => {
    fc.assert(fc.property(fc.string({ maxLength: 200, unit: 'binary' }), (s) => { loadOrRefuse(s); }),
      { numRuns: 2000, seed: 11 });
  });

  it('mutated real configs: a Config or a ConfigError with a position, never a crash', () => {
    let loaded = 0, refused = 0;
    fc.assert(fc.property(mutatedConfig, (text) => {
      if (loadOrRefuse(text).ok) loaded++;
      else refused++;
    }), { numRuns: 3000, seed: 12 });
    console.log(`[config] mutated configs: ${loaded} loaded, ${refused} refused`);
    // Both outcomes must be common, or the mutations are not testing anything.
    expect(loaded).toBeGreaterThan(100);
    expect(refused).toBeGreaterThan(500);
  });

  it('well-shaped documents with wrong values: a Config or a ConfigError at the offending node', () => {
    let loaded = 0;
    fc.assert(fc.property(documentArb, (doc) => {
      if (loadOrRefuse(stringify(doc)).ok) loaded++;
    }), { numRuns: 2000, seed: 13 });
    expect(loaded).toBeGreaterThan(0);
  });

  it('a refused config changes nothing in the kernel: apply and run exit 2, the generation stays', async () => {
    const dir = tempDir('cfgprop');
    await withNetns(async (ns) => {
      const good = join(dir, 'good.yaml');
      writeFileSync(good, FLANNEL_YAML);
      expect((await cli('apply', '--config', good, '--netns', ns.path)).code).toBe(0);
      const sock = open({ netns: ns.path });
      const gen = sock.generation();
      const before = ns.exec('nft', ['list', 'ruleset']);
      const bad = fc.sample(mutatedConfig, { numRuns: 400, seed: 14 })
        .filter((t) => !loadOrRefuse(t).ok).slice(0, 25);
      expect(bad.length).toBe(25);
      for (const [i, text] of bad.entries()) {
        const f = join(dir, `bad-${i}.yaml`);
        writeFileSync(f, text);
        const cmd = i % 5 === 0 ? ['run', '--no-metrics'] : ['apply'];
        const r = await cli(...cmd, '--config', f, '--netns', ns.path);
        expect(r.code).toBe(2);
        expect(r.err).toMatch(new RegExp(`bad-${i}\\.yaml:\\d+:\\d+: `));
      }
      expect(sock.generation()).toBe(gen);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe(before);
      sock.close();
    }, 'cfgprop');
  });
});

