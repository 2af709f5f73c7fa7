/**
 * A reload's reuse of the previous load's compiled rules (src/config/rule-reuse.ts): a rule whose
 * text and compile context are unchanged is taken, anything else in the context changed compiles
 * it again, and the config a reuse gives is the one a fresh compile gives.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig, type Config, type LoadOptions } from '../../src/config/config.js';
import { RuleReuse } from '../../src/config/rule-reuse.js';
import { compactAsCompiled } from '../../src/model/compact.js';
import { traced, type CompileInput } from '../../src/base/compile-inputs.js';
import { interfaceTable } from '../../src/rules/render.js';
import { tempDir } from '../helpers/tmp.js';

const yaml = (family: string, rules: string[], sets = '') =>
  `tables:\n  - family: ${family}\n    name: t\n${sets}    chains:\n      - name: c\n        type: filter\n        hook: input\n        priority: 0\n        rules:\n` +
  rules.map((r) => `          - ${JSON.stringify(r)}\n`).join('');

const RULES = Array.from({ length: 50 }, (_, i) => `ip saddr 10.0.${i}.1 tcp dport ${1000 + i} accept`);

/** The config's tables with every rule's compiled form read out (its text too): what the keeper installs. */
const plain = (c: Config) => JSON.parse(JSON.stringify(c.tables.map((t) => ({ ...t, chains: t.chains.map((ch) => ({ ...ch, rules: ch.rules.map((r) => ({ source: r.text, ...r.compiled })) })) }))));

describe('a reload reuses the rules the previous load compiled', () => {
  const dir = tempDir('rule-reuse');
  const file = join(dir, 'c.yaml');
  /** `text` loaded as the daemon does, reusing `previous`'s rules; with what it compiled and reused. */
  const load = (text: string, previous?: Config, o: LoadOptions = {}) => {
    writeFileSync(file, text);
    const reuse = new RuleReuse(previous);
    const config = loadConfig(file, { compiled: compactAsCompiled(), ...o, reuse });
    return { config, compiled: reuse.compiledCount, reused: reuse.reused };
  };
  /** The same text compiled from nothing. */
  const fresh = (text: string, o: LoadOptions = {}) => {
    writeFileSync(file, text);
    return loadConfig(file, { compiled: compactAsCompiled(), ...o });
  };

  it('one rule edited: that one compiled, the others taken as they were, the config a fresh compile gives', () => {
    const a = load(yaml('ip', RULES));
    expect(a).toMatchObject({ compiled: 50, reused: 0 });
    const edited = RULES.map((r, i) => (i === 17 ? r.replace('accept', 'drop') : r));
    const b = load(yaml('ip', edited), a.config);
    expect(b).toMatchObject({ compiled: 1, reused: 49 });
    expect(b.config.tables[0]!.chains[0]!.rules[3]!.compiled).toBe(a.config.tables[0]!.chains[0]!.rules[3]!.compiled);
    expect(plain(b.config)).toEqual(plain(fresh(yaml('ip', edited))));
    // And the one after it, from b's.
    expect(load(yaml('ip', RULES), b.config)).toMatchObject({ compiled: 1, reused: 49 });
  });

  it('a text twice in a chain: each a rule of its own (the second compiled)', () => {
    const twice = [...RULES.slice(0, 3), RULES[0]!];
    const a = load(yaml('ip', twice));
    const b = load(yaml('ip', twice), a.config);
    expect(b).toMatchObject({ compiled: 1, reused: 3 });
    const rules = b.config.tables[0]!.chains[0]!.rules;
    expect(rules[3]!.compiled).not.toBe(rules[0]!.compiled);
  });

  it('another family, table or chain: compiled again', () => {
    const a = load(yaml('ip', RULES));
    expect(load(yaml('inet', RULES), a.config)).toMatchObject({ compiled: 50, reused: 0 });
    expect(load(yaml('ip', RULES).replace('name: c\n', 'name: d\n'), a.config)).toMatchObject({ compiled: 50, reused: 0 });
    expect(load(yaml('ip', RULES).replace('name: t\n', 'name: u\n'), a.config)).toMatchObject({ compiled: 50, reused: 0 });
  });

  it('a named set whose definition changed: the rules that name it compiled again, not for its elements', () => {
    const sets = (type: string, el: string) => `    sets:\n      - { name: s, type: ${type}, elements: [${el}] }\n`;
    const rules = ['ip saddr @s accept', ...RULES.slice(0, 5)];
    const a = load(yaml('ip', rules, sets('ipv4_addr', '10.0.0.1')));
    expect(load(yaml('ip', rules, sets('ipv4_addr', '10.0.0.2')), a.config)).toMatchObject({ compiled: 0, reused: 6 });
    const withFlags = `    sets:\n      - { name: s, type: ipv4_addr, flags: [interval], elements: [10.0.0.0/8] }\n`;
    const b = load(yaml('ip', rules, withFlags), a.config);
    expect(b).toMatchObject({ compiled: 1, reused: 5 });
    expect(plain(b.config)).toEqual(plain(fresh(yaml('ip', rules, withFlags))));
    // The set's type: the rule no longer fits it, and the reload is refused as a fresh load is.
    const other = yaml('ip', rules, sets('inet_service', '"22"'));
    expect(() => fresh(other)).toThrow(/@s/);
    expect(() => load(other, a.config)).toThrow(/@s/);
  });

  it('a named set a bound chain names: the rule binding it compiled again when the set changed', () => {
    const sets = (type: string, el: string) => `    sets:\n      - { name: s, type: ${type}, elements: [${el}] }\n`;
    const rules = ['ip protocol tcp jump { ip saddr @s accept; }', ...RULES.slice(0, 5)];
    const a = load(yaml('ip', rules, sets('ipv4_addr', '10.0.0.1')));
    expect(load(yaml('ip', rules, sets('ipv4_addr', '10.0.0.2')), a.config)).toMatchObject({ compiled: 0, reused: 6 });
    // A type the bound rule's key no longer fits: refused as a fresh load is, not taken as it was.
    const other = yaml('ip', rules, sets('inet_service', '"22"'));
    expect(() => fresh(other)).toThrow(/@s/);
    expect(() => load(other, a.config)).toThrow(/@s/);
  });

  it('a ${NAME} whose value changed: its rules compiled again (their text is another), the rest taken', () => {
    const rules = ['ip saddr ${NET} accept', ...RULES.slice(0, 5)];
    const a = load(yaml('ip', rules), undefined, { environment: { NET: '10.1.0.0/16' } });
    const b = load(yaml('ip', rules), a.config, { environment: { NET: '10.2.0.0/16' } });
    expect(b).toMatchObject({ compiled: 1, reused: 5 });
    expect(plain(b.config)).toEqual(plain(fresh(yaml('ip', rules), { environment: { NET: '10.2.0.0/16' } })));
  });

  it("an interface whose index changed: the rules that resolved it compiled again, the reused ones' inputs in the load's trace", () => {
    // (a user's and a group's name: looked up in /etc/passwd and /etc/group, system files as /etc/services is)
    const rules = ['iif "eth0" accept', 'oif "eth1" accept', 'tcp dport ssh accept', 'meta skuid "root" accept', 'meta skgid "root" accept', ...RULES.slice(0, 2)];
    const a = load(yaml('ip', rules), undefined, { interfaces: interfaceTable({ lo: 1, eth0: 2, eth1: 3 }) });
    const now = interfaceTable({ lo: 1, eth0: 4, eth1: 3 });
    let b!: ReturnType<typeof load>;
    const { inputs } = traced(() => { b = load(yaml('ip', rules), a.config, { interfaces: now }); });
    expect(b).toMatchObject({ compiled: 1, reused: 6 });
    expect(inputs).toContainEqual(expect.objectContaining({ kind: 'file', path: '/etc/passwd' }));
    expect(inputs).toContainEqual(expect.objectContaining({ kind: 'file', path: '/etc/group' }));
    expect(plain(b.config)).toEqual(plain(fresh(yaml('ip', rules), { interfaces: now })));
    // eth1 and /etc/services (ssh) were not read by this load's compile, yet the compile cache must see them among the inputs.
    expect(inputs).toEqual(expect.arrayContaining<CompileInput>([{ kind: 'link', name: 'eth0', index: 4 }, { kind: 'link', name: 'eth1', index: 3 }]));
    expect(inputs).toContainEqual(expect.objectContaining({ kind: 'file', path: '/etc/services' }));
  });

  it('anonymous sets: reused where their batch ids are as they were, compiled again where an edit before shifted them', () => {
    const rules = ['tcp dport { 22, 80 } accept', ...RULES.slice(0, 3), 'udp dport { 53, 123 } accept'];
    const a = load(yaml('ip', rules));
    expect(load(yaml('ip', rules.map((r, i) => (i === 2 ? `${r} comment "x"` : r))), a.config)).toMatchObject({ compiled: 1, reused: 4 });
    const shifted = ['tcp dport { 22, 443 } accept', ...rules.slice(1)].map((r, i) => (i === 0 ? 'tcp dport { 22, 80, 443 } accept' : r));
    shifted.splice(1, 0, 'tcp sport { 1, 2 } accept');
    const b = load(yaml('ip', shifted), a.config);
    // the new rule and the first (edited) compiled, and the last, its set's id moved by the new one's
    expect(b).toMatchObject({ compiled: 3, reused: 3 });
    expect(plain(b.config)).toEqual(plain(fresh(yaml('ip', shifted))));
  });

  it("from the compile cache: its rules depend on every interface of the entry's trace", () => {
    const rules = ['iif "eth0" accept', ...RULES.slice(0, 3)];
    const a = load(yaml('ip', rules), undefined, { interfaces: interfaceTable({ eth0: 2 }) });
    // a's config as a cache hit gives it: no inputs per rule, the entry's all.
    const aRules = a.config.tables[0]!.chains[0]!.rules.map((r) => r.compiled);
    // (its rules as the cache makes them: without the inputs this process noted compiling them)
    const cached: Config = { ...a.config, tables: [{ ...a.config.tables[0]!, chains: [{ ...a.config.tables[0]!.chains[0]!, rules: aRules.map((compiled, i) => ({ text: rules[i]!, compiled: { ...compiled } })) }] }] };
    new RuleReuse().fromCache(cached, [{ kind: 'file', path: file, sha256: 'x' }, { kind: 'link', name: 'eth9', index: 7 }]);
    expect(load(yaml('ip', rules), cached, { interfaces: interfaceTable({ eth0: 2, eth9: 7 }) })).toMatchObject({ compiled: 0, reused: 4 });
    expect(load(yaml('ip', rules), cached, { interfaces: interfaceTable({ eth0: 2, eth9: 8 }) })).toMatchObject({ compiled: 4, reused: 0 });
  });
});
