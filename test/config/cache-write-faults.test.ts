/**
 * A failing disk at every write point of the files the daemon keeps for its next start (the compile
 * cache's store, the restart record's write: both sealed files, src/base/sealed-file.ts): the Nth
 * call that opens, writes, syncs, closes, renames or removes fails with ENOSPC, EIO or EACCES, for
 * every N, once and from then on (a disk that stays full). The store says why it did not store and
 * never throws; the record's writer throws (its caller logs it); under the name is always the old
 * file whole or the new one whole, never a mix; no temp file is left once a write succeeds; and the
 * next load uses what is there or compiles, with the same config as a compile. The daemon's side (a
 * full tmpfs under a running daemon) is in test/reliability/after-ready.test.ts.
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { io } from '../../src/base/atomic-file.js';
import { compileCachePathOf, loadConfigCached } from '../../src/config/compile-cache.js';
import { runNow } from '../../src/base/sliced.js';
import { compactAsCompiled } from '../../src/model/compact.js';
import { desiredDigest } from '../../src/model/desired-digest.js';
import { readRecord, writeRecord, type RestartRecord } from '../../src/keeper/record.js';
import { interfaceTable } from '../../src/rules/render.js';
import { loadConfig, type LoadOptions } from '../../src/config/config.js';
import { tempDir } from '../helpers/tmp.js';

type Io = typeof io;
const ERRNOS = ['ENOSPC', 'EIO', 'EACCES'] as const;

/** The Nth call of the seam (and, `after`, every later one) fails with `errno`. */
function injectFaults(n: number, after: boolean, errno: string): { calls: () => number; restore: () => void } {
  const real = { ...io };
  let calls = 0;
  const fails = () => ++calls === n || (after && calls > n);
  for (const k of Object.keys(real) as (keyof Io)[]) {
    (io as Record<string, unknown>)[k] = (...args: unknown[]) => {
      if (!fails()) return (real[k] as (...a: unknown[]) => unknown)(...args);
      if (k === 'closeSync') (real.closeSync as (fd: number) => void)(args[0] as number);  // Linux releases it even then
      throw Object.assign(new Error(`${errno}: injected, ${k} (call ${calls})`), { code: errno });
    };
  }
  return { calls: () => calls, restore: () => Object.assign(io, real) };
}

const yaml = (n: number) => `tables:\n  - family: ip\n    name: s\n    chains:\n      - name: c\n        rules:\n${Array.from({ length: n }, (_, i) => `          - ip daddr 192.0.2.${i + 1} return\n`).join('')}`;
const options = (): LoadOptions => ({ interfaces: interfaceTable({ lo: 1 }), compiled: compactAsCompiled() });
const temps = (dir: string) => readdirSync(dir).filter((f) => f.includes('.tmp-'));

describe('a failing disk at every write point of the compile cache and the restart record', () => {
  it('the compile cache\'s store: said, never thrown; the old cache or the new one whole; the next load right', () => {
    let runs = 0;
    for (const errno of ERRNOS) {
      for (const after of [false, true]) {
        // The first store (none before it), and a store over an older config's cache.
        for (const over of [false, true]) {
          for (let n = 1; ; n++) {
            const dir = tempDir('cache-faults');
            const cacheDir = join(dir, 'cache');
            const file = join(dir, 'c.yaml');
            const cache = { dir: cacheDir, version: 'test' };
            writeFileSync(file, yaml(3));
            if (over) {
              const first = loadConfigCached(file, options(), cache);
              expect(runNow(first.store!())).toBeUndefined();
              writeFileSync(file, yaml(4));
            }
            const path = compileCachePathOf(cacheDir, undefined, file);
            const before = existsSync(path) ? readFileSync(path) : undefined;
            const r = loadConfigCached(file, options(), cache);
            expect(r.cache.used).toBe(false);
            const fault = injectFaults(n, after, errno);
            let why: string | undefined;
            try {
              why = runNow(r.store!());
            } finally {
              fault.restore();
            }
            runs++;
            const what = `${errno} at call ${n}${after ? ' and after' : ''}${over ? ', over an older cache' : ''}`;
            if (fault.calls() < n) {
              // Past the store's last call: it stored; the sweep of this kind is done.
              expect(why, what).toBeUndefined();
              expect(n, `${what}: the store reached no write point`).toBeGreaterThan(4);
              break;
            }
            expect(why, what).toMatch(new RegExp(errno));
            // Under the name: the old file whole, or (the rename done, the directory's fsync failed) the new one whole.
            const now = existsSync(path) ? readFileSync(path) : undefined;
            const next = loadConfigCached(file, options(), cache);
            if (now === undefined || (before !== undefined && now.equals(before))) {
              expect(next.cache.used, what).toBe(false);
              if (!next.cache.used) expect(next.cache.why, what).toMatch(over ? /c\.yaml changed/ : /^there is none/);
            } else {
              expect(next.cache.used, `${what}: the new file under the name is whole`).toBe(true);
            }
            expect(desiredDigest(next.config.tables), what).toBe(desiredDigest(loadConfig(file, options()).tables));
            // A single fault leaves no temp file; under a disk that stays failed, the next write that succeeds.
            if (!after) expect(temps(cacheDir), what).toEqual([]);
            if (next.store) expect(runNow(next.store()), what).toBeUndefined();
            expect(temps(cacheDir), what).toEqual([]);
            expect(loadConfigCached(file, options(), cache).cache.used, what).toBe(true);
          }
        }
      }
    }
    expect(runs).toBeGreaterThan(6 * 2 * 3 * 2);
    console.log(`the compile cache's store: ${runs} faults`);
  });

  it('the restart record\'s write: thrown to its caller; the old record or the new one whole', () => {
    const record = (generation: number, rules: number): RestartRecord => ({
      format: 2, version: 'test', bootId: 'b', netns: { dev: 1, ino: 2 }, generation, desired: 'd', verified: true,
      tables: [{ family: 'ip', name: 't', handle: 1, chains: [{ name: 'c', handles: Array.from({ length: rules }, (_, i) => i + 2), digests: Array.from({ length: rules }, () => 'x') }] }],
    });
    let runs = 0;
    for (const errno of ERRNOS) {
      for (const after of [false, true]) {
        for (const over of [false, true]) {
          for (let n = 1; ; n++) {
            const dir = join(tempDir('record-faults'), 'rec');
            const file = join(dir, 'restart-x.json');
            if (over) writeRecord(file, dir, record(1, 3));
            const fault = injectFaults(n, after, errno);
            let error: Error | undefined;
            try {
              writeRecord(file, dir, record(2, 5));
            } catch (e) {
              error = e as Error;
            } finally {
              fault.restore();
            }
            runs++;
            const what = `${errno} at call ${n}${after ? ' and after' : ''}${over ? ', over an older record' : ''}`;
            if (fault.calls() < n) {
              expect(error, what).toBeUndefined();
              break;
            }
            expect(error?.message, what).toMatch(new RegExp(errno));
            const read = readRecord(file, dir);
            if ('why' in read) expect(over ? 'an older record lost' : read.why, what).toMatch(/^there is none/);
            else expect([1, 2], `${what}: a record whole`).toContain(read.record.generation);
            if (!after) expect(temps(dir), what).toEqual([]);
            writeRecord(file, dir, record(3, 5));
            expect(temps(dir), what).toEqual([]);
            expect('record' in readRecord(file, dir) && (readRecord(file, dir) as { record: RestartRecord }).record.generation, what).toBe(3);
          }
        }
      }
    }
    expect(runs).toBeGreaterThan(6 * 2 * 3 * 2);
    console.log(`the restart record's write: ${runs} faults`);
  });
});
