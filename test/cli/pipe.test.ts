/**
 * Output that always drains: every command's 100,000-line output through a slow pipe (a reader
 * that starts half a second late, so the pipe's 64 KiB fill and the writer must wait) is the
 * same, byte for byte and with the same exit code, as through a file redirect. bin/nfkeeper.js
 * as installed (the build), in namespaces of the test's own. Covers the plan of apply and check
 * (exit 0 and 1), export (exit 0 and, with an object it cannot write, 1), validate --json on a
 * config with an error in every rule (exit 2, one 60 MB line) and the same errors on stderr.
 * A one-shot stopped by a signal while its output waits for the reader ends by that signal,
 * never with exit 0 and part of the output.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, type Netns } from '../helpers/netns.js';
import { postroutingYaml } from '../keeper/helpers.js';
import { tempDir } from '../owners/fixtures.js';

const RULES = 100_000;
const dir = tempDir('pipe');

function config(n: number, bad = false): string {
  const rules: string[] = [];
  for (let i = 0; i < n; i++) {
    rules.push(`ip saddr 10.${i >> 16}.${(i >> 8) & 255}.${i & 255} ip daddr 192.168.0.0/16 ${bad ? 'masquerade fully-randum' : 'return'}`);
  }
  return postroutingYaml('big', rules);
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Runs `nfkeeper args` twice: stdout (or stderr, `stream: 2`) to a file, and through a pipe to a
 * reader that sleeps first. Returns both outputs and exit codes.
 */
function both(tag: string, args: string[], stream: 1 | 2 = 1, netnsFor?: (run: 'file' | 'pipe') => string[]) {
  const out: Record<'file' | 'pipe', { code: number; bytes: Buffer }> = {} as never;
  for (const run of ['file', 'pipe'] as const) {
    const target = join(dir, `${tag}.${run}`);
    const cmd = `node bin/nfkeeper.js ${[...args, ...(netnsFor?.(run) ?? [])].map(q).join(' ')}`;
    const redirect = stream === 1 ? '' : '2>&1 >/dev/null';
    const script = run === 'file'
      ? `${cmd} ${stream === 1 ? `>${q(target)}` : `2>${q(target)} >/dev/null`}; echo $? >${q(target)}.code`
      : `${cmd} ${redirect} | (sleep 0.5; cat >${q(target)}); echo \${PIPESTATUS[0]} >${q(target)}.code`;
    const r = spawnSync('bash', ['-c', script], { encoding: 'utf8', timeout: 300_000 });
    expect(r.status, `${tag} ${run}: ${r.stderr}`).toBe(0);
    out[run] = { code: Number(readFileSync(`${target}.code`, 'utf8')), bytes: readFileSync(target) };
  }
  return out;
}

function lines(b: Buffer): number {
  let n = 0;
  for (const c of b) if (c === 10) n++;
  return n;
}

function same(r: ReturnType<typeof both>, code: number, atLeastLines: number): void {
  expect(r.file.code).toBe(code);
  expect(r.pipe.code).toBe(code);
  expect(lines(r.file.bytes)).toBeGreaterThanOrEqual(atLeastLines);
  // Not toEqual on 60 MB: the first difference, if any, is what a reader needs.
  expect(r.pipe.bytes.length).toBe(r.file.bytes.length);
  expect(r.pipe.bytes.equals(r.file.bytes)).toBe(true);
}

describe(`${RULES.toLocaleString('en')}-line outputs through a slow pipe equal a file redirect`, { timeout: 900_000 }, () => {
  const good = join(dir, 'big.yaml');
  const bad = join(dir, 'bad.yaml');
  let empty: Netns;
  const applied: Record<'file' | 'pipe', Netns> = {} as never;

  beforeAll(() => {
    writeFileSync(good, config(RULES));
    writeFileSync(bad, config(RULES, true));
    empty = createNetns('pipe-empty');
    applied.file = createNetns('pipe-file');
    applied.pipe = createNetns('pipe-pipe');
    // bin/nfkeeper.js runs the build (scripts/setup.sh makes it).
    expect(statSync('dist/cli.js').isFile()).toBe(true);
  });
  afterAll(() => {
    for (const ns of [empty, applied.file, applied.pipe]) ns?.remove();
  });

  it('apply: the plan of a fresh install (exit 0)', () => {
    // Each run installs into a namespace of its own, so both print the whole plan.
    const r = both('apply', ['apply', '--config', good], 1, (run) => ['--netns', applied[run].path]);
    same(r, 0, RULES + 3);
    expect(r.file.bytes.toString('utf8', r.file.bytes.length - 200)).toMatch(/applied \d+ operations in one batch\n$/);
  });

  it('check: the drift against an empty namespace (exit 1)', () => {
    same(both('check', ['check', '--config', good, '--netns', empty.path]), 1, RULES + 2);
  });

  it('export: the installed table as nft text (exit 0), and with an object it cannot write (exit 1)', () => {
    same(both('export', ['export', '--table', 'ip', 'big', '--netns', applied.file.path]), 0, RULES);
    applied.file.nft('add ct timeout ip big t { protocol tcp; l3proto arp; policy = { established: 100 }; }\n');
    const r = both('export-obj', ['export', '--table', 'ip', 'big', '--netns', applied.file.path]);
    same(r, 1, RULES);
    const err = spawnSync('node', ['bin/nfkeeper.js', 'export', '--table', 'ip', 'big', '--netns', applied.file.path], { encoding: 'utf8', maxBuffer: 1 << 28 });
    expect(err.stderr).toMatch(/^nfkeeper: not exported: ip big: ct timeout t: nfkeeper cannot write it$/m);
  });

  it('validate --json on a config with an error in every rule (exit 2, one line)', () => {
    const r = both('validate-json', ['validate', '--json', '--config', bad]);
    same(r, 2, 1);
    const parsed = JSON.parse(r.pipe.bytes.toString('utf8')) as { ok: boolean; errors: unknown[] };
    expect(parsed.ok).toBe(false);
    expect(parsed.errors).toHaveLength(RULES);
  });

  it('validate: the same errors on stderr, one line each (exit 2)', () => {
    same(both('validate-err', ['validate', '--config', bad], 2), 2, RULES);
  });
});

describe('a one-shot stopped by a signal', { timeout: 120_000 }, () => {
  it('while its output waits for a reader that does not read: ends by the signal, not exit 0', async () => {
    const ns = createNetns('pipe-signal');
    const file = join(dir, 'signal.yaml');
    writeFileSync(file, config(20_000));
    try {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) {
        // stdout is a pipe nobody reads: past 64 KiB the process waits in the drain.
        const child = spawn(process.execPath, ['bin/nfkeeper.js', 'check', '--config', file, '--netns', ns.path], { stdio: ['ignore', 'pipe', 'pipe'] });
        child.stdout.pause();
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
        const exited = new Promise<{ code: number | null; signal: string | null }>((r) => child.on('exit', (code, sig) => r({ code, signal: sig })));
        // Wait until it has filled the pipe (the compile and the read are done, the plan is written).
        for (let i = 0; i < 1200 && child.stdout.readableLength === 0; i++) await new Promise((r) => setTimeout(r, 50));
        await new Promise((r) => setTimeout(r, 500));
        child.kill(signal);
        const end = await exited;
        expect(end, stderr).toEqual({ code: null, signal });
      }
    } finally {
      ns.remove();
    }
  });
});

