/**
 * The keeper tests' fixtures: the flannel config (FLANNEL_YAML, FLANNEL_RULES, flannelConfig()),
 * nft listings of a chain (chainLines, handles), a captured pino log, nextRepair(), and
 * startKeeper() with the flannel config unless told otherwise. Generic helpers live in
 * test/helpers/ (withKeeper, tempDir, sleep, cli, ruleHandles).
 */
import pino from 'pino';
import { parseConfig, type Config } from '../../src/config/config.js';
import type { Keeper, KeeperOptions, RepairReport } from '../../src/keeper/keeper.js';
import { startKeeper as startKeeperWith } from '../helpers/keeper.js';
import type { Netns } from '../helpers/netns.js';
import { ruleHandles } from '../helpers/nft.js';

export const FLANNEL_RULES = [
  'ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return',
  'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
];

/**
 * A config of one table `name` with one postrouting NAT chain `chain` holding `rules` (a generated
 * big ruleset, say), and regular chains `regular` (name: rules) after it, for its rules to jump to.
 */
export function postroutingYaml(name: string, rules: readonly string[], chain = 'post', regular: Record<string, readonly string[]> = {}): string {
  const list = (rs: readonly string[]) => rs.map((r) => `          - ${r}\n`).join('');
  return `tables:
  - family: ip
    name: ${name}
    chains:
      - name: ${chain}
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
${list(rules)}${Object.entries(regular).map(([n, rs]) => `      - name: ${n}\n        rules:\n${list(rs)}`).join('')}`;
}

export const FLANNEL_YAML = `\n${postroutingYaml('nfkeeper', FLANNEL_RULES, 'postrouting')}`;

export function flannelConfig(): Config {
  return parseConfig(FLANNEL_YAML, 'flannel.yaml');
}

/** The rule lines of a chain as `nft list` prints them, without handles. */
/** Rule `i` of seedConfig's chain: one address each, so every rule differs. */
export function seedRule(i: number): string {
  return `ip saddr 10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255} ip daddr 192.0.2.1 return`;
}

/** Table ip `seed`, one regular chain `post` of `n` rules (seedRule): a long chain for a start from empty. */
export function seedConfig(n: number): Config {
  return parseConfig(`\ntables:\n  - family: ip\n    name: seed\n    chains:\n      - name: post\n        rules:\n${Array.from({ length: n }, (_, i) => `          - '${seedRule(i)}'`).join('\n')}\n`, 'seed.yaml');
}

export function chainLines(ns: Netns, family: string, table: string, chain: string): string[] {
  return ns.exec('nft', ['list', 'chain', family, table, chain]).split('\n').map((l) => l.trim())
    .filter((l) => l && !/^(table|chain|type|}|policy)/.test(l));
}

export function handles(ns: Netns, family: string, table: string, chain: string): number[] {
  return ruleHandles(ns.exec('nft', ['-a', 'list', 'chain', family, table, chain]));
}

export interface LogCapture {
  lines: Record<string, unknown>[];
  logger: pino.Logger;
}

export function captureLog(): LogCapture {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => { lines.push(JSON.parse(s)); } });
  return { lines, logger };
}

export function nextRepair(keeper: Keeper, timeoutMs = 5000): Promise<RepairReport> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no repair within ' + timeoutMs + ' ms')), timeoutMs);
    keeper.once('repaired', (r: RepairReport) => {
      clearTimeout(t);
      resolve(r);
    });
  });
}

/** test/helpers/keeper.ts's startKeeper() with the flannel config unless `options` name another. */
export function startKeeper(ns: Netns, options: Partial<KeeperOptions> = {}): Promise<Keeper> {
  return startKeeperWith(ns, { config: flannelConfig(), ...options });
}

/** @deprecated import { sleep } from test/helpers/wait.js; kept while other branches still import it from here. */
export { sleep } from '../helpers/wait.js';
