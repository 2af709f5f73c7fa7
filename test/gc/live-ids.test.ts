/**
 * Foreign GC's live ids (src/gc/collect.ts `liveIds`, the daemon's OwnerRegistry.liveIds(): the
 * registered owners and every registration queued or in flight) swept against gc's steps on the
 * real kernel. The Nomad seed's dead allocation's id registers as an owner (the real registry, its
 * kernel step a commit of another socket to table ip nfkeeper, held where the case says) while
 * `collect` runs, in each of its states:
 *   queued      put() called; the registry's commit not made yet (held before it)
 *   committed   the registry's commit in the kernel, the state file not written, not answered
 *   answered    put() resolved: the owner is registered
 * reached at each step of gc a harness can stop it at: the k-th scan (before its reads), the k-th
 * commit (planned, about to be sent), the k-th refusal (before the guard asks its proof), the k-th
 * proof (answered, before gc decides), the k-th resend; quiet (one scan, one commit), and with another socket
 * committing to a table of its own before gc's first two commits (refused, scanned again, refused,
 * proved, sent again). Then the registration is let go and answered.
 *
 * Checked: a registration whose commit came before gc's (by the kernel's generations), or that
 * was answered, or that was queued while gc waited for the kernel (a read, a refusal, a proof: the
 * last such wait before its send is where gc must see it), never has its id's rules collected;
 * where it is collected, the ruleset is exactly the seed less the dead allocation, and where kept,
 * exactly the seed.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { GraceTracker, collect } from '../../src/gc/index.js';
import { tablesProof } from '../../src/keeper/oneshot.js';
import type { Batch } from '../../src/netlink/batch.js';
import type { OpenProof } from '../../src/netlink/guard.js';
import { kernelHost } from '../../src/netlink/host.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { OwnerRegistry } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { DEAD, DEAD_CHAIN, LIVE, gcYaml, restoreNomad, save } from './fixtures.js';

const foreign = parseConfig(gcYaml()).gc!.foreign;
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

type State = 'queued' | 'committed' | 'answered';
const STATES: State[] = ['queued', 'committed', 'answered'];
type Step = 'scan' | 'commit' | 'refused' | 'proved' | 'recommit';
/**
 * The steps at which gc waits for the kernel (a read, a refusal's proof): a registration can be
 * queued there. Between the last of them and the send only promise jobs run, never a request: a
 * registration queued at the commit and recommit steps stands for one queued after the send.
 */
const AWAITS: Step[] = ['scan', 'refused', 'proved'];
/** The steps each run reaches without a registration: quiet, and with two commits of a neighbour's. */
const RUNS: { busy: boolean; points: [Step, number][] }[] = [
  { busy: false, points: [['scan', 1], ['commit', 1]] },
  { busy: true, points: [['scan', 1], ['commit', 1], ['refused', 1], ['scan', 2], ['commit', 2], ['refused', 2], ['proved', 1], ['recommit', 1]] },
];

/** A deferred: a promise and its resolver. */
function later(): { promise: Promise<void>; go: () => void } {
  let go!: () => void;
  const promise = new Promise<void>((r) => { go = r; });
  return { promise, go };
}

/**
 * The registration of DEAD as an owner, through the real registry; its kernel step is a commit of
 * `other`'s to table ip nfkeeper, made once `commit` is let go, and the step returns once `answer`
 * is. `generation`: the kernel's generation its commit made.
 */
function registration(dir: string, other: NftSocket) {
  const config = parseConfig(ownersYaml(dir));
  const commit = later();
  const answer = later();
  let n = 0;
  const r = {
    generation: undefined as number | undefined,
    answered: false,
    applying: later(),
    committed: later(),
    put: undefined as Promise<unknown> | undefined,
    registry: new OwnerRegistry(config, [], async () => {
      r.applying.go();
      await commit.promise;
      other.commitNow([{ verb: n++ % 2 ? 'delete' : 'add', object: 'chain', family: 'ip', table: 'nfkeeper', name: 'reg' }]);
      r.generation = other.generation();
      r.committed.go();
      await answer.promise;
    }),
    /** Moves the registration on to `state` (put() first if not yet). */
    async to(state: State): Promise<void> {
      r.put ??= r.registry.put(DEAD, ownerSpec(1)).then(() => { r.answered = true; });
      if (state === 'queued') return;
      commit.go();
      await r.committed.promise;
      if (state === 'committed') return;
      answer.go();
      await r.put;
    },
    async finish(): Promise<void> {
      commit.go();
      answer.go();
      await r.put;
    },
  };
  return r;
}

/**
 * Wraps `sock` (gc's socket): before the step `at` is made, `reached()` runs and is waited for. Each
 * commit and resend is recorded with its outcome; with `busy`, `other` commits to a table of its own
 * before the first two commits (after `reached`).
 */
function steps(ns: string, sock: NftSocket, other: NftSocket, busy: boolean, at: [Step, number], reached: () => Promise<void>) {
  const n: Record<Step, number> = { scan: 0, commit: 0, refused: 0, proved: 0, recommit: 0 };
  const sent: { how: 'commit' | 'recommit'; generation?: number; refused?: boolean; at?: number }[] = [];
  let hit = false;
  const step = async (s: Step) => {
    if (++n[s] === at[1] && s === at[0]) {
      hit = true;
      await reached();
    }
  };
  let neighbour = 0;
  const commit = sock.commit.bind(sock);
  const recommit = sock.recommit.bind(sock);
  const getTable = sock.getTable.bind(sock);
  sock.getTable = async (...args) => {
    await step('scan');
    return getTable(...args);
  };
  sock.commit = async (batch, options = {}) => {
    await step('commit');
    if (busy && neighbour < 2) other.commitNow([{ verb: neighbour++ % 2 ? 'delete' : 'add', object: 'table', family: 'ip', name: 'neighbour' }]);
    const s: (typeof sent)[number] = { how: 'commit', generation: options.expectGeneration };
    sent.push(s);
    try {
      const r = await commit(batch, options);
      s.at = sock.generation();
      return r;
    } catch (e) {
      s.refused = true;
      await step('refused');
      throw e;
    }
  };
  sock.recommit = async (batch, generation) => {
    await step('recommit');
    const s: (typeof sent)[number] = { how: 'recommit', generation };
    sent.push(s);
    const r = await recommit(batch, generation).catch(async (e: unknown) => {
      s.refused = true;
      await step('refused');
      throw e;
    });
    if (r === false) s.refused = true;
    else s.at = sock.generation();
    return r;
  };
  // The resend proof: the step once it has answered, before gc decides on its answer.
  const opener = tablesProof(kernelHost(ns).watch);
  const proof: OpenProof = async (conn, tables) => {
    const p = await opener(conn, tables);
    return p && { ...p, stillHolds: async (g: number, b: Batch) => {
      const at = await p.stillHolds(g, b);
      await step('proved');
      return at;
    } };
  };
  return { sent, hit: () => hit, proof };
}

describe('foreign GC and a registration of the dead id, interleaved', () => {
  it('an id registered before gc\'s commit, by the kernel\'s order or by the plan\'s, is never collected', { timeout: 300_000 }, async () => {
    await withNetns(async (ns: Netns) => {
      const seen: string[] = [];
      // Every case where a registered id's rules were collected: none.
      const collectedRegistered: string[] = [];
      for (const run of RUNS) {
        for (const point of run.points) {
          for (const state of STATES) {
            const what = `${run.busy ? 'busy' : 'quiet'}, at ${point[0]} ${point[1]}, ${state}`;
            restoreNomad(ns);
            ns.nft('add table ip nfkeeper\ndelete table ip nfkeeper\nadd table ip nfkeeper\nadd table ip neighbour\ndelete table ip neighbour\n');
            const before = save(ns);
            const dir = tempDir('gc-live-ids');
            mkdirSync(join(dir, 'state'), { recursive: true });
            const sock = open({ netns: ns.path });
            const other = open({ netns: ns.path });
            const reg = registration(dir, other);
            const liveIds = () => reg.registry.liveIds();
            try {
              const t = steps(ns.path, sock, other, run.busy, point, () => reg.to(state));
              const r = await collect(sock, { foreign, live: new Set([LIVE]), liveIds, graceMs: 0, tracker: new GraceTracker(), proof: t.proof });
              expect(t.hit(), `${what}: the step was not reached (${JSON.stringify(t.sent)})`).toBe(true);
              const landed = t.sent.find((s) => s.at !== undefined);
              await reg.finish();
              const after = save(ns);
              const kept = after === before;
              expect(kept || after === collected(before), `${what}: neither the seed nor the seed less the dead allocation:\n${after}`).toBe(true);
              expect(kept, `${what}: collected ${kept ? 'nothing' : 'the dead id'} (${JSON.stringify(t.sent)})`).toBe(!r.collected || r.garbage.every((g) => g.id !== DEAD));
              const registeredFirst = reg.generation !== undefined && landed?.at !== undefined && reg.generation < landed.at;
              if (!kept && (registeredFirst || state === 'answered' || AWAITS.includes(point[0]))) {
                collectedRegistered.push(`${what}: registry at ${reg.generation}, gc's commit at ${landed?.at} (${JSON.stringify(t.sent)})`);
              }
              expect(reg.answered, what).toBe(true);
              expect(reg.registry.list().map((o) => o.id), what).toEqual([DEAD]);
              seen.push(`${what}: ${kept ? 'kept' : 'collected'}`);
            } finally {
              reg.registry.close();
              other.close();
              sock.close();
            }
          }
        }
      }
      console.log(`gc live ids: ${seen.join('; ')}`);
      expect(collectedRegistered).toEqual([]);
    }, 'gc-live-ids');
  });
});
