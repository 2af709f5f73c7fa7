/**
 * A neighbour: commits to a table of its own in the namespace given (adds and deletes it, one commit
 * each), RATE times a second or as fast as it can (`max`), until SIGTERM. What a busy node's other
 * writers look like to the daemon: every commit moves the ruleset's generation, none touches an owned
 * table. Prints `ready` once its socket is open and, at SIGTERM, `COMMITS FAILED`, then exits.
 * Started by test/helpers/neighbour.ts.
 *
 *   npx tsx test/helpers/neighbour-child.ts NETNS_PATH RATE|max [TABLE]
 */
import { open } from '../../src/netlink/socket.js';

const [path, rateArg = 'max', table = 'neighbour'] = process.argv.slice(2);
const rate = rateArg === 'max' ? Infinity : Number(rateArg);
if (!path || !(rate > 0)) throw new Error('usage: neighbour-child.ts NETNS_PATH RATE|max [TABLE]');

const sock = open({ netns: path });
let commits = 0;
let failed = 0;
let stop = false;
process.on('SIGTERM', () => { stop = true; });

async function commitOne(): Promise<void> {
  const op = { verb: commits % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: table } as const;
  try {
    if (sock.commitNow([op]) === false) await sock.commit([op]);
    commits++;
  } catch {
    failed++;
  }
}

console.log('ready');
const periodMs = 1000 / rate;
const t0 = performance.now();
while (!stop) {
  if (rate === Infinity) {
    // A few hundred commits per turn of the event loop, so that the signal is seen.
    for (let i = 0; i < 200 && !stop; i++) await commitOne();
    await new Promise((r) => setImmediate(r));
  } else {
    await commitOne();
    // Paced from the start, not from the last commit: the rate holds whatever a commit costs.
    const wait = t0 + (commits + failed) * periodMs - performance.now();
    await new Promise((r) => (wait > 0 ? setTimeout(r, wait) : setImmediate(r)));
  }
}
sock.close();
console.log(`${commits} ${failed}`);
