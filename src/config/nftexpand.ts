/**
 * nft's `include` and `define` in .nft configs, resolved as nft 1.0.6 resolves
 * them, before the reader (src/config/nftfile.ts) sees the text:
 *
 * - `include "NAME"`: a NAME starting with `/`, `./` or `../` is opened as it
 *   is (so `./x` is relative to the working directory, not to the including
 *   file, as in nft); any other NAME is looked for in each include directory
 *   (LoadOptions.includePath, then nft's default, /etc). A NAME with `*`, `?`
 *   or `[` is a glob: its matches are read in sorted order, directories are
 *   skipped, no match is not an error, and every include directory is
 *   searched (the last directory's matches first, as nft's stack of input
 *   buffers reads them). Without a wildcard the first directory that has it
 *   wins and none is "File not found". Includes nest 16 files deep at most.
 * - `define NAME = VALUE`, `redefine`, `undefine`: VALUE is expanded when it
 *   is defined (`$a` inside it is the value `a` has then, as nft binds it) and
 *   `$NAME` is replaced by it where it is used. Names are scoped to the block
 *   (`table { … }`, `chain { … }`) they are defined in, across includes; a
 *   `define` of a name visible from there is "redefinition of symbol", as in
 *   nft. A set value (`{ a, b }`) used as a member of another set is merged
 *   into it, as nft merges it.
 *
 * The result is one text with a map from each of its offsets back to a file
 * and an offset there, so every error names the file and line it was written
 * on (inside a define's value: where the value was written).
 */
import { ConfigError } from '../base/errors.js';
import { NotRegularFileError, fileText, readRegularFile } from '../base/regular-file.js';
import { listing, noteFile, noteInput, pathKind } from '../base/compile-inputs.js';

/** nft's DEFAULT_INCLUDE_PATH as Debian builds it. */
export const DEFAULT_INCLUDE_PATH = '/etc';
/** nft's MAX_INCLUDE_DEPTH. */
const MAX_INCLUDE_DEPTH = 16;

export interface ExpandOptions {
  /** Searched before DEFAULT_INCLUDE_PATH, in order (nft's `-I`). */
  includePath?: readonly string[];
  /** The longest text the expansion may produce. */
  maxBytes: number;
}

export interface Located {
  file: string;
  line: number;
  col: number;
}

export interface Expanded {
  text: string;
  /** Where offset `offset` of `text` was written. */
  locate(offset: number): Located;
  /** Every file read, the top one first. */
  files: string[];
}

/** One source file's text and its line starts (found when first asked for). */
interface Source {
  name: string;
  text: string;
  lines?: number[];
}

/** A run of output taken from `source` at `at`: output offsets [start, next run's start). */
interface Run {
  start: number;
  source: Source;
  at: number;
}

/** Text being built with its runs; a define's value is one too (its runs relative to its start). */
class Builder {
  readonly parts: string[] = [];
  readonly runs: Run[] = [];
  length = 0;

  /** Appends text[from, to) of `source` (`text` may be a blanked copy of source.text, same offsets). */
  add(source: Source, text: string, from: number, to: number): void {
    if (to <= from) return;
    this.runs.push({ start: this.length, source, at: from });
    this.parts.push(text.slice(from, to));
    this.length += to - from;
  }

  /** Appends `text`, as if written at `at` of `source` (a separator the expansion adds). */
  addText(text: string, source: Source, at: number): void {
    this.runs.push({ start: this.length, source, at });
    this.parts.push(text);
    this.length += text.length;
  }

  /** Appends a value's text[from, to). */
  addValue(v: Value, from: number, to: number): void {
    if (to <= from) return;
    for (let r = 0; r < v.runs.length; r++) {
      const run = v.runs[r]!;
      const end = r + 1 < v.runs.length ? v.runs[r + 1]!.start : v.text.length;
      const a = Math.max(from, run.start);
      const b = Math.min(to, end);
      if (a < b) {
        this.runs.push({ start: this.length + (a - from), source: run.source, at: run.at + (a - run.start) });
      }
    }
    this.parts.push(v.text.slice(from, to));
    this.length += to - from;
  }

  text(): string {
    return this.parts.join('');
  }
}

interface Value {
  text: string;
  runs: Run[];
}

const NAME = /[A-Za-z_.][A-Za-z0-9/\-_.]*/y;
const SPACE = /[ \t\r]*/y;
const STATEMENTS = new Set(['define', 'redefine', 'undefine', 'include']);
/** Whether a text may need expanding at all (most configs, kube-proxy's among them, do not). */
const MAY_EXPAND = /\$|(?:^|[\s;{}])(?:define|redefine|undefine|include)[\s"]/;

class Expander {
  readonly out = new Builder();
  /** The innermost scope last; a scope per `{`. */
  private readonly scopes: Map<string, Value>[] = [new Map()];
  readonly files: string[] = [];

  constructor(private readonly options: ExpandOptions) {}

  fail(source: Source, at: number, reason: string): never {
    const p = locateIn(source, at);
    throw new ConfigError(p.file, p.line, p.col, reason);
  }

  private grow(source: Source, at: number): void {
    if (this.out.length > this.options.maxBytes) {
      this.fail(source, at, `the config with its includes and defines expanded is longer than ${this.options.maxBytes} bytes`);
    }
  }

  /** Expands one file's text into the output. */
  file(source: Source, depth: number): void {
    this.files.push(source.name);
    const s = source.text;
    const len = s.length;
    let run = 0;  // start of the text not yet copied
    let atStart = true;
    let k = 0;
    while (k < len) {
      const c = s.charCodeAt(k);
      if (c === 32 || c === 9 || c === 13) { k++; continue; }
      if (c === 92 && s.charCodeAt(k + 1) === 10) { k += 2; continue; }
      if (c === 35) { const nl = s.indexOf('\n', k); k = nl < 0 ? len : nl; continue; }
      if (c === 10 || c === 59) { atStart = true; k++; continue; }
      if (c === 34) { k = stringEnd(s, k); atStart = false; continue; }
      if (c === 123) { this.scopes.push(new Map()); atStart = true; k++; continue; }
      if (c === 125) { if (this.scopes.length > 1) this.scopes.pop(); atStart = true; k++; continue; }
      if (c === 36) {
        this.out.add(source, s, run, k);
        k = run = this.variable(source, s, k, this.out);
        this.grow(source, k);
        atStart = false;
        continue;
      }
      let j = k;
      while (j < len && !isStop(s.charCodeAt(j))) j++;
      if (j === k) { k++; atStart = false; continue; }
      const word = s.slice(k, j);
      if (atStart && STATEMENTS.has(word)) {
        this.out.add(source, s, run, k);
        k = run = word === 'include' ? this.include(source, k, j, depth) : this.definition(source, word, k, j);
        this.grow(source, k);
        continue;
      }
      atStart = false;
      k = j;
    }
    this.out.add(source, s, run, len);
    this.grow(source, len);
  }

  /** `$NAME` at `k` of `s`: appends its value to `into`; returns where the name ends. */
  private variable(source: Source, s: string, k: number, into: Builder, valueSource?: Value): number {
    NAME.lastIndex = k + 1;
    const m = NAME.exec(s);
    if (!m) this.failAt(source, valueSource, k, "'$' is not followed by a variable name");
    const name = m[0];
    const value = this.lookup(name);
    if (!value) this.failAt(source, valueSource, k + 1, `unknown identifier '${name}'`);
    const end = k + 1 + name.length;
    // A set used as a member of a set is merged into it: `{ $a, 3 }` with a = { 1, 2 } is { 1, 2, 3 }.
    const t = value.text;
    if (t.startsWith('{') && t.endsWith('}') && /[{,]\s*$/.test(s.slice(Math.max(0, k - 200), k)) && /^\s*[,}]/.test(s.slice(end, end + 200))) {
      into.addValue(value, 1, t.length - 1);
    } else {
      into.addValue(value, 0, t.length);
    }
    return end;
  }

  private failAt(source: Source, value: Value | undefined, at: number, reason: string): never {
    if (value) {
      const p = locateRuns(value.runs, at);
      if (p) this.fail(p.source, p.at, reason);
    }
    return this.fail(source, at, reason);
  }

  private lookup(name: string): Value | undefined {
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const v = this.scopes[i]!.get(name);
      if (v) return v;
    }
    return undefined;
  }

  /** `define|redefine|undefine NAME [= VALUE]` at `k`; returns where the statement's separator is. */
  private definition(source: Source, verb: string, k: number, wordEnd: number): number {
    const s = source.text;
    SPACE.lastIndex = wordEnd;
    let at = SPACE.exec(s)![0].length + wordEnd;
    NAME.lastIndex = at;
    const m = NAME.exec(s);
    if (!m) this.fail(source, at, `expected a variable name after '${verb}'`);
    const name = m[0];
    const nameAt = at;
    at += name.length;
    const scope = this.scopes[this.scopes.length - 1]!;
    if (verb === 'undefine') {
      scope.delete(name);
      return this.statementEnd(source, at, `'undefine ${name}'`);
    }
    SPACE.lastIndex = at;
    at += SPACE.exec(s)![0].length;
    if (s[at] !== '=') this.fail(source, at, `expected '=' after '${verb} ${name}'`);
    at++;
    const end = valueEnd(s, at);
    const blanked = blankValue(s.slice(0, end), at);
    let from = at;
    while (from < end && /\s/.test(blanked[from]!)) from++;
    let to = end;
    while (to > from && /\s/.test(blanked[to - 1]!)) to--;
    if (to === from) this.fail(source, at, `'${verb} ${name}' has no value`);
    // The value's own $references are resolved now, as nft binds them when it reads the define.
    const b = new Builder();
    let run = from;
    for (let j = from; j < to; j++) {
      const c = blanked.charCodeAt(j);
      if (c === 34) { j = stringEnd(blanked, j) - 1; continue; }
      if (c !== 36) continue;
      b.add(source, blanked, run, j);
      run = this.variable(source, blanked, j, b);
      j = run - 1;
    }
    b.add(source, blanked, run, to);
    const value: Value = { text: b.text(), runs: b.runs };
    if (value.text.length > this.options.maxBytes) this.fail(source, k, `the value of '${name}' is longer than ${this.options.maxBytes} bytes`);
    if (verb === 'define' && this.lookup(name)) this.fail(source, nameAt, `redefinition of symbol '${name}'`);
    scope.set(name, value);
    return end;
  }

  /** After a statement's last word: only spaces and a comment may come before the newline or ';'. */
  private statementEnd(source: Source, at: number, what: string): number {
    const s = source.text;
    SPACE.lastIndex = at;
    const j = at + SPACE.exec(s)![0].length;
    const c = s[j];
    if (j < s.length && c !== '\n' && c !== ';' && c !== '#') this.fail(source, j, `expected a newline or ';' after ${what}`);
    return j;
  }

  /** `include "NAME"` at `k`: expands the files it names; returns where its separator is. */
  private include(source: Source, k: number, wordEnd: number, depth: number): number {
    const s = source.text;
    SPACE.lastIndex = wordEnd;
    const q = wordEnd + SPACE.exec(s)![0].length;
    if (s[q] !== '"') this.fail(source, q, "expected a quoted file name after 'include'");
    const close = stringEnd(s, q);
    if (s[close - 1] !== '"' || close - 1 === q) this.fail(source, q, 'unterminated string');
    const name = s.slice(q + 1, close - 1);
    const end = this.statementEnd(source, close, `include "${name}"`);
    if (depth === MAX_INCLUDE_DEPTH) this.fail(source, k, `Include nested too deeply, max ${MAX_INCLUDE_DEPTH} levels`);
    for (const path of this.resolve(source, k, name)) {
      let text: string;
      try {
        // As the config itself is read: never blocking on a FIFO, never reading a device without end.
        const bytes = readRegularFile(path, this.options.maxBytes);
        noteFile(path, bytes);
        text = fileText(bytes);
      } catch (e) {
        if (e instanceof NotRegularFileError && e.kind !== undefined) this.fail(source, k, `Not a regular file: "${path}"`);
        this.fail(source, k, `Could not open file "${path}": ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
      }
      this.file({ name: path, text }, depth + 1);
      // The included file's last statement ends with it.
      this.out.addText('\n', source, end);
    }
    return end;
  }

  /** The files `include "name"` reads, in nft's order. */
  private resolve(source: Source, k: number, name: string): string[] {
    const wildcard = /[*?[]/.test(name);
    if (name.startsWith('/') || name.startsWith('./') || name.startsWith('../')) {
      const found = glob(name);
      if (!wildcard && found === undefined) this.fail(source, k, `File not found: ${name}`);
      return found ?? [];
    }
    const dirs = [...(this.options.includePath ?? []), DEFAULT_INCLUDE_PATH];
    const lists: string[][] = [];
    for (const dir of dirs) {
      const found = glob(`${dir}/${name}`);
      if (found === undefined) continue;
      if (!wildcard) return found;
      lists.push(found);
    }
    if (!wildcard) this.fail(source, k, `File not found: ${name}`);
    // Each directory's matches are pushed on nft's input stack after the previous one's: read first.
    return lists.reverse().flat();
  }
}

/**
 * glob(3) with GLOB_NOESCAPE | GLOB_MARK as nft calls it, directories left out: the sorted
 * regular paths `pattern` matches, [] when it names only directories, undefined when nothing.
 */
function glob(pattern: string): string[] | undefined {
  const parts = pattern.split('/');
  let paths = [parts[0] === '' ? '' : parts[0]!];
  if (/[*?[]/.test(parts[0]!)) paths = matchIn('.', parts[0]!).map((n) => n);
  for (let i = 1; i < parts.length; i++) {
    const part = parts[i]!;
    if (part === '') { paths = paths.filter((p) => isDir(p)).map((p) => `${p}/`); continue; }
    const next: string[] = [];
    for (const p of paths) {
      if (/[*?[]/.test(part)) for (const n of matchIn(p === '' ? '/' : p, part)) next.push(`${p}/${n}`);
      else next.push(`${p}/${part}`);
    }
    paths = next;
  }
  const existing = paths.filter((p) => exists(p));
  if (existing.length === 0) return undefined;
  return existing.filter((p) => !p.endsWith('/') && !isDir(p)).sort(byBytes);
}

function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

// What a path is and what a directory lists are inputs of the compile (src/base/compile-inputs.ts).
function pathIs(p: string): 'none' | 'dir' | 'other' {
  const is = pathKind(p);
  noteInput(() => ({ kind: 'path', path: p, is }));
  return is;
}

function exists(p: string): boolean {
  return pathIs(p) !== 'none';
}

function isDir(p: string): boolean {
  return pathIs(p === '' ? '/' : p) === 'dir';
}

/** The names in `dir` one glob component matches (a leading '.' only by a leading '.', as glob(3)). */
function matchIn(dir: string, part: string): string[] {
  const names = listing(dir);
  noteInput(() => ({ kind: 'dir', path: dir, names }));
  if (names === null) return [];
  const re = globRegExp(part);
  return names.filter((n) => re.test(n) && (n[0] !== '.' || part[0] === '.'));
}

function globRegExp(part: string): RegExp {
  let re = '';
  for (let i = 0; i < part.length; i++) {
    const c = part[i]!;
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const close = part.indexOf(']', i + 2);
      if (close < 0) { re += '\\['; continue; }
      let body = part.slice(i + 1, close);
      if (body[0] === '!') body = `^${body.slice(1)}`;
      re += `[${body.replace(/\\/g, '\\\\')}]`;
      i = close;
    } else re += c.replace(/[.+^${}()|\\\]]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** Characters that end a word for the expander: space, newline, ; { } " # $. */
function isStop(c: number): boolean {
  return c === 32 || c === 9 || c === 13 || c === 10 || c === 59 || c === 123 || c === 125 || c === 34 || c === 35 || c === 36;
}

/** Just past the string starting at `k` (its closing quote), or the end of its line when unterminated. */
function stringEnd(s: string, k: number): number {
  const q = s.indexOf('"', k + 1);
  const nl = s.indexOf('\n', k + 1);
  if (q < 0 || (nl >= 0 && nl < q)) return nl < 0 ? s.length : nl;
  return q + 1;
}

/** Where a define's value ends: a newline or ';' outside braces and strings (braces may span lines). */
function valueEnd(s: string, k: number): number {
  let depth = 0;
  for (let j = k; j < s.length; j++) {
    const c = s.charCodeAt(j);
    if (c === 34) { j = stringEnd(s, j) - 1; continue; }
    if (c === 35) { const nl = s.indexOf('\n', j); if (nl < 0) return s.length; j = nl - 1; continue; }
    if (c === 92 && s.charCodeAt(j + 1) === 10) { j++; continue; }
    if (c === 123) depth++;
    else if (c === 125) depth--;
    else if (depth <= 0 && (c === 10 || c === 59)) return j;
  }
  return s.length;
}

/** `s` with comments, newlines and line continuations from `from` on made spaces (offsets kept). */
function blankValue(s: string, from: number): string {
  return s.slice(0, from) + s.slice(from).replace(/"[^"\n]*"|#[^\n]*|\\\n|[\r\n]/g, (m) => (m[0] === '"' ? m : ' '.repeat(m.length)));
}

function lineStarts(source: Source): number[] {
  if (source.lines) return source.lines;
  const out = [0];
  for (let k = source.text.indexOf('\n'); k >= 0; k = source.text.indexOf('\n', k + 1)) out.push(k + 1);
  return (source.lines = out);
}

function locateIn(source: Source, at: number): Located {
  const ls = lineStarts(source);
  let lo = 0;
  let hi = ls.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ls[mid]! <= at) lo = mid; else hi = mid - 1;
  }
  return { file: source.name, line: lo + 1, col: at - ls[lo]! + 1 };
}

/** The run holding output offset `offset`, and where that offset is in the run's source. */
function locateRuns(runs: readonly Run[], offset: number): { source: Source; at: number } | undefined {
  if (runs.length === 0) return undefined;
  let lo = 0;
  let hi = runs.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (runs[mid]!.start <= offset) lo = mid; else hi = mid - 1;
  }
  const run = runs[lo]!;
  return { source: run.source, at: Math.min(run.at + (offset - run.start), run.source.text.length) };
}

/**
 * `text` (the config file `file`) with its includes and defines expanded, or undefined when it
 * has none (then the reader reads `text` itself). Throws ConfigError where a statement is wrong.
 */
export function expandNft(text: string, file: string, options: ExpandOptions): Expanded | undefined {
  if (!MAY_EXPAND.test(text)) return undefined;
  const x = new Expander(options);
  const top: Source = { name: file, text };
  x.file(top, 1);
  const runs = x.out.runs;
  return {
    text: x.out.text(),
    files: x.files,
    locate(offset) {
      const r = locateRuns(runs, offset);
      return r ? locateIn(r.source, r.at) : locateIn(top, 0);
    },
  };
}
