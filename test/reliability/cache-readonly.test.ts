/**
 * A compile cache entry that passes its seal but whose rules cannot be made (a fault of nfkeeper's
 * own), where the entry cannot be removed: the daemon (bin/nfkeeper.js, the built bundle) must not
 * crash-loop on it. The entry is removable or not as the kernel says: a read-only bind mount of the
 * cache directory in a private mount namespace (EROFS), the entry or the directory immutable or the
 * entry append-only (chattr, EPERM); and with node:fs calls made to fail (fail-calls.mjs): the
 * removal probe's link or unlink (EACCES, EROFS, EPERM), and the removal after a late making's
 * failure (rmSync: EROFS, EACCES, EPERM). Each start is ready, keeps the kernel as it was (same
 * generation, same `--debug=netlink` dump), says what was wrong and where, and the next start does
 * not meet the same failure. Also in a writable directory with the table in the kernel and no record:
 * the first pass reads the bad rule before ready; that start ends saying so and removes the entry.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { damagedEntry } from '../helpers/cache-entry.js';
import { generationOf, netnsPerTest } from '../helpers/netns-hooks.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { daemon, logged, stop, waitSaid, type Child } from './owners-child.js';

const HOOK = fileURLToPath(new URL('./fail-calls.mjs', import.meta.url));
const RULES = ['ip saddr 10.0.0.9 accept', 'ip saddr 10.0.0.1 tcp dport 22 counter accept', 'ip saddr 10.0.0.2 tcp dport 22 counter accept'];
const NFT = `table ip ro {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n${RULES.map((r) => `\t\t${r}\n`).join('')}\t}\n}\n`;
const BROKEN = /could not be read back \(rule 2 of chain input names an expression not stored\)/;

const cacheLine = (d: Child): string => {
  const l = logged(d).find((x) => x.msg.startsWith('compile cache'));
  return l ? `${l.msg}${l.why ? `: ${l.why}` : ''}` : 'nothing';
};

/** A private mount namespace in which `dir` is a read-only bind mount of itself; the prefix to run in it. */
function readOnlyIn(dir: string): { prefix: string[]; close(): void } {
  const holder: ChildProcess = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c',
    `mount --bind '${dir}' '${dir}' && mount -o remount,bind,ro '${dir}' && exec sleep 600`], { stdio: 'ignore' });
  const pid = holder.pid!;
  execFileSync('sh', ['-c', `for i in $(seq 100); do nsenter -t ${pid} -m awk '$5 == "${dir}" && $6 ~ /^ro/ { f = 1 } END { exit !f }' /proc/self/mountinfo && exit 0; sleep 0.05; done; exit 1`]);
  return { prefix: ['nsenter', '-t', String(pid), '-m', '--'], close: () => { holder.kill('SIGKILL'); } };
}

describe('the compile cache: an entry whose rules cannot be made, and that cannot be removed', { timeout: 600_000 }, () => {
  const ns = netnsPerTest('cache-ro');

  const dump = () => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);

  it('each start is ready, keeps the kernel, says why; none crash-loops', async () => {
    const dir = join(ns.record, 'cache');
    const config = join(tempDir('cache-ro-config'), 'c.nft');
    writeFileSync(config, NFT);
    const run = (o: { prefix?: string[]; fail?: string } = {}) => daemon(config, ns, {
      args: ['--cache-dir', dir], ...(o.prefix ? { prefix: o.prefix } : {}),
      ...(o.fail ? { env: { NODE_OPTIONS: `--import=${HOOK}`, NFK_FAIL: o.fail } } : {}),
    });
    /** A start that is ready and stops cleanly (the store said done or not), its cache line. */
    const clean = async (o: { prefix?: string[]; fail?: string } = {}) => {
      const d = run(o);
      try {
        await waitSaid(d, /^nfkeeper running$/);
        if (!logged(d).some((l) => l.msg.startsWith('compile cache matches'))) await waitSaid(d, /^compiled config (not )?stored/);
        await sleep(300);
      } finally {
        await stop(d);
      }
      expect(d.child.exitCode, d.logs.join('').slice(-3000)).toBe(0);
      return cacheLine(d);
    };
    // Stored by the first start, used (rules made late) by the second, which leaves the record.
    expect(await clean()).toMatch(/not used; the config was compiled: there is none/);
    expect(await clean()).toMatch(/^compile cache matches every input: the config was not compiled$/);
    // Rule 2 names an expression not stored; the chain's byte count and the seal made right: a fault of ours.
    const { file, rule, write: damage } = damagedEntry(dir);
    expect(rule).toBe(RULES[1]);
    const chattr = (flag: string, path: string) => execFileSync('chattr', [flag, path]);
    const g = generationOf(ns);
    const before = dump();
    const kernelKept = () => {
      expect(generationOf(ns)).toBe(g);
      expect(dump()).toBe(before);
    };

    // The kernel refuses the removal: every start compiles, says why and where, and leaves the entry.
    const refused: { name: string; code: string; on(): { prefix?: string[]; off(): void } }[] = [
      { name: 'a read-only bind mount', code: 'EROFS', on: () => { const m = readOnlyIn(dir); return { prefix: m.prefix, off: m.close }; } },
      { name: 'the entry immutable', code: 'EPERM', on: () => { chattr('+i', file); return { off: () => chattr('-i', file) }; } },
      { name: 'the entry append-only', code: 'EPERM', on: () => { chattr('+a', file); return { off: () => chattr('-a', file) }; } },
      { name: 'the directory immutable', code: 'EPERM', on: () => { chattr('+i', dir); return { off: () => chattr('-i', dir) }; } },
    ];
    for (const r of refused) {
      const bytes = damage();
      const c = r.on();
      try {
        for (let i = 0; i < 2; i++) {
          const line = await clean({ prefix: c.prefix });
          expect(line, r.name).toMatch(/^compile cache not used; the config was compiled: /);
          expect(line, r.name).toMatch(BROKEN);
          expect(line, r.name).toContain(`and it cannot be removed (${r.code}: ${dir})`);
          expect(readFileSync(file).equals(bytes), r.name).toBe(true);
          kernelKept();
        }
      } finally {
        c.off();
      }
    }

    // Read-only, and nothing to adopt (no record, the table gone): the compiled config is installed.
    const plain = ns.exec('nft', ['list', 'ruleset']);
    {
      damage();
      for (const f of readdirSync(ns.record)) if (f.startsWith('restart-')) rmSync(join(ns.record, f));
      ns.exec('nft', ['flush', 'ruleset']);
      const m = readOnlyIn(dir);
      try {
        const line = await clean({ prefix: m.prefix });
        expect(line).toMatch(BROKEN);
        expect(line).toContain(`and it cannot be removed (EROFS: ${dir})`);
        expect(ns.exec('nft', ['list', 'ruleset'])).toBe(plain);
      } finally {
        m.close();
      }
    }
    // Writable again, the table in the kernel and no record to adopt it by: the first pass reads the
    // entry's rules before ready and fails. That start ends (exit 2) saying so and removes the
    // entry (or says it cannot, and the next start finds that); the next one compiles.
    for (const fail of [undefined, 'rmSync:EROFS']) {
      const bytes = damage();
      for (const f of readdirSync(ns.record)) if (f.startsWith('restart-')) rmSync(join(ns.record, f));
      const g0 = generationOf(ns);
      const d = run(fail ? { fail } : {});
      expect(await d.exited, d.logs.join('').slice(-3000)).toBe(2);
      expect(d.logs.join('')).toMatch(new RegExp(`the kernel refused the config: rule 2 of chain input names an expression not stored; nothing was changed in the kernel; the compile cache ${file.replace(/[.]/g, '\\.')} ${BROKEN.source}; ${fail ? 'it could not be removed \\(EROFS\\); the next start finds that' : 'removed, the next start compiles the config'}`));
      expect(generationOf(ns)).toBe(g0);
      if (fail) {
        expect(readFileSync(file).equals(bytes)).toBe(true);
        chattr('+i', file);
        try {
          expect(await clean()).toContain(`and it cannot be removed (EPERM: ${dir})`);
        } finally {
          chattr('-i', file);
        }
      } else {
        expect(readdirSync(dir).filter((f) => f.startsWith('compiled-'))).toEqual([]);
        expect(await clean()).toMatch(/not used; the config was compiled: there is none/);
      }
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe(plain);
    }
    // The immutable entry was not replaced by that start's store: gone, stored again, adopted from
    // here on (the generation and the dump the later starts keep).
    for (const f of readdirSync(dir)) if (f.startsWith('compiled-')) rmSync(join(dir, f));
    expect(await clean()).toMatch(/there is none/);
    const g2 = generationOf(ns);
    const before2 = dump();
    const kept2 = () => {
      expect(generationOf(ns)).toBe(g2);
      expect(dump()).toBe(before2);
    };

    // The probe's calls failing as the kernel fails them: compiled, and the store (which calls
    // neither) replaces the entry, which the next start uses.
    for (const fail of ['linkSync:EACCES', 'linkSync:EROFS', 'linkSync:EPERM', 'unlinkSync:EPERM']) {
      damage();
      const line = await clean({ fail });
      expect(line, fail).toMatch(BROKEN);
      expect(line, fail).toContain(`and it cannot be removed (${fail.split(':')[1]!}: ${dir})`);
      kept2();
      expect(await clean(), fail).toMatch(/^compile cache matches every input: the config was not compiled$/);
      kept2();
    }

    // Removable at the load, not when the late making failed: that start ends (exit 2) saying so; the
    // next, on a directory where it still cannot be removed, compiles and is ready.
    for (const code of ['EROFS', 'EACCES', 'EPERM']) {
      const bytes = damage();
      const d = run({ fail: `rmSync:${code}` });
      expect(await d.exited).toBe(2);
      expect(d.logs.join('')).toMatch(new RegExp(`${BROKEN.source}; it could not be removed \\(${code}\\); the next start finds that, makes its rules before it is ready, and compiles the config`));
      expect(readFileSync(file).equals(bytes)).toBe(true);
      kept2();
      chattr('+i', file);
      try {
        const line = await clean();
        expect(line, code).toMatch(BROKEN);
        expect(line, code).toContain(`and it cannot be removed (EPERM: ${dir})`);
      } finally {
        chattr('-i', file);
      }
      kept2();
    }
  });
});
