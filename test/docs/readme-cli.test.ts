/**
 * README.md's command reference against the command line itself: every command `nfkeeper --help`
 * lists has a row in the README's CLI table, and that row names every option its `--help` shows
 * (hidden test-only options aside). Also: .ci/run runs exactly the README's test command.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cli } from '../helpers/cli.js';

const README = readFileSync('README.md', 'utf8');

/** The README's CLI table rows, by their first cell. */
function rows(): string[] {
  const start = README.indexOf('| command | what it does | exit |');
  expect(start, 'the CLI table').toBeGreaterThan(0);
  const lines = README.slice(start).split('\n').slice(2);
  return lines.slice(0, lines.findIndex((l) => !l.startsWith('|'))).map((l) => l.split(' | ')[0]!);
}

/** The commands a `--help` lists (`help` aside). */
async function commands(...parent: string[]): Promise<string[]> {
  const r = await cli(...parent, '--help');
  expect(r.code).toBe(0);
  const list = r.out.slice(r.out.indexOf('Commands:'));
  return [...list.matchAll(/^ {2}([a-z]+)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
}

/** The long options a command's `--help` shows (`--help` aside). */
async function options(...command: string[]): Promise<string[]> {
  const r = await cli(...command, '--help');
  expect(r.code).toBe(0);
  return [...new Set([...r.out.matchAll(/^ {2}(?:-\w, )?(--[a-z][a-z-]*)/gm)].map((m) => m[1]!))].filter((o) => o !== '--help');
}

describe("README's CLI table", () => {
  it('has a row for every command and names every option of it', async () => {
    const table = rows();
    const all: string[][] = [];
    for (const c of await commands()) {
      const subs = c === 'owner' ? await commands('owner') : [];
      if (subs.length) for (const s of subs) all.push([c, s]);
      else all.push([c]);
    }
    expect(all.length).toBeGreaterThan(10);
    const missing: string[] = [];
    for (const c of all) {
      // `owner ls` and `owner get` share a row: the cell that names the command.
      const name = `\`nfkeeper ${c.join(' ')}`;
      const row = table.find((r) => r.includes(`${name} `) || r.includes(`${name}\``));
      if (!row) {
        missing.push(`no row for nfkeeper ${c.join(' ')}`);
        continue;
      }
      const cell = row.split(/`, `/).find((part) => part.includes(name.slice(1))) ?? row;
      // `[--[no-]progress]` names both; `--include-path` is said once for every command with `--config`.
      const names = (o: string) => [o, o.replace(/^--(no-)?/, '--[no-]')];
      for (const o of await options(...c)) {
        if (o === '--include-path' && cell.includes('--config')) continue;
        if (!names(o).some((n) => cell.includes(n))) missing.push(`nfkeeper ${c.join(' ')}: ${o}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('.ci/run runs exactly the test command the README gives', () => {
    expect(README).toMatch(/^bash scripts\/test\.sh {5}# the whole test suite/m);
    const run = readFileSync('.ci/run', 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    expect(run.at(-1)).toBe('bash scripts/test.sh');
    // Nothing else runs: only the shell options and the move to the checkout's root come before it.
    expect(run.slice(0, -1).every((l) => /^(set -euo pipefail|cd "\$\(dirname "\$0"\)\/\.\.")$/.test(l)), run.join('\n')).toBe(true);
  });
});
