/**
 * Which entry a config has in the compile cache, and when an entry goes (src/config/compile-cache.ts):
 * one entry per config however its path is written, a symlinked config keyed by its own name; a
 * store removes what no load will use again (entries unused for a month, another build's unused for
 * a day, temp files a killed store left) and nothing else: not an entry in use, not another
 * process's write under way, not another user's file, not a name the cache does not write (V8's
 * code cache shares the directory).
 */
import { spawn } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, renameSync, statSync, symlinkSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { compactAsCompiled } from '../../src/model/compact.js';
import {
  ANOTHER_BUILDS_AFTER_MS, TEMP_LEFT_FOR_MS, UNUSED_FOR_MS, compileCachePathOf, encodedPathOf, heldProofPathOf, loadConfigCached, pruneCompileCache,
  removeUnreadable,
} from '../../src/config/compile-cache.js';
import { runNow } from '../../src/base/sliced.js';
import { tempDir } from '../helpers/tmp.js';
import { postroutingYaml } from '../keeper/helpers.js';

const yaml = (n: number) => postroutingYaml('life', [`ip saddr 10.0.0.${n} masquerade`]);
const DAY = 86_400_000;

describe('the compile cache: one entry per config, and what a store removes', () => {
  let dir: string;
  let cacheDir: string;
  beforeEach(() => {
    dir = tempDir('cache-life');
    cacheDir = join(dir, 'cache');
  });
  const load = (file: string, version = 'test') => {
    const r = loadConfigCached(file, { compiled: compactAsCompiled() }, { dir: cacheDir, version, netns: '/run/netns/x' });
    return { ...r, stored: r.store ? runNow(r.store()) : undefined };
  };
  const config = (name: string, n = 1) => {
    const file = join(dir, name);
    writeFileSync(file, yaml(n));
    return file;
  };
  /** Sets a file's access and modification times to `ago` before now. */
  const age = (file: string, ago: number) => {
    const t = new Date(Date.now() - ago);
    utimesSync(file, t, t);
  };
  const names = () => readdirSync(cacheDir).sort();

  it('a config written ./c.yaml, absolute, or through a symlinked directory has one entry', () => {
    const file = config('c.yaml');
    mkdirSync(join(dir, 'real'));
    const inReal = join(dir, 'real', 'c.yaml');
    writeFileSync(inReal, yaml(1));
    symlinkSync(join(dir, 'real'), join(dir, 'via'));
    const key = (p: string) => compileCachePathOf(cacheDir, '/run/netns/x', p);
    expect(key(relative(process.cwd(), file))).toBe(key(file));
    expect(key(`${dir}/./c.yaml`)).toBe(key(file));
    expect(key(join(dir, 'via', 'c.yaml'))).toBe(key(inReal));
    expect(key(join(dir, 'via', 'c.yaml'))).not.toBe(key(file));
    // Another namespace, another entry.
    expect(compileCachePathOf(cacheDir, '/run/netns/y', file)).not.toBe(key(file));
    // The two spellings of one config keep one file: the second replaces the first.
    expect(load(inReal).stored).toBeUndefined();
    expect(load(join(dir, 'via', 'c.yaml')).stored).toBeUndefined();
    const entry = key(inReal).slice(cacheDir.length + 1);
    expect(names()).toEqual([entry.replace(/json$/, 'encoded'), entry]);
  });

  it('a symlinked config is keyed by its own name: a link switched to another target keeps its one entry', () => {
    const v1 = config('v1.yaml', 1);
    const v2 = config('v2.yaml', 2);
    const link = join(dir, 'current.yaml');
    symlinkSync(v1, link);
    expect(load(link).cache.used).toBe(false);
    expect(load(link).cache.used).toBe(true);
    // Switched as a ConfigMap or a deploy switches it: a new link renamed over the old.
    symlinkSync(v2, `${link}.new`);
    renameSync(`${link}.new`, link);
    const switched = load(link);
    expect(switched.cache).toMatchObject({ used: false, why: expect.stringMatching(/current\.yaml changed/) });
    expect(switched.config.tables[0]!.chains[0]!.rules[0]!.text).toBe('ip saddr 10.0.0.2 masquerade');
    expect(load(link).cache.used).toBe(true);
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', link).slice(cacheDir.length + 1);
    expect(names()).toEqual([entry.replace(/json$/, 'encoded'), entry]);
  });

  it('a store removes entries unused for a month and another build\'s unused for a day; keeps the rest', async () => {
    const path = (file: string) => compileCachePathOf(cacheDir, '/run/netns/x', file);
    const month = config('month.yaml');
    const other = config('other.yaml');
    const otherFresh = config('other-fresh.yaml');
    const ours = config('ours.yaml');
    for (const f of [month, ours]) expect(load(f).stored).toBeUndefined();
    for (const f of [other, otherFresh]) expect(load(f, 'other').stored).toBeUndefined();
    age(path(month), UNUSED_FOR_MS + DAY);
    age(path(other), ANOTHER_BUILDS_AFTER_MS + 3_600_000);
    age(path(otherFresh), ANOTHER_BUILDS_AFTER_MS - 3_600_000);
    age(path(ours), UNUSED_FOR_MS - DAY);
    // Names the cache does not write, however old: V8's code cache of bin/, Node's, anything else.
    const dead = await exitedPid();
    const foreign = ['v24.22.3-x64-0123abcd-run', `.v24.22.3-x64-0123abcd-run.${dead}`, `node-${dead}`, 'compiled-zz.json', 'compiled-0123456789abcdef.json.old',
      `.compiled-0123456789abcdef.json.tmp-${dead}.x`];
    for (const f of foreign) {
      writeFileSync(join(cacheDir, f), 'x');
      age(join(cacheDir, f), 10 * UNUSED_FOR_MS);
    }
    // Another user's entry (root only can make one), however old.
    const theirs = join(cacheDir, 'compiled-00000000000000ff.json');
    if (process.geteuid?.() === 0) {
      writeFileSync(theirs, 'x');
      chownSync(theirs, 65534, 65534);
      age(theirs, 10 * UNUSED_FOR_MS);
    }
    const before = names();
    const now = load(config('now.yaml'));
    expect(now.stored).toBeUndefined();
    const gone = [path(month), path(other)].flatMap((p) => [p, encodedPathOf(p)]);
    for (const p of gone) expect(existsSync(p), p).toBe(false);
    const stored = now.cache.file.slice(cacheDir.length + 1);
    expect(names()).toEqual([...before.filter((n) => !gone.some((p) => p.endsWith(`/${n}`))), stored, stored.replace(/json$/, 'encoded')].sort());
    for (const f of foreign) expect(existsSync(join(cacheDir, f)), f).toBe(true);
    if (process.geteuid?.() === 0) expect(existsSync(theirs)).toBe(true);
    // The entries kept still load.
    expect(load(ours).cache.used).toBe(true);
    expect(load(otherFresh, 'other').cache.used).toBe(true);
  });

  it('an entry read within the month (its access time) is kept by the next store', () => {
    const file = config('read.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', file);
    age(entry, UNUSED_FOR_MS + DAY);
    expect(load(file).cache.used).toBe(true);
    expect(Date.now() - statSync(entry).atimeMs).toBeLessThan(60_000);
    // written a month ago and more: still kept
    expect(Date.now() - statSync(entry).mtimeMs).toBeGreaterThan(UNUSED_FOR_MS);
    expect(load(config('next.yaml')).stored).toBeUndefined();
    expect(existsSync(entry)).toBe(true);
  });

  it('temp files: a dead writer\'s left for an hour removed; a live writer\'s, or one written to lately, kept', async () => {
    const file = config('t.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = (n: string) => `.compiled-${n.repeat(16)}.json.tmp-`;
    const dead = await exitedPid();
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      const left = join(cacheDir, `${entry('a')}${dead}`);
      // (an apply's proof, src/keeper/held-proof.ts, killed in its write)
      const proofLeft = join(cacheDir, `.compiled-${'d'.repeat(16)}.held.tmp-${dead}`);
      const recent = join(cacheDir, `${entry('b')}${dead}`);
      const live = join(cacheDir, `${entry('c')}${child.pid}`);
      for (const f of [left, proofLeft, recent, live]) writeFileSync(f, 'part');
      age(left, TEMP_LEFT_FOR_MS + 60_000);
      age(proofLeft, TEMP_LEFT_FOR_MS + 60_000);
      age(recent, TEMP_LEFT_FOR_MS - 60_000);
      age(live, 10 * TEMP_LEFT_FOR_MS);
      expect(pruneCompileCache(cacheDir, 'test').sort()).toEqual([left, proofLeft].map((f) => f.slice(cacheDir.length + 1)).sort());
      expect(existsSync(recent)).toBe(true);
      expect(existsSync(live)).toBe(true);
    } finally {
      child.kill();
    }
  });

  it('a directory that cannot be listed, or an entry gone meanwhile: nothing removed, no error', () => {
    expect(pruneCompileCache(join(dir, 'none'), 'test')).toEqual([]);
    const file = config('g.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', file);
    unlinkSync(entry);
    unlinkSync(encodedPathOf(entry));
    expect(pruneCompileCache(cacheDir, 'test', Date.now() + 100 * UNUSED_FOR_MS)).toEqual([]);
  });

  it('an entry\'s encoded rules go with it; left without it, they go after an hour (a store writes them first)', () => {
    const file = config('e.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', file);
    const encoded = encodedPathOf(entry);
    expect(existsSync(encoded)).toBe(true);
    unlinkSync(entry);
    // Without its entry as a store's first write leaves them: kept while recent.
    expect(pruneCompileCache(cacheDir, 'test', Date.now() + TEMP_LEFT_FOR_MS - 60_000)).toEqual([]);
    expect(pruneCompileCache(cacheDir, 'test', Date.now() + TEMP_LEFT_FOR_MS + 60_000)).toEqual([encoded.slice(cacheDir.length + 1)]);
    // With its entry, however old: they go when the entry goes, not before.
    expect(load(file).stored).toBeUndefined();
    age(encodedPathOf(entry), 10 * UNUSED_FOR_MS);
    expect(pruneCompileCache(cacheDir, 'test')).toEqual([]);
    age(entry, UNUSED_FOR_MS + DAY);
    expect(pruneCompileCache(cacheDir, 'test').sort()).toEqual([encoded, entry].map((p) => p.slice(cacheDir.length + 1)).sort());
  });

  it("an apply's held-as-sent proof beside an entry (src/keeper/held-proof.ts) goes with it", () => {
    const file = config('h.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', file);
    const held = heldProofPathOf(entry);
    writeFileSync(held, '{}\n');
    expect(pruneCompileCache(cacheDir, 'test')).toEqual([]);
    age(entry, UNUSED_FOR_MS + DAY);
    expect(pruneCompileCache(cacheDir, 'test').sort()).toEqual([encodedPathOf(entry), entry, held].map((p) => p.slice(cacheDir.length + 1)).sort());
    expect(existsSync(held)).toBe(false);
    // Left without its entry (removed by an older build that did not know it): gone after an hour.
    expect(load(file).stored).toBeUndefined();
    writeFileSync(held, '{}\n');
    unlinkSync(entry);
    unlinkSync(encodedPathOf(entry));
    expect(pruneCompileCache(cacheDir, 'test', Date.now() + TEMP_LEFT_FOR_MS - 60_000)).toEqual([]);
    expect(pruneCompileCache(cacheDir, 'test', Date.now() + TEMP_LEFT_FOR_MS + 60_000)).toEqual([held.slice(cacheDir.length + 1)]);
  });

  it('an entry whose rules cannot be made is removed with every file beside it (removeUnreadable)', () => {
    const file = config('u.yaml');
    expect(load(file).stored).toBeUndefined();
    const entry = compileCachePathOf(cacheDir, '/run/netns/x', file);
    writeFileSync(heldProofPathOf(entry), '{}\n');
    expect(names()).toHaveLength(3);
    expect(removeUnreadable(entry, new Error('rule 2 names an expression not stored'))).toEqual({
      removed: true, said: `the compile cache ${entry} could not be read back (rule 2 names an expression not stored); removed`,
    });
    expect(names()).toEqual([]);
  });
});

/** The pid of a process that has exited and been reaped. */
function exitedPid(): Promise<number> {
  return new Promise((res) => {
    const c = spawn('true', { stdio: 'ignore' });
    c.on('exit', () => res(c.pid!));
  });
}
