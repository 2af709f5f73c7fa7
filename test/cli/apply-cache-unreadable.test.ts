/**
 * `nfkeeper apply` and `check` on a compile cache entry that passes its seal but whose rules cannot
 * be made (a fault of nfkeeper's own: rule 2's expression list names an expression not stored, the
 * seal made right). Wherever the failure is met (the kernel empty, in sync, or rule 2 differing so
 * that the desired rule is made for the diff), the command says what was wrong and where, without a
 * stack trace, removes the entry (or says why it could not), compiles the config and goes on in the
 * same run: the exit code and the kernel are those of a run without a cache, one batch where the
 * kernel differs. Into an empty kernel no rule is made (its encoded bytes are written): nothing fails.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { damagedEntry, type DamagedEntry } from '../helpers/cache-entry.js';
import { generationOf, netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { nfkDone } from './spawn.js';

const N = 1200;
const RULES = Array.from({ length: N }, (_, i) => `ip saddr 10.2.${i >> 8}.${i & 255} tcp dport 443 counter accept`);
const nftOf = (rules: string[]) => `table ip ua {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n${rules.map((r) => `\t\t${r}\n`).join('')}\t}\n}\n`;
const BROKEN = /compile cache .*compiled-.*\.json could not be read back \(rule 2 of chain input names an expression not stored\); removed; .*c\.nft was compiled/;

/** The entry damaged (test/helpers/cache-entry.ts): rule 2 of its chain names an expression not stored. */
function damage(dir: string): DamagedEntry {
  const e = damagedEntry(dir);
  expect(e.rule).toBe(RULES[1]);
  return e;
}

describe('nfkeeper apply and check: a cache entry whose rules cannot be made', { timeout: 240_000 }, () => {
  const ns = netnsPerTest('cli-cache-unreadable');
  const run = (cmd: 'apply' | 'check', cache: string, config: string, out = false) =>
    nfkDone([cmd, '--config', config, '--cache-dir', cache, '--netns', ns.path, ...(out ? [] : ['--progress'])]);
  const entries = (dir: string) => readdirSync(dir).filter((f) => f.startsWith('compiled-'));
  const dump = () => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);
  const generation = () => generationOf(ns);

  // The kernel before the command: empty, as desired, or rule 2 differing (its desired form made for the diff).
  const kernels: [string, () => void][] = [
    ['empty', () => ns.exec('nft', ['flush', 'ruleset'])],
    ['in sync', () => {}],
    ['rule 2 differing', () => {
      const out = ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'ua', 'input']);
      const handle = /10\.2\.0\.1 tcp dport 443 counter packets \d+ bytes \d+ accept # handle (\d+)/.exec(out)![1]!;
      ns.exec('nft', ['replace', 'rule', 'ip', 'ua', 'input', 'handle', handle, 'ip', 'saddr', '10.9.9.9', 'accept']);
    }],
  ];
  for (const cmd of ['apply', 'check'] as const) {
    for (const [name, set] of kernels) {
      it(`${cmd}, the kernel ${name}: says so, removes the entry, compiles and goes on`, async () => {
        const d = tempDir('cli-cache-unreadable');
        const config = join(d, 'c.nft');
        const cache = join(d, 'cache');
        writeFileSync(config, nftOf(RULES));
        // Stored by a first apply (the table installed), then damaged.
        const first = await run('apply', cache, config);
        expect(first.code, first.err.join('\n')).toBe(0);
        const bad = damage(cache).write();
        set();
        const before = dump();
        const g = generation();
        const r = await run(cmd, cache, config);
        const err = r.err.join('\n');
        expect(err).not.toMatch(/\n\s+at /);
        if (name === 'empty') {
          // Nothing to compare: the rules go to the kernel as the entry's encoded bytes, never made.
          expect(err).not.toMatch(/could not be read back/);
          expect(entries(cache).length).toBeGreaterThan(0);
        } else {
          expect(err).toMatch(BROKEN);
          // Removed; apply stored the config it compiled (check stores none).
          if (cmd === 'check') expect(entries(cache)).toEqual([]);
          else expect(readFileSync(join(cache, entries(cache).find((f) => f.endsWith('.json'))!)).equals(bad)).toBe(false);
        }
        const after = dump();
        // One batch where the kernel differs (the failure came before any commit), none where not.
        expect(generation() - g).toBe(cmd === 'apply' && name !== 'in sync' ? 1 : 0);
        if (cmd === 'check') {
          expect(after).toBe(before);
          expect(r.code, err).toBe(name === 'in sync' ? 0 : 1);
        } else {
          expect(r.code, err).toBe(0);
          // As desired: a check without a cache finds it in sync; in sync before, not written.
          const c = await nfkDone(['check', '--config', config, '--no-cache-dir', '--netns', ns.path]);
          expect(c.code, c.out.join('\n')).toBe(0);
          if (name === 'in sync') expect(after).toBe(before);
          // The next apply, in sync, reads the entry's rules: the one it stored, or (the kernel was
          // empty) the damaged one, met there as above.
          const next = await run('apply', cache, config);
          expect(next.code).toBe(0);
          if (name === 'empty') expect(next.err.join('\n')).toMatch(BROKEN);
          // (A step that took over a second says so under --progress: a loaded machine's, not asserted.)
          else expect(next.err.filter((l) => !/ \(\d+\.\d s\)$/.test(l)).join('\n')).toMatch(/^nfkeeper: compile cache matches every input: .* was not compiled$/);
        }
      });
    }
  }

  it('apply, the entry cannot be removed: says why, compiles and goes on, every time', async () => {
    const d = tempDir('cli-cache-unreadable');
    const config = join(d, 'c.nft');
    const cache = join(d, 'cache');
    writeFileSync(config, nftOf(RULES));
    expect((await run('apply', cache, config)).code).toBe(0);
    const { file, write } = damage(cache);
    const bad = write();
    execFileSync('chattr', ['+i', file]);
    try {
      for (let i = 0; i < 2; i++) {
        const g = generation();
        const r = await run('apply', cache, config);
        const err = r.err.join('\n');
        expect(err).not.toMatch(/\n\s+at /);
        expect(err).toMatch(/could not be read back \(rule 2 of chain input names an expression not stored\); it could not be removed \(EPERM\); .*c\.nft was compiled/);
        expect(r.code, err).toBe(0);
        expect(generation()).toBe(g);
        expect(readFileSync(file).equals(bad)).toBe(true);
      }
    } finally {
      execFileSync('chattr', ['-i', file]);
    }
  });
});
