/**
 * Desired state from nft's own file syntax, the two forms `nft -f` takes:
 * the block form `nft list table|ruleset` prints (`table ip t { chain c {
 * type nat hook postrouting priority srcnat; policy accept; RULE … } }`)
 * and the command form knftables and kube-proxy emit (`add table ip t`,
 * `add chain ip t c { … }`, `add rule ip t c RULE`). The reader produces
 * the same raw document the YAML path gets from the yaml package (tables,
 * chains, rule texts) plus a position for every node, so both paths share
 * one validator and every error says file:line:column.
 *
 * Named sets and maps come as `set`/`map` blocks in a table and as `add
 * set|map` and `add element` commands; they become the table's `sets` and
 * `maps` with their elements as nft element texts (src/config/sets.ts
 * parses those). `include` and `define` are expanded first
 * (src/config/nftexpand.ts). Everything outside what the config can hold (table
 * flags but dormant, stateful objects, netdev devices, …) is refused at its
 * position, never dropped: nfkeeper would otherwise keep a table that is not
 * the one the file describes.
 */
import { ConfigError } from '../base/errors.js';
import { expandNft, type Expanded } from './nftexpand.js';
import type { RawSet } from '../model/sets.js';
import type { RawObj } from '../model/stateful-objects.js';

/** The YAML schema's input shape (src/config/config.ts checks it). */
export interface RawChain {
  name: string;
  type?: string;
  hook?: string;
  priority?: number | string;
  policy?: string;
  comment?: string;
  rules: string[];
}
export interface RawTable {
  family: string;
  name: string;
  comment?: string;
  /** `flags dormant` (owner and persist are protect mode's). */
  flags?: string[];
  sets: RawSet[];
  maps: RawSet[];
  /** Named stateful objects (src/config/stateful-objects.ts); absent when the file declares none. */
  objects?: RawObj[];
  chains: RawChain[];
}
export interface RawDocument {
  tables: RawTable[];
}

export interface Position {
  line: number;
  col: number;
  /** The file it is in when that is not the config file itself (an included file). */
  file?: string;
}

export interface NftDocument {
  raw: RawDocument;
  /**
   * Where a node of `raw` was written: the path is the one zod reports
   * (['tables', 0, 'chains', 1, 'rules', 2]); `innerColumn` (1-based) is a
   * column inside a rule's text, as RuleSyntaxError reports it.
   */
  positionOf(path: readonly (string | number)[], innerColumn?: number): Position;
  /** The same node as an offset in the text read (with includes expanded): the order nodes were written in. */
  offsetOf(path: readonly (string | number)[]): number;
  /** The files its includes read, in order. */
  files: string[];
}

/** `elems`: a set's `{ … }` element list, kept whole (100,000 elements would be a million tokens). */
type TokKind = 'word' | 'string' | '{' | '}' | ';' | 'nl' | 'end' | 'elems';
interface Tok {
  kind: TokKind;
  text: string;
  start: number;
  end: number;
}

/*
 * The scanner's tokens are kept as numbers in typed arrays (kind, start, end),
 * not as objects: a big file (kube-proxy's at its largest) is millions of
 * tokens, and objects for them, alive until the whole file was read, kept the
 * garbage collector busy for much of the reading. The reader makes a Tok when it
 * looks at one (most tokens are inside rule texts, which it only skips over).
 */
const K_WORD = 0, K_STRING = 1, K_OPEN = 2, K_CLOSE = 3, K_SEMI = 4, K_NL = 5, K_END = 6, K_ELEMS = 7;
const KINDS: readonly TokKind[] = ['word', 'string', '{', '}', ';', 'nl', 'end', 'elems'];

/** Characters that end a word: space, tab, CR, LF, { } ; " # and backslash (which a word may still hold, see scan). */
const WORD_STOP = new Uint8Array(128);
for (const c of ' \t\r\n{};"#\\') WORD_STOP[c.charCodeAt(0)] = 1;

const FAMILIES = new Set(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);

class Reader {
  private kinds: Uint8Array;
  private starts: Int32Array;
  private ends: Int32Array;
  private n = 0;
  private i = 0;
  /** The last few Toks made, by token index (peek is called several times per token). */
  private readonly made: (Tok | undefined)[] = [undefined, undefined, undefined, undefined];
  /** Line start offsets, for offset → line:col; found when a position is first asked for. */
  private lineStarts: Int32Array | undefined;
  readonly raw: RawDocument = { tables: [] };
  /** Where nodes were written, by path joined with '.': all but chains and rules. */
  private readonly positions = new Map<string, number>();
  /** Rule text offset 0 → source offset, by path joined with '.', for what is not a rule (a set's type). */
  private readonly ruleStarts = new Map<string, number>();
  /**
   * Where each chain (and its name) was written, by table and chain index, and where each rule
   * starts, by table, chain and rule index: 30,000 chains and 60,000 rules as map entries
   * under joined paths cost more than reading them.
   */
  private readonly chainAt: number[][] = [];
  private readonly ruleAt: number[][][] = [];
  /** Where each element text of a set starts, by the set's path (a map entry per element costs too much at 100,000). */
  readonly elementStarts = new Map<string, number[]>();

  constructor(private readonly src: string, private readonly file: string, private readonly expanded?: Expanded) {
    // Room for a token per 8 characters to start with (kube-proxy's file has one per 10.5): grown
    // by doubling from 1,024, the arrays were copied 11 times at 10,000 services.
    const size = Math.max(1024, src.length >> 3);
    this.kinds = new Uint8Array(size);
    this.starts = new Int32Array(size);
    this.ends = new Int32Array(size);
    this.scan();
  }

  pos(offset: number): Position {
    if (this.expanded) return this.expanded.locate(offset);
    const ls = this.lineStarts ??= lineStartsOf(this.src);
    let lo = 0;
    let hi = ls.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (ls[mid]! <= offset) lo = mid; else hi = mid - 1;
    }
    return { line: lo + 1, col: offset - ls[lo]! + 1 };
  }

  fail(offset: number, reason: string): never {
    const p = this.pos(offset);
    throw new ConfigError(p.file ?? this.file, p.line, p.col, reason);
  }

  private push(kind: number, start: number, end: number): void {
    if (this.n === this.kinds.length) {
      const grow = <T extends Uint8Array | Int32Array>(a: T, b: T): T => { b.set(a); return b; };
      const size = this.n * 2;
      this.kinds = grow(this.kinds, new Uint8Array(size));
      this.starts = grow(this.starts, new Int32Array(size));
      this.ends = grow(this.ends, new Int32Array(size));
    }
    this.kinds[this.n] = kind;
    this.starts[this.n] = start;
    this.ends[this.n] = end;
    this.n++;
  }

  private scan(): void {
    const s = this.src;
    const len = s.length;
    let k = 0;
    while (k < len) {
      const c = s.charCodeAt(k);
      if (c === 32 || c === 9 || c === 13) { k++; continue; }
      if (c === 92 && s.charCodeAt(k + 1) === 10) { k += 2; continue; }  // line continuation
      if (c === 35) { const nl = s.indexOf('\n', k); k = nl < 0 ? len : nl; continue; }  // # comment
      if (c === 10) { this.push(K_NL, k, k + 1); k++; continue; }
      if (c === 123 && this.opensElements()) {
        const end = this.closingBrace(k);
        this.push(K_ELEMS, k, end + 1);
        k = end + 1;
        continue;
      }
      if (c === 123 || c === 125 || c === 59) {
        this.push(c === 123 ? K_OPEN : c === 125 ? K_CLOSE : K_SEMI, k, k + 1);
        k++;
        continue;
      }
      if (c === 34) {
        const j = s.indexOf('"', k + 1);
        const nl = s.indexOf('\n', k + 1);
        if (j < 0 || (nl >= 0 && nl < j)) this.fail(k, 'unterminated string');
        this.push(K_STRING, k, j + 1);
        k = j + 1;
        continue;
      }
      let j = k;
      for (;;) {
        for (let d = s.charCodeAt(j); j < len && (d >= 128 || WORD_STOP[d] === 0); d = s.charCodeAt(++j));
        // A backslash is part of a word unless it continues the line.
        if (s.charCodeAt(j) === 92 && s.charCodeAt(j + 1) !== 10) { j++; continue; }
        break;
      }
      this.push(K_WORD, k, j);
      k = j;
    }
    this.push(K_END, len, len);
  }

  /** The text of token `x`: a word as written, a string between its quotes. */
  private textOf(x: number): string {
    switch (this.kinds[x]) {
      case K_WORD: return this.src.slice(this.starts[x], this.ends[x]);
      case K_STRING: return this.src.slice(this.starts[x]! + 1, this.ends[x]! - 1);
      case K_OPEN: return '{';
      case K_CLOSE: return '}';
      case K_SEMI: return ';';
      case K_NL: return '\n';
      default: return '';
    }
  }

  /** Whether token `x`'s text is `text` (without making it). */
  private textIs(x: number, text: string): boolean {
    const k = this.kinds[x];
    if (k === K_WORD) return this.ends[x]! - this.starts[x]! === text.length && this.src.startsWith(text, this.starts[x]);
    if (k === K_STRING) return this.ends[x]! - this.starts[x]! - 2 === text.length && this.src.startsWith(text, this.starts[x]! + 1);
    return this.textOf(x) === text;
  }

  private tok(x: number): Tok {
    const m = this.made[x & 3];
    if (m !== undefined && m.start === this.starts[x] && m.kind === KINDS[this.kinds[x]!]) return m;
    const t: Tok = { kind: KINDS[this.kinds[x]!]!, text: this.textOf(x), start: this.starts[x]!, end: this.ends[x]! };
    this.made[x & 3] = t;
    return t;
  }

  /** Whether a `{` here opens elements: after `elements =`, or in an `add element …` command. */
  private opensElements(): boolean {
    const n = this.n;
    const kinds = this.kinds;
    if (n >= 2 && this.textIs(n - 1, '=') && this.textIs(n - 2, 'elements') && kinds[n - 2] === K_WORD) return true;
    let i = n - 1;
    while (i >= 0 && (kinds[i] === K_WORD || kinds[i] === K_STRING)) i--;
    return n - i > 2 && (this.textIs(i + 1, 'add') || this.textIs(i + 1, 'create')) && this.textIs(i + 2, 'element');
  }

  /** The `}` that closes the `{` at `k`, past strings and comments. */
  private closingBrace(k: number): number {
    const s = this.src;
    let depth = 0;
    for (let j = k; j < s.length; j++) {
      const c = s.charCodeAt(j);
      if (c === 34) { // "
        const q = s.indexOf('"', j + 1);
        const nl = s.indexOf('\n', j + 1);
        if (q < 0 || (nl >= 0 && nl < q)) this.fail(j, 'unterminated string');
        j = q;
      } else if (c === 35) { // #
        const nl = s.indexOf('\n', j);
        j = nl < 0 ? s.length : nl;
      } else if (c === 123) {
        depth++;
      } else if (c === 125 && --depth === 0) {
        return j;
      }
    }
    return this.fail(k, "the elements' '{' is never closed");
  }

  private peek(ahead = 0): Tok {
    return this.tok(Math.min(this.i + ahead, this.n - 1));
  }

  private kindAt(): number {
    return this.kinds[Math.min(this.i, this.n - 1)]!;
  }

  private next(): Tok {
    const t = this.peek();
    if (this.i < this.n - 1) this.i++;
    return t;
  }

  private skipSeparators(): void {
    for (let k = this.kindAt(); k === K_NL || k === K_SEMI; k = this.kindAt()) this.i++;
  }

  private word(what: string): Tok {
    const t = this.next();
    if (t.kind !== 'word' && t.kind !== 'string') this.fail(t.start, `expected ${what}, found ${describe(t)}`);
    return t;
  }

  private expect(kind: TokKind, what: string): Tok {
    const t = this.next();
    if (t.kind !== kind) this.fail(t.start, `expected ${what}, found ${describe(t)}`);
    return t;
  }

  /**
   * The end of a statement: a newline or `;` (or the end of the file). As in
   * nft, a statement inside braces needs one before the closing brace too:
   * `chain c { accept }` is a syntax error there, so it is one here.
   */
  private endStatement(): void {
    const t = this.peek();
    if (t.kind === 'nl' || t.kind === ';') { this.i++; return; }
    if (t.kind === 'end') return;
    this.fail(t.start, `expected a newline or ';' after the statement, found ${describe(t)}`);
  }

  /** The end of a set property: as endStatement, but nft also takes the set's closing brace. */
  private endProperty(): void {
    if (this.peek().kind === '}') return;
    this.endStatement();
  }

  private mark(path: (string | number)[], offset: number): void {
    this.positions.set(path.join('.'), offset);
  }

  read(): RawDocument {
    for (;;) {
      this.skipSeparators();
      const t = this.peek();
      if (t.kind === 'end') break;
      if (t.kind !== 'word') this.fail(t.start, `expected a command or 'table', found ${describe(t)}`);
      this.command();
    }
    return this.raw;
  }

  private command(): void {
    const t = this.next();
    switch (t.text) {
      case 'table': this.tableBlock(t, false); return;
      case 'add': case 'create': this.addCommand(t); return;
      case 'insert': this.ruleCommand(t, true); return;
      case 'flush': this.flushCommand(t); return;
      case 'delete': this.deleteCommand(t); return;
      default:
        this.fail(t.start, `'${t.text}' is not a command nfkeeper accepts here: ` +
          "use 'table', 'add', 'create', 'insert' or a leading 'flush ruleset' / 'flush table' / 'delete table'");
    }
  }

  /** `flush ruleset` and `flush table F N` mean nothing more: nfkeeper only writes its own tables. */
  private flushCommand(t: Tok): void {
    const what = this.word("'ruleset', 'table', 'chain', 'set' or 'map'");
    if (what.text === 'set' || what.text === 'map' || what.text === 'chain') {
      // `add set …` then `flush set …` then its elements: what kube-proxy's full sync writes. In a
      // file read as a whole it empties what the file gave the object so far.
      const ref = this.tableRef();
      const ti = this.findTable(ref.family, ref.name, ref.at, false);
      const name = this.word(`a ${what.text} name`);
      const table = this.raw.tables[ti]!;
      if (what.text === 'chain') {
        const ci = this.findChain(ti, name.text);
        if (ci < 0) this.fail(name.start, `chain ${name.text} is not declared before it is flushed`);
        table.chains[ci]!.rules = [];
      } else {
        const kind = what.text === 'set' ? 'sets' : 'maps';
        const si = table[kind].findIndex((x) => x.name === name.text);
        if (si < 0) this.fail(name.start, `${what.text} ${name.text} is not declared before it is flushed`);
        if (table[kind][si]!.elements) table[kind][si]!.elements = [];
        this.elementStarts.delete(['tables', ti, kind, si].join('.'));
      }
      this.endStatement();
      return;
    }
    if (this.raw.tables.length > 0) {
      this.fail(t.start, "'flush ruleset' and 'flush table' are accepted only at the top of the file, before any table: after one they would empty it");
    }
    if (what.text === 'table') this.tableRef();
    else if (what.text !== 'ruleset') this.fail(what.start, `only 'flush ruleset', 'flush table', 'flush chain', 'flush set' and 'flush map' are accepted, not 'flush ${what.text}'`);
    this.endStatement();
  }

  /**
   * `delete table [F] N` before the tables, as Debian's sets_and_maps.nft starts: the tables a
   * config describes replace what the kernel had under their names anyway.
   */
  private deleteCommand(t: Tok): void {
    const what = this.word("'table'");
    if (what.text !== 'table') this.fail(what.start, `only 'delete table' is accepted (at the top of the file), not 'delete ${what.text}'`);
    if (this.raw.tables.length > 0) {
      this.fail(t.start, "'delete table' is accepted only at the top of the file, before any table: a desired state does not delete what it declares");
    }
    this.tableRef();
    this.endStatement();
  }

  private addCommand(verb: Tok): void {
    const obj = this.word('an object (table, chain, rule)');
    switch (obj.text) {
      case 'table': this.tableBlock(obj, true); return;
      case 'chain': this.chainCommand(); return;
      case 'rule':
        if (verb.text !== 'add') this.fail(verb.start, `'${verb.text} rule' is not an nft command; use 'add rule'`);
        this.i--;
        this.ruleCommand(verb, false);
        return;
      case 'set': case 'map': {
        const ref = this.tableRef();
        const ti = this.findTable(ref.family, ref.name, ref.at, false);
        const name = this.word(`a ${obj.text} name`);
        this.setBlock(ti, obj.text as 'set' | 'map', name);
        this.endStatement();
        return;
      }
      case 'element': this.elementCommand(verb); return;
      case 'counter': case 'quota': case 'limit': case 'ct': case 'secmark': case 'synproxy': {
        const type = this.objectType(obj);
        const ref = this.tableRef();
        const ti = this.findTable(ref.family, ref.name, ref.at, false);
        this.objectDecl(ti, obj, type, true);
        this.endStatement();
        return;
      }
      case 'flowtable':
        this.fail(obj.start, unsupportedObject(obj.text));
      default: this.fail(obj.start, `'${verb.text} ${obj.text}': expected table, chain, set, map, element or rule`);
    }
  }

  /** `[family] name`, nft's default family being ip. */
  private tableRef(): { family: string; name: string; at: number; nameAt: number } {
    const a = this.word('a table name');
    let family = 'ip';
    let name = a;
    if (a.kind === 'word' && FAMILIES.has(a.text) && (this.peek().kind === 'word' || this.peek().kind === 'string')) {
      family = a.text;
      name = this.next();
    }
    return { family, name: name.text, at: a.start, nameAt: name.start };
  }

  private findTable(family: string, name: string, at: number, create: boolean, nameAt = at): number {
    const tables = this.raw.tables;
    let ti = -1;
    for (let k = 0; k < tables.length; k++) {
      if (tables[k]!.family === family && tables[k]!.name === name) { ti = k; break; }
    }
    if (ti < 0) {
      if (!create) this.fail(at, `table ${family} ${name} is not declared before its use; add it first ('add table ${family} ${name}')`);
      ti = this.raw.tables.push({ family, name, sets: [], maps: [], chains: [] }) - 1;
      this.mark(['tables', ti], at);
      this.mark(['tables', ti, 'family'], at);
      this.mark(['tables', ti, 'name'], nameAt);
    }
    return ti;
  }

  /** `table [F] N [{ … }]` (and `add table …`): declares the table, or adds to it. */
  private tableBlock(kw: Tok, command: boolean): void {
    const ref = this.tableRef();
    const ti = this.findTable(ref.family, ref.name, command ? ref.at : kw.start, true, ref.nameAt);
    if (this.peek().kind === '{') {
      this.next();
      for (;;) {
        this.skipSeparators();
        const t = this.peek();
        if (t.kind === '}') { this.next(); break; }
        if (t.kind === 'end') this.fail(kw.start, `table ${ref.family} ${ref.name}: missing '}'`);
        const w = this.word("'chain', 'set', 'map' or '}'");
        switch (w.text) {
          case 'chain': {
            const name = this.word('a chain name');
            this.chainBody(ti, name, true);
            this.endStatement();
            break;
          }
          case 'set': case 'map': {
            const name = this.word(`a ${w.text} name`);
            this.setBlock(ti, w.text as 'set' | 'map', name);
            this.endStatement();
            break;
          }
          case 'counter': case 'quota': case 'limit': case 'ct': case 'secmark': case 'synproxy':
            this.objectDecl(ti, w, this.objectType(w), false);
            this.endStatement();
            break;
          case 'flowtable':
            this.fail(w.start, unsupportedObject(w.text));
          case 'flags': this.tableFlags(ti, w); break;
          case 'comment': {
            const table = this.raw.tables[ti]!;
            if (table.comment !== undefined) this.fail(w.start, `table ${ref.family} ${ref.name}: 'comment' given twice`);
            const v = this.next();
            if (v.kind !== 'string') this.fail(v.start, 'comment takes a quoted string');
            table.comment = v.text;
            this.mark(['tables', ti, 'comment'], v.start);
            this.endStatement();
            break;
          }
          default: this.fail(w.start, `'${w.text}' is not something a table holds; expected 'chain', 'set' or 'map'`);
        }
      }
    }
    this.endStatement();
  }

  /** The set or map `name` of table ti: its index in `sets`/`maps`, declared here if new. */
  private setIndex(ti: number, kind: 'sets' | 'maps', name: Tok, declare: boolean): number {
    const table = this.raw.tables[ti]!;
    const other = kind === 'sets' ? 'maps' : 'sets';
    if (table[other].some((x) => x.name === name.text)) {
      this.fail(name.start, `${name.text} is already declared as a ${other === 'sets' ? 'set' : 'map'}`);
    }
    let si = table[kind].findIndex((x) => x.name === name.text);
    if (si < 0) {
      if (!declare) return -1;
      si = table[kind].push({ name: name.text }) - 1;
      this.mark(['tables', ti, kind, si], name.start);
      this.mark(['tables', ti, kind, si, 'name'], name.start);
    }
    return si;
  }

  /**
   * `set|map NAME { type …; flags …; timeout …; size …; policy …; auto-merge;
   * comment "…"; elements = { … } }`. Given again (as `add set` may be), the
   * declaration must say the same; elements are added to it.
   */
  private setBlock(ti: number, what: 'set' | 'map', name: Tok): void {
    const kind = what === 'set' ? 'sets' : 'maps';
    const existed = this.raw.tables[ti]![kind].some((x) => x.name === name.text);
    const si = this.setIndex(ti, kind, name, true);
    const set = this.raw.tables[ti]![kind][si]!;
    const path = ['tables', ti, kind, si];
    this.expect('{', "'{'");
    const given: RawSet = { name: name.text };
    for (;;) {
      this.skipSeparators();
      const t = this.peek();
      if (t.kind === '}') { this.next(); break; }
      if (t.kind === 'end') this.fail(name.start, `${what} ${name.text}: missing '}'`);
      const w = this.word(`a ${what} property (type, typeof, flags, timeout, size, policy, elements, …) or '}'`);
      const once = (k: keyof RawSet) => {
        if (given[k] !== undefined) this.fail(w.start, `${what} ${name.text}: '${w.text}' given twice`);
      };
      switch (w.text) {
        case 'type': case 'typeof': {
          if (given.type !== undefined || given.typeof !== undefined) this.fail(w.start, `${what} ${name.text}: only one type or typeof`);
          const at = this.peek().start;
          const text = this.restOfStatement(`the ${w.text}`);
          given[w.text] = text;
          this.mark([...path, w.text], at);
          this.ruleStarts.set([...path, w.text].join('.'), at);
          break;
        }
        case 'flags': {
          once('flags');
          const at = this.peek().start;
          const text = this.restOfStatement('flags');
          const flags = text.split(/\s*,\s*/);
          for (const f of flags) {
            if (!['constant', 'interval', 'timeout', 'dynamic'].includes(f)) {
              this.fail(at + text.indexOf(f), `'${f}' is not a set flag nfkeeper accepts (constant, interval, timeout, dynamic)`);
            }
          }
          given.flags = flags as RawSet['flags'];
          this.mark([...path, 'flags'], at);
          break;
        }
        case 'timeout': case 'gc-interval': {
          once(w.text);
          const v = this.word('a time');
          given[w.text] = v.text;
          this.mark([...path, w.text], v.start);
          this.endProperty();
          break;
        }
        case 'size': {
          once('size');
          const v = this.word('a number');
          if (!/^\d+$/.test(v.text)) this.fail(v.start, `size takes a number, not '${v.text}'`);
          given.size = Number(v.text);
          this.mark([...path, 'size'], v.start);
          this.endProperty();
          break;
        }
        case 'policy': {
          once('policy');
          const v = this.word("'performance' or 'memory'");
          given.policy = v.text as RawSet['policy'];
          this.mark([...path, 'policy'], v.start);
          this.endProperty();
          break;
        }
        case 'auto-merge':
          given['auto-merge'] = true;
          this.mark([...path, 'auto-merge'], w.start);
          this.endProperty();
          break;
        case 'comment': {
          once('comment');
          const v = this.next();
          if (v.kind !== 'string') this.fail(v.start, 'comment takes a quoted string');
          given.comment = v.text;
          this.mark([...path, 'comment'], v.start);
          this.endProperty();
          break;
        }
        case 'elements': {
          const eq = this.word("'='");
          if (eq.text !== '=') this.fail(eq.start, `expected '=', found '${eq.text}'`);
          this.elementList(ti, kind, si);
          this.endProperty();
          break;
        }
        case 'counter': case 'quota': case 'limit': case 'ct': {
          // a statement each element gets; nft lists several on one line (`counter quota 100 mbytes`)
          this.i--;
          const at = this.peek().start;
          const text = this.restOfStatement(`a ${w.text} statement`);
          if (given.statements === undefined) this.mark([...path, 'statements'], at);
          given.statements = given.statements === undefined ? text : `${given.statements} ${text}`;
          break;
        }
        case 'last':
          this.fail(w.start, `${what} ${name.text}: the 'last' statement on a set is not supported`);
        default: this.fail(w.start, `'${w.text}' is not a property of a ${what}`);
      }
    }
    // A repeated declaration (`add set` of a set already declared) adds its elements only.
    for (const k of Object.keys(given) as (keyof RawSet)[]) {
      if (k === 'name') continue;
      const before = set[k];
      if (existed && before !== undefined && JSON.stringify(before) !== JSON.stringify(given[k])) {
        this.fail(name.start, `${what} ${name.text} is declared again with a different ${k}`);
      }
      (set as Record<string, unknown>)[k] = given[k];
    }
  }

  /** An object's type after its first word: `counter`, or `ct helper` with the word after `ct`. */
  private objectType(kw: Tok): string {
    if (kw.text !== 'ct') return kw.text;
    const k = this.word("'helper', 'timeout' or 'expectation' after 'ct'");
    if (k.text !== 'helper' && k.text !== 'timeout' && k.text !== 'expectation') {
      this.fail(k.start, `expected 'helper', 'timeout' or 'expectation' after 'ct', found ${describe(k)}`);
    }
    return `ct ${k.text}`;
  }

  /**
   * A stateful object: `counter|quota|limit|synproxy|secmark NAME { BODY }` or `ct helper|timeout|expectation
   * NAME { BODY }` in a table, and as a command also without braces (`add counter ip t c`, `add quota ip t
   * q over 1 mbytes`). The body is kept as written (src/config/stateful-stateful-objects.ts parses it), its `comment "…"` apart.
   */
  private objectDecl(ti: number, kw: Tok, type: string, command: boolean): void {
    const name = this.word(`a ${type} name`);
    const table = this.raw.tables[ti]!;
    const objects = table.objects ??= [];
    const oi = objects.length;
    const path = ['tables', ti, 'objects', oi];
    const raw: RawObj = { name: name.text, type: type as RawObj['type'] };
    this.mark(path, kw.start);
    this.mark([...path, 'name'], name.start);
    this.mark([...path, 'type'], kw.start);
    let spec = '';
    let specStart = this.peek().start;
    if (this.peek().kind === '{') {
      const open = this.next();
      specStart = open.end;
      let last = open.end;
      const blanks: [number, number][] = [];
      for (let depth = 0; ;) {
        const t = this.next();
        if (t.kind === 'end') this.fail(open.start, `${type} ${name.text}: missing '}'`);
        if (t.kind === '{') depth++;
        if (t.kind === '}' && depth-- === 0) { last = t.start; break; }
        if (t.kind === 'word' && t.text === 'comment' && depth === 0) {
          const v = this.next();
          if (v.kind !== 'string') this.fail(v.start, 'comment takes a quoted string');
          if (raw.comment !== undefined) this.fail(t.start, `${type} ${name.text}: 'comment' given twice`);
          raw.comment = v.text;
          this.mark([...path, 'comment'], v.start);
          blanks.push([t.start, v.end]);
        }
      }
      spec = this.src.slice(specStart, last);
      for (const [a, b] of blanks) spec = spec.slice(0, a - specStart) + ' '.repeat(b - a) + spec.slice(b - specStart);
    } else if (command) {
      const first = this.peek();
      let end = first.start;
      while (this.peek().kind === 'word' || this.peek().kind === 'string') end = this.next().end;
      spec = this.src.slice(first.start, end);
      specStart = first.start;
    } else {
      this.fail(this.peek().start, `expected '{' after ${type} ${name.text}, found ${describe(this.peek())}`);
    }
    // (newlines and `;` separate the body's statements; stateful-objects.ts reads both, columns kept)
    spec = spec.replace(/#[^\n]*/g, (m) => ' '.repeat(m.length)).trim() === '' ? '' : spec.replace(/#[^\n]*/g, (m) => ' '.repeat(m.length));
    if (spec !== '') {
      raw.spec = spec;
      this.ruleStarts.set([...path, 'spec'].join('.'), specStart);
    }
    objects.push(raw);
  }

  /** The words up to the end of the statement, as written (for a type or typeof). */
  private restOfStatement(what: string): string {
    const first = this.peek();
    let last: Tok | undefined;
    while (this.peek().kind === 'word' || this.peek().kind === 'string') last = this.next();
    if (!last) this.fail(first.start, `expected ${what}, found ${describe(first)}`);
    this.endProperty();
    return this.src.slice(first.start, last.end).replace(/\\\n/g, '  ');
  }

  /**
   * `{ e, e, … }`: nft element texts, split at commas outside quotes, each
   * with its position so an error in one points into the file.
   */
  private elementList(ti: number, kind: 'sets' | 'maps', si: number): void {
    const list0 = this.expect('elems', "'{' and the elements");
    const open = { end: list0.start + 1 };
    const body = blank(this.src.slice(open.end, list0.end - 1) + ' ');
    const set = this.raw.tables[ti]![kind][si]!;
    const list = set.elements ??= [];
    const setPath = ['tables', ti, kind, si].join('.');
    let starts = this.elementStarts.get(setPath);
    if (!starts) this.elementStarts.set(setPath, starts = []);
    const at = starts;
    // Elements are split at commas outside quotes.
    const re = /"[^"]*"|,/g;
    let start = 0;
    const push = (end: number) => {
      const piece = body.slice(start, end);
      const text = piece.trim();
      if (text !== '') {
        at.push(open.end + start + (piece.length - piece.trimStart().length));
        list.push(text);
      } else if (end < body.length - 1) {
        this.fail(open.end + end, 'an empty element between commas');
      }
    };
    let m: RegExpExecArray | null;
    while ((m = re.exec(body)) !== null) {
      if (m[0] !== ',') continue;
      push(m.index);
      start = m.index + 1;
    }
    push(body.length);
    if (list.length === 0) this.mark(['tables', ti, kind, si, 'elements'], list0.start);
  }

  /** `add element [F] T NAME { … }`: elements for a set or map declared before. */
  private elementCommand(verb: Tok): void {
    if (verb.text !== 'add') this.fail(verb.start, `'${verb.text} element': use 'add element'`);
    const ref = this.tableRef();
    const ti = this.findTable(ref.family, ref.name, ref.at, false);
    const name = this.word('a set or map name');
    const table = this.raw.tables[ti]!;
    const kind = table.sets.some((x) => x.name === name.text) ? 'sets' : table.maps.some((x) => x.name === name.text) ? 'maps' : undefined;
    if (!kind) this.fail(name.start, `set ${name.text} is not declared before its elements; add it first ('add set ${ref.family} ${ref.name} ${name.text} { type …; }')`);
    this.elementList(ti, kind, table[kind].findIndex((x) => x.name === name.text));
    this.endStatement();
  }

  /** `add chain [F] T N [{ … }]`. */
  private chainCommand(): void {
    const ref = this.tableRef();
    const ti = this.findTable(ref.family, ref.name, ref.at, false);
    const name = this.word('a chain name');
    this.chainBody(ti, name, this.peek().kind === '{');
    this.endStatement();
  }

  /**
   * A chain's index by table and name. A map, not a search of the chain list: kube-proxy's file at
   * 10,000 services has 30,000 chains and 60,000 `add rule` lines naming them, and a search per
   * line made reading it quadratic (minutes).
   */
  private readonly chainIndexes = new Map<number, Map<string, number>>();

  private findChain(ti: number, name: string): number {
    // kube-proxy writes a chain's rules right after the chain: the same name as last time is
    // compared, not hashed again (every name is a new string from the source)
    const last = this.lastChain;
    if (last.ti === ti && last.name === name) return last.ci;
    const ci = this.chainIndexes.get(ti)?.get(name) ?? -1;
    if (ci >= 0) { last.ti = ti; last.name = name; last.ci = ci; }
    return ci;
  }

  private readonly lastChain = { ti: -1, name: '', ci: -1 };

  private chainIndex(ti: number, name: Tok): number {
    const table = this.raw.tables[ti]!;
    let ci = this.findChain(ti, name.text);
    if (ci < 0) {
      ci = table.chains.push({ name: name.text, rules: [] }) - 1;
      if (!this.chainIndexes.has(ti)) this.chainIndexes.set(ti, new Map());
      this.chainIndexes.get(ti)!.set(name.text, ci);
      // the chain and its name: ['tables', ti, 'chains', ci] and [… 'name']
      (this.chainAt[ti] ??= [])[ci] = name.start;
      (this.ruleAt[ti] ??= [])[ci] = [];
    }
    return ci;
  }

  /** A chain's `{ type …; policy …; RULE … }`, or nothing when `braces` is false. */
  private chainBody(ti: number, name: Tok, braces: boolean): void {
    const ci = this.chainIndex(ti, name);
    if (!braces) return;
    this.expect('{', "'{'");
    const chain = this.raw.tables[ti]!.chains[ci]!;
    const path = ['tables', ti, 'chains', ci];
    for (;;) {
      this.skipSeparators();
      const t = this.peek();
      if (t.kind === '}') { this.next(); return; }
      if (t.kind === 'end') this.fail(name.start, `chain ${name.text}: missing '}'`);
      if (t.kind === 'word' && t.text === 'type') {
        this.next();
        if (chain.type !== undefined) this.fail(t.start, `chain ${name.text}: 'type' given twice`);
        const type = this.word('a chain type (filter, nat, route)');
        chain.type = type.text;
        this.mark([...path, 'type'], type.start);
        const hk = this.word("'hook'");
        if (hk.text !== 'hook') this.fail(hk.start, `expected 'hook', found '${hk.text}'`);
        const hook = this.word('a hook');
        chain.hook = hook.text;
        this.mark([...path, 'hook'], hook.start);
        const dev = this.peek();
        if (dev.kind === 'word' && (dev.text === 'device' || dev.text === 'devices')) {
          this.fail(dev.start, 'netdev devices are not supported (nfkeeper keeps ip, ip6 and inet tables)');
        }
        const pr = this.word("'priority'");
        if (pr.text !== 'priority') this.fail(pr.start, `expected 'priority', found '${pr.text}'`);
        chain.priority = this.priority([...path, 'priority']);
        this.endStatement();
        continue;
      }
      if (t.kind === 'word' && t.text === 'policy') {
        this.next();
        const p = this.word("'accept' or 'drop'");
        chain.policy = p.text;
        this.mark([...path, 'policy'], p.start);
        this.endStatement();
        continue;
      }
      if (t.kind === 'word' && t.text === 'comment' && this.peek(1).kind === 'string' && this.isPropertyLine()) {
        this.next();
        if (chain.comment !== undefined) this.fail(t.start, `chain ${name.text}: 'comment' given twice`);
        const v = this.next();
        chain.comment = v.text;
        this.mark([...path, 'comment'], v.start);
        this.endStatement();
        continue;
      }
      if (t.kind === 'word' && t.text === 'comment' && this.isPropertyLine()) this.fail(this.peek(1).start, 'comment takes a quoted string');
      if (t.kind === 'word' && t.text === 'flags' && this.isPropertyLine()) this.fail(t.start, 'chain flags are not supported yet');
      this.rule(ti, ci);
    }
  }

  /** A table's `flags dormant`: owner and persist are protect mode's, set by nfkeeper itself. */
  private tableFlags(ti: number, w: Tok): void {
    const table = this.raw.tables[ti]!;
    if (table.flags !== undefined) this.fail(w.start, `table ${table.family} ${table.name}: 'flags' given twice`);
    const at = this.peek().start;
    const text = this.restOfStatement('flags');
    const flags = text.split(/\s*,\s*/);
    for (const f of flags) {
      if (f === 'owner' || f === 'persist') {
        this.fail(at + text.indexOf(f), `table flag '${f}' is protect mode's: nfkeeper sets owner and persist itself when protect is on (docs/config.md, protect)`);
      }
      if (f !== 'dormant') this.fail(at + text.indexOf(f), `'${f}' is not a table flag nfkeeper accepts (dormant)`);
    }
    table.flags = ['dormant'];
    this.mark(['tables', ti, 'flags'], at);
  }

  /** `comment "x";` inside a chain is a chain comment; `comment` never starts a rule on its own. */
  private isPropertyLine(): boolean {
    const after = this.peek(2);
    return after.kind === ';' || after.kind === 'nl' || after.kind === '}';
  }

  /** `srcnat`, `100`, `-150`, `srcnat + 10`, `filter - 5`: as the config's priority. */
  private priority(path: (string | number)[]): number | string {
    const parts: Tok[] = [];
    while (this.peek().kind === 'word') parts.push(this.next());
    if (parts.length === 0) this.fail(this.peek().start, `expected a priority, found ${describe(this.peek())}`);
    this.mark(path, parts[0]!.start);
    const text = parts.map((p) => p.text).join(' ');
    if (/^[+-]?\d+$/.test(text)) {
      const n = Number(text);
      if (!Number.isSafeInteger(n)) this.fail(parts[0]!.start, `priority ${text} is out of range`);
      return n;
    }
    return text;
  }

  /** `add rule [F] T C RULE` or `insert rule [F] T C RULE` (insert prepends, as in nft). */
  private ruleCommand(verb: Tok, insert: boolean): void {
    const obj = this.word("'rule'");
    if (obj.text !== 'rule') this.fail(obj.start, `'${verb.text} ${obj.text}': only rules can be ${verb.text}ed`);
    const ref = this.tableRef();
    const ti = this.findTable(ref.family, ref.name, ref.at, false);
    const name = this.word('a chain name');
    const ci = this.findChain(ti, name.text);
    if (ci < 0) this.fail(name.start, `chain ${name.text} is not declared before its rules; add it first ('add chain ${ref.family} ${ref.name} ${name.text}')`);
    const t = this.peek();
    if (t.kind === 'word' && (t.text === 'position' || t.text === 'handle' || t.text === 'index')) {
      this.fail(t.start, `'${t.text}' refers to what a kernel holds; a desired state lists rules in order`);
    }
    this.rule(ti, ci, insert);
  }

  /**
   * One rule: every token up to a newline or `;` outside braces (anonymous
   * sets may span lines), or the chain's closing brace. The rule's text is
   * the source with newlines and comments blanked, so a column in the text
   * is an offset in the file.
   */
  private rule(ti: number, ci: number, insert = false): void {
    // By token index: the tokens of a rule are only skipped over here (its text is the source).
    const last0 = this.n - 1;
    const firstIdx = Math.min(this.i, last0);
    const kinds = this.kinds;
    let depth = 0;
    let lastIdx = firstIdx;
    for (;;) {
      const k = kinds[Math.min(this.i, last0)]!;
      if (k === K_END) {
        if (depth > 0) this.fail(this.starts[firstIdx]!, "the rule's '{' is never closed");
        break;
      }
      if (depth === 0 && (k === K_NL || k === K_SEMI || k === K_CLOSE)) break;
      if (k === K_OPEN) depth++;
      if (k === K_CLOSE) depth--;
      lastIdx = this.i;
      this.i++;  // not the end token, so not the last
    }
    const firstKind = kinds[firstIdx]!;
    if (lastIdx === firstIdx && firstKind !== K_WORD && firstKind !== K_STRING) {
      this.fail(this.starts[firstIdx]!, `expected a rule, found ${describe(this.tok(firstIdx))}`);
    }
    const start = this.starts[firstIdx]!;
    const text = blank(this.src.slice(start, this.ends[lastIdx]));
    const chain = this.raw.tables[ti]!.chains[ci]!;
    const at = this.ruleAt[ti]![ci]!;
    // (After a `flush chain` the array keeps the flushed rules' positions past the end, as a map would.)
    if (insert) {
      // The recorded positions of the rules after it move with them.
      for (let r = chain.rules.length - 1; r >= 0; r--) at[r + 1] = at[r]!;
      chain.rules.unshift(text);
      at[0] = start;
    } else {
      at[chain.rules.length] = start;
      chain.rules.push(text);
    }
    this.endStatement();
  }

  /**
   * Where the node at path[0..n) was written, if it was recorded: chains and rules from their
   * arrays, the rest from the map.
   */
  recorded(path: readonly (string | number)[], n: number): number | undefined {
    if (n >= 4 && n <= 6 && path[0] === 'tables' && path[2] === 'chains') {
      const chain = this.chainAt[path[1] as number]?.[path[3] as number];
      if (n === 4 || (n === 5 && path[4] === 'name')) return chain;
      if (n === 6 && path[4] === 'rules') return this.ruleAt[path[1] as number]?.[path[3] as number]?.[path[5] as number];
    }
    return this.positions.get(path.slice(0, n).join('.'));
  }

  /** Where offset 0 of a rule's (or a set type's) text is in the source. */
  textStart(path: readonly (string | number)[]): number | undefined {
    if (path.length === 6 && path[0] === 'tables' && path[2] === 'chains' && path[4] === 'rules') {
      return this.ruleAt[path[1] as number]?.[path[3] as number]?.[path[5] as number];
    }
    return this.ruleStarts.get(path.join('.'));
  }
}

/** Offsets where lines start. */
function lineStartsOf(src: string): Int32Array {
  // (counted first, then filled: a list of a million numbers grown by push() was garbage to collect)
  let n = 1;
  for (let k = src.indexOf('\n'); k >= 0; k = src.indexOf('\n', k + 1)) n++;
  const out = new Int32Array(n);
  n = 1;
  for (let k = src.indexOf('\n'); k >= 0; k = src.indexOf('\n', k + 1)) out[n++] = k + 1;
  return out;
}

const HAS_BLANKED = /[\r\n#\\]/;

/** Newlines, line continuations and comments become spaces, keeping every offset. */
function blank(text: string): string {
  // (most rules have none of them: the regex would find nothing)
  if (!HAS_BLANKED.test(text)) return text.trimEnd();
  if (HAS_BINDING.test(text)) return blankBinding(text);
  return text.replace(/"[^"\n]*"|#[^\n]*|\\\n|[\r\n]/g, (m) => (m[0] === '"' ? m : ' '.repeat(m.length))).trimEnd();
}

const HAS_BINDING = /\b(?:jump|goto)\s*\{/;

/**
 * blank() for a rule with a chain binding (`jump {` … `}` over lines, as nft lists it): a newline
 * directly inside the binding's braces ends one of its rules, so it becomes `;` (the rule
 * language's separator); elsewhere (an anonymous set over lines) a space, as blank() makes it.
 */
function blankBinding(text: string): string {
  const out: string[] = [];
  const braces: boolean[] = [];  // per open brace: whether it opens a binding
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      const j = text.indexOf('"', i + 1);
      const end = j < 0 || text.lastIndexOf('\n', j) > i ? i : j;
      out.push(text.slice(i, end + 1));
      i = end;
    } else if (c === '#') {
      let j = text.indexOf('\n', i);
      if (j < 0) j = text.length;
      out.push(' '.repeat(j - i));
      i = j - 1;
    } else if (c === '\\' && text[i + 1] === '\n') {
      out.push('  ');
      i++;
    } else if (c === '\n' || c === '\r') {
      out.push(braces[braces.length - 1] ? ';' : ' ');
    } else {
      if (c === '{') braces.push(/\b(?:jump|goto)\s*$/.test(text.slice(Math.max(0, i - 16), i)));
      else if (c === '}') braces.pop();
      out.push(c);
    }
  }
  return out.join('').trimEnd();
}

function describe(t: Tok): string {
  switch (t.kind) {
    case 'nl': return 'the end of the line';
    case 'end': return 'the end of the file';
    case 'string': return `"${t.text}"`;
    case 'elems': return "'{'";
    default: return `'${t.text}'`;
  }
}

function unsupportedObject(what: string): string {
  return `${what} objects are not supported`;
}

export interface ReadOptions {
  /** Directories `include "NAME"` searches before nft's default (/etc), as nft's `-I`. */
  includePath?: readonly string[];
  /** The longest text the includes and defines may expand to. */
  maxBytes?: number;
}

/**
 * Reads an nft file's text into the config's raw document, its includes and defines expanded
 * (src/config/nftexpand.ts). Throws ConfigError at the first problem.
 */
export function readNftFile(text: string, file = '<config>', options: ReadOptions = {}): NftDocument {
  const expanded = expandNft(text, file, { includePath: options.includePath, maxBytes: options.maxBytes ?? Infinity });
  const r = new Reader(expanded?.text ?? text, file, expanded);
  const raw = r.read();
  const offsetOf = (path: readonly (string | number)[], innerColumn?: number): number => {
    if (path.length >= 2 && path[path.length - 2] === 'elements') {
      const starts = r.elementStarts.get(path.slice(0, -2).join('.'));
      const at = starts?.[path[path.length - 1] as number];
      if (at !== undefined) return at + (innerColumn ?? 1) - 1;
    }
    const ruleStart = r.textStart(path);
    if (ruleStart !== undefined && innerColumn !== undefined) return ruleStart + innerColumn - 1;
    // The deepest recorded node on the path.
    for (let n = path.length; n > 0; n--) {
      const at = r.recorded(path, n);
      if (at !== undefined) return at;
    }
    return 0;
  };
  return {
    raw,
    positionOf: (path, innerColumn) => r.pos(offsetOf(path, innerColumn)),
    offsetOf: (path) => offsetOf(path),
    files: expanded?.files.slice(1) ?? [],
  };
}
