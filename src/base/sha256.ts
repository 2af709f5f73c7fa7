/**
 * SHA-256 of a string, with node:crypto loaded at the first call: a one-shot command that hashes
 * nothing (a check whose kernel rules their digests prove, validate) does not load it and
 * its twenty modules.
 */
import { createRequire } from 'node:module';

let crypto: typeof import('node:crypto') | undefined;
const loaded = () => (crypto ??= createRequire(import.meta.url)('node:crypto') as typeof import('node:crypto'));

/** The SHA-256 of `text` (a string as UTF-8, or bytes), in hex or base64. */
export function sha256(text: string | Uint8Array, encoding: 'hex' | 'base64'): string {
  // crypto.hash: one call, no Hash object.
  return loaded().hash('sha256', text, encoding);
}

/** A SHA-256 fed piece by piece, for what is too big to hold as one string. */
export function sha256Hash(): import('node:crypto').Hash {
  return loaded().createHash('sha256');
}
