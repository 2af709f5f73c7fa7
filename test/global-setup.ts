/**
 * Guards the machine: the root namespace's nftables ruleset must be exactly
 * the same after the suite as before it, no test namespace may be left, and
 * the commands' code cache is this run's, removed after it.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeNetns } from './helpers/netns.js';

function rootRuleset(): string {
  const r = spawnSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
  return r.stdout ?? '';
}

// Only this run's namespaces (see testRunId in test/helpers/netns.ts): another
// suite may be running beside this one.
const prefix = `nfk-test-${process.pid}-`;

function leftoverNamespaces(): string[] {
  const r = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  return (r.stdout ?? '').split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(prefix));
}

export default function setup(): () => void {
  process.env.NFK_TEST_RUN = String(process.pid);
  // The commands the tests run keep their code cache in this run's own directory, not in root's
  // /var/cache/nfkeeper: the suite leaves nothing behind on the machine (the cache's own tests
  // choose theirs).
  const cache = mkdtempSync(join(tmpdir(), 'nfk-test-cache-'));
  process.env.NODE_COMPILE_CACHE ??= cache;
  // And so do run's and apply's compile cache (--cache-dir's default is /var/cache/nfkeeper).
  process.env.NFKEEPER_CACHE_DIR ??= join(cache, 'compiled');
  const before = rootRuleset();
  return () => {
    rmSync(cache, { recursive: true, force: true });
    for (const ns of leftoverNamespaces()) removeNetns(ns);
    const after = rootRuleset();
    if (after !== before) {
      throw new Error(`a test changed the ROOT namespace's ruleset:\n--- before\n${before}\n--- after\n${after}`);
    }
  };
}
