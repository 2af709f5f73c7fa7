/**
 * A daemon on a .nft config with includes reloads when an included file changes, as when the
 * config itself does, and watches the files a reload brings in.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { nfk, waitFor } from './spawn.js';

/** As editors and ConfigMaps do: a reload never sees the file half-written, so each write is one reload. */
function replaceFile(path: string, text: string): void {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

describe('the daemon and included files', () => {
  const ns = netnsPerTest('reload-inc');

  it('reloads when an included file changes, and follows an include a reload added', async () => {
    const dir = tempDir('reload-inc');
    mkdirSync(join(dir, 'conf.d'));
    mkdirSync(join(dir, 'more'));
    const vars = join(dir, 'conf.d', 'vars.nft');
    const extra = join(dir, 'more', 'extra.nft');
    writeFileSync(vars, 'define port = 80\n');
    writeFileSync(extra, 'define other = 1\n');
    const config = join(dir, 'main.nft');
    const main = (more: string) => `include "${vars}"\n${more}table ip inc {\n\tchain pre {\n` +
      '\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\ttcp dport $port dnat to 10.0.0.1\n\t}\n}\n';
    writeFileSync(config, main(''));
    const daemon = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics']);
    try {
      const rule = () => {
        try {
          return /tcp dport (\d+) dnat/.exec(ns.exec('nft', ['list', 'chain', 'ip', 'inc', 'pre']))?.[1];
        } catch {
          return undefined;  // not there yet
        }
      };
      await waitFor('the rule', () => rule() === '80', 30_000);
      replaceFile(vars, 'define port = 81\n');
      await waitFor('the included file read again', () => rule() === '81', 30_000);
      // An include the reload brings in is watched from then on.
      replaceFile(config, main(`include "${extra}"\n`));
      await waitFor('the config read again', () => daemon.logs().filter((l) => l.msg === 'config reloaded').length >= 2, 30_000);
      replaceFile(extra, 'define other = 2\nredefine port = 82\n');
      await waitFor('the newly included file read again', () => rule() === '82', 30_000);
      // (logged once the keeper has committed: after the rule is visible)
      await waitFor('three reloads, each for a changed file', () => daemon.logs().filter((l) => l.msg === 'config reloaded' && l.why === 'file changed').length === 3, 30_000);
      expect(daemon.logs().filter((l) => l.msg === 'config reloaded').length).toBe(3);
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  }, 150_000);

  it('takes an empty config file for one caught half-written: rejected, the table kept, the next write read', async () => {
    const dir = tempDir('reload-empty');
    const config = join(dir, 'main.nft');
    const table = (port: number) => `table ip inc {\n\tchain pre {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n` +
      `\t\ttcp dport ${port} dnat to 10.0.0.1\n\t}\n}\n`;
    writeFileSync(config, table(80));
    const daemon = nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics']);
    const port = () => {
      try {
        return /tcp dport (\d+) dnat/.exec(ns.exec('nft', ['list', 'chain', 'ip', 'inc', 'pre']))?.[1];
      } catch {
        return undefined;  // not there (yet, or any more)
      }
    };
    try {
      await waitFor('the rule', () => port() === '80', 30_000);
      writeFileSync(config, '');
      await waitFor('the empty file refused', () => daemon.logs().some((l) => l.msg === 'config reload rejected; keeping the old one' &&
        /the file is empty/.test(String(l.err))), 30_000);
      expect(port()).toBe('80');
      writeFileSync(config, table(81));
      await waitFor('the written file read', () => port() === '81', 30_000);
      // A comment alone is a config with no tables: the table is retired.
      writeFileSync(config, '# nothing here\n');
      await waitFor('the table retired', () => port() === undefined, 30_000);
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  }, 120_000);
});
