/** Shared by the chain-edit tests: small-alphabet rules, configs of them, seeded random numbers. */
import { parseConfig, type Config } from '../../src/config/config.js';
import { type TableConfig } from '../../src/model/desired.js';
import type { NftConn } from '../../src/netlink/conn.js';
import { ruleKey } from '../../src/rules/index.js';

/** A rule of a small alphabet, so random chains share and repeat rules. */
export const ruleText = (k: number) => `ip saddr 10.0.${k >> 8}.${k & 255} accept`;

/** Table ip t, its nat postrouting chain c holding the rules `ks` names. */
export function planConfig(ks: readonly number[]): Config {
  const rules = ks.length ? `rules:\n${ks.map((k) => `          - ${ruleText(k)}`).join('\n')}` : 'rules: []';
  return parseConfig(`
tables:
  - family: ip
    name: t
    chains:
      - name: c
        type: nat
        hook: postrouting
        priority: srcnat
        ${rules}
`);
}

export function chainConfig(ks: readonly number[]): TableConfig {
  return planConfig(ks).tables[0]!;
}

/** Chain ip t c as the kernel holds it, read with a socket of the test's own: its handles, and whether its rules are `ks`'s, in order. */
export async function readPlanChain(sock: Pick<NftConn, 'listRules'>, ks: readonly number[]): Promise<{ handles: number[]; ok: boolean }> {
  const rules = await sock.listRules({ family: 'ip', table: 't', chain: 'c' });
  const want = chainConfig(ks).chains[0]!.rules;
  const ok = rules.length === want.length && rules.every((r, i) => ruleKey({ exprs: r.exprs, userdata: r.userdata }) === ruleKey(want[i]!.compiled));
  return { handles: rules.map((r) => r.handle!), ok };
}

/** Deterministic random numbers (mulberry32), so a failing seed can be replayed. */
export function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
