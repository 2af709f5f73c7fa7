import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sha256 } from '../../src/base/sha256.js';

describe('sha256', () => {
  it('is the SHA-256 of the text as UTF-8, in hex or base64, as a Hash object gives it', () => {
    for (const text of ['', 'ip nfkeeper', 'é ✓ \u{1F600}', 'x'.repeat(100_000)]) {
      for (const encoding of ['hex', 'base64'] as const) {
        expect(sha256(text, encoding)).toBe(createHash('sha256').update(text, 'utf8').digest(encoding));
      }
    }
    expect(sha256('abc', 'hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});
