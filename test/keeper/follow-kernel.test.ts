/**
 * Repairs planned from the followed part (src/keeper/follow-events.ts) on the real kernel: a foreign
 * deletion, insertion or replacement in a 10,000-rule owned chain is undone by exactly the missing
 * or extra op, without a dump, and every other handle stays; when the proof that the followed part is the
 * kernel's state is missing (ENOBUFS on the event socket) or a writer races the repair (the
 * generation guard refuses it), the keeper falls back to a full observe and still ends exact.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Keeper, RepairReport } from '../../src/keeper/keeper.js';
import { Batch } from '../../src/netlink/batch.js';
import type { CommitOptions, NftConn, NftHost } from '../../src/netlink/conn.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { sleep, until } from '../helpers/wait.js';
import { nextRepair, startKeeper } from './helpers.js';
import { planConfig, readPlanChain } from './plan-fixtures.js';

const N = 10_000;
const WANT = Array.from({ length: N }, (_, i) => i);
const where = { family: 'ip', table: 't', chain: 'c' } as const;


const dumps = async (k: Keeper) => (await k.metrics.dumps.get()).values[0]?.value ?? 0;
const retries = async (k: Keeper) => (await k.metrics.generationRetries.get()).values[0]?.value ?? 0;

const chain = (sock: NftSocket) => readPlanChain(sock, WANT);

describe('repairs from the followed part, 10,000 owned rules', () => {
  let ns: Netns;
  let sock: NftSocket;
  let keeper: Keeper;
  beforeAll(async () => {
    ns = createNetns('followed');
    sock = open({ netns: ns.path });
    keeper = await startKeeper(ns, { config: planConfig(WANT), fight: { threshold: 1e9 } });
    await until('the followed part to be seeded', () => keeper.followState()?.exact === true);
    await keeper.idle();
  }, 120_000);
  afterAll(async () => {
    await keeper?.stop();
    sock?.close();
    ns?.remove();
  });

  /** Runs `tamper`, waits for the repair; checks one repair, no dump, the chain exact, the followed part exact again. */
  async function repairOf(tamper: (handles: number[]) => Promise<void>): Promise<{ r: RepairReport; before: number[]; after: number[] }> {
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    const before = (await chain(sock)).handles;
    const d0 = await dumps(keeper);
    const repaired = nextRepair(keeper, 20_000);
    await tamper(before);
    const r = await repaired;
    await keeper.idle();
    const after = await chain(sock);
    expect(after.ok).toBe(true);
    expect(await dumps(keeper)).toBe(d0);  // nothing was read to plan or verify it
    await until('the followed part to learn its own commit', () => keeper.followState()?.exact === true && keeper.followState()!.generation === r.generation);
    return { r, before, after: after.handles };
  }

  it('a deleted rule in the middle comes back with one op, after the rule before it', async () => {
    const { r, before, after } = await repairOf(async (h) => { await sock.commit(new Batch().delete('rule', { ...where, handle: h[5000]! })); });
    expect(r.ops).toBe(1);
    expect(r.drift[0]!.detail).toMatch(/rule 5001 \(.*\) is missing; repair from events: 9999 of 9999 kernel rules stay, 0 deleted, 1 inserted, 0 replaced \(1 ops\)/);
    expect(after.filter((_, i) => i !== 5000)).toEqual(before.filter((_, i) => i !== 5000));
  });

  it('a deleted first rule comes back at the head of the chain', async () => {
    const { r, before, after } = await repairOf(async (h) => { await sock.commit(new Batch().delete('rule', { ...where, handle: h[0]! })); });
    expect(r.ops).toBe(1);
    expect(after.slice(1)).toEqual(before.slice(1));
  });

  it('a foreign rule inserted in the middle is deleted with one op', async () => {
    const { r, before, after } = await repairOf(async (h) => {
      ns.nft(`insert rule ip t c position ${h[7000]} ip saddr 192.0.2.9 accept`);
    });
    expect(r.ops).toBe(1);
    expect(r.drift[0]!.detail).toMatch(/1 foreign rule .* 1 deleted, 0 inserted, 0 replaced \(1 ops\)/);
    expect(after).toEqual(before);
  });

  it('a replaced rule is replaced back in place with one op, keeping its handle', async () => {
    const { r, before, after } = await repairOf(async (h) => {
      ns.nft(`replace rule ip t c handle ${h[3000]} ip saddr 192.0.2.10 accept`);
    });
    expect(r.ops).toBe(1);
    expect(r.drift[0]!.detail).toMatch(/0 deleted, 0 inserted, 1 replaced \(1 ops\)/);
    expect(after).toEqual(before);
  });

  it('two neighbours deleted and a rule added in one foreign commit: three ops, the second re-added after the first', async () => {
    const { r, before, after } = await repairOf(async (h) => {
      await sock.commit(new Batch().delete('rule', { ...where, handle: h[100]! }).delete('rule', { ...where, handle: h[101]! })
        .add('rule', { ...where, exprs: planConfig([77_777 % 65536]).tables[0]!.chains[0]!.rules[0]!.compiled.exprs }));
    });
    expect(r.ops).toBe(3);
    expect(after.filter((_, i) => i !== 100 && i !== 101)).toEqual(before.filter((_, i) => i !== 100 && i !== 101));
  });

  it('the repair\'s own commit wakes no JavaScript: the followed part takes the new rule\'s handle from the echo, and it is the kernel\'s', async () => {
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    const monitor = keeper.state.monitor!;
    const delivered0 = monitor.progress!().delivered;
    const { r, after } = await repairOf(async (h) => { await sock.commit(new Batch().delete('rule', { ...where, handle: h[42]! })); });
    expect(r.ops).toBe(1);
    // Only the foreign deletion was handed to JavaScript; the repair's own batch was not.
    expect(monitor.progress!().delivered).toBe(delivered0 + 1);
    expect(monitor.progress!().lastGeneration).toBe(r.generation);
    // The handles the followed part holds are those a dump shows, the re-added rule's included.
    expect(keeper.state.view.handlesOf('ip', 't', 'c')).toEqual(after);
    // And the next repair of that rule, deleted by the handle the echo gave, is planned from it.
    const again = await repairOf(async () => { await sock.commit(new Batch().delete('rule', { ...where, handle: after[42]! })); });
    expect(again.r.ops).toBe(1);
    expect(again.after.filter((_, i) => i !== 42)).toEqual(after.filter((_, i) => i !== 42));
    expect(keeper.state.view.handlesOf('ip', 't', 'c')).toEqual(again.after);
  });

  it('a commit that touches only another table costs no read: the next tick finds the followed part clean', async () => {
    await until('the followed part to be exact', () => keeper.followState()?.exact === true);
    const d0 = await dumps(keeper);
    ns.nft('add table ip other\nadd chain ip other c\nadd rule ip other c accept\n');
    const gen = sock.generation();
    // Once the monitor has read that commit (a loaded machine can take longer than the pass waits
    // for it, and then the pass reads, rightly): what is tested is the proof, not the wait.
    await until('the monitor to read the foreign commit', () => keeper.state.monitor!.progress!().lastGeneration >= gen);
    // A manual pass stands in for the tick: the generation moved, the followed part proves nothing of ours did.
    const o = await keeper.request('tick', performance.now());
    expect(o.status).toBe('in-sync');
    expect(o.generation).toBe(gen);
    expect(await dumps(keeper)).toBe(d0);
  });
});

describe('the followed part gives way to a full observe', () => {
  it('after ENOBUFS on the event socket; a writer racing the repair is refused by the guard, and both deletions are repaired', async () => {
    const ns = createNetns('followfall');
    const sock = open({ netns: ns.path });
    let raceOnce: (() => void) | undefined;
    let reads = 0;
    // The keeper's own connection, counting its reads, with a hook that commits from another socket
    // between the keeper's proof of the generation and its guarded commit (inline, at once, or a
    // pass's): a real race on the real kernel.
    const host: NftHost = {
      connect: () => {
        const real = open({ netns: ns.path });
        return new Proxy(real, {
          get(target, p, recv) {
            if (p === 'commit' || p === 'commitNow') {
              return (batch: Batch, options?: CommitOptions) => {
                const race = raceOnce;
                raceOnce = undefined;
                if (race && options?.expectGeneration !== undefined) race();
                return p === 'commit' ? target.commit(batch, options) : target.commitNow(batch, options);
              };
            }
            if (typeof p === 'string' && /^(list|get)[A-Z]/.test(p)) reads++;
            const v = Reflect.get(target, p, recv);
            return typeof v === 'function' ? v.bind(target) : v;
          },
        }) as NftConn;
      },
      // A receive buffer this small overflows on any big commit: ENOBUFS from the kernel. Not armed
      // (Monitor.arm): the race below is the one of the repair planned in JavaScript; the armed
      // repair's guard is test/keeper/armed-repair.test.ts's.
      watch: (o) => Object.assign(new Monitor({ ...o, netns: ns.path, receiveBuffer: 4096 }), { arm: undefined }),
    };
    const keeper = await startKeeper(ns, { config: planConfig(WANT.slice(0, 1000)), fight: { threshold: 1e9 }, host });
    const states: (string | undefined)[] = [];
    keeper.on('followed', (s: { exact: boolean; reason?: string }) => states.push(s.exact ? 'exact' : s.reason));
    const small = { ...where };
    const handlesOf = async () => (await sock.listRules(small)).map((r) => r.handle!);
    try {
      // Seeded at the kernel's generation now: the start-up's own commits are all behind it (one the
      // followed part did not plan would otherwise invalidate it first, and the overflow's reason never show).
      await until('the followed part to be seeded at the current generation', async () => {
        await keeper.idle();
        const m = keeper.followState();
        return m?.exact === true && m.generation === sock.generation();
      });
      states.length = 0;

      // ENOBUFS: a big foreign commit elsewhere floods the 4 KiB event socket.
      const d0 = await dumps(keeper);
      const overflows0 = (await keeper.metrics.overflows.get()).values[0]?.value ?? 0;
      // The monitor sometimes keeps up with one flood: flood again until the kernel drops.
      const flood = `add table ip flood\nflush table ip flood\nadd chain ip flood c\n${Array.from({ length: 5000 }, (_, i) => `add rule ip flood c ip saddr 10.9.${i >> 8}.${i & 255} accept`).join('\n')}\n`;
      const overflowed = async () => ((await keeper.metrics.overflows.get()).values[0]?.value ?? 0) > overflows0;
      for (let k = 0; k < 20 && !(await overflowed()); k++) {
        ns.nft(flood);
        await sleep(50);
      }
      await until('the overflow', overflowed);
      await until('a full observe after it', async () => await dumps(keeper) > d0);
      expect(states.some((s) => /ENOBUFS/.test(s ?? '')), JSON.stringify(states)).toBe(true);
      // The full observe found the chain as desired and seeded the followed part again.
      await until('the followed part to be seeded again', () => keeper.followState()?.exact === true);
      await keeper.idle();

      // The race: between the followed part's proof (generation g) and the commit, another socket deletes a
      // second rule. The guard refuses the planned batch; the retry reads the generation, waits for
      // the monitor to deliver the racing deletion and repairs both from the followed part (or, when the
      // monitor trails by more than the keeper waits for it, a full pass does).
      const h = await handlesOf();
      const reads1 = reads;
      const r1 = await retries(keeper);
      let readsAtRace = -1;
      raceOnce = () => {
        readsAtRace = reads;
        expect(sock.commitNow(new Batch().delete('rule', { ...where, handle: h[10]! }))).not.toBe(false);
      };
      const repaired = nextRepair(keeper, 20_000);
      await sock.commit(new Batch().delete('rule', { ...where, handle: h[500]! }));
      await repaired;
      await until('both rules back', async () => (await sock.listRules(small)).length === 1000);
      await keeper.idle();
      // The raced commit was planned from the followed part (no read yet), and refused by the guard.
      expect(readsAtRace).toBe(reads1);
      expect(await retries(keeper)).toBeGreaterThan(r1);
      const rules = await sock.listRules(small);
      expect(rules.length).toBe(1000);
      const { ruleKey } = await import('../../src/rules/index.js');
      const want = planConfig(WANT.slice(0, 1000)).tables[0]!.chains[0]!.rules;
      expect(rules.map((r) => ruleKey({ exprs: r.exprs, userdata: r.userdata }))).toEqual(want.map((r) => ruleKey(r.compiled)));
    } finally {
      await keeper.stop();
      sock.close();
      ns.remove();
    }
  }, 120_000);
});
