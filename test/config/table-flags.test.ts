/**
 * `flags dormant` on a table, with nft as the oracle: nfkeeper installs a dormant table as nft
 * does (listing and netlink dump), keeps it dormant or wakes it in place with one NEWTABLE (no
 * rule rewritten), exports it back (nft and YAML forms in sync), and with protect on keeps owner
 * and persist beside it. owner/persist in a file are refused: they are protect mode's.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { open } from '../../src/netlink/socket.js';
import { TABLE_F } from '../../src/netlink/objects.js';
import { cli } from '../helpers/cli.js';
import { startKeeper } from '../helpers/keeper.js';
import { withNetns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';

const dir = tempDir('table-flags');

const DORMANT = 'table ip dm {\n\tflags dormant\n\tcomment "asleep"\n\tchain pre {\n' +
  '\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\ttcp dport 80 dnat to 10.0.0.1\n\t}\n}\n';
const AWAKE = DORMANT.replace('\tflags dormant\n', '');

const save = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe('table flags', () => {
  it('a dormant table installs as nft installs it, is in sync, and exports back as flags dormant', async () => {
    const file = save('dormant.nft', DORMANT);
    await withNetns(async (a) => {
      a.nft(DORMANT);
      await withNetns(async (b) => {
        const apply = await cli('apply', '--config', file, '--netns', b.path);
        expect([apply.code, apply.err]).toEqual([0, '']);
        expect(b.exec('nft', ['list', 'table', 'ip', 'dm'])).toBe(a.exec('nft', ['list', 'table', 'ip', 'dm']));
        expect(netlinkDump(b, 'ip', 'dm')).toBe(netlinkDump(a, 'ip', 'dm'));
      }, 'flags-b');
      expect((await cli('check', '--config', file, '--netns', a.path)).code).toBe(0);
      // the awake config differs from nft's dormant install by the flag only
      const awake = await cli('check', '--config', save('awake.nft', AWAKE), '--netns', a.path);
      expect(awake.code).toBe(1);
      expect(awake.out).toMatch(/table ip dm is dormant, want active/);
      for (const format of ['nft', 'yaml']) {
        const out = await cli('export', '--table', 'ip', 'dm', '--netns', a.path, '--format', format);
        expect(out.code).toBe(0);
        expect(out.out).toMatch(format === 'nft' ? /^table ip dm \{\n\tflags dormant\n/ : /flags:\n\s+- dormant/);
        const back = save(`export.${format}`, out.out);
        expect((await cli('check', '--config', back, '--netns', a.path)).code).toBe(0);
      }
    }, 'flags-a');
  });

  it('waking and putting to sleep is one NEWTABLE in place: rule handles stay', async () => {
    await withNetns(async (ns) => {
      ns.nft(DORMANT);
      const handles = () => ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'dm', 'pre']).match(/# handle \d+/g);
      const before = handles();
      for (const [text, dormant] of [[AWAKE, false], [DORMANT, true]] as const) {
        const apply = await cli('apply', '--config', save('t.nft', text), '--netns', ns.path);
        expect([apply.code, apply.err]).toEqual([0, '']);
        expect(apply.out).toMatch(/applied 1 operations? in one batch/);
        expect(ns.exec('nft', ['list', 'table', 'ip', 'dm']).includes('flags dormant')).toBe(dormant);
        expect(handles()).toEqual(before);
      }
    }, 'flags-toggle');
  });

  it('a keeper puts a table woken behind its back to sleep again; with protect on, owner and persist stay', async () => {
    await withNetns(async (ns) => {
      const yaml = 'tables:\n  - family: ip\n    name: dm\n    protect: true\n    flags: [dormant]\n    chains:\n      - name: pre\n' +
        '        type: nat\n        hook: prerouting\n        priority: dstnat\n        rules:\n          - tcp dport 80 dnat to 10.0.0.1\n';
      const keeper = await startKeeper(ns, { config: parseConfig(yaml, 'p.yaml') });
      const sock = open({ netns: ns.path });
      try {
        const flags = async () => (await sock.getTable('ip', 'dm'))!.flags;
        expect(await flags()).toBe(TABLE_F.DORMANT | TABLE_F.OWNER | TABLE_F.PERSIST);
        // Another process cannot touch an owned table: wake it through the keeper's own desired
        // state instead, by a reload, and back.
        await keeper.setConfig(parseConfig(yaml.replace('    flags: [dormant]\n', ''), 'p.yaml'));
        await until('awake and still owned', async () => await flags() === (TABLE_F.OWNER | TABLE_F.PERSIST));
        await keeper.setConfig(parseConfig(yaml, 'p.yaml'));
        await until('dormant again', async () => await flags() === (TABLE_F.DORMANT | TABLE_F.OWNER | TABLE_F.PERSIST));
      } finally {
        sock.close();
        await keeper.stop();
      }
    }, 'flags-protect');
    await withNetns(async (ns) => {
      const keeper = await startKeeper(ns, { config: parseNftConfig(DORMANT, 'd.nft') });
      try {
        ns.nft('add table ip dm');  // NEWTABLE without flags: wakes it
        expect(ns.exec('nft', ['list', 'table', 'ip', 'dm'])).not.toMatch(/flags dormant/);
        await until('dormant again', () => ns.exec('nft', ['list', 'table', 'ip', 'dm']).includes('flags dormant'));
      } finally {
        await keeper.stop();
      }
    }, 'flags-repair');
  });

  it('owner and persist are refused in a file (protect sets them), and unknown flags too', () => {
    for (const [flag, col] of [['owner', 20], ['persist', 28], ['sleepy', 20]] as const) {
      let e: unknown;
      try {
        parseNftConfig(`table ip t { flags ${flag === 'persist' ? 'dormant,persist' : flag}; }\n`, 'f.nft');
      } catch (x) {
        e = x;
      }
      expect(e).toBeInstanceOf(ConfigError);
      expect([(e as ConfigError).line, (e as ConfigError).column]).toEqual([1, col]);
      expect((e as ConfigError).reason).toMatch(flag === 'sleepy' ? /not a table flag/ : /protect mode's/);
    }
  });
});
