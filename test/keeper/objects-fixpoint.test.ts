/**
 * Random tables with stateful objects and named object maps, and with statements on sets,
 * elements, add/update @set and meters, through compile → kernel → export → compile: the export
 * of nfkeeper's install compiles to the same objects, sets and rules (a fixed point), and nft's
 * own install of the generated file is in sync with it.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseNftConfig, type Config } from '../../src/config/config.js';
import { objectDefinitionKey } from '../../src/model/stateful-objects.js';
import { statefulKey } from '../../src/rules/stateful.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('objfix');

const size = fc.tuple(fc.integer({ min: 1, max: 900 }), fc.constantFrom('bytes', 'kbytes', 'mbytes'));
const OBJECT = fc.oneof(
  fc.record({ kind: fc.constant('counter'), body: fc.constantFrom('', 'packets 3 bytes 70') }),
  fc.record({ kind: fc.constant('quota'), body: fc.tuple(fc.constantFrom('', 'over ', 'until '), size)
    .map(([o, [n, u]]) => `${o}${n} ${u}`) }),
  fc.record({ kind: fc.constant('limit'), body: fc.tuple(fc.constantFrom('', 'over '), fc.integer({ min: 1, max: 1000 }),
    fc.constantFrom('second', 'minute', 'hour', 'day')).map(([o, n, u]) => `rate ${o}${n}/${u}`) }),
  fc.record({ kind: fc.constant('ct helper'), body: fc.constantFrom('type "ftp" protocol tcp', 'type "sip" protocol udp', 'type "tftp" protocol udp; l3proto ip') }),
  fc.record({ kind: fc.constant('ct expectation'), body: fc.tuple(fc.constantFrom('tcp', 'udp'), fc.integer({ min: 1, max: 65535 }),
    fc.integer({ min: 1, max: 255 })).map(([p, d, s]) => `protocol ${p}; dport ${d}; timeout ${s}s; size ${s}; l3proto ip`) }),
  fc.record({ kind: fc.constant('synproxy'), body: fc.tuple(fc.integer({ min: 536, max: 9000 }), fc.integer({ min: 0, max: 14 }),
    fc.constantFrom('', 'timestamp', 'sack-perm', 'timestamp sack-perm')).map(([m, w, o]) => `mss ${m}; wscale ${w}${o ? `; ${o}` : ''}`) }),
);
const USE: Record<string, string> = {
  counter: 'counter name', quota: 'quota name', limit: 'limit name', 'ct helper': 'ct helper set',
  'ct expectation': 'ct expectation set', synproxy: 'synproxy name',
};

const TABLE = fc.record({
  objects: fc.array(fc.record({ o: OBJECT, comment: fc.option(fc.constantFrom('a', 'two words'), { nil: undefined }) }), { minLength: 1, maxLength: 6 }),
  ports: fc.uniqueArray(fc.integer({ min: 1, max: 65535 }), { minLength: 0, maxLength: 4 }),
}).map(({ objects, ports }) => {
  const lines = ['table ip t {'];
  const rules: string[] = [];
  const counters: string[] = [];
  objects.forEach(({ o, comment }, i) => {
    const name = `o${i}`;
    const body = [o.body, comment !== undefined ? `comment "${comment}"` : ''].filter(Boolean).join('; ');
    lines.push(`\t${o.kind} ${name} { ${body}${body ? ';' : ''} }`);
    const dep = o.kind === 'ct helper' ? (o.body.includes('tcp') ? 'tcp dport 21 ' : 'udp dport 69 ') : o.kind === 'synproxy' ? 'tcp dport 22 ' : '';
    rules.push(`${dep}${USE[o.kind]} "${name}"`);
    if (o.kind === 'counter') counters.push(name);
  });
  if (counters.length > 0 && ports.length > 0) {
    lines.push(`\tmap m { type inet_service : counter; elements = { ${ports.map((p, i) => `${p} : "${counters[i % counters.length]}"`).join(', ')} } }`);
    rules.push('counter name tcp dport map @m');
  }
  lines.push('\tchain c {', ...rules.map((r) => `\t\t${r}`), '\t}', '}', '');
  return lines.join('\n');
});

/** A set's statements, one or two (`ct count` only on a dynamic set, as nft takes it). */
const STMT = fc.oneof(
  fc.constant('counter'),
  fc.tuple(fc.constantFrom('', 'over '), fc.integer({ min: 1, max: 1000 }), fc.constantFrom('second', 'minute')).map(([o, n, u]) => `limit rate ${o}${n}/${u}`),
  size.map(([n, u]) => `quota ${n} ${u}`),
  fc.integer({ min: 1, max: 900 }).map((n) => `counter quota over ${n} mbytes`),
  fc.integer({ min: 1, max: 100 }).map((n) => `ct count ${n}`),
);
const ONE_STMT = fc.constantFrom('counter', 'limit rate 7/second', 'quota over 3 mbytes', 'ct count over 2');

const SET_TABLE = fc.record({
  stmt: STMT,
  elements: fc.uniqueArray(fc.integer({ min: 1, max: 254 }), { minLength: 0, maxLength: 4 }).chain((xs) =>
    fc.tuple(...xs.map((x) => fc.tuple(fc.constant(x), fc.boolean())))),
  dyn: fc.option(ONE_STMT, { nil: undefined }),
  meter: fc.option(ONE_STMT, { nil: undefined }),
}).map(({ stmt, elements, dyn, meter }) => {
  // (nft's element grammar takes one statement: the set's two reach an element written without)
  const els = elements.map(([x, own]) => `10.0.0.${x}${own && !stmt.startsWith('counter quota') ? ` ${stmt}` : ''}`);
  return [
    'table ip t {',
    `	set s { type ipv4_addr; flags dynamic; ${stmt};${els.length ? ` elements = { ${els.join(', ')} }` : ''} }`,
    '	set n { type ipv4_addr; flags dynamic; }',
    '	chain c {',
    '		ip saddr @s accept',
    `		add @s { ip daddr ${stmt} }`,
    ...(dyn ? [`		update @n { ip saddr ${dyn} }`] : []),
    ...(meter ? [`		meter m { ip saddr . tcp dport ${meter} }`] : []),
    '	}', '}', '',
  ].join('\n');
});

function shape(c: Config) {
  const t = c.tables[0]!;
  return {
    objects: (t.objects ?? []).map((o) => [o.type, o.name, objectDefinitionKey(o.obj)]),
    // (an element's statements as the kernel holds them: its own, else its set's)
    sets: (t.sets ?? []).map((s) => [s.name, s.set.flags, s.set.objType, statefulKey(s.set.exprs),
      s.elements.map((e) => `${e.key}:${e.objref}:${statefulKey(e.exprs ?? s.set.exprs)}`).sort()]),
    rules: t.chains.flatMap((ch) => ch.rules.map((r) => r.compiled.text)),
  };
}

describe('random tables with objects', () => {
  it('compile → kernel → export → compile is a fixed point, and nft installs them in sync', () => fixpoint(TABLE, 29), 120_000);
  it('the same with statements on sets, elements, add/update @set and meters', () => fixpoint(SET_TABLE, 291), 120_000);
});

async function fixpoint(tables: fc.Arbitrary<string>, seed: number): Promise<void> {
    let n = 0;
    await withNetns(async (ours) => {
      await withNetns(async (theirs) => {
        await fc.assert(fc.asyncProperty(tables, async (text) => {
          const file = join(dir, `t${n++}.nft`);
          writeFileSync(file, `flush ruleset\n${text}`);
          const want = parseNftConfig(text, file);
          ours.exec('nft', ['flush', 'ruleset']);
          const a = await cli('apply', '--config', file, '--netns', ours.path);
          expect(a.code, a.err).toBe(0);
          const exp = await cli('export', '--netns', ours.path, '--format', 'nft', '--table', 'ip', 't');
          expect(exp.code, exp.err).toBe(0);
          expect(shape(parseNftConfig(exp.out, 'export.nft')), exp.out).toEqual(shape(want));
          theirs.exec('nft', ['flush', 'ruleset']);
          theirs.nft(text);
          const c = await cli('check', '--config', file, '--netns', theirs.path);
          expect(c.out, text).toBe('in sync');
        }), { numRuns: 12, seed });
      }, 'objfix-nft');
    }, 'objfix-ours');
}
