/**
 * Runs rules given on the command line through the fidelity comparison (nft's
 * install vs nfkeeper's, dumps compared; a debugging aid):
 * `npx tsx test/rules/fidelity/try.mts FAMILY 'rule' ...`.
 */
import type { Family } from '../../../src/index.js';
import { runFamily } from './run.js';

const [family, ...rules] = process.argv.slice(2) as [Family, ...string[]];
const res = await runFamily(family, rules.map((text) => ({ family, source: 'cli', text })));
for (const r of res) {
  const o = r.outcome;
  const what = o.k === 'refused' ? `refused: ${o.message.split('\n')[0]}` : o.k === 'differs' ? `DIFFERS ${o.detail}`
    : o.k === 'crash' ? `CRASH ${o.message}` : o.k === 'nft-refuses' ? `nft refuses: ${o.why}` : 'exact';
  console.log(`${r.entry.text}\n  ${what}\n  rendered: ${r.rendered ?? '-'}${r.renderMarked ? '' : r.renderRoundTrips ? ' (round-trips)' : r.rendered ? ' (DOES NOT ROUND-TRIP)' : ''}\n  nft:      ${r.listed ?? '-'}`);
}
