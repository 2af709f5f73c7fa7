/**
 * A compile cache entry that passes its seal but whose rules cannot be made: a fault of nfkeeper's
 * own, as the daemon, apply and check must meet it (test/reliability/cache-readonly.test.ts,
 * test/reliability/cache-reload.test.ts, test/cli/apply-cache-unreadable.test.ts).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeSealed } from '../../src/base/sealed-file.js';

export interface DamagedEntry {
  /** The entry's path (the one `compiled-*.json` of the directory). */
  file: string;
  /** The text of the rule damaged (rule 2 of the first table's first chain), for the caller to check. */
  rule: string;
  /** Writes the damaged entry (again: it may have been replaced or removed since) and gives its bytes. */
  write(): Buffer;
}

/**
 * The entry in `dir` as it is now, with rule 2 of its first chain naming an expression not stored;
 * the chain's byte count and the seal made right, so only making the rule finds it. Nothing is
 * written until `write`.
 */
export function damagedEntry(dir: string): DamagedEntry {
  const file = join(dir, readdirSync(dir).find((f) => /^compiled-.*\.json$/.test(f))!);
  const whole = readFileSync(file, 'latin1');
  // The seal's line last; then the header, the rule counts per chain, the expression lines' count.
  const lines = whole.slice(0, whole.lastIndexOf('\n', whole.length - 2)).split('\n');
  const n = (JSON.parse(lines[1]!) as number[][])[0]![0]!;
  const chainLine = 3 + Number(lines[2]);
  const [rule, exprs] = JSON.parse(lines[chainLine + 2]!) as [string, number[]];
  lines[chainLine + 2] = JSON.stringify([rule, [...exprs.slice(1), 1e6]]);
  lines[chainLine] = String(Buffer.byteLength(lines.slice(chainLine + 1, chainLine + 1 + n).map((l) => `${l}\n`).join('')));
  const text = lines.join('\n');
  return {
    file,
    rule,
    write: () => {
      // (as read: the serialized rest after the rules' lines is bytes, not UTF-8)
      writeSealed(file, dir, [Buffer.from(text, 'latin1')]);
      return readFileSync(file);
    },
  };
}
