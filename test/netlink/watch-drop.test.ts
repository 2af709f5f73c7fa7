/**
 * A watched rule dump (native/dump.cc: Notice, Confirm) takes an interrupted dump only if it saw
 * every commit made while it ran. A notification the kernel drops (ENOBUFS: it did not fit in the
 * receive buffer) could have named the table, so a dump during which one was dropped is never
 * taken as whole. The drop is injected (the addon's test seam NFKEEPER_TEST_DROP_NOTIFICATION:
 * the K-th notification datagram a watch receives is discarded and ENOBUFS reported in its place)
 * at every K from 1 up, through the inline reads, the worker's, and the Confirm step after the
 * dump's end, while a neighbour process commits to a table of its own as fast as it can: no dump
 * with a drop is taken; dumps without one are (the watch still works); every dump returned is
 * the quiet one.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns } from '../helpers/netns.js';

const CHILD = fileURLToPath(new URL('./watch-drop-child.ts', import.meta.url));
const RULES = 3_000;
// Every K up to 64, then a geometric tail: past the dump's end the drops fall in Confirm's reads.
const KS = [...Array.from({ length: 64 }, (_, i) => i + 1), 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096];

interface Dump { k: number; dropped: boolean; taken: boolean; outcome: string }

function sweep(nsPath: string, ks: number[]): Promise<Dump[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, nsPath, ...ks.map(String)], {
      env: { ...process.env, NFKEEPER_TEST_DROP_NOTIFICATION: '0' }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`sweep exited ${code}: ${err}`));
      else resolve(out.trim().split('\n').map((l) => JSON.parse(l) as Dump));
    });
  });
}

describe('a notification dropped during a watched dump', () => {
  it('never lets the dump be taken as whole, at every K-th notification of a dump under a busy neighbour', async () => {
    await withNetns(async (ns) => {
      const rules = Array.from({ length: RULES }, (_, i) => `add rule ip own c ip saddr 10.0.${i >> 8}.${i & 255} accept`);
      ns.nft(`add table ip own\nadd chain ip own c\n${rules.join('\n')}\n`);
      const neighbour = await startNeighbour(ns.path, 'max');
      let dumps: Dump[];
      try {
        dumps = await sweep(ns.path, KS);
      } finally {
        await neighbour.stop();
      }
      const count = (f: (d: Dump) => boolean) => dumps.filter(f).length;
      console.log(`${dumps.length} dumps: dropped ${count((d) => d.dropped)} (interrupted ${count((d) => d.dropped && d.outcome === 'interrupted')}), ` +
        `taken interrupted ${count((d) => d.taken)}; last K with a drop ${Math.max(0, ...dumps.filter((d) => d.dropped).map((d) => d.k))}`);
      expect(dumps.map((d) => d.k)).toEqual(KS);
      // What is guarded: a dump that lost a notification is never taken across the commits it interrupted.
      expect(dumps.filter((d) => d.dropped && d.taken)).toEqual([]);
      // Every dump returned is the table as it is.
      expect(dumps.filter((d) => d.outcome === 'differs')).toEqual([]);
      // The sweep reached what it is for: drops in dumps the neighbour interrupted, and (without one)
      // interrupted dumps still taken.
      expect(count((d) => d.dropped && d.outcome === 'interrupted')).toBeGreaterThan(10);
      expect(count((d) => !d.dropped && d.taken)).toBeGreaterThan(0);
    }, 'watch-drop');
  }, 120_000);
});
