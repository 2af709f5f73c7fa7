/**
 * How much of a peer's file nfkeeper holds today: the file is given to the
 * real .nft loader; what it refuses is taken out (a refused comment on a
 * table or chain line is stripped, a refused set, map or element line takes
 * every line of its kind with it, a refused rule goes alone) and the rest is
 * loaded again, until it is accepted. The result is the accepted subset, a
 * valid nft file itself, and the refusals with their reasons, the first one
 * being what the whole file hits first.
 */
import { parseNftConfig } from '../../../src/config/config.js';
import { ConfigError } from '../../../src/base/errors.js';

export interface Refusal {
  /** 1-based line in the original file. */
  line: number;
  text: string;
  reason: string;
}

export interface Reduction {
  /** The accepted subset (same line order), loadable by nft and by nfkeeper. */
  text: string;
  /** Lines of the original file taken out, by line, with the first reason each got. */
  refused: Refusal[];
  /** Comments stripped from table/chain lines that were otherwise kept. */
  stripped: Refusal[];
  /** The first error the whole file got, as the loader printed it. */
  first: string | undefined;
  /** `add rule` lines in the file, and how many of them the subset keeps. */
  rules: { total: number; kept: number };
  objects: { total: number; kept: number };
}

const kindOf = (line: string) => /^(add|insert) (table|chain|set|map|element|rule) /.exec(line)?.[2];

function stripComment(line: string): string {
  const s = line.replace(/ comment "[^"]*" ;/, '');
  return s.replace(/ \{ \}$/, '');
}

export function reduce(text: string, file = 'peer.nft', maxRounds = 50): Reduction {
  const lines = text.split('\n');
  const current = lines.slice();
  const alive = lines.map((l) => l.trim() !== '');
  const refused = new Map<number, Refusal>();
  const stripped: Refusal[] = [];
  let first: string | undefined;
  for (let round = 0; round < maxRounds; round++) {
    // Keep line numbers: a taken-out line becomes empty.
    const src = current.map((l, i) => (alive[i] ? l : '')).join('\n');
    let errors: ConfigError[];
    try {
      parseNftConfig(src, file);
      break;
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      errors = e.all;
      first ??= e.message;
    }
    let progress = false;
    for (const err of errors) {
      const i = err.line - 1;
      if (i < 0 || i >= lines.length || !alive[i]) continue;
      const kind = kindOf(current[i]!);
      if ((kind === 'table' || kind === 'chain') && /comment/.test(err.reason) && / comment "/.test(current[i]!)) {
        stripped.push({ line: i + 1, text: lines[i]!, reason: err.reason });
        current[i] = stripComment(current[i]!);
        progress = true;
        continue;
      }
      if (kind === 'set' || kind === 'map' || kind === 'element') {
        for (let j = 0; j < lines.length; j++) {
          if (alive[j] && kindOf(current[j]!) === kind) {
            alive[j] = false;
            refused.set(j, { line: j + 1, text: lines[j]!, reason: err.reason });
          }
        }
        progress = true;
        continue;
      }
      alive[i] = false;
      refused.set(i, { line: i + 1, text: lines[i]!, reason: err.reason });
      progress = true;
    }
    if (!progress) throw new Error(`reduce: no progress on ${errors[0]?.message}`);
  }
  const count = (pred: (k: string | undefined) => boolean) => {
    let total = 0;
    let kept = 0;
    lines.forEach((l, i) => {
      if (!pred(kindOf(l))) return;
      total++;
      if (alive[i]) kept++;
    });
    return { total, kept };
  };
  return {
    text: current.filter((_, i) => alive[i]).join('\n') + '\n',
    refused: [...refused.values()].sort((a, b) => a.line - b.line),
    stripped,
    first,
    rules: count((k) => k === 'rule'),
    objects: count((k) => k !== undefined && k !== 'rule'),
  };
}
