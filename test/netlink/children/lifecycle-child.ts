/**
 * Child process for lifecycle.test.ts: scenarios that need a process (or a
 * worker thread) of their own. Usage: lifecycle-child.ts <mode> <netns path>.
 * Prints one JSON line with its findings; the exit status is the verdict.
 */
import { closeSync, openSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { DumpInterruptedError, Monitor, open, type NftSocket, type Op } from '../../../src/index.js';
import { PROJECT_ROOT } from '../../../src/netlink/addon.js';
import { sleep } from '../../helpers/wait.js';

// Each open fd as "fd -> what it is": tsx's loader on Node 22 and 24 closes sockets of its own
// just after start-up, so a count would move under the test; the fds a scenario opened must go.
// An fd gone by the time it is read is the listing's own (the directory readdirSync opened): it
// takes the lowest free number, which moves when tsx's sockets close, so it is left out.
const fdSet = (): Set<string> => new Set(readdirSync('/proc/self/fd').flatMap((fd) => {
  try {
    return [`${fd} -> ${readlinkSync(`/proc/self/fd/${fd}`)}`];
  } catch {
    return [];
  }
}));
/** The fds in `now` that were not in `before`. */
const added = (before: Set<string>, now: Set<string>): string[] => [...now].filter((f) => !before.has(f));
const threads = (): number => readdirSync('/proc/self/task').length;

async function main(mode: string, netns: string): Promise<void> {
  switch (mode) {
    case 'exit-while-busy': {
      // process.exit() with a ref'd monitor and a dump and a commit in flight:
      // the cleanup hook must stop the monitor's poll and close the sockets.
      const s = open({ netns });
      const m = new Monitor({ netns, onBatch: () => {} });
      void m;
      void s.listRules({ family: 'ip', table: 'nat' }).catch(() => {});
      void s.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'exit-test' }]).catch(() => {});
      setImmediate(() => {
        console.log(JSON.stringify({ ok: true }));
        process.exit(0);
      });
      return;
    }
    case 'crowd': {
      // More requests at once on one socket than libuv's pool has threads, a big rule dump (started
      // on this thread, finished on a worker) among them, with file system calls (the same pool)
      // and generation() (this thread) in between: every one is answered, in any interleaving.
      const s = open({ netns });
      const fam = 'ip' as const;
      const table = 'crowd';
      const ops: Op[] = [{ verb: 'add', object: 'table', family: fam, name: table },
        { verb: 'add', object: 'chain', family: fam, table, name: 'c' }];
      for (let i = 0; i < 3000; i++) {
        ops.push({ verb: 'add', object: 'rule', family: fam, table, chain: 'c', exprs: [{ kind: 'counter' }, { kind: 'immediate', dreg: 0, verdict: 'accept' }] });
      }
      await s.commit(ops);
      const { stat } = await import('node:fs/promises');
      let answered = 0;
      for (let round = 0; round < 40; round++) {
        const ps: Promise<unknown>[] = [];
        for (let i = 0; i < 1 + (round % 6); i++) ps.push(s.listTables(), s.listChains({ family: fam, table }));
        ps.push(s.listRules({ family: fam, table }), stat('/proc/self'));
        s.generation();
        ps.push(s.commit([{ verb: 'add', object: 'chain', family: fam, table, name: `r${round}` }]), s.listRules({ family: fam, table }));
        for (let i = 0; i < round % 5; i++) ps.push(s.listTables(), stat('/proc/self'));
        s.generation();
        answered += (await Promise.all(ps)).length;
      }
      s.close();
      console.log(JSON.stringify({ ok: true, answered }));
      return;
    }
    case 'natural-exit': {
      // Open (unclosed) sockets and an unref'd monitor must not keep the
      // process alive; the process ends when its work does.
      const s = open({ netns });
      s.generation();
      await s.listTables();
      new Monitor({ netns, onBatch: () => {} }).unref();
      console.log(JSON.stringify({ ok: true }));
      return;
    }
    case 'worker': {
      const before = fdSet();
      const threadsBefore = threads();
      // Plain JS on purpose: Node 20 does not hand tsx's loader to workers, and
      // what is under test is the addon's own environment cleanup hook.
      const w = new Worker(WORKER_BODY, { eval: true, workerData: { netns, addon: ADDON } });
      const [during, threadsDuring] = await new Promise<[Set<string>, number]>((resolve, reject) => {
        w.once('message', () => resolve([fdSet(), threads()]));
        w.once('error', reject);
      });
      await w.terminate();
      const opened = added(before, during);
      const left = opened.filter((f) => fdSet().has(f));
      // The worker's own thread is gone (the monitor has no thread of its own: the worker's event loop polls it).
      let threadsAfter = threads();
      for (let i = 0; i < 100 && threadsAfter !== threadsBefore; i++) {
        await sleep(10);
        threadsAfter = threads();
      }
      // Seven sockets of the worker's own and the dump-only one (the monitor's is among them).
      const ok = opened.filter((f) => f.includes('socket:')).length >= 8 && left.length === 0 && threadsDuring >= threadsBefore + 1
        && threadsAfter === threadsBefore;
      console.log(JSON.stringify({ ok, opened, left, threadsBefore, threadsDuring, threadsAfter }));
      process.exitCode = ok ? 0 : 1;
      return;
    }
    case 'dump-emfile': {
      // Run under a low RLIMIT_NOFILE (prlimit). A socket that owns a table, with no descriptor left
      // for a dump-only socket when a dump starts: the dump goes over the owning socket. Descriptors
      // are freed before the commit that interrupts it, and the owning socket is still not replaced
      // (that would take the owner flag off): the dump is read to its end there, the socket kept, the
      // table still owned, and the next dump is whole, over a dump-only socket opened then.
      const sockets = (): Set<string> => new Set([...fdSet()].filter((f) => f.includes('socket:')));
      const s = open({ netns });
      const writer = open({ netns });
      const fam = 'ip' as const;
      const table = 'owned';
      // The long chain in a table the socket does not own, so that the writer can interrupt its dump
      // with a change to it (a commit to another table would not spoil it: native/dump.cc, Confirm).
      const loose = 'loose';
      const big = 30_000;
      const ops: Op[] = [{ verb: 'add', object: 'table', family: fam, name: table, flags: 0x2 | 0x4 },
        { verb: 'add', object: 'table', family: fam, name: loose }, { verb: 'add', object: 'chain', family: fam, table: loose, name: 'big' }];
      for (let i = 0; i < big; i++) ops.push({ verb: 'add', object: 'rule', family: fam, table: loose, chain: 'big', exprs: [{ kind: 'counter' }] });
      await s.commit(ops);
      const before = sockets();
      const fill = (): number[] => {
        const fds: number[] = [];
        try {
          for (;;) fds.push(openSync('/dev/null', 'r'));
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EMFILE') throw e;
        }
        return fds;
      };
      let interrupted = 0;
      for (let i = 0; i < 20 && interrupted === 0; i++) {
        const filler = fill();
        const dump = s.listRuleDigests({ family: fam, table: loose, once: true });
        for (const fd of filler) closeSync(fd);
        await writer.commit([{ verb: 'add', object: 'chain', family: fam, table: loose, name: `other${i}` }]);
        try {
          await dump;
        } catch (e) {
          if (!(e instanceof DumpInterruptedError)) throw e;
          interrupted++;
        }
      }
      // Listed before the next dump: only a dump opens the dump-only socket.
      const during = added(before, sockets());
      const whole = (await s.listRuleDigests({ family: fam, table: loose })).find((c) => c.chain === 'big')?.handles.length;
      const after = added(before, sockets());
      const owned = await s.getTable(fam, table);
      const ok = interrupted === 1 && during.length === 0 && whole === big && after.length === 1
        && owned?.owner === s.portId && owned?.flags === 0x6;
      console.log(JSON.stringify({ ok, interrupted, during, whole, after, owned }));
      s.close();
      writer.close();
      process.exitCode = ok ? 0 : 1;
      return;
    }
    case 'gc': {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (!gc) throw new Error('run with --expose-gc');
      const before = fdSet();
      (() => {
        const socks: NftSocket[] = [];
        for (let i = 0; i < 50; i++) socks.push(open({ netns }));
        for (const s of socks) s.generation();
      })();
      const opened = added(before, fdSet());
      let left = opened;
      // Finalizers run after a collection, some on a later turn of the loop.
      for (let i = 0; i < 50 && left.length > 0; i++) {
        gc();
        await new Promise((r) => setImmediate(r));
        const now = fdSet();
        left = opened.filter((f) => now.has(f));
      }
      const ok = opened.length >= 50 && left.length === 0;
      console.log(JSON.stringify({ ok, opened: opened.length, left }));
      process.exitCode = ok ? 0 : 1;
      return;
    }
    default:
      throw new Error(`unknown mode ${mode}`);
  }
}

const ADDON = join(PROJECT_ROOT, 'build', 'Release', 'nfkeeper.node');

// Worker body: five sockets, a ref'd monitor and a socket that owns a table with
// its dump-only socket, never closed; terminate() must release all of them (and
// the monitor's poll handle on the worker's loop) through the environment
// cleanup hook.
const WORKER_BODY = `
const { workerData, parentPort } = require('node:worker_threads');
const addon = require(workerData.addon);
class NetlinkError extends Error {
  constructor(message, errno, operation, opIndex) { super(message); this.errno = errno; }
}
addon.init(NetlinkError);
globalThis.keep = [];
for (let i = 0; i < 5; i++) {
  const s = new addon.NftSocket(workerData.netns);
  s.generation();
  globalThis.keep.push(s);
}
globalThis.keep.push(new addon.NftMonitor(workerData.netns, () => {}, null, []));
// A socket that owns a table, and its dump-only socket (opened by the dump after the claim). Both
// requests are small, served on this thread: libuv's pool, once started, would keep its threads.
const owner = new addon.NftSocket(workerData.netns);
globalThis.keep.push(owner);
owner.commit([{ verb: 'add', object: 'table', family: 'ip', name: 'worker-owned', flags: 6 }])
  .then(() => owner.dump('table', 'ip', 'worker-owned', undefined, true))
  .then(() => parentPort.postMessage('ready'));
`;

const [mode, netns] = process.argv.slice(2);
main(mode!, netns!).catch((e: unknown) => {
  console.log(JSON.stringify({ ok: false, error: String(e) }));
  process.exit(2);
});
