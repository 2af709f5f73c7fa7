/**
 * The watched table dumps (native/dump.cc: a table's rule, chain, set and object dumps watch the
 * commits made while they run and take an interrupted one only when none of them named the table;
 * docs/notes/2026-12-07-proof-window.md) with a commit landing at each message boundary. The addon's
 * test seam NFKEEPER_TEST_DUMP_PAUSE=K stops a dump after its request (K = 0) or its K-th datagram
 * (the kernel built the next one in that recv: the commit lands between datagrams K + 1 and K + 2)
 * until the test has committed; each dump is one try. For each kind (rules decoded, rule digests,
 * chains, sets, objects) and each K from 0 past the dump's last datagram, one of:
 *   own    a commit that shifts the dump's cursor in table ip own (a rule inserted at the head of
 *          its chain or deleted again; the first chain, set or counter deleted and added again);
 *   other  a table created or deleted elsewhere (the watch takes such a dump);
 *   chain elsewhere (chain dumps: the kernel counts every table's chains) a chain of table ip
 *          aother, listed before own, deleted and added again.
 * Every dump is either the table as it was before the commit or after it, whole, or interrupted
 * (retried by a caller): never a mix of the two. The commits elsewhere leave every dump taken; the
 * own commits and the other table's chains interrupt some (the sweep reaches what it is for).
 * elements: set big's element dump (1,500 elements: three datagrams), own = the first element in its
 * order deleted or added back. The kernel never flags an element dump interrupted: before the
 * addon watched them, a deletion after the first datagram gave a view of neither (K = 0, 3 of 3).
 *   NFK_PAUSE_KINDS=elements,rules npx vitest run test/netlink/dump-pause.test.ts   (some kinds only)
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { PAUSE_KINDS, dumpSummary, type PauseKind } from './dump-pause-kinds.js';

const CHILD = fileURLToPath(new URL('./dump-pause-child.ts', import.meta.url));
const RULES = 1_000;
const CHAINS = 600;
const SETS = 300;
const OBJECTS = 600;
const ELEMENTS = 1_500;
type Commit = 'own' | 'other' | 'chain elsewhere';

function setUp(ns: Netns): void {
  const lines = ['table ip aother {'];
  for (let i = 0; i < 20; i++) lines.push(` chain a${i} { }`);
  lines.push('}', 'table ip own {');
  for (let i = 0; i < CHAINS; i++) lines.push(` chain e${i} { }`);
  for (let i = 0; i < SETS; i++) lines.push(` set s${i} { type ipv4_addr; }`);
  for (let i = 0; i < OBJECTS; i++) lines.push(` counter k${i} { }`);
  lines.push(` set big { type ipv4_addr; elements = { ${Array.from({ length: ELEMENTS }, (_, i) => `10.1.${i >> 8}.${i & 255}`).join(', ')} } }`);
  lines.push(' chain c {');
  for (let i = 0; i < RULES; i++) lines.push(`  ip saddr 10.0.${i >> 8}.${i & 255} accept`);
  lines.push(' }', '}');
  ns.nft(`${lines.join('\n')}\n`);
}

/** Makes one commit of `what` for a dump of `kind`. */
function committer(ns: Netns, sock: NftSocket, kind: PauseKind, what: Commit): () => Promise<void> {
  let n = 0;
  let head: number | undefined;
  let gone: string | undefined;
  const first = async (k: 'chain' | 'set' | 'obj', table: string) => {
    const dump = (sock as unknown as { dump: (kind: string, family: string, table: string) => Promise<{ name: string }[]> }).dump.bind(sock);
    return (await dump(k, 'ip', table))[0]!.name;
  };
  return async () => {
    n++;
    if (what === 'other') {
      ns.nft(n % 2 ? 'add table ip neighbour\n' : 'delete table ip neighbour\n');
    } else if (what === 'chain elsewhere') {
      const c = await first('chain', 'aother');
      ns.nft(`delete chain ip aother ${c}\nadd chain ip aother ${c}\n`);
    } else if (kind === 'rules' || kind === 'digests') {
      if (head === undefined) {
        head = Number(/# handle (\d+)/.exec(ns.exec('nft', ['-e', '-a', 'insert', 'rule', 'ip', 'own', 'c', 'ip', 'daddr', '192.0.2.1', 'accept']))![1]);
      } else {
        ns.nft(`delete rule ip own c handle ${head}\n`);
        head = undefined;
      }
    } else if (kind === 'chains') {
      const c = await first('chain', 'own');
      ns.nft(`delete chain ip own ${c}\nadd chain ip own ${c}\n`);
    } else if (kind === 'elements') {
      // The first element in the dump's order deleted, then added back: a deletion behind the
      // kernel's cursor shifts it (one element not yet dumped would be skipped).
      if (gone === undefined) {
        const dump = (sock as unknown as { dump: (kind: string, family: string, table: string, name: string) => Promise<{ key: string }[]> }).dump.bind(sock);
        gone = [...Buffer.from((await dump('element', 'ip', 'own', 'big'))[0]!.key, 'hex')].join('.');
        ns.nft(`delete element ip own big { ${gone} }\n`);
      } else {
        ns.nft(`add element ip own big { ${gone} }\n`);
        gone = undefined;
      }
    } else if (kind === 'sets') {
      const s = await first('set', 'own');
      ns.nft(`delete set ip own ${s}\nadd set ip own ${s} { type ipv4_addr; }\n`);
    } else {
      const o = await first('obj', 'own');
      ns.nft(`delete counter ip own ${o}\nadd counter ip own ${o}\n`);
    }
  };
}

interface Outcome { k: number; outcome: string; taken: boolean }

/** One child's dumps of `kind`, paused at each K, `commit` made at each pause; each outcome with the views it may be. */
async function sweep(ns: Netns, sock: NftSocket, kind: PauseKind, ks: number[], commit: () => Promise<void>):
  Promise<{ outcome: Outcome; views: string[]; paused: boolean }[]> {
  let state = await dumpSummary(sock, kind, false);
  const initial = state;
  const pauses: { k: number; before: string; after: string }[] = [];
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ns.path, kind, ...ks.map(String)], {
    env: { ...process.env, NFKEEPER_TEST_DUMP_PAUSE: '' }, stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'],
  });
  const [, stdout, stderr, said, go] = child.stdio as [null, NodeJS.ReadableStream, NodeJS.ReadableStream, NodeJS.ReadableStream, NodeJS.WritableStream];
  let out = '', err = '', pending = '';
  let chain = Promise.resolve();
  stdout.on('data', (d) => { out += d; });
  stderr.on('data', (d) => { err += d; });
  said.on('data', (d) => {
    pending += d;
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const l of lines) {
      chain = chain.then(async () => {
        const before = state;
        await commit();
        state = await dumpSummary(sock, kind, false);
        pauses.push({ k: Number(l), before, after: state });
        go.write('g');
      });
    }
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  await chain;
  if (code !== 0) throw new Error(`the child exited ${code}: ${err}`);
  const outcomes = out.trim().split('\n').map((l) => JSON.parse(l) as Outcome);
  expect(outcomes.map((o) => o.k)).toEqual(ks);
  // A dump not paused saw the state the last pause before it left (dumps and pauses come in K's order).
  return outcomes.map((o) => {
    const p = pauses.find((x) => x.k === o.k);
    if (p) return { outcome: o, views: [p.before, p.after], paused: true };
    const last = pauses.filter((x) => x.k < o.k).at(-1);
    return { outcome: o, views: [last ? last.after : initial], paused: false };
  });
}

describe('a commit at each message boundary of a watched table dump', () => {
  it('gives a whole view, before or after it, or an interrupted dump: never a mixed one', { timeout: 300_000 }, async () => {
    await withNetns(async (ns) => {
      setUp(ns);
      const sock = open({ netns: ns.path });
      const seen: string[] = [];
      try {
        for (const kind of (process.env.NFK_PAUSE_KINDS?.split(',') as PauseKind[] | undefined) ?? PAUSE_KINDS) {
          const ks = Array.from({ length: kind === 'rules' || kind === 'digests' || kind === 'elements' ? 12 : 6 }, (_, i) => i);
          for (const what of ['own', 'other', ...(kind === 'chains' ? ['chain elsewhere'] as const : [])] as Commit[]) {
            const dumps = await sweep(ns, sock, kind, ks, committer(ns, sock, kind, what));
            const paused = dumps.filter((d) => d.paused);
            const mixed = dumps.filter((d) => d.outcome.outcome !== 'interrupted' && !d.views.includes(d.outcome.outcome));
            expect(mixed.map((d) => d.outcome.k), `${kind}, ${what}: mixed views at K`).toEqual([]);
            const interrupted = dumps.filter((d) => d.outcome.outcome === 'interrupted').length;
            // The sweep ran past the dump's end (a K with no pause), and paused at K = 0.
            expect(dumps.some((d) => !d.paused), `${kind}, ${what}: every K paused; sweep further`).toBe(true);
            expect(dumps[0]!.paused, `${kind}, ${what}`).toBe(true);
            if (what === 'other') {
              expect(interrupted, `${kind}, ${what}: a commit elsewhere spoiled a dump`).toBe(0);
              // (The kernel never flags an element dump: each of more than one datagram is confirmed, none counted as taken interrupted.)
              expect(dumps.some((d) => d.outcome.taken), `${kind}, ${what}: none taken interrupted`).toBe(kind !== 'elements');
            } else {
              expect(interrupted, `${kind}, ${what}: no dump interrupted`).toBeGreaterThan(0);
            }
            seen.push(`${kind} ${what}: ${paused.length} boundaries, ${interrupted} interrupted, ${dumps.filter((d) => d.outcome.taken).length} taken interrupted`);
          }
        }
      } finally {
        sock.close();
      }
      console.log(`dump pauses: ${seen.join('; ')}`);
    }, 'dump-pause');
  });
});
