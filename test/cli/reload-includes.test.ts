/**
 * A daemon on a .nft config with includes reloads when an included file changes, as when the
 * config itself does, and watches the files a reload brings in.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { nfk, waitFor } from './spawn.js';

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
      await waitFor('the rule', () => rule() === '80');
      writeFileSync(vars, 'define port = 81\n');
      await waitFor('the included file read again', () => rule() === '81');
      // An include the reload brings in is watched from then on.
      writeFileSync(config, main(`include "${extra}"\n`));
      await waitFor('the config read again', () => daemon.logs().filter((l) => l.msg === 'config reloaded').length >= 2);
      writeFileSync(extra, 'define other = 2\nredefine port = 82\n');
      await waitFor('the newly included file read again', () => rule() === '82');
      // (logged once the keeper has committed: after the rule is visible)
      await waitFor('three reloads, each for a changed file', () => daemon.logs().filter((l) => l.msg === 'config reloaded' && l.why === 'file changed').length === 3);
      expect(daemon.logs().filter((l) => l.msg === 'config reloaded').length).toBe(3);
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  });
});
