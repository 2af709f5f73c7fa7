/**
 * Named stateful objects on the real kernel, nft 1.0.6 as the oracle: nfkeeper's install of a
 * table with every object kind this kernel holds (and rules using each) lists and dumps as nft's
 * install of the same file, objects included (GETOBJ, decoded); `check` finds nft's install in
 * sync; export reads back in sync. A running keeper repairs a deleted rule, a replaced rule, a
 * flushed chain, a deleted object, an object changed in place and an object map's element deleted or
 * changed (named object maps, `counter name udp dport map @m`), and an object's counters
 * survive every one of those repairs (read before and after, with packets sent through the
 * namespace in between): only a missing or differently configured object is created again.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import type { NftObj } from '../../src/netlink/objects.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { cli } from '../helpers/cli.js';
import { withKeeper } from '../helpers/keeper.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { until } from '../helpers/wait.js';

const dir = tempDir('objects');

const ALL = `table ip t {
	counter c {
		packets 0 bytes 0
	}

	counter spare {
		comment "not used by a rule"
	}

	counter c9 {
	}

	map m {
		type inet_service : counter
		elements = { 9 : "c9", 10 : "c" }
	}

	quota q {
		over 100 mbytes used 0 bytes
	}

	limit l {
		rate over 10 mbytes/second burst 5 mbytes
	}

	limit l2 {
		rate 10/second
	}

	ct helper ftp {
		type "ftp" protocol tcp
		l3proto ip
	}

	ct expectation e {
		protocol tcp
		dport 21
		timeout 10s
		size 10
		l3proto ip
	}

	synproxy s {
		mss 1460
		wscale 7
		timestamp sack-perm
	}

	ct timeout ct1 {
		protocol tcp
		l3proto ip
		policy = { established : 100, close : 5 }
	}

	ct timeout udp-spare {
		protocol udp
		l3proto ip
		policy = { unreplied : 3, replied : 9 }
	}

	chain out {
		type filter hook output priority filter; policy accept;
		counter name "c"
		quota name "q"
		limit name "l2"
		udp dport 9 limit name "l"
		counter name udp dport map @m
	}

	chain helpers {
		tcp dport 21 ct helper set "ftp"
		ct expectation set "e"
		tcp dport 22 synproxy name "s"
		ct timeout set "ct1"
	}
}
`;

const INET = `table inet t {
	ct helper sip {
		type "sip" protocol udp
		l3proto inet
	}

	counter c {
	}

	ct timeout t6 {
		protocol tcp
		l3proto ip6
		policy = { syn_sent : 1, syn_recv : 2, established : 3, fin_wait : 4, close_wait : 5, last_ack : 6, time_wait : 7, close : 8, syn_sent2 : 9, retrans : 10, unack : 11 }
	}

	ct timeout u {
		protocol udp
		l3proto inet
	}

	chain c1 {
		udp dport 5060 ct helper set "sip"
		counter name "c" accept
	}
}
`;

/** The table's objects as the kernel dumps them, by type and name, without handles and use counts. */
async function objectsOf(sock: NftSocket, family: 'ip' | 'inet', table: string): Promise<Omit<NftObj, 'handle' | 'use'>[]> {
  const objs = await sock.listObjs({ family, table });
  return objs.map(({ handle: _h, use: _u, ...o }) => o).sort((a, b) => `${a.type} ${a.name}`.localeCompare(`${b.type} ${b.name}`));
}

async function installBoth(text: string, family: 'ip' | 'inet', fn: (nft: Netns, ours: Netns, file: string) => Promise<void>): Promise<void> {
  const file = join(dir, `${family}.nft`);
  writeFileSync(file, text);
  await withNetns(async (nft) => {
    nft.nft(text);
    await withNetns(async (ours) => {
      const r = await cli('apply', '--config', file, '--netns', ours.path);
      expect(r.code, r.err).toBe(0);
      await fn(nft, ours, file);
    }, 'objs-ours');
  }, 'objs-nft');
}

describe('stateful objects on the kernel', () => {
  for (const [family, text] of [['ip', ALL], ['inet', INET]] as const) {
    it(`${family}: nfkeeper's install lists and dumps (rules and objects) as nft's; check and export are in sync`, async () => {
      await installBoth(text, family, async (nft, ours, file) => {
        expect(ours.exec('nft', ['list', 'table', family, 't'])).toBe(nft.exec('nft', ['list', 'table', family, 't']));
        expect(netlinkDump(ours, family, 't')).toBe(netlinkDump(nft, family, 't'));
        const a = open({ netns: nft.path }), b = open({ netns: ours.path });
        try {
          expect(await objectsOf(b, family, 't')).toEqual(await objectsOf(a, family, 't'));
        } finally {
          a.close();
          b.close();
        }
        // nft's own install is what the file says
        const check = await cli('check', '--config', file, '--netns', nft.path);
        expect(check.out, check.out).toBe('in sync');
        expect(check.code).toBe(0);
        for (const format of ['nft', 'yaml']) {
          const exp = await cli('export', '--netns', nft.path, '--format', format, '--table', family, 't');
          expect(exp.code, exp.err).toBe(0);
          const back = join(dir, `export-${family}.${format}`);
          writeFileSync(back, exp.out + '\n');
          const again = await cli('check', '--config', back, '--netns', ours.path);
          expect(again.out, exp.out).toBe('in sync');
          // and the export compiles to the same objects as the file
          if (format === 'nft') {
            const key = (c: ReturnType<typeof parseNftConfig>) => c.tables[0]!.objects!.map((o) => [o.type, o.name, o.obj.userdata]).sort();
            expect(key(parseNftConfig(exp.out))).toEqual(key(parseNftConfig(text)));
          }
        }
      });
    });
  }

  it("Debian's ct_helpers.nft: its helpers, the rule using one and its anonymous helper map install as nft's", async () => {
    const text = readFileSync('/usr/share/doc/nftables/examples/ct_helpers.nft', 'utf8');
    const v = await cli('validate', '--config', '/usr/share/doc/nftables/examples/ct_helpers.nft');
    expect([v.code, v.err]).toEqual([0, '']);
    expect(text).toContain('map {');
    await installBoth(text, 'inet', async (nft, ours, file) => {
      expect(ours.exec('nft', ['list', 'table', 'inet', 'filter'])).toBe(nft.exec('nft', ['list', 'table', 'inet', 'filter']));
      expect(netlinkDump(ours, 'inet', 'filter')).toBe(netlinkDump(nft, 'inet', 'filter'));
      const a = open({ netns: nft.path }), b = open({ netns: ours.path });
      try {
        expect(await objectsOf(b, 'inet', 'filter')).toEqual(await objectsOf(a, 'inet', 'filter'));
      } finally {
        a.close();
        b.close();
      }
      expect((await cli('check', '--config', file, '--netns', nft.path)).out).toBe('in sync');
    });
  });

  it('check names a missing, a changed and a foreign object', async () => {
    const file = join(dir, 'check.nft');
    writeFileSync(file, ALL);
    await withNetns(async (ns) => {
      ns.nft(ALL);
      ns.nft('delete counter ip t spare\nadd quota ip t other { 5 mbytes }\n');
      // a quota changed in place (NEWOBJ on an existing quota updates it)
      ns.nft('add quota ip t q { over 200 mbytes }\n');
      const r = await cli('check', '--config', file, '--netns', ns.path);
      expect(r.code).toBe(1);
      expect(r.out).toContain('+ add counter ip t spare { comment "not used by a rule" }');
      expect(r.out).toContain('- delete quota ip t other');
      expect(r.out).toMatch(/quota q is defined differently \(quota q \{ over 200 mbytes \}\); creating it again/);
      expect(r.out).toContain('- delete quota ip t q');
      expect(r.out).toContain('+ add quota ip t q { over 100 mbytes }');
      const fix = await cli('apply', '--config', file, '--netns', ns.path);
      expect(fix.code, fix.err).toBe(0);
      expect((await cli('check', '--config', file, '--netns', ns.path)).out).toBe('in sync');
    }, 'objs-check');
  });

  it('an object this kernel cannot hold (secmark without SELinux) is refused by the kernel with the op named; nothing changes', async () => {
    const file = join(dir, 'secmark.nft');
    writeFileSync(file, 'table inet x {\n\tsecmark ssh { "system_u:object_r:ssh_server_packet_t:s0" }\n\tchain y {\n\t\tmeta secmark set "ssh"\n\t}\n}\n');
    expect((await cli('validate', '--config', file)).code).toBe(0);
    await withNetns(async (ns) => {
      const r = await cli('apply', '--config', file, '--netns', ns.path);
      expect(r.code).not.toBe(0);
      expect(r.err).toMatch(/add secmark inet x ssh/);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
    }, 'objs-secmark');
  });

  it("a running keeper repairs rules, chains and objects without resetting an object's counters", async () => {
    const file = join(dir, 'keeper.nft');
    writeFileSync(file, ALL);
    const config = parseNftConfig(ALL, file);
    await withKeeper({ config, tag: 'objs-keeper' }, async ({ ns, keeper, sock }) => {
      ns.exec('ip', ['link', 'set', 'lo', 'up']);
      const send = (n: number) => ns.exec('bash', ['-c', `for i in $(seq ${n}); do echo x > /dev/udp/127.0.0.1/9; done`]);
      const counter = async (name: string) => (await sock.listObjs({ family: 'ip', table: 't' })).find((o) => o.type === 'counter' && o.name === name)!;
      const inSync = async () => {
        await keeper.idle();
        const r = await cli('check', '--config', file, '--netns', ns.path);
        return r.out === 'in sync';
      };
      const handle = (chain: string, i: number) => {
        const lines = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 't', chain]).split('\n').filter((l) => /# handle \d+$/.test(l) && !/^\s*chain /.test(l));
        return Number(/# handle (\d+)$/.exec(lines[i]!)![1]);
      };
      send(5);
      const first = await counter('c');
      expect(first.data.packets).toBeGreaterThanOrEqual(5);
      const tampers: [string, () => void][] = [
        ['a deleted rule', () => ns.nft(`delete rule ip t out handle ${handle('out', 0)}\n`)],
        ['a replaced rule', () => ns.nft(`replace rule ip t out handle ${handle('out', 0)} counter\n`)],
        ['a flushed chain', () => ns.nft('flush chain ip t out\n')],
        ['a deleted object', () => ns.nft('delete counter ip t spare\n')],
        ['a deleted ct timeout', () => ns.nft('delete ct timeout ip t udp-spare\n')],
        // (a ct timeout is not updated in place: the kernel ignores a NEWOBJ on one)
        ['a ct timeout made again with another policy', () => ns.nft('delete ct timeout ip t udp-spare\nadd ct timeout ip t udp-spare { protocol udp; l3proto ip; policy = { replied: 10 }; }\n')],
        ['a deleted object map element', () => ns.nft('delete element ip t m { 10 }\n')],
        ['an object map element pointing elsewhere', () => ns.nft('delete element ip t m { 9 }\nadd element ip t m { 9 : "spare" }\n')],
        ['an object changed in place', () => ns.nft('add quota ip t q { over 200 mbytes }\n')],
        ['a foreign object', () => ns.nft('add counter ip t foreign\n')],
      ];
      let before = first;
      for (const [what, tamper] of tampers) {
        send(3);
        before = await counter('c');
        tamper();
        await until(`${what} to be repaired`, inSync, 20_000);
        send(2);
        const after = await counter('c');
        // the same object (never created again), still counting from where it was
        expect(after.handle, what).toBe(first.handle);
        expect(after.data.packets, what).toBeGreaterThanOrEqual((before.data.packets as number) + 2);
        expect(after.data.bytes, what).toBeGreaterThan(before.data.bytes as number);
      }
      // the map's counter counted the packets to port 9 all along (and was never created again)
      expect((await counter('c9')).data.packets).toBeGreaterThanOrEqual(5 + 3 * tampers.length);
      // the spare counter was created again (a new handle), the changed quota too, the foreign one is gone
      const objs = await sock.listObjs({ family: 'ip', table: 't' });
      expect(objs.find((o) => o.name === 'foreign')).toBeUndefined();
      expect(objs.find((o) => o.type === 'quota' && o.name === 'q')!.data.bytes).toBe(100 * 1024 * 1024);
      expect(objs.find((o) => o.name === 'udp-spare')!.data).toEqual({ l3proto: 2, l4proto: 17, policy: [3, 9] });
    });
  });
});
