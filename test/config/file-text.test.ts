import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig, parseConfig } from '../../src/config/config.js';
import { fileText } from '../../src/base/regular-file.js';
import { chainYaml } from '../helpers/big-chain.js';

// Node's EXTERN_APEX (src/string_bytes.cc): from this many bytes on, its one-byte strings are external.
const APEX = 0xfbee9;

/** `n` bytes of printable ASCII and newlines, no two neighbouring pieces of 512 KiB alike. */
function ascii(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = i % 61 === 60 ? 10 : 32 + ((i * 7 + (i >> 19)) % 95);
  return b;
}

describe('fileText: a config file\'s text from its bytes', () => {
  it('is the bytes\' text at every size around Node\'s external-string limit and its pieces\' edges', () => {
    for (const n of [0, 1, 4096, APEX - 1, APEX, APEX + 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 19) + 5]) {
      const b = ascii(n);
      const text = fileText(b);
      expect(text.length, `${n} bytes`).toBe(n);
      expect(text === b.toString('latin1'), `${n} bytes`).toBe(true);
    }
  });

  it('decodes UTF-8 when a byte is not ASCII, small or big', () => {
    for (const n of [10, APEX + 10]) {
      const b = Buffer.concat([ascii(n), Buffer.from('# é ü\n', 'utf8')]);
      expect(fileText(b) === b.toString('utf8')).toBe(true);
      expect(fileText(b).endsWith('# é ü\n')).toBe(true);
    }
  });

  it('gives a big ASCII file\'s text as a string in V8\'s heap, not an external one (what Maglev code reads fast)', () => {
    // V8's own word on the string's kind: %DebugPrint in a child with natives syntax (the flag set
    // before the function is parsed), whose first line marks an external string `e"…`, a cons `c"…`.
    const kind = (decode: string) => {
      const script = [
        `import { setFlagsFromString } from 'node:v8';`,
        `import { fileText } from ${JSON.stringify(fileURLToPath(new URL('../../src/base/regular-file.ts', import.meta.url)))};`,
        `setFlagsFromString('--allow-natives-syntax');`,
        `const b = Buffer.alloc(${2 * APEX}, 97);`,
        `new Function('s', '%DebugPrint(s)')(${decode});`,
      ].join('\n');
      const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', maxBuffer: 64 << 20 });
      expect(r.status, r.stderr).toBe(0);
      return /^DebugPrint: \S+ \[String\]: (\w?)"/.exec(r.stdout)?.[1];
    };
    // Node's own decode is external (what fileText's would be without the pieces)
    expect(kind(`b.toString('latin1')`)).toBe('e');
    expect(kind('fileText(b)')).toBe('c');
  }, 60_000);

  it('loadConfig reads a config over the limit as parseConfig reads its text', () => {
    const dir = mkdtempSync(join(tmpdir(), 'nfk-file-text-'));
    try {
      const yaml = chainYaml(30_000);
      expect(yaml.length).toBeGreaterThan(APEX);
      const file = join(dir, 'big.yaml');
      writeFileSync(file, yaml);
      const loaded = loadConfig(file), parsed = parseConfig(yaml, file);
      const rules = (c: typeof loaded) => c.tables[0]!.chains[0]!.rules;
      expect(rules(loaded)).toHaveLength(30_000);
      expect(rules(loaded).map((r) => r.text)).toEqual(rules(parsed).map((r) => r.text));
      expect(rules(loaded).map((r) => r.compiled.exprs)).toEqual(rules(parsed).map((r) => r.compiled.exprs));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
