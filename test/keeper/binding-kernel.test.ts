/**
 * A running keeper holding rules with chain bindings (`jump { … }`) on the real kernel: each bound
 * chain is part of its rule. The kernel refuses any change to a bound chain, so what another writer
 * can do to one is through its rule: delete it (the bound chain goes with it), replace it with
 * another binding, flush the chain, delete the table. The keeper repairs each back to what the
 * file says, as nft lists it, and its events (bound chains added by its own repairs, named by the
 * kernel) leave it in sync rather than fighting.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import { cli } from '../helpers/cli.js';
import { withKeeper } from '../helpers/keeper.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';

const dir = tempDir('binding-keeper');

const FILE = `table inet t {
	chain filter_in {
		type filter hook input priority filter; policy accept;
		tcp dport 22 jump {
			ip saddr { 10.0.0.1, 10.0.0.2 } accept
			counter packets 0 bytes 0 drop
		}
		udp dport 53 accept
		iifname "lo" goto {
			accept
		} comment "loopback"
		jump other
	}

	chain other {
		meta mark 0x00000001 jump {
			return
		}
	}
}
`;

describe('a running keeper with chain bindings', () => {
  it('repairs a deleted rule with a binding, a binding replaced, a flushed chain and a deleted table', async () => {
    const file = join(dir, 'keeper.nft');
    writeFileSync(file, FILE);
    const config = parseNftConfig(FILE, file);
    await withKeeper({ config, tag: 'bind-keeper' }, async ({ ns, keeper }) => {
      const listing = () => ns.exec('nft', ['list', 'ruleset']);
      expect(listing()).toBe(FILE);
      const inSync = async () => {
        await keeper.idle();
        const r = await cli('check', '--config', file, '--netns', ns.path);
        return r.out === 'in sync';
      };
      /** The handle of the rule whose listing (`nft -a`) ends a line matching `end`. */
      const handle = (chain: string, end: RegExp) => {
        const m = new RegExp(`${end.source} # handle (\\d+)`).exec(ns.exec('nft', ['-a', 'list', 'chain', 'inet', 't', chain]));
        return Number(m![1]);
      };
      const tampers: [string, () => void][] = [
        ['the rule with a binding deleted', () => ns.nft(`delete rule inet t filter_in handle ${handle('filter_in', /\n\t\t\}/)}\n`)],
        ['its binding replaced by another', () => ns.nft(
          `replace rule inet t filter_in handle ${handle('filter_in', /\n\t\t\}/)} tcp dport 22 jump { ip saddr { 10.0.0.1, 10.0.0.2 } accept; counter drop; accept; }\n`)],
        ['a plain rule between bindings deleted', () => ns.nft(`delete rule inet t filter_in handle ${handle('filter_in', /udp dport 53 accept/)}\n`)],
        ['a binding whose comment changed', () => ns.nft(
          `replace rule inet t filter_in handle ${handle('filter_in', /\} comment "loopback"/)} iifname "lo" goto { accept; } comment "other"\n`)],
        ['a foreign rule with a binding added', () => ns.nft('add rule inet t other jump { drop; }\n')],
        ['the chain flushed', () => ns.nft('flush chain inet t other\n')],
        ['the table deleted', () => ns.nft('delete table inet t\n')],
      ];
      for (const [what, tamper] of tampers) {
        tamper();
        expect(listing(), what).not.toBe(FILE);
        await until(`${what} to be repaired`, inSync, 20_000);
        expect(listing(), what).toBe(FILE);
      }
      // nothing left over: every bound chain the kernel holds is one of the file's (three rules' worth)
      const dump = ns.exec('nft', ['--debug=netlink', 'list', 'table', 'inet', 't']);
      expect(new Set(dump.match(/__chain\d+/g)).size).toBe(3);
      expect(keeper.status().tables.map((t) => t.state)).toEqual(['verified']);
    });
  });
});
