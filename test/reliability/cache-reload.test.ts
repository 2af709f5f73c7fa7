/**
 * A config reload (the file watched, SIGHUP) whose config comes from a compile cache entry that
 * passes its seal but whose rules cannot be made (a fault of nfkeeper's own): the daemon
 * (bin/nfkeeper.js, the built bundle) says so, removes the entry (or says why it could not),
 * compiles the config and goes on with it in the same process: the reload is reported done and the
 * kernel holds the new config. A config that is itself bad is still refused, the old one kept.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { encodedPathOf } from '../../src/config/compile-cache.js';
import { readReloadStatus } from '../../src/reload-status.js';
import { damagedEntry } from '../helpers/cache-entry.js';
import { generationOf, netnsPerTest } from '../helpers/netns-hooks.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { daemon, logged, stop, waitSaid, type Child } from './owners-child.js';

const HOOK = fileURLToPath(new URL('./fail-calls.mjs', import.meta.url));
const A = ['ip saddr 10.0.0.9 accept', 'ip saddr 10.0.0.1 tcp dport 22 counter accept', 'ip saddr 10.0.0.2 tcp dport 22 counter accept'];
const B = ['ip saddr 10.1.0.9 accept', 'ip saddr 10.1.0.1 tcp dport 80 counter accept', 'ip saddr 10.1.0.2 tcp dport 80 counter accept'];
const nftOf = (rules: string[]) => `table ip rl {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n${rules.map((r) => `\t\t${r}\n`).join('')}\t}\n}\n`;
const BROKEN = 'could not be read back (rule 2 of chain input names an expression not stored)';

describe('a config reload onto a compile cache entry whose rules cannot be made', { timeout: 300_000 }, () => {
  const ns = netnsPerTest('cache-reload');
  const generation = () => generationOf(ns);
  const listed = () => ns.exec('nft', ['list', 'table', 'ip', 'rl']);
  const holds = (rules: string[]) => rules.every((r) => listed().includes(r.replace(/ counter /, ' counter packets 0 bytes 0 ')));

  it('says so, removes the entry (or says why not), compiles and goes on; a bad config is still refused', async () => {
    const t = tempDir('cache-reload');
    const dir = join(ns.record, 'cache');
    const config = join(t, 'c.nft');
    const status = join(t, 'reload.json');
    const run = (fail?: string) => daemon(config, ns, {
      args: ['--cache-dir', dir, '--reload-status', status],
      ...(fail ? { env: { NODE_OPTIONS: `--import=${HOOK}`, NFK_FAIL: fail } } : {}),
    });
    const reloaded = async (d: Child, n: number) => {
      await waitSaid(d, /^config reload(ed| rejected)/, 60_000, n);
      return readReloadStatus(status)!;
    };

    // B's entry, stored by a start on B, damaged and kept aside with its encoded rules.
    writeFileSync(config, nftOf(B));
    let d = run();
    try {
      await waitSaid(d, /^compiled config stored/);
    } finally {
      await stop(d);
    }
    const entry = damagedEntry(dir);
    expect(entry.rule).toBe(B[1]);
    const encodedB = readFileSync(encodedPathOf(entry.file));

    // A daemon on A (compiled: the inputs changed; stored over B's); then B's damaged entry put
    // back and B written to the file: the watch reloads, and the cache matches every input.
    writeFileSync(config, nftOf(A));
    d = run();
    try {
      await waitSaid(d, /^compiled config stored/);
      expect(holds(A)).toBe(true);
      const bad = entry.write();
      writeFileSync(encodedPathOf(entry.file), encodedB);
      writeFileSync(config, nftOf(B));
      const s = await reloaded(d, 1);
      expect(s, d.logs.join('').slice(-3000)).toMatchObject({ ok: true, why: 'file changed' });
      const said = logged(d).find((l) => l.msg.includes('could not be read back'));
      expect(said?.msg).toBe(`the compile cache ${entry.file} ${BROKEN}; removed; the config was compiled`);
      expect(holds(B)).toBe(true);
      expect(holds(A.slice(1))).toBe(false);
      // The compiled config stored in its place: a good entry.
      await waitSaid(d, /^compiled config stored/, 60_000, 2);
      expect(readFileSync(entry.file).equals(bad)).toBe(false);

      // A config that is bad itself: refused, B kept, the daemon still running.
      const g = generation();
      writeFileSync(config, `${nftOf(A)}table ip rl { chain input { ip saddr nonsense accept } }\n`);
      const r = await reloaded(d, 2);
      expect(r.ok).toBe(false);
      expect(r.error).toMatch(/c\.nft/);
      await sleep(300);
      expect(generation()).toBe(g);
      expect(holds(B)).toBe(true);
      expect(d.child.exitCode).toBe(null);
      writeFileSync(config, nftOf(B));
      await reloaded(d, 3);
    } finally {
      await stop(d);
    }
    expect(d.child.exitCode, d.logs.join('').slice(-3000)).toBe(0);

    // The entry removable at the load, its removal failing (EROFS) once the making failed: a
    // SIGHUP onto it (the file unchanged) says so, compiles and goes on; the entry stays, the
    // kernel as it was.
    d = run('rmSync:EROFS');
    try {
      await waitSaid(d, /^nfkeeper running$/);
      await sleep(300);
      const bytes = damagedEntry(dir).write();
      const g = generation();
      const before = readReloadStatus(status)!.seq;
      d.child.kill('SIGHUP');
      const s = await reloaded(d, 1);
      expect(s, d.logs.join('').slice(-3000)).toMatchObject({ seq: before + 1, ok: true, why: 'SIGHUP' });
      expect(logged(d).find((l) => l.msg.includes('could not be read back'))?.msg)
        .toBe(`the compile cache ${entry.file} ${BROKEN}; it could not be removed (EROFS); the config was compiled`);
      await sleep(300);
      expect(readFileSync(entry.file).equals(bytes)).toBe(true);
      expect(generation()).toBe(g);
      expect(holds(B)).toBe(true);
    } finally {
      await stop(d);
    }
    expect(d.child.exitCode, d.logs.join('').slice(-3000)).toBe(0);
  });
});
