/**
 * A long-lived committer for attribution.test.ts: a process of the test's own that stays alive
 * after its commits, so the keeper can look it up in /proc. Usage: committer.ts [netns path]
 * (without one: its own network namespace, as in a container).
 * Each line on stdin is a JSON array of ops, committed in one batch; it answers "ok" or the error,
 * and exits when stdin ends.
 */
import { createInterface } from 'node:readline';
import { open, type Op } from '../../../src/index.js';

const sock = open(process.argv[2] ? { netns: process.argv[2] } : {});
const lines = createInterface({ input: process.stdin });
lines.on('line', (text) => {
  sock.commit(JSON.parse(text) as Op[]).then(() => console.log('ok'), (e: Error) => console.log(`error: ${e.message}`));
});
lines.on('close', () => {
  sock.close();
});
console.log('ready');
