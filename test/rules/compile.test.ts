/** The compiler, renderer and comparison without the kernel: corpus round trips, API shape, errors. */
import { describe, expect, it } from 'vitest';
import { NfkeeperError, type Expr, type NftSet } from '../../src/index.js';
import {
  RuleSyntaxError, commentOf, commentUserdata, compileRule, compiledSetResolver, decodeXtComment, interfaceTable,
  parseRule, renderRule, ruleKey, rulesEqual, xtComments,
} from '../../src/rules/index.js';
import { CORPUS } from './corpus.js';

const interfaces = interfaceTable({ lo: 1, eth0: 2 });
const noCounts = (exprs: Expr[]) => exprs.map((e) => (e.kind === 'counter' ? { kind: 'counter' } : e));
const ctx = (family: 'ip' | 'ip6' | 'inet' = 'ip') => ({ family, table: 't', chain: 'c', interfaces });

describe('corpus round trip (no kernel)', () => {
  it.each(CORPUS.map((c) => [`${c.family}: ${c.text}`, c] as const))('%s', (_n, c) => {
    const a = compileRule(c.text, ctx(c.family));
    const canonical = c.canonical ?? c.text;
    expect(a.text).toBe(canonical);
    expect(renderRule(a, c.family, compiledSetResolver(a), { interfaces })).toBe(canonical);
    // parse(render(ir)) == ir
    const b = compileRule(a.text, ctx(c.family));
    expect(b.text).toBe(a.text);
    expect(ruleKey(b)).toBe(ruleKey(a));
    expect(noCounts(b.exprs)).toEqual(noCounts(a.exprs));
    expect(b.userdata).toEqual(a.userdata);
    expect(b.sets.map((s) => ({ ...s, elements: undefined }))).toEqual(a.sets.map((s) => ({ ...s, elements: undefined })));
  });
});

describe('compileRule output', () => {
  it('emits the expressions nft 1.0.6 produces for a flannel rule', () => {
    const r = compileRule('ip saddr 10.0.0.0/8 ip daddr != 224.0.0.0/4 masquerade fully-random', ctx());
    expect(r.exprs).toEqual([
      { kind: 'payload', base: 'network', offset: 12, len: 1, dreg: 1 },
      { kind: 'cmp', sreg: 1, op: 'eq', data: '0a' },
      { kind: 'payload', base: 'network', offset: 16, len: 4, dreg: 1 },
      { kind: 'bitwise', sreg: 1, dreg: 1, len: 4, op: 'bool', mask: 'f0000000', xor: '00000000' },
      { kind: 'cmp', sreg: 1, op: 'neq', data: 'e0000000' },
      { kind: 'masq', flags: 16 },
    ]);
    expect(r.sets).toEqual([]);
    expect(r.userdata).toBeUndefined();
  });

  it('inserts meta nfproto and meta l4proto dependencies in inet, once', () => {
    const r = compileRule('ip saddr 1.2.3.4 ip daddr 5.6.7.8 tcp dport 22 tcp sport 1 accept', ctx('inet'));
    const deps = r.exprs.filter((e) => e.kind === 'meta');
    expect(deps).toEqual([{ kind: 'meta', key: 'nfproto', dreg: 1 }, { kind: 'meta', key: 'l4proto', dreg: 1 }]);
    expect(r.exprs[1]).toEqual({ kind: 'cmp', sreg: 1, op: 'eq', data: '02' });
    // the two port matches are merged into one 4-byte load, as nft does
    expect(r.exprs).toContainEqual({ kind: 'payload', base: 'transport', offset: 0, len: 4, dreg: 1 });
    expect(r.exprs).toContainEqual({ kind: 'cmp', sreg: 1, op: 'eq', data: '00010016' });
    expect(r.text).toBe('ip saddr 1.2.3.4 ip daddr 5.6.7.8 tcp sport 1 tcp dport 22 accept');
  });

  it('builds anonymous sets with batch ids from setIdBase, flags, key types and nft userdata', () => {
    const r = compileRule('ip saddr { 10.0.0.0/8, 1.2.3.4 } tcp dport { 80, 443 } accept', { ...ctx(), setIdBase: 7 });
    expect(r.sets.map((s) => [s.name, s.id, s.flags, s.keyType, s.keyLen, s.size])).toEqual([
      ['__set%d', 7, 7, 7, 4, 5], ['__set%d', 8, 3, 13, 2, 2],
    ]);
    const lookups = r.exprs.filter((e): e is Extract<Expr, { kind: 'lookup' }> => e.kind === 'lookup');
    expect(lookups.map((l) => [l.set, l.setId, l.flags])).toEqual([['__set%d', 7, 0], ['__set%d', 8, 0]]);
    expect(r.sets[0]!.elements).toEqual([
      { key: '00000000', flags: 1 }, { key: '01020304', flags: 0 }, { key: '01020305', flags: 1 },
      { key: '0a000000', flags: 0 }, { key: '0b000000', flags: 1 },
    ]);
    // NFTNL_UDATA_SET_KEYBYTEORDER=big endian, MERGE_ELEMENTS, KEY_TYPEOF payload ip saddr
    expect(r.sets[0]!.userdata).toBe('0004020000000204010000000314000407000000010c00040c00000001040b000000');
  });

  it('marks an interval running to the largest key as open, without an end element', () => {
    const r = compileRule('tcp dport { 0-10, 65000-65535 } accept', ctx());
    expect(r.sets[0]!.elements).toEqual([
      { key: '0000', flags: 0 }, { key: '000b', flags: 1 }, { key: 'fde8', flags: 0, userdata: '010401000000' },
    ]);
    expect(r.sets[0]!.size).toBe(4);
  });

  it('stores the comment as nft does', () => {
    const r = compileRule('accept comment "hello"', ctx());
    expect(r.userdata).toBe('000668656c6c6f00');
    expect(commentOf(r.userdata)).toBe('hello');
    expect(commentUserdata('hello')).toBe(r.userdata);
    expect(commentOf(undefined)).toBeUndefined();
    expect(commentOf('0102aaaa')).toBeUndefined();
    expect(() => commentUserdata('x'.repeat(129))).toThrow(RangeError);
  });

  it('resolves iif/oif names only through the given resolver, and renders indexes without one', () => {
    const noNames = { family: 'ip' as const, table: 't', chain: 'c' };
    expect(() => compileRule('iif "eth0" accept', noNames)).toThrow(RuleSyntaxError);
    const numeric = compileRule('iif 2 accept', noNames);
    expect(numeric.text).toBe('iif 2 accept');
    expect(numeric.exprs[1]).toEqual({ kind: 'cmp', sreg: 1, op: 'eq', data: '02000000' });
    const named = compileRule('oif != eth0 accept', ctx());
    expect(named.text).toBe('oif != "eth0" accept');
    expect(named.exprs).toEqual(compileRule('oif != 2 accept', ctx()).exprs);
    expect(renderRule(named, 'ip')).toBe('oif != 2 accept');
  });

  it('refuses families outside ip, ip6, inet', () => {
    expect(() => compileRule('accept', { family: 'bridge', table: 't', chain: 'c' })).toThrow(TypeError);
  });
});

describe('refusals carry column, token and what was expected', () => {
  const cases: [string, 'ip' | 'ip6' | 'inet', number, string, RegExp][] = [
    ['', 'ip', 1, '', /a match .* or a statement/],
    // What nft 1.0.6 refuses, or nfkeeper leaves out, with its position
    ['meter m { ip saddr }', 'ip', 20, '}', /a statement for each key/],
    ['redirect to :tcp dport map { 22 : 8000 }', 'ip', 14, 'tcp', /transport protocol match before it/],
    ['rt nexthop 10.0.0.1', 'inet', 1, 'rt', /an IPv4 table, or a match on ip before it/],
    ['meta nfproto ipv6 rt nexthop 10.0.0.1', 'inet', 19, 'rt', /an IPv4 table, or a match on ip before it/],
    ['meta mark & 0xff == { 1-5, 7 }', 'ip', 23, '1-5', /32-bit mark/],
    ['ether saddr . vlan id { 00:01:02:03:04:05 . 1 }', 'ip', 15, 'vlan', /another key/],
    ['meta mark set ip saddr & 255.0.0.0 . tcp dport map { 1.0.0.0 . 1 : 1 }', 'ip', 15, 'ip', /parts without a mask/],
    ['ip saddr', 'ip', 9, '', /IPv4 address/],
    ['ip saddr 1.2.3', 'ip', 10, '1.2.3', /IPv4 address/],
    ['ip saddr 10.0.0.0/33 accept', 'ip', 10, '10.0.0.0/33', /prefix/],
    ['tcp dport 70000 accept', 'ip', 11, '70000', /port number 0-65535/],
    ['tcp dport nosuchservice accept', 'ip', 11, 'nosuchservice', /a service name from \/etc\/services/],
    ['ip saddr 1.2.3.4 lol', 'ip', 18, 'lol', /comment "…" or the end of the rule/],
    ['accept drop', 'ip', 8, 'drop', /nothing after 'accept'/],
    ['masquerade counter', 'ip', 12, 'counter', /nothing after 'masquerade'/],
    ['comment "x"', 'ip', 1, 'comment', /a match/],
    ['accept comment "x" counter', 'ip', 20, 'counter', /end of the rule/],
    ['jump 1abc', 'ip', 6, '1abc', /chain name/],
    ['ip saddr { 1.2.3.4 1.2.3.5 }', 'ip', 20, '1.2.3.5', /',' or '}'/],
    ['meta nfproto ipv4 accept', 'ip', 1, 'meta', /makes sense in this family/],
    ['dnat to 1.2.3.4:80', 'ip', 9, '1.2.3.4:80', /transport protocol match before it/],
    ['masquerade to :1000', 'ip', 15, ':1000', /transport protocol match/],
    ['dnat to 1.2.3.4', 'inet', 1, 'dnat', /'dnat ip to' or 'dnat ip6 to'/],
    ['ip6 saddr ::1 accept', 'ip', 1, 'ip6', /a match for ip/],
    ['ip saddr 1.2.3.4 ip6 daddr ::1', 'inet', 18, 'ip6', /network protocol given earlier \(ip\)/],
    ['tcp dport 22 udp dport 53', 'ip', 14, 'udp', /transport protocol given earlier \(tcp\)/],
    // The same dependencies of a key's parts, in a key's words; a network field keyed after a vlan match (its vlan type dependency is not built for keys)
    ['ip6 daddr . tcp dport { ::1 . 22 } accept', 'ip', 1, 'ip6', /a key part for ip in this ip table/],
    ['ip saddr 1.2.3.4 ip6 daddr . tcp dport { ::1 . 22 }', 'inet', 18, 'ip6', /a key part consistent with the network protocol given earlier \(ip\)/],
    ['tcp dport 22 udp dport . ip saddr { 53 . 1.2.3.4 }', 'ip', 14, 'udp', /a key part consistent with the transport protocol given earlier \(tcp\)/],
    ['ether type vlan ip saddr . tcp dport { 1.2.3.4 . 22 }', 'inet', 17, 'ip', /an ip\/ip6 match before the vlan match, or meta nfproto/],
    // nft: "conflicting protocols specified: arp vs. ip"
    ['ether type arp ip saddr . tcp dport { 1.2.3.4 . 22 }', 'inet', 16, 'ip', /consistent with ether type 2054/],
    ['meta l4proto { tcp, udp } tcp dport 22', 'ip', 27, 'tcp', /given earlier/],
    ['ip saddr 1.2.3.4 ; accept', 'ip', 18, ';', /one rule/],
    ['ip saddr 1.2.3.4 accept\n', 'ip', 24, '\\n', /one rule/],
    ['ct state foo', 'ip', 10, 'foo', /established/],
    ['ct foo 1', 'ip', 4, 'foo', /'state'/],
    ['iifname "*"', 'ip', 9, '"*"', /prefix before the wildcard/],
    ['iifname "averyveryverylongname"', 'ip', 9, '"averyveryverylongname"', /at most 15 bytes/],
    ['iif "eth9"', 'ip', 5, '"eth9"', /exists in the target namespace.*iifname/],
    ['ip saddr & 255.0.0.0 == 1.2.3.4', 'ip', 25, '1.2.3.4', /inside the mask/],
    ['meta mark & 0xff 1', 'ip', 18, '1', /'==' or '!='/],
    ['ip saddr & 010 == 1', 'ip', 12, '010', /an IPv4 address/],
    ['masquerade random persistent', 'ip', 19, 'persistent', /',' between flags/],
    ['snat ip6 to 1.2.3.4', 'ip6', 13, '1.2.3.4', /IPv6 address/],
    ['snat ip6 to fd00::1', 'ip', 6, 'ip6', /'ip' or nothing/],
    ['ip saddr @blocked accept', 'ip', 10, '@blocked', /a set or map of table/],
    ['tcp dport 2-1', 'ip', 11, '2-1', /start is not above its end/],
    ['meta mark set', 'ip', 14, '', /32-bit value/],
    ['tcp sport != 1 tcp dport != 2', 'ip', 16, 'tcp', /at most one of 'tcp sport !=' and 'tcp dport !='/],
    ['accept $x', 'ip', 8, '$', /a word, a quoted string/],
    ['ip saddr 1.2.3.4 < 3', 'ip', 18, '<', /a match/],
    [`accept comment "${'x'.repeat(129)}"`, 'ip', 16, `"${'x'.repeat(129)}"`, /at most 128 bytes/],
    ['accept comment "unterminated', 'ip', 16, '"unterminated', /closing double quote/],
    ['fib saddr type exists', 'ip', 16, 'exists', /an address type/],
  ];
  it.each(cases)('%j (%s)', (text, family, column, token, expected) => {
    let err: unknown;
    try {
      compileRule(text, { family, table: 't', chain: 'c', interfaces });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RuleSyntaxError);
    expect(err).toBeInstanceOf(NfkeeperError);
    const e = err as RuleSyntaxError;
    expect(e.column).toBe(column);
    expect(e.token).toBe(token);
    expect(e.expected).toMatch(expected);
    expect(e.text).toBe(text);
    // the message shows the text and marks the place
    expect(e.message).toContain(text.split('\n')[0]!);
    expect(e.message).toMatch(/\n {2}\s*\^+$/);
  });

  it('never returns a partial rule: every refused text throws before producing output', () => {
    expect(() => parseRule('ip saddr 1.2.3.4 bogus accept')).toThrow(RuleSyntaxError);
  });

  it("takes no property of JavaScript's Object for a comparison or mark-set operator", () => {
    // the operators were looked up in an object literal: `ip saddr toString 1.2.3.4` compiled, to a cmp without an op
    for (const [text, column] of [['ip saddr toString 1.2.3.4 accept', 10], ['tcp dport constructor 80 accept', 11],
      ['mark __proto__ 1', 6], ['mark set 1 constructor 2', 12], ['meta mark set mark toString 1', 20]] as const) {
      const err = (() => { try { compileRule(text, { family: 'ip', table: 't', chain: 'c' }); } catch (e) { return e; } })();
      expect(err, text).toBeInstanceOf(RuleSyntaxError);
      expect((err as RuleSyntaxError).column, text).toBe(column);
    }
  });
});

describe('rendering what the rule language does not cover', () => {
  const comment = (s: string) => Buffer.concat([Buffer.from(s), Buffer.alloc(256 - s.length)]).toString('hex');
  const iptablesRule: Expr[] = [
    { kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 },
    { kind: 'cmp', sreg: 1, op: 'eq', data: 'ac1a4066' },
    { kind: 'match', name: 'comment', rev: 0, info: comment('name: "nomad" id: "3e803d29"') },
    { kind: 'counter', packets: 3, bytes: 180 },
    { kind: 'target', name: 'MASQUERADE', rev: 0, info: '01' },
  ];

  it('marks xt matches and targets, showing an xt comment\'s text', () => {
    expect(renderRule({ exprs: iptablesRule }, 'ip'))
      .toBe('ip saddr 172.26.64.102 <unsupported: xt match "comment" "name: \\"nomad\\" id: \\"3e803d29\\""> counter <unsupported: xt target "MASQUERADE">');
    expect(decodeXtComment(comment('CNI portfwd'))).toBe('CNI portfwd');
    expect(xtComments({ exprs: iptablesRule })).toEqual(['name: "nomad" id: "3e803d29"']);
  });

  it('renders other kinds and odd shapes as unsupported instead of failing', () => {
    const odd: Expr[][] = [
      [{ kind: 'limit', rate: 10, unit: 7 }],
      [{ kind: 'unknown', name: 'foo', data: '00' }],
      [{ kind: 'meta', key: 'time', dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'eq', data: '0100000000000000' }], // 1 ns: not a whole second
      [{ kind: 'payload', base: 'transport', offset: 8, len: 2, dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'eq', data: '00' }], // 1 byte for 2
      [{ kind: 'payload', base: 'network', offset: 12, len: 4, dreg: 1 }, { kind: 'cmp', sreg: 1, op: 'lt', data: '0001' }],
      [{ kind: 'immediate', dreg: 0, verdict: 'queue' }],
      [{ kind: 'nat', type: 'snat', family: 'ip', regAddrMin: 1 }],
      [{ kind: 'masq', flags: 64 }],
      [{ kind: 'meta', key: 'mark', dreg: 1 }, { kind: 'lookup', sreg: 1, set: '__set3' }],
    ];
    for (const exprs of odd) {
      const text = renderRule({ exprs }, 'ip');
      expect(text).toMatch(/<unsupported: [^>]+>/);
    }
    expect(renderRule({ exprs: [{ kind: 'meta', key: 'mark', dreg: 1 }, { kind: 'lookup', sreg: 1, set: 'allowed' }] }, 'ip'))
      .toBe('meta mark @allowed');
  });
});

describe('ruleKey', () => {
  const sets = (r: { sets: NftSet[] }) => compiledSetResolver(r);

  it('ignores counter values, handles, set names and ids, and element order', () => {
    const a = compileRule('ip saddr { 1.2.3.4, 5.6.7.8 } counter accept', { ...ctx(), setIdBase: 1 });
    const b = compileRule('ip saddr { 5.6.7.8, 1.2.3.4 } counter packets 9 bytes 99 accept', { ...ctx(), setIdBase: 40 });
    const kernel = {
      exprs: a.exprs.map((e) => (e.kind === 'lookup' ? { kind: 'lookup' as const, sreg: 1, set: '__set17', flags: 0 } : e)),
      handle: 12,
    };
    const dumped = { set: { ...a.sets[0]!, name: '__set17', handle: 30, id: undefined }, elements: [...a.sets[0]!.elements!].reverse() };
    expect(ruleKey(a)).toBe(ruleKey(b));
    expect(rulesEqual(a, kernel, sets(a), (n) => (n === '__set17' ? dumped : undefined))).toBe(true);
  });

  it('tells different rules apart', () => {
    const k = (t: string) => ruleKey(compileRule(t, ctx()));
    expect(k('ip saddr { 1.2.3.4, 5.6.7.8 } accept')).not.toBe(k('ip saddr { 1.2.3.4, 5.6.7.9 } accept'));
    expect(k('ip saddr { 1.2.3.4, 5.6.7.8 } accept')).not.toBe(k('ip saddr != { 1.2.3.4, 5.6.7.8 } accept'));
    expect(k('accept comment "a"')).not.toBe(k('accept comment "b"'));
    expect(k('accept comment "a"')).not.toBe(k('accept'));
    expect(k('tcp dport 80 accept')).not.toBe(k('udp dport 80 accept'));
    expect(k('masquerade random')).not.toBe(k('masquerade'));
  });

  it('treats the nft wire form and the kernel form of nat expressions alike', () => {
    const compiled = compileRule('tcp dport 80 dnat to 10.0.0.1:8080', ctx());
    const wire = compiled.exprs.map((e) => (e.kind === 'nat' ? { kind: 'nat' as const, type: 'dnat' as const, family: 'ip' as const, regAddrMin: 1, regProtoMin: 2, flags: 2 } : e));
    expect(ruleKey({ exprs: wire })).toBe(ruleKey(compiled));
  });

  it('does not equate an anonymous set it cannot resolve with a resolved one', () => {
    const a = compileRule('tcp dport { 1, 2 } accept', ctx());
    const unresolved = { exprs: a.exprs.map((e) => (e.kind === 'lookup' ? { ...e, set: '__set0', setId: undefined } : e)) };
    expect(rulesEqual(a, unresolved)).toBe(false);
  });
});

describe('meta hour and meta time strings depend on the local time zone, as in nft', () => {
  const ctx = { family: 'ip' as const, table: 't', chain: 'c' };
  const inZone = <T>(tz: string, fn: () => T): T => {
    const old = process.env.TZ;
    process.env.TZ = tz;
    try {
      return fn();
    } finally {
      if (old === undefined) delete process.env.TZ;
      else process.env.TZ = old;
    }
  };

  it('converts them where the local zone is UTC, and prints them back so', () => {
    inZone('UTC', () => {
      const h = compileRule('meta hour "17:00"', ctx);
      expect(h.exprs[1]).toEqual({ kind: 'cmp', sreg: 1, op: 'eq', data: '10ef0000' });
      expect(h.text).toBe('meta hour "17:00"');
      const t = compileRule('meta time "2019-06-21 17:00:00"', ctx);
      expect(t.exprs[1]).toEqual({ kind: 'cmp', sreg: 1, op: 'eq', data: '00a0eed74845aa15' });
      expect(t.text).toBe('meta time "2019-06-21 17:00:00"');
    });
  });

  it('refuses them elsewhere with a position, and takes and prints the zone-free numbers', () => {
    inZone('Europe/Berlin', () => {
      for (const text of ['meta hour "17:00"', 'meta time "2019-06-21 17:00:00"']) {
        let err: unknown;
        try {
          compileRule(text, ctx);
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(RuleSyntaxError);
        expect((err as RuleSyntaxError).column).toBe(11);
        expect((err as RuleSyntaxError).message).toMatch(/local time zone, which is not UTC/);
      }
      expect(compileRule('meta hour 61200', ctx).text).toBe('meta hour 61200');
      expect(compileRule('meta time 1561136400', ctx).text).toBe('meta time 1561136400');
    });
  });
});
