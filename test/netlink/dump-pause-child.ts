/**
 * The sweep of test/netlink/dump-pause.test.ts, in a process of its own: the addon reads
 * NFKEEPER_TEST_DUMP_PAUSE when it is loaded (and again as each watched dump is sent). For each K
 * given, one watched dump of table ip own, of KIND, one try, paused at its K-th datagram while the
 * parent commits (fd 3 says where, fd 4 lets it go on); prints one JSON line per dump:
 * { k, outcome: the dump's summary (dumpSummary) or 'interrupted', taken: taken interrupted }.
 *
 *   NFKEEPER_TEST_DUMP_PAUSE= npx tsx test/netlink/dump-pause-child.ts NETNS_PATH KIND K...
 */
import { DumpInterruptedError, open } from '../../src/index.js';
import { dumpSummary, type PauseKind } from './dump-pause-kinds.js';

const [path, kind, ...ks] = process.argv.slice(2);
if (!path || !kind || process.env.NFKEEPER_TEST_DUMP_PAUSE === undefined) throw new Error('usage: NFKEEPER_TEST_DUMP_PAUSE= dump-pause-child.ts NETNS_PATH KIND K...');
const s = open({ netns: path });
for (const k of ks.map(Number)) {
  process.env.NFKEEPER_TEST_DUMP_PAUSE = String(k);
  const taken = s.dumpsTakenInterrupted;
  let outcome: string;
  try {
    outcome = await dumpSummary(s, kind as PauseKind, true);
  } catch (e) {
    if (!(e instanceof DumpInterruptedError)) throw e;
    outcome = 'interrupted';
  }
  process.env.NFKEEPER_TEST_DUMP_PAUSE = '';
  console.log(JSON.stringify({ k, outcome, taken: s.dumpsTakenInterrupted > taken }));
}
s.close();
