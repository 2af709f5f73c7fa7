/** Bad gc config, bad live sets: a clear error, exit 2, and no kernel change. */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { open } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { netnsPerSuite } from '../helpers/netns-hooks.js';
import { DEAD, LIVE, file, gcYaml, restoreNomad, save } from './fixtures.js';

function configError(text: string): ConfigError {
  try {
    parseConfig(text, 'gc.yaml');
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error('parsed');
}

describe('gc config validation', () => {
  it('a gc-only config (tables: []) is valid and gets the defaults', () => {
    const c = parseConfig(gcYaml('', '/tmp/live.json'));
    expect(c.tables).toEqual([]);
    expect(c.gc).toEqual({ enabled: false, backend: 'nftables', grace: 300_000, interval: 30_000, live: { file: '/tmp/live.json' },
      foreign: [{ family: 'ip', table: 'nat', owner: 'nomad' }] });
    expect(parseConfig('gc:\n  foreign: []\n  live: { command: [nomad-live, --json] }\n  grace: 0s\n').gc)
      .toMatchObject({ grace: 0, live: { command: ['nomad-live', '--json'] } });
    expect(parseConfig('tables: []\n').gc).toBeUndefined();
  });

  it.each([
    ['a bad grace', `${gcYaml('', '/x')}  grace: 5 minutes\n`, 9, 10, /gc\.grace: a duration/],
    ['an unknown family', 'gc:\n  foreign:\n    - family: ipx\n      table: nat\n      owner: nomad\n', 3, 15, /gc\.foreign\.0\.family/],
    ['neither owner nor tag', 'gc:\n  foreign:\n    - family: ip\n      table: nat\n', 3, 7, /gc\.foreign\.0: give an owner/],
    ['a tag without <id>', 'gc:\n  foreign:\n    - { family: ip, table: nat, tag: "nomad" }\n', 3, 38, /<id> exactly once/],
    ['an owner with a quote', 'gc:\n  foreign:\n    - { family: ip, table: nat, owner: \'no"mad\' }\n', 3, 40, /owner name/],
    ['both file and command', 'gc:\n  live:\n    file: /x\n    command: [a]\n', 3, 5, /gc\.live/],
    ['an unknown key', 'gc:\n  foriegn: []\n', 2, 3, /foriegn/],
  ])('%s: ConfigError with file:line:column', (_what, text, line, col, msg) => {
    const e = configError(text);
    expect(e.message).toMatch(msg);
    expect(e.message).toMatch(/^gc\.yaml:\d+:\d+: /);
    expect([e.line, e.column]).toEqual([line, col]);
  });
});

describe('nfkeeper gc refuses bad input and changes nothing', () => {
  let before: string;
  const ns = netnsPerSuite('gcerr', (made) => {
    restoreNomad(made);
    before = save(made);
  });

  const cases: [string, () => string[], RegExp][] = [
    ['a bad gc config', () => ['--config', file(`${gcYaml()}  grace: soon\n`, 'yaml')], /\.yaml:\d+:\d+: gc\.grace/],
    ['a config without gc', () => ['--config', file('tables: []\n', 'yaml'), '--live-file', file('[]')], /no gc\.foreign tables/],
    ['no live set', () => ['--config', file(gcYaml(), 'yaml')], /gc\.live is not configured/],
    ['a live file that is not JSON', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', file(`["${LIVE}"`)], /not JSON/],
    ['a live file that is not an array', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', file(`{"ids":["${LIVE}"]}`)], /must be a JSON array of ids, not object/],
    ['a live file with a number', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', file(`["${LIVE}", 7]`)], /element 1 is number/],
    ['a live file with a bad id', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', file(JSON.stringify([LIVE, 'x" id: "y']))], /element 1 .* is not a valid id/],
    ['a missing live file', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', '/nonexistent/live.json'], /cannot read/],
    ['a failing live command', () => ['--config', file(`${gcYaml()}  live:\n    command: [sh, -c, "exit 3"]\n`, 'yaml')], /failed/],
    ['a bad --grace', () => ['--config', file(gcYaml(), 'yaml'), '--live-file', file('[]'), '--grace', 'soon'], /--grace/],
  ];
  it.each(cases)('%s', async (_what, args, msg) => {
    const sock = open({ netns: ns.path });
    const gen = sock.generation();
    const r = await cli('gc', '--netns', ns.path, '--grace', '0s', ...args());
    expect(r.code).toBe(2);
    expect(r.err).toMatch(msg);
    expect(r.err).not.toMatch(/\n\s+at /);  // a message, not a stack
    expect(sock.generation()).toBe(gen);
    sock.close();
    expect(save(ns)).toBe(before);
  });

  it('a live command\'s JSON output is a live set', async () => {
    const config = file(`${gcYaml()}  live:\n    command: [sh, -c, "echo '[\\"${LIVE}\\", \\"${DEAD}\\"]'"]\n`, 'yaml');
    const r = await cli('gc', '--config', config, '--netns', ns.path, '--grace', '0s');
    expect(r.err).toBe('');
    expect(r.out).toBe('no garbage');
    expect(r.code).toBe(0);
  });
});
