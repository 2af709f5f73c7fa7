/**
 * Reading what `nft` prints, for tests and benchmarks that check the kernel with nft itself.
 *
 *   import { ruleHandles } from '../helpers/nft.js';
 *   const h = ruleHandles(ns.exec('nft', ['-a', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting']));
 */

/** The rule handles in `nft -a list chain` output, in order (the chain's own line has one too). */
export function ruleHandles(listing: string): number[] {
  return listing.split('\n').filter((l) => !/^\s*(chain|table)\b/.test(l))
    .flatMap((l) => [...l.matchAll(/# handle (\d+)/g)].map((m) => Number(m[1])));
}
