/**
 * compileRule: nft rule text to the kernel expression IR, the way nft 1.0.6
 * does it. After parsing, the evaluation pass tracks the protocol context as
 * nft does (inserting `meta nfproto` before the first ip/ip6 match of an inet
 * rule and `meta l4proto` before the first tcp/udp match, refusing conflicts),
 * a merge pass joins adjacent port matches into one load as nft's
 * payload_try_merge does, and linearization emits the expressions in the
 * form the kernel reports them back (so compiled and dumped IR compare equal).
 */
import { RuleSyntaxError } from '../base/errors.js';
import type { Batch } from '../netlink/batch.js';
import { FIB_F, MAX_STATEFUL_EXPRS, NAT_RANGE, type Expr, type Family, type Hex, type MasqExpr, type RedirExpr, type StatefulExpr } from '../netlink/expr.js';
import { CHAIN_F, type BoundChain, type NftSet } from '../netlink/objects.js';
import type { At, Elem, MatchOp, MatchStmt, RuleAst, Rhs, Stmt } from './ast.js';
import { bigToHex, prefixMask, u16Be, u32Host, u8, zeroHex } from './bytes.js';
import { ETHER, F, VLAN, NFPROTO_IPV4, NFPROTO_IPV6, mergedPorts, type Field } from './fields.js';
import { fieldMask, headerField, metaField } from './headers.js';
import { encodeInt, toBigEndian } from './intvalues.js';
import { parseRule } from './parser.js';
import { renderRule, renderStatements, type InterfaceResolver } from './render.js';
import { isStateful } from './stateful.js';
import { buildAnonymousSet } from './anonymous-sets.js';
import { BYTEORDER_BIG, BYTEORDER_HOST, commentUserdata } from './udata.js';
import { compiledSetResolver } from './compare.js';
import { TRANSPORT_PROTOCOLS } from './values.js';
import {
  keyFields, linearizeDupMap, linearizeDynset, linearizeKeyed, linearizeMarkMap, linearizeNatMap, linearizeNatSplit, linearizeRedirMap, type KeyedContext,
} from './keyed.js';
import type { KeyPart } from './ast.js';

export interface CompileContext {
  family: Family;
  table: string;
  chain: string;
  /** First batch-local set id to use for this rule's anonymous sets; default 1. */
  setIdBase?: number;
  /** First batch-local chain id to use for this rule's bound chains (`jump { … }`); default 1. */
  chainIdBase?: number;
  /**
   * Resolves interface names for `iif "eth0"` / `oif "eth0"` (nft looks the index up when the
   * rule is added, so the interface must exist then). Numeric `iif 2` needs no resolver.
   */
  interfaces?: InterfaceResolver;
  /**
   * The table's named sets and maps by name, for `@name` lookups, `vmap @m` and `map @m` in NAT.
   * The compiler checks that the key (and a map's data) fits and never creates named sets.
   */
  sets?: ReadonlyMap<string, NftSet>;
}

export interface CompiledRule {
  /** Lookups of anonymous sets name the set '__set%d' and carry its setId. */
  exprs: Expr[];
  /** Anonymous sets (with elements) to add in the same batch before the rule. */
  sets: NftSet[];
  /** nft's comment TLV, when the rule has a comment. */
  userdata?: Hex;
  /** The canonical rendering of the rule. */
  text: string;
  /**
   * Its chain bindings (`jump { … }`): chains to add in the same batch, by id, before the rule, whose
   * rules' anonymous sets are in `sets` too. Absent when it has none.
   */
  bound?: BoundChain<CompiledRule>[];
}

type Rel = { t: 'rel'; field: Field; op: MatchOp; rhs: Rhs; mask?: string; xor?: string; at: At };
type EStmt = Rel | { t: 'other'; stmt: Exclude<Stmt, MatchStmt>; natFamily?: Family };

const SUPPORTED_FAMILIES = new Set<Family>(['ip', 'ip6', 'inet']);

function l4Name(v: number | 'set'): string {
  return v === 'set' ? 'a set of protocols' : v === 6 ? 'tcp' : v === 17 ? 'udp' : 'unknown';
}

export function compileRule(text: string, ctx: CompileContext): CompiledRule {
  if (!ctx || !SUPPORTED_FAMILIES.has(ctx.family)) {
    throw new TypeError(`compileRule supports the ip, ip6 and inet families, not '${String(ctx?.family)}'`);
  }
  const ast = parseRule(text, ctx.interfaces ? { ifindex: ifindexOf(ctx.interfaces), family: ctx.family } : { family: ctx.family });
  return compileAst(text, ast, ctx);
}

/** The parser's ifindex for a resolver, made once per resolver (a config compiles all its rules with one). */
const IFINDEX = new WeakMap<InterfaceResolver, (name: string) => number | undefined>();
function ifindexOf(r: InterfaceResolver): (name: string) => number | undefined {
  let f = IFINDEX.get(r);
  if (f === undefined) {
    f = (n) => r.indexOf(n);
    IFINDEX.set(r, f);
  }
  return f;
}

/** A refusal at a place in the rule text. */
function failIn(text: string, at: { col: number; raw: string }, expected: string, reason: string): never {
  throw new RuleSyntaxError(text, at.col, at.raw, expected, reason);
}

/** The keyed context of a rule (sets and maps, generators, dynsets): `sets` collects its anonymous sets. */
function keyedContext(ctx: CompileContext, fail: (at: At, e: string, r: string) => never, sets: NftSet[], base: number): KeyedContext {
  return {
    family: ctx.family, table: ctx.table, fail, load: (f) => loadExpr(f, f.len),
    statementsText: (x) => renderStatements(x, ctx.family),
    addSet: (build) => {
      const id = base + sets.length;
      const set = build(id);
      sets.push(set);
      return { name: set.name, setId: id };
    },
    ...(ctx.sets ? { sets: ctx.sets } : {}),
  };
}

function compileAst(text: string, ast: RuleAst, ctx: CompileContext): CompiledRule {
  // (bound, not an arrow: a closure per rule is a defineProperty per rule under tsx's keepNames)
  const fail: (at: { col: number; raw: string }, expected: string, reason: string) => never = failIn.bind(undefined, text);
  const family = ctx.family;
  const list = evaluate(icmpDependencies(ast, fail), family, fail);
  mergePayloads(list, fail);

  const exprs: Expr[] = [];
  const sets: NftSet[] = [];
  const base = ctx.setIdBase ?? 1;
  let bound: BoundChain<CompiledRule>[] | undefined;
  // Made for the first statement that needs it (most rules have none).
  let kc0: KeyedContext | undefined;
  let lookup0: ((f: Field, e: Elem[], neq: boolean) => Expr[]) | undefined;
  for (let i = 0; i < list.length; i++) {
    const s = list[i];
    if (s === null || s === undefined) continue;
    if (s.t === 'other' && s.stmt.t === 'keyed') {
      linearizeKeyed(s.stmt, exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'dynset') {
      linearizeDynset(s.stmt, exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'dupmap') {
      linearizeDupMap(s.stmt, exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'markmap') {
      linearizeMarkMap(s.stmt, exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'redir' && s.stmt.map) {
      linearizeRedirMap(s.stmt, exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'nat' && (s.stmt.portMap || (s.stmt.map && s.stmt.port))) {
      linearizeNatSplit(s.stmt, s.natFamily as 'ip' | 'ip6', exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'nat' && s.stmt.map) {
      linearizeNatMap(s.stmt, s.natFamily as 'ip' | 'ip6', exprs, kc0 ??= keyedContext(ctx, fail, sets, base));
    } else if (s.t === 'other' && s.stmt.t === 'verdict' && s.stmt.binding) {
      // nft adds the anonymous chain (NFT_CHAIN_BINDING, named by the kernel) and its rules by a
      // batch id; the jump names that id. Each rule of it is compiled as a rule of its own.
      const id = (ctx.chainIdBase ?? 1) + (bound?.length ?? 0);
      const rules: CompiledRule[] = [];
      for (const r of s.stmt.binding) {
        const c = compileAst(text, r, { ...ctx, setIdBase: base + sets.length, chainIdBase: id + 1 });
        for (const x of c.sets) sets.push(x);
        rules.push(c);
      }
      (bound ??= []).push({ id, rules });
      exprs.push({ kind: 'immediate', dreg: 0, verdict: s.stmt.verdict, chainId: id });
    } else if (s.t === 'rel') {
      linearizeRel(s, exprs, lookup0 ??= (field, elems, neq) => {
        const id = base + sets.length;
        const out: Expr[] = [];
        let f = field, es = elems;
        // nft keeps an interval set of a host byte order key in network byte order (hton before the
        // lookup); its userdata says so only for a 1-byte key
        if (field.set && field.set.byteorder === BYTEORDER_HOST && elems.some((e) => e.k !== 'value')) {
          if (field.len === 1) f = { ...field, set: { ...field.set, byteorder: BYTEORDER_BIG } };
          else if (field.host) {
            es = elems.map((e) => e.k === 'value' ? { ...e, hex: toBigEndian(field, e.hex) }
              : e.k === 'range' ? { ...e, lo: toBigEndian(field, e.lo), hi: toBigEndian(field, e.hi) } : e);
            out.push(hton(field));
          }
        }
        const built = buildAnonymousSet(f, es, { family, table: ctx.table }, id, fail);
        sets.push(built.set);
        out.push({ kind: 'lookup', sreg: 1, set: '__set%d', setId: id, flags: neq ? 1 : 0 });
        return out;
      });
    } else {
      linearizeStmt(s.stmt, s.natFamily, exprs);
    }
  }
  // (an exact-size copy: the list grown by push() has room for 17, 150 bytes a rule that a config keeps)
  const out = withRenderedText(exprs.slice(), sets, family, ctx.interfaces);
  if (bound) out.bound = bound;
  if (ast.comment !== undefined) out.userdata = commentUserdata(ast.comment);
  // An object map's statement (`counter name`, `ct helper set`) is told by the named map's object
  // type, and a constant a dynset adds (`add @m { ip saddr : 0x1 }`) is printed by the named set's
  // key or data type, which the rule's own sets do not hold: their text is rendered now, with the
  // table's sets and maps.
  if (ctx.sets && namesTableSet(exprs, ctx.sets)) {
    const own = compiledSetResolver(out);
    const named = ctx.sets;
    out.text = renderRule(out, family, (n, id) => own(n, id) ?? (named.get(n) ? { set: named.get(n)!, elements: [] } : undefined),
      ctx.interfaces ? { interfaces: ctx.interfaces } : {});
  }
  return out;
}

/** Whether an expression reads one of the table's named sets or maps by its object type or key (a loop: no closure per rule). */
function namesTableSet(exprs: readonly Expr[], sets: ReadonlyMap<string, NftSet>): boolean {
  for (let i = 0; i < exprs.length; i++) {
    const e = exprs[i]!;
    if ((e.kind === 'objref' && e.set !== undefined) || (e.kind === 'dynset' && sets.has(e.set))) return true;
  }
  return false;
}

/** What a compiled rule's text is rendered with until it is first read: one per family and resolver. */
interface TextSource {
  readonly family: Family;
  readonly interfaces: InterfaceResolver | undefined;
}

/** Whether the rendering under way asked an interface's name (a text that did is not kept outside the rule: storedText). */
let namesAsked = false;

/** `interfaces` with each name it gives noted (namesAsked): one per resolver. */
const NOTING = new WeakMap<InterfaceResolver, InterfaceResolver>();
function noting(r: InterfaceResolver): InterfaceResolver {
  let out = NOTING.get(r);
  if (out === undefined) {
    NOTING.set(r, out = {
      indexOf: (name) => r.indexOf(name),
      nameOf: (index) => {
        namesAsked = true;
        return r.nameOf(index);
      },
    });
  }
  return out;
}

const TEXT_SOURCES = new WeakMap<InterfaceResolver, Map<Family, TextSource>>();
const NO_RESOLVER = new Map<Family, TextSource>();

function textSource(family: Family, interfaces: InterfaceResolver | undefined): TextSource {
  let byFamily = NO_RESOLVER;
  if (interfaces) {
    byFamily = TEXT_SOURCES.get(interfaces)!;
    if (byFamily === undefined) TEXT_SOURCES.set(interfaces, byFamily = new Map());
  }
  let source = byFamily.get(family);
  if (source === undefined) byFamily.set(family, source = { family, interfaces });
  return source;
}

/**
 * A compiled rule whose `text`, the canonical rendering, is made when it is first read (and kept),
 * not when the rule is compiled: a config's rules are compared by their expressions, and their
 * texts are read only to show a difference or a plan. Rendering every rule would be a large
 * share of compiling a big config, and keep a second copy of every rule's text. `text` is an own
 * enumerable property for spreads, JSON and equality (an accessor: util.inspect shows it as one);
 * assigning it replaces the rendering.
 *
 * One getter and setter serve every rule, and what the text is rendered from sits in a private
 * field: an object literal with its own `get text`/`set text` was a dictionary-mode object with
 * two closures, their context and a hidden class of its own per rule, all of it copied by the
 * young generation's collector in a big file's compile.
 */
class LazyTextRule {
  exprs: Expr[];
  sets: NftSet[];
  declare userdata?: Hex;
  declare bound?: BoundChain<CompiledRule>[];
  /** The rendering once made or assigned; before that, what to render it with. */
  #text: string | TextSource;
  /** The rendering was made here from the expressions alone, no interface's name asked (storedText). */
  #fromExprs = false;

  constructor(exprs: Expr[], sets: NftSet[], source: TextSource) {
    this.exprs = exprs;
    this.sets = sets;
    this.#text = source;
    Object.defineProperty(this, 'text', TEXT_PROPERTY);
  }

  static getText(this: LazyTextRule): string {
    const t = this.#text;
    if (typeof t === 'string') return t;
    const rule = this as unknown as CompiledRule;
    namesAsked = false;
    const text = renderRule(rule, t.family, compiledSetResolver(rule), t.interfaces ? { interfaces: noting(t.interfaces) } : {});
    this.#fromExprs = !namesAsked;
    return this.#text = text;
  }

  static setText(this: LazyTextRule, v: string): void {
    this.#text = v;
    this.#fromExprs = false;
  }

  /** The text, when it was rendered (read) and depends on nothing but the rule's expressions, sets and family. */
  static storedText(rule: CompiledRule): string | undefined {
    if (!(#text in rule)) return undefined;
    const r = rule as unknown as LazyTextRule;
    return r.#fromExprs && typeof r.#text === 'string' ? r.#text : undefined;
  }
}

const TEXT_PROPERTY: PropertyDescriptor = { get: LazyTextRule.getText, set: LazyTextRule.setText, enumerable: true, configurable: true };

/**
 * `rule`'s text where it is already rendered and was rendered from the rule alone (its expressions,
 * sets and family: no interface's name, which may change without the rule changing, and not a text
 * assigned): a rendering of the same rule made later would be the same text. Undefined otherwise;
 * never renders. The compile cache keeps such texts for an install's plan (EncodedRule.text).
 */
export function storedText(rule: CompiledRule): string | undefined {
  return LazyTextRule.storedText(rule);
}

/** A compiled rule of `exprs` and `sets` as compileRule makes it (the compile cache rebuilds its rules with it). */
export function withRenderedText(exprs: Expr[], sets: NftSet[], family: Family, interfaces: InterfaceResolver | undefined): CompiledRule {
  return new LazyTextRule(exprs, sets, textSource(family, interfaces)) as unknown as CompiledRule;
}

/**
 * A compiled rule made of other expressions and userdata than a compiled one (an owner's rule,
 * tagged and jumping to its chains' kernel names), its text likewise rendered when first read.
 */
export function compiledRule(exprs: Expr[], sets: NftSet[], family: Family, userdata?: Hex): CompiledRule {
  const out = withRenderedText(exprs, sets, family, undefined);
  if (userdata !== undefined) out.userdata = userdata;
  return out;
}

/** A SetResolver over a compiled rule's own anonymous sets (matched by setId). */
export { compiledSetResolver };

// ---- nft's icmp type dependencies (payload_gen_icmp_dependency) --------------

/** Puts the icmp type match nft adds in front of each icmp field that needs one. */
function icmpDependencies(ast: RuleAst, fail: (at: At, e: string, r: string) => never): RuleAst {
  // (a rule without a field that needs one gets nothing: no copy of it)
  // (a loop, not some() with an arrow: a closure per rule compiled)
  let any = false;
  for (let i = 0; i < ast.stmts.length && !any; i++) {
    const st = ast.stmts[i]!;
    any = st.t === 'match' && st.field.icmpDep !== undefined;
  }
  if (!any) return ast;
  // the icmp types an earlier match allows (nft's th_dep): a match on a type, or on a set of types
  let known: number[] | undefined;
  const stmts: Stmt[] = [];
  for (const st of ast.stmts) {
    if (st.t === 'match' && st.field.icmpDep) {
      const d = st.field.icmpDep;
      const proto = st.field.name.startsWith('icmpv6') ? 'icmpv6' : 'icmp';
      if (known !== undefined && !known.every((t) => d.types.includes(t))) {
        fail(st, `fields of one icmp type in a rule`, `incompatible icmp match: rule has ${known.join(',')}, need ${d.ctx}`);
      }
      if (known === undefined) {
        const tf = headerField(proto, 'type')!;
        const el = (v: number) => ({ k: 'value' as const, hex: u8(v), col: st.col, raw: st.raw });
        stmts.push({
          t: 'match', field: tf, op: 'eq', col: st.col, raw: st.raw,
          rhs: d.types.length === 1 ? el(d.types[0]!) : { k: 'set', elems: d.types.map(el), col: st.col, raw: st.raw },
        });
        known = d.types;
      }
    } else if (st.t === 'match' && (st.field.name === 'icmp type' || st.field.name === 'icmpv6 type')
      && (st.op === 'eq' || st.op === 'implicit') && st.mask === undefined) {
      if (st.rhs.k === 'value') known = [parseInt(st.rhs.hex, 16)];
      else if (st.rhs.k === 'set' && st.rhs.elems.every((e) => e.k === 'value')) {
        known = st.rhs.elems.map((e) => parseInt((e as { hex: string }).hex, 16));
      }
    }
    stmts.push(st);
  }
  return { ...ast, stmts };
}

// ---- evaluation: protocol context and dependencies ------------------------

/** A dependency match (`meta l4proto tcp`, `meta nfproto ipv4`, `meta iiftype ether`) at `at`. */
function depRel(field: Field, value: number, at: At): Rel {
  return {
    t: 'rel', field, op: 'eq', rhs: { k: 'value', hex: field === IIFTYPE_ETHER || field === ETHER.type || field === VLAN.type ? encodeInt(field, BigInt(value)) : u8(value), col: at.col, raw: at.raw }, at,
  };
}

function evaluate(ast: RuleAst, family: Family, fail: (at: At, e: string, r: string) => never): (EStmt | null)[] {
  const out: (EStmt | null)[] = [];
  const c: ProtoCtx = { l3: family === 'ip' ? 'ip' : family === 'ip6' ? 'ip6' : undefined, l4: undefined, ll: false };
  let terminal: At | undefined;
  /** The protocol dependencies of a match's field, or of each part of a key (a concatenation's parts, a jhash's inputs) in order. */
  const need = (f: Field, st: At) => protoDeps(f, st, family, c, 'match', out, fail);
  const keyNeeds = (key: readonly KeyPart[]) => {
    for (const k of keyFields(key)) protoDeps(k.field, k.at, family, c, 'key part', out, fail);
  };

  for (let si = 0; si < ast.stmts.length; si++) {
    const st = ast.stmts[si]!;
    if (terminal) {
      fail(st, `nothing after '${terminal.raw}' but comment "…"`, 'statement after terminal statement has no effect');
    }
    if (st.t === 'match') {
      const f = st.field;
      // nft's stmt_reduce drops `meta protocol ip` in an ip table and `meta protocol ip6` in an ip6 table
      if (f.load.kind === 'meta' && f.load.key === 'protocol' && (st.op === 'eq' || st.op === 'implicit') && si < ast.stmts.length - 1
        && st.rhs.k === 'value' && st.mask === undefined
        && ((family === 'ip' && st.rhs.hex === '0800') || (family === 'ip6' && st.rhs.hex === '86dd'))) {
        continue;
      }
      if (f.load.kind === 'meta' && f.load.key === 'iiftype' && (st.op === 'eq' || st.op === 'implicit') && st.rhs.k === 'value'
        && st.rhs.hex === encodeInt(f, 1n)) c.ll = true;
      need(f, st);
      if (f === ETHER.type && (st.op === 'eq' || st.op === 'implicit') && st.rhs.k === 'value' && st.mask === undefined) {
        c.eth = parseInt(st.rhs.hex, 16);
        // the network protocol it names (nft's protocol context), as a dependency would
        if (family === 'inet' && c.l3 === undefined && (c.eth === 0x0800 || c.eth === 0x86dd)) c.l3 = c.eth === 0x0800 ? 'ip' : 'ip6';
      }
      if (f === VLAN.type && (st.op === 'eq' || st.op === 'implicit') && st.rhs.k === 'value' && st.mask === undefined) {
        c.vlan = parseInt(st.rhs.hex, 16);
        if (family === 'inet' && c.l3 === undefined && (c.vlan === 0x0800 || c.vlan === 0x86dd)) c.l3 = c.vlan === 0x0800 ? 'ip' : 'ip6';
      }
      // a range of marks (alone or in a set) is compared in network byte order, as a host-order integer
      const markSpan = f.type === 'mark' && (st.rhs.k === 'range' || (st.rhs.k === 'set' && st.rhs.elems.some((e) => e.k !== 'value')));
      const rel: Rel = { t: 'rel', field: markSpan ? { ...f, host: true } : f, op: st.op, rhs: st.rhs, at: st };
      if (st.mask !== undefined) rel.mask = st.mask;
      if (st.xor !== undefined) rel.xor = st.xor;
      out.push(rel);
      if ((st.op === 'eq' || st.op === 'implicit') && st.mask === undefined) {
        if (f.protoKey) {
          if (st.rhs.k === 'value') c.l4 = parseInt(st.rhs.hex, 16);
          else if (st.rhs.k === 'set') c.l4 = 'set';
        } else if (f === F.nfproto && st.rhs.k === 'value') {
          const v = parseInt(st.rhs.hex, 16);
          c.l3 = v === NFPROTO_IPV4 ? 'ip' : v === NFPROTO_IPV6 ? 'ip6' : 'other';
        }
      }
      continue;
    }
    if (st.t === 'keyed' || st.t === 'dynset' || st.t === 'markmap' || st.t === 'dupmap') {
      // A vmap is not terminal: a key that is in no element continues with the next statement.
      for (const k of keyFields(st.key)) {
        // a bit field (ip dscp, ip6 flowlabel, …) is keyed by `payload & mask`, which the set and map code does not build
        if ((fieldMask(k.field) !== undefined && keyFields(st.key).length > 1) || k.field.llType !== undefined || k.field.l3dep || k.field.icmpDep) {
          // the key dependencies (protoDeps) do not add nft's vlan, nfproto-for-icmp or icmp type matches for these yet
          fail(k.at, `another key`, `${k.field.name} cannot be a set or map key yet`);
        }
      }
      // (the data a dynset loads and the field a map's value is stored into have their protocols too)
      const deps = st.t === 'dynset' && Array.isArray(st.data) ? [...st.key, ...st.data]
        : st.t === 'markmap' && st.store ? [...st.key, { p: 'field' as const, field: st.store, col: st.col, raw: st.raw }] : st.key;
      keyNeeds(deps);
      out.push({ t: 'other', stmt: st });
      continue;
    }
    let natFamily: Family | undefined;
    if (st.t === 'expr') {
      if (st.needsL4 && !((typeof c.l4 === 'number' && TRANSPORT_PROTOCOLS.has(c.l4)) || c.l4 === 'set')) {
        fail(st, 'a transport protocol match before it (e.g. meta l4proto tcp)', 'Transparent proxy support requires transport protocol match');
      }
      // the dependencies nft adds for reject with icmp/icmpv6 (inet) and with tcp reset
      // nft puts a statement's dependency at the head of the rule (stmt_reject_gen_dependency)
      const put = (d: Rel) => (st.depHere ? out.push(d) : out.unshift(d));
      if (st.l3 && family !== 'inet' && st.l3 !== family) {
        fail(st, `a statement for ${family}`, `conflicting protocols specified: ${family} vs. ${st.l3}`);
      }
      if (st.l3 && family === 'inet' && c.l3 === undefined) {
        put(l3Dep(st.l3, st, c, fail));
        c.l3 = st.l3;
      } else if (st.l3 && family === 'inet' && c.l3 !== st.l3) {
        fail(st, `a statement for ${c.l3 === 'other' ? 'this protocol' : c.l3}`, `conflicting protocols specified: ${c.l3} vs. ${st.l3}`);
      }
      if (st.l4 !== undefined) {
        if (c.l4 === undefined) {
          put(depRel(F.l4proto, st.l4, st));
          c.l4 = st.l4;
        } else if (c.l4 !== st.l4) {
          fail(st, `a statement consistent with the transport protocol given earlier (${l4Name(c.l4)})`,
            `conflicting protocols specified: ${l4Name(c.l4)} vs. ${l4Name(st.l4)}`);
        }
      }
      if (st.terminal) terminal = st;
      if (st.defaultReject && family === 'inet' && (c.l3 === 'ip' || c.l3 === 'ip6')) {
        out.push({ t: 'other', stmt: { ...st, exprs: [{ kind: 'reject', type: 0, code: c.l3 === 'ip' ? 3 : 4 }] } });
        continue;
      }
    } else if (st.t === 'nat' || st.t === 'masq' || st.t === 'redir') {
      // (a port after a NAT map: once the maps' keys gave their dependencies, below)
      const portLater = st.t === 'nat' && (st.map !== undefined || st.portMap !== undefined);
      if (st.port && !portLater && !((typeof c.l4 === 'number' && TRANSPORT_PROTOCOLS.has(c.l4)) || c.l4 === 'set')) {
        fail(st.port, 'a transport protocol match before it (e.g. tcp dport 80, or meta l4proto tcp)',
          'transport protocol mapping is only valid after transport protocol match');
      }
      if (st.t === 'redir' && st.map) {
        // unlike snat/dnat maps, nft wants the transport protocol from a match before the statement:
        // the key's own dependency does not count (`redirect to :tcp dport map …` alone is refused)
        st.map.l4Known = c.l4 === 'set' || (typeof c.l4 === 'number' && TRANSPORT_PROTOCOLS.has(c.l4));
        keyNeeds(st.map.key);
      }
      if (st.t === 'nat') {
        const explicit = st.family;
        if (explicit && family !== 'inet' && explicit !== family) {
          fail(st.familyAt!, `'${family}' or nothing in an ${family} table`, `conflicting protocols specified: ${family} vs. ${explicit}`);
        }
        if (explicit && family === 'inet' && (c.l3 === 'ip' || c.l3 === 'ip6') && c.l3 !== explicit) {
          fail(st.familyAt!, `'${c.l3}', as the rule matched ${c.l3} before`, `conflicting protocols specified: ${c.l3} vs. ${explicit}`);
        }
        if (st.addr) {
          const fam = explicit ?? (family !== 'inet' ? family : c.l3 === 'ip' || c.l3 === 'ip6' ? c.l3 : undefined);
          if (!fam) {
            fail(st, `'${st.type} ip to' or '${st.type} ip6 to'`, 'ip or ip6 must be specified with address for inet tables');
          }
          if (st.addr.v6 !== (fam === 'ip6')) {
            fail(st.addr, fam === 'ip6' ? 'an IPv6 address' : 'an IPv4 address', `address family mismatch for ${fam} NAT`);
          }
          // nft 1.0.6 aborts on this one (an assertion in netlink_gen_expr): it never reaches a kernel
          if (st.concat && fam === 'ip6') {
            fail(st.concat, "'[address]:port' for IPv6 (or a map)", `nft 1.0.6 cannot encode ip6 'addr . port' with a constant target`);
          }
          natFamily = fam;
        } else if (st.map) {
          // as nft: the family comes from the table, `ip`/`ip6`, or what the rule matched before the
          // map's key (the key's own dependencies come after that decision)
          const fam = explicit ?? (family !== 'inet' ? family : c.l3 === 'ip' || c.l3 === 'ip6' ? c.l3 : undefined);
          if (!fam) {
            fail(st, `'${st.type} ip to' or '${st.type} ip6 to'`, 'ip or ip6 must be specified with address for inet tables');
          }
          keyNeeds(st.map.key);
          // whether ports may be mapped (checked with the map's data when it is linearized); nft takes
          // a set of protocols, `meta l4proto { tcp, udp }`, as transport context here
          st.map.l4Known = c.l4 === 'set' || (typeof c.l4 === 'number' && TRANSPORT_PROTOCOLS.has(c.l4));
          natFamily = fam;
        } else {
          natFamily = explicit ?? family;
        }
        // as nft: the protocol must be known once the address is (a match before, or the address
        // map's key); a port map's own key does not count (`dnat to ct zone map { … } : tcp dport map
        // { … }` alone is refused)
        const l4Known = c.l4 === 'set' || (typeof c.l4 === 'number' && TRANSPORT_PROTOCOLS.has(c.l4));
        const port = st.portMap ?? (st.map ? st.port : undefined);
        if (port && !l4Known) {
          fail(port, 'a transport protocol match before it (e.g. tcp dport 80, or meta l4proto tcp)',
            'transport protocol mapping is only valid after transport protocol match');
        }
        if (st.portMap) {
          keyNeeds(st.portMap.key);
        }
      }
      terminal = st;
    } else if (st.t === 'verdict') {
      terminal = st;
    }
    out.push(natFamily ? { t: 'other', stmt: st, natFamily } : { t: 'other', stmt: st });
  }
  return out;
}

/** The protocol context of a rule so far, which its dependencies read and update. */
interface ProtoCtx {
  l3: 'ip' | 'ip6' | 'other' | undefined;
  l4: number | 'set' | undefined;
  /** The link layer is known (`meta iiftype ether`, matched or as a dependency). */
  ll: boolean;
  /** The ether type matched (explicitly or as a dependency). */
  eth?: number;
  /** The vlan type matched (explicitly or as a network field's dependency inside a vlan header). */
  vlan?: number;
}

/**
 * The network protocol dependency in inet: `meta nfproto`, or after an ether match (the link layer
 * is known) nft's `ether type`, which its payload merge joins with the ether match; inside a vlan
 * header its own type field. `keyPart`: for that part of a set or map key, where the vlan type
 * dependency is not built (refused), and the ether type is checked against the one matched but not
 * noted.
 */
function l3Dep(p: 'ip' | 'ip6', st: At, c: ProtoCtx, fail: (at: At, e: string, r: string) => never, keyPart?: Field): Rel {
  if (!c.ll) return depRel(F.nfproto, p === 'ip' ? NFPROTO_IPV4 : NFPROTO_IPV6, st);
  const t = p === 'ip' ? 0x0800 : 0x86dd;
  if (c.eth === 0x8100) {
    if (keyPart) fail(st, 'an ip/ip6 match before the vlan match, or meta nfproto', `${keyPart.name} after a vlan match cannot be a set or map key yet`);
    // inside a vlan header: its own type field names the network protocol
    if (c.vlan !== undefined && c.vlan !== t) fail(st, `a match consistent with vlan type ${c.vlan}`, `conflicting protocols specified: vlan type vs. ${p}`);
    c.vlan = t;
    return depRel(VLAN.type, t, st);
  }
  // A key part after another ether type is refused as nft refuses it; the key's type is not noted.
  if (c.eth !== undefined && c.eth !== t) fail(st, `a match consistent with ether type ${c.eth}`, `conflicting protocols specified: ether type vs. ${p}`);
  if (!keyPart) c.eth = t;
  return depRel(ETHER.type, t, st);
}

/**
 * The protocol dependencies a field needs before it, inserted as nft does, refusing conflicts: of a
 * match's field, or of a set or map key's part (`of`, also the word a refusal names it by). A key
 * part gets no ether type dependency of a field inside the Ethernet payload (vlan) and no network
 * protocol dependency of an icmp field (the caller refuses such key fields; a dynset's data and a
 * map's stored field get none), and its network protocol dependency is l3Dep's for a key part.
 */
function protoDeps(f: Field, st: At, family: Family, c: ProtoCtx, of: 'match' | 'key part',
  out: (EStmt | null)[], fail: (at: At, e: string, r: string) => never): void {
  if (f === F.nfproto && family !== 'inet') {
    fail(st, 'a match that makes sense in this family', 'meta nfproto is only useful in the inet family');
  }
  if (f.ll && !c.ll) {
    // nft's link layer dependency in ip, ip6 and inet tables: the input device is Ethernet
    out.push(depRel(IIFTYPE_ETHER, 1, st));
    c.ll = true;
  }
  const key = of === 'key part';
  if (f.llType !== undefined && !key && c.eth !== f.llType) {
    // and a field inside the Ethernet payload (vlan) depends on its ether type
    if (c.eth !== undefined) fail(st, `a match consistent with ether type ${c.eth}`, `conflicting protocols specified: ether type vs. ${f.name}`);
    out.push(depRel(ETHER.type, f.llType, st));
    c.eth = f.llType;
  }
  if (f.l3 && f.l3NoDep) {
    // (ct original saddr, rt nexthop in inet: the family must be known, nft adds no dependency)
    const have = family === 'inet' ? c.l3 : family;
    if (have !== f.l3) {
      fail(st, `an ${f.l3 === 'ip' ? 'IPv4' : 'IPv6'} table, or a match on ${f.l3} before it in an inet table`,
        have === undefined ? `cannot tell whether ${f.name} is an IPv4 or IPv6 address here`
          : `conflicting protocols specified: ${have} vs. ${f.l3}`);
    }
  } else if (f.l3) {
    if (family === 'inet') {
      if (c.l3 === undefined) {
        out.push(l3Dep(f.l3, st, c, fail, key ? f : undefined));
        c.l3 = f.l3;
      } else if (c.l3 !== f.l3) {
        fail(st, `a ${of} consistent with the network protocol given earlier (${c.l3 === 'other' ? 'meta nfproto' : c.l3})`,
          `conflicting protocols specified: ${c.l3 === 'other' ? 'unknown' : c.l3} vs. ${f.l3}`);
      }
    } else if (c.l3 !== f.l3) {
      fail(st, `a ${of} for ${c.l3} in this ${family} table`, `conflicting protocols specified: ${c.l3} vs. ${f.l3}`);
    }
  }
  // icmp/icmpv6 in inet: nft adds `meta nfproto` only when the transport protocol is not known yet
  if (f.l3dep && !key && family === 'inet' && c.l3 === undefined && c.l4 === undefined) {
    out.push(l3Dep(f.l3dep, st, c, fail));
    c.l3 = f.l3dep;
  }
  if (f.l4 !== undefined) {
    if (c.l4 === undefined) {
      out.push(depRel(F.l4proto, f.l4, st));
      c.l4 = f.l4;
    } else if (c.l4 !== f.l4) {
      fail(st, `a ${of} consistent with the transport protocol given earlier (${l4Name(c.l4)})`,
        `conflicting protocols specified: ${l4Name(c.l4)} vs. ${l4Name(f.l4)}`);
    }
  }
}

// ---- nft's payload_try_merge (nft 1.0.6 src/rule.c) ------------------------

const IIFTYPE_ETHER = metaField('iiftype')!;

function isMergeCandidate(s: EStmt): s is Rel {
  return s.t === 'rel' && s.field.load.kind === 'payload' && s.rhs.k === 'value' && s.mask === undefined
    && fieldMask(s.field) === undefined && !(s.field.type === 'flags' && s.op === 'implicit')
    && (s.op === 'eq' || s.op === 'neq' || s.op === 'implicit');
}

/** nft's payload_can_merge. */
function canMerge(a: Rel, b: Rel): boolean {
  const la = a.field.load as { base: string; offset: number };
  const lb = b.field.load as { base: string; offset: number };
  if (la.base !== lb.base || la.offset + a.field.len !== lb.offset) return false;
  const total = a.field.len + b.field.len;
  if (total > 16) return false;
  // nft merges link layer loads at any size (they are not on the kernel's fast path anyway)
  return total <= 4 || la.base === 'll' || a.field.len > 4 || b.field.len > 4;
}

/** Adjacent transport port matches of which one is `th`: nft merges them, as it does tcp/udp ports. */
function thMerge(a: Rel, b: Rel): boolean {
  const la = a.field.load as { base: string; offset: number };
  const lb = b.field.load as { base: string; offset: number };
  return la.base === 'transport' && lb.base === 'transport' && la.offset + a.field.len === lb.offset
    && a.field.len === 2 && b.field.len === 2 && (a.field.name.startsWith('th ') || b.field.name.startsWith('th '));
}

const norm = (op: MatchOp) => (op === 'neq' ? 'neq' : 'eq');

/** nft's EXPR_F_PROTOCOL: a field naming the next header's protocol (ip protocol, ether type, …). */
const isProto = (f: Field): boolean => f.protoKey === true || f === ETHER.type;

const headerRank = (base: string): number => (base === 'll' ? 0 : base === 'network' ? 1 : 2);

/** The order doMerge walks two candidates in: by header (link, network, transport), then offset. */
function mergeOrder(x: Rel, y: Rel): number {
  const a = x.field.load as { base: string; offset: number };
  const b = y.field.load as { base: string; offset: number };
  const d = headerRank(a.base) - headerRank(b.base);
  return d !== 0 ? d : a.offset - b.offset;
}

/** Merges the candidates `sa` (indexes into list, sorted in place) as nft's payload_try_merge does. */
function doMerge(list: (EStmt | null)[], sa: number[], fail: (at: At, e: string, r: string) => never): void {
  // By header, then offset; stable, as Array.prototype.sort is. An insertion sort in place: the
  // candidates are a few (two in most rules), and sort() with a comparator copied them into a
  // work array of its own for every rule of a big config.
  const order = sa;
  for (let i = 1; i < order.length; i++) {
    const x = order[i]!;
    let j = i;
    while (j > 0 && mergeOrder(list[order[j - 1]!] as Rel, list[x] as Rel) > 0) {
      order[j] = order[j - 1]!;
      j--;
    }
    order[j] = x;
  }
  let last = order[0]!;
  for (let i = 1; i < order.length; i++) {
    const j = order[i]!;
    const a = list[last] as Rel, b = list[j] as Rel;
    if (!canMerge(a, b) || norm(a.op) !== norm(b.op) || thMerge(a, b)) {
      if (norm(a.op) === norm(b.op) && thMerge(a, b)) {
        fail(b.at, `'${a.field.name.replace(/^th/, 'tcp')} … ${b.field.name.replace(/^th/, 'tcp')} …' or the udp form`,
          `nft 1.0.6 merges '${a.field.name}' and '${b.field.name}' into one 4-byte load it lists as a raw @th payload`);
      }
      last = j;
      continue;
    }
    if (norm(a.op) === 'neq') {
      fail(b.at, `at most one of '${a.field.name} !=' and '${b.field.name} !=' in a rule`,
        `nft 1.0.6 would merge '${a.field.name} != …' and '${b.field.name} != …' into one comparison ` +
        'that is true unless both ports are equal, which is not what the text says');
    }
    const va = (a.rhs as Elem & { hex: string }).hex, vb = (b.rhs as Elem & { hex: string }).hex;
    const ports = a.field.l4 !== undefined && a.field.l4 === b.field.l4 && (a.field.l4 === 6 || a.field.l4 === 17)
      && a.field.type === 'port' && b.field.type === 'port';
    const field: Field = ports ? mergedPorts(a.field.l4!) : {
      name: `${a.field.name} . ${b.field.name}`, type: 'ports', len: a.field.len + b.field.len, load: a.field.load,
      ...(isProto(a.field) || isProto(b.field) ? { protoKey: true } : {}),
    };
    const merged: Rel = { t: 'rel', field, op: a.op, rhs: { k: 'value', hex: va + vb, col: a.rhs.col, raw: a.rhs.raw }, at: a.at };
    // nft keeps a protocol match's place (payload_do_merge swaps the two): the merged match sits where b was
    if (isProto(b.field)) {
      list[j] = merged;
      list[last] = null;
      last = j;
    } else {
      list[last] = merged;
      list[j] = null;
    }
  }
}

function mergePayloads(list: (EStmt | null)[], fail: (at: At, e: string, r: string) => never): void {
  let sa: number[] = [];
  for (let i = 0; i < list.length; i++) {
    const s = list[i];
    if (!s) continue;
    if (s.t !== 'rel') {
      // nft leaves a lone candidate in place across the statement (idx < 2: no reset)
      if (sa.length >= 2) { doMerge(list, sa, fail); sa = []; }
      continue;
    }
    if (isMergeCandidate(s)) sa.push(i);
  }
  if (sa.length > 1) doMerge(list, sa, fail);
}

// ---- linearization -------------------------------------------------------

function loadExpr(field: Field, len: number): Expr {
  const l = field.load;
  switch (l.kind) {
    case 'payload': return { kind: 'payload', base: l.base, offset: l.offset, len, dreg: 1 };
    case 'meta': return { kind: 'meta', key: l.key, dreg: 1 };
    case 'ct': return l.dir !== undefined ? { kind: 'ct', key: l.key, dreg: 1, dir: l.dir } : { kind: 'ct', key: l.key, dreg: 1 };
    case 'fib': return { kind: 'fib', result: l.result, flags: l.flags, dreg: 1 };
    case 'socket': return { kind: 'socket', key: l.key, dreg: 1 };
    case 'osf': return { kind: 'osf', dreg: 1, ttl: l.ttl, flags: l.flags };
    case 'xfrm': return { kind: 'xfrm', dreg: 1, key: l.key, dir: l.dir, spnum: l.spnum };
    case 'rt': return { kind: 'rt', key: l.key, dreg: 1 };
    case 'exthdr': return { kind: 'exthdr', dreg: 1, type: l.type, offset: l.offset, len, flags: l.flags ?? 0, op: l.op };
  }
}

function cmpOp(op: MatchOp): 'eq' | 'neq' | 'lt' | 'gt' | 'lte' | 'gte' {
  return op === 'implicit' ? 'eq' : op;
}

/** A field nft loads with a bit mask (not whole bytes): the load and the mask. */
function bitsLoad(f: Field, out: Expr[]): void {
  out.push(loadExpr(f, f.len));
  const m = fieldMask(f);
  if (m !== undefined) out.push(bitwise(f.len, bigToHex(m, f.len), zeroHex(f.len)));
}

/** Host-order integers are compared by order in network byte order (nft's byteorder hton). */
function needsHton(f: Field): boolean {
  return f.host === true && f.len > 1;
}

export function hton(f: Field): Expr {
  return { kind: 'byteorder', sreg: 1, dreg: 1, op: 'hton', len: f.len, size: f.len };
}

function bitwise(len: number, mask: string, xor: string): Expr {
  return { kind: 'bitwise', sreg: 1, dreg: 1, len, op: 'bool', mask, xor };
}

function linearizeRel(s: Rel, out: Expr[], lookup: (f: Field, e: Elem[], neq: boolean) => Expr[]): void {
  const f = s.field;
  if (f.width !== undefined || f.host || f.type === 'flags') {
    linearizeIntRel(s, out, lookup);
    return;
  }
  const rhs = s.rhs;
  const zeros = zeroHex(f.len);
  switch (rhs.k) {
    case 'value':
      out.push(loadExpr(f, f.len));
      if (s.mask !== undefined) {
        out.push(bitwise(f.len, s.mask, s.xor ?? zeros), { kind: 'cmp', sreg: 1, op: cmpOp(s.op), data: rhs.hex });
      } else if ((f.type === 'ctstate' || f.type === 'ctstatus') && s.op === 'implicit') {
        // a flag test: any of the given bits set
        out.push(bitwise(f.len, rhs.hex, zeros), { kind: 'cmp', sreg: 1, op: 'neq', data: zeros });
      } else {
        out.push({ kind: 'cmp', sreg: 1, op: cmpOp(s.op), data: rhs.hex });
      }
      return;
    case 'prefix': {
      const bits = f.len * 8;
      if (rhs.plen > 0 && rhs.plen % 8 === 0 && rhs.plen < bits) {
        const n = rhs.plen / 8;
        out.push(loadExpr(f, n), { kind: 'cmp', sreg: 1, op: cmpOp(s.op), data: rhs.hex.slice(0, n * 2) });
      } else {
        out.push(loadExpr(f, f.len), bitwise(f.len, prefixMask(rhs.plen, f.len), zeros),
          { kind: 'cmp', sreg: 1, op: cmpOp(s.op), data: rhs.hex });
      }
      return;
    }
    case 'range':
      out.push(loadExpr(f, f.len));
      if (s.op === 'neq') out.push({ kind: 'range', sreg: 1, op: 'neq', from: rhs.lo, to: rhs.hi });
      else out.push({ kind: 'cmp', sreg: 1, op: 'gte', data: rhs.lo }, { kind: 'cmp', sreg: 1, op: 'lte', data: rhs.hi });
      return;
    case 'wildcard':
      out.push(loadExpr(f, f.len), { kind: 'cmp', sreg: 1, op: cmpOp(s.op), data: rhs.prefix });
      return;
    case 'set':
      out.push(loadExpr(f, f.len));
      if (s.mask !== undefined) out.push(bitwise(f.len, s.mask, zeros));
      out.push(...lookup(maskedKey(f, s), rhs.elems, s.op === 'neq'));
      return;
  }
}

/** A masked key (`tcp flags & (syn | ack) == { … }`): nft describes the set by no typeof, its byte order alone. */
function maskedKey(f: Field, s: Rel): Field {
  return s.mask === undefined || !f.set ? f : { ...f, set: { keyType: f.set.keyType, byteorder: f.set.byteorder } };
}

/** Matches on headers.ts fields: bit fields, host-order integers, flags. */
function linearizeIntRel(s: Rel, out: Expr[], lookup: (f: Field, e: Elem[], neq: boolean) => Expr[]): void {
  const f = s.field;
  const rhs = s.rhs;
  const zeros = zeroHex(f.len);
  const op = cmpOp(s.op);
  switch (rhs.k) {
    case 'value':
      if (s.mask !== undefined) {
        out.push(loadExpr(f, f.len), bitwise(f.len, s.mask, s.xor ?? zeros), { kind: 'cmp', sreg: 1, op, data: rhs.hex });
      } else if (f.type === 'flags' && s.op === 'implicit' && rhs.hex !== zeros) {
        out.push(loadExpr(f, f.len), bitwise(f.len, rhs.hex, zeros), { kind: 'cmp', sreg: 1, op: 'neq', data: zeros });
      } else if (op !== 'eq' && op !== 'neq' && needsHton(f)) {
        bitsLoad(f, out);
        out.push(hton(f), { kind: 'cmp', sreg: 1, op, data: toBigEndian(f, rhs.hex) });
      } else {
        bitsLoad(f, out);
        out.push({ kind: 'cmp', sreg: 1, op, data: rhs.hex });
      }
      return;
    case 'range': {
      bitsLoad(f, out);
      let lo = rhs.lo, hi = rhs.hi;
      if (needsHton(f)) { out.push(hton(f)); lo = toBigEndian(f, lo); hi = toBigEndian(f, hi); }
      if (s.op === 'neq') out.push({ kind: 'range', sreg: 1, op: 'neq', from: lo, to: hi });
      else out.push({ kind: 'cmp', sreg: 1, op: 'gte', data: lo }, { kind: 'cmp', sreg: 1, op: 'lte', data: hi });
      return;
    }
    case 'set':
      bitsLoad(f, out);
      if (s.mask !== undefined) out.push(bitwise(f.len, s.mask, zeros));
      out.push(...lookup(maskedKey(f, s), rhs.elems, s.op === 'neq'));
      return;
    default:
      throw new Error(`unreachable: ${rhs.k} for ${f.name}`);
  }
}

function linearizeStmt(st: Exclude<Stmt, MatchStmt>, natFamily: Family | undefined, out: Expr[]): void {
  switch (st.t) {
    case 'expr':
      out.push(...st.exprs.map((e) => ({ ...e })));
      return;
    case 'counter': {
      const c: Expr = { kind: 'counter' };
      if (st.packets !== undefined) { c.packets = st.packets; c.bytes = st.bytes; }
      out.push(c);
      return;
    }
    case 'verdict':
      out.push(st.chain !== undefined
        ? { kind: 'immediate', dreg: 0, verdict: st.verdict, chain: st.chain }
        : { kind: 'immediate', dreg: 0, verdict: st.verdict });
      return;
    case 'masq':
    case 'redir': {
      const e: MasqExpr | RedirExpr = { kind: st.t };
      let flags = st.flags;
      if (st.port) {
        out.push({ kind: 'immediate', dreg: 1, data: u16Be(st.port.lo) });
        if (st.port.hi !== undefined) out.push({ kind: 'immediate', dreg: 2, data: u16Be(st.port.hi) });
        flags |= NAT_RANGE.PROTO_SPECIFIED;
        e.regProtoMin = 1;
        e.regProtoMax = st.port.hi !== undefined ? 2 : 1;
      }
      if (flags) e.flags = flags;
      out.push(e);
      return;
    }
    case 'nat': {
      const e: Expr = { kind: 'nat', type: st.type, family: natFamily! };
      if (st.concat) {
        // `ip addr . port to A . P`: the concatenation's registers, the port in the 32-bit register
        // after the address (reg 9), as nft's netlink_gen_nat_stmt does for STMT_NAT_F_CONCAT
        out.push({ kind: 'immediate', dreg: 1, data: st.addr!.lo }, { kind: 'immediate', dreg: 9, data: u16Be(st.port!.lo) });
        Object.assign(e, { regAddrMin: 1, regAddrMax: 1, regProtoMin: 9, regProtoMax: 9,
          flags: st.flags | NAT_RANGE.MAP_IPS | NAT_RANGE.PROTO_SPECIFIED });
        out.push(e);
        return;
      }
      let reg = 1;
      let flags = st.flags;
      if (st.addr) {
        out.push({ kind: 'immediate', dreg: reg, data: st.addr.lo });
        e.regAddrMin = reg;
        e.regAddrMax = reg;
        reg++;
        if (st.addr.hi !== undefined) {
          out.push({ kind: 'immediate', dreg: reg, data: st.addr.hi });
          e.regAddrMax = reg;
          reg++;
        }
        flags |= NAT_RANGE.MAP_IPS;
      }
      if (st.port) {
        out.push({ kind: 'immediate', dreg: reg, data: u16Be(st.port.lo) });
        e.regProtoMin = reg;
        e.regProtoMax = reg;
        reg++;
        if (st.port.hi !== undefined) {
          out.push({ kind: 'immediate', dreg: reg, data: u16Be(st.port.hi) });
          e.regProtoMax = reg;
        }
        flags |= NAT_RANGE.PROTO_SPECIFIED;
      }
      e.flags = flags;
      out.push(e);
      return;
    }
    case 'markset': {
      if (st.value !== undefined) {
        out.push({ kind: 'immediate', dreg: 1, data: u32Host(st.value) });
      } else {
        out.push(st.src === 'ct' ? { kind: 'ct', key: 'mark', dreg: 1 } : { kind: 'meta', key: 'mark', dreg: 1 });
        if (st.binop !== undefined) {
          const v = st.operand! >>> 0;
          const [mask, xor] = st.binop === 'and' ? [v, 0] : st.binop === 'or' ? [~v >>> 0, v] : [0xffffffff, v];
          out.push(bitwise(4, u32Host(mask), u32Host(xor)));
        }
        if (st.shift) out.push({ kind: 'bitwise', sreg: 1, dreg: 1, len: 4, op: st.shift.op, data: u32Host(st.shift.n) });
      }
      out.push(st.target === 'ct' ? { kind: 'ct', key: 'mark', sreg: 1 } : { kind: 'meta', key: 'mark', sreg: 1 });
      return;
    }
  }
}

/**
 * Queues a compiled rule on a batch: its anonymous sets first, then the rule
 * (`extra` may carry position/handle for insert or replace).
 */
export function queueRule(batch: Batch, rule: CompiledRule, where: { family: Family; table: string; chain: string },
  verb: 'add' | 'insert' = 'add', extra: { position?: number } = {}): void {
  for (const s of rule.sets) batch.add('set', { ...s, family: where.family, table: where.table });
  queueBound(batch, rule, where);
  const r = { family: where.family, table: where.table, chain: where.chain, exprs: rule.exprs, ...extra,
    ...(rule.userdata !== undefined ? { userdata: rule.userdata } : {}) };
  if (verb === 'insert') batch.insert('rule', r);
  else batch.add('rule', r);
}

/**
 * Queues a compiled rule's bound chains and their rules (after its anonymous sets, before the rule),
 * as nft adds them: the chain by id with flags BINDING and no name, each rule by the chain's id.
 */
export function queueBound(batch: Batch, rule: CompiledRule, where: { family: Family; table: string }): void {
  if (!rule.bound) return;
  const { family, table } = where;
  for (const b of rule.bound) {
    batch.push({ verb: 'add', object: 'chain', family, table, id: b.id!, flags: CHAIN_F.BINDING });
    for (const r of b.rules) {
      batch.push({ verb: 'add', object: 'rule', family, table, chainId: b.id!, exprs: r.exprs,
        ...(r.userdata !== undefined ? { userdata: r.userdata } : {}) });
    }
  }
}

/** `counter quota 100 mbytes` into its expressions; a RuleSyntaxError (with the column in `text`) if it is not such statements. */
export function compileStatements(text: string, family: Family): StatefulExpr[] {
  const exprs = compileRule(text, { family, table: 'set', chain: 'set' }).exprs;
  const bad = exprs.find((e) => !isStateful(e));
  if (bad || exprs.length === 0) {
    throw new RuleSyntaxError(text, 1, text.split(/\s/)[0] ?? '', 'counter, limit, quota or ct count',
      'a set holds only stateful statements');
  }
  if (exprs.length > MAX_STATEFUL_EXPRS) {
    throw new RuleSyntaxError(text, 1, text, `at most ${MAX_STATEFUL_EXPRS} statements`, `${exprs.length} statements (the kernel keeps at most ${MAX_STATEFUL_EXPRS} per element)`);
  }
  return exprs as StatefulExpr[];
}
