/**
 * renderRule: kernel expression IR back to canonical nft text. It reverses
 * the compiler: it recognises load+compare groups, names them by protocol
 * context, and leaves out exactly the dependencies the compiler would insert
 * again (a `meta l4proto` right before the tcp/udp match that needs it, a
 * `meta nfproto` right before the first ip/ip6 match of an inet rule), so
 * that compiling the text gives back the same IR. Expressions outside the
 * rule language still render, as `<unsupported: …>`.
 */
import { renderObjref } from './objref.js';
import type {
  BitwiseExpr, Expr, Family, Hex, ImmediateExpr, LookupExpr, MasqExpr, NatExpr, RedirExpr,
} from '../netlink/expr.js';
import { FIB_F, NAT_RANGE, type StatefulExpr } from '../netlink/expr.js';
import { SET_F, type BoundChain, type NftSet, type SetElement } from '../netlink/objects.js';
import { HOST_LE, bigToHex, fromHex, hexToBig, hostValue, prefixLenOfMask, readU32Host, zeroHex } from './bytes.js';
import { ETHER, F, VLAN, NFPROTO_IPV4, NFPROTO_IPV6, ctAddrField, fibField, osfField, portField, rawPayloadAt, rtField, socketField, xfrmField, type Field } from './fields.js';
import { BOOLEAN_SYMS, L4_BY_NUM, REALMS, ctDirection, ctField, fieldMask, headerFieldAt, headerFieldsAt, metaField, type Proto } from './headers.js';
import { decodeInt, encodeInt, formatInt } from './intvalues.js';
import { renderExprStatement, renderRegStatement } from './statements.js';
import { exthdrFieldAt, tcpOptionField } from './exthdr.js';
import { matchPayloadSet } from './payloadset.js';
import { setIntervals } from './anonymous-sets.js';
import { withoutState } from './stateful.js';
import { BYTEORDER_BIG, BYTEORDER_HOST, commentOf, decodeXtComment, setUserdata } from './udata.js';
import {
  CT_STATE, CT_STATUS, FIB_TYPES, IFNAMSIZ, NFPROTO, formatFlags, formatIPv4, formatIPv6,
  formatProtocol, hex32, symbolName,
} from './values.js';
import { groupFields, groupKeyed, groupNatSplit, renderKeyed, type KeyedGroup, type KeyedRenderEnv, type NatSplitGroup } from './keyed.js';

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
  /**
   * Print a chain binding over lines as `nft list` does (a line a rule, indented one tab more
   * than the rule, which is indented by this); default: on the rule's line, each rule ended by ';'.
   */
  bindingIndent?: string;
}

type Load = Extract<Expr, { kind: 'payload' | 'meta' | 'ct' | 'fib' | 'exthdr' | 'socket' | 'osf' | 'xfrm' | 'rt' }>;
/** What stands between a load and its comparison: a bit-field mask, a byte order conversion. */
interface Pre { bits?: Hex; hton?: boolean }
type Form =
  | { f: 'cmp'; op: 'eq' | 'neq'; data: Hex; pre?: Pre }
  | { f: 'ord'; op: 'lt' | 'gt' | 'lte' | 'gte'; data: Hex; pre?: Pre }
  | { f: 'mask'; mask: Hex; xor: Hex; op: 'eq' | 'neq'; data: Hex }
  | { f: 'range'; op: 'eq' | 'neq'; lo: Hex; hi: Hex; pre?: Pre }
  | { f: 'lookup'; e: LookupExpr; pre?: Pre };
type Item =
  /** A key looked up in a set or map, a generator, a dynset (src/rules/keyed.ts). */
  | { k: 'keyed'; g: KeyedGroup }
  /** A NAT target whose address or port comes from a map, the other after ':' (keyed.ts, groupNatSplit). */
  | { k: 'natsplit'; g: NatSplitGroup; regs: Map<number, Hex> }
  | { k: 'rel'; load: Load; form: Form }
  | { k: 'text'; text: string }
  /** A statement whose text depends on the protocol context (reject). */
  | { k: 'stmt'; e: Expr }
  /** A header field store (FIELD set VALUE), named by the protocol context. */
  | { k: 'pset'; store: Extract<Expr, { kind: 'payload' }>; value: Hex; keep?: Hex };

const unsupported = (what: string) => `<unsupported: ${what}>`;

function isLoad(e: Expr | undefined): boolean {
  if (!e) return false;
  if (e.kind === 'payload') return e.dreg !== undefined && e.sreg === undefined;
  if (e.kind === 'meta' || e.kind === 'ct') return e.dreg !== undefined && e.sreg === undefined;
  if (e.kind === 'exthdr') return e.dreg !== undefined && e.sreg === undefined;
  if (e.kind === 'socket' || e.kind === 'osf' || e.kind === 'xfrm') return true;
  if (e.kind === 'rt') return e.dreg !== undefined && ['classid', 'nexthop4', 'nexthop6', 'mtu', 'ipsec'].includes(e.key as string);
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
    case 'exthdr': return `exthdr op ${e.op ?? 0} type ${e.type} +${e.offset} len ${e.len}`;
    case 'meta': case 'ct': return `${e.kind} ${String(e.key)}`;
    case 'immediate': return e.verdict !== undefined ? `verdict ${String(e.verdict)}` : 'immediate';
    case 'unknown': return `expression "${e.name}"`;
    default: return `expression "${e.kind}"`;
  }
}

/** No registers loaded: shared, never written (group() makes a Map when an immediate loads one). */
const NO_REGS = new Map<number, Hex>();

/** Groups the expressions into matches (load + compare) and rendered statements. */
function group(exprs: readonly Expr[], opts: RenderOptions, family: Family, binding?: (e: ImmediateExpr) => string | undefined): Item[] {
  const items: Item[] = [];
  const n = exprs.length;
  // the registers immediates loaded for the statement that uses them (most rules load none)
  let regs: Map<number, Hex> = NO_REGS;
  const hasNat = exprs.some((x) => x.kind === 'nat');
  for (let i = 0; i < n; i++) {
    const e = exprs[i]!;
    const keyed = groupKeyed(exprs, i);
    if (keyed) {
      items.push({ k: 'keyed', g: keyed.g });
      i += keyed.n - 1;
      if (regs.size > 0) regs = NO_REGS;
      continue;
    }
    const split = hasNat ? groupNatSplit(exprs, i) : undefined;
    if (split) {
      items.push({ k: 'natsplit', g: split.g, regs });
      i += split.n - 1;
      regs = NO_REGS;
      continue;
    }
    // (tcp option maxseg size set rt mtu: the rt load is the store's source, see the switch below)
    if (isLoad(e) && !(e.kind === 'rt' && e.key === 'mtu' && exprs[i + 1]?.kind === 'byteorder' && exprs[i + 2]?.kind === 'exthdr')) {
      const ld = e as Load;
      const r = ld.dreg!;
      const bw = exprs[i + 1], st = exprs[i + 2];
      if (ld.kind === 'payload' && r === 1 && bw?.kind === 'bitwise' && bw.sreg === 1 && bw.dreg === 1 && (bw.op ?? 'bool') === 'bool'
        && bw.mask !== undefined && bw.xor !== undefined && st?.kind === 'payload' && st.sreg === 1 && st.dreg === undefined
        && st.base === ld.base && st.offset === ld.offset && st.len === ld.len && bw.len === ld.len) {
        items.push({ k: 'pset', store: st, value: bw.xor, keep: bw.mask });
        i += 2;
        continue;
      }
      const pre = preSteps(exprs, i + 1, r);
      if (pre) {
        const k = i + 1 + pre.n;
        const a = exprs[k], b = exprs[k + 1];
        let form: Form | undefined, used = 0;
        if (a?.kind === 'cmp' && a.sreg === r) {
          if (a.op === 'gte' && b?.kind === 'cmp' && b.sreg === r && b.op === 'lte') {
            form = { f: 'range', op: 'eq', lo: a.data, hi: b.data, pre: pre.pre }; used = 2;
          } else if (a.op === 'eq' || a.op === 'neq') {
            form = { f: 'cmp', op: a.op, data: a.data, pre: pre.pre }; used = 1;
          } else {
            form = { f: 'ord', op: a.op, data: a.data, pre: pre.pre }; used = 1;
          }
        } else if (a?.kind === 'range' && a.sreg === r) {
          form = { f: 'range', op: a.op, lo: a.from, hi: a.to, pre: pre.pre }; used = 1;
        } else if (a?.kind === 'lookup' && a.sreg === r && a.dreg === undefined) {
          form = { f: 'lookup', e: a, pre: pre.pre }; used = 1;
        }
        if (form) {
          items.push({ k: 'rel', load: ld, form });
          i = k + used - 1;
          continue;
        }
      }
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
        items.push({ k: 'rel', load: ld, form: { f: 'ord', op: a.op, data: a.data } });
        i += 1;
        continue;
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
        const c = exprs[i + 3];
        if (b && isShift(b, r) && (c?.kind === 'meta' || c?.kind === 'ct') && c.sreg === r && c.key === 'mark') {
          items.push({ k: 'text', text: markSet(c.kind, markSource(ld), a, b) });
          i += 3;
          continue;
        }
      } else if (a && isShift(a, r) && (b?.kind === 'meta' || b?.kind === 'ct') && b.sreg === r && b.key === 'mark') {
        items.push({ k: 'text', text: markSet(b.kind, markSource(ld), undefined, a) });
        i += 2;
        continue;
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
      } else if ((a?.kind === 'meta' || a?.kind === 'ct') && a.sreg === r && a.key === 'secmark' && (a.kind === 'meta' || a.dir === undefined)
        && (ld.kind === 'meta' || (ld.kind === 'ct' && ld.dir === undefined)) && ld.kind !== a.kind && ld.key === 'secmark') {
        items.push({ k: 'text', text: `${a.kind} secmark set ${ld.kind} secmark` });
        i += 1;
        continue;
      }
      items.push({ k: 'text', text: unsupported(describe(e)) });
      continue;
    }
    switch (e.kind) {
      case 'immediate':
        if (e.dreg === 0) {
          items.push({ k: 'text', text: (binding && binding(e)) ?? verdictText(e.verdict, e.chain) });
        } else if (e.data !== undefined) {
          if (regs === NO_REGS) regs = new Map();
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
      case 'reject': items.push({ k: 'stmt', e }); break;
      case 'exthdr': {
        if (e.dreg === undefined && e.sreg === undefined && e.op === 1 && !e.offset && !e.len && (e.flags ?? 0) === 0) {
          // reset tcp option NAME (nft's strip)
          const named = tcpOptionField(String(e.type), undefined)!;
          items.push({ k: 'text', text: `reset ${named.name}` });
          break;
        }
        // tcp option maxseg size set N
        const f = tcpOptionField('maxseg', 'size')!;
        const v = e.sreg !== undefined ? regs.get(e.sreg) : undefined;
        const same = e.op === 1 && e.type === 2 && e.offset === 2 && e.len === 2 && (e.flags ?? 0) === 0 && e.dreg === undefined;
        items.push({ k: 'text', text: same && v?.length === 4 ? `${f.name} set ${parseInt(v, 16)}` : unsupported(describe(e)) });
        break;
      }
      case 'rt': {
        const b = exprs[i + 1], c = exprs[i + 2];
        if (e.key === 'mtu' && e.dreg === 1 && b?.kind === 'byteorder' && b.op === 'hton' && b.sreg === 1 && b.dreg === 1
          && b.len === 2 && b.size === 2 && c?.kind === 'exthdr' && c.sreg === 1 && c.op === 1 && c.type === 2
          && c.offset === 2 && c.len === 2 && (c.flags ?? 0) === 0 && c.dreg === undefined) {
          items.push({ k: 'text', text: 'tcp option maxseg size set rt mtu' });
          i += 2;
        } else items.push({ k: 'text', text: unsupported(describe(e)) });
        break;
      }
      case 'payload':
        if (e.sreg !== undefined && e.dreg === undefined && regs.has(e.sreg) && e.sreg === 1) {
          items.push({ k: 'pset', store: e, value: regs.get(e.sreg)! });
        } else items.push({ k: 'text', text: unsupported(describe(e)) });
        break;
      case 'tproxy': case 'dup':
        items.push({ k: 'text', text: renderRegStatement(e, regs, family, opts.interfaces?.nameOf) ?? unsupported(describe(e)) });
        break;
      case 'connlimit':
        items.push({ k: 'text', text: (e.flags ?? 0) & ~1 ? unsupported(describe(e)) : `ct count ${(e.flags ?? 0) & 1 ? 'over ' : ''}${e.count}` });
        break;
      case 'objref':
        items.push({ k: 'text', text: renderObjref(e) ?? unsupported(describe(e)) });
        break;
      case 'limit': case 'log': case 'quota': case 'notrack': case 'synproxy':
        items.push({ k: 'text', text: renderExprStatement(e, family) ?? unsupported(describe(e)) });
        break;
      case 'nat': items.push({ k: 'text', text: natText(e, regs, family) }); break;
      case 'masq': case 'redir': items.push({ k: 'text', text: masqText(e, regs) }); break;
      case 'meta': case 'ct':
        if (e.sreg !== undefined && e.key !== 'mark' && regs.has(e.sreg)) {
          items.push({ k: 'text', text: keySetText(e, regs.get(e.sreg)!, family, opts) });
        } else if (e.sreg !== undefined && e.key === 'mark' && regs.has(e.sreg)) {
          const v = readU32Host(regs.get(e.sreg)!);
          items.push({ k: 'text', text: v === undefined ? unsupported(`${e.kind} set`) : `${e.kind} mark set ${hex32(v)}` });
        } else items.push({ k: 'text', text: unsupported(`${e.kind} set ${String(e.key)}`) });
        break;
      default:
        items.push({ k: 'text', text: unsupported(describe(e)) });
    }
    if (regs.size > 0) regs = NO_REGS;
  }
  return items;
}

/**
 * A byteorder hton, or a bit mask (bitwise with xor 0) optionally followed by
 * one, between a load and what compares it; undefined when there is neither.
 */
function preSteps(exprs: readonly Expr[], k: number, r: number): { n: number; pre: Pre } | undefined {
  const pre: Pre = {};
  let n = 0;
  const a = exprs[k];
  if (a?.kind === 'bitwise' && a.sreg === r && a.dreg === r && (a.op ?? 'bool') === 'bool' && a.mask !== undefined
    && a.xor !== undefined && /^0*$/.test(a.xor) && exprs[k + 1]?.kind !== 'meta' && exprs[k + 1]?.kind !== 'ct') {
    const c = exprs[k + 1];
    // a plain masked comparison stays the 'mask' form (marks, ct state, flags under a mask)
    if (c?.kind === 'cmp' && (c.op === 'eq' || c.op === 'neq')) return undefined;
    pre.bits = a.mask;
    n++;
  }
  const b = exprs[k + n];
  if (b?.kind === 'byteorder' && b.op === 'hton' && b.sreg === r && b.dreg === r && b.len === b.size) {
    pre.hton = true;
    n++;
  }
  return n === 0 ? undefined : { n, pre };
}

/** `meta KEY set V` / `ct [dir] KEY set V` from an immediate. */
function keySetText(e: Extract<Expr, { kind: 'meta' | 'ct' }>, data: Hex, family: Family, opts: RenderOptions): string {
  const key = e.key;
  const settable = ['priority', 'nftrace', 'pkttype', 'zone', 'event', 'label'];
  if (typeof key !== 'string' || !settable.includes(key)) return unsupported(`${e.kind} set ${String(key)}`);
  const dir = e.kind === 'ct' ? e.dir : undefined;
  if (dir !== undefined && (key !== 'zone' || (dir !== 0 && dir !== 1))) return unsupported(`${e.kind} set ${key}`);
  const f = e.kind === 'meta' ? metaField(key as never) : ctField(key as never, dir as 0 | 1 | undefined);
  const v = f ? valueText(f, data, opts) : undefined;
  return f && v !== undefined ? `${f.name} set ${v}` : unsupported(`${e.kind} set ${key}`);
}

function markSource(e: Load): string | undefined {
  if ((e.kind === 'meta' || e.kind === 'ct') && e.key === 'mark') return `${e.kind} mark`;
  return undefined;
}

function isShift(e: Expr, r: number): e is BitwiseExpr {
  return e.kind === 'bitwise' && e.sreg === r && e.dreg === r && (e.op === 'lshift' || e.op === 'rshift') && e.len === 4
    && e.data !== undefined && (readU32Host(e.data) ?? 32) < 32;
}

function markSet(target: 'meta' | 'ct', src: string | undefined, bw: BitwiseExpr | undefined, shift?: BitwiseExpr): string {
  if (!src) return unsupported(`${target} mark set from another expression`);
  if (shift) {
    const sh = ` ${shift.op === 'lshift' ? '<<' : '>>'} ${readU32Host(shift.data!)}`;
    if (!bw) return `${target} mark set ${src}${sh}`;
    const inner = markSet(target, src, bw);
    const m = /^\S+ mark set (.*)$/.exec(inner);
    return inner.startsWith('<') || !m ? inner : `${target} mark set (${m[1]})${sh}`;
  }
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

/** `snat|dnat to ADDRESS:PORT` with either side from a map (keyed.ts, groupNatSplit), as nft lists it. */
function natSplitText(g: NatSplitGroup, regs: Map<number, Hex>, family: Family, env: KeyedRenderEnv): string | undefined {
  const n = g.nat;
  let head: string | undefined;
  if (g.addr) {
    head = renderKeyed(g.addr, env);
  } else {
    const fam = n.family === 'ip6' ? 'ip6' : 'ip';
    head = natText({ ...n, regProtoMin: undefined, regProtoMax: undefined, flags: NAT_RANGE.MAP_IPS }, regs, family);
    // an IPv6 address before a port in brackets, as nft writes it
    if (fam === 'ip6') head = head.replace(/ to ([0-9a-f:]+)(?:-([0-9a-f:]+))?$/, (_m, a: string, b?: string) => ` to [${a}]${b ? `-[${b}]` : ''}`);
  }
  if (head === undefined || head.includes('<unsupported')) return undefined;
  let port: string | undefined;
  if (g.port) {
    const t = renderKeyed(g.port, env);
    port = t?.startsWith('redirect to :') ? t.slice('redirect to :'.length) : undefined;
  } else {
    port = portText(g.portRegs!, n.regProtoMin, n.regProtoMax)?.slice(1);
  }
  const fl = natFlags((n.flags ?? 0) & ~(NAT_RANGE.MAP_IPS | NAT_RANGE.PROTO_SPECIFIED),
    NAT_RANGE.PROTO_RANDOM | NAT_RANGE.PROTO_RANDOM_FULLY | NAT_RANGE.PERSISTENT);
  return port && fl !== undefined ? `${head}:${port}${fl}` : undefined;
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
  // `ip addr . port to A . P`: nft keeps the port in the register after the address (reg 9)
  if (fam === 'ip' && hasAddr && hasPorts && e.regProtoMin === 9 && (e.regAddrMax ?? e.regAddrMin) === e.regAddrMin
    && (e.regProtoMax ?? 9) === 9) {
    const a = regs.get(e.regAddrMin!), p = regs.get(9);
    if (a?.length !== 8 || p?.length !== 4) return unsupported(`${e.type} address . port`);
    return `${e.type} ip addr . port to ${formatIPv4(a)} . ${parseInt(p, 16)}${f}`;
  }
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

function fieldOf(load: Load, family: Family, l3: string | undefined, l4: number | 'set' | undefined,
  bits?: Hex): Field | undefined {
  const f = namedFieldOf(load, family, l3, l4, bits);
  if (f || load.kind !== 'payload' || namedFieldOf(load, family, l3, l4)) return f;
  // What no header names is nft's raw payload expression, where no dependency could be implied:
  // a transport field of no known protocol, a network or link layer field in an ip or ip6 table
  // (not adjacent ether fields merged into one load).
  const raw = () => rawPayloadAt(load.base as 'll', load.offset, load.len, bits !== undefined ? hexToBig(bits) : undefined);
  if (load.base === 'transport') return raw();
  if (load.base === 'inner') return raw();
  // in inet a named network field has its nfproto dependency before it: with none, it is raw
  if (load.base === 'network') return family !== 'inet' || l3 === undefined ? raw() : undefined;
  if (load.base === 'll' && !([0, 6, 12].includes(load.offset) && [6, 12, 14].includes(load.offset + load.len))) return raw();
  return undefined;
}

function namedFieldOf(load: Load, family: Family, l3: string | undefined, l4: number | 'set' | undefined,
  bits?: Hex): Field | undefined {
  const mask = bits !== undefined ? hexToBig(bits) : undefined;
  switch (load.kind) {
    case 'payload': {
      if (load.base === 'transport' && load.len === 2 && (l4 === undefined || l4 === 'set') && (load.offset === 0 || load.offset === 2)) {
        // ports of whatever transport protocol follows: nft's `th` (with one protocol known, nft names
        // the field after that protocol's header)
        return load.offset === 0 ? F.thSport : F.thDport;
      }
      if (load.base === 'network') {
        const net = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : l3;
        if (net === 'ip' && mask === undefined) {
          if (load.offset === 12 && load.len <= 4) return F.ipSaddr;
          if (load.offset === 16 && load.len <= 4) return F.ipDaddr;
          if (load.offset === 9 && load.len === 1) return F.ipProtocol;
        } else if (net === 'ip6' && mask === undefined) {
          if (load.offset === 8 && load.len <= 16) return F.ip6Saddr;
          if (load.offset === 24 && load.len <= 16) return F.ip6Daddr;
          if (load.offset === 6 && load.len === 1) return F.ip6Nexthdr;
        }
        if (net === 'ip' || net === 'ip6') return headerFieldAt(net, load.offset, load.len, mask);
        return undefined;
      }
      if (load.base === 'll') {
        const v = Object.values(VLAN).find((f) => (f.load as { offset: number }).offset === load.offset && f.len === load.len
          && fieldMask(f) === mask);
        if (v) return v;
        if (mask !== undefined) return undefined;
        return Object.values(ETHER).find((f) => (f.load as { offset: number }).offset === load.offset && f.len === load.len);
      }
      if (load.base === 'transport' && (l4 === 6 || l4 === 17) && mask === undefined) {
        const tcp = l4 === 6;
        if (load.offset === 0 && load.len === 2) return tcp ? F.tcpSport : F.udpSport;
        if (load.offset === 2 && load.len === 2) return tcp ? F.tcpDport : F.udpDport;
        if (load.offset === 0 && load.len === 4) return { ...(tcp ? F.tcpSport : F.udpSport), type: 'ports', len: 4 };
      }
      if (load.base === 'transport' && typeof l4 === 'number') {
        const proto = L4_BY_NUM.get(l4);
        if (!proto) return undefined;
        if ((proto === 'udplite' || proto === 'sctp' || proto === 'dccp') && mask === undefined && load.len === 2
          && (load.offset === 0 || load.offset === 2)) {
          return portField(proto, load.offset === 0 ? 'sport' : 'dport');
        }
        return headerFieldAt(proto, load.offset, load.len, mask, true);
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
        default: return typeof load.key === 'string' ? metaField(load.key) : undefined;
      }
    case 'ct': {
      if (typeof load.key !== 'string') return undefined;
      const dir = load.dir;
      if (dir !== undefined && dir !== 0 && dir !== 1) return undefined;
      if (load.key === 'saddr' || load.key === 'daddr') {
        const net = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : l3;
        if (dir === undefined || (net !== 'ip' && net !== 'ip6')) return undefined;
        return ctAddrField(load.key, dir, net === 'ip6');
      }
      if (dir === undefined && (load.key === 'state' || load.key === 'status' || load.key === 'mark')) {
        return load.key === 'state' ? F.ctState : load.key === 'status' ? F.ctStatus : F.ctMark;
      }
      const how = ctDirection(load.key);
      if (how === undefined || (how === 'none' && dir !== undefined) || (how === 'required' && dir === undefined)) return undefined;
      return ctField(load.key, dir);
    }
    case 'socket':
      if (mask !== undefined || load.level !== undefined) return undefined;
      return load.key === 0 ? socketField('transparent') : load.key === 1 ? socketField('mark') : load.key === 2 ? socketField('wildcard') : undefined;
    case 'osf':
      if (mask !== undefined || ![0, 1, 2].includes(load.ttl ?? 0) || ![0, 1].includes(load.flags ?? 0)) return undefined;
      return osfField(load.ttl ?? 0, (load.flags ?? 0) === 1);
    case 'rt': {
      if (mask !== undefined) return undefined;
      const k = load.key as 'classid' | 'nexthop4' | 'nexthop6' | 'mtu' | 'ipsec';
      return rtField(k, k === 'classid' ? REALMS : k === 'ipsec' ? BOOLEAN_SYMS : undefined);
    }
    case 'xfrm': {
      const what = (['ip daddr', 'ip6 daddr', 'ip saddr', 'ip6 saddr', 'reqid', 'spi'] as const)[load.key - 1];
      if (mask !== undefined || !what || (load.dir !== 0 && load.dir !== 1)) return undefined;
      return xfrmField(load.dir, load.spnum, what);
    }
    case 'exthdr': {
      const f = exthdrFieldAt({ ...load, offset: load.offset ?? 0, len: load.len ?? 0 }, mask, fieldMask);
      return f && f.l3 === 'ip6' && family !== 'ip6' && family !== 'inet' ? undefined : f;
    }
    case 'fib':
      if (load.result === 'type' && load.flags === FIB_F.DADDR) return F.fibDaddrType;
      return load.result === 'oif' || load.result === 'oifname' || load.result === 'type' ? fibField(load.flags, load.result) : undefined;
  }
}

/** The network protocol an ether type (register bytes) names. */
const ETH_L3: Record<string, 'ip' | 'ip6'> = { '0800': 'ip', '86dd': 'ip6' };

/** The bit mask a form applies between load and comparison, for telling bit fields apart. */
function bitsOf(form: Form): Hex | undefined {
  return form.f === 'mask' ? form.mask : form.f === 'lookup' || form.f === 'cmp' || form.f === 'range' || form.f === 'ord'
    ? form.pre?.bits : undefined;
}

function psetProto(store: { base: string }, family: Family, l3: string | undefined, l4: number | 'set' | undefined): Proto | undefined {
  if (store.base === 'network') {
    const net = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : l3;
    return net === 'ip' || net === 'ip6' ? net : undefined;
  }
  if (store.base === 'transport' && typeof l4 === 'number') return L4_BY_NUM.get(l4);
  return undefined;
}

function psetText(it: Extract<Item, { k: 'pset' }>, family: Family, l3: string | undefined, l4: number | 'set' | undefined,
  opts: RenderOptions): string | undefined {
  const proto = psetProto(it.store, family, l3, l4);
  if (!proto) return undefined;
  const m = matchPayloadSet(proto, it.store, it.value, it.keep !== undefined ? { keep: it.keep } : undefined);
  if (!m) return undefined;
  const v = valueText(m.field, m.value, opts);
  return v === undefined ? undefined : `${m.field.name} set ${v}`;
}

function isTransportFor(it: Item | undefined, proto: number, family: Family): boolean {
  if (it?.k === 'pset') return it.store.base === 'transport' && psetText(it, family, undefined, proto, {}) !== undefined;
  if (!it || it.k !== 'rel' || it.load.kind !== 'payload' || it.load.base !== 'transport') return false;
  const bits = bitsOf(it.form);
  // (a raw payload has no dependency: the l4proto match before it is the rule's own)
  const named = (f: Field | undefined) => f !== undefined && !f.name.startsWith('@');
  return named(fieldOf(it.load, family, undefined, proto, bits))
    || (bits !== undefined && (it.form.f === 'mask' || it.form.f === 'lookup') && named(fieldOf(it.load, family, undefined, proto)))
    || splitFields(it.load, proto) !== undefined;
}

/**
 * A port looked up in a set nft describes as keyed by `th sport|dport` (`@th,16,16 { … }` after
 * `meta l4proto tcp`): the th field, which reads back to that set and adds no dependency.
 */
function thLookupField(it: Item | undefined, sets: SetResolver | undefined): Field | undefined {
  if (it?.k !== 'rel' || it.form.f !== 'lookup' || it.form.pre || it.load.kind !== 'payload' || it.load.base !== 'transport'
    || it.load.len !== 2 || (it.load.offset !== 0 && it.load.offset !== 2)) return undefined;
  const f = it.load.offset === 0 ? F.thSport : F.thDport;
  const found = sets?.(it.form.e.set, it.form.e.setId);
  if (!found || !(found.set.flags & SET_F.ANONYMOUS) || found.set.userdata === undefined) return undefined;
  return found.set.userdata === setUserdata(BYTEORDER_BIG, (found.set.flags & SET_F.INTERVAL) !== 0, f.set!.key) ? f : undefined;
}

/** A field with an l3dep right after: `meta l4proto P` then the field (icmp in inet). */
function isL3DepFor(items: Item[], i: number, l3: 'ip' | 'ip6', family: Family): boolean {
  const a = items[i], b = items[i + 1];
  if (!a || a.k !== 'rel' || a.load.kind !== 'meta' || a.load.key !== 'l4proto' || a.form.f !== 'cmp'
    || a.form.op !== 'eq' || a.form.data.length !== 2) return false;
  const p = parseInt(a.form.data, 16);
  if (!b || b.k !== 'rel' || b.load.kind !== 'payload' || b.load.base !== 'transport') return false;
  const f = fieldOf(b.load, family, l3, p, bitsOf(b.form)) ?? fieldOf(b.load, family, l3, p);
  return f?.l3dep === l3;
}

/** Whole-byte fields of a transport header that tile a merged load exactly. */
function splitFields(load: Load, l4: number | 'set' | undefined, l3?: string, family?: Family): Field[] | undefined {
  if (load.kind !== 'payload') return undefined;
  let proto: Proto | undefined;
  if (load.base === 'll') {
    const out: Field[] = [];
    let off = load.offset;
    while (off < load.offset + load.len) {
      const f = Object.values(ETHER).find((x) => (x.load as { offset: number }).offset === off);
      if (!f || off + f.len > load.offset + load.len) return undefined;
      out.push(f);
      off += f.len;
    }
    return out.length >= 2 ? out : undefined;
  }
  if (load.base === 'transport') proto = typeof l4 === 'number' ? L4_BY_NUM.get(l4) : undefined;
  else if (load.base === 'network') {
    const net = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : l3;
    proto = net === 'ip' || net === 'ip6' ? net : undefined;
  }
  if (!proto) return undefined;
  const out: Field[] = [];
  let off = load.offset;
  const end = load.offset + load.len;
  while (off < end) {
    let f: Field | undefined;
    for (let len = 1; len <= end - off && !f; len++) {
      f = fieldOf({ ...load, offset: off, len }, family ?? 'inet', proto === 'ip' || proto === 'ip6' ? proto : l3,
        typeof l4 === 'number' ? l4 : undefined);
      if (f && (f.len !== len || fieldMask(f) !== undefined || f.type === 'ports' || f.name.startsWith('@'))) f = undefined;
    }
    if (!f) return undefined;
    out.push(f);
    off += f.len;
  }
  return out.length >= 2 ? out : undefined;
}

function isNetworkFor(it: Item | undefined, l3: 'ip' | 'ip6'): boolean {
  if (it?.k === 'pset') return it.store.base === 'network' && psetText(it, 'inet', l3, undefined, {}) !== undefined;
  if (!it || it.k !== 'rel' || it.load.kind !== 'payload' || it.load.base !== 'network') return false;
  return fieldOf(it.load, 'inet', l3, undefined) !== undefined;
}

/** A dependency the compiler inserts before a keyed lookup, as a token: `nf:N`, `l4:N`, `ll` (iiftype ether), `eth:N`. */
function depValue(it: Item | undefined, family: Family): string | undefined {
  if (!it || it.k !== 'rel' || it.form.f !== 'cmp' || it.form.op !== 'eq') return undefined;
  // `meta iiftype ether` before an ether key part; `ether type ip|ip6` after it in inet
  if (it.load.kind === 'meta' && it.load.key === 'iiftype' && it.form.data === encodeInt(metaField('iiftype')!, 1n)) return 'll';
  if (family === 'inet' && it.load.kind === 'payload' && it.load.base === 'll' && it.load.offset === 12 && it.load.len === 2
    && ETH_L3[it.form.data]) return `eth:${ETH_L3[it.form.data] === 'ip' ? NFPROTO_IPV4 : NFPROTO_IPV6}`;
  if (it.form.data.length !== 2 || it.load.kind !== 'meta') return undefined;
  const v = parseInt(it.form.data, 16);
  if (it.load.key === 'l4proto') return `l4:${v}`;
  if (it.load.key === 'nfproto' && family === 'inet') return `nf:${v}`;
  return undefined;
}

/**
 * When items[i…] are exactly the dependencies the compiler would insert for the keyed lookup
 * right after them (named in the context they establish), how many to leave out and the context.
 */
function keyedDeps(items: readonly Item[], i: number, family: Family, l3: 'ip' | 'ip6' | 'other' | undefined,
  l4: number | 'set' | undefined, ll: boolean, sets: SetResolver | undefined): { n: number; l3: typeof l3; l4: typeof l4; ll: boolean } | undefined {
  let k = i;
  let d = depValue(items[k], family);
  if (!d) return undefined;  // (most items: nothing to collect)
  const deps: string[] = [];
  for (; d; d = depValue(items[++k], family)) deps.push(d);
  const next = items[k];
  if (deps.length === 0 || (next?.k !== 'keyed' && next?.k !== 'natsplit')) return undefined;
  // the context the dependencies establish
  let c3 = l3, c4 = l4;
  for (const d of deps) {
    const [w, v] = d.split(':');
    if (w === 'nf' || w === 'eth') c3 = Number(v) === NFPROTO_IPV4 ? 'ip' : Number(v) === NFPROTO_IPV6 ? 'ip6' : 'other';
    if (w === 'l4') c4 = Number(v);
  }
  // the key's fields as they will print, named in that context
  const named = (load: Load) => fieldOf(load, family, c3, c4);
  const of = (g: KeyedGroup | undefined) => (g ? groupFields(g, sets, named) : []);
  const keyFields = next.k === 'keyed' ? of(next.g) : [...of(next.g.addr), ...of(next.g.port)];
  // a redirect map, and a port map after a NAT address, need the protocol matched before them
  const noL4 = new Set<Load>((next.k === 'keyed' ? (next.g.redir !== undefined ? keyFields : []) : of(next.g.port)).map((x) => x.load));
  // (and the field a map's result is stored into: `tcp dport set … map`)
  const fields: { load?: Load; field: Field | undefined }[] = [...keyFields];
  if (next.k === 'keyed' && next.g.store) fields.push({ field: next.g.store });
  // what the compiler inserts for those, from the current context
  let s3 = l3, s4 = l4, sll = ll;
  const want: string[] = [];
  for (const { field: f, load } of fields) {
    if (!f) return undefined;
    if (f.ll && !sll) {
      want.push('ll');
      sll = true;
    }
    if (f.l3 && !f.l3NoDep && family === 'inet' && s3 === undefined) {
      want.push(`${sll ? 'eth' : 'nf'}:${f.l3 === 'ip' ? NFPROTO_IPV4 : NFPROTO_IPV6}`);
      s3 = f.l3;
    }
    // (never a dependency the compiler adds for those)
    if (f.l4 !== undefined && s4 === undefined && !(load && noL4.has(load))) {
      want.push(`l4:${f.l4}`);
      s4 = f.l4;
    }
  }
  if (want.join() !== deps.join()) return undefined;
  return { n: deps.length, l3: c3, l4: c4, ll: sll };
}

/** A rule as rendered: its expressions, comment, and the chains its jumps are bound to. */
export interface RenderableRule {
  exprs: readonly Expr[];
  userdata?: Hex;
  bound?: readonly BoundChain<RenderableRule>[];
}

/** The chain a jump is bound to (`jump { … }`): by the batch id a compiled rule's jump names, else by the kernel's name. */
export function boundChainOf<R>(bound: readonly BoundChain<R>[] | undefined, e: ImmediateExpr): BoundChain<R> | undefined {
  if (!bound) return undefined;
  if (e.chainId !== undefined) return bound.find((b) => b.id === e.chainId);
  return e.chain !== undefined ? bound.find((b) => b.name === e.chain) : undefined;
}

export function renderRule(rule: RenderableRule, family: Family, sets?: SetResolver,
  options: RenderOptions = {}): string {
  // a chain binding prints inline, its rules each ended by ';' (nft's grammar wants the last one too)
  const binding = rule.bound && rule.bound.length > 0 ? (e: ImmediateExpr) => {
    const b = boundChainOf(rule.bound, e);
    if (!b) return undefined;
    const ind = options.bindingIndent;
    if (ind === undefined) return `${String(e.verdict)} {${b.rules.map((r) => ' ' + renderRule(r, family, sets, options) + ';').join('')} }`;
    const inner = { ...options, bindingIndent: undefined };
    return `${String(e.verdict)} {\n${b.rules.map((r) => `${ind}\t${renderRule(r, family, sets, inner)}\n`).join('')}${ind}}`;
  } : undefined;
  const items = group(rule.exprs, options, family, binding);
  const parts: string[] = [];
  let l3: 'ip' | 'ip6' | 'other' | undefined = family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : undefined;
  let l4: number | 'set' | undefined;
  let llKnown = false;
  /** A link layer field is in the text (it makes the compiler add `meta iiftype ether` again). */
  let llText = false;
  /** The ether type matched, as register bytes. */
  let ethTypeR: Hex | undefined;
  let icmpTypes: number[] | undefined;
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    // sets and maps (src/rules/keyed.ts)
    const keyedEnv = (): KeyedRenderEnv => ({
      family, sets, verdictText,
      // only keys the compiler takes back (compile.ts refuses these as keys)
      fieldOf: (load, bits) => {
        const f = fieldOf(load, family, l3, l4, bits);
        // a bit field only alone, with its own mask (bits)
        const m = f ? fieldMask(f) : undefined;
        if (!f || f.llType !== undefined || f.l3dep || f.icmpDep) return undefined;
        return (m === undefined && bits === undefined) || (bits !== undefined && m === hexToBig(bits)) ? f : undefined;
      },
      valueText: (f, h) => valueText(f, h, options),
      statementsText: (x) => renderStatements(x, family),
      ...(options.interfaces ? { ifname: (n: number) => options.interfaces!.nameOf(n) } : {}),
    });
    if (it.k === 'keyed') {
      const text = renderKeyed(it.g, keyedEnv());
      parts.push(text ?? unsupported('set lookup'));
      continue;
    }
    if (it.k === 'natsplit') {
      parts.push(natSplitText(it.g, it.regs, family, keyedEnv()) ?? unsupported('nat with a map'));
      continue;
    }
    // the dependencies the compiler inserts before a keyed lookup (ip daddr . tcp dport …)
    const elided = keyedDeps(items, i, family, l3, l4, llKnown, sets);
    if (elided) {
      i += elided.n - 1;
      l3 = elided.l3;
      l4 = elided.l4;
      llKnown = elided.ll;
      continue;
    }
    if (it.k === 'text') {
      parts.push(it.text);
      continue;
    }
    if (it.k === 'stmt') {
      parts.push(renderExprStatement(it.e, family, l3) ?? unsupported(describe(it.e)));
      continue;
    }
    if (it.k === 'pset') {
      parts.push(psetText(it, family, l3, l4, options) ?? unsupported(describe(it.store)));
      continue;
    }
    let form = it.form;
    const bits = bitsOf(form);
    let field = thLookupField(it, sets) ?? fieldOf(it.load, family, l3, l4, bits);
    if (field && form.f === 'mask' && bits !== undefined && fieldMask(field) === hexToBig(bits)) {
      // a bit field's own mask: a plain comparison of the field
      form = { f: 'cmp', op: form.op, data: form.data };
    } else if (!field && form.f === 'mask') {
      field = fieldOf(it.load, family, l3, l4);
      if (field && fieldMask(field) !== undefined) field = undefined;
    }
    field = rawLookupField(it, field, sets) ?? field;
    // a masked key looked up in a set: `tcp flags & (syn | ack) == { … }`, `meta mark & 0xff00 == { … }`
    if (form.f === 'lookup' && form.pre?.bits !== undefined && !form.pre.hton && (!field || fieldMask(field) === undefined)) {
      const mf = fieldOf(it.load, family, l3, l4);
      const t = mf && fieldMask(mf) === undefined ? maskedLookupText(mf, form.pre.bits, form.e, sets, options) : undefined;
      if (t) {
        parts.push(t);
        continue;
      }
    }
    // an address under a mask compared by order: `ip saddr & 0.0.0.255 < 0.0.0.127`
    if (form.f === 'ord' && form.pre?.bits !== undefined && !form.pre.hton && !field) {
      const af = fieldOf(it.load, family, l3, l4);
      const m = af && (af.type === 'ipv4' || af.type === 'ipv6') && it.load.kind === 'payload' && it.load.len === af.len
        ? valueText(af, form.pre.bits, options) : undefined;
      const v = m !== undefined ? valueText(af!, form.data, options) : undefined;
      if (v !== undefined) {
        parts.push(`${af!.name} & ${m} ${ORD[form.op]} ${v}`);
        continue;
      }
    }
    // named fields merged into one load (icmp type . code) before a raw payload of the same bytes
    if (field?.name.startsWith('@') && form.f === 'cmp' && form.pre === undefined && splitFields(it.load, l4, l3, family)) field = undefined;
    if (!field) {
      const split = form.f === 'cmp' && form.pre === undefined ? splitFields(it.load, l4, l3, family) : undefined;
      if (split && form.f === 'cmp') {
        let at = 0;
        const texts: string[] = [];
        for (const sf of split) {
          const data = form.data.slice(at, at + sf.len * 2);
          at += sf.len * 2;
          // `ether type ip` merged with another ether field before a network field in inet: the
          // dependency the compiler adds there again (the other field keeps the link layer known)
          const fam = sf === ETHER.type && form.op === 'eq' && family === 'inet' && l3 === undefined ? ETH_L3[data] : undefined;
          if (fam) {
            l3 = fam;
            if (isNetworkFor(items[i + 1], fam)) continue;
          }
          texts.push(relText(sf, sf.load as Load, { f: 'cmp', op: form.op, data }, sets, options));
        }
        if (split[0]!.ll) llText = true;
        if (form.op === 'neq' || texts.some((t) => t.includes('<unsupported'))) parts.push(unsupported(`match on ${describe(it.load)}`));
        else parts.push(...texts);
        for (const sf of split) if (sf.protoKey && form.op === 'eq') l4 = parseInt(form.data.slice(0, 2), 16);
        continue;
      }
      parts.push(unsupported(`match on ${describe(it.load)}`));
      continue;
    }
    // ether type / vlan type naming the network protocol in inet (the compiler's dependency after an ether match)
    if ((field === ETHER.type || field === VLAN.type) && family === 'inet' && l3 === undefined && form.f === 'cmp' && form.op === 'eq') {
      const fam = ETH_L3[form.data];
      if (fam) {
        l3 = fam;
        const vlanDep = field === VLAN.type && ethTypeR === '8100';
        if ((vlanDep || (field === ETHER.type && llText)) && isNetworkFor(items[i + 1], fam)) continue;
      }
    }
    if (field === ETHER.type && form.f === 'cmp' && form.op === 'eq') ethTypeR = form.data;
    if (field.ll) llText = true;
    const single = form.f === 'cmp' && form.op === 'eq' && form.data.length === 2;
    // dependencies the compiler would insert again right here
    if (field === F.l4proto && single && l4 === undefined) {
      const p = parseInt((form as { data: Hex }).data, 16);
      // in inet, icmp/icmpv6 written alone would get `meta nfproto` first: keep the l4proto match then
      const icmpNeedsL3 = family === 'inet' && l3 === undefined && (p === 1 || p === 2 || p === 58);
      if (L4_BY_NUM.has(p) && !icmpNeedsL3 && isTransportFor(items[i + 1], p, family) && !thLookupField(items[i + 1], sets)) {
        l4 = p;
        continue;
      }
    }
    if (it.load.kind === 'meta' && it.load.key === 'iiftype' && form.f === 'cmp' && form.op === 'eq' && !llKnown
      && form.data === encodeInt(field, 1n)) {
      const nx = items[i + 1];
      if (nx?.k === 'rel' && nx.load.kind === 'payload' && nx.load.base === 'll') { llKnown = true; continue; }
      llKnown = true;
      llText = true;
    }
    // (after an ether match the compiler's dependency is ether type, not meta nfproto: keep it then)
    if (field === F.nfproto && single && l3 === undefined && !llKnown) {
      const v = parseInt((form as { data: Hex }).data, 16);
      const fam = v === NFPROTO_IPV4 ? 'ip' : v === NFPROTO_IPV6 ? 'ip6' : undefined;
      const nx = items[i + 1];
      const raw = nx?.k === 'rel' && rawLookupField(nx, fieldOf(nx.load, family, fam, l4), sets) !== undefined;
      if (fam && ((isNetworkFor(nx, fam) && !raw) || isL3DepFor(items, i + 1, fam, family))) { l3 = fam; continue; }
    }
    // nft's icmp type dependency in front of an icmp field that needs it (compile.ts icmpDependencies)
    const isType = field.name === 'icmp type' || field.name === 'icmpv6 type';
    const typesOf = !isType ? undefined : (): number[] | undefined => (form.f === 'cmp' && form.op === 'eq' && form.data.length === 2
      ? [parseInt(form.data, 16)] : form.f === 'lookup' && !((form.e.flags ?? 0) & 1) ? anonValues(sets, form.e) : undefined);
    if (isType && icmpTypes === undefined) {
      const nx = items[i + 1];
      let nf = nx?.k === 'rel' ? fieldOf(nx.load, family, l3, l4, bitsOf(nx.form)) : undefined;
      const types = typesOf!();
      if (nf?.icmpDep && types && nx?.k === 'rel' && nx.load.kind === 'payload') {
        // the field of these types at that place (icmp mtu shares icmp sequence's bytes)
        const nb = bitsOf(nx.form);
        nf = headerFieldsAt(nf.name.split(' ')[0] as Proto, nx.load.offset, nf.len, nb !== undefined && nx.form.f !== 'mask' ? hexToBig(nb) : fieldMask(nf))
          .find((x) => x.icmpDep && x.icmpDep.types.length === types.length && types.every((t) => x.icmpDep!.types.includes(t))) ?? nf;
      }
      const d = nf?.icmpDep;
      if (d && nf!.name.split(' ')[0] === field.name.split(' ')[0] && types && types.length === d.types.length
        && types.every((t) => d.types.includes(t))) {
        icmpTypes = d.types;
        continue;
      }
    }
    if (field.icmpDep && icmpTypes && it.load.kind === 'payload') {
      // fields of other icmp types at the same place (icmp sequence, icmp mtu): the one the types allow
      const types = icmpTypes;
      const proto = field.name.split(' ')[0] as Proto;
      const alt = headerFieldsAt(proto, it.load.offset, field.len, bits !== undefined && form.f !== 'mask' ? hexToBig(bits) : fieldMask(field))
        .find((x) => x.icmpDep && types.every((t) => x.icmpDep!.types.includes(t)));
      if (alt) field = alt;
      // (icmp id . sequence merged into one load reads as icmp gateway: split it below instead)
      else if (!types.every((t) => field!.icmpDep!.types.includes(t)) && form.f === 'cmp' && form.pre === undefined
        && splitFields(it.load, l4, l3, family)) field = undefined;
    }
    if (!field) {
      const split = form.f === 'cmp' && form.pre === undefined ? splitFields(it.load, l4, l3, family) : undefined;
      if (split && form.f === 'cmp') {
        parts.push(...split.map((sf, k) => relText(sf, sf.load as Load,
          { f: 'cmp', op: form.op, data: form.data.slice(split.slice(0, k).reduce((a, x) => a + x.len * 2, 0)).slice(0, sf.len * 2) }, sets, options)));
        continue;
      }
      parts.push(unsupported(`match on ${describe(it.load)}`));
      continue;
    }
    if (field.icmpDep) {
      const d = field.icmpDep;
      if (!icmpTypes || !icmpTypes.every((t) => d.types.includes(t))) {
        parts.push(unsupported(`${field.name} without nft's icmp type match`));
        continue;
      }
    }
    if (isType && form.f !== 'mask') {
      const types = typesOf!();
      if (types) icmpTypes = types;
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
    case 'int': case 'flags': case 'classid': case 'uid': case 'gid': case 'ms': case 'hour': case 'date': {
      const v = decodeInt(field, data);
      const t = v === undefined ? undefined : formatInt(field, v, flagSep);
      return t?.startsWith('<') ? undefined : t;
    }
    case 'ipv4': return data.length === 8 ? formatIPv4(data) : undefined;
    case 'ipv6': return data.length === 32 ? formatIPv6(data) : undefined;
    case 'lladdr': return data.length === 12 ? data.match(/../g)!.join(':') : undefined;
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
  if (isIntLike(field)) return intRelText(field, form, sets, opts);
  if (field.type === 'mark' && (form.f === 'range' || form.f === 'lookup') && form.pre?.hton) {
    // mark ranges and interval sets: nft converts the host-order mark to network order first
    return intRelText({ ...field, type: 'int', host: true, syms: { fmt: { base: 'hex', digits: 8 }, table: [] } }, form, sets, opts);
  }
  if ((form.f === 'cmp' || form.f === 'range' || form.f === 'lookup' || form.f === 'ord') && form.pre) return bad();
  switch (form.f) {
    case 'ord': {
      if (!['port', 'proto', 'ipv4', 'ipv6'].includes(field.type) || form.data.length !== field.len * 2) return bad();
      const v = valueText(field, form.data, opts);
      return v === undefined ? bad() : `${name} ${ORD[form.op]} ${v}`;
    }
    case 'cmp': {
      if (field.type === 'ports') {
        if (form.data.length !== 8) return bad();
        const proto = field.name.split(' ')[0];
        const neq = form.op === 'neq' ? ' !=' : '';
        return `${proto} sport${neq} ${parseInt(form.data.slice(0, 4), 16)} ${proto} dport${neq} ${parseInt(form.data.slice(4), 16)}`;
      }
      // a byte-aligned prefix: a shorter payload load, or (ct, rt, ipsec addresses) a shorter comparison
      const cmpLen = load.kind === 'payload' ? loadLen : form.data.length / 2;
      if (isAddr && cmpLen < field.len && cmpLen >= 1) {
        if (form.data.length !== cmpLen * 2) return bad();
        const full = form.data + zeroHex(field.len - cmpLen);
        return `${name}${opText(form.op)} ${valueText(field, full, opts)}/${cmpLen * 8}`;
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
      if (field.type === 'mark' && form.xor !== zeroHex(field.len)) {
        // `mark | C == V`: nft's bitwise (mark & ~C) ^ C
        const m = readU32Host(form.mask), x = readU32Host(form.xor);
        if (m === undefined || x === undefined || form.data.length !== 8 || m !== (~x >>> 0)) return bad();
        return `${name} | ${valueText(field, form.xor, opts)} ${form.op === 'eq' ? '==' : '!='} ${valueText(field, form.data, opts)}`;
      }
      if (form.xor !== zeroHex(field.len) || form.mask.length !== field.len * 2 || form.data.length !== field.len * 2) return bad();
      if (isAddr) {
        const plen = prefixLenOfMask(form.mask);
        if ((hexToBig(form.data) & ~hexToBig(form.mask)) !== 0n) return bad();
        // a byte-aligned prefix compiles to a shorter load; a mask written as such stays a mask
        if (plen === undefined || (plen > 0 && plen % 8 === 0) || load.kind !== 'payload') {
          if (load.kind !== 'payload') return bad();
          return `${name} & ${valueText(field, form.mask, opts)} ${form.op === 'eq' ? '==' : '!='} ${valueText(field, form.data, opts)}`;
        }
        return `${name}${opText(form.op)} ${valueText(field, form.data, opts)}/${plen}`;
      }
      if (isFlags) {
        if (form.op === 'neq' && hexToBig(form.data) === 0n) return `${name} ${valueText(field, form.mask, opts, ',')}`;
        if (form.op === 'eq' && hexToBig(form.data) === 0n && hexToBig(form.mask) !== 0n) return `${name} ! ${valueText(field, form.mask, opts, ',')}`;
        const table = field.type === 'ctstate' ? CT_STATE : CT_STATUS;
        const one = (h: Hex) => {
          const v = readU32Host(h)!;
          return symbolName(table, v) ?? '0x' + v.toString(16);
        };
        return `${name} & ${one(form.mask)} ${form.op === 'eq' ? '==' : '!='} ${one(form.data)}`;
      }
      if (field.type === 'mark') {
        // (a value outside the mask never matches, but nft takes it and so do we)
        return `${name} & ${valueText(field, form.mask, opts)} ${form.op === 'eq' ? '==' : '!='} ${valueText(field, form.data, opts)}`;
      }
      return bad();
    }
    case 'range': {
      if (field.type === 'proto' && form.lo.length === 2 && form.hi.length === 2) {
        // as numbers (protocol names may hold a '-')
        return `${name}${opText(form.op)} ${parseInt(form.lo, 16)}-${parseInt(form.hi, 16)}`;
      }
      if (!(isAddr || field.type === 'port') || form.lo.length !== field.len * 2 || form.hi.length !== field.len * 2) return bad();
      return `${name}${opText(form.op)} ${valueText(field, form.lo, opts)}-${valueText(field, form.hi, opts)}`;
    }
    case 'lookup': return lookupText(field, form.e, sets, opts);
  }
}

/** A masked key looked up in an anonymous set nft describes by byte order alone (no typeof). */
function maskedLookupText(field: Field, mask: Hex, e: LookupExpr, sets: SetResolver | undefined, opts: RenderOptions): string | undefined {
  if (!['flags', 'mark', 'ctstate', 'ctstatus'].includes(field.type) || !field.set || mask.length !== field.len * 2
    || ((e.flags ?? 0) & ~1) || e.dreg !== undefined) return undefined;
  const found = sets?.(e.set, e.setId);
  if (!found || !(found.set.flags & SET_F.ANONYMOUS) || (found.set.flags & SET_F.INTERVAL)
    || found.set.userdata !== setUserdata(field.set.byteorder, false, undefined)) return undefined;
  let m: string | undefined;
  if (field.type === 'flags') {
    const v = valueText(field, mask, opts, ' | ');
    m = v?.includes('|') ? `(${v})` : v;
  } else if (field.type === 'mark') {
    m = valueText(field, mask, opts);
  } else {
    // ct state/status: one flag by name, else a number (what the parser reads after '&')
    const table = field.type === 'ctstate' ? CT_STATE : CT_STATUS;
    const v = readU32Host(mask);
    if (v === undefined) return undefined;
    m = symbolName(table, v) ?? hex32(v);
    // (an element of several flags would not read back)
    if (found.elements.some((x) => x.key === undefined || symbolName(table, readU32Host(x.key) ?? -1) === undefined)) return undefined;
  }
  const body = m === undefined ? undefined : setBody(field, found.set, found.elements, opts);
  return body === undefined ? undefined : `${field.name} & ${m} ${(e.flags ?? 0) & 1 ? '!=' : '=='} { ${body} }`;
}

/** The single values of an anonymous hash set a lookup uses (1-byte keys), or undefined. */
function anonValues(sets: SetResolver | undefined, e: LookupExpr): number[] | undefined {
  const found = sets?.(e.set, e.setId);
  if (!found || !(found.set.flags & SET_F.ANONYMOUS) || (found.set.flags & SET_F.INTERVAL) || found.set.keyLen !== 1) return undefined;
  const vals = found.elements.map((x) => (x.key !== undefined && x.key.length === 2 ? parseInt(x.key, 16) : NaN));
  return vals.some((v) => Number.isNaN(v)) ? undefined : vals;
}

/**
 * A lookup of a header field's bytes in a set nft describes as keyed by the raw payload: the raw
 * field (`@nh,96,32 { … }`, which nft lists as `ip saddr { 0x1 }`, read back as addresses).
 */
function rawLookupField(it: Item, field: Field | undefined, sets: SetResolver | undefined): Field | undefined {
  if (it.k !== 'rel' || it.form.f !== 'lookup' || it.form.pre !== undefined || !field || field.name.startsWith('@') || it.load.kind !== 'payload') return undefined;
  const found = sets?.(it.form.e.set, it.form.e.setId);
  if (!found || !(found.set.flags & SET_F.ANONYMOUS) || setKeyedBy(field, found.set)) return undefined;
  const raw = rawPayloadAt(it.load.base, it.load.offset, it.load.len);
  return raw && setKeyedBy(raw, found.set) ? raw : undefined;
}

/** Whether an anonymous set's userdata describes its key as `field` (nft's typeof and byte order), or says nothing. */
function setKeyedBy(field: Field, set: NftSet): boolean {
  if (!field.set || set.userdata === undefined) return true;
  const ivl = (set.flags & SET_F.INTERVAL) !== 0;
  // nft says an interval set of a 1-byte host order key (meta l4proto) is in network byte order
  const order = ivl && field.set.byteorder === BYTEORDER_HOST && field.len === 1 ? BYTEORDER_BIG : field.set.byteorder;
  return set.userdata === setUserdata(order, ivl, field.set.key);
}

function lookupText(field: Field, e: LookupExpr, sets: SetResolver | undefined, opts: RenderOptions): string {
  const name = field.name;
  const form = { e };
  {
    {
      const neq = ((form.e.flags ?? 0) & 1) !== 0;
      const found = sets?.(form.e.set, form.e.setId);
      if (!found) {
        return form.e.set.startsWith('__set') ? unsupported(`${name} lookup in anonymous set ${form.e.set} (no set resolver)`)
          : `${name}${neq ? ' !=' : ''} @${form.e.set}`;
      }
      if (!(found.set.flags & SET_F.ANONYMOUS)) return `${name}${neq ? ' !=' : ''} @${found.set.name}`;
      // an anonymous set nft described as keyed by something else (raw payload, another field) reads back differently
      if (!setKeyedBy(field, found.set)) return unsupported(`${name} lookup in a set keyed by another expression`);
      const body = setBody(field, found.set, found.elements, opts);
      return body === undefined ? unsupported(`${name} lookup in set ${found.set.name}`) : `${name}${neq ? ' !=' : ''} { ${body} }`;
    }
  }
}

const ORD = { lt: '<', gt: '>', lte: '<=', gte: '>=' } as const;

function isIntLike(f: Field): boolean {
  return f.type === 'int' || f.type === 'flags' || f.type === 'classid' || f.type === 'uid' || f.type === 'gid' || f.type === 'ms'
    || f.type === 'hour' || f.type === 'date';
}

/** Big-endian register bytes (after nft's hton) back in the field's own order. */
function fromNet(f: Field, h: Hex): Hex {
  if (!f.host) return h;
  let r = '';
  for (let i = h.length - 2; i >= 0; i -= 2) r += h.substr(i, 2);
  return HOST_LE ? r : h;
}

/** Matches on headers.ts fields (integers, flags, bit fields, host-order keys). */
function intRelText(field: Field, form: Form, sets: SetResolver | undefined, opts: RenderOptions): string {
  const name = field.name;
  const bad = () => unsupported(`${name} ${form.f}`);
  const fm = fieldMask(field);
  const htonNeeded = field.host === true && field.len > 1;
  const pre = form.f === 'mask' ? undefined : form.pre;
  // the steps between load and comparison must be exactly what the compiler emits for this form
  const wantBits = fm === undefined ? undefined : fm;
  const gotBits = pre?.bits !== undefined ? hexToBig(pre.bits) : undefined;
  const val = (h: Hex) => valueText(field, h, opts);
  switch (form.f) {
    case 'cmp': {
      if (pre) return bad();
      const v = val(form.data);
      if (v === undefined) return bad();
      if (field.type === 'flags') return `${name} ${form.op === 'eq' ? '==' : '!='} ${v}`;
      return `${name}${opText(form.op)} ${v}`;
    }
    case 'ord': {
      if (gotBits !== wantBits || (pre?.hton ?? false) !== htonNeeded) return bad();
      const v = val(pre?.hton ? fromNet(field, form.data) : form.data);
      return v === undefined ? bad() : `${name} ${ORD[form.op]} ${v}`;
    }
    case 'range': {
      if (gotBits !== wantBits || (pre?.hton ?? false) !== htonNeeded) return bad();
      // ranges print as numbers (symbol names may hold a '-'; flags as 0x…)
      const plain = { ...field, syms: field.syms ? { table: [], fmt: field.syms.fmt } : undefined };
      const lo = valueText(plain, pre?.hton ? fromNet(field, form.lo) : form.lo, opts);
      const hi = valueText(plain, pre?.hton ? fromNet(field, form.hi) : form.hi, opts);
      if (lo === undefined || hi === undefined) return bad();
      return `${name}${opText(form.op)} ${lo}-${hi}`;
    }
    case 'mask': {
      const zeros = zeroHex(field.len);
      if (form.xor !== zeros || form.mask.length !== field.len * 2 || form.data.length !== field.len * 2) return bad();
      if (field.type === 'flags' && form.data === zeros && form.mask !== zeros) {
        const v = val(form.mask);
        return v === undefined ? bad() : form.op === 'neq' ? `${name} ${v}` : `${name} ! ${v}`;
      }
      const m = decodeInt(field, form.mask), d = decodeInt(field, form.data);
      if (m === undefined || d === undefined || fm !== undefined) return bad();
      if (field.type === 'flags') return `${name}${opText(form.op)} ${formatInt(field, d)} / ${formatInt(field, m)}`;
      if (field.host || field.syms) return bad();
      return `${name} & ${formatInt(field, m)} ${form.op === 'eq' ? '==' : '!='} ${formatInt(field, d)}`;
    }
    case 'lookup': {
      if (gotBits !== wantBits || (pre?.hton ?? false) !== false && !htonNeeded) return bad();
      if (pre?.hton) {
        // an interval set nft keeps in network byte order
        const found = sets?.(form.e.set, form.e.setId);
        if (!found || !(found.set.flags & SET_F.INTERVAL) || !field.set) return bad();
        return lookupText({ ...field, host: false }, form.e, sets, opts)
          .replace(/^[^{@<]*/, `${name}${(form.e.flags ?? 0) & 1 ? ' != ' : ' '}`);
      }
      if (field.host && field.len > 1) {
        const found = sets?.(form.e.set, form.e.setId);
        if (found && found.set.flags & SET_F.INTERVAL) return bad();
      }
      return lookupText(field, form.e, sets, opts);
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
      } else if (field.type === 'proto' && lo.length === 2) {
        out.push(`${parseInt(lo, 16)}-${parseInt(hi, 16)}`);
      } else if (field.type === 'port' || (isIntLike(field) && field.type !== 'flags')) {
        const a = valueText(field, lo, opts), b = valueText(field, hi, opts);
        if (a === undefined || b === undefined) return undefined;
        out.push(`${a}-${b}`);
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
    const v = valueText(field, k, opts, ' | ');
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

/** The statements as nft lists them on a set (`counter quota 100 mbytes`), their state left out. */
export function renderStatements(exprs: readonly StatefulExpr[], family: Family): string {
  return renderRule({ exprs: exprs.map(withoutState) }, family);
}
