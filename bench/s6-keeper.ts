/**
 * The keeper as its own process for S6 (and for bench/probe.ts): src/keeper
 * with events on, a 1 s tick and the fight back-off off (the probe deletes a
 * rule every few milliseconds on purpose; `nfkeeper run` would back off, as
 * deployed). Prints "ready" once the start-up pass has verified the table.
 *
 *   sudo npx tsx bench/s6-keeper.ts --netns /run/netns/NAME --config FILE
 */
import { readFileSync } from 'node:fs';
import { parseConfig } from '../src/config/config.js';
import { Keeper } from '../src/keeper/keeper.js';

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const file = arg('--config');
if (!file) throw new Error('usage: s6-keeper.ts --netns PATH --config FILE');
const keeper = new Keeper({ config: parseConfig(readFileSync(file, 'utf8'), file), netns: arg('--netns'), fight: { threshold: 1e9 } });
keeper.on('error', (e: Error) => process.stderr.write(`keeper: ${e.message}\n`));
// A repair that could not be planned from the events (the full observe ran instead) says why.
keeper.on('mirror', (m: { exact: boolean; reason?: string }) => {
  if (!m.exact) process.stderr.write(`keeper: event mirror off until the next read: ${m.reason}\n`);
});
keeper.on('mirror-fallback', (reason?: string) => process.stderr.write(`keeper: a pass read the kernel: ${reason ?? '?'}\n`));
await keeper.start();
process.stdout.write('ready\n');
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    void keeper.stop().then(() => process.exit(0));
  });
}
