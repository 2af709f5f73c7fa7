/**
 * A neighbour committing at a fixed rate to a table of its own (adds and deletes `ip neigh2`, one
 * commit each) in the namespace given, until killed: what a busy node's other writers look like to
 * the daemon (every commit moves the ruleset's generation, none touches an owned table).
 *
 *   npx tsx test/helpers/neighbour.ts NETNS_PATH RATE_PER_SECOND
 */
import { open } from '../../src/netlink/socket.js';

const [path, rateArg] = process.argv.slice(2);
const rate = Number(rateArg);
if (!path || !(rate > 0)) throw new Error('usage: neighbour.ts NETNS_PATH RATE_PER_SECOND');
const s = open({ netns: path });
const periodMs = 1000 / rate;
const t0 = performance.now();
let n = 0;
for (;;) {
  const op = { verb: n % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neigh2' } as const;
  if (s.commitNow([op]) === false) await s.commit([op]);
  n++;
  // Paced from the start, not from the last commit: the rate holds whatever a commit costs.
  const wait = t0 + n * periodMs - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
}
