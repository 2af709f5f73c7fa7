/**
 * Named stateful objects in the config: the nft block form, the command form and YAML
 * `objects:` give the same kernel objects (the data nft 1.0.6 sends, checked against the
 * kernel's dump of nft's own install in test/keeper/objects-kernel.test.ts); what is wrong in a
 * declaration or a rule that uses an object is refused at its file position; the definition
 * compared by the reconciler leaves the objects' state out.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { objectDefinitionKey, objectBlock, rawObjectOf } from '../../src/model/stateful-objects.js';
import { ConfigError } from '../../src/base/errors.js';
import { compileRule, renderRule } from '../../src/rules/index.js';

function refusal(text: string, yaml = false): ConfigError {
  try {
    if (yaml) parseConfig(text, 'f.yaml');
    else parseNftConfig(text, 'f.nft');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return ((e as ConfigError & { all?: ConfigError[] }).all?.[0] ?? e) as ConfigError;
  }
  throw new Error(`accepted: ${text}`);
}

const BLOCK = `table ip t {
  counter c { packets 3 bytes 4 }
  quota q { over 100 mbytes used 1 kbytes; comment "cap" }
  limit l { rate over 10 mbytes/second burst 5 mbytes }
  ct helper ftp { type "ftp" protocol tcp; l3proto ip; }
  ct expectation e {
    protocol tcp
    dport 21
    timeout 10s
    size 10
  }
  synproxy s { mss 1460; wscale 7; timestamp sack-perm }
  secmark sm { "system_u:object_r:ssh_server_packet_t:s0" }
  chain c1 {
    counter name "c" quota name "q" limit name "l" accept
    tcp dport 21 ct helper set "ftp"
    ct expectation set "e"
    synproxy name "s"
    meta secmark set "sm"
  }
}
`;

const COMMANDS = `add table ip t
add counter ip t c packets 3 bytes 4
add quota ip t q { over 100 mbytes used 1 kbytes; comment "cap"; }
add limit ip t l { rate over 10 mbytes/second burst 5 mbytes; }
add ct helper ip t ftp { type "ftp" protocol tcp; }
add ct expectation ip t e { protocol tcp; dport 21; timeout 10s; size 10; l3proto ip; }
add synproxy ip t s { mss 1460; wscale 7; timestamp sack-perm; }
add secmark ip t sm { "system_u:object_r:ssh_server_packet_t:s0" }
add chain ip t c1
add rule ip t c1 counter name "c" quota name "q" limit name "l" accept
add rule ip t c1 tcp dport 21 ct helper set "ftp"
add rule ip t c1 ct expectation set "e"
add rule ip t c1 synproxy name "s"
add rule ip t c1 meta secmark set "sm"
`;

const YAML = `tables:
  - family: ip
    name: t
    objects:
      - { name: c, type: counter, spec: "packets 3 bytes 4" }
      - { name: q, type: quota, spec: "over 100 mbytes used 1 kbytes", comment: cap }
      - { name: l, type: limit, spec: "rate over 10 mbytes/second burst 5 mbytes" }
      - { name: ftp, type: ct helper, spec: 'type "ftp" protocol tcp; l3proto ip' }
      - { name: e, type: ct expectation, spec: "protocol tcp; dport 21; timeout 10s; size 10" }
      - { name: s, type: synproxy, spec: "mss 1460; wscale 7; timestamp sack-perm" }
      - { name: sm, type: secmark, spec: '"system_u:object_r:ssh_server_packet_t:s0"' }
    chains:
      - name: c1
        rules:
          - counter name "c" quota name "q" limit name "l" accept
          - tcp dport 21 ct helper set "ftp"
          - ct expectation set "e"
          - synproxy name "s"
          - meta secmark set "sm"
`;

describe('stateful objects in the config', () => {
  it('the block form, the command form and YAML objects: give the same objects and rules', () => {
    const forms = [parseNftConfig(BLOCK, 'b.nft'), parseNftConfig(COMMANDS, 'c.nft'), parseConfig(YAML, 'y.yaml')];
    const shape = (c: ReturnType<typeof parseConfig>) => ({
      objects: c.tables[0]!.objects!.map((o) => o.obj),
      rules: c.tables[0]!.chains[0]!.rules.map((r) => r.compiled.exprs),
    });
    const [b, c, y] = forms.map(shape);
    expect(c).toEqual(b);
    expect(y).toEqual(b);
    expect(b!.objects.map((o) => [o.type, o.name, o.data])).toEqual([
      ['counter', 'c', { packets: 3, bytes: 4 }],
      ['quota', 'q', { bytes: 104857600, consumed: 1024, flags: 1 }],
      ['limit', 'l', { rate: 10485760, unit: 1, burst: 5242880, type: 1, flags: 1 }],
      ['ct helper', 'ftp', { name: 'ftp', l3proto: 2, l4proto: 6 }],
      ['ct expectation', 'e', { l3proto: 2, l4proto: 6, dport: 21, timeout: 10000, size: 10 }],
      ['synproxy', 's', { mss: 1460, wscale: 7, flags: 15 }],
      ['secmark', 'sm', { ctx: 'system_u:object_r:ssh_server_packet_t:s0' }],
    ]);
    expect(b!.rules[0]).toEqual([
      { kind: 'objref', type: 1, name: 'c' }, { kind: 'objref', type: 2, name: 'q' }, { kind: 'objref', type: 4, name: 'l' },
      { kind: 'immediate', dreg: 0, verdict: 'accept' },
    ]);
  });

  it('a rule that uses an object renders as nft lists it, and compiles back to the same expressions', () => {
    for (const text of ['counter name "c"', 'quota name "q"', 'limit name "l"', 'synproxy name "s"', 'ct helper set "ftp"',
      'ct timeout set "t"', 'ct expectation set "e"', 'meta secmark set "sm"', 'counter name "c" accept']) {
      const r = compileRule(text, { family: 'inet', table: 't', chain: 'c' });
      expect(r.text).toBe(text);
      expect(renderRule({ exprs: r.exprs }, 'inet')).toBe(text);
    }
    // unquoted, as nft also takes it
    expect(compileRule('counter name c', { family: 'ip', table: 't', chain: 'c' }).text).toBe('counter name "c"');
    // a plain counter is still a counter
    expect(compileRule('counter packets 1 bytes 2', { family: 'ip', table: 't', chain: 'c' }).exprs[0]!.kind).toBe('counter');
  });

  it('an inet table: a helper for both families by default; an expectation needs its family', () => {
    const c = parseNftConfig('table inet t {\n ct helper h { type "sip" protocol udp; }\n}\n');
    expect(c.tables[0]!.objects![0]!.obj.data).toEqual({ name: 'sip', l3proto: 1, l4proto: 17 });
    const e = refusal('table inet t {\n ct expectation e { protocol tcp; dport 21; timeout 1s; size 2; }\n}\n');
    expect(e.message).toMatch(/inet table a ct expectation needs its network protocol/);
    expect(e.line).toBe(2);
  });

  it('refuses what is wrong at its position', () => {
    const cases: [string, number, number, RegExp][] = [
      ['table ip t {\n  quota q { over 100 mbites }\n}\n', 2, 22, /quota q: expected 'bytes', 'kbytes' or 'mbytes'/],
      ['table ip t {\n  counter c { packets x }\n}\n', 2, 23, /a packet count/],
      ['table ip t {\n  ct helper h { protocol tcp }\n}\n', 2, 17, /'type "NAME" protocol tcp\|udp'/],
      ['table ip t {\n  synproxy s { mss 99999 }\n}\n', 2, 20, /an MSS/],
      ['table ip t {\n  counter c { }\n  counter c { }\n}\n', 3, 11, /declares counter c twice/],
      ['table ip t {\n  counter c { }\n  chain x {\n    quota name "c"\n  }\n}\n', 4, 5, /quota c is not an object of table ip t/],
      ['table ip t {\n  chain x {\n    counter name "nope"\n  }\n}\n', 3, 5, /counter nope is not an object of table ip t/],
      ['table ip t {\n  ct timeout t { protocol tcp; l3proto ip; policy = { established: 100 }; }\n}\n', 2, 17, /ct timeout objects are not supported/],
      ['table ip t {\n  counter c { comment "a"; comment "b" }\n}\n', 2, 28, /'comment' given twice/],
      ['table ip t {\n  counter c\n}\n', 2, 12, /expected '\{' after counter c/],
    ];
    const got = cases.map(([text]) => { const e = refusal(text); return [e.line, e.column, e.message]; });
    expect(got.map(([l, c]) => [l, c])).toEqual(cases.map(([, l, c]) => [l, c]));
    cases.forEach(([text, , , re], i) => expect(got[i]![2], text).toMatch(re));
    const y = refusal('tables:\n  - family: ip\n    name: t\n    objects:\n      - { name: q, type: quota, spec: "25 gigs" }\n', true);
    expect(y.message).toMatch(/quota q: expected 'bytes'/);
    expect(y.line).toBe(5);
    expect(refusal('tables:\n  - family: ip\n    name: t\n    objects:\n      - { name: q, type: meter }\n', true).message).toMatch(/type/);
  });

  it('named object maps: declared, used by a rule, anonymous, refused of another type', () => {
    const c = parseNftConfig('table ip t {\n counter c { }\n quota q { 1 mbytes }\n map m { type inet_service : counter; elements = { 80 : "c" } }\n' +
      ' chain x {\n  counter name tcp dport map @m\n }\n}\n');
    const m = c.tables[0]!.sets![0]!;
    expect(m.set).toMatchObject({ flags: 0x40, objType: 1, keyType: 13, keyLen: 2 });
    expect(m.set.dataType).toBeUndefined();
    expect(m.elements).toEqual([{ key: '0050', flags: 0, objref: 'c' }]);
    const r = c.tables[0]!.chains[0]!.rules[0]!.compiled;
    expect(r.exprs.at(-1)).toEqual({ kind: 'objref', sreg: 1, set: 'm' });
    expect(r.text).toBe('counter name tcp dport map @m');
    // an anonymous one is the rule's own set, as nft builds it
    const anon = parseNftConfig('table ip t {\n counter c { }\n chain x {\n  counter name tcp dport map { 80 : "c" }\n }\n}\n').tables[0]!.chains[0]!.rules[0]!.compiled;
    expect(anon.sets![0]).toMatchObject({ name: '__objmap%d', flags: 0x43, objType: 1, keyType: 13, keyLen: 2, elements: [{ key: '0050', flags: 0, objref: 'c' }] });
    expect(anon.exprs.at(-1)).toEqual({ kind: 'objref', sreg: 1, set: '__objmap%d', setId: anon.sets![0]!.id });
    const bad = refusal('table ip t {\n counter c { }\n chain x {\n  counter name tcp dport map { 80 : 7c }\n }\n}\n');
    expect(bad.message).toMatch(/the name of an object/);
    const other = refusal('table ip t {\n counter c { }\n map m { type inet_service : counter; }\n chain x {\n  quota name tcp dport map @m\n }\n}\n');
    expect(other.message).toMatch(/'m' is not a map of quota objects/);
  });

  it('the compared definition leaves state out: counts, bytes and quota used', () => {
    const c = parseNftConfig(BLOCK).tables[0]!.objects!;
    const counter = c[0]!.obj, quota = c[1]!.obj;
    expect(objectDefinitionKey({ ...counter, data: { packets: 99, bytes: 12345 } })).toBe(objectDefinitionKey(counter));
    expect(objectDefinitionKey({ ...quota, data: { ...quota.data, consumed: 7 } })).toBe(objectDefinitionKey(quota));
    expect(objectDefinitionKey({ ...quota, data: { ...quota.data, bytes: 7 } })).not.toBe(objectDefinitionKey(quota));
    expect(objectDefinitionKey({ ...quota, userdata: undefined })).not.toBe(objectDefinitionKey(quota));
  });

  it('export writes each object back as a declaration that builds the same object', () => {
    const want = parseNftConfig(BLOCK).tables[0]!;
    for (const o of want.objects!) {
      const raw = rawObjectOf(o.obj, 'ip')!;
      expect(raw, o.name).toBeDefined();
      const again = parseNftConfig(`table ip t {\n  ${objectBlock(o.obj, 'ip')}\n}\n`).tables[0]!.objects![0]!;
      expect(objectDefinitionKey(again.obj), o.name).toBe(objectDefinitionKey(o.obj));
    }
  });
});
