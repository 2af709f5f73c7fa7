/**
 * renderRule: kernel expression IR back to canonical nft text. It reverses
 * the compiler: it recognises load+compare groups, names them by protocol
 * context, and leaves out exactly the dependencies the compiler would insert
 * again (a `meta l4proto` right before the tcp/udp match that needs it, a
 * `meta nfproto` right before the first ip/ip6 match of an inet rule), so
 * that compiling the text gives back the same IR. Expressions outside the
 * rule language still render, as `<unsupported: …>`.
 */
import type {
  BitwiseExpr, Expr, Family, Hex, LookupExpr, MasqExpr, NatExpr, RedirExpr,
} from '../netlink/expr.js';
import { FIB_F, NAT_RANGE } from '../netlink/expr.js';
import { SET_F, type NftSet, type SetElement } from '../netlink/objects.js';
import { bigToHex, fromHex, hexToBig, hostValue, prefixLenOfMask, readU32Host } from './bytes.js';
import { F, NFPROTO_IPV4, NFPROTO_IPV6, type Field } from './fields.js';
import { setIntervals } from './sets.js';
import { commentOf, decodeXtComment } from './udata.js';
import {
  CT_STATE, CT_STATUS, FIB_TYPES, IFNAMSIZ, NFPROTO, formatFlags, formatIPv4, formatIPv6,
  formatProtocol, hex32, symbolName,
} from './values.js';
import { groupKeyed, groupLoads, renderKeyed, type KeyedGroup } from './keyed.js';

/** Interface names and indexes, for `iif`/`oif`. */
export interface InterfaceResolver {
  indexOf(name: string): number | undefined;
  nameOf(index: number): string | undefined;
}

/** A fixed interface table, e.g. interfaceTable({ lo: 1, eth0: 2 }). */
export function interfaceTable(entries: Record<string, number>): InterfaceResolver {
  const byName = new Map(Object.entries(entries));
  const byIndex = new Map([...byName].map(([n, i]) => [i, n]));
  return { indexOf: (n) => byName.get(n), nameOf: (i) => byIndex.get(i) };
}

/** Finds an anonymous (or named) set a lookup refers to; setId is given for batch-local sets. */
export type SetResolver = (name: string, setId?: number) => { set: NftSet; elements: SetElement[] } | undefined;

export interface RenderOptions {
  interfaces?: InterfaceResolver;
  /** Print counter values (`counter packets N bytes M`); default: plain `counter`. */
  counters?: boolean;
}

type Load = Extract<Expr, { kind: 'payload' | 'meta' | 'ct' | 'fib' }>;
type Form =
  | { f: 'cmp'; op: 'eq' | 'neq'; data: Hex }
  | { f: 'mask'; mask: Hex; xor: Hex; op: 'eq' | 'neq'; data: Hex }
  | { f: 'range'; op: 'eq' | 'neq'; lo: Hex; hi: Hex }
  | { f: 'lookup'; e: LookupExpr };
type Item =
  /** A key looked up in a set or map, a generator, a dynset (src/rules/keyed.ts). */
  | { k: 'keyed'; g: KeyedGroup }
  | { k: 'rel'; load: Load; form: Form }
  | { k: 'text'; text: string };

const unsupported = (what: string) => `<unsupported: ${what}>`;

function isLoad(e: Expr | undefined): boolean {
  if (!e) return false;
  if (e.kind === 'payload') return e.dreg !== undefined && e.sreg === undefined;
  if (e.kind === 'meta' || e.kind === 'ct') return e.dreg !== undefined && e.sreg === undefined;
  return e.kind === 'fib';
}

function describe(e: Expr): string {
  switch (e.kind) {
    case 'match':
      return e.name === 'comment'
        ? `xt match "comment" ${JSON.stringify(decodeXtComment(e.info))}`
        : `xt match "${e.name}"`;
    case 'target': return `xt target "${e.name}"`;
    case 'payload': return `payload ${e.base} +${e.offset} len ${e.len}`;
    case 'meta': case 'ct': return `${e.kind} ${String(e.key)}`;
    case 'immediate': return e.verdict !== undefined ? `verdict ${String(e.verdict)}` : 'immediate';
    case 'unknown': return `expression "${e.name}"`;
    default: return `expression "${e.kind}"`;
  }
}

/** Groups the expressions into matches (load + compare) and rendered statements. */
function group(exprs: readonly Expr[], opts: RenderOptions, family: Family): Item[] {
  const items: Item[] = [];
  const n = exprs.length;
  let regs = new Map<number, Hex>();
  for (let i = 0; i < n; i++) {
    const e = exprs[i]!;
    const keyed = groupKeyed(exprs, i);
    if (keyed) {
      items.push({ k: 'keyed', g: keyed.g });
      i += keyed.n - 1;
      regs = new Map();
      continue;
    }
    if (isLoad(e)) {
      const ld = e as Load;
      const r = ld.dreg;
      const a = exprs[i + 1], b = exprs[i + 2];
      if (a?.kind === 'cmp' && a.sreg === r) {
        if (a.op === 'gte' && b?.kind === 'cmp' && b.sreg === r && b.op === 'lte') {
          items.push({ k: 'rel', load: ld, form: { f: 'range', op: 'eq', lo: a.data, hi: b.data } });
          i += 2;
          continue;
        }
        if (a.op === 'eq' || a.op === 'neq') {
          items.push({ k: 'rel', load: ld, form: { f: 'cmp', op: a.op, data: a.data } });
          i += 1;
          continue;
        }
      } else if (a?.kind === 'bitwise' && a.sreg === r && a.dreg === r && (a.op ?? 'bool') === 'bool'
        && a.mask !== undefined && a.xor !== undefined) {
        if (b?.kind === 'cmp' && b.sreg === r && (b.op === 'eq' || b.op === 'neq')) {
          items.push({ k: 'rel', load: ld, form: { f: 'mask', mask: a.mask, xor: a.xor, op: b.op, data: b.data } });
          i += 2;
          continue;
        }
        if ((b?.kind === 'meta' || b?.kind === 'ct') && b.sreg === r && b.key === 'mark') {
          items.push({ k: 'text', text: markSet(b.kind, markSource(ld), a) });
          i += 2;
          continue;
        }
      } else if (a?.kind === 'range' && a.sreg === r) {
        items.push({ k: 'rel', load: ld, form: { f: 'range', op: a.op, lo: a.from, hi: a.to } });
        i += 1;
        continue;
      } else if (a?.kind === 'lookup' && a.sreg === r && a.dreg === undefined) {
        items.push({ k: 'rel', load: ld, form: { f: 'lookup', e: a } });
        i += 1;
        continue;
      } else if ((a?.kind === 'meta' || a?.kind === 'ct') && a.sreg === r && a.key === 'mark') {
        items.push({ k: 'text', text: markSet(a.kind, markSource(ld), undefined) });
        i += 1;
        continue;
      }
      items.push({ k: 'text', text: unsupported(describe(e)) });
      continue;
    }
    switch (e.kind) {
      case 'immediate':
        if (e.dreg === 0) {
          items.push({ k: 'text', text: verdictText(e.verdict, e.chain) });
        } else if (e.data !== undefined) {
          regs.set(e.dreg, e.data);
          continue; // keep collecting for the consumer
        } else {
          items.push({ k: 'text', text: unsupported('immediate') });
        }
        break;
      case 'counter':
        items.push({ k: 'text', text: opts.counters && e.packets !== undefined
          ? `counter packets ${e.packets} bytes ${e.bytes ?? 0}` : 'counter' });
        break;
      case 'nat': items.push({ k: 'text', text: natText(e, regs, family) }); break;
      case 'masq': case 'redir': items.push({ k: 'text', text: masqText(e, regs) }); break;
      case 'meta': case 'ct':
        if (e.sreg !== undefined && e.key === 'mark' && regs.has(e.sreg)) {
          const v = readU32Host(regs.get(e.sreg)!);
          items.push({ k: 'text', text: v === undefined ? unsupported(`${e.kind} set`) : `${e.kind} mark set ${hex32(v)}` });
        } else items.push({ k: 'text', text: unsupported(`${e.kind} set ${String(e.key)}`) });
        break;
      default:
        items.push({ k: 'text', text: unsupported(describe(e)) });
    }
    regs = new Map();
  }
  return items;
}

function markSource(e: Load): string | undefined {
  if ((e.kind === 'meta' || e.kind === 'ct') && e.key === 'mark') return `${e.kind} mark`;
  return undefined;
}

function markSet(target: 'meta' | 'ct', src: string | undefined, bw: BitwiseExpr | undefined): string {
  if (!src) return unsupported(`${target} mark set from another expression`);
  if (!bw) return `${target} mark set ${src}`;
  const mask = readU32Host(bw.mask!), xor = readU32Host(bw.xor!);
  if (mask === undefined || xor === undefined || bw.len !== 4) return unsupported(`${target} mark set with bitwise`);
  let op: string;
  if (xor === 0) op = `& ${hex32(mask)}`;
  else if (mask === (~xor >>> 0)) op = `| ${hex32(xor)}`;
  else if (mask === 0xffffffff) op = `^ ${hex32(xor)}`;
  else return unsupported(`${target} mark set with bitwise mask ${hex32(mask)} xor ${hex32(xor)}`);
  return `${target} mark set ${src} ${op}`;
}

function verdictText(v: unknown, chain?: string): string {
  switch (v) {
    case 'accept': case 'drop': case 'return': case 'continue': return v;
    case 'jump': case 'goto': return `${v} ${chain ?? '?'}`;
    default: return unsupported(`verdict ${String(v)}`);
  }
}

const NAT_FLAG_NAMES: [number, string][] = [
  [NAT_RANGE.PROTO_RANDOM, 'random'], [NAT_RANGE.PROTO_RANDOM_FULLY, 'fully-random'], [NAT_RANGE.PERSISTENT, 'persistent'],
];

function natFlags(flags: number, allowed: number): string | undefined {
  if (flags & ~allowed) return undefined;
  const names = NAT_FLAG_NAMES.filter(([b]) => flags & b).map(([, n]) => n);
  return names.length ? ' ' + names.join(',') : '';
}

function portText(regs: Map<number, Hex>, min?: number, max?: number): string | undefined {
  if (min === undefined) return '';
  const lo = regs.get(min), hi = max !== undefined ? regs.get(max) : lo;
  if (lo?.length !== 4 || hi?.length !== 4) return undefined;
  const a = parseInt(lo, 16), b = parseInt(hi, 16);
  return max !== undefined && max !== min ? `:${a}-${b}` : `:${a}`;
}

function masqText(e: MasqExpr | RedirExpr, regs: Map<number, Hex>): string {
  const word = e.kind === 'masq' ? 'masquerade' : 'redirect';
  const flags = e.flags ?? 0;
  const ports = portText(regs, e.regProtoMin, e.regProtoMax);
  const hasPorts = e.regProtoMin !== undefined;
  const f = natFlags(flags & ~(hasPorts ? NAT_RANGE.PROTO_SPECIFIED : 0),
    NAT_RANGE.PROTO_RANDOM | NAT_RANGE.PROTO_RANDOM_FULLY | NAT_RANGE.PERSISTENT);
  if (ports === undefined || f === undefined) return unsupported(`${word} with flags ${flags}`);
  return `${word}${hasPorts ? ' to ' + ports : ''}${f}`;
}

function prefixOfRange(lo: Hex, hi: Hex): number | undefined {
  const a = hexToBig(lo), b = hexToBig(hi);
  if (b < a) return undefined;
  const size = b - a + 1n;
  if ((size & (size - 1n)) !== 0n || a % size !== 0n) return undefined;
  const bits = lo.length * 4;
  return bits - (size.toString(2).length - 1);
}

function natText(e: NatExpr, regs: Map<number, Hex>, family: Family): string {
  const fam = e.family === 'ip' || e.family === 'ip6' ? e.family : e.family === 'inet' ? 'inet' : undefined;
  if (!fam || (e.type !== 'snat' && e.type !== 'dnat')) return unsupported(`nat ${String(e.type)}`);
  const flags = e.flags ?? 0;
  const hasAddr = e.regAddrMin !== undefined;
  const hasPorts = e.regProtoMin !== undefined;
  const f = natFlags(flags & ~((hasAddr ? NAT_RANGE.MAP_IPS : 0) | (hasPorts ? NAT_RANGE.PROTO_SPECIFIED : 0)),
    NAT_RANGE.PROTO_RANDOM | NAT_RANGE.PROTO_RANDOM_FULLY | NAT_RANGE.PERSISTENT);
  const ports = portText(regs, e.regProtoMin, e.regProtoMax);
  if (f === undefined || ports === undefined) return unsupported(`${e.type} with flags ${flags}`);
  let target = '';
  if (hasAddr) {
    const v6 = fam === 'ip6';
    const alen = v6 ? 32 : 8;
    const lo = regs.get(e.regAddrMin!);
    const maxReg = e.regAddrMax ?? e.regAddrMin!;
    const hi = regs.get(maxReg);
    if (lo?.length !== alen || hi?.length !== alen || fam === 'inet') return unsupported(`${e.type} address`);
    const fmt = v6 ? formatIPv6 : formatIPv4;
    const range = maxReg !== e.regAddrMin;
    const plen = range && lo !== hi ? prefixOfRange(lo, hi) : undefined;
    if (!v6) {
      target = !range ? fmt(lo) : plen !== undefined ? `${fmt(lo)}/${plen}` : `${fmt(lo)}-${fmt(hi)}`;
      target += ports;
    } else if (!hasPorts) {
      target = !range ? fmt(lo) : plen !== undefined ? `${fmt(lo)}/${plen}` : `${fmt(lo)}-${fmt(hi)}`;
    } else {
      target = (!range ? `[${fmt(lo)}]` : `[${fmt(lo)}]-[${fmt(hi)}]`) + ports;
    }
  } else {
    target = ports;
  }
  const kw = fam !== family ? ` ${fam}` : '';
  return `${e.type}${kw} to ${target}${f}`;
}

// ---- naming matches by protocol context ------------------------------------

function fieldOf(load: Load, family: Family, l3: string | undefined, l4: number | 'set' | undefined): Field | undefined {
  switch (load.kind) {
    case 'payload': {
      if (load.base === 'transport' && load.len === 2 && (l4 === undefined || l4 === 'set') && (load.offset === 0 || load.offset === 2)) {
        // ports of whatever transport protocol follows: nft's `th` (with one protocol known, nft names
        // the field after that protocol's header)
        return load.offset === 0 ? F.thSport : F.thDport;
      }
      if (load.base === 'network') {
        const net = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : l3;
        if (net === 'ip') {
          if (load.offset === 12 && load.len <= 4) return F.ipSaddr;
          if (load.offset === 16 && load.len <= 4) return F.ipDaddr;
          if (load.offset === 9 && load.len === 1) return F.ipProtocol;
        } else if (net === 'ip6') {
          if (load.offset === 8 && load.len <= 16) return F.ip6Saddr;
          if (load.offset === 24 && load.len <= 16) return F.ip6Daddr;
          if (load.offset === 6 && load.len === 1) return F.ip6Nexthdr;
        }
        return undefined;
      }
      if (load.base === 'transport' && (l4 === 6 || l4 === 17)) {
        const tcp = l4 === 6;
        if (load.offset === 0 && load.len === 2) return tcp ? F.tcpSport : F.udpSport;
        if (load.offset === 2 && load.len === 2) return tcp ? F.tcpDport : F.udpDport;
        if (load.offset === 0 && load.len === 4) return { ...(tcp ? F.tcpSport : F.udpSport), type: 'ports', len: 4 };
      }
      return undefined;
    }
    case 'meta':
      switch (load.key) {
        case 'iifname': return F.iifname;
        case 'oifname': return F.oifname;
        case 'iif': return F.iif;
        case 'oif': return F.oif;
        case 'l4proto': return F.l4proto;
        case 'nfproto': return family === 'inet' ? F.nfproto : undefined;
        case 'mark': return F.mark;
        default: return undefined;
      }
    case 'ct':
      if (load.dir !== undefined) return undefined;
      return load.key === 'state' ? F.ctState : load.key === 'status' ? F.ctStatus : load.key === 'mark' ? F.ctMark : undefined;
    case 'fib':
      return load.result === 'type' && load.flags === FIB_F.DADDR ? F.fibDaddrType : undefined;
  }
}

function isTransportFor(it: Item | undefined, proto: number, family: Family): boolean {
  if (!it || it.k !== 'rel' || it.load.kind !== 'payload' || it.load.base !== 'transport') return false;
  return fieldOf(it.load, family, undefined, proto) !== undefined;
}

function isNetworkFor(it: Item | undefined, l3: 'ip' | 'ip6'): boolean {
  if (!it || it.k !== 'rel' || it.load.kind !== 'payload' || it.load.base !== 'network') return false;
  return fieldOf(it.load, 'inet', l3, undefined) !== undefined;
}

/** A single `meta nfproto`/`meta l4proto` equality, as the compiler inserts for a dependency. */
function depValue(it: Item | undefined, family: Family): { nfproto?: number; l4proto?: number } | undefined {
  if (!it || it.k !== 'rel' || it.form.f !== 'cmp' || it.form.op !== 'eq' || it.form.data.length !== 2) return undefined;
  if (it.load.kind !== 'meta') return undefined;
  const v = parseInt(it.form.data, 16);
  if (it.load.key === 'l4proto') return { l4proto: v };
  if (it.load.key === 'nfproto' && family === 'inet') return { nfproto: v };
  return undefined;
}

/**
 * When items[i…] are exactly the dependencies the compiler would insert for the keyed lookup
 * right after them (named in the context they establish), how many to leave out and the context.
 */
function keyedDeps(items: readonly Item[], i: number, family: Family, l3: 'ip' | 'ip6' | 'other' | undefined,
  l4: number | 'set' | undefined): { n: number; l3: typeof l3; l4: typeof l4 } | undefined {
  let k = i;
  const deps: { nfproto?: number; l4proto?: number }[] = [];
  for (let d = depValue(items[k], family); d; d = depValue(items[++k], family)) deps.push(d);
  const next = items[k];
  if (deps.length === 0 || next?.k !== 'keyed') return undefined;
  // the context the dependencies establish
  let c3 = l3, c4 = l4;
  for (const d of deps) {
    if (d.nfproto !== undefined) c3 = d.nfproto === NFPROTO_IPV4 ? 'ip' : d.nfproto === NFPROTO_IPV6 ? 'ip6' : 'other';
    if (d.l4proto !== undefined) c4 = d.l4proto;
  }
  // what the compiler inserts for the key's fields, named in that context, from the current one
  let s3 = l3, s4 = l4;
  const want: { nfproto?: number; l4proto?: number }[] = [];
  for (const load of groupLoads(next.g)) {
    const f = fieldOf(load, family, c3, c4);
    if (!f) return undefined;
    if (f.l3 && family === 'inet' && s3 === undefined) {
      want.push({ nfproto: f.l3 === 'ip' ? NFPROTO_IPV4 : NFPROTO_IPV6 });
      s3 = f.l3;
    }
    if (f.l4 !== undefined && s4 === undefined) {
      want.push({ l4proto: f.l4 });
      s4 = f.l4;
    }
  }
  if (want.length !== deps.length || want.some((w, j) => w.nfproto !== deps[j]!.nfproto || w.l4proto !== deps[j]!.l4proto)) {
    return undefined;
  }
  return { n: deps.length, l3: c3, l4: c4 };
}

export function renderRule(rule: { exprs: readonly Expr[]; userdata?: Hex }, family: Family, sets?: SetResolver,
  options: RenderOptions = {}): string {
  const items = group(rule.exprs, options, family);
  const parts: string[] = [];
  let l3: 'ip' | 'ip6' | 'other' | undefined = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : undefined;
  let l4: number | 'set' | undefined;
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    // sets and maps (src/rules/keyed.ts)
    if (it.k === 'keyed') {
      const text = renderKeyed(it.g, {
        family, sets, verdictText,
        fieldOf: (load) => fieldOf(load, family, l3, l4),
        valueText: (f, h) => valueText(f, h, options),
      });
      parts.push(text ?? unsupported('set lookup'));
      continue;
    }
    // the dependencies the compiler inserts before a keyed lookup (ip daddr . tcp dport …)
    const elided = keyedDeps(items, i, family, l3, l4);
    if (elided) {
      i += elided.n - 1;
      l3 = elided.l3;
      l4 = elided.l4;
      continue;
    }
    if (it.k === 'text') {
      parts.push(it.text);
      continue;
    }
    const field = fieldOf(it.load, family, l3, l4);
    if (!field) {
      parts.push(unsupported(`match on ${describe(it.load)}`));
      continue;
    }
    const form = it.form;
    const single = form.f === 'cmp' && form.op === 'eq' && form.data.length === 2;
    // dependencies the compiler would insert again right here
    if (field === F.l4proto && single && l4 === undefined) {
      const p = parseInt(form.data, 16);
      if ((p === 6 || p === 17) && isTransportFor(items[i + 1], p, family)) { l4 = p; continue; }
    }
    if (field === F.nfproto && single && l3 === undefined) {
      const v = parseInt(form.data, 16);
      const fam = v === NFPROTO_IPV4 ? 'ip' : v === NFPROTO_IPV6 ? 'ip6' : undefined;
      if (fam && isNetworkFor(items[i + 1], fam)) { l3 = fam; continue; }
    }
    parts.push(relText(field, it.load, form, sets, options));
    // context updates, as the compiler does them
    if (field.protoKey) {
      if (form.f === 'cmp' && form.op === 'eq' && form.data.length === 2) l4 = parseInt(form.data, 16);
      else if (form.f === 'lookup' && !((form.e.flags ?? 0) & 1)) l4 = 'set';
    } else if (field === F.nfproto && form.f === 'cmp' && form.op === 'eq' && form.data.length === 2) {
      const v = parseInt(form.data, 16);
      l3 = v === NFPROTO_IPV4 ? 'ip' : v === NFPROTO_IPV6 ? 'ip6' : 'other';
    }
  }
  const comment = commentOf(rule.userdata);
  if (comment !== undefined) parts.push(`comment "${comment}"`);
  return parts.join(' ');
}

// ---- values ----------------------------------------------------------------

function ifnameText(data: Hex): string | undefined {
  const b = fromHex(data);
  const nul = b.indexOf(0);
  if (nul < 0) {
    if (b.length >= IFNAMSIZ) return undefined;
    return `"${Buffer.from(b).toString('utf8')}*"`;
  }
  for (let i = nul; i < b.length; i++) if (b[i] !== 0) return undefined;
  const name = Buffer.from(b.subarray(0, nul)).toString('utf8');
  // A literal trailing star is written '\*' (nft 1.0.6 lists it so in a rule, but not in a set).
  return `"${name.endsWith('*') ? name.slice(0, -1) + '\\*' : name}"`;
}

/** One value of the field's type (full length), or undefined when it cannot be printed. */
function valueText(field: Field, data: Hex, opts: RenderOptions, flagSep = ','): string | undefined {
  switch (field.type) {
    case 'ipv4': return data.length === 8 ? formatIPv4(data) : undefined;
    case 'ipv6': return data.length === 32 ? formatIPv6(data) : undefined;
    case 'port': return data.length === 4 ? String(parseInt(data, 16)) : undefined;
    case 'proto': return data.length === 2 ? formatProtocol(parseInt(data, 16)) : undefined;
    case 'nfproto': {
      if (data.length !== 2) return undefined;
      const v = parseInt(data, 16);
      return symbolName(NFPROTO, v) ?? String(v);
    }
    case 'ifname': return ifnameText(data);
    case 'ifindex': {
      const v = readU32Host(data);
      if (v === undefined) return undefined;
      const name = opts.interfaces?.nameOf(v);
      return name !== undefined ? `"${name}"` : String(v);
    }
    case 'mark': {
      const v = readU32Host(data);
      return v === undefined ? undefined : hex32(v);
    }
    case 'ctstate': case 'ctstatus': {
      const v = readU32Host(data);
      return v === undefined ? undefined : formatFlags(field.type === 'ctstate' ? CT_STATE : CT_STATUS, v, flagSep);
    }
    case 'fibtype': {
      const v = readU32Host(data);
      return v === undefined ? undefined : symbolName(FIB_TYPES, v) ?? String(v);
    }
    case 'ports': return undefined;
  }
}

function opText(op: 'eq' | 'neq'): string {
  return op === 'neq' ? ' !=' : '';
}

function relText(field: Field, load: Load, form: Form, sets: SetResolver | undefined, opts: RenderOptions): string {
  const name = field.name;
  const bad = () => unsupported(`${name} ${form.f}`);
  const loadLen = load.kind === 'payload' ? load.len : field.len;
  const isAddr = field.type === 'ipv4' || field.type === 'ipv6';
  const isFlags = field.type === 'ctstate' || field.type === 'ctstatus';
  switch (form.f) {
    case 'cmp': {
      if (field.type === 'ports') {
        if (form.data.length !== 8) return bad();
        const proto = field.name.split(' ')[0];
        const neq = form.op === 'neq' ? ' !=' : '';
        return `${proto} sport${neq} ${parseInt(form.data.slice(0, 4), 16)} ${proto} dport${neq} ${parseInt(form.data.slice(4), 16)}`;
      }
      if (isAddr && loadLen < field.len) {
        if (form.data.length !== loadLen * 2) return bad();
        const full = form.data + '00'.repeat(field.len - loadLen);
        return `${name}${opText(form.op)} ${valueText(field, full, opts)}/${loadLen * 8}`;
      }
      if (field.type === 'ifname') {
        const v = ifnameText(form.data);
        return v === undefined ? bad() : `${name}${opText(form.op)} ${v}`;
      }
      if (form.data.length !== field.len * 2) return bad();
      if (isFlags) {
        const v = valueText(field, form.data, opts, ' | ');
        return `${name} ${form.op === 'eq' ? '==' : '!='} ${v}`;
      }
      const v = valueText(field, form.data, opts);
      return v === undefined ? bad() : `${name}${opText(form.op)} ${v}`;
    }
    case 'mask': {
      if (form.xor !== '00'.repeat(field.len) || form.mask.length !== field.len * 2 || form.data.length !== field.len * 2) return bad();
      if (isAddr) {
        const plen = prefixLenOfMask(form.mask);
        if (plen === undefined || plen === field.len * 8) return bad();
        if ((hexToBig(form.data) & ~hexToBig(form.mask)) !== 0n) return bad();
        return `${name}${opText(form.op)} ${valueText(field, form.data, opts)}/${plen}`;
      }
      if (isFlags) {
        if (form.op === 'neq' && hexToBig(form.data) === 0n) return `${name} ${valueText(field, form.mask, opts, ',')}`;
        const table = field.type === 'ctstate' ? CT_STATE : CT_STATUS;
        const one = (h: Hex) => {
          const v = readU32Host(h)!;
          return symbolName(table, v) ?? '0x' + v.toString(16);
        };
        return `${name} & ${one(form.mask)} ${form.op === 'eq' ? '==' : '!='} ${one(form.data)}`;
      }
      if (field.type === 'mark') {
        return `${name} & ${valueText(field, form.mask, opts)} ${form.op === 'eq' ? '==' : '!='} ${valueText(field, form.data, opts)}`;
      }
      return bad();
    }
    case 'range': {
      if (!(isAddr || field.type === 'port') || form.lo.length !== field.len * 2 || form.hi.length !== field.len * 2) return bad();
      return `${name}${opText(form.op)} ${valueText(field, form.lo, opts)}-${valueText(field, form.hi, opts)}`;
    }
    case 'lookup': {
      const neq = ((form.e.flags ?? 0) & 1) !== 0;
      const found = sets?.(form.e.set, form.e.setId);
      if (!found) {
        return form.e.set.startsWith('__set') ? unsupported(`${name} lookup in anonymous set ${form.e.set} (no set resolver)`)
          : `${name}${neq ? ' !=' : ''} @${form.e.set}`;
      }
      if (!(found.set.flags & SET_F.ANONYMOUS)) return `${name}${neq ? ' !=' : ''} @${found.set.name}`;
      const body = setBody(field, found.set, found.elements, opts);
      return body === undefined ? unsupported(`${name} lookup in set ${found.set.name}`) : `${name}${neq ? ' !=' : ''} { ${body} }`;
    }
  }
}

function setBody(field: Field, set: NftSet, elements: readonly SetElement[], opts: RenderOptions): string | undefined {
  if (set.keyLen !== field.len || !field.set || (set.flags & (SET_F.MAP | SET_F.CONCAT | SET_F.OBJECT))) return undefined;
  const isAddr = field.type === 'ipv4' || field.type === 'ipv6';
  if (set.flags & SET_F.INTERVAL) {
    let ivs = setIntervals(set.keyLen, elements);
    if (!ivs) return undefined;
    if (ivs.length === 1) {
      // One interval left after nft merged the elements. `{ x }` would read back as a plain match,
      // not a set, so say it with elements that merge into it again: the prefixes that cover an
      // address range, else its two halves (an interface wildcard: itself twice).
      const { lo, hi } = ivs[0]!;
      // One address (`{ a, a/32 }`): written twice, the first as a full prefix (below).
      if (lo === hi && !isAddr && field.type !== 'port') return undefined;
      // Pieces that are all single values would read back as a hashed set, so one must be a span.
      const a = hexToBig(lo), b = hexToBig(hi), mid = a + (b - a + 1n) / 2n, len = lo.length / 2;
      const cover = isAddr && lo !== hi ? prefixCover(lo, hi) : [];
      if (cover.length >= 2 && cover.length <= 8 && cover.some((c) => c.lo !== c.hi)) ivs = cover;
      else if (field.type !== 'ifname' && b - a + 1n >= 4n) {
        ivs = [{ lo, hi: bigToHex(mid - 1n, len) }, { lo: bigToHex(mid, len), hi }];
      } else ivs = [ivs[0]!, ivs[0]!];
    }
    const out: string[] = [];
    // Single values only would read back as a hashed set: the first is written as a one-address
    // prefix (a one-port range), which keeps the set an interval set, as nft builds it.
    const span = ivs.every((iv) => iv.lo === iv.hi);
    if (span && !isAddr && field.type !== 'port') return undefined;
    for (const [i, { lo, hi }] of ivs.entries()) {
      if (lo === hi) {
        const v = valueText(field, lo, opts);
        if (v === undefined) return undefined;
        out.push(span && i === 0 ? (isAddr ? `${v}/${set.keyLen * 8}` : `${v}-${v}`) : v);
      } else if (field.type === 'ifname') {
        const b = fromHex(lo);
        let n = b.length;
        while (n > 0 && b[n - 1] === 0) n--;
        if (n === 0 || b.subarray(0, n).includes(0) || hi !== lo.slice(0, n * 2) + 'ff'.repeat(b.length - n)) return undefined;
        out.push(`"${Buffer.from(b.subarray(0, n)).toString('utf8')}*"`);
      } else if (isAddr) {
        const p = prefixOfRange(lo, hi);
        out.push(p !== undefined ? `${valueText(field, lo, opts)}/${p}` : `${valueText(field, lo, opts)}-${valueText(field, hi, opts)}`);
      } else if (field.type === 'port') {
        out.push(`${valueText(field, lo, opts)}-${valueText(field, hi, opts)}`);
      } else return undefined;
    }
    return out.join(', ');
  }
  const host = field.set.byteorder === 1;
  const keys = elements.map((e) => e.key).filter((k): k is string => k !== undefined && k.length === set.keyLen * 2);
  if (keys.length !== elements.length) return undefined;
  keys.sort((a, b) => {
    const x = host ? hostValue(a) : hexToBig(a), y = host ? hostValue(b) : hexToBig(b);
    return x < y ? -1 : x > y ? 1 : 0;
  });
  // nft keeps a duplicate once but sizes the set by the elements as written; a set with fewer
  // elements than its size had duplicates, written again here so the text reads back to the same
  // set (and `{ v }` alone would read back as a plain match, not a set).
  const copies = Math.min(Math.max(2, set.size ?? 0), keys.length + 64) - keys.length;
  if (copies > 0) keys.splice(1, 0, ...new Array<string>(copies).fill(keys[0]!));
  const out: string[] = [];
  for (const k of keys) {
    const v = valueText(field, k, opts);
    if (v === undefined) return undefined;
    out.push(v);
  }
  return out.join(', ');
}

/** The fewest aligned prefixes that cover [lo, hi] exactly, as inclusive intervals. */
function prefixCover(lo: Hex, hi: Hex): { lo: Hex; hi: Hex }[] {
  const len = lo.length / 2;
  const bits = BigInt(len * 8);
  let a = hexToBig(lo);
  const b = hexToBig(hi);
  const out: { lo: Hex; hi: Hex }[] = [];
  while (a <= b && out.length <= 8) {
    let size = 1n;
    while (size < (1n << bits) && a % (size * 2n) === 0n && a + size * 2n - 1n <= b) size *= 2n;
    out.push({ lo: bigToHex(a, len), hi: bigToHex(a + size - 1n, len) });
    a += size;
  }
  return out;
}
