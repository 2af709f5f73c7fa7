/**
 * Tokens of one rule text. Words are runs of the characters nft accepts in
 * identifiers, addresses, prefixes, ranges and port mappings; their meaning
 * depends on where the parser meets them.
 */
import { RuleSyntaxError } from '../base/errors.js';

export type TokenKind = 'word' | 'string' | 'punct' | 'end';

export interface Token {
  kind: TokenKind;
  /** For strings, the text between the quotes. */
  text: string;
  /** 1-based column of the token's first character. */
  col: number;
  /** The token as written (strings with their quotes). */
  raw: string;
}

/** 1 for the ASCII characters of a word: 0-9 : A-Z a-z _ . / - * @ (a table: the lexer asks it for every character). */
const WORD_CHARS = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  WORD_CHARS[c] = (c >= 48 && c <= 58) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
    || c === 95 || c === 46 || c === 47 || c === 45 || c === 42 || c === 64 ? 1 : 0;
}

function isWordChar(c: number): boolean {
  return c < 128 && WORD_CHARS[c] === 1;
}

const PUNCT = '{},[]&|^()<>!';

export function tokenize(text: string): Token[] {
  const out: Token[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 32 || c === 9) { i++; continue; }
    const col = i + 1;
    if (isWordChar(c)) {
      let j = i + 1;
      while (j < n && isWordChar(text.charCodeAt(j))) j++;
      const w = text.slice(i, j);
      out.push({ kind: 'word', text: w, col, raw: w });
      i = j;
      continue;
    }
    if (c === 34) { // "
      const j = text.indexOf('"', i + 1);
      if (j < 0) {
        throw new RuleSyntaxError(text, col, text.slice(i), 'a closing double quote', 'unterminated string');
      }
      const s = text.slice(i + 1, j);
      out.push({ kind: 'string', text: s, col, raw: text.slice(i, j + 1) });
      i = j + 1;
      continue;
    }
    // == != <= >=
    if (text.charCodeAt(i + 1) === 61 && (c === 61 || c === 33 || c === 60 || c === 62)) {
      const two = text.slice(i, i + 2);
      out.push({ kind: 'punct', text: two, col, raw: two });
      i += 2;
      continue;
    }
    const ch = text[i]!;
    if (PUNCT.includes(ch)) {
      out.push({ kind: 'punct', text: ch, col, raw: ch });
      i++;
      continue;
    }
    // A rule separator: only a chain binding's rules (`jump { …; … }`) take one; the parser refuses it elsewhere.
    if (ch === ';' || ch === '\n' || ch === '\r') {
      out.push({ kind: 'punct', text: ';', col, raw: ch === ';' ? ';' : '\\n' });
      i++;
      continue;
    }
    const cp = text.codePointAt(i)!;
    const bad = String.fromCodePoint(cp);
    throw new RuleSyntaxError(text, col, bad, 'a word, a quoted string or one of { } , [ ] ( ) & | ^ == != < > <= >=',
      'unexpected character');
  }
  out.push({ kind: 'end', text: '', col: n + 1, raw: '' });
  return out;
}
