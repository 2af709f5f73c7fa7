/**
 * Names nft's grammar refuses because its scanner reads them as keywords: the kernel would take
 * them, but nft could neither read such a table back nor name the object in a rule, so the config
 * refuses them where nft does, with the position of the name. nft 1.0.6 is the oracle, offered
 * every word its parser knows as a table, chain and object name (of each type but secmark, whose
 * objects this kernel refuses). Set and map names: test/config/sets.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseConfig, parseNftConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { NFT_KEYWORDS } from '../../src/rules/keywords.js';
import { withNetns } from '../helpers/netns.js';

/** The token names of nft's parser ("\"th\"" in bison's table), read from the library nft runs. */
function grammarWords(): string[] {
  const lib = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).match(/libnftables\.so\.1 \(.*?\) => (\S+)/)![1]!;
  return [...new Set([...readFileSync(lib).toString('latin1').matchAll(/"([a-z][a-z0-9_-]*)"\0/g)].map((m) => m[1]!))];
}

/** Each kind of name, as nft reads it (printf's format) and as our reader gets it, and where the name starts. */
const object = (type: string, body: string) => ({
  nft: `table ip t {\\n ${type} %s {\\n ${body.replaceAll('"', '\\"')}\\n }\\n}\\n`,
  ours: (w: string) => `table ip t {\n  ${type} ${w} {\n    ${body}\n  }\n}\n`,
  at: [2, type.length + 4],
});
const FORMS = {
  table: { nft: 'table ip %s {\\n}\\n', ours: (w: string) => `table ip ${w} {\n}\n`, at: [1, 10] },
  chain: { nft: 'table ip t {\\n chain %s {\\n }\\n}\\n', ours: (w: string) => `table ip t {\n  chain ${w} {\n  }\n}\n`, at: [2, 9] },
  counter: object('counter', ''),
  quota: object('quota', '25 mbytes'),
  limit: object('limit', 'rate 1/second'),
  'ct helper': object('ct helper', 'type "ftp" protocol tcp'),
  'ct timeout': object('ct timeout', 'protocol tcp; policy = { established: 100 }'),
  'ct expectation': object('ct expectation', 'protocol tcp; dport 21; timeout 1s; size 1; l3proto ip'),
  synproxy: object('synproxy', 'mss 1460 wscale 7'),
} as const;

function refusedByUs(kind: keyof typeof FORMS, word: string): boolean {
  try {
    parseNftConfig(FORMS[kind].ours(word), 'k.nft');
    return false;
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    expect([e.line, e.column, e.reason], `${kind} ${word}`).toEqual([...FORMS[kind].at, expect.stringMatching(new RegExp(`^'${word}' is a keyword of nft's language, which nft refuses as an? ${kind} name`))]);
    return true;
  }
}

// One `nft -c` per word and kind (300-odd each): minutes on a loaded machine, not the default minute.
describe('table, chain and object names nft takes as keywords', { timeout: 240_000 }, () => {
  it.each(Object.keys(FORMS) as (keyof typeof FORMS)[])('every word of nft\'s grammar is refused as a %s name exactly where nft -c refuses it', async (kind) => {
    const words = [...grammarWords(), 'u', 'foo', 'saddr'];
    expect(words.length).toBeGreaterThan(300);
    await withNetns(async (ns) => {
      const nftRefuses = ns.exec('sh', ['-c', `while read w; do printf "${FORMS[kind].nft}" "$w" | nft -c -f - 2>/dev/null || echo "$w"; done`],
        words.join('\n') + '\n').split('\n').filter(Boolean);
      const ours = words.filter((w) => refusedByUs(kind, w));
      expect(ours).toEqual(nftRefuses);
      expect(ours).toContain('counter');
      expect(ours).not.toContain('u');
      if (kind === 'table' || kind === 'chain') {
        expect(ours).not.toContain('saddr');
        for (const w of ours) expect(NFT_KEYWORDS.has(w)).toBe(true);
      }
    });
  });

  it('a YAML config names each keyword at its position', () => {
    const text = 'tables:\n  - family: ip\n    name: tcp\n    chains:\n      - name: counter\n        rules: []\n';
    let err: unknown;
    try {
      parseConfig(text, 'c.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).all.map((e) => [e.line, e.column, e.reason])).toEqual([
      [3, 11, "'tcp' is a keyword of nft's language, which nft refuses as a table name"],
      [5, 15, "'counter' is a keyword of nft's language, which nft refuses as a chain name"],
    ]);
  });
});
