/**
 * fast-check arbitraries for rule texts inside the supported language, valid
 * by construction (one transport protocol per rule, NAT only where the hook
 * allows it, NAT ports only after a transport match). Some generated texts
 * are still refused (e.g. set elements that overlap); callers filter those
 * with compileRule.
 */
import fc from 'fast-check';
import type { CorpusChain, CorpusFamily } from './corpus.js';

export interface GenRule { family: CorpusFamily; chain: CorpusChain; text: string }

const octet = fc.integer({ min: 0, max: 255 });
const ipv4 = fc.tuple(octet, octet, octet, octet).map((o) => o.join('.'));
const hex16 = fc.integer({ min: 0, max: 0xffff }).map((v) => v.toString(16));
const ipv6 = fc.oneof(
  fc.tuple(hex16, hex16, hex16).map(([a, b, c]) => `fd00:${a}:${b}::${c}`),
  fc.array(hex16, { minLength: 8, maxLength: 8 }).map((w) => w.join(':')),
  fc.tuple(hex16, hex16).map(([a, b]) => `2001:db8::${a}:${b}`),
  fc.constantFrom('::1', '::', 'fe80::1', '::ffff:10.1.2.3'),
);
const port = fc.integer({ min: 0, max: 65535 });
const portRange = fc.tuple(port, port).map(([a, b]) => (a <= b ? `${a}-${b}` : `${b}-${a}`));
const op = fc.constantFrom('', '!= ', '== ');
const eqOrNeq = fc.constantFrom('', '!= ');

function addrRhs(v6: boolean): fc.Arbitrary<string> {
  const addr = v6 ? ipv6 : ipv4;
  const bits = v6 ? 128 : 32;
  const prefix = fc.tuple(addr, fc.integer({ min: 0, max: bits })).map(([a, p]) => `${a}/${p}`);
  const range = fc.tuple(addr, addr).map(([a, b]) => `${a}-${b}`);
  const elem = fc.oneof(addr, prefix);
  return fc.oneof(
    { weight: 4, arbitrary: addr }, { weight: 4, arbitrary: prefix }, { weight: 1, arbitrary: range },
    { weight: 2, arbitrary: fc.array(elem, { minLength: 2, maxLength: 4 }).map((e) => `{ ${e.join(', ')} }`) },
  );
}

const portRhs = fc.oneof(
  { weight: 4, arbitrary: port.map(String) }, { weight: 2, arbitrary: portRange },
  { weight: 2, arbitrary: fc.array(fc.oneof(port.map(String), portRange), { minLength: 2, maxLength: 4 }).map((e) => `{ ${e.join(', ')} }`) },
);
const ifname = fc.tuple(fc.constantFrom('eth', 'veth', 'cni', 'br-', 'flannel.', 'docker', 'wg'),
  fc.constantFrom('0', '1', '12', 'abc', '*', 'x*')).map(([a, b]) => `"${a}${b}"`);
const ifRhs = fc.oneof({ weight: 3, arbitrary: ifname },
  { weight: 1, arbitrary: fc.uniqueArray(ifname, { minLength: 2, maxLength: 3 }).map((e) => `{ ${e.join(', ')} }`) });
const mark = fc.oneof(fc.integer({ min: 0, max: 0xffffffff }).map((v) => '0x' + v.toString(16)), fc.integer({ min: 0, max: 100000 }).map(String));
const maskPair = fc.tuple(fc.integer({ min: 1, max: 0xffffffff }), fc.integer({ min: 0, max: 0xffffffff }), fc.boolean())
  .map(([m, v, eq]) => `& 0x${m.toString(16)} ${eq ? '==' : '!='} 0x${((v & m) >>> 0).toString(16)}`);
const ctStates = fc.subarray(['invalid', 'established', 'related', 'new', 'untracked'], { minLength: 1 });
const ctStatus = fc.subarray(['expected', 'seen-reply', 'assured', 'confirmed', 'snat', 'dnat', 'dying'], { minLength: 1 });
const proto = fc.constantFrom('icmp', 'tcp', 'udp', 'sctp', 'gre', 'esp', '200', '47');

/** One match that needs no transport context. */
function plainMatch(family: CorpusFamily, l3: 'ip' | 'ip6' | undefined): fc.Arbitrary<string> {
  const opts: fc.Arbitrary<string>[] = [
    fc.tuple(fc.constantFrom('iifname', 'oifname', 'meta iifname'), eqOrNeq, ifRhs).map(([k, o, v]) => `${k} ${o}${v}`),
    fc.tuple(fc.constantFrom('meta mark', 'ct mark', 'mark'), op, mark).map(([k, o, v]) => `${k} ${o}${v}`),
    fc.tuple(fc.constantFrom('meta mark', 'ct mark'), maskPair).map(([k, m]) => `${k} ${m}`),
    fc.tuple(fc.constantFrom('meta mark', 'ct mark'), fc.uniqueArray(fc.integer({ min: 0, max: 1000 }), { minLength: 2, maxLength: 4 }))
      .map(([k, v]) => `${k} { ${v.join(', ')} }`),
    fc.tuple(op, ctStates, fc.constantFrom(',', ' | ')).map(([o, s, sep]) => `ct state ${o}${s.join(o === '' ? ',' : sep)}`),
    fc.tuple(op, ctStatus).map(([o, s]) => `ct status ${o}${s.join(',')}`),
    fc.tuple(eqOrNeq, fc.constantFrom('local', 'unicast', 'broadcast', 'multicast')).map(([o, t]) => `fib daddr type ${o}${t}`),
    fc.tuple(eqOrNeq, fc.constantFrom('1', '"lo"')).map(([o, v]) => `iif ${o}${v}`),
    fc.constant('counter'),
  ];
  if (family !== 'ip6' && l3 !== 'ip6') {
    opts.push(fc.tuple(fc.constantFrom('ip saddr', 'ip daddr'), eqOrNeq, addrRhs(false)).map(([k, o, v]) => `${k} ${o}${v}`));
  }
  if (family !== 'ip' && l3 !== 'ip') {
    opts.push(fc.tuple(fc.constantFrom('ip6 saddr', 'ip6 daddr'), eqOrNeq, addrRhs(true)).map(([k, o, v]) => `${k} ${o}${v}`));
  }
  return fc.oneof(...opts);
}

export function ruleArb(): fc.Arbitrary<GenRule> {
  return fc.constantFrom<CorpusFamily>('ip', 'ip6', 'inet').chain((family) =>
    fc.record({
      l3: family === 'inet' ? fc.constantFrom<'ip' | 'ip6' | undefined>('ip', 'ip6', undefined) : fc.constant(family === 'ip' ? 'ip' as const : 'ip6' as const),
      l4: fc.constantFrom<'tcp' | 'udp' | undefined>('tcp', 'udp', undefined),
      explicitL4: fc.constantFrom('none', 'meta', 'proto'),
      nPlain: fc.integer({ min: 0, max: 3 }),
      ports: fc.array(fc.tuple(fc.constantFrom('sport', 'dport'), eqOrNeq, portRhs), { maxLength: 2 }),
      stmt: fc.constantFrom('verdict', 'masq', 'snat', 'dnat', 'redirect', 'markset', 'ctmarkset', 'none'),
      verdict: fc.constantFrom('accept', 'drop', 'return', 'jump KUBE-MARK-MASQ', 'goto CNI-X'),
      natPort: fc.option(fc.oneof(port.map(String), portRange), { nil: undefined }),
      natFlags: fc.subarray(['random', 'fully-random', 'persistent']),
      addr4: ipv4,
      addr4b: ipv4,
      addr6: ipv6,
      markV: mark,
      markOp: fc.constantFrom('', 'or ', 'and ', 'xor ', '| ', '^ '),
      comment: fc.option(fc.stringMatching(/^[a-zA-Z0-9 :._\/-]{1,40}$/), { nil: undefined }),
      protoV: proto,
    }).chain((o) => fc.array(plainMatch(family, o.l3), { minLength: o.nPlain, maxLength: o.nPlain }).map((plain) => {
      const parts: string[] = [];
      const nl3 = family === 'inet' ? o.l3 : family === 'ip' ? 'ip' : 'ip6';
      if (!o.l4 && o.explicitL4 === 'proto' && nl3) parts.push(`${nl3 === 'ip' ? 'ip protocol' : 'ip6 nexthdr'} ${o.protoV}`);
      if (!o.l4 && o.explicitL4 === 'meta') parts.push(`meta l4proto ${o.protoV}`);
      parts.push(...plain);
      if (o.l4) {
        if (o.explicitL4 === 'meta') parts.unshift(`meta l4proto ${o.l4}`);
        if (o.explicitL4 === 'proto' && nl3) parts.unshift(`${nl3 === 'ip' ? 'ip protocol' : 'ip6 nexthdr'} ${o.l4}`);
        const neqs = o.ports.filter(([, x]) => x === '!= ').length;
        const ports = neqs > 1 ? o.ports.slice(0, 1) : o.ports;
        for (const [k, x, v] of ports) parts.push(`${o.l4} ${k} ${x}${v}`);
        if (ports.length === 0) parts.push(`${o.l4} dport 80`);
      }
      const l4known = !!o.l4;
      const natFam = family === 'inet' ? (nl3 ?? 'ip') : family;
      const famKw = family === 'inet' ? ` ${natFam}` : '';
      const addr = natFam === 'ip6' ? o.addr6 : o.addr4;
      const np = l4known && o.natPort ? o.natPort : undefined;
      const flags = o.natFlags.length ? ' ' + o.natFlags.join(',') : '';
      let chain: CorpusChain = 'fwd';
      switch (o.stmt) {
        case 'verdict': parts.push(o.verdict); break;
        case 'masq': chain = 'post'; parts.push(`masquerade${np ? ` to :${np}` : ''}${flags}`); break;
        case 'redirect': chain = 'pre'; parts.push(`redirect${np ? ` to :${np}` : ''}${flags}`); break;
        case 'snat': case 'dnat': {
          chain = o.stmt === 'snat' ? 'post' : 'pre';
          const target = natFam === 'ip6' ? (np ? `[${addr}]:${np}` : addr) : `${addr}${np ? ':' + np : ''}`;
          parts.push(`${o.stmt}${famKw} to ${target}${flags}`);
          break;
        }
        case 'markset': parts.push(o.markOp ? `meta mark set mark ${o.markOp}${o.markV}` : `meta mark set ${o.markV}`); break;
        case 'ctmarkset': parts.push(o.markOp ? `ct mark set ct mark ${o.markOp}${o.markV}` : `ct mark set ${o.markV}`); break;
        case 'none': break;
      }
      if (parts.length === 0) parts.push('counter');
      if (o.comment !== undefined && o.comment.trim() !== '') parts.push(`comment "${o.comment}"`);
      return { family, chain, text: parts.join(' ') };
    })));
}
