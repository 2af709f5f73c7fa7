/**
 * A Keeper in a throwaway namespace, stopped and removed afterwards.
 *
 *   import { withKeeper } from '../helpers/keeper.js';
 *   await withKeeper({ config: flannelConfig(), tag: 'reload' }, async ({ ns, keeper, sock }) => {
 *     // keeper has started (its start-up pass is done); sock is a second socket in ns to watch
 *     // the generation or tamper with; ns.nft()/ns.exec() run nft and friends inside ns.
 *   });
 *
 * Afterwards, also when the body or the start-up throws: the keeper is stopped, the watching socket
 * closed and the namespace removed. Options are KeeperOptions (netns aside) with test defaults: an
 * hour-long tick, so that only events or explicit requests repair and a tick cannot race the test,
 * and `error` events swallowed (they are reported in status and metrics, as the daemon logs them).
 *
 * startKeeper() is the same keeper in a namespace you manage yourself (beforeEach/afterEach);
 * keeperPerTest() starts keepers (and neighbours, ./neighbour.ts) in a socketPerTest's namespace
 * and stops them after each test.
 */
import { afterEach } from 'vitest';
import { Keeper, type KeeperOptions } from '../../src/keeper/keeper.js';
import type { NftConn, NftHost } from '../../src/netlink/conn.js';
import { Monitor } from '../../src/netlink/monitor.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { startNeighbour, type Neighbour } from './neighbour.js';
import { withNetns, type Netns } from './netns.js';

export type TestKeeperOptions = Omit<KeeperOptions, 'netns'>;

/** Starts a keeper on `ns`; if the start fails it is stopped again and the error thrown. */
export async function startKeeper(ns: Netns, options: TestKeeperOptions): Promise<Keeper> {
  const keeper = new Keeper({ intervalMs: 3_600_000, ...options, netns: ns.path });
  keeper.on('error', () => undefined);
  try {
    await keeper.start();
  } catch (e) {
    await keeper.stop();
    throw e;
  }
  return keeper;
}

/**
 * Keepers and neighbours started in the test running now, in `ns` (a netnsPerTest's or
 * socketPerTest's, registered before this: hooks registered later run first at a test's end, so the
 * namespace and the socket are still there). After each test, pass or fail, the neighbours are
 * killed first (a keeper's stop waits for its pass, which a neighbour at full speed holds up), then
 * the keepers stopped. A test may stop either itself before (stop() again is a no-op, kill() of an
 * ended neighbour too).
 */
export function keeperPerTest(ns: Netns): {
  keeper: (options: TestKeeperOptions) => Promise<Keeper>;
  neighbour: (rate?: number | 'max', table?: string) => Promise<Neighbour>;
} {
  const keepers: Keeper[] = [];
  const neighbours: Neighbour[] = [];
  afterEach(async () => {
    for (const n of neighbours.splice(0)) n.kill();
    for (const k of keepers.splice(0)) await k.stop();
  });
  return {
    keeper: async (options) => {
      const k = await startKeeper(ns, options);
      keepers.push(k);
      return k;
    },
    neighbour: async (rate, table) => {
      const n = await startNeighbour(ns.path, rate, table);
      neighbours.push(n);
      return n;
    },
  };
}

/**
 * A host whose keeper connections count their reads of rules (digest dumps and decoding dumps
 * alike); `after`, if given, is waited for once each read has its result, before the keeper gets it.
 */
export function countingHost(ns: Netns, after?: (method: string) => Promise<void> | undefined): NftHost & { ruleReads: number } {
  const seen = { ruleReads: 0 };
  return Object.assign(seen, observedHost(ns, ['listRules', 'listRuleDigests'], () => { seen.ruleReads++; },
    after && ((method, _args, result) => (result as Promise<unknown>).then(async (x) => { await after(method); return x; }))));
}

export interface KeeperFixture {
  ns: Netns;
  keeper: Keeper;
  /** A socket of the test's own in `ns` (not the keeper's). */
  sock: NftSocket;
}

export function withKeeper<T>(options: TestKeeperOptions & { tag?: string },
  fn: (f: KeeperFixture) => Promise<T> | T): Promise<T> {
  const { tag = 'keeper', ...keeperOptions } = options;
  return withNetns(async (ns) => {
    const sock = open({ netns: ns.path });
    try {
      const keeper = await startKeeper(ns, keeperOptions);
      try {
        return await fn({ ns, keeper, sock });
      } finally {
        await keeper.stop();
      }
    } finally {
      sock.close();
    }
  }, tag);
}

/**
 * A host whose keeper connections are real (in `ns`) and report each call of the named
 * NftConn methods, with its arguments, before it runs: for tests that count the keeper's reads.
 * `wrap`, if given, sees each such call's result (a dump's promise, say) once the call is made and
 * gives what the keeper gets instead: for tests that act while a call is on the wire.
 */
export function observedHost(ns: Netns, methods: readonly (keyof NftConn)[],
  onCall: (method: keyof NftConn, args: unknown[]) => void,
  wrap?: (method: keyof NftConn, args: unknown[], result: unknown) => unknown): NftHost {
  return {
    connect: () => {
      const real = open({ netns: ns.path });
      return new Proxy(real, {
        get(target, p, recv) {
          const v = Reflect.get(target, p, recv);
          if (typeof v !== 'function') return v;
          if (!(methods as readonly (string | symbol)[]).includes(p)) return v.bind(target);
          return (...args: unknown[]) => {
            onCall(p as keyof NftConn, args);
            const result = (v as (...a: unknown[]) => unknown).apply(target, args);
            return wrap ? wrap(p as keyof NftConn, args, result) : result;
          };
        },
      }) as NftConn;
    },
    watch: (o) => new Monitor({ ...o, netns: ns.path }),
  };
}
