/**
 * A big batch's buffer is faulted in ahead of the encoder (native/encode.cc, WriteAhead): one
 * madvise(MADV_POPULATE_WRITE) per MiB instead of a page fault per 4 KiB page first written, which
 * cost 12-14 us of CPU a page on the VM measured, against under 1 us advised
 * (docs/notes/2026-12-06-apply-kube.md). Seen from outside, under strace: a commit of a few MiB
 * advises its buffer in steps of at most a MiB, about as much as it wrote and never more than a
 * MiB past it; a small one (the daemon's repairs) advises nothing. The rules are installed either
 * way.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../src/netlink/addon.js';
import { withNetns } from '../helpers/netns.js';

const CHILD = join(PROJECT_ROOT, 'test', 'netlink', 'children', 'write-ahead-child.ts');
const hasStrace = spawnSync('strace', ['-V']).status === 0;
const MiB = 1 << 20;

/** The child's commit of `rules` rules under strace: the sizes of its MADV_POPULATE_WRITE advice. */
function advised(rules: number, netns: string): { sizes: number[]; rules: number } {
  const dir = mkdtempSync(join(tmpdir(), 'nfk-write-ahead-'));
  try {
    const out = join(dir, 'trace');
    const r = spawnSync('strace', ['-f', '-qq', '-e', 'trace=madvise', '-o', out, process.execPath, '--import', 'tsx', CHILD, String(rules), netns],
      { cwd: PROJECT_ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const sizes = readFileSync(out, 'utf8').split('\n').filter((l) => l.includes('MADV_POPULATE_WRITE'))
      .map((l) => Number(/madvise\(0x[0-9a-f]+, (\d+), MADV_POPULATE_WRITE\) = 0/.exec(l)?.[1] ?? NaN));
    return { sizes, rules: (JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { rules: number }).rules };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.skipIf(!hasStrace)('a big batch written ahead', () => {
  it('advises a 4 MiB batch a MiB at a time, about what it wrote; a small batch not at all', async () => {
    await withNetns((ns) => {
      // ~330 bytes a rule of these shapes on the wire (with the message headers): ~4 MiB.
      const big = advised(12_000, ns.path);
      expect(big.rules).toBe(12_000);
      expect(big.sizes.length).toBeGreaterThanOrEqual(3);
      for (const n of big.sizes) {
        expect(n).toBeGreaterThan(0);
        expect(n).toBeLessThanOrEqual(MiB);
        expect(n % 4096).toBe(0);
      }
      const sum = big.sizes.reduce((a, b) => a + b, 0);
      expect(sum).toBeGreaterThanOrEqual(3 * MiB);
      expect(sum).toBeLessThanOrEqual(12_000 * 384 + 4096);
      const small = advised(40, ns.path);
      expect(small.rules).toBe(40);
      expect(small.sizes).toEqual([]);
    });
  }, 120_000);
});
