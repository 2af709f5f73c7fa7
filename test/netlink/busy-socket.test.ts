/**
 * A socket held by a long dump, on the kernel: the two ways the keeper does not wait for it.
 * generationIfFree() (the tick's read, the addon's generation(true)) answers undefined while a dump
 * holds the socket's gate, instead of blocking the JS thread on it; and a digest dump asked `once`
 * (the seeding read's) that a commit interrupts (NLM_F_DUMP_INTR) throws at its first attempt
 * instead of dumping the chain again.
 */
import { describe, expect, it } from 'vitest';
import { DumpInterruptedError, open, type Op } from '../../src/index.js';
import { withSocket } from './fixtures.js';

const F = 'ip';
const T = 'busy';
// A chain whose dump takes long enough to be caught in flight (tens of ms or more: the kernel walks
// the chain again for every datagram).
const BIG = 20_000;

function bigTable(): Op[] {
  const ops: Op[] = [{ verb: 'add', object: 'table', family: F, name: T }, { verb: 'add', object: 'chain', family: F, table: T, name: 'big' }];
  for (let k = 0; k < BIG; k++) ops.push({ verb: 'add', object: 'rule', family: F, table: T, chain: 'big', exprs: [{ kind: 'counter' }] });
  return ops;
}

describe('a socket held by a dump', () => {
  it('generationIfFree answers undefined while the dump holds it, and the JS thread runs meanwhile', async () => {
    await withSocket(async (sock) => {
      await sock.commit(bigTable());
      const gen = sock.generation();
      let done = false;
      const dump = sock.listRules({ family: F, table: T }).finally(() => { done = true; });
      // Taken at once: the dump holds the gate from its call.
      expect(sock.generationIfFree()).toBeUndefined();
      // Timers fire while it runs, and their reads find the socket held (none waits for it). (The
      // worker frees the socket just before the JS thread hears the dump is done: a read in between
      // gets the generation.)
      const during: (number | undefined)[] = [];
      await new Promise<void>((resolve) => {
        const timer = setInterval(() => {
          if (done) {
            clearInterval(timer);
            resolve();
            return;
          }
          during.push(sock.generationIfFree());
        }, 1);
      });
      expect((await dump).length).toBe(BIG);
      expect(during.length).toBeGreaterThan(0);
      expect(during.filter((g) => g === undefined).length).toBeGreaterThan(0);
      expect(during.filter((g) => g !== undefined && g !== gen)).toEqual([]);
      // Free again: the generation, as generation() reads it.
      expect(sock.generationIfFree()).toBe(gen);
    }, 'busy');
  }, 120_000);

  it('a digest dump asked once, interrupted by a commit, throws at its first attempt (not retried)', async () => {
    await withSocket(async (reader, ns) => {
      await reader.commit(bigTable());
      const writer = open({ netns: ns.path });
      const touch: Op[] = [{ verb: 'add', object: 'chain', family: F, table: T, name: 'side' }, { verb: 'flush', object: 'chain', family: F, table: T, name: 'side' }];
      try {
        // A commit on another socket while the dump runs; it may land before the dump's first
        // datagram or after its last (not interrupted), so tried until one is interrupted.
        let interrupted: DumpInterruptedError | undefined;
        for (let i = 0; i < 30 && !interrupted; i++) {
          const before = reader.dumpsInterrupted;
          const dump = reader.listRuleDigests({ family: F, table: T, once: true });
          await writer.commit(touch);
          try {
            const chains = await dump;
            expect(chains.find((c) => c.chain === 'big')?.digests.length).toBe(BIG);
            expect(reader.dumpsInterrupted).toBe(before);
          } catch (e) {
            if (!(e instanceof DumpInterruptedError)) throw e;
            interrupted = e;
            // One attempt, one interruption counted: the dump was not made again.
            expect(e.attempts).toBe(1);
            expect(reader.dumpsInterrupted).toBe(before + 1);
          }
        }
        expect(interrupted, 'no commit landed during a dump in 30 tries').toBeInstanceOf(DumpInterruptedError);
      } finally {
        writer.close();
      }
    }, 'once');
  }, 180_000);
});
