/**
 * `define` and `include` in .nft configs, with nft 1.0.6 as the oracle: the
 * same files loaded by `nft -I DIR -f` and by nfkeeper list and dump alike,
 * and every error names the file and line it was written on, an included
 * file's own when it is there.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseNftConfig, type Config } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { cli } from '../helpers/cli.js';
import { withNetns } from '../helpers/netns.js';
import { netlinkDump } from '../helpers/peers/dump.js';
import { tempDir } from '../helpers/tmp.js';
import { interfaceTable } from '../../src/rules/index.js';
import { CORPUS, CORPUS_INTERFACES } from '../rules/corpus.js';

const rulesOf = (c: Config) => c.tables.map((t) => ({ table: t.name, chains: t.chains.map((ch) => ch.rules.map((r) => r.compiled.text)) }));

function refusal(text: string, file = 'f.nft', includePath?: string[]): ConfigError {
  try {
    parseNftConfig(text, file, { includePath });
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error(`accepted: ${text}`);
}

/** Writes files under a new directory; returns the directory. */
function tree(files: Record<string, string>): string {
  const dir = tempDir('nftexpand');
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

describe('define, redefine, undefine', () => {
  it('values, sets, sets merged into sets, and references bound when they are defined', () => {
    const c = parseNftConfig([
      'define a = 22',
      'define ports = { $a, 80 }',
      'define more = { $ports, 443 }',
      'define net = 10.0.0.0/8',
      'define b = $a',
      'redefine a = 23',
      'table ip t {',
      '  chain c {',
      '    tcp dport $more accept',
      '    tcp dport { $ports, 8080 } accept',
      '    ip saddr $net tcp dport $b accept',
      '    tcp dport $a drop',
      '  }',
      '}',
    ].join('\n'), 'f.nft');
    const written = parseNftConfig([
      'table ip t {',
      '  chain c {',
      '    tcp dport { 22, 80, 443 } accept',
      '    tcp dport { 22, 80, 8080 } accept',
      '    ip saddr 10.0.0.0/8 tcp dport 22 accept',
      '    tcp dport 23 drop',
      '  }',
      '}',
    ].join('\n'), 'g.nft');
    expect(rulesOf(c)).toEqual(rulesOf(written));
  });

  it('names are scoped to their block; a visible name defined again is refused, as nft refuses it', () => {
    expect(() => parseNftConfig('table ip t {\n  define p = 1\n  chain c {\n    tcp dport $p accept\n  }\n}\n')).not.toThrow();
    const cases: [string, number, number, RegExp][] = [
      ['table ip t {\n  define p = 1\n}\ntable ip u {\n  chain c {\n    tcp dport $p accept\n  }\n}\n', 6, 16, /unknown identifier 'p'/],
      ['define a = 1\ntable ip t {\n  define a = 2\n}\n', 3, 10, /redefinition of symbol 'a'/],
      ['define a = 1\ndefine a = 2\n', 2, 8, /redefinition of symbol 'a'/],
      ['define a = 1\nundefine a\ntable ip t {\n  chain c {\n    tcp dport $a accept\n  }\n}\n', 5, 16, /unknown identifier 'a'/],
      ['define a =\n', 1, 11, /has no value/],
      ['define a 1\n', 1, 10, /expected '='/],
      ['define = 1\n', 1, 8, /expected a variable name/],
      ['define a = $b\n', 1, 13, /unknown identifier 'b'/],
      // An error in a value points where the value was written.
      ['define p = 8o\ntable ip t {\n  chain c {\n    tcp dport $p accept\n  }\n}\n', 1, 12, /8o/],
    ];
    for (const [text, line, col, why] of cases) {
      const e = refusal(text);
      expect([e.file, e.line, e.column, e.reason], text).toEqual(['f.nft', line, col, expect.stringMatching(why)]);
    }
    // redefine and undefine of a name never defined are no errors, as in nft
    expect(() => parseNftConfig('undefine x\nredefine y = 1\ntable ip t {\n  chain c {\n    tcp dport $y accept\n  }\n}\n')).not.toThrow();
  });

  it('a $ in a string or a comment is text', () => {
    const c = parseNftConfig('table ip t {\n  chain c {\n    accept comment "costs $5" # $nothing\n  }\n}\n');
    expect(rulesOf(c)[0]!.chains[0]).toEqual(['accept comment "costs $5"']);
  });
});

describe('include', () => {
  it('a ruleset split over includes with defines: errors give file:line:col in the right file', () => {
    const dir = tree({
      'vars.nft': 'define lan = 192.168.0.0/16\ndefine web = { 80, 443 }\n',
      'nat.d/10-post.nft': 'table ip nat {\n  chain post {\n    type nat hook postrouting priority srcnat; policy accept;\n    ip saddr $lan masquerade\n  }\n}\n',
      'nat.d/20-pre.nft': 'table ip nat {\n  chain pre {\n    type nat hook prerouting priority dstnat; policy accept;\n    tcp dport $web dnat to 10.0.0.1\n  }\n}\n',
      'nat.d/sub/ignored.nft': 'this is never read\n',
    });
    const top = `include "${dir}/vars.nft"\ninclude "${dir}/nat.d/*.nft"\n`;
    const c = parseNftConfig(top, 'top.nft');
    expect(c.tables.map((t) => t.chains.map((ch) => ch.name))).toEqual([['post', 'pre']]);
    // A rule error in an included file.
    writeFileSync(join(dir, 'nat.d/20-pre.nft'), 'table ip nat {\n  chain pre {\n    tcp dport $web dnat to 10.0.0.300\n  }\n}\n');
    let e = refusal(top, 'top.nft');
    expect([e.file, e.line, e.column]).toEqual([`${dir}/nat.d/20-pre.nft`, 3, 28]);
    // A syntax error the reader finds in an included file.
    writeFileSync(join(dir, 'nat.d/20-pre.nft'), 'table ip nat {\n  chain pre {\n    accept\n  }\n');
    e = refusal(top, 'top.nft');
    expect([e.file, e.line, e.column, e.reason]).toEqual([`${dir}/nat.d/20-pre.nft`, 1, 1, expect.stringMatching(/missing '}'/)]);
    // A bad value in the variables file, used in another file: where the value was written.
    writeFileSync(join(dir, 'nat.d/20-pre.nft'), 'table ip nat {\n  chain pre {\n    accept\n  }\n}\n');
    writeFileSync(join(dir, 'vars.nft'), 'define lan = 192.168.0.0/33\n');
    e = refusal(top, 'top.nft');
    expect([e.file, e.line, e.column]).toEqual([`${dir}/vars.nft`, 1, 14]);
    // An unknown variable in the top file, after the includes.
    e = refusal(`${top}table ip x {\n  chain c {\n    tcp dport $nope accept\n  }\n}\n`, 'top.nft');
    expect([e.file, e.line, e.column, e.reason]).toEqual(['top.nft', 5, 16, "unknown identifier 'nope'"]);
  });

  it('resolves names as nft does: include path then /etc, ./ from the working directory, globs sorted, directories skipped', () => {
    const dir = tree({
      'inc/b.nft': 'table ip t {\n  chain b {\n  }\n}\n',
      'inc/a.nft': 'table ip t {\n  chain a {\n  }\n}\n',
      'inc/c.txt': 'not included\n',
      'inc/d.nft/x': 'a directory named like a file\n',
      'here/h.nft': 'table ip h {\n}\n',
    });
    const chains = (c: Config) => c.tables.flatMap((t) => t.chains.map((ch) => ch.name));
    expect(chains(parseNftConfig('include "*.nft"\n', 'f.nft', { includePath: [join(dir, 'inc')] }))).toEqual(['a', 'b']);
    expect(chains(parseNftConfig('include "b.nft"\n', 'f.nft', { includePath: [join(dir, 'inc')] }))).toEqual(['b']);
    // No match for a wildcard is no error; a missing file is.
    expect(parseNftConfig('include "none-*.nft"\n', 'f.nft', { includePath: [dir] }).tables).toEqual([]);
    let e = refusal('\n  include "b.nft"\n', 'f.nft');
    expect([e.line, e.column, e.reason]).toEqual([2, 3, 'File not found: b.nft']);
    // A relative name is never looked for beside the including file, as in nft.
    writeFileSync(join(dir, 'inc/top.nft'), 'include "a.nft"\n');
    e = refusal(`include "${dir}/inc/top.nft"\n`, 'f.nft');
    expect([e.file, e.line, e.reason]).toEqual([`${dir}/inc/top.nft`, 1, 'File not found: a.nft']);
    const cwd = process.cwd();
    try {
      process.chdir(dir);
      expect(parseNftConfig('include "./here/h.nft"\n', 'f.nft').tables.map((t) => t.name)).toEqual(['h']);
    } finally {
      process.chdir(cwd);
    }
    // Includes nest 16 files deep at most (a file including itself).
    writeFileSync(join(dir, 'loop.nft'), `include "${dir}/loop.nft"\n`);
    e = refusal(`include "${dir}/loop.nft"\n`, 'f.nft');
    expect([e.file, e.reason]).toEqual([`${dir}/loop.nft`, 'Include nested too deeply, max 16 levels']);
    // A FIFO is refused at the include, without blocking on it.
    expect(spawnSync('mkfifo', [join(dir, 'fifo.nft')]).status).toBe(0);
    e = refusal(`\ninclude "${dir}/fifo.nft"\n`, 'f.nft');
    expect([e.file, e.line, e.reason]).toEqual(['f.nft', 2, `Not a regular file: "${dir}/fifo.nft"`]);
  });

  it('defines in an included file inside a table stay in that table', () => {
    const dir = tree({ 'v.nft': 'define z = 5\n' });
    expect(() => parseNftConfig(`table ip t {\n  include "${dir}/v.nft"\n  chain c {\n    tcp dport $z accept\n  }\n}\n`)).not.toThrow();
    const e = refusal(`table ip t {\n  include "${dir}/v.nft"\n}\ntable ip u {\n  chain c {\n    tcp dport $z accept\n  }\n}\n`);
    expect([e.line, e.column, e.reason]).toEqual([6, 16, "unknown identifier 'z'"]);
  });

  it('nft -I DIR -f and nfkeeper install the same split ruleset: listings and netlink dumps alike, check in sync', async () => {
    const dir = tree({
      'conf.d/defs.nft': 'define ext = "eth0"\ndefine lan = { 10.0.0.0/8, 192.168.0.0/16 }\ndefine web = { http, https }\n',
      'conf.d/rules/1-filter.nft': 'table inet split {\n  chain filt {\n    type filter hook forward priority filter; policy accept;\n' +
        '    ip saddr $lan tcp dport $web accept\n    oifname $ext ip saddr { $lan, 172.16.0.0/12 } counter\n  }\n}\n',
      'conf.d/rules/2-nat.nft': 'table inet split {\n  define backend = 10.1.1.1\n  chain pre {\n    type nat hook prerouting priority dstnat; policy accept;\n' +
        '    iifname $ext tcp dport $web dnat ip to $backend\n  }\n}\n',
      'top.nft': 'include "defs.nft"\ninclude "rules/*.nft"\n',
    });
    const top = join(dir, 'top.nft');
    const byUs = parseNftConfig('include "defs.nft"\ninclude "rules/*.nft"\n', top, { includePath: [join(dir, 'conf.d')] });
    expect(byUs.tables[0]!.chains.map((c) => c.rules.length)).toEqual([2, 1]);
    await withNetns(async (a) => {
      a.exec('nft', ['-I', join(dir, 'conf.d'), '-f', top]);
      const inc = ['-I', join(dir, 'conf.d')];
      await withNetns(async (b) => {
        const apply = await cli('apply', '--config', top, ...inc, '--netns', b.path);
        expect([apply.code, apply.err]).toEqual([0, '']);
        expect(b.exec('nft', ['list', 'table', 'inet', 'split'])).toBe(a.exec('nft', ['list', 'table', 'inet', 'split']));
        expect(netlinkDump(b, 'inet', 'split')).toBe(netlinkDump(a, 'inet', 'split'));
      }, 'nftexpand-b');
      const check = await cli('check', '--config', top, ...inc, '--netns', a.path);
      // without the include directory, as nft: the relative names are looked for in /etc only
      const bare = await cli('validate', '--config', top);
      expect([bare.code, bare.err]).toEqual([2, `${top}:1:1: error: File not found: defs.nft`]);
      expect([check.code, check.err, check.out]).toEqual([0, '', expect.anything()]);
    }, 'nftexpand-a');
  });
});

describe('define and include: a property', () => {
  it('any corpus rule with its words factored into defines, its table split over included files, compiles as written', () => {
    // (postrouting rules without jumps: a table of one chain holds them)
    const rules = CORPUS.filter((r) => r.family === 'ip' && r.chain === 'post' && !/\$|"|\b(?:jump|goto)\b/.test(r.text));
    const interfaces = interfaceTable(CORPUS_INTERFACES);
    fc.assert(fc.property(
      fc.array(fc.integer({ min: 0, max: rules.length - 1 }), { minLength: 1, maxLength: 6 }),
      fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
      fc.integer({ min: 1, max: 3 }),
      (picks, factor, parts) => {
        const texts = picks.map((i) => rules[i]!.text);
        const chain = (rs: string[], name: string) => `\tchain ${name} {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n` +
          rs.map((r) => `\t\t${r}\n`).join('') + '\t}\n';
        const flat = `table ip p {\n${chain(texts, 'c')}}\n`;
        // Words that are values (digits, addresses, prefixes) become defines, some of them.
        const defs: string[] = [];
        let n = 0;
        const factored = texts.map((t) => t.split(' ').map((w) => {
          if (!/^[0-9][0-9./:-]*$/.test(w) || !factor[n++ % factor.length]) return w;
          defs.push(`define v${defs.length} = ${w}`);
          return `$v${defs.length - 1}`;
        }).join(' '));
        const dir = tree({ 'defs.nft': `${defs.join('\n')}\n` });
        // the chain's rules in `parts` files: the first with the chain's head, the last with its end
        const per = Math.ceil(factored.length / parts);
        const pieces = Array.from({ length: parts }, (_, i) => factored.slice(i * per, (i + 1) * per));
        pieces.forEach((p, i) => writeFileSync(join(dir, `r${i}.nft`), p.map((r) => `\t\t${r}\n`).join('')));
        const top = `include "${dir}/defs.nft"\ntable ip p {\n\tchain c {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n` +
          `\t\tinclude "${dir}/r*.nft"\n\t}\n}\n`;
        const a = parseNftConfig(flat, 'flat.nft', { interfaces });
        const b = parseNftConfig(top, 'top.nft', { interfaces });
        expect(rulesOf(b)).toEqual(rulesOf(a));
      },
    ), { numRuns: 150 });
  });
});
