import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig, parseConfig } from '../../src/config/config.js';
import { parseEnvFile, substitute } from '../../src/config/env.js';
import { ConfigError } from '../../src/base/errors.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('env');

// What flanneld writes (a host address with the node's prefix in FLANNEL_SUBNET).
const SUBNET_ENV = 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n';

const flannel = (files: string[]) => `env:
  files: [${files.join(', ')}]
tables:
  - family: ip
    name: nfkeeper
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - ip saddr \${FLANNEL_NETWORK} ip daddr \${FLANNEL_NETWORK} return
          - ip saddr != \${FLANNEL_NETWORK} ip daddr \${FLANNEL_SUBNET} return
`;

function configError(f: () => unknown): ConfigError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

const rules = (c: ReturnType<typeof parseConfig>) => c.tables[0]!.chains[0]!.rules.map((r) => r.text);

describe('${NAME} substitution', () => {
  it('fills rules from flannel\'s subnet.env, and re-reads it on the next load', () => {
    const env = join(dir, 'subnet.env');
    const cfg = join(dir, 'flannel.yaml');
    writeFileSync(env, SUBNET_ENV);
    writeFileSync(cfg, flannel([env]));
    const c = loadConfig(cfg);
    expect(rules(c)).toEqual([
      'ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.1/24 return',
    ]);
    expect(c.env).toEqual({ files: [env], used: ['FLANNEL_NETWORK', 'FLANNEL_SUBNET'] });
    // Same compiled match as the network address: the prefix masks the host part.
    const masked = parseConfig(flannel([]).replace('${FLANNEL_SUBNET}', '10.244.1.0/24').replaceAll('${FLANNEL_NETWORK}', '10.244.0.0/16').replace(/^env:\n.*\n/, ''));
    expect(c.tables[0]!.chains[0]!.rules[1]!.compiled.exprs).toEqual(masked.tables[0]!.chains[0]!.rules[1]!.compiled.exprs);
    // Another node's lease (or a new one after flannel restarts): the next load sees it.
    writeFileSync(env, SUBNET_ENV.replace('10.244.1.1/24', '10.244.7.1/24'));
    expect(rules(loadConfig(cfg))[1]).toBe('ip saddr != 10.244.0.0/16 ip daddr 10.244.7.1/24 return');
  });

  it('takes variables from the environment (the downward API), env files winning', () => {
    const text = flannel([]).replace(/^env:\n.*\n/, '');
    const c = parseConfig(text, 'c.yaml', { environment: { FLANNEL_NETWORK: '10.42.0.0/16', FLANNEL_SUBNET: '10.42.3.0/24' } });
    expect(rules(c)[1]).toBe('ip saddr != 10.42.0.0/16 ip daddr 10.42.3.0/24 return');
    const env = join(dir, 'win.env');
    writeFileSync(env, 'FLANNEL_SUBNET=10.42.9.0/24\n');
    const c2 = parseConfig(flannel([env]), 'c.yaml', { environment: { FLANNEL_NETWORK: '10.42.0.0/16', FLANNEL_SUBNET: '10.42.3.0/24' } });
    expect(rules(c2)[1]).toBe('ip saddr != 10.42.0.0/16 ip daddr 10.42.9.0/24 return');
  });

  it('an unset variable is a ConfigError at the ${ that names it', () => {
    const text = flannel([]).replace(/^env:\n.*\n/, '');
    const e = configError(() => parseConfig(text, 'c.yaml', { environment: { FLANNEL_NETWORK: '10.42.0.0/16' } }));
    expect(e.message).toMatch(/variable FLANNEL_SUBNET is not set/);
    const line = text.split('\n')[e.line - 1]!;
    expect(line.slice(e.column - 1)).toMatch(/^\$\{FLANNEL_SUBNET\} return/);
    const empty = configError(() => parseConfig(text, 'c.yaml', { environment: { FLANNEL_NETWORK: '10.42.0.0/16', FLANNEL_SUBNET: '' } }));
    expect(empty.message).toMatch(/FLANNEL_SUBNET is set but empty/);
  });

  it('$${ is a literal ${, a lone $ stays, and a malformed ${ is refused where it is', () => {
    const lookup = (n: string) => ({ A: 'x' } as Record<string, string>)[n];
    expect(substitute('a ${A} b $${A} $ c$', lookup)).toEqual({ value: 'a x b ${A} $ c$', names: ['A'] });
    expect(substitute('${A', lookup)).toEqual({ problem: { kind: 'syntax', index: 0 } });
    expect(substitute('x ${1A}', lookup)).toEqual({ problem: { kind: 'syntax', index: 2 } });
    const text = 'tables:\n  - family: ip\n    name: t\n    chains:\n      - name: c\n        rules: ["comment \\"$${kept}\\" accept", "ip daddr ${oops accept"]\n';
    const e = configError(() => parseConfig(text, 'c.yaml', { environment: {} }));
    expect(e.message).toMatch(/write \$\{NAME\}/);
    expect(e.line).toBe(6);
    expect(text.split('\n')[5]!.slice(e.column - 1)).toMatch(/^\$\{oops/);
  });

  it('a missing env file, or a bad line in one, is a ConfigError saying which', () => {
    const missing = configError(() => parseConfig(flannel([join(dir, 'nope.env')]), 'c.yaml'));
    expect(missing.message).toMatch(/env.files: .*nope\.env: cannot read/);
    expect(missing.line).toBe(2);
    const bad = join(dir, 'bad.env');
    writeFileSync(bad, '# flannel\nFLANNEL_NETWORK=10.244.0.0/16\nnot a line\n');
    const e = configError(() => parseConfig(flannel([bad]), 'c.yaml'));
    expect(e.file).toBe(bad);
    expect(e.line).toBe(3);
    const schema = configError(() => parseConfig('env: { files: /run/flannel/subnet.env }\n', 'c.yaml'));
    expect(schema.message).toMatch(/:1:15: env\.files: .*expected array/);
  });

  it('parses env files as flannel and systemd write them', () => {
    expect([...parseEnvFile('# c\n\nexport A=1\nB="two words"\nC=\'x=y\'\nD=\n', 'f')]).toEqual([
      ['A', '1'], ['B', 'two words'], ['C', 'x=y'], ['D', ''],
    ]);
    expect(() => parseEnvFile('A="open\n', 'f')).toThrow(/unterminated double quote/);
    expect(() => parseEnvFile('1A=x\n', 'f')).toThrow(/not a variable name/);
  });

  it('does not touch keys, non-string values or the env section itself', () => {
    const c = parseConfig('env: { files: [] }\ntables: []\n', 'c.yaml', { environment: {} });
    expect(c.env).toEqual({ files: [], used: [] });
  });
});
