/**
 * A neighbour committing to a table of its own as fast as it can: adds and deletes `ip neighbour`,
 * one commit each, until SIGTERM; then prints `commits failed` and exits. Usage: neighbour-child.ts NETNS_PATH
 */
import { open } from '../../src/netlink/socket.js';

const sock = open({ netns: process.argv[2]! });
let commits = 0;
let failed = 0;
let stop = false;
process.on('SIGTERM', () => { stop = true; });
const turn = (): void => {
  // A few hundred commits per turn of the loop, so that the signal is seen.
  for (let i = 0; i < 200 && !stop; i++) {
    try {
      sock.commitNow([{ verb: commits % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
      commits++;
    } catch {
      failed++;
    }
  }
  if (!stop) setImmediate(turn);
  else {
    sock.close();
    console.log(`${commits} ${failed}`);
  }
};
console.log('ready');
turn();
