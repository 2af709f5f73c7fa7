/**
 * A namespace per test (or per describe block) made and removed by vitest hooks, for describe
 * blocks whose tests all start from the same namespace contents.
 *
 *   import { netnsPerTest } from '../helpers/netns-hooks.js';
 *   describe('...', () => {
 *     const ns = netnsPerTest('gc', (ns) => ns.exec('iptables-nft-restore', [], NOMAD_RESTORE));
 *     it('...', () => { ns.exec(...); open({ netns: ns.path }); });
 *   });
 *
 * The returned object stands for the namespace of the test running now: use it like a Netns
 * inside tests and hooks (not at collection time). It is removed after each test (netnsPerTest)
 * or after the block (netnsPerSuite), pass or fail; a setup that throws removes it at once.
 * socketPerTest adds a socket opened in that namespace, closed after each test before the
 * namespace goes (hooks registered after it run before its own at the end of a test: a keeper
 * stopped there still has both). For one-off namespaces inside a test, use withNetns() from ./netns.js.
 *
 *   const { ns, sock } = socketPerTest('keeper');
 *   it('...', async () => { await sock.commit(...); ns.nft(...); });
 */
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { NftSocket, open } from '../../src/netlink/socket.js';
import { createNetns, type Netns } from './netns.js';

function netnsHooked(tag: string, setup: ((ns: Netns) => void) | undefined,
  before: typeof beforeEach, after: typeof afterEach): Netns {
  let current: Netns | undefined;
  const ns = (): Netns => {
    if (!current) throw new Error(`namespace '${tag}' used outside a test: it exists only while one runs`);
    return current;
  };
  before(() => {
    const made = createNetns(tag);
    try {
      setup?.(made);
    } catch (e) {
      made.remove();
      throw e;
    }
    current = made;
  });
  after(() => {
    current?.remove();
    current = undefined;
  });
  return {
    get name() { return ns().name; },
    get path() { return ns().path; },
    get record() { return ns().record; },
    exec: (cmd, args, input) => ns().exec(cmd, args, input),
    nft: (script) => ns().nft(script),
    remove: () => ns().remove(),
  };
}

/** A fresh namespace for every test of the enclosing describe block (or file, at top level). */
export function netnsPerTest(tag: string, setup?: (ns: Netns) => void): Netns {
  return netnsHooked(tag, setup, beforeEach, afterEach);
}

/** One namespace shared by the tests of the enclosing describe block (or file, at top level). */
export function netnsPerSuite(tag: string, setup?: (ns: Netns) => void): Netns {
  return netnsHooked(tag, setup, beforeAll, afterAll);
}

/**
 * A fresh namespace and a socket opened in it for every test of the enclosing describe block (or
 * file, at top level). `sock` stands for the socket of the test running now, as `ns` for its
 * namespace: use it like an NftSocket inside tests and hooks (it is one, to instanceof).
 */
export function socketPerTest(tag: string, setup?: (ns: Netns) => void): { ns: Netns; sock: NftSocket } {
  const ns = netnsPerTest(tag, setup);
  let current: NftSocket | undefined;
  beforeEach(() => {
    current = open({ netns: ns.path });
  });
  afterEach(() => {
    current?.close();
    current = undefined;
  });
  const now = (): NftSocket => {
    if (!current) throw new Error(`socket of namespace '${tag}' used outside a test: it exists only while one runs`);
    return current;
  };
  const sock = new Proxy(Object.create(NftSocket.prototype) as NftSocket, {
    get: (_, p) => {
      const s = now();
      const v: unknown = Reflect.get(s, p, s);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(s) : v;
    },
    set: (_, p, v) => Reflect.set(now(), p, v),
  });
  return { ns, sock };
}

/** The ruleset generation of `ns` now, read over a socket of its own. */
export function generationOf(ns: Pick<Netns, 'path'>): number {
  const s = open({ netns: ns.path });
  try {
    return s.generation();
  } finally {
    s.close();
  }
}
