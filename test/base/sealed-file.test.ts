/**
 * writeSealed (src/base/sealed-file.ts): a durable write syncs the file and its directory; one that
 * is only a cache (`durable: false`, the compile cache) syncs neither, and reads back the same.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { io } from '../../src/base/atomic-file.js';
import { readSealed, writeSealed } from '../../src/base/sealed-file.js';
import { loadConfigCached } from '../../src/config/compile-cache.js';
import { runNow } from '../../src/base/sliced.js';
import { compactAsCompiled } from '../../src/model/compact.js';
import { tempDir } from '../helpers/tmp.js';
import { postroutingYaml } from '../keeper/helpers.js';
import { writeFileSync } from 'node:fs';

describe('writeSealed', () => {
  afterEach(() => vi.restoreAllMocks());

  it('durable by default: the file and its directory synced; durable: false syncs neither; both read back', () => {
    const dir = join(tempDir('sealed'), 'd');
    const fsync = vi.spyOn(io, 'fsyncSync');
    writeSealed(join(dir, 'a'), dir, 'body a\n');
    expect(fsync).toHaveBeenCalledTimes(2);
    fsync.mockClear();
    writeSealed(join(dir, 'b'), dir, [Buffer.from('body '), Buffer.from('b\n')], { durable: false });
    expect(fsync).not.toHaveBeenCalled();
    expect(readSealed(join(dir, 'a'), dir)).toEqual({ body: 'body a\n' });
    expect(readSealed(join(dir, 'b'), dir)).toEqual({ body: 'body b\n' });
  });

  it("the compile cache's store is not synced: a cache, which a crash costs one compile", () => {
    const d = tempDir('sealed-cache');
    const file = join(d, 'c.yaml');
    writeFileSync(file, postroutingYaml('sealed', ['ip daddr 192.0.2.1 return']));
    const fsync = vi.spyOn(io, 'fsyncSync');
    const load = () => loadConfigCached(file, { compiled: compactAsCompiled() }, { dir: join(d, 'cache'), version: 'test' });
    const first = load();
    expect(first.cache.used).toBe(false);
    expect(runNow(first.store!())).toBeUndefined();
    expect(fsync).not.toHaveBeenCalled();
    expect(load().cache.used).toBe(true);
  });
});
