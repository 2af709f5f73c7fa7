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
 * parses those). Everything outside what the config can hold (table flags,
 * stateful objects, `define`, `include`, netdev devices, …) is refused at its
 * position, never dropped: nfkeeper would otherwise keep a table that is not
 * the one the file describes.
 */
import { ConfigError } from '../errors.js';
import type { RawSet } from './sets.js';

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
  sets: RawSet[];
  maps: RawSet[];
  chains: RawChain[];
}
export interface RawDocument {
  tables: RawTable[];
}

export interface Position {
  line: number;
  col: number;
}

export interface NftDocument {
  raw: RawDocument;
  /**
   * Where a node of `raw` was written: the path is the one zod reports
   * (['tables', 0, 'chains', 1, 'rules', 2]); `innerColumn` (1-based) is a
   * column inside a rule's text, as RuleSyntaxError reports it.
   */
  positionOf(path: readonly (string | number)[], innerColumn?: number): Position;
}

/** `elems`: a set's `{ … }` element list, kept whole (100,000 elements would be a million tokens). */
type TokKind = 'word' | 'string' | '{' | '}' | ';' | 'nl' | 'end' | 'elems';
interface Tok {
  kind: TokKind;
  text: string;
  start: number;
  end: number;
}

/** A run of word characters (the scanner's hot loop at 100,000 set elements). */
const WORD = /[^ \t\r\n{};"#\\]+/y;

const FAMILIES = new Set(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);

class Reader {
  private readonly toks: Tok[] = [];
  private i = 0;
  /** Line start offsets, for offset → line:col. */
  private readonly lineStarts: number[] = [0];
  readonly raw: RawDocument = { tables: [] };
  readonly positions = new Map<string, number>();
  /** Rule text offset 0 → source offset, by rule path. */
  readonly ruleStarts = new Map<string, number>();
  /** Where each element text of a set starts, by the set's path (a map entry per element costs too much at 100,000). */
  readonly elementStarts = new Map<string, number[]>();

  constructor(private readonly src: string, private readonly file: string) {
    for (let k = 0; k < src.length; k++) if (src.charCodeAt(k) === 10) this.lineStarts.push(k + 1);
    this.scan();
  }

  pos(offset: number): Position {
    let lo = 0;
    let hi = this.lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.lineStarts[mid]! <= offset) lo = mid; else hi = mid - 1;
    }
    return { line: lo + 1, col: offset - this.lineStarts[lo]! + 1 };
  }

  fail(offset: number, reason: string): never {
    const p = this.pos(offset);
    throw new ConfigError(this.file, p.line, p.col, reason);
  }

  private scan(): void {
    const s = this.src;
    let k = 0;
    while (k < s.length) {
      const c = s[k]!;
      if (c === ' ' || c === '\t' || c === '\r') { k++; continue; }
      if (c === '\\' && s[k + 1] === '\n') { k += 2; continue; }  // line continuation
      if (c === '#') { while (k < s.length && s[k] !== '\n') k++; continue; }
      if (c === '\n') { this.toks.push({ kind: 'nl', text: '\n', start: k, end: k + 1 }); k++; continue; }
      if (c === '{' && this.opensElements()) {
        const end = this.closingBrace(k);
        this.toks.push({ kind: 'elems', text: '', start: k, end: end + 1 });
        k = end + 1;
        continue;
      }
      if (c === '{' || c === '}' || c === ';') {
        this.toks.push({ kind: c, text: c, start: k, end: k + 1 });
        k++;
        continue;
      }
      if (c === '"') {
        const j = s.indexOf('"', k + 1);
        const nl = s.indexOf('\n', k + 1);
        if (j < 0 || (nl >= 0 && nl < j)) this.fail(k, 'unterminated string');
        this.toks.push({ kind: 'string', text: s.slice(k + 1, j), start: k, end: j + 1 });
        k = j + 1;
        continue;
      }
      let j = k;
      for (;;) {
        WORD.lastIndex = j;
        if (WORD.test(s)) j = WORD.lastIndex;
        // A backslash is part of a word unless it continues the line.
        if (s[j] === '\\' && s[j + 1] !== '\n') { j++; continue; }
        break;
      }
      this.toks.push({ kind: 'word', text: s.slice(k, j), start: k, end: j });
      k = j;
    }
    this.toks.push({ kind: 'end', text: '', start: s.length, end: s.length });
  }

  /** Whether a `{` here opens elements: after `elements =`, or in an `add element …` command. */
  private opensElements(): boolean {
    const t = this.toks;
    const n = t.length;
    if (n >= 2 && t[n - 1]!.text === '=' && t[n - 2]!.text === 'elements' && t[n - 2]!.kind === 'word') return true;
    let i = n - 1;
    while (i >= 0 && (t[i]!.kind === 'word' || t[i]!.kind === 'string')) i--;
    return n - i > 2 && (t[i + 1]!.text === 'add' || t[i + 1]!.text === 'create') && t[i + 2]!.text === 'element';
  }

  /** The `}` that closes the `{` at `k`, past strings and comments. */
  private closingBrace(k: number): number {
    const s = this.src;
    let depth = 0;
    for (let j = k; j < s.length; j++) {
      const c = s[j];
      if (c === '"') {
        const q = s.indexOf('"', j + 1);
        const nl = s.indexOf('\n', j + 1);
        if (q < 0 || (nl >= 0 && nl < q)) this.fail(j, 'unterminated string');
        j = q;
      } else if (c === '#') {
        const nl = s.indexOf('\n', j);
        j = nl < 0 ? s.length : nl;
      } else if (c === '{') {
        depth++;
      } else if (c === '}' && --depth === 0) {
        return j;
      }
    }
    return this.fail(k, "the elements' '{' is never closed");
  }

  private peek(ahead = 0): Tok {
    return this.toks[Math.min(this.i + ahead, this.toks.length - 1)]!;
  }

  private next(): Tok {
    const t = this.peek();
    if (this.i < this.toks.length - 1) this.i++;
    return t;
  }

  private skipSeparators(): void {
    while (this.peek().kind === 'nl' || this.peek().kind === ';') this.i++;
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
      case 'define': case 'redefine': case 'undefine':
        this.fail(t.start, `'${t.text}' (variables) is not supported in nfkeeper's .nft files: write the values out`);
      case 'include':
        this.fail(t.start, "'include' is not supported: nfkeeper reads one file, so put the tables in it");
      default:
        this.fail(t.start, `'${t.text}' is not a command nfkeeper accepts here: ` +
          "use 'table', 'add', 'create', 'insert' or a leading 'flush ruleset' / 'flush table'");
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
      case 'flowtable': case 'counter': case 'quota':
      case 'limit': case 'ct': case 'secmark': case 'synproxy':
        this.fail(obj.start, unsupportedObject(obj.text));
      default: this.fail(obj.start, `'${verb.text} ${obj.text}': expected table, chain, set, map, element or rule`);
    }
  }

  /** `[family] name`, nft's default family being ip. */
  private tableRef(): { family: string; name: string; at: number } {
    const a = this.word('a table name');
    let family = 'ip';
    let name = a;
    if (a.kind === 'word' && FAMILIES.has(a.text) && (this.peek().kind === 'word' || this.peek().kind === 'string')) {
      family = a.text;
      name = this.next();
    }
    return { family, name: name.text, at: a.start };
  }

  private findTable(family: string, name: string, at: number, create: boolean): number {
    let ti = this.raw.tables.findIndex((x) => x.family === family && x.name === name);
    if (ti < 0) {
      if (!create) this.fail(at, `table ${family} ${name} is not declared before its use; add it first ('add table ${family} ${name}')`);
      ti = this.raw.tables.push({ family, name, sets: [], maps: [], chains: [] }) - 1;
      this.mark(['tables', ti], at);
      this.mark(['tables', ti, 'family'], at);
      this.mark(['tables', ti, 'name'], at);
    }
    return ti;
  }

  /** `table [F] N [{ … }]` (and `add table …`): declares the table, or adds to it. */
  private tableBlock(kw: Tok, command: boolean): void {
    const ref = this.tableRef();
    const ti = this.findTable(ref.family, ref.name, command ? ref.at : kw.start, true);
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
          case 'flowtable': case 'counter': case 'quota': case 'limit': case 'ct':
          case 'secmark': case 'synproxy':
            this.fail(w.start, unsupportedObject(w.text));
          case 'flags':
            this.fail(w.start, 'table flags are not supported in the config (protect mode sets the owner flag itself: see protect in docs/config)');
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
        case 'counter': case 'quota': case 'limit': case 'last':
          this.fail(w.start, `${what} ${name.text}: set expressions ('${w.text}') are not supported`);
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
    return this.chainIndexes.get(ti)?.get(name) ?? -1;
  }

  private chainIndex(ti: number, name: Tok): number {
    const table = this.raw.tables[ti]!;
    let ci = this.findChain(ti, name.text);
    if (ci < 0) {
      ci = table.chains.push({ name: name.text, rules: [] }) - 1;
      if (!this.chainIndexes.has(ti)) this.chainIndexes.set(ti, new Map());
      this.chainIndexes.get(ti)!.set(name.text, ci);
      this.mark(['tables', ti, 'chains', ci], name.start);
      this.mark(['tables', ti, 'chains', ci, 'name'], name.start);
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
    const first = this.peek();
    let depth = 0;
    let last = first;
    for (;;) {
      const t = this.peek();
      if (t.kind === 'end') {
        if (depth > 0) this.fail(first.start, "the rule's '{' is never closed");
        break;
      }
      if (depth === 0 && (t.kind === 'nl' || t.kind === ';' || t.kind === '}')) break;
      if (t.kind === '{') depth++;
      if (t.kind === '}') depth--;
      last = this.next();
    }
    if (last === first && first.kind !== 'word' && first.kind !== 'string') {
      this.fail(first.start, `expected a rule, found ${describe(first)}`);
    }
    const text = blank(this.src.slice(first.start, last.end));
    const chain = this.raw.tables[ti]!.chains[ci]!;
    const path = ['tables', ti, 'chains', ci, 'rules'];
    if (insert) {
      // Shift the recorded positions of the rules after it.
      for (let r = chain.rules.length - 1; r >= 0; r--) {
        const k = [...path, r].join('.');
        this.positions.set([...path, r + 1].join('.'), this.positions.get(k)!);
        this.ruleStarts.set([...path, r + 1].join('.'), this.ruleStarts.get(k)!);
      }
      chain.rules.unshift(text);
    } else {
      chain.rules.push(text);
    }
    const ri = insert ? 0 : chain.rules.length - 1;
    this.mark([...path, ri], first.start);
    this.ruleStarts.set([...path, ri].join('.'), first.start);
    this.endStatement();
  }
}

/** Newlines, line continuations and comments become spaces, keeping every offset. */
function blank(text: string): string {
  return text.replace(/"[^"\n]*"|#[^\n]*|\\\n|[\r\n]/g, (m) => (m[0] === '"' ? m : ' '.repeat(m.length))).trimEnd();
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

/** Reads an nft file's text into the config's raw document. Throws ConfigError at the first problem. */
export function readNftFile(text: string, file = '<config>'): NftDocument {
  const r = new Reader(text, file);
  const raw = r.read();
  return {
    raw,
    positionOf(path, innerColumn) {
      const key = path.join('.');
      if (path.length >= 2 && path[path.length - 2] === 'elements') {
        const starts = r.elementStarts.get(path.slice(0, -2).join('.'));
        const at = starts?.[path[path.length - 1] as number];
        if (at !== undefined) return r.pos(at + (innerColumn ?? 1) - 1);
      }
      const ruleStart = r.ruleStarts.get(key);
      if (ruleStart !== undefined && innerColumn !== undefined) return r.pos(ruleStart + innerColumn - 1);
      // The deepest recorded node on the path.
      for (let n = path.length; n > 0; n--) {
        const at = r.positions.get(path.slice(0, n).join('.'));
        if (at !== undefined) return r.pos(at);
      }
      return { line: 1, col: 1 };
    },
  };
}
