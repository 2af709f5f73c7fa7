/**
 * A socket's sends in order, for the tests of the generation guard (src/netlink/guard.ts): each
 * commit, with the generation it was guarded by, and each recommit (the addon's resend of the batch
 * the kernel last refused), with its ops and, where the kernel refused it, the error. `between`
 * runs as each of the first `times` sends is made if it is a commit, before it reaches the kernel:
 * another writer's commit there makes the kernel refuse it. `refused` runs at each refusal, before
 * the guard asks for its proof.
 */
import type { Batch } from '../../src/netlink/batch.js';
import type { Op } from '../../src/netlink/ops.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import type { Netns } from './netns.js';

export interface Sent {
  how: 'commit' | 'recommit';
  /** The generation it was guarded by (a commit without one: undefined). */
  generation?: number;
  ops: number;
  batch: readonly Op[];
  refused?: true;
  error?: unknown;
}

export function recordSends(sock: NftSocket, between: () => void = () => undefined, times = 1, refused?: () => void): Sent[] {
  const sent: Sent[] = [];
  const commit = sock.commit.bind(sock);
  const recommit = sock.recommit.bind(sock);
  const send = async <T>(s: Sent, go: () => Promise<T>): Promise<T> => {
    sent.push(s);
    if (s.how === 'commit' && sent.length <= times) between();
    try {
      return await go();
    } catch (e) {
      s.refused = true;
      s.error = e;
      refused?.();
      throw e;
    }
  };
  const opsOf = (batch: Batch | readonly Op[]) => (batch as Batch).ops ?? (batch as readonly Op[]);
  sock.commit = (batch, options = {}) => {
    const ops = opsOf(batch);
    return send({ how: 'commit', generation: options.expectGeneration, ops: ops.length, batch: ops }, () => commit(batch, options));
  };
  sock.recommit = (batch, generation) => {
    const ops = opsOf(batch);
    return send({ how: 'recommit', generation, ops: ops.length, batch: ops }, () => recommit(batch, generation));
  };
  return sent;
}

/** `f` on a socket of its own in `ns` (recordSends replaces its commit), closed after. */
export async function withSocketIn<T>(ns: Netns, f: (sock: NftSocket) => Promise<T>): Promise<T> {
  const sock = open({ netns: ns.path });
  try {
    return await f(sock);
  } finally {
    sock.close();
  }
}
