/**
 * Chain bindings (`jump { … }`, `goto { … }`): anonymous chains nft 1.0.6 adds with
 * NFT_CHAIN_BINDING, their rules by NFTA_RULE_CHAIN_ID and the jump by NFTA_VERDICT_CHAIN_ID.
 * Without the kernel: the grammar nft takes and refuses (with positions), what one rule compiles
 * to and queues, its text and its key. On the kernel, nft as the oracle: a file of bindings in ip,
 * ip6 and inet installed by nft and by `apply` lists and dumps (`nft --debug=netlink`) alike (the
 * kernel's `__chain%d` names aside), `check` finds nft's install in sync, and export → config →
 * compile is a fixed point on both installs. The kernel refuses every change to a bound chain.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseNftConfig } from '../../src/config/config.js';
import { Batch } from '../../src/netlink/batch.js';
import { CHAIN_F } from '../../src/netlink/objects.js';
import { open } from '../../src/netlink/socket.js';
import { RuleSyntaxError, compileRule, queueRule, renderRule, ruleKey } from '../../src/rules/index.js';
import { cli } from '../helpers/cli.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('binding');
const ctx = { family: 'inet', table: 't', chain: 'c' } as const;

function refusal(text: string): RuleSyntaxError {
  try {
    compileRule(text, ctx);
  } catch (e) {
    if (e instanceof RuleSyntaxError) return e;
    throw e;
  }
  throw new Error(`compiled: ${text}`);
}

describe('chain bindings without the kernel', () => {
  it('compiles a binding to a chain id the jump names, its rules to rules of their own', () => {
    const r = compileRule('tcp dport 22 jump { ip saddr { 10.0.0.1, 10.0.0.2 } accept; counter; } comment "x"',
      { ...ctx, setIdBase: 5, chainIdBase: 7 });
    expect(r.bound).toHaveLength(1);
    expect(r.bound![0]!.id).toBe(7);
    expect(r.bound![0]!.rules.map((x) => x.text)).toEqual(['ip saddr { 10.0.0.1, 10.0.0.2 } accept', 'counter']);
    expect(r.exprs.at(-1)).toEqual({ kind: 'immediate', dreg: 0, verdict: 'jump', chainId: 7 });
    // the bound rules' anonymous sets are the rule's, numbered from setIdBase
    expect(r.sets.map((s) => s.id)).toEqual([5]);
    expect(r.text).toBe('tcp dport 22 jump { ip saddr { 10.0.0.1, 10.0.0.2 } accept; counter; } comment "x"');
    expect(compileRule('goto { }', ctx).text).toBe('goto { }');
  });

  it('queues sets, then the chain by id (binding, no name), its rules by that id, then the rule', () => {
    const r = compileRule('jump { ip saddr { 10.0.0.1, 10.0.0.2 } accept; drop; }', { ...ctx, chainIdBase: 3 });
    const b = new Batch();
    queueRule(b, r, { family: 'inet', table: 't', chain: 'c' });
    expect(b.ops.map((o) => [o.object, o.object === 'chain' ? o.name : o.object === 'rule' ? o.chain : (o as { name?: string }).name])).toEqual([
      ['set', '__set%d'], ['chain', undefined], ['rule', undefined], ['rule', undefined], ['rule', 'c'],
    ]);
    expect(b.ops[1]).toMatchObject({ verb: 'add', id: 3, flags: CHAIN_F.BINDING });
    expect(b.ops[2]).toMatchObject({ chainId: 3 });
    expect(b.ops[3]).toMatchObject({ chainId: 3 });
  });

  it("keys and renders a dumped rule with its bound chain's rules; another bound rule is another key", () => {
    const compiled = compileRule('jump { counter; accept; }', ctx);
    const dumped = (second: string) => ({
      family: 'inet' as const, table: 't', chain: 'c', exprs: [{ kind: 'immediate' as const, dreg: 0, verdict: 'jump' as const, chain: '__chain9' }],
      bound: [{ name: '__chain9', rules: [
        { family: 'inet' as const, table: 't', chain: '__chain9', exprs: [{ kind: 'counter' as const, packets: 3, bytes: 9 }] },
        { family: 'inet' as const, table: 't', chain: '__chain9', exprs: [{ kind: 'immediate' as const, dreg: 0, verdict: second as 'accept' }] },
      ] }],
    });
    expect(ruleKey(dumped('accept'))).toBe(ruleKey(compiled));
    expect(ruleKey(dumped('drop'))).not.toBe(ruleKey(compiled));
    expect(renderRule(dumped('accept'), 'inet')).toBe('jump { counter; accept; }');
    // without its bound chain (a rule read alone) it prints the kernel's name, and is not the desired rule
    const { bound: _b, ...alone } = dumped('accept');
    expect(renderRule(alone, 'inet')).toBe('jump __chain9');
    expect(ruleKey(alone)).not.toBe(ruleKey(compiled));
  });

  it('a batch takes a bound chain by id with the binding flag and its rules by that id, nothing in between', () => {
    const b = new Batch();
    b.push({ verb: 'add', object: 'chain', family: 'inet', table: 't', id: 1, flags: CHAIN_F.BINDING });
    b.push({ verb: 'add', object: 'rule', family: 'inet', table: 't', chainId: 1, exprs: [] });
    // a chain without a name that is not a binding, a rule with its chain twice or not at all
    expect(() => b.push({ verb: 'add', object: 'chain', family: 'inet', table: 't', id: 2, flags: 0 } as never)).toThrow(/name/);
    expect(() => b.push({ verb: 'add', object: 'rule', family: 'inet', table: 't', chain: 'c', chainId: 1, exprs: [] })).toThrow(/either 'chain' or 'chainId'/);
    expect(() => b.push({ verb: 'add', object: 'rule', family: 'inet', table: 't', exprs: [] } as never)).toThrow(/chain/);
    expect(b.ops).toHaveLength(2);
  });

  it('refuses, with positions, what nft 1.0.6 refuses', () => {
    const nested = refusal('jump { ip saddr 10.0.0.1 goto { accept; }; }');
    expect(nested.column).toBe(31);
    expect(nested.message).toMatch(/too many levels of nesting/);
    const last = refusal('jump { accept }');
    expect([last.column, last.token]).toEqual([15, '}']);
    expect(last.message).toMatch(/newline or ';'/);
    const open = refusal('jump { accept;');
    expect(open.column).toBe(15);
    expect(open.message).toMatch(/never closed/);
    // one rule per text, still
    const two = refusal('accept; drop');
    expect([two.column, two.token]).toEqual([7, ';']);
    expect(two.message).toMatch(/exactly one rule/);
    // a rule in the binding is checked as any rule
    const bad = refusal('jump { ip saddr 10.0.0.300 accept; }');
    expect(bad.column).toBe(17);
  });

  it('a config checks the bound rules where the rule runs (masquerade only in postrouting)', () => {
    expect(() => parseNftConfig('table ip t {\n\tchain c {\n\t\ttype filter hook input priority 0;\n\t\tjump { masquerade; }\n\t}\n}\n'))
      .toThrow(/masquerade|NAT/);
  });
});

const FILES: Record<'ip' | 'ip6' | 'inet', string> = {
  ip: `table ip t {
	chain nat_post {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "eth0" jump {
			ip saddr 10.0.0.0/8 masquerade
			ip saddr { 192.168.1.1, 192.168.1.2 } counter packets 0 bytes 0 return comment "x"
		}
	}

	chain filter_fwd {
		type filter hook forward priority filter; policy accept;
		tcp dport { 22, 80 } jump {
			ct state established,related accept
			drop
		}
		jump {
		} comment "empty"
		udp dport 53 goto {
			accept
		}
		jump other
	}

	chain other {
		meta mark 0x00000001 jump {
			counter packets 0 bytes 0
			counter packets 0 bytes 0
		}
	}
}
`,
  ip6: `table ip6 t {
	chain filter_in {
		type filter hook input priority filter; policy accept;
		ip6 saddr fe80::/64 jump {
			icmpv6 type { echo-request, nd-neighbor-solicit } accept
			reject
		}
	}
}
`,
  inet: `table inet t {
	chain filter_in {
		type filter hook input priority filter; policy accept;
		meta l4proto tcp jump {
			ip saddr 10.0.0.1 tcp dport 22 accept
			ip6 saddr ::1 accept
			tcp flags syn / syn,ack limit rate 10/second accept
		}
		iifname "lo" goto {
			log prefix "lo " accept
		}
	}
}
`,
};

/** A listing or dump with the kernel's names of bound chains (a counter of the kernel's) left out. */
const unnamed = (s: string) => s.replace(/__chain\d+/g, '__chainN');

async function installBoth(family: 'ip' | 'ip6' | 'inet', fn: (nft: Netns, ours: Netns, file: string) => Promise<void>): Promise<void> {
  const file = join(dir, `${family}.nft`);
  writeFileSync(file, FILES[family]);
  await withNetns(async (nft) => {
    nft.nft(FILES[family]);
    await withNetns(async (ours) => {
      const r = await cli('apply', '--config', file, '--netns', ours.path);
      expect(r.code, r.err).toBe(0);
      await fn(nft, ours, file);
    }, 'bind-ours');
  }, 'bind-nft');
}

describe('chain bindings on the kernel, nft 1.0.6 the oracle', () => {
  for (const family of ['ip', 'ip6', 'inet'] as const) {
    it(`${family}: apply lists and dumps as nft's install; check, export and compile agree`, async () => {
      await installBoth(family, async (nft, ours, file) => {
        const listing = nft.exec('nft', ['list', 'table', family, 't']);
        // nft lists its own install as the file says
        expect(listing).toBe(FILES[family]);
        expect(ours.exec('nft', ['list', 'table', family, 't'])).toBe(listing);
        expect(unnamed(netlinkDump(ours, family, 't'))).toBe(unnamed(netlinkDump(nft, family, 't')));
        // the dump holds bound chains, which no one can change
        expect(netlinkDump(nft, family, 't')).toMatch(/__chain\d+/);
        // a rule jumping to one has no digest (its key depends on the bound rules); those rules have theirs
        const sock = open({ netns: ours.path });
        try {
          const rules = await sock.listRules({ family, table: 't', digests: true });
          const jumps = rules.filter((r) => r.exprs.some((e) => e.kind === 'immediate' && e.chain?.startsWith('__chain')));
          expect(jumps.length).toBeGreaterThan(0);
          for (const r of jumps) expect(r.digest ?? '').toBe('');
          for (const r of rules.filter((x) => x.chain.startsWith('__chain') && !x.exprs.some((e) => e.kind === 'lookup'))) expect(r.digest).toMatch(/^[0-9a-f]{32}$/);
        } finally {
          sock.close();
        }
        const check = await cli('check', '--config', file, '--netns', nft.path);
        expect([check.code, check.out]).toEqual([0, 'in sync']);
        // export of either install → config → the same rules (keys) as the file, and in sync on the other
        const want = parseNftConfig(FILES[family], file).tables[0]!.chains.map((c) => c.rules.map((r) => ruleKey(r.compiled)));
        for (const [from, to] of [[nft, ours], [ours, nft]] as const) {
          for (const format of ['nft', 'yaml']) {
            const exp = await cli('export', '--netns', from.path, '--format', format, '--table', family, 't');
            expect(exp.code, exp.err).toBe(0);
            const back = join(dir, `export-${family}.${format}`);
            writeFileSync(back, exp.out + '\n');
            const again = await cli('check', '--config', back, '--netns', to.path);
            expect(again.out, exp.out).toBe('in sync');
            if (format === 'nft') {
              // written as nft lists it: bindings over lines
              expect(exp.out.trimEnd()).toBe(listing.trimEnd());
              const keys = parseNftConfig(exp.out, back).tables[0]!.chains.map((c) => c.rules.map((r) => ruleKey(r.compiled)));
              expect(keys).toEqual(want);
            }
          }
        }
      });
    });
  }

  it("a bound chain is a level of the kernel's jump stack: the config refuses what the kernel refuses", async () => {
    const deep = (first: string, chains: number, last = 'accept') => ['table ip d {', `\tchain base {\n\t\ttype filter hook input priority 0;\n\t\t${first}\n\t}`,
      ...Array.from({ length: chains }, (_, i) => `\tchain c${i + 1} {\n\t\t${i + 1 < chains ? `jump c${i + 2}` : last}\n\t}`), '}', ''].join('\n');
    const cases: [string, number, string?][] = [['jump c1', 15], ['jump c1', 16], ['jump { jump c1; }', 14], ['jump { jump c1; }', 15],
      ['jump { accept; }\n\t\tjump c1', 15], ['jump c1', 14, 'jump { accept; }'], ['jump c1', 15, 'jump { accept; }']];
    const seen: boolean[] = [];
    await withNetns(async (ns) => {
      for (const [first, chains, last] of cases) {
        const text = deep(first, chains, last);
        let kernel = true;
        try {
          ns.nft(text);
          ns.nft('flush ruleset\n');
        } catch {
          kernel = false;
        }
        let config = true;
        try {
          parseNftConfig(text, 'deep.nft');
        } catch (e) {
          config = false;
          expect(String(e), text).toMatch(/nest \d+ chains deep/);
        }
        expect(config, `${first} over ${chains} chains`).toBe(kernel);
        seen.push(kernel);
      }
    }, 'bind-deep');
    // the kernel took some and refused others (a binding is a level: 14 chains with it, not 15)
    expect(seen).toEqual([true, false, true, false, true, true, false]);
  });

  it('the kernel refuses any change to a bound chain; check sees a rule replaced with another binding', async () => {
    await installBoth('ip', async (nft, _ours, file) => {
      const name = /jump -> (__chain\d+)/.exec(nft.exec('nft', ['--debug=netlink', 'list', 'chain', 'ip', 't', 'filter_fwd']))![1]!;
      for (const cmd of [`add rule ip t ${name} accept`, `flush chain ip t ${name}`, `delete chain ip t ${name}`]) {
        expect(() => nft.nft(cmd + '\n'), cmd).toThrow();
      }
      const handle = /\n\t\t\} # handle (\d+)/.exec(nft.exec('nft', ['-a', 'list', 'chain', 'ip', 't', 'filter_fwd']))![1];
      nft.nft(`replace rule ip t filter_fwd handle ${handle} tcp dport { 22, 80 } jump { ct state established,related accept; accept; }\n`);
      const check = await cli('check', '--config', file, '--netns', nft.path);
      expect(check.code).toBe(1);
      expect(check.out).toContain('tcp dport { 22, 80 } jump { ct state established,related accept; drop; }');
      expect((await cli('apply', '--config', file, '--netns', nft.path)).code).toBe(0);
      expect(nft.exec('nft', ['list', 'table', 'ip', 't'])).toBe(FILES.ip);
    });
  });
});
