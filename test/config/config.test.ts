import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig, parsePriority } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { FLANNEL_YAML } from '../keeper/helpers.js';

function configError(text: string): ConfigError {
  try {
    parseConfig(text, 'c.yaml');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('config', () => {
  it('loads the flannel example with base chain and compiled rules', () => {
    const c = parseConfig(FLANNEL_YAML);
    expect(c.tables).toHaveLength(1);
    const chain = c.tables[0]!.chains[0]!;
    expect(chain.base).toEqual({ type: 'nat', hook: 'postrouting', priority: 100, policy: 'accept' });
    expect(chain.rules).toHaveLength(4);
    expect(chain.rules[1]!.compiled.exprs.some((e) => e.kind === 'masq')).toBe(true);
  });

  it('names priorities as nft does', () => {
    expect(parsePriority('srcnat')).toBe(100);
    expect(parsePriority('dstnat - 5')).toBe(-105);
    expect(parsePriority('filter+10')).toBe(10);
    expect(parsePriority(-7)).toBe(-7);
  });

  it('accepts a config with no tables', () => {
    expect(parseConfig('tables: []\n').tables).toEqual([]);
  });

  it('reports YAML syntax errors with their position', () => {
    const e = configError('tables:\n  - family: ip\n    name: [oops\n');
    expect(e.file).toBe('c.yaml');
    expect(e.line).toBeGreaterThanOrEqual(3);
  });

  it('reports schema errors at the offending node', () => {
    const e = configError('tables:\n  - family: ipx\n    name: t\n');
    expect([e.line, e.column]).toEqual([2, 13]);
    expect(e.reason).toMatch(/tables\.0\.family/);
  });

  it('refuses unknown keys', () => {
    const e = configError('tables:\n  - family: ip\n    name: t\n    colour: red\n');
    expect(e.reason).toMatch(/colour/);
  });

  it('points a rule syntax error at the column inside the rule', () => {
    const e = configError(`tables:
  - family: ip
    name: t
    chains:
      - name: c
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - ip saddr 10.0.0.0/8 masquerade bogus
`);
    expect(e.line).toBe(10);
    expect(e.column).toBeGreaterThan(12);
    expect(e.reason).toMatch(/rule 1 of chain c/);
  });

  it('refuses NAT statements in the wrong hook before anything reaches the kernel', () => {
    const e = configError(`tables:
  - family: ip
    name: t
    chains:
      - name: c
        type: nat
        hook: prerouting
        priority: dstnat
        rules:
          - masquerade
`);
    expect(e.reason).toMatch(/masquerade is only valid in postrouting chains/);
    expect(e.line).toBe(10);
  });

  it('refuses half a base chain, duplicates, and jumps to undefined chains', () => {
    expect(configError('tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        hook: input\n').reason)
      .toMatch(/type, hook and priority together/);
    expect(configError('tables:\n  - {family: ip, name: t}\n  - {family: ip, name: t}\n').reason).toMatch(/twice/);
    expect(configError('tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        rules: ["jump nowhere"]\n').reason)
      .toMatch(/nowhere/);
  });
});

describe('bounded inputs', () => {
  it('a config of more than 250,000 rules is refused at `tables`, before any rule is compiled (docs/cli.md, Bounded inputs)', () => {
    // The rules as one long flow sequence (YAML's cheapest form of so many); the last one does not
    // compile, so the count's refusal shows it came first.
    const chain = (n: number) => `tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        rules: [${'accept,'.repeat(n - 1)}'no such rule']\n`;
    const e = configError(chain(250_001));
    expect(e.message).toBe('c.yaml:2:3: 250001 rules; a config holds at most 250000');
  });
});

describe('base chain types and hooks', () => {
  const chain = (type: string, hook: string, priority: string) =>
    `tables:\n  - family: inet\n    name: t\n    chains:\n      - name: c\n        type: ${type}\n        hook: ${hook}\n        priority: ${priority}\n`;

  it('refuses what the kernel refuses, at the hook or priority line', () => {
    const fwd = configError(chain('nat', 'forward', '0'));
    expect([fwd.line, fwd.reason]).toEqual([7, expect.stringMatching(/nat chain cannot hook forward/)]);
    expect(configError(chain('route', 'prerouting', '0')).reason).toMatch(/route chain cannot hook prerouting.*output/);
    const pri = configError(chain('nat', 'prerouting', 'raw'));
    expect([pri.line, pri.reason]).toEqual([8, expect.stringMatching(/above conntrack's \(-200\); -300/)]);
    expect(configError(chain('nat', 'prerouting', '-200')).reason).toMatch(/-200 is refused/);
  });

  it('accepts what the kernel accepts', () => {
    for (const [type, hook, priority] of [['nat', 'prerouting', '-199'], ['nat', 'input', 'srcnat'], ['filter', 'forward', '0'], ['route', 'output', 'mangle']]) {
      expect(parseConfig(chain(type!, hook!, priority!)).tables[0]!.chains[0]!.base).toMatchObject({ type, hook });
    }
  });

  it('an nft file gets the same error at the hook word', () => {
    try {
      parseNftConfig('table ip t {\n  chain c {\n    type nat hook forward priority 0;\n  }\n}\n', 'c.nft');
      throw new Error('expected a ConfigError');
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      expect([(e as ConfigError).line, (e as ConfigError).column]).toEqual([3, 19]);
    }
  });
});

describe('config aliases', () => {
  it('an alias without its anchor is a ConfigError at the alias, not a ReferenceError', () => {
    const e = configError('tables:\n  - family: *f\n    name: t\n');
    expect([e.line, e.column]).toEqual([2, 13]);
    expect(e.reason).toMatch(/alias/i);
  });

  it('a billion laughs is refused, not expanded', () => {
    const lol = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]'];
    for (let i = 1; i < 9; i++) lol.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill('*' + String.fromCharCode(96 + i)).join(',')}]`);
    lol.push('tables: *i');
    const e = configError(lol.join('\n') + '\n');
    expect(e.reason).toMatch(/alias/i);
  });
});
