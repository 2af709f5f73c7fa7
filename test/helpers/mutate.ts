/**
 * Text mutations for the rule-language fuzz properties: each edit inserts,
 * deletes or replaces a character at a position, or swaps, adds or drops a
 * whole word, so mutants stay close to real rules. And a file's damaged copies,
 * for the sweeps over files the daemon keeps (the restart record, the compile cache).
 */
export type TextEdit = readonly [kind: 'insert' | 'delete' | 'replace' | 'swap-word' | 'drop-word' | 'add-word', n: number, s: string, w: string];

export function applyEdits(text: string, edits: readonly TextEdit[]): string {
  let t = text;
  for (const [kind, n, s, w] of edits) {
    const i = t.length ? n % (t.length + 1) : 0;
    const words = t.split(' ');
    const j = n % words.length;
    if (kind === 'insert') t = t.slice(0, i) + s + t.slice(i);
    else if (kind === 'delete') t = t.slice(0, i) + t.slice(i + 1);
    else if (kind === 'replace') t = t.slice(0, i) + s + t.slice(i + 1);
    else if (kind === 'swap-word') { words[j] = w; t = words.join(' '); }
    else if (kind === 'add-word') { words.splice(j, 0, w); t = words.join(' '); }
    else { words.splice(j, 1); t = words.join(' '); }
  }
  return t;
}

/** `whole` cut short at every offset, and with one byte changed at every offset. */
export function damagedCopies(whole: Buffer): [string, Buffer][] {
  const out: [string, Buffer][] = [];
  for (let n = 0; n < whole.length; n++) out.push([`cut at ${n}`, whole.subarray(0, n)]);
  for (let n = 0; n < whole.length; n++) {
    const b = Buffer.from(whole);
    b[n] = b[n] === 0x30 ? 0x31 : 0x30;
    out.push([`byte ${n} changed`, b]);
  }
  return out;
}
