/**
 * Recursive-descent parser for the supported subset of nft rule syntax. It
 * only checks form (and encodes values into kernel bytes); protocol context,
 * dependencies and family rules are the compiler's job.
 */
import { parseObjrefStatement } from './objref.js';
import { RuleSyntaxError } from '../base/errors.js';
import type {
  At, CounterStmt, Elem, KeyPart, MarkMapStmt, MarkSetStmt, MasqStmt, MatchOp, MatchStmt, NatAddr, NatStmt, PortRange,
  Rhs, RuleAst, Stmt, VerdictStmt,
} from './ast.js';
import { andHex, bigToHex, hexToBig, prefixMask, readU32Host, u16Be, u32Host, u8, zeroHex } from './bytes.js';
import { ETHER, F, VLAN, ctAddrField, fibField, osfField, portField, rawPayloadField, rtField, socketField, xfrmField, type Field } from './fields.js';
import { BOOLEAN_SYMS, REALMS, ctDirection, ctField, headerField, headerFieldNames, metaField, metaKeyOf, UNQUALIFIED_META, type Proto } from './headers.js';
import { encodeInt, parseIntValue, serviceport } from './intvalues.js';
import type { CtKey, StatefulExpr } from '../netlink/expr.js';
import { tokenize, type Token } from './lexer.js';
import { internWord } from './intern.js';
import {
  parseDupMap, parseDynset, parseLonePart, parseGenStatement, startsDupMap, parseKeyedMatch, parseMarkMap, parseNatMap, parsePortMap, startsMarkMap, startsNatMap,
} from './keyed.js';
import { NAT_RANGE } from '../netlink/expr.js';
import {
  CT_STATE, CT_STATUS, FIB_TYPES, IFNAMSIZ, NFPROTO, ifnameBytes, parseIPv4, parseIPv6, parseInteger,
  parseProtocol, symbolValue,
} from './values.js';
import { COMMENT_MAX } from './udata.js';
import { parseExprStatement } from './statements.js';
import type { ExprStmt } from './ast.js';
import { IPV6_EXTHDRS, SCTP_CHUNKS, TCP_OPTIONS, ipv6ExthdrField, sctpChunkField, srhSidField, tcpOptionField, tcpOptionRaw } from './exthdr.js';
import { payloadSetExprs } from './payloadset.js';
import { fieldMask as fieldMaskOf } from './headers.js';
import type { Expr } from '../netlink/expr.js';

export interface ParseOptions {
  /** The table's family (reject's defaults and protocols depend on it); default inet. */
  family?: import('../netlink/expr.js').Family;
  /** Interface name to index, for `iif`/`oif` by name. */
  ifindex?: (name: string) => number | undefined;
}

const STATEMENT_START = 'a match (ip, ip6, tcp, udp, udplite, sctp, dccp, ah, esp, comp, icmp, icmpv6, hbh, rt, frag, dst, mh, exthdr, meta, iifname, ' +
  'oifname, iif, oif, mark, ct, fib) or a statement (counter, accept, drop, return, jump, goto, masquerade, snat, dnat, ' +
  'redirect, reject, limit, log, quota, notrack, mark set, ct mark set)';
const NEXT_AFTER_STMT = `${STATEMENT_START}, comment "…" or the end of the rule`;
const CHAIN_NAME = /^[A-Za-z_.][A-Za-z0-9_./-]*$/;
const NAT_FLAGS: Record<string, number> = {
  random: NAT_RANGE.PROTO_RANDOM, 'fully-random': NAT_RANGE.PROTO_RANDOM_FULLY, persistent: NAT_RANGE.PERSISTENT,
};

/** The words after `ct` that start a ct match. */
const CT_MATCH_WORDS: ReadonlySet<string> = new Set(['original', 'reply', 'direction', 'expiration', 'l3proto', 'protocol', 'proto-src',
  'proto-dst', 'packets', 'bytes', 'avgpkt', 'zone', 'event', 'secmark', 'id', 'saddr', 'daddr', 'ip', 'ip6', 'helper', 'label']);

/** A comparison's operator, as written, to the match's op. */
const MATCH_OPS = new Map<string, MatchOp>([['==', 'eq'], ['!=', 'neq'], ['<', 'lt'], ['>', 'gt'], ['<=', 'lte'], ['>=', 'gte'],
  ['eq', 'eq'], ['ne', 'neq'], ['lt', 'lt'], ['gt', 'gt'], ['le', 'lte'], ['ge', 'gte']]);
/** Field types that take < > <= >= (without a mask). */
const ORDERED_TYPES: ReadonlySet<string> = new Set(['int', 'port', 'proto', 'ipv4', 'ipv6', 'ms', 'uid', 'gid', 'hour', 'date']);
/** Field types that take a mask (`&`, `and`). */
const MASKABLE_TYPES: ReadonlySet<string> = new Set(['mark', 'ctstate', 'ctstatus', 'int', 'flags', 'ipv4', 'ipv6']);

/** What parseMatch returns while parseKeyField asks for a field only. */
const FIELD_ONLY = Object.freeze({}) as MatchStmt;

/** First words of the statements that use a named object (src/rules/objref.ts). */
const OBJREF_WORDS: ReadonlySet<string> = new Set(['counter', 'quota', 'limit', 'synproxy', 'ct', 'meta']);

class Parser {
  private pos = 0;
  /** Set by parseKeyField: parseMatch records the field and returns FIELD_ONLY. */
  private fieldMode = false;
  private fieldOut: ({ field: Field } & At) | undefined;
  /** Inside a chain binding's braces (nft takes no binding inside one). */
  private inBinding = false;
  constructor(private readonly text: string, private readonly toks: Token[], private readonly opts: ParseOptions) {}

  /** Splits the current word after `n` characters into two words (`80:accept` in a map's elements). */
  splitWord(n: number): void {
    const t = this.toks[this.pos]!;
    if (t.kind !== 'word' || n <= 0 || n >= t.text.length) return;
    const a: Token = { kind: 'word', text: t.text.slice(0, n), col: t.col, raw: t.raw.slice(0, n) };
    const b: Token = { kind: 'word', text: t.text.slice(n), col: t.col + n, raw: t.raw.slice(n) };
    this.toks.splice(this.pos, 1, a, b);
  }

  /** A statement an element gets (`counter`, `limit rate 10/second`, `quota 10 mbytes`, `ct count 5`), or undefined where none starts. */
  parseStateful(): StatefulExpr[] | undefined {
    const t = this.peek();
    if (t.kind !== 'word') return undefined;
    const at: At = { col: t.col, raw: t.raw };
    if (t.text === 'counter') {
      const c = this.parseCounter(at);
      return [c.packets !== undefined ? { kind: 'counter', packets: c.packets, bytes: c.bytes! } : { kind: 'counter' }];
    }
    if (t.text === 'ct' && this.isWord(this.peek(1), 'count')) {
      this.next();
      return (this.parseCtCount(at) as ExprStmt).exprs as StatefulExpr[];
    }
    if (t.text !== 'limit' && t.text !== 'quota') return undefined;
    return parseExprStatement(this, t.text, at, this.opts.family ?? 'inet')!.exprs as StatefulExpr[];
  }

  /** One field of a key (`ip daddr`, `meta l4proto`, `th dport`), parsed by the statement grammar. */
  parseKeyField(expected: string): { field: Field } & At {
    const t = this.peek();
    this.fieldMode = true;
    this.fieldOut = undefined;
    let st: Stmt;
    try {
      st = this.parseStatement(expected);
    } finally {
      this.fieldMode = false;
    }
    if (st !== FIELD_ONLY || !this.fieldOut) this.fail(t, expected);
    return this.fieldOut!;
  }

  fail(at: { col: number; raw: string }, expected: string, reason?: string): never {
    throw new RuleSyntaxError(this.text, at.col, at.raw, expected, reason);
  }

  peek(k = 0): Token {
    return this.toks[Math.min(this.pos + k, this.toks.length - 1)]!;
  }

  next(): Token {
    const t = this.peek();
    if (this.pos < this.toks.length - 1) this.pos++;
    return t;
  }

  /**
   * A word, or (given words) one of them. Up to six words as parameters, not a rest list: the parser
   * asks this at nearly every token, and a rest parameter is an array per call.
   */
  isWord(t: Token, a?: string, b?: string, c?: string, d?: string, e?: string, f?: string): boolean {
    if (t.kind !== 'word') return false;
    if (a === undefined) return true;
    const w = t.text;
    return w === a || w === b || w === c || w === d || w === e || w === f;
  }

  /** isWord with one word (no list made: the parser asks this at nearly every token). */
  isWord1(t: Token, word: string): boolean {
    return t.kind === 'word' && t.text === word;
  }

  expectWord(expected: string, ...words: string[]): Token {
    const t = this.peek();
    if (t.kind !== 'word' || (words.length > 0 && !words.includes(t.text))) this.fail(t, expected);
    return this.next();
  }

  /**
   * One rule: the whole text, or (`bound`) one rule of a chain binding, which ends at a separator
   * (`;`, a newline) or the binding's `}`, left for parseBinding.
   */
  parseRule(bound = false): RuleAst {
    const stmts: Stmt[] = [];
    let comment: string | undefined;
    for (;;) {
      const t = this.peek();
      if (t.kind === 'end') {
        if (bound) this.fail(t, "a newline or ';' and the binding's '}'", "the chain binding's '{' is never closed");
        if (stmts.length === 0) this.fail(t, STATEMENT_START, 'empty rule');
        break;
      }
      if (t.kind === 'punct' && (t.text === ';' || (bound && t.text === '}'))) {
        if (!bound) this.fail(t, 'the rest of one rule (one rule per text)', 'a rule text holds exactly one rule');
        break;
      }
      if (this.isWord1(t, 'comment')) {
        if (stmts.length === 0) this.fail(t, STATEMENT_START, 'a rule needs a statement before its comment');
        this.next();
        const s = this.peek();
        if (s.kind !== 'string') this.fail(s, 'a double-quoted comment');
        this.next();
        if (Buffer.byteLength(s.text) > COMMENT_MAX) {
          this.fail(s, `a comment of at most ${COMMENT_MAX} bytes`, 'comment too long');
        }
        if (s.text.length === 0) this.fail(s, 'a non-empty comment');
        comment = s.text;
        const e = this.peek();
        if (e.kind !== 'end' && !(bound && e.kind === 'punct' && (e.text === ';' || e.text === '}'))) {
          this.fail(e, 'the end of the rule (the comment comes last)');
        }
        break;
      }
      stmts.push(this.parseStatement(stmts.length === 0 ? STATEMENT_START : NEXT_AFTER_STMT));
    }
    return comment === undefined ? { stmts } : { stmts, comment };
  }

  /**
   * A chain binding's `{ RULE; … }`, at its `{`: nft's grammar wants a separator after every rule,
   * the last one too, takes empty rules (`;;`) and an empty chain, and refuses a binding inside one.
   */
  private parseBinding(): RuleAst[] {
    const open = this.next();
    if (this.inBinding) this.fail(open, 'a chain name', 'too many levels of nesting (a chain binding inside a chain binding; nft refuses it too)');
    this.inBinding = true;
    const rules: RuleAst[] = [];
    try {
      for (;;) {
        const t = this.peek();
        if (t.kind === 'punct' && t.text === ';') { this.next(); continue; }
        if (t.kind === 'punct' && t.text === '}') { this.next(); return rules; }
        rules.push(this.parseRule(true));
        const sep = this.peek();
        if (!(sep.kind === 'punct' && sep.text === ';')) {
          this.fail(sep, "a newline or ';' after the rule", "nft wants a separator after a chain binding's last rule too");
        }
      }
    } finally {
      this.inBinding = false;
    }
  }

  parseStatement(expected: string): Stmt {
    const t = this.peek();
    if (t.kind !== 'word') this.fail(t, expected);
    const at: At = { col: t.col, raw: t.raw };
    const objref = OBJREF_WORDS.has(t.text) ? parseObjrefStatement(this, t.text, at) : undefined;
    if (objref) return objref;
    switch (t.text) {
      case 'ip': {
        this.next();
        const k = this.peek();
        if (this.isWord(k, 'saddr', 'daddr', 'protocol')) {
          this.next();
          return this.parseMatch(k.text === 'saddr' ? F.ipSaddr : k.text === 'daddr' ? F.ipDaddr : F.ipProtocol, at);
        }
        return this.parseHeaderMatch('ip', at, ['saddr', 'daddr', 'protocol']);
      }
      case 'ip6': {
        this.next();
        const k = this.peek();
        if (this.isWord(k, 'saddr', 'daddr', 'nexthdr')) {
          this.next();
          return this.parseMatch(k.text === 'saddr' ? F.ip6Saddr : k.text === 'daddr' ? F.ip6Daddr : F.ip6Nexthdr, at);
        }
        return this.parseHeaderMatch('ip6', at, ['saddr', 'daddr', 'nexthdr']);
      }
      case 'tcp': case 'udp': case 'udplite': case 'sctp': case 'dccp': {
        this.next();
        const k = this.peek();
        if (t.text === 'tcp' && this.isWord1(k, 'option')) return this.parseTcpOption(at);
        if (t.text === 'sctp' && this.isWord1(k, 'chunk')) return this.parseSctpChunk(at);
        if (this.isWord(k, 'sport', 'dport')) {
          this.next();
          return this.parseMatch(portField(t.text, k.text as 'sport' | 'dport'), at);
        }
        return this.parseHeaderMatch(t.text as Proto, at, ['sport', 'dport']);
      }
      case 'rt':
        if (this.isWord(this.peek(1), 'classid', 'nexthop', 'mtu', 'ipsec', 'ip', 'ip6')) return this.parseRt(at);
      // falls through: the IPv6 routing header
      case 'hbh': case 'frag': case 'dst': case 'mh': case 'srh': {
        this.next();
        const k = this.peek();
        if (t.text === 'srh' && this.isWord(k, 'sid')) return this.parseSrhSid(at);
        const f = k.kind === 'word' ? ipv6ExthdrField(t.text, k.text) : undefined;
        if (!f) this.fail(k, `a field of ${t.text}: ${Object.keys(IPV6_EXTHDRS[t.text]!.fields).join(', ')}`);
        this.next();
        return this.parseMatch(f, at);
      }
      case 'vlan': {
        this.next();
        const k = this.expectWord("'id', 'pcp', 'dei' or 'type' after 'vlan'", 'id', 'pcp', 'dei', 'cfi', 'type');
        return this.parseMatch(VLAN[k.text === 'cfi' ? 'dei' : k.text as 'id'], at);
      }
      case 'ether': {
        this.next();
        const k = this.expectWord("'saddr', 'daddr' or 'type' after 'ether'", 'saddr', 'daddr', 'type');
        return this.parseMatch(ETHER[k.text as 'saddr'], at);
      }
      case 'socket': {
        this.next();
        const k = this.expectWord("'transparent', 'mark' or 'wildcard' after 'socket'", 'transparent', 'mark', 'wildcard');
        return this.parseMatch(socketField(k.text as 'transparent'), at);
      }
      case 'osf': {
        this.next();
        let ttl = 0;
        if (this.isWord1(this.peek(), 'ttl')) {
          this.next();
          const m = this.expectWord("'loose' or 'skip' after 'ttl'", 'loose', 'skip');
          ttl = m.text === 'loose' ? 1 : 2;
        }
        const k = this.expectWord("'name' or 'version'", 'name', 'version');
        return this.parseMatch(osfField(ttl, k.text === 'version'), at);
      }
      case 'exthdr': {
        this.next();
        const k = this.peek();
        const f = k.kind === 'word' ? ipv6ExthdrField(k.text, undefined) : undefined;
        if (!f) this.fail(k, `an IPv6 extension header: ${Object.keys(IPV6_EXTHDRS).join(', ')}`);
        this.next();
        return this.parseMatch(f, at);
      }
      case 'ah': case 'esp': case 'comp': case 'icmp': case 'icmpv6': case 'igmp':
        this.next();
        return this.parseHeaderMatch(t.text as Proto, at, []);
      case 'meta': {
        this.next();
        const k = this.peek();
        const extra = k.kind === 'word' ? metaKeyOf(k.text) : undefined;
        if (extra !== undefined) {
          this.next();
          if (extra === 'secmark' && this.isWord1(this.peek(), 'set')) return this.parseSecmarkCopy('meta', at);
          if (this.isWord1(this.peek(), 'set')) return this.parseKeySet(metaField(extra)!, at);
          return this.parseMatch(metaField(extra)!, at);
        }
        this.expectWord("a meta key: 'iifname', 'oifname', 'iif', 'oif', 'l4proto', 'nfproto', 'mark', 'length', " +
          "'protocol', 'priority', 'iiftype', 'oiftype', 'skuid', 'skgid', 'nftrace', 'rtclassid', 'secmark', 'pkttype', " +
          "'cpu', 'iifgroup', 'oifgroup', 'cgroup', 'random', 'ipsec', 'iifkind', 'oifkind', 'sdif' or 'sdifname'",
          'iifname', 'oifname', 'iif', 'oif', 'l4proto', 'nfproto', 'mark');
        if (k.text === 'mark' && this.isWord1(this.peek(), 'set')) return this.parseMarkSet('meta', at);
        return this.parseMatch(metaFieldOf(k.text), at);
      }
      case 'ipsec':
        if (this.isWord(this.peek(1), 'in', 'out')) return this.parseXfrm(at);
      // falls through: unqualified meta ipsec
      case 'iiftype': case 'oiftype': case 'skuid': case 'skgid': case 'nftrace': case 'rtclassid': case 'pkttype':
      case 'cpu': case 'iifgroup': case 'oifgroup': case 'cgroup': case 'time':
        if (!UNQUALIFIED_META.has(t.text)) this.fail(t, expected);
        this.next();
        return this.parseMatch(metaField(metaKeyOf(t.text)!)!, at);
      case 'iifname': case 'oifname': case 'iif': case 'oif':
        this.next();
        return this.parseMatch(metaFieldOf(t.text), at);
      case 'mark':
        this.next();
        if (this.isWord1(this.peek(), 'set')) return this.parseMarkSet('meta', at);
        return this.parseMatch(F.mark, at);
      case 'ct': {
        this.next();
        const k0 = this.peek();
        if (this.isWord(k0, 'count')) return this.parseCtCount(at);
        if (k0.kind === 'word' && CT_MATCH_WORDS.has(k0.text)) {
          return this.parseCtMatch(at);
        }
        const k = this.expectWord("'state', 'status', 'mark', 'direction', 'expiration', 'l3proto', 'protocol', " +
          "'proto-src', 'proto-dst', 'packets', 'bytes', 'avgpkt', 'zone', 'id', or 'original'/'reply' and a key, after 'ct'",
          'state', 'status', 'mark');
        if (k.text === 'mark' && this.isWord1(this.peek(), 'set')) return this.parseMarkSet('ct', at);
        return this.parseMatch(k.text === 'state' ? F.ctState : k.text === 'status' ? F.ctStatus : F.ctMark, at);
      }
      case 'fib': {
        this.next();
        return this.parseFib(at);
      }
      case 'counter': return this.parseCounter(at);
      case 'accept': case 'drop': case 'return':
        this.next();
        return { t: 'verdict', verdict: internWord(t.text), col: at.col, raw: at.raw } as VerdictStmt;
      case 'jump': case 'goto': {
        this.next();
        const c = this.peek();
        if (c.kind === 'punct' && c.text === '{') {
          return { t: 'verdict', verdict: internWord(t.text as 'jump' | 'goto'), binding: this.parseBinding(), col: at.col, raw: at.raw };
        }
        if (c.kind !== 'word' || !CHAIN_NAME.test(c.text) || c.text.length > 255) {
          this.fail(c, 'a chain name (a letter, _ or . followed by letters, digits, / - _ .)');
        }
        this.next();
        return { t: 'verdict', verdict: internWord(t.text as 'jump' | 'goto'), chain: c.text, col: at.col, raw: at.raw };
      }
      // sets and maps (src/rules/keyed.ts)
      case 'th': {
        this.next();
        const k = this.expectWord("'sport' or 'dport' after 'th'", 'sport', 'dport');
        return this.parseMatch(k.text === 'sport' ? F.thSport : F.thDport, at);
      }
      case 'numgen': case 'jhash': case 'symhash':
        return parseGenStatement(this);
      case 'add': case 'update': case 'meter':
        return parseDynset(this);

      case 'reset': return this.parseReset(at);
      case 'masquerade': case 'redirect': return this.parseMasqRedir(t.text === 'masquerade' ? 'masq' : 'redir', at);
      case 'snat': case 'dnat': return this.parseNat(internWord(t.text), at);
      case 'dup': {
        const fam = this.opts.family ?? 'inet';
        if (fam !== 'inet' && this.isWord1(this.peek(1), 'to')) {
          const save = this.pos;
          this.next();
          this.next();
          if (startsDupMap(this)) return parseDupMap(this, at, fam as 'ip' | 'ip6', this.opts.ifindex);
          this.pos = save;
        }
      }
      // falls through: dup to ADDRESS (statements.ts)
      default: {
        const st = parseExprStatement(this, t.text, at, this.opts.family ?? 'inet', this.opts.ifindex);
        if (st) return st;
        if (/^@(?:ll|nh|th|ih)$/.test(t.text) && this.peek(1).kind === 'punct' && this.peek(1).text === ',') return this.parseRawPayload(at);
        if (t.text.startsWith('@')) this.fail(t, expected, 'named sets are not supported');
        return this.fail(t, expected, 'unknown or unsupported keyword');
      }
    }
  }

  /** `@ll|nh|th|ih,OFFSET,LENGTH VALUE`: a raw payload field (bits). */
  parseRawPayload(at: At): Stmt {
    const b = this.next();
    const nums: number[] = [];
    for (let i = 0; i < 2; i++) {
      this.next(); // ','
      const n = this.peek();
      const v = n.kind === 'word' ? parseInteger(n.text, 0xfffff, false) : undefined;
      if (v === undefined) this.fail(n, i === 0 ? 'an offset in bits' : 'a length in bits');
      this.next();
      nums.push(v!);
      if (i === 0 && !(this.peek().kind === 'punct' && this.peek().text === ',')) this.fail(this.peek(), "',' and the length in bits");
    }
    const f = rawPayloadField(b.text.slice(1) as 'll', nums[0]!, nums[1]!);
    if (!f) this.fail(b, 'a field of 1 to 128 bits', 'raw payload field out of range');
    if (this.isWord(this.peek(), 'set')) this.fail(this.peek(), 'a value to match', 'setting a raw payload field is not supported');
    return this.parseMatch(f, at);
  }

  /** `ct count [over] N`: nft's connlimit expression. */
  parseCtCount(at: At): Stmt {
    this.next(); // count
    let flags = 0;
    if (this.isWord(this.peek(), 'over')) { this.next(); flags = 1; }
    const n = this.peek();
    const v = n.kind === 'word' ? parseInteger(n.text, 0xffffffff, false) : undefined;
    if (v === undefined) this.fail(n, 'a connection count');
    this.next();
    return { t: 'expr', exprs: [flags ? { kind: 'connlimit', count: v!, flags } : { kind: 'connlimit', count: v! }], ...at };
  }

  /** `rt classid|mtu|ipsec|[ip|ip6] nexthop`: the route; `nexthop` takes its family from the table (not in inet). */
  parseRt(at: At): Stmt {
    this.next(); // rt
    const k = this.next();
    const fam = this.opts.family ?? 'inet';
    switch (k.text) {
      case 'classid': return this.parseMatch(rtField('classid', REALMS), at);
      case 'mtu': return this.parseMatch(rtField('mtu'), at);
      case 'ipsec': return this.parseMatch(rtField('ipsec', BOOLEAN_SYMS), at);
      default: {
        let v6: boolean;
        if (k.text === 'nexthop' && fam === 'inet') {
          // as nft: the family comes from what the rule matched before (the compiler checks it); the
          // address written says which one is meant
          const v = this.peek().kind === 'punct' && this.peek().text === '{' ? this.peek(1) : this.peek();
          v6 = v.kind === 'word' && v.text.includes(':');
          return this.parseMatch({ ...rtField(v6 ? 'nexthop6' : 'nexthop4'), l3: v6 ? 'ip6' : 'ip', l3NoDep: true }, at);
        } else if (k.text === 'nexthop') {
          v6 = fam === 'ip6';
        } else {
          v6 = k.text === 'ip6';
          this.expectWord(`'nexthop' after 'rt ${k.text}'`, 'nexthop');
          if (fam !== 'inet' && v6 !== (fam === 'ip6')) this.fail(k, `'rt nexthop' in an ${fam} table`, `${k.text} nexthop will not match`);
        }
        return this.parseMatch(rtField(v6 ? 'nexthop6' : 'nexthop4'), at);
      }
    }
  }

  /** `srh sid[N]`: the N-th segment of an IPv6 segment routing header. */
  parseSrhSid(at: At): Stmt {
    this.next(); // sid
    const o = this.next();
    const n = this.peek();
    const v = n.kind === 'word' ? parseInteger(n.text, 128, false) : undefined;
    if (!(o.kind === 'punct' && o.text === '[') || v === undefined || v < 1) this.fail(n, 'a segment index in brackets, e.g. sid[1]');
    this.next();
    const c = this.next();
    if (!(c.kind === 'punct' && c.text === ']')) this.fail(c, "']'");
    return this.parseMatch(srhSidField(v!), at);
  }

  /** `ipsec in|out [spnum N] reqid|spi|ip saddr|ip daddr|ip6 saddr|ip6 daddr` (xfrm). */
  parseXfrm(at: At): Stmt {
    this.next(); // ipsec
    const d = this.next(); // in|out
    let spnum = 0;
    if (this.isWord(this.peek(), 'spnum')) {
      this.next();
      const n = this.peek();
      const v = n.kind === 'word' ? parseInteger(n.text, 255, false) : undefined;
      if (v === undefined) this.fail(n, 'a secpath index 0-255');
      this.next();
      spnum = v!;
    }
    const k = this.expectWord("'reqid', 'spi', 'ip' or 'ip6' after 'ipsec in|out'", 'reqid', 'spi', 'ip', 'ip6');
    let what = k.text;
    if (k.text === 'ip' || k.text === 'ip6') {
      const a = this.expectWord(`'saddr' or 'daddr' after '${k.text}'`, 'saddr', 'daddr');
      what = `${k.text} ${a.text}`;
    }
    return this.parseMatch(xfrmField(d.text === 'in' ? 0 : 1, spnum, what as 'reqid'), at);
  }

  /** sctp chunk NAME FIELD … | sctp chunk NAME exists|missing. */
  parseSctpChunk(at: At): Stmt {
    this.next(); // chunk
    const c = this.peek();
    if (c.kind !== 'word' || !SCTP_CHUNKS[c.text]) this.fail(c, `an SCTP chunk: ${Object.keys(SCTP_CHUNKS).join(', ')}`);
    this.next();
    const k = this.peek();
    if (this.isWord(k, 'exists', 'missing')) return this.parseMatch(sctpChunkField(c.text, undefined)!, at);
    const f = k.kind === 'word' ? sctpChunkField(c.text, k.text) : undefined;
    if (!f) this.fail(k, `a field of sctp chunk ${c.text}: ${Object.keys(SCTP_CHUNKS[c.text]!.fields).join(', ')}, or exists/missing`);
    this.next();
    return this.parseMatch(f, at);
  }

  /** `reset tcp option NAME|KIND`: nft strips the option (exthdr with neither register). */
  parseReset(at: At): Stmt {
    this.next(); // reset
    this.expectWord("'tcp option' after 'reset'", 'tcp');
    this.expectWord("'option' after 'reset tcp'", 'option');
    const o = this.peek();
    const kind = o.kind === 'word' ? TCP_OPTIONS[o.text]?.kind ?? (/^(?:0|[1-9][0-9]{0,2})$/.test(o.text) && Number(o.text) <= 255 ? Number(o.text) : undefined) : undefined;
    if (kind === undefined) this.fail(o, `a TCP option: ${Object.keys(TCP_OPTIONS).join(', ')}, or a kind 0-255`);
    this.next();
    return { t: 'expr', exprs: [{ kind: 'exthdr', type: kind!, op: 1 }], ...at };
  }

  /** tcp option NAME FIELD … | tcp option NAME|KIND exists|missing | tcp option @KIND,OFF,LEN | tcp option maxseg size set N|rt mtu. */
  parseTcpOption(at: At): Stmt {
    this.next(); // option
    const o = this.peek();
    const raw = o.kind === 'word' ? /^@([0-9]{1,3})$/.exec(o.text) : null;
    if (raw) {
      // @KIND,OFFSET,LENGTH in bits (',' is its own token)
      this.next();
      const nums = [Number(raw[1])];
      for (let i = 0; i < 2; i++) {
        const c = this.peek();
        if (!(c.kind === 'punct' && c.text === ',')) this.fail(c, "',' and the offset and length in bits, e.g. @255,8,8");
        this.next();
        const n = this.peek();
        const v = n.kind === 'word' ? parseInteger(n.text, 0xffff, false) : undefined;
        if (v === undefined) this.fail(n, i === 0 ? 'an offset in bits' : 'a length in bits');
        this.next();
        nums.push(v!);
      }
      const f = tcpOptionRaw(nums[0]!, nums[1]!, nums[2]!);
      if (!f) this.fail(o, 'a kind 0-255, and an offset and length in whole bytes (multiples of 8 bits, at most 128)', 'unsupported raw tcp option field');
      return this.parseMatch(f, at);
    }
    if (o.kind === 'word' && !TCP_OPTIONS[o.text] && /^[0-9]+$/.test(o.text)) {
      const f = tcpOptionField(o.text, undefined);
      if (!f) this.fail(o, 'a TCP option kind 0-255');
      this.next();
      if (!this.isWord(this.peek(), 'exists', 'missing')) this.fail(this.peek(), "'exists' or 'missing' after a TCP option kind");
      return this.parseMatch(f, at);
    }
    if (o.kind !== 'word' || !TCP_OPTIONS[o.text]) this.fail(o, `a TCP option: ${Object.keys(TCP_OPTIONS).join(', ')}`);
    this.next();
    const k = this.peek();
    if (this.isWord(k, 'exists', 'missing')) return this.parseMatch(tcpOptionField(o.text, undefined)!, at);
    const f = k.kind === 'word' ? tcpOptionField(o.text, k.text) : undefined;
    if (!f) this.fail(k, `a field of tcp option ${o.text}: ${Object.keys(TCP_OPTIONS[o.text]!.fields).join(', ')}, or exists/missing`);
    this.next();
    if (this.isWord1(this.peek(), 'set')) {
      if (f.name !== 'tcp option maxseg size') this.fail(this.peek(), 'a value to match', `'${f.name} set' is not supported`);
      this.next();
      const l = f.load as { type: number; offset: number };
      const store: Expr = { kind: 'exthdr', type: l.type, offset: l.offset, len: f.len, op: 1, sreg: 1 };
      const v = this.peek();
      if (this.isWord1(v, 'rt')) {
        this.next();
        this.expectWord("'mtu' after 'rt'", 'mtu');
        return { t: 'expr', exprs: [{ kind: 'rt', key: 'mtu', dreg: 1 },
          { kind: 'byteorder', sreg: 1, dreg: 1, op: 'hton', len: 2, size: 2 }, store], ...at };
      }
      const e = this.parseElem(f, true, 'a segment size') as { hex: string };
      return { t: 'expr', exprs: [{ kind: 'immediate', dreg: 1, data: e.hex }, store], ...at };
    }
    return this.parseMatch(f, at);
  }

  /** fib saddr|daddr [. mark] [. iif|. oif] oif|oifname|type [exists|missing …]. */
  parseFib(at: At): Stmt {
    const bits: Record<string, number> = { saddr: 1, daddr: 2, mark: 4, iif: 8, oif: 16 };
    let flags = 0;
    const first = this.expectWord("'saddr' or 'daddr' after 'fib'", 'saddr', 'daddr');
    flags |= bits[first.text]!;
    while (this.isWord1(this.peek(), '.')) {
      this.next();
      const k = this.expectWord("'mark', 'iif' or 'oif' after '.'", 'mark', 'iif', 'oif');
      if (flags & bits[k.text]!) this.fail(k, 'each key once', `'${k.text}' given twice`);
      flags |= bits[k.text]!;
    }
    if ((flags & 8) && (flags & 16)) this.fail(at, "'iif' or 'oif', not both", 'fib takes one interface key');
    const r = this.expectWord("'oif', 'oifname' or 'type' (the fib result)", 'oif', 'oifname', 'type');
    const nx = this.peek();
    if (r.text !== 'type' && this.isWord(nx, 'exists', 'missing')) flags |= 32;
    const f = fibField(flags, r.text as 'oif' | 'oifname' | 'type');
    if (!f) this.fail(r, 'a fib lookup nft accepts');
    return this.parseMatch(f, at);
  }

  // ---- header fields, meta and ct keys beyond the basic ones (headers.ts) ----

  parseHeaderMatch(proto: Proto, at: At, before: string[]): Stmt {
    const k = this.peek();
    const names = [...before, ...headerFieldNames(proto)];
    const f = k.kind === 'word' ? headerField(proto, k.text) : undefined;
    if (!f) this.fail(k, `a field of ${proto}: ${names.join(', ')}`, k.kind === 'word' ? `unknown ${proto} field` : undefined);
    if (f.special && !f.icmpDep) {
      this.fail(k, `a field of ${proto} nfkeeper compiles: ${names.join(', ')}`, `${f.special} is not supported`);
    }
    this.next();
    return this.parseMatch(f, at);
  }

  parseCtMatch(at: At): Stmt {
    let dir: 0 | 1 | undefined;
    const d = this.peek();
    if (this.isWord(d, 'original', 'reply')) {
      dir = d.text === 'original' ? 0 : 1;
      this.next();
    }
    const k = this.peek();
    let key: string = k.text;
    if (this.isWord(k, 'ip', 'ip6')) {
      this.next();
      const a = this.expectWord(`'saddr' or 'daddr' after '${k.text}'`, 'saddr', 'daddr');
      key = `${k.text} ${a.text}`;
    } else if (this.isWord(k, 'saddr', 'daddr')) {
      this.next();
      if (dir === undefined) this.fail(k, `'original' or 'reply' before '${k.text}'`, 'a conntrack address needs a direction');
      const v = this.peek();
      const v6 = v.kind === 'word' && parseIPv4(v.text.split(/[/-]/)[0]!) === undefined && v.text.includes(':');
      return this.parseMatch(ctAddrField(k.text as 'saddr' | 'daddr', dir, v6), at);
    } else {
      if (k.kind !== 'word' || ctDirection(k.text as CtKey) === undefined) {
        this.fail(k, "a ct key: 'direction', 'expiration', 'l3proto', 'protocol', 'proto-src', 'proto-dst', 'packets', " +
          "'bytes', 'avgpkt', 'zone', 'event', 'secmark', 'id', 'saddr', 'daddr', 'ip saddr', 'ip daddr', 'ip6 saddr', 'ip6 daddr'",
          k.kind === 'word' ? 'unknown or unsupported ct key' : undefined);
      }
      this.next();
    }
    // nft drops the direction of ct l3proto and ct protocol (the same in both directions)
    if (key === 'l3proto' || key === 'protocol') dir = undefined;
    const how = ctDirection(key as CtKey)!;
    if (how === 'required' && dir === undefined) this.fail(k, `'original' or 'reply' before '${key}'`, 'a conntrack address needs a direction');
    if (how === 'none' && dir !== undefined) this.fail(d, `'ct ${key}' without a direction`, `ct ${key} has no direction`);
    if (this.isWord1(this.peek(), 'set')) {
      if (key === 'secmark' && dir === undefined) return this.parseSecmarkCopy('ct', at);
      if (key !== 'zone' && key !== 'event' && key !== 'label') this.fail(this.peek(), 'a value to match', `'ct ${key} set' is not supported`);
      return this.parseKeySet(ctField(key as CtKey, dir)!, at);
    }
    return this.parseMatch(ctField(key as CtKey, dir)!, at);
  }

  /** `FIELD set VALUE` on a packet header field (payloadset.ts). */
  parsePayloadSet(field: Field, at: At): ExprStmt {
    const s = this.next(); // set
    if ((field.type === 'ipv4' || field.type === 'ipv6' || field.type === 'port') && field.set && startsMarkMap(this)) {
      // the value from a map on any key (`ip daddr set iifname map { "eth0" : 10.0.0.1 }`)
      const st = parseMarkMap(this, 'meta', at, false, field);
      return st as never;
    }
    const v = this.parseElem(field, true, `a value for ${field.name}`) as { hex: string };
    const exprs = payloadSetExprs(field, v.hex);
    if (!exprs) this.fail(s, `a value to match`, `'${field.name} set' is not supported`);
    const st: ExprStmt = { t: 'expr', exprs, depHere: true, ...at };
    if (field.l3) st.l3 = field.l3;
    if (field.l4 !== undefined) st.l4 = field.l4;
    return st;
  }

  /**
   * `ct secmark set meta secmark` / `meta secmark set ct secmark`: a packet's security mark copied
   * to its connection and back (a name, `meta secmark set "x"`, is an object reference: objref.ts).
   */
  parseSecmarkCopy(target: 'meta' | 'ct', at: At): ExprStmt {
    this.next(); // set
    const source = target === 'ct' ? 'meta' : 'ct';
    this.expectWord(`'${source} secmark' (the mark copied from the ${source === 'meta' ? 'packet' : 'connection'})`, source);
    this.expectWord(`'secmark' after '${source}'`, 'secmark');
    return { t: 'expr', exprs: [{ kind: source, key: 'secmark', dreg: 1 }, { kind: target, key: 'secmark', sreg: 1 }], ...at };
  }

  /** `meta KEY set VALUE` / `ct [original|reply] KEY set VALUE` with a constant: immediate, then set. */
  parseKeySet(field: Field, at: At): ExprStmt {
    const settable = ['priority', 'nftrace', 'pkttype', 'zone', 'event', 'label'];
    const l = field.load;
    if ((l.kind !== 'meta' && l.kind !== 'ct') || !settable.includes(l.key as string)) {
      this.fail(this.peek(), 'a value to match', `'${field.name} set' is not supported`);
    }
    this.next(); // set
    if (l.kind === 'ct' && l.key === 'zone' && l.dir === undefined && startsMarkMap(this)) return parseMarkMap(this, 'ct', at, true) as never;
    const v = field.type === 'flags' ? this.parseFlagList(field, false) : this.parseElem(field, true, `a value for ${field.name}`);
    const data = (v as { hex: string }).hex;
    const set: Expr = l.kind === 'meta' ? { kind: 'meta', key: l.key, sreg: 1 }
      : l.dir !== undefined ? { kind: 'ct', key: l.key, sreg: 1, dir: l.dir } : { kind: 'ct', key: l.key, sreg: 1 };
    return { t: 'expr', exprs: [{ kind: 'immediate', dreg: 1, data }, set], ...at };
  }

  /** An int/flags/… value of a headers.ts field. */
  parseIntElem(field: Field, scalar: boolean, what?: string): Elem {
    const t = this.peek();
    const at: At = { col: t.col, raw: t.raw };
    const r = parseIntValue(field, t, scalar);
    if ('expected' in r) this.fail(t, what ? `${what}: ${r.expected}` : r.expected, r.error);
    this.next();
    if (r.hi !== undefined) return { k: 'range', lo: encodeInt(field, r.lo), hi: encodeInt(field, r.hi), ...at };
    return { k: 'value', hex: encodeInt(field, r.lo), ...at };
  }

  parseCounter(at: At): CounterStmt {
    this.next();
    // (col and raw written out, not spread: a spread is a property copy at run time per statement)
    const st: CounterStmt = { t: 'counter', col: at.col, raw: at.raw };
    // `packets N bytes M`, in either order (nft takes both)
    const first = this.peek();
    if (this.isWord(first, 'packets', 'bytes')) {
      const count = (what: string): number => {
        const p = this.peek();
        const v = p.kind === 'word' ? parseInteger(p.text, Number.MAX_SAFE_INTEGER, false) : undefined;
        if (v === undefined) this.fail(p, what);
        this.next();
        return v!;
      };
      this.next();
      const a = count(first.text === 'packets' ? 'a packet count' : 'a byte count');
      const other = first.text === 'packets' ? 'bytes' : 'packets';
      this.expectWord(`'${other}' after the ${first.text === 'packets' ? 'packet' : 'byte'} count`, other);
      const b = count(other === 'bytes' ? 'a byte count' : 'a packet count');
      st.packets = first.text === 'packets' ? a : b;
      st.bytes = first.text === 'packets' ? b : a;
    }
    return st;
  }

  parseMatch(field: Field, at: At): MatchStmt {
    let mask: string | undefined;
    let op: MatchOp = 'implicit';
    let opAt: At | undefined;
    // a field as a key part, or a key looked up in a set or map (src/rules/keyed.ts)
    if (this.fieldMode) {
      this.fieldOut = { field, ...at };
      return FIELD_ONLY;
    }
    if (this.isWord1(this.peek(), 'set') && field.load.kind === 'payload') return this.parsePayloadSet(field, at) as never;
    const keyed = parseKeyedMatch(this, field, at);
    if (keyed) return keyed as never;
    const t = this.peek();
    const intLike = field.type === 'int' || field.type === 'flags';
    if (field.type === 'mark' && ((t.kind === 'punct' && (t.text === '|' || t.text === '^')) || this.isWord(t, 'or', 'xor'))) {
      return this.parseMarkBinop(field, at);
    }
    if ((t.kind === 'punct' && t.text === '&') || (t.kind === 'word' && t.text === 'and')) {
      if (!MASKABLE_TYPES.has(field.type)) {
        this.fail(t, `a value after '${field.name}'`, `'&' masks only integers, flags, marks, ct state and ct status`);
      }
      this.next();
      const m = intLike ? this.parseFlagMask(field) : this.ipv4Int(field) ?? this.parseScalar(field, 'a mask');
      if (field.type === 'ipv4' || field.type === 'ipv6') {
        if (field.load.kind !== 'payload') this.fail(t, `a value after '${field.name}'`, `'&' does not apply to ${field.name}`);
      }
      mask = m.hex;
      const o = this.peek();
      // nft takes a flag value right after the mask as '=='
      const implicitOk = field.type === 'flags' && o.kind === 'word';
      // (an address under a mask may also be ordered, as nft compares it in network order)
      const orderedOk = (field.type === 'ipv4' || field.type === 'ipv6') && o.kind === 'punct' && ['<', '>', '<=', '>='].includes(o.text);
      if (!(o.kind === 'punct' && (o.text === '==' || o.text === '!=')) && !implicitOk && !orderedOk) this.fail(o, "'==' or '!=' after the mask");
    }
    const bang = this.peek();
    if (bang.kind === 'punct' && bang.text === '!' && mask === undefined
      && (field.type === 'flags' || field.type === 'ctstate' || field.type === 'ctstatus')) {
      // `ct status ! dnat`: none of the flags is set
      this.next();
      const v = this.parseFlagList(field, false) as Elem & { k: 'value' };
      const m: MatchStmt = { t: 'match', field, op: 'eq', rhs: { k: 'value', hex: zeroHex(field.len), col: v.col, raw: v.raw }, ...at };
      m.mask = v.hex;
      return m;
    }
    const o = this.peek();
    const ops = MATCH_OPS;
    if ((o.kind === 'punct' || (o.kind === 'word' && mask === undefined)) && ops.has(o.text)) {
      op = ops.get(o.text)!;
      opAt = { col: o.col, raw: o.raw };
      if (op !== 'eq' && op !== 'neq' && mask === undefined && !ORDERED_TYPES.has(field.type)) {
        this.fail(o, `'==' or '!=' for ${field.name}`, `'${o.text}' does not apply to ${field.name}`);
      }
      this.next();
    }
    const ordered = op !== 'implicit' && op !== 'eq' && op !== 'neq';
    let rhs = ordered ? this.parseScalar(field, 'a value') : (mask !== undefined ? this.ipv4Int(field) : undefined) ?? this.parseRhs(field, mask !== undefined);
    if (field.type === 'mark' && rhs.k === 'prefix') {
      // nft: the prefix's mask, then a comparison with its value
      if (mask !== undefined) this.fail(rhs, 'a mark', 'a prefix after a mask');
      mask = u32Host(rhs.plen === 0 ? 0 : (0xffffffff << (32 - rhs.plen)) >>> 0);
      rhs = { k: 'value', hex: rhs.hex, col: rhs.col, raw: rhs.raw };
    }
    if (field.type === 'mark' && rhs.k === 'set' && rhs.elems.some((e) => e.k === 'prefix')) {
      this.fail(rhs, 'marks and mark ranges in a set', 'mark prefixes in a set are not supported');
    }
    // (nft takes a mark outside the mask, which never matches)
    if (mask !== undefined && rhs.k === 'value' && andHex(rhs.hex, mask) !== rhs.hex && field.type !== 'mark') {
      this.fail(rhs, `a value inside the mask`, 'this masked comparison can never match');
    }
    const m: MatchStmt = { t: 'match', field, op, rhs, col: at.col, raw: at.raw };
    // `tcp flags syn / syn,ack`: the value under a mask
    const slash = this.peek();
    if (field.type === 'flags' && mask === undefined && rhs.k === 'value' && this.isWord1(slash, '/')) {
      this.next();
      const mk = this.parseFlagList(field, false);
      if (andHex((rhs as { hex: string }).hex, (mk as { hex: string }).hex) !== (rhs as { hex: string }).hex) {
        this.fail(mk, 'a mask that covers the value', 'this masked comparison can never match');
      }
      m.mask = (mk as { hex: string }).hex;
      if (op === 'implicit') m.op = 'eq';
    }
    if (opAt) m.opAt = opAt;
    if (mask !== undefined) m.mask = mask;
    return m;
  }

  /**
   * `mark or|xor C [==|!=] V`: as nft, `or` is a bitwise (mark & ~C) ^ C before the comparison,
   * and `xor` folds into the value(s) compared (V ^ C).
   */
  parseMarkBinop(field: Field, at: At): MatchStmt {
    const o = this.next();
    const isOr = o.text === '|' || o.text === 'or';
    const c = this.parseScalar(field, `a 32-bit value after '${o.text}'`);
    const x = this.peek();
    let op: MatchOp = 'implicit';
    let opAt: At | undefined;
    if (x.kind === 'punct' && (x.text === '==' || x.text === '!=')) {
      op = x.text === '==' ? 'eq' : 'neq';
      opAt = { col: x.col, raw: x.raw };
      this.next();
    }
    const xor = (h: string) => bigToHex(hexToBig(h) ^ hexToBig(c.hex), field.len);
    let rhs: Rhs;
    if (isOr) {
      rhs = this.parseScalar(field, 'a value');
    } else {
      // (nft describes a set keyed by `mark ^ C` differently; not supported here)
      const r = this.parseScalar(field, 'a value');
      rhs = { ...r, hex: xor(r.hex) };
    }
    const m: MatchStmt = { t: 'match', field, op, rhs, col: at.col, raw: at.raw };
    if (opAt) m.opAt = opAt;
    if (isOr) {
      m.mask = bigToHex(~hexToBig(c.hex) & ((1n << BigInt(field.len * 8)) - 1n), field.len);
      m.xor = c.hex;
      if (op === 'implicit') m.op = 'eq';
    }
    return m;
  }

  /**
   * An IPv4 address written as an integer (`ip saddr & 0xff == 1`), as nft takes one (inet_aton);
   * decimal and 0x hex only (inet_aton reads a leading 0 as octal). Undefined when it is not one.
   */
  ipv4Int(field: Field): (Elem & { k: 'value' }) | undefined {
    const t = this.peek();
    if (field.type !== 'ipv4' || t.kind !== 'word' || !/^(?:0|[1-9][0-9]*|0x[0-9a-fA-F]+)$/.test(t.text)) return undefined;
    const v = Number(t.text);
    if (!(v <= 0xffffffff)) return undefined;
    this.next();
    return { k: 'value', hex: v.toString(16).padStart(8, '0'), col: t.col, raw: t.raw };
  }

  /** A set element of a flags field: flags joined with '|'. */
  parseFlagElem(field: Field): Elem {
    const first = this.parseScalar(field, `a value of ${field.name}`);
    let acc = hexToBig(first.hex);
    while (this.peek().kind === 'punct' && this.peek().text === '|') {
      this.next();
      acc |= hexToBig(this.parseScalar(field, 'another flag').hex);
    }
    return { k: 'value', hex: bigToHex(acc, field.len), col: first.col, raw: first.raw };
  }

  /** A mask for an integer or flags field: a value, or `(a | b)`. */
  parseFlagMask(field: Field): Elem & { k: 'value' } {
    const t = this.peek();
    if (t.kind === 'punct' && t.text === '(') {
      this.next();
      const v = this.parseFlagList(field, false) as Elem & { k: 'value' };
      const c = this.peek();
      if (!(c.kind === 'punct' && c.text === ')')) this.fail(c, "')'");
      this.next();
      return v;
    }
    return this.parseFlagList(field, false) as Elem & { k: 'value' };
  }

  parseRhs(field: Field, masked: boolean): Rhs {
    const t = this.peek();
    if (t.kind === 'punct' && t.text === '{') {
      // `tcp flags & (syn | ack) == { syn, ack }`: the masked value looked up (flags and marks)
      const maskedSet = masked && field.set !== undefined && fieldMaskOf(field) === undefined
        && (field.type === 'flags' || field.type === 'mark' || field.type === 'ctstate' || field.type === 'ctstatus');
      if (!field.set || (masked && !maskedSet)) {
        this.fail(t, `a single value for ${field.name}`, `anonymous sets are not supported for ${masked ? 'masked ' : ''}${field.name}`);
      }
      this.next();
      const elems: Elem[] = [];
      let nested: Token | undefined;
      for (;;) {
        const inner = this.peek();
        if (inner.kind === 'punct' && inner.text === '{') {
          // a nested anonymous set: nft merges its elements into this one
          const r = this.parseRhs(field, false);
          // (nft 1.0.6 aborts on a nested set of one element)
          if (r.k !== 'set') this.fail(inner, 'the element without the inner braces', 'nft 1.0.6 cannot encode a nested set of one element');
          elems.push(...r.elems);
          nested = inner;
        } else elems.push(field.type === 'flags' ? this.parseFlagElem(field) : this.parseElem(field, masked));
        const s = this.peek();
        if (s.kind === 'punct' && s.text === ',') { this.next(); continue; }
        if (s.kind === 'punct' && s.text === '}') { this.next(); break; }
        this.fail(s, "',' or '}' in the set");
      }
      // nft treats a one-element set as the element itself (but aborts on one made of a nested set)
      if (elems.length === 1 && nested) this.fail(nested, 'the element without the inner braces', 'nft 1.0.6 cannot encode a set holding one nested element');
      if (elems.length === 1) return elems[0]!;
      return { k: 'set', elems, col: t.col, raw: t.raw };
    }
    if (field.type === 'flags' && t.kind === 'punct' && t.text === '(') return this.parseFlagMask(field);
    if (field.type === 'flags' && !masked && t.kind === 'word' && /^(?:0x[0-9a-fA-F]+|[0-9]+)-(?:0x[0-9a-fA-F]+|[0-9]+)$/.test(t.text)) {
      return this.parseIntElem(field, false);
    }
    if (field.type === 'ctstate' || field.type === 'ctstatus' || field.type === 'flags') return this.parseFlagList(field, masked);
    return this.parseElem(field, masked);
  }

  parseFlagList(field: Field, masked: boolean): Elem {
    const first = this.parseScalar(field, field.type === 'flags' || field.type === 'int' ? `a value of ${field.name}`
      : 'a ct ' + (field.type === 'ctstate' ? 'state' : 'status'));
    if (masked && field.type !== 'flags') return first;
    if (field.type === 'flags' || field.type === 'int') {
      let acc = hexToBig(first.hex);
      let sep0: string | undefined;
      for (;;) {
        const s = this.peek();
        if (s.kind === 'punct' && (s.text === '|' || (s.text === ',' && field.type === 'flags' && !masked)) && (sep0 === undefined || sep0 === s.text)) {
          sep0 = s.text;
          this.next();
          acc |= hexToBig(this.parseScalar(field, 'another flag').hex);
          continue;
        }
        break;
      }
      return { k: 'value', hex: bigToHex(acc, field.len), col: first.col, raw: first.raw };
    }
    let v = 0;
    const add = (e: Elem & { hex: string }) => { v = (v | hostU32(e.hex)) >>> 0; };
    add(first);
    let sep: string | undefined;
    for (;;) {
      const s = this.peek();
      if (s.kind === 'punct' && (s.text === ',' || s.text === '|') && (sep === undefined || sep === s.text)) {
        sep = s.text;
        this.next();
        add(this.parseScalar(field, 'another flag'));
        continue;
      }
      break;
    }
    return { k: 'value', hex: u32Host(v), col: first.col, raw: first.raw };
  }

  /** One value (no prefix/range) of the field's type. */
  parseScalar(field: Field, what: string): Elem & { k: 'value' } {
    const e = this.parseElem(field, true, what);
    return e as Elem & { k: 'value' };
  }

  /** Refuses token t, expecting `e` (after `what`, when the caller names what it reads). */
  expectIn(t: Token, what: string | undefined, e: string): never {
    return this.fail(t, what ? `${what}: ${e}` : e);
  }

  parseElem(field: Field, scalar: boolean, what?: string): Elem {
    const t = this.peek();
    const at: At = { col: t.col, raw: t.raw };
    switch (field.type) {
      case 'ipv4': case 'ipv6': {
        const v6 = field.type === 'ipv6';
        const kind = v6 ? 'an IPv6 address' : 'an IPv4 address';
        if (t.kind !== 'word') this.expectIn(t, what, `${kind}, prefix or range`);
        this.next();
        const parse = v6 ? parseIPv6 : parseIPv4;
        const bits = v6 ? 128 : 32;
        const slash = t.text.indexOf('/');
        const dash = t.text.indexOf('-');
        if (slash >= 0 && !scalar) {
          const a = parse(t.text.slice(0, slash));
          const ps = t.text.slice(slash + 1);
          const plen = /^(?:0|[1-9][0-9]{0,2})$/.test(ps) ? Number(ps) : NaN;
          if (a === undefined || !(plen >= 0 && plen <= bits)) this.expectIn(t, what, `${kind} prefix such as ${v6 ? 'fd00::/64' : '10.0.0.0/8'}`);
          const masked = andHex(a!, prefixMask(plen, bits / 8));
          if (plen === bits) return { k: 'value', hex: masked, full: true, col: at.col, raw: at.raw };
          return { k: 'prefix', hex: masked, plen, col: at.col, raw: at.raw };
        }
        if (dash >= 0 && !scalar) {
          const a = parse(t.text.slice(0, dash));
          const b = parse(t.text.slice(dash + 1));
          if (a === undefined || b === undefined) this.expectIn(t, what, `${kind} range such as ${v6 ? 'fd00::1-fd00::9' : '10.0.0.1-10.0.0.9'}`);
          if (a! > b!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          return { k: 'range', lo: a!, hi: b!, col: at.col, raw: at.raw };
        }
        const a = parse(t.text);
        if (a === undefined) {
          if (t.text.startsWith('@')) this.fail(t, `${kind}`, 'named sets are not supported');
          this.expectIn(t, what, scalar ? kind : `${kind}, prefix, range or { set }`);
        }
        return { k: 'value', hex: a!, col: at.col, raw: at.raw };
      }
      case 'port': {
        if (t.kind !== 'word') this.expectIn(t, what, 'a port number, a port range such as 1000-2000, or { set }');
        this.next();
        const dash = t.text.indexOf('-');
        if (dash > 0 && !scalar && serviceport(t.text) === undefined) {
          const a = parseInteger(t.text.slice(0, dash), 65535, false) ?? serviceport(t.text.slice(0, dash));
          const b = parseInteger(t.text.slice(dash + 1), 65535, false) ?? serviceport(t.text.slice(dash + 1));
          if (a === undefined || b === undefined) this.expectIn(t, what, 'a port range such as 1000-2000');
          if (a! > b!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          return { k: 'range', lo: u16Be(a!), hi: u16Be(b!), col: at.col, raw: at.raw };
        }
        const v = parseInteger(t.text, 65535, false) ?? serviceport(t.text);
        if (v === undefined) this.expectIn(t, what, 'a port number 0-65535 or a service name from /etc/services');
        return { k: 'value', hex: u16Be(v!), col: at.col, raw: at.raw };
      }
      case 'proto': {
        if (t.kind !== 'word') this.expectIn(t, what, 'a protocol name (tcp, udp, icmp, ...) or number 0-255');
        this.next();
        const pd = t.text.indexOf('-', 1);
        if (!scalar && pd > 0 && parseProtocol(t.text) === undefined) {
          const a = parseProtocol(t.text.slice(0, pd)), b = parseProtocol(t.text.slice(pd + 1));
          if (a === undefined || b === undefined) this.expectIn(t, what, 'a protocol range such as 33-45');
          if (a! > b!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          return { k: 'range', lo: u8(a!), hi: u8(b!), col: at.col, raw: at.raw };
        }
        const v = parseProtocol(t.text);
        if (v === undefined) this.expectIn(t, what, 'a protocol name (tcp, udp, icmp, ...) or number 0-255');
        return { k: 'value', hex: u8(v!), col: at.col, raw: at.raw };
      }
      case 'nfproto': {
        if (t.kind !== 'word') this.expectIn(t, what, "'ipv4' or 'ipv6'");
        this.next();
        const v = symbolValue(NFPROTO, t.text);
        if (v === undefined) this.expectIn(t, what, "'ipv4' or 'ipv6'");
        return { k: 'value', hex: u8(v!), col: at.col, raw: at.raw };
      }
      case 'ifname': {
        if (t.kind !== 'word' && t.kind !== 'string') this.expectIn(t, what, 'an interface name such as "eth0" or "veth*"');
        this.next();
        // As nft: a trailing '*' is a wildcard, a trailing '\*' a literal star; any other
        // '*' or '\' is just a character of the name.
        const escaped = t.text.endsWith('\\*');
        const name = escaped ? t.text.slice(0, -2) + '*' : t.text;
        const bytes = Buffer.from(name, 'utf8');
        if (name.length === 0 || bytes.includes(0) || /\s/.test(name)) this.expectIn(t, what, 'a non-empty interface name without spaces');
        if (!escaped && name.endsWith('*')) {
          if (name.length === 1) this.fail(t, 'a name prefix before the wildcard', "a bare '*' is not supported");
          if (bytes.length - 1 > IFNAMSIZ - 1) this.expectIn(t, what, `an interface name of at most ${IFNAMSIZ - 1} bytes`);
          return { k: 'wildcard', prefix: bytes.subarray(0, bytes.length - 1).toString('hex'), col: at.col, raw: at.raw };
        }
        if (bytes.length > IFNAMSIZ - 1) this.expectIn(t, what, `an interface name of at most ${IFNAMSIZ - 1} bytes`);
        return { k: 'value', hex: ifnameBytes(name), col: at.col, raw: at.raw };
      }
      case 'ifindex': {
        if (t.kind !== 'word' && t.kind !== 'string') this.expectIn(t, what, 'an interface index or name');
        this.next();
        let idx = t.kind === 'word' ? parseInteger(t.text, 0xffffffff, false) : undefined;
        if (idx === undefined) {
          if (t.kind === 'word' && !/^[A-Za-z0-9_.:-]+$/.test(t.text)) this.expectIn(t, what, 'an interface index or name');
          idx = this.opts.ifindex?.(t.text);
          if (idx === undefined) {
            this.fail(t, this.opts.ifindex
              ? 'an interface that exists in the target namespace (iif/oif match its index, fixed when the rule is ' +
                'loaded, as in nft; iifname/oifname match interfaces that come and go)'
              : "an interface index, or a name the CompileContext's interfaces resolver knows (or match by iifname/oifname)",
            this.opts.ifindex ? `interface '${t.text}' does not exist` : `interface '${t.text}' cannot be resolved to an index`);
          }
        }
        return { k: 'value', hex: u32Host(idx!), col: at.col, raw: at.raw };
      }
      case 'mark': {
        if (t.kind !== 'word') this.expectIn(t, what, 'a 32-bit mark such as 0x4000');
        this.next();
        const md = t.text.indexOf('-', 1);
        if (!scalar && md > 0) {
          // a range of marks (as a concatenation part; a plain one is refused by the compiler)
          const a = parseInteger(t.text.slice(0, md), 0xffffffff), b = parseInteger(t.text.slice(md + 1), 0xffffffff);
          if (a === undefined || b === undefined) this.expectIn(t, what, 'a mark range such as 0x10-0x20');
          if (a! > b!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          return { k: 'range', lo: u32Host(a!), hi: u32Host(b!), col: at.col, raw: at.raw };
        }
        const sl = t.text.indexOf('/');
        if (!scalar && sl > 0) {
          // `0xffffff00/24`: the mark's top bits (as a host-order integer); parseMatch makes it a mask
          const a = parseInteger(t.text.slice(0, sl), 0xffffffff), pl = parseInteger(t.text.slice(sl + 1), 32, false);
          if (a === undefined || pl === undefined) this.expectIn(t, what, 'a mark prefix such as 0xffff0000/16');
          const m = pl === 0 ? 0 : (0xffffffff << (32 - pl!)) >>> 0;
          return { k: 'prefix', hex: u32Host((a! & m) >>> 0), plen: pl!, col: at.col, raw: at.raw };
        }
        const v = parseInteger(t.text, 0xffffffff);
        if (v === undefined) this.expectIn(t, what, 'a 32-bit mark such as 0x4000');
        return { k: 'value', hex: u32Host(v!), col: at.col, raw: at.raw };
      }
      case 'ctstate': case 'ctstatus': {
        const table = field.type === 'ctstate' ? CT_STATE : CT_STATUS;
        const names = table.map(([n]) => n).join(', ');
        if (t.kind !== 'word') this.expectIn(t, what, `${names}, or a number`);
        this.next();
        const v = symbolValue(table, t.text) ?? parseInteger(t.text, 0xffffffff);
        if (v === undefined) this.expectIn(t, what, `${names}, or a number`);
        return { k: 'value', hex: u32Host(v!), col: at.col, raw: at.raw };
      }
      case 'fibtype': {
        const names = FIB_TYPES.map(([n]) => n).join(', ');
        if (t.kind !== 'word') this.expectIn(t, what, `an address type: ${names}`);
        this.next();
        const v = symbolValue(FIB_TYPES, t.text);
        if (v === undefined) this.expectIn(t, what, `an address type: ${names}`);
        return { k: 'value', hex: u32Host(v!), col: at.col, raw: at.raw };
      }
      case 'int': case 'flags': case 'classid': case 'uid': case 'gid': case 'ms': case 'hour': case 'date':
        return this.parseIntElem(field, scalar, what);
      case 'lladdr': {
        const m = t.kind === 'word' ? /^([0-9a-fA-F]{1,2})(?::([0-9a-fA-F]{1,2})){5}$/.exec(t.text) : null;
        if (!m) this.expectIn(t, what, 'an Ethernet address such as 00:0f:54:0c:11:04');
        this.next();
        return { k: 'value', hex: t.text.split(':').map((x) => x.toLowerCase().padStart(2, '0')).join(''), col: at.col, raw: at.raw };
      }
      case 'ports':
        return this.expectIn(t, what, 'unreachable');
    }
  }

  parseMarkSet(target: 'meta' | 'ct', at: At): MarkSetStmt | MarkMapStmt {
    this.next(); // 'set'
    if (startsMarkMap(this)) return parseMarkMap(this, target, at);
    const t = this.peek();
    const st: MarkSetStmt = { t: 'markset', target, ...at };
    const expected = "a 32-bit value, or 'mark', 'meta mark' or 'ct mark' optionally followed by and/or/xor (&, |, ^) and a value";
    if (t.kind !== 'word' && !(t.kind === 'punct' && t.text === '(')) this.fail(t, expected);
    const v = t.kind === 'word' ? parseInteger(t.text, 0xffffffff) : undefined;
    if (v !== undefined) {
      this.next();
      st.value = v;
      // nft folds constant operations: `mark set 0x12 or 0x11` sets 0x13
      const fold: Record<string, (a: number, b: number) => number> = {
        '&': (a, b) => a & b, and: (a, b) => a & b, '|': (a, b) => a | b, or: (a, b) => a | b,
        '^': (a, b) => a ^ b, xor: (a, b) => a ^ b,
      };
      for (;;) {
        const o = this.peek();
        // Own keys only: a word such as `constructor` is no operator.
        const fn = (o.kind === 'punct' || o.kind === 'word') && Object.hasOwn(fold, o.text) ? fold[o.text] : undefined;
        if (!fn) break;
        this.next();
        const n = this.peek();
        const nv = n.kind === 'word' ? parseInteger(n.text, 0xffffffff) : undefined;
        if (nv === undefined) this.fail(n, `a 32-bit value after '${o.text}'`);
        this.next();
        st.value = fn(st.value, nv!) >>> 0;
      }
      return st;
    }
    // `(src op VALUE) << N`: nft's parenthesised form before a shift
    const paren = t.kind === 'punct' && t.text === '(';
    if (paren) this.next();
    const s0 = this.peek();
    if (s0.text === 'mark') { this.next(); st.src = 'meta'; }
    else if (s0.text === 'meta' || s0.text === 'ct') {
      this.next();
      this.expectWord(`'mark' after '${s0.text}'`, 'mark');
      st.src = s0.text;
    } else this.fail(s0, expected);
    const o = this.peek();
    const ops: Record<string, 'and' | 'or' | 'xor'> = { '&': 'and', '|': 'or', '^': 'xor', and: 'and', or: 'or', xor: 'xor' };
    if ((o.kind === 'punct' || o.kind === 'word') && Object.hasOwn(ops, o.text)) {
      this.next();
      const n = this.peek();
      const nv = n.kind === 'word' ? parseInteger(n.text, 0xffffffff) : undefined;
      if (nv === undefined) this.fail(n, `a 32-bit value after '${o.text}'`);
      this.next();
      st.binop = ops[o.text];
      st.operand = nv;
    }
    if (paren) {
      const c = this.peek();
      if (!(c.kind === 'punct' && c.text === ')')) this.fail(c, "')'");
      this.next();
    }
    // `<< N` / `>> N` (the lexer gives '<' '<' and '>' '>')
    const a = this.peek(), b = this.peek(1);
    if (a.kind === 'punct' && b.kind === 'punct' && a.text === b.text && (a.text === '<' || a.text === '>') && b.col === a.col + 1) {
      this.next();
      this.next();
      const n = this.peek();
      const nv = n.kind === 'word' ? parseInteger(n.text, 31, false) : undefined;
      if (nv === undefined) this.fail(n, 'a shift of 0-31 bits');
      this.next();
      st.shift = { op: a.text === '<' ? 'lshift' : 'rshift', n: nv! };
    } else if (paren) {
      this.fail(a, "'<<' or '>>' after the parenthesised value");
    }
    return st;
  }

  parseNatFlags(): number {
    let flags = 0;
    const t = this.peek();
    if (!(t.kind === 'word' && Object.hasOwn(NAT_FLAGS, t.text))) return 0;
    for (;;) {
      const f = this.peek();
      if (!(f.kind === 'word' && Object.hasOwn(NAT_FLAGS, f.text))) this.fail(f, "'random', 'fully-random' or 'persistent'");
      if (flags & NAT_FLAGS[f.text]!) this.fail(f, 'each flag once', `'${f.text}' given twice`);
      flags |= NAT_FLAGS[f.text]!;
      this.next();
      const s = this.peek();
      if (s.kind === 'punct' && s.text === ',') { this.next(); continue; }
      if (s.kind === 'word' && Object.hasOwn(NAT_FLAGS, s.text)) this.fail(s, "',' between flags, e.g. random,persistent");
      return flags;
    }
  }

  portRange(t: Token, s: string, expected: string): PortRange {
    const m = /^(\d+)(?:-(\d+))?$/.exec(s);
    const lo = m ? parseInteger(m[1]!, 65535, false) : undefined;
    const hi = m?.[2] !== undefined ? parseInteger(m[2], 65535, false) : undefined;
    if (!m || lo === undefined || (m[2] !== undefined && hi === undefined)) this.fail(t, expected);
    if (hi !== undefined && hi < lo!) this.fail(t, 'a port range whose start is not above its end', 'empty range');
    const r: PortRange = { lo: lo!, col: t.col, raw: t.raw };
    if (hi !== undefined) r.hi = hi;
    return r;
  }

  /** After `snat|dnat ip|ip6 addr . port to`: one address, ' . ', one port (number or service name). */
  parseNatConcat(st: NatStmt): NatStmt {
    const v6 = st.family === 'ip6';
    const a = this.peek();
    const lo = a.kind === 'word' ? (v6 ? parseIPv6(a.text) : parseIPv4(a.text)) : undefined;
    if (lo === undefined) {
      this.fail(a, `${v6 ? 'an IPv6' : 'an IPv4'} address (one address: ranges and prefixes are not part of this form)`);
    }
    this.next();
    st.addr = { v6, lo: lo!, col: a.col, raw: a.raw };
    this.expectWord("' . ' and the port after the address", '.');
    const p = this.peek();
    const port = p.kind === 'word' ? parseInteger(p.text, 65535, false) ?? serviceport(p.text) : undefined;
    if (port === undefined) this.fail(p, 'a port number 0-65535 or a service name from /etc/services');
    this.next();
    st.port = { lo: port!, col: p.col, raw: p.raw };
    st.flags = this.parseNatFlags();
    return st;
  }

  parseMasqRedir(kind: 'masq' | 'redir', at: At): MasqStmt {
    this.next();
    const st: MasqStmt = { t: kind, flags: 0, ...at };
    if (this.isWord1(this.peek(), 'to')) {
      this.next();
      const p = this.peek();
      // `redirect to :tcp dport map { 22 : 8000, … }`
      if (kind === 'redir' && p.kind === 'word' && p.text.startsWith(':') && /^:[a-z]/.test(p.text)) {
        this.splitWord(1);
        this.next();
        st.map = parsePortMap(this);
        st.flags = this.parseNatFlags();
        return st;
      }
      const expected = kind === 'masq' ? "a port mapping such as ':1000' or ':1000-2000'" : "a port such as ':8080' or ':8080-8090'";
      if (p.kind !== 'word') this.fail(p, expected);
      if (kind === 'masq' && !p.text.startsWith(':')) this.fail(p, expected);
      this.next();
      st.port = this.portRange(p, p.text.startsWith(':') ? p.text.slice(1) : p.text, expected);
    }
    st.flags = this.parseNatFlags();
    return st;
  }

  parseNat(type: string, at: At): NatStmt {
    this.next();
    const st: NatStmt = { t: 'nat', type: type as 'snat' | 'dnat', flags: 0, ...at };
    const f = this.peek();
    // `ip`/`ip6` names the family before `to`, `prefix` or `addr`; otherwise it starts a key
    // (`snat ip saddr map { … }`, the form without `to` nft still takes)
    if (this.isWord(f, 'ip', 'ip6') && this.isWord(this.peek(1), 'to', 'prefix', 'addr')) {
      st.family = f.text as 'ip' | 'ip6';
      st.familyAt = { col: f.col, raw: f.raw };
      this.next();
    }
    if (st.family && this.isWord(this.peek(), 'prefix')) {
      const a = this.next();
      st.netmap = { col: a.col, raw: a.raw };
    } else if (st.family && this.isWord(this.peek(), 'addr')) {
      // `ip addr . port to ADDR . PORT` or `… to KEY map …` (CNI portmap writes this form)
      const a = this.next();
      this.expectWord("' . port to' after 'addr'", '.');
      this.expectWord("'port to' after 'addr .'", 'port');
      st.concat = { col: a.col, raw: a.raw };
    }
    // nft still takes the older form without `to` (`dnat 1.2.3.4`, `snat ip saddr map { … }`)
    if (st.concat || st.netmap || this.isWord1(this.peek(), 'to')) {
      this.expectWord(`'to' after '${type}'${st.family ? '' : " (or 'ip to' / 'ip6 to')"}`, 'to');
    }
    if (startsNatMap(this)) {
      st.map = parseNatMap(this);
      if (!st.concat && !st.netmap && this.natPortAfter()) this.parseNatPort(st);
      st.flags = this.parseNatFlags();
      return st;
    }
    if (st.concat) return this.parseNatConcat(st);
    if (st.netmap) this.fail(this.peek(), "a map ('KEY map { … }'): nfkeeper takes 'prefix to' only with a map");
    const t = this.peek();
    const expected = "an address, prefix or range, optionally with ':port' or ':port-port' " +
      "(IPv6 with a port in brackets: '[fd00::1]:80'), or just ':port'";
    if (t.kind === 'punct' && t.text === '[') {
      // [a]:p  [a]-[b]:p
      this.next();
      const a = this.peek();
      const lo = a.kind === 'word' ? parseIPv6(a.text) : undefined;
      if (lo === undefined) this.fail(a, 'an IPv6 address inside [ ]');
      this.next();
      const c = this.next();
      if (!(c.kind === 'punct' && c.text === ']')) this.fail(c, "']'");
      const addr: NatAddr = { v6: true, lo: lo!, col: a.col, raw: a.raw };
      let n = this.peek();
      if (this.isWord1(n, '-')) {
        this.next();
        const o = this.next();
        if (!(o.kind === 'punct' && o.text === '[')) this.fail(o, "'[' starting the end of the address range");
        const b = this.peek();
        const hi = b.kind === 'word' ? parseIPv6(b.text) : undefined;
        if (hi === undefined) this.fail(b, 'an IPv6 address inside [ ]');
        this.next();
        const c2 = this.next();
        if (!(c2.kind === 'punct' && c2.text === ']')) this.fail(c2, "']'");
        if (hi! < lo!) this.fail(b, 'a range whose start is not above its end', 'empty range');
        addr.hi = hi!;
        n = this.peek();
      }
      st.addr = addr;
      const pl = n.kind === 'word' && addr.hi === undefined ? /^\/(0|[1-9][0-9]{0,2})$/.exec(n.text) : null;
      if (pl && Number(pl[1]) <= 128) {
        // `[a]/len`: the prefix as an address range, as without brackets
        this.next();
        const m = prefixMask(Number(pl[1]), 16);
        addr.lo = andHex(addr.lo, m);
        if (Number(pl[1]) < 128) addr.hi = orNotMask(addr.lo, m);
        st.flags = this.parseNatFlags();
        return st;
      }
      if (n.kind === 'word' && (n.text === ':' || /^:[a-z]/.test(n.text))) {
        this.natPortAfter();
        this.parseNatPort(st);
      } else if (n.kind === 'word' && n.text.startsWith(':')) {
        this.next();
        st.port = this.portRange(n, n.text.slice(1), "a port or port range after ':'");
      } else if (addr.hi === undefined) {
        this.fail(n, "':port' after the bracketed address");
      }
    } else if (t.kind === 'word') {
      // `1.2.3.4:tcp dport map { … }` as nft lists it: the address, then the port's map
      const colon = t.text.indexOf(':');
      if (colon > 0 && /^[0-9./-]+$/.test(t.text.slice(0, colon)) && /^:[a-z]/.test(t.text.slice(colon))) this.splitWord(colon);
      return this.parseNatAddr(st, expected);
    } else {
      this.fail(t, expected);
    }
    st.flags = this.parseNatFlags();
    return st;
  }

  /** After the NAT target's address: a ':' (a word of its own, or starting the next) before a port or a port map. */
  natPortAfter(): boolean {
    const t = this.peek();
    if (t.kind !== 'word' || !t.text.startsWith(':')) return false;
    if (t.text === ':') { this.next(); return true; }
    this.splitWord(1);
    this.next();
    return true;
  }

  /** The port after an address map or a literal address and ':': a port, a port range, or `KEY map { k : port, … }`. */
  parseNatPort(st: NatStmt): void {
    if (startsNatMap(this)) {
      st.portMap = parsePortMap(this);
      return;
    }
    const p = this.peek();
    if (p.kind !== 'word') this.fail(p, "a port, a port range or 'KEY map { key : port, … }'");
    this.next();
    st.port = this.portRange(p, p.text, "a port, a port range or 'KEY map { key : port, … }'");
  }

  /** A NAT target's IPv4 or IPv6 address, range or prefix in one word, with its ':port'. */
  parseNatAddr(st: NatStmt, expected: string): NatStmt {
    const t = this.peek();
    {
      this.next();
      const portOnly = /^:(\d+(?:-\d+)?)$/.exec(t.text);
      const v4 = /^([0-9.]+)(?:([-/])([0-9.]+))?(?::(\d+(?:-\d+)?))?$/.exec(t.text);
      if (portOnly) {
        st.port = this.portRange(t, portOnly[1]!, expected);
      } else if (v4) {
        const lo = parseIPv4(v4[1]!);
        if (lo === undefined) this.fail(t, expected);
        const addr: NatAddr = { v6: false, lo: lo!, col: t.col, raw: t.raw };
        if (v4[2] === '-') {
          const hi = parseIPv4(v4[3]!);
          if (hi === undefined) this.fail(t, expected);
          if (hi! < lo!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          addr.hi = hi!;
        } else if (v4[2] === '/') {
          const plen = /^(?:0|[1-9][0-9]?)$/.test(v4[3]!) ? Number(v4[3]) : NaN;
          if (!(plen >= 0 && plen <= 32)) this.fail(t, expected);
          const m = prefixMask(plen, 4);
          const base = andHex(lo!, m);
          addr.lo = base;
          if (plen < 32) addr.hi = orNotMask(base, m);
        }
        st.addr = addr;
        if (v4[4] !== undefined) st.port = this.portRange(t, v4[4], expected);
        else if (this.natPortAfter()) this.parseNatPort(st);
      } else {
        const dash = t.text.indexOf('-');
        const slash = t.text.indexOf('/');
        const addr: NatAddr = { v6: true, lo: '', col: t.col, raw: t.raw };
        if (slash >= 0) {
          const a = parseIPv6(t.text.slice(0, slash));
          const ps = t.text.slice(slash + 1);
          const plen = /^(?:0|[1-9][0-9]{0,2})$/.test(ps) ? Number(ps) : NaN;
          if (a === undefined || !(plen >= 0 && plen <= 128)) this.fail(t, expected);
          const m = prefixMask(plen, 16);
          addr.lo = andHex(a!, m);
          if (plen < 128) addr.hi = orNotMask(addr.lo, m);
        } else if (dash >= 0) {
          const a = parseIPv6(t.text.slice(0, dash));
          const b = parseIPv6(t.text.slice(dash + 1));
          if (a === undefined || b === undefined) this.fail(t, expected);
          if (b! < a!) this.fail(t, 'a range whose start is not above its end', 'empty range');
          addr.lo = a!;
          addr.hi = b!;
        } else {
          const a = parseIPv6(t.text);
          if (a === undefined) this.fail(t, expected);
          addr.lo = a!;
        }
        st.addr = addr;
      }
    }
    st.flags = this.parseNatFlags();
    return st;
  }
}

function orNotMask(base: string, mask: string): string {
  let s = '';
  for (let i = 0; i < base.length; i += 2) {
    const v = parseInt(base.substr(i, 2), 16) | (~parseInt(mask.substr(i, 2), 16) & 0xff);
    s += v.toString(16).padStart(2, '0');
  }
  return s;
}

function hostU32(h: string): number {
  return readU32Host(h)!;
}

function metaFieldOf(k: string): Field {
  switch (k) {
    case 'iifname': return F.iifname;
    case 'oifname': return F.oifname;
    case 'iif': return F.iif;
    case 'oif': return F.oif;
    case 'l4proto': return F.l4proto;
    case 'nfproto': return F.nfproto;
    default: return F.mark;
  }
}

/** One key expression alone (`ct zone`, `numgen inc mod 2`, `@ih,0,32`), as a named set's typeof names it. */
export function parseKeyPart(text: string, opts: ParseOptions = {}): KeyPart {
  return parseLonePart(new Parser(text, tokenize(text), opts));
}

export function parseRule(text: string, opts: ParseOptions = {}): RuleAst {
  if (typeof text !== 'string') throw new TypeError('rule text must be a string');
  return new Parser(text, tokenize(text), opts).parseRule();
}
