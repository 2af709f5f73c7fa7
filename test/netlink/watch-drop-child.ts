/**
 * The sweep of test/netlink/watch-drop.test.ts, in a process of its own: the addon reads
 * NFKEEPER_TEST_DROP_NOTIFICATION when it is loaded. For each K given, one watched rule dump of
 * table ip own (one try, by digest) with the K-th notification it receives dropped and ENOBUFS
 * reported in its place; prints one JSON line per dump: { k, dropped, taken, outcome }.
 *
 *   NFKEEPER_TEST_DROP_NOTIFICATION=0 npx tsx test/netlink/watch-drop-child.ts NETNS_PATH K...
 */
import { DumpInterruptedError, open } from '../../src/index.js';

const [path, ...ks] = process.argv.slice(2);
if (!path || process.env.NFKEEPER_TEST_DROP_NOTIFICATION === undefined) throw new Error('usage: NFKEEPER_TEST_DROP_NOTIFICATION=0 watch-drop-child.ts NETNS_PATH K...');
const s = open({ netns: path });
const native = (s as unknown as { native: { testNotificationsDropped: number } }).native;
const quiet = JSON.stringify(await s.listRuleDigests({ family: 'ip', table: 'own' }));
for (const k of ks.map(Number)) {
  process.env.NFKEEPER_TEST_DROP_NOTIFICATION = String(k);
  const drops = native.testNotificationsDropped;
  const taken = s.dumpsTakenInterrupted;
  let outcome: string;
  try {
    const got = JSON.stringify(await s.listRuleDigests({ family: 'ip', table: 'own', once: true }));
    outcome = got === quiet ? 'whole' : 'differs';
  } catch (e) {
    if (!(e instanceof DumpInterruptedError)) throw e;
    outcome = 'interrupted';
  }
  console.log(JSON.stringify({ k, dropped: native.testNotificationsDropped > drops, taken: s.dumpsTakenInterrupted > taken, outcome }));
}
s.close();
