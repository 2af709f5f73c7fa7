/**
 * Rule identity on the real kernel: the canonical key is the definition, a digest a proof of
 * equality where the kernel rule and its desired rule both have one. A chain that holds a rule
 * with an anonymous set (no digest) is decoded at a read-back by digest; its other rules are
 * taken as equal by their digests, without a canonical key (ruleKey, counted here), and a rule
 * that differs (another comment, another place, other expressions) is still found.
 */
import { beforeEach, describe, expect, it, vi } from 'vitest';

const keyed = vi.hoisted(() => ({ rules: [] as { exprs: readonly { kind: string; set?: string }[] }[] }));
vi.mock('../../src/rules/index.js', async (importOriginal) => {
  const orig = await importOriginal<typeof import('../../src/rules/index.js')>();
  return {
    ...orig,
    ruleKey: (rule: Parameters<typeof orig.ruleKey>[0], sets?: Parameters<typeof orig.ruleKey>[1]) => {
      keyed.rules.push(rule);
      return orig.ruleKey(rule, sets);
    },
  };
});

import { parseConfig, type Config } from '../../src/config/config.js';
import { checkOnce } from '../../src/keeper/keeper.js';
import { open, ruleDigester } from '../../src/netlink/socket.js';
import { compileRule } from '../../src/rules/index.js';
import { createNetns } from '../helpers/netns.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { chainLines, handles } from './helpers.js';

const PLAIN = Array.from({ length: 12 }, (_, i) => `ip daddr 198.51.100.${i + 1} tcp dport 80 counter return`);
const RULES = [...PLAIN, 'tcp dport { 80, 443 } return', 'ip daddr 198.51.100.99 return comment "two"'];
const YAML = `
tables:
  - family: ip
    name: proof
    chains:
      - name: svc
        rules:
${RULES.map((r) => `          - '${r.replace(/'/g, "''")}'`).join('\n')}
`;
const config = (): Config => parseConfig(YAML, 'proof.yaml');
const anonymous = (r: { exprs: readonly { kind: string; set?: string }[] }) =>
  r.exprs.some((e) => e.kind === 'lookup' && e.set!.startsWith('__set'));

describe('a decoded chain: rules with equal digests taken as equal, the others by key', () => {
  const { ns, sock } = socketPerTest('rulekey');

  beforeEach(() => {
    keyed.rules.length = 0;
  });

  it('apply and check key only the rule with an anonymous set (its desired and its kernel copy)', async () => {
    const applied = await checkOnce(sock, config(), true);
    expect(applied.drift.flatMap((d) => d.drift.map((x) => x.kind))).toEqual(['table-missing']);
    // Verified from the commit's echo, the anonymous set's rule by its unnamed digest: nothing keyed.
    expect(keyed.rules).toEqual([]);
    const checked = await checkOnce(sock, config(), false);
    expect(checked.drift.flatMap((d) => d.drift)).toEqual([]);
    // Without the commit's digests: the desired rules encoded for theirs, still nothing else keyed.
    expect(keyed.rules).toHaveLength(2);
    expect(keyed.rules.every(anonymous)).toBe(true);
  });

  it('a rule with the same expressions and another comment differs (the digest covers the userdata), and is repaired', async () => {
    await checkOnce(sock, config(), true);
    const h = handles(ns, 'ip', 'proof', 'svc');
    ns.nft(`replace rule ip proof svc handle ${h[13]} ip daddr 198.51.100.99 return comment "other"\n`);
    const checked = await checkOnce(sock, config(), false);
    const drift = checked.drift.flatMap((d) => d.drift);
    expect(drift.map((d) => d.kind)).toEqual(['rules-differ']);
    expect(drift[0]!.detail).toMatch(/^rule 14 differs: have 'ip daddr 198\.51\.100\.99 return comment "other"'/);
    const repaired = await checkOnce(sock, config(), true);
    expect(repaired.drift.flatMap((d) => d.drift.map((x) => x.kind))).toEqual(['rules-differ']);
    expect(chainLines(ns, 'ip', 'proof', 'svc').at(-1)).toBe('ip daddr 198.51.100.99 return comment "two"');
    expect((await checkOnce(sock, config(), false)).drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('two rules swapped by nft: each digest is another place\'s, so the order differs', async () => {
    await checkOnce(sock, config(), true);
    const h = handles(ns, 'ip', 'proof', 'svc');
    ns.nft(`delete rule ip proof svc handle ${h[0]}\nadd rule ip proof svc handle ${h[1]} ${PLAIN[0]}\n`);
    expect(chainLines(ns, 'ip', 'proof', 'svc').slice(0, 2)).toEqual([1, 0].map((i) => PLAIN[i]!.replace(' counter ', ' counter packets 0 bytes 0 ')));
    const checked = await checkOnce(sock, config(), false);
    const drift = checked.drift.flatMap((d) => d.drift);
    expect(drift.map((d) => d.kind)).toEqual(['rules-differ']);
    expect(drift[0]!.detail).toMatch(/^rule order differs at 1/);
    await checkOnce(sock, config(), true);
    expect((await checkOnce(sock, config(), false)).drift.flatMap((d) => d.drift)).toEqual([]);
  });

  it('a rule whose expressions differ in one byte differs', async () => {
    await checkOnce(sock, config(), true);
    const h = handles(ns, 'ip', 'proof', 'svc');
    ns.nft(`replace rule ip proof svc handle ${h[5]} ip daddr 198.51.100.6 tcp dport 81 counter return\n`);
    const drift = (await checkOnce(sock, config(), false)).drift.flatMap((d) => d.drift);
    expect(drift.map((d) => d.detail)).toEqual([expect.stringMatching(/^rule 6 differs: have 'ip daddr 198\.51\.100\.6 tcp dport 81 /)]);
  });
});

describe('a rule digest', () => {
  it('covers the userdata: the same expressions with another comment have another digest; none with an anonymous set', () => {
    const c = (text: string) => compileRule(text, { family: 'ip', table: 'proof', chain: 'svc' });
    const a = c('ip daddr 198.51.100.99 return comment "two"');
    const b = c('ip daddr 198.51.100.99 return comment "other"');
    const anon = c('tcp dport { 80, 443 } return');
    const exprs = [...a.exprs, ...anon.exprs];
    const flat = Uint32Array.from([a.exprs.length, ...a.exprs.map((_, i) => i), a.exprs.length, ...a.exprs.map((_, i) => i),
      anon.exprs.length, ...anon.exprs.map((_, i) => a.exprs.length + i)]);
    const [da, db, dn] = ruleDigester()!(exprs, flat, [a.userdata, b.userdata, anon.userdata]);
    expect(da).toMatch(/^[0-9a-f]{32}$/);
    expect(db).toMatch(/^[0-9a-f]{32}$/);
    expect(da).not.toBe(db);
    expect(dn).toBe('');
  });
});

const DYNSET_YAML = `
tables:
  - family: ip
    name: dyn
    sets:
      - { name: s, type: ipv4_addr, flags: [dynamic] }
      - { name: st, type: ipv4_addr, flags: [dynamic, timeout], timeout: 1m }
      - { name: sc, type: ipv4_addr, flags: [dynamic], statements: counter }
    chains:
      - name: c
        rules:
          - add @s { ip saddr }
          - update @s { ip saddr } counter accept
          - add @st { ip saddr timeout 10s }
          - update @st { ip saddr }
          - add @s { ip saddr counter }
          - add @s { ip saddr limit rate 10/second counter }
          - add @sc { ip saddr }
`;

describe('a dynset rule: the digest of what is sent is the digest of what the kernel dumps', () => {
  it('(a timeout and flags the kernel fills in, the set id it drops, its statements as a list or one, their counters) so apply and check key none of them', async () => {
    const ns = createNetns('rulekey-dyn');
    const sock = open({ netns: ns.path });
    try {
      const cfg = parseConfig(DYNSET_YAML, 'dyn.yaml');
      await checkOnce(sock, cfg, true);
      const rules = cfg.tables[0]!.chains[0]!.rules;
      const dumped = await sock.listRules({ family: 'ip', table: 'dyn', chain: 'c', digests: true });
      const mine = rules.map((r) => ruleDigester()!(r.compiled.exprs, Uint32Array.from([r.compiled.exprs.length, ...r.compiled.exprs.keys()]), [r.compiled.userdata])[0]);
      expect(mine.every((d) => /^[0-9a-f]{32}$/.test(d!))).toBe(true);
      expect(dumped.map((r) => r.digest)).toEqual(mine);
      // distinct rules, distinct digests (the normal form drops only what the kernel fills in)
      expect(new Set(mine).size).toBe(mine.length);
      // the kernel's copies are proved by their digests: check keys no rule
      keyed.rules.length = 0;
      const check = await checkOnce(sock, cfg, false);
      expect(check.drift.flatMap((d) => d.drift)).toEqual([]);
      expect(keyed.rules.filter((r) => r.exprs.some((e) => e.kind === 'dynset'))).toEqual([]);
      // another timeout is another rule: found by its digest and key, and repaired
      const h = handles(ns, 'ip', 'dyn', 'c');
      ns.nft(`replace rule ip dyn c handle ${h[2]} add @st { ip saddr timeout 11s }\n`);
      const drift = (await checkOnce(sock, cfg, false)).drift.flatMap((d) => d.drift);
      expect(drift.map((d) => d.detail)).toEqual([expect.stringMatching(/^rule 3 differs/)]);
    } finally {
      sock.close();
      ns.remove();
    }
  });
});
