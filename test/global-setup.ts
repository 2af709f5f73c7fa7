/**
 * Guards the machine: the root namespace's nftables ruleset must be exactly
 * the same after the suite as before it, and no test namespace may be left.
 */
import { spawnSync } from 'node:child_process';

function rootRuleset(): string {
  const r = spawnSync('nft', ['list', 'ruleset'], { encoding: 'utf8' });
  return r.stdout ?? '';
}

function leftoverNamespaces(): string[] {
  const r = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  return (r.stdout ?? '').split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith('nfk-test-'));
}

export default function setup(): () => void {
  const before = rootRuleset();
  return () => {
    for (const ns of leftoverNamespaces()) spawnSync('ip', ['netns', 'del', ns]);
    const after = rootRuleset();
    if (after !== before) {
      throw new Error(`a test changed the ROOT namespace's ruleset:\n--- before\n${before}\n--- after\n${after}`);
    }
  };
}
