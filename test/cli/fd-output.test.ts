/**
 * stdout and stderr written to the descriptor (src/base/fd-output.ts), bin/nfkeeper.js as
 * installed (the build): through a pipe whose reader is late and slow, in blocking mode and in
 * non-blocking mode (where a full pipe answers EAGAIN or a short count and the stream takes the
 * rest), the bytes and the exit code equal a file redirect's; a closed pipe and a full disk end as
 * they did with Node's stream (its error, exit 1); a terminal is still told from a pipe; and a
 * command that prints a few lines loads neither node:net nor node:tty.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTerminal } from '../../src/base/fd-output.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { netnsPerSuite } from '../helpers/netns-hooks.js';
import { postroutingYaml } from '../keeper/helpers.js';
import { tempDir } from '../owners/fixtures.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'bin', 'nfkeeper.js');
const READER = fileURLToPath(new URL('./slow-reader.py', import.meta.url));
const RULES = 5_000;
const dir = tempDir('fd-output');
// The code cache of the test's own (a run writes its entry after the command).
const env = { ...process.env, NODE_COMPILE_CACHE: join(dir, 'cache') };
// Node's modules the process loaded, written at its exit to the file the variable names.
const HOOK = 'data:text/javascript,import{writeFileSync}from"node:fs";process.on("exit",()=>writeFileSync(process.env.NFK_TEST_MODULES,JSON.stringify(process.moduleLoadList)))';

function config(n: number, bad = false): string {
  const rules: string[] = [];
  for (let i = 0; i < n; i++) rules.push(`ip saddr 10.0.${i >> 8}.${i & 255} ip daddr 192.168.0.0/16 ${bad ? 'masquerade fully-randum' : 'return'}`);
  return postroutingYaml('big', rules);
}

type Mode = 'file' | 'block' | 'nonblock' | 'closed' | 'pty';
interface Run { code: number; bytes: Buffer; stderr: string; modules: string[] }

/** Runs `nfkeeper args` with output `fd` to a file, or through slow-reader.py in `mode`. */
function run(tag: string, mode: Mode, fd: 1 | 2, args: string[]): Run {
  const out = join(dir, `${tag}.${mode}`);
  const modules = `${out}.modules`;
  const cmd = [process.execPath, '--import', HOOK, BIN, ...args];
  const e = { ...env, NFK_TEST_MODULES: modules };
  let code: number;
  let stderr: string;
  if (mode === 'file') {
    const f = openSync(out, 'w');
    try {
      const r = spawnSync(cmd[0]!, cmd.slice(1), { stdio: ['ignore', fd === 1 ? f : 'ignore', fd === 2 ? f : 'pipe'], env: e, encoding: 'utf8', timeout: 120_000 });
      [code, stderr] = [r.status!, r.stderr ?? ''];
    } finally {
      closeSync(f);
    }
  } else {
    const r = spawnSync('python3', [READER, mode, String(fd), out, ...cmd], { env: e, encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    [code, stderr] = [Number(r.stdout.trim()), r.stderr];
  }
  return { code, stderr, bytes: mode === 'closed' ? Buffer.alloc(0) : readFileSync(out), modules: JSON.parse(readFileSync(modules, 'utf8')) as string[] };
}

const lines = (b: Buffer) => b.toString('utf8').split('\n');

describe('stdout and stderr through a pipe whose reader is slow', { timeout: 300_000 }, () => {
  const good = join(dir, 'good.yaml');
  const bad = join(dir, 'bad.yaml');
  beforeAll(() => {
    writeFileSync(good, config(RULES));
    writeFileSync(bad, config(RULES, true));
  });

  /** The file's run, the blocking pipe's and the non-blocking pipe's: the same bytes and code. */
  function same(tag: string, fd: 1 | 2, args: (mode: Mode) => string[], code: number): Record<'file' | 'block' | 'nonblock', Run> {
    const r = {} as Record<'file' | 'block' | 'nonblock', Run>;
    for (const mode of ['file', 'block', 'nonblock'] as const) r[mode] = run(tag, mode, fd, args(mode));
    for (const mode of ['file', 'block', 'nonblock'] as const) {
      expect(r[mode].code, `${tag} ${mode}: ${r[mode].stderr}`).toBe(code);
      // Not toEqual on megabytes: where they first differ is what a reader needs.
      expect(r[mode].bytes.length, `${tag} ${mode}`).toBe(r.file.bytes.length);
      expect(r[mode].bytes.equals(r.file.bytes), `${tag} ${mode}`).toBe(true);
    }
    // The non-blocking pipe filled: its stream took the rest (node:net).
    expect(r.nonblock.modules).toContain('NativeModule net');
    return r;
  }

  it('validate --json: one line of megabytes on stdout (exit 2)', () => {
    const r = same('validate-json', 1, () => ['validate', '--json', '--config', bad], 2);
    expect(r.file.bytes.length).toBeGreaterThan(1 << 20);
    // Written to the descriptor while it took each write whole (a file, a blocking pipe): no
    // stream, no node:net.
    expect(r.file.modules).not.toContain('NativeModule net');
    expect(r.block.modules).not.toContain('NativeModule net');
    expect((JSON.parse(r.file.bytes.toString('utf8')) as { errors: unknown[] }).errors).toHaveLength(RULES);
  });

  it('validate: an error a line on stderr, each its own write, in order (exit 2)', () => {
    const r = same('validate-err', 2, () => ['validate', '--config', bad], 2);
    // Written to the descriptor while it took each write whole (a file, a blocking pipe): no
    // stream, no node:net.
    expect(r.file.modules).not.toContain('NativeModule net');
    expect(r.block.modules).not.toContain('NativeModule net');
    const got = lines(r.nonblock.bytes).filter(Boolean).map((l) => Number(/^[^:]+:(\d+):/.exec(l)?.[1]));
    expect(got).toHaveLength(RULES);
    expect(got).toEqual([...got].sort((a, b) => a - b));
  });

  describe('apply: the plan, then a line after it (exit 0)', () => {
    const ns: Partial<Record<Mode, Netns>> = {};
    afterAll(() => {
      for (const n of Object.values(ns)) n?.remove();
    });
    it('in order and whole', () => {
      // Each run installs into a namespace of its own, so each prints the whole plan.
      const r = same('apply', 1, (mode) => ['apply', '--config', good, '--netns', (ns[mode] = createNetns(`fdout-${mode}`)).path], 0);
      const text = lines(r.nonblock.bytes);
      expect(text.length).toBeGreaterThan(RULES);
      expect(text.at(-2)).toMatch(/^applied \d+ operations in one batch$/);
    });
  });
});

describe('errors of the output end as they did with Node\'s stream', { timeout: 120_000 }, () => {
  it('a closed pipe: EPIPE, exit 1', () => {
    const r = run('closed', 'closed', 1, ['validate', '--config', join(ROOT, 'examples', 'flannel.yaml')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^Error: write EPIPE$/m);
  });

  it('a full disk: ENOSPC, exit 1; an error message that cannot be written: exit 1', () => {
    const flannel = join(ROOT, 'examples', 'flannel.yaml');
    const full = spawnSync('sh', ['-c', `exec "$0" "$1" validate --config "$2" >/dev/full`, process.execPath, BIN, flannel], { encoding: 'utf8', env });
    expect({ status: full.status, stderr: full.stderr }).toMatchObject({ status: 1, stderr: expect.stringMatching(/^Error: ENOSPC: no space left on device, write$/m) });
    const err = spawnSync('sh', ['-c', `exec "$0" "$1" validate --config /nonexistent.yaml 2>/dev/full`, process.execPath, BIN], { encoding: 'utf8', env });
    expect({ status: err.status, stdout: err.stdout }).toEqual({ status: 1, stdout: '' });
  });
});

describe('a terminal', { timeout: 120_000 }, () => {
  const ns = netnsPerSuite('fdout-tty');

  it('is told from a pipe: a long plan is summarised on a terminal, whole through a pipe', () => {
    const big = join(dir, 'tty.yaml');
    writeFileSync(big, config(300));
    const tty = run('check-tty', 'pty', 1, ['check', '--config', big, '--netns', ns.path]);
    expect(tty.code).toBe(1);
    const shown = lines(tty.bytes);
    expect(shown.length).toBeLessThan(25);
    expect(shown.at(-2)).toMatch(/^# \d+ plan lines \(\+\d+ -0\), summarised on a terminal/);
    const piped = run('check-pipe', 'block', 1, ['check', '--config', big, '--netns', ns.path]);
    expect(piped.code).toBe(1);
    expect(lines(piped.bytes).length).toBeGreaterThan(300);
    // (node:tty, for isatty(3), only where it was a character device other than /dev/null)
    expect(piped.modules).not.toContain('NativeModule tty');
  });

  it('isTerminal: a pseudo-terminal is one; /dev/null, /dev/full and a file are not', () => {
    const fds = ['/dev/ptmx', '/dev/null', '/dev/full', join(dir, 'tty.yaml')].map((p) => openSync(p, 'r+'));
    try {
      expect(fds.map(isTerminal)).toEqual([true, false, false, false]);
    } finally {
      for (const f of fds) closeSync(f);
    }
  });
});

describe('a command that prints a few lines', { timeout: 120_000 }, () => {
  const ns = netnsPerSuite('fdout-net');

  it('loads neither node:net nor node:tty (stdout and stderr pipes)', () => {
    const flannel = join(ROOT, 'examples', 'flannel.yaml');
    for (const args of [['validate', '--config', flannel], ['check', '--config', flannel, '--netns', ns.path], ['validate', '--config', '/nonexistent.yaml']]) {
      const modules = join(dir, 'few.modules');
      const r = spawnSync(process.execPath, ['--import', HOOK, BIN, ...args], { encoding: 'utf8', env: { ...env, NFK_TEST_MODULES: modules } });
      expect(r.status, r.stderr).toBe(args[0] === 'check' ? 1 : args[2] === flannel ? 0 : 2);
      expect(r.stdout + r.stderr).toMatch(args[0] === 'check' ? /^\+ add table ip nfkeeper$/m : /ok|cannot read/);
      const loaded = JSON.parse(readFileSync(modules, 'utf8')) as string[];
      expect(loaded, args.join(' ')).not.toContain('NativeModule net');
      expect(loaded, args.join(' ')).not.toContain('NativeModule tty');
    }
  });
});
