/**
 * `nfkeeper reload`, what systemd's ExecReload runs: it signals the daemon and
 * exits with the daemon's verdict on the reload, so `systemctl reload` fails
 * for a config the daemon or the kernel refuses, not only for one that does
 * not parse (systemd 252 has no Type=notify-reload to carry the result).
 */
import { renameSync, writeFileSync } from 'node:fs';
import { readReloadStatus, type ReloadStatus } from '../../src/reload-status.js';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/tmp.js';
import { netnsPerTest } from '../helpers/netns-hooks.js';
import { FLANNEL_RULES, FLANNEL_YAML, chainLines } from '../keeper/helpers.js';
import { nfk, nfkDone, waitFor } from './spawn.js';

// Accepted: a rule added in front; refused by the kernel only (a set given more elements than its
// size: validate accepts it, only the commit can tell).
const ACCEPTED = FLANNEL_YAML.replace(/(\n\s+- )(ip saddr 10\.244\.0\.0\/16 ip daddr 10\.244\.0\.0\/16 return)/, '$1ip saddr 10.250.0.0/16 return$1$2');
const REFUSED = `${FLANNEL_YAML}      - name: out\n        type: filter\n        hook: output\n        priority: 0\n        rules: ["ip daddr @few drop"]\n` +
  '    sets:\n      - { name: few, type: ipv4_addr, size: 2, elements: [10.0.0.1, 10.0.0.2, 10.0.0.3] }\n';

describe('nfkeeper reload', () => {
  const ns = netnsPerTest('reload');
  /** A daemon on FLANNEL_YAML with a reload status file. */
  /** `text` written beside `file` and renamed over it: the watch sees it whole. */
  const replace = (file: string, text: string) => {
    writeFileSync(`${file}.new`, text);
    renameSync(`${file}.new`, file);
  };
  const daemonOn = (name: string) => {
    const dir = tempDir(name);
    const config = join(dir, 'config.yaml');
    const status = join(dir, 'reload.json');
    writeFileSync(config, FLANNEL_YAML);
    return { config, status, daemon: nfk(['run', '--config', config, '--netns', ns.path, '--no-metrics', '--reload-status', status]) };
  };
  const installed = () => {
    try {
      return chainLines(ns, 'ip', 'nfkeeper', 'postrouting').length === FLANNEL_RULES.length;
    } catch {
      return false;  // not there yet
    }
  };

  it('exits 0 once the daemon has the new config, and 2 with the reason for one it or the kernel refuses', async () => {
    const { config, status, daemon } = daemonOn('reload');
    try {
      await waitFor('the rules', installed);
      const pid = String(daemon.child.pid);
      const reload = () => nfkDone(['reload', '--pid', pid, '--status-file', status, '--timeout', '60s']);

      // Accepted: the rule is in the kernel when reload returns.
      writeFileSync(config, ACCEPTED);
      let r = await reload();
      expect(r.err).toEqual([]);
      expect(r.out).toEqual(['config reloaded']);
      expect(r.code).toBe(0);
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')[0]).toBe('ip saddr 10.250.0.0/16 return');
      const kept = ns.exec('nft', ['list', 'ruleset']);

      // Refused by the kernel.
      writeFileSync(config, REFUSED);
      expect((await nfkDone(['validate', '--config', config])).code).toBe(0);
      r = await reload();
      expect(r.code).toBe(2);
      expect(r.err.join('\n')).toMatch(/config reload rejected; the old one stays in force: the kernel refused the new config/);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe(kept);

      // Refused by the daemon (an owners section needs a restart) and by the loader (syntax).
      writeFileSync(config, `${FLANNEL_YAML}owners:\n  table: nfkeeper\n  dispatch: [postrouting]\n`);
      r = await reload();
      expect(r.code).toBe(2);
      expect(r.err.join('\n')).toMatch(/owners|rejected/);
      writeFileSync(config, FLANNEL_YAML.replace('fully-random', 'fully-randum'));
      r = await reload();
      expect(r.code).toBe(2);
      expect(r.err.join('\n')).toMatch(/config\.yaml:\d+:\d+: .*fully-randum/);
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe(kept);
      expect(daemon.child.exitCode).toBeNull();
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
    // No daemon to answer: a clear error, not a hang.
    const gone = await nfkDone(['reload', '--pid', String(daemon.child.pid), '--status-file', status, '--timeout', '1s']);
    expect(gone.code).toBe(2);
    expect(gone.err.join('\n')).toMatch(/cannot signal the daemon|did not report/);
  });

  it('a reload the kernel refuses: the status file is written when the log line says so', async () => {
    const { config, status, daemon } = daemonOn('reload-order');
    // The status file as it is the moment a reload's outcome is logged (read in the same turn
    // as the line arrives, as a script following the log would).
    const atLine: { msg: string; status?: ReloadStatus }[] = [];
    let buf = '';
    daemon.child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const lines = buf.split('\n');
      buf = lines.pop()!;
      for (const l of lines) {
        const msg = l.startsWith('{') ? String((JSON.parse(l) as { msg?: unknown }).msg) : '';
        if (/config reload|kernel refused/.test(msg)) atLine.push({ msg, status: readReloadStatus(status) });
      }
    });
    try {
      await waitFor('the rules', installed);
      await waitFor('running', () => daemon.logs().some((l) => l.msg === 'nfkeeper running'));
      // An accepted reload first, so the file holds an ok for the refused one's line to be told from.
      // Each reload is started by the file's change alone (replaced whole, as an editor does): a
      // SIGHUP beside it raced the watch under load, and either could log first.
      replace(config, ACCEPTED);
      await waitFor('the reload', () => atLine.length === 1);
      expect(atLine[0]).toMatchObject({ msg: 'config reloaded', status: { ok: true, why: 'file changed' } });
      const seq = atLine[0]!.status!.seq;
      const kept = ns.exec('nft', ['list', 'ruleset']);
      replace(config, REFUSED);
      await waitFor('the refusal', () => atLine.length >= 2);
      // The first line said of it finds the file written: this reload's, not the one before's ok.
      expect(atLine[1]!.status).toMatchObject({ seq: seq + 1, ok: false, why: 'file changed' });
      expect(atLine[1]!.status!.error).toMatch(/^the kernel refused the new config; the old one stays in force: /);
      expect(atLine[1]!.msg).toBe('config reload rejected; keeping the old one');
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe(kept);
      expect(daemon.child.exitCode).toBeNull();
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  }, 120_000);
});
