/** The owners section of the config: checked with positions like the rest. */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { ownersYaml } from './fixtures.js';

describe('owners config section', () => {
  it('defaults the socket, the state file and the totals', () => {
    const c = parseConfig(ownersYaml('/d').replace(/  socket: .*\n  state: .*\n/, ''));
    expect(c.owners).toEqual({ family: 'ip', table: 'nfkeeper', dispatch: ['postrouting', 'prerouting'],
      socket: '/run/nfkeeper/nfkeeper.sock', state: '/var/lib/nfkeeper/owners.json', limits: { rules: 50_000, bytes: 8 << 20 } });
  });

  it.each([
    ['table: nfkeeper', 'table: other', /owners\.table: table ip other is not in tables/],
    ['dispatch: [postrouting, prerouting]', 'dispatch: [postrouting, output]', /owners\.dispatch: chain output is not a chain of table ip nfkeeper/],
    ['dispatch: [postrouting, prerouting]', 'dispatch: [postrouting, postrouting]', /listed twice/],
    ['dispatch: [postrouting, prerouting]', 'dispatch: []', /at least one dispatch chain/],
    ['  family: ip\n  table', '  family: ip\n  bogus: 1\n  table', /bogus/],
  ])('refuses %s → %s with file:line:column', (from, to, message) => {
    const text = ownersYaml('/d').replace(from, to);
    expect(() => parseConfig(text, 'c.yaml')).toThrow(ConfigError);
    expect(() => parseConfig(text, 'c.yaml')).toThrow(message);
    expect(() => parseConfig(text, 'c.yaml')).toThrow(/^c\.yaml:\d+:\d+: /);
  });
});
