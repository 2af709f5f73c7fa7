/**
 * The commit-time checks the kernel makes on a table's jump graph (loops, a jump stack of 16,
 * NAT reached from the wrong base chain) and on base chains (type against hook, nat priority),
 * said by the config loader before anything is sent. The oracle is the kernel: random tables
 * (fast-check, fixed seed) go to `nft -f` in a throwaway namespace, and the loader must refuse
 * exactly the tables the kernel refuses.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/base/errors.js';
import { NFT_JUMP_STACK_SIZE } from '../../src/rules/index.js';
import { createNetns, type Netns } from '../helpers/netns.js';

interface GenChain {
  base?: { type: 'filter' | 'nat' | 'route'; hook: string; priority: number };
  /** Each rule: a jump, a goto, a verdict map over some chains, a NAT statement, or a plain return. */
  rules: ({ t: 'jump' | 'goto'; to: number } | { t: 'vmap'; to: number[] } | { t: 'dnat' | 'snat' | 'return' })[];
}

function yamlOf(chains: GenChain[]): string {
  const lines = ['tables:', '  - family: ip', '    name: t', '    chains:'];
  chains.forEach((c, i) => {
    lines.push(`      - name: c${i}`);
    if (c.base) lines.push(`        type: ${c.base.type}`, `        hook: ${c.base.hook}`, `        priority: ${c.base.priority}`);
    lines.push(`        rules: ${JSON.stringify(c.rules.map(ruleText))}`);
  });
  return `${lines.join('\n')}\n`;
}

function ruleText(r: GenChain['rules'][number]): string {
  switch (r.t) {
    case 'jump': case 'goto': return `${r.t} c${r.to}`;
    case 'vmap': return `tcp dport vmap { ${r.to.map((to, k) => `${1000 + k} : jump c${to}`).join(', ')} }`;
    case 'dnat': return 'ip daddr 10.0.0.1 dnat to 10.0.0.2';
    case 'snat': return 'ip saddr 10.0.0.0/8 snat to 10.0.0.3';
    case 'return': return 'return';
  }
}

function nftOf(chains: GenChain[]): string {
  const out = ['table ip t {'];
  chains.forEach((c, i) => {
    out.push(`  chain c${i} {`);
    if (c.base) out.push(`    type ${c.base.type} hook ${c.base.hook} priority ${c.base.priority};`);
    for (const r of c.rules) out.push(`    ${ruleText(r)}`);
    out.push('  }');
  });
  out.push('}');
  return `${out.join('\n')}\n`;
}

const HOOKS = ['prerouting', 'input', 'forward', 'output', 'postrouting'];

function tableArb(): fc.Arbitrary<GenChain[]> {
  return fc.integer({ min: 1, max: 20 }).chain((n) => {
    const chainArb = (i: number) => {
      // Mostly jumps further down the list (deep graphs, no loops), sometimes anywhere (loops,
      // jumps to base chains).
      const target = i + 1 < n
        ? fc.oneof({ weight: 6, arbitrary: fc.integer({ min: i + 1, max: n - 1 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: n - 1 }) })
        : fc.integer({ min: 0, max: n - 1 });
      const rule = fc.oneof(
        { weight: 4, arbitrary: fc.record({ t: fc.constantFrom('jump' as const, 'goto' as const), to: target }) },
        { weight: 1, arbitrary: fc.record({ t: fc.constant('vmap' as const), to: fc.uniqueArray(target, { minLength: 1, maxLength: 3 }) }) },
        { weight: 2, arbitrary: fc.record({ t: fc.constantFrom('dnat' as const, 'snat' as const, 'return' as const) }) },
      );
      const base = fc.record({
        type: fc.constantFrom('filter' as const, 'nat' as const, 'nat' as const, 'route' as const),
        hook: fc.constantFrom(...HOOKS),
        priority: fc.constantFrom(-300, -200, -150, 0, 100),
      });
      // Base chains near the top of the list, where the jumps start.
      return fc.record({ base: fc.option(base, { freq: i < 2 ? 1 : 8 }), rules: fc.array(rule, { maxLength: 3 }) })
        .map((c) => (c.base === null ? { rules: c.rules } : { base: c.base, rules: c.rules }) as GenChain);
    };
    return fc.tuple(...Array.from({ length: n }, (_, i) => chainArb(i)));
  });
}

/** A straight line of `n` jumps from a base chain. */
function jumpLine(n: number): GenChain[] {
  const chains: GenChain[] = [{ base: { type: 'filter', hook: 'input', priority: 0 }, rules: [] }];
  for (let i = 1; i <= n; i++) {
    chains[i - 1]!.rules.push({ t: 'jump', to: i });
    chains.push({ rules: [] });
  }
  return chains;
}

function loaderVerdict(chains: GenChain[]): { ok: true } | { ok: false; errors: ConfigError[] } {
  try {
    parseConfig(yamlOf(chains), 'g.yaml');
    return { ok: true };
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return { ok: false, errors: [e] };
  }
}

let ns: Netns;
beforeAll(() => { ns = createNetns('graph'); });
afterAll(() => ns?.remove());

function kernelAccepts(chains: GenChain[]): boolean {
  ns.exec('nft', ['flush', 'ruleset']);
  try {
    ns.nft(nftOf(chains));
    return true;
  } catch {
    return false;
  }
}

describe('jump graph and base chain checks', () => {
  it('refuses a loop a base chain reaches, at the jump that closes it, and keeps an unreachable loop as the kernel does', () => {
    const loop: GenChain[] = [
      { base: { type: 'filter', hook: 'input', priority: 0 }, rules: [{ t: 'jump', to: 1 }] },
      { rules: [{ t: 'return' }, { t: 'jump', to: 2 }] },
      { rules: [{ t: 'goto', to: 1 }] },
    ];
    const v = loaderVerdict(loop);
    expect(v.ok).toBe(false);
    const e = (v as { errors: ConfigError[] }).errors[0]!;
    expect(e.reason).toMatch(/rule 1 of chain c2: jumps in a loop \(c1 → c2 → c1\)/);
    expect(kernelAccepts(loop)).toBe(false);

    const unreachable = [{ rules: [{ t: 'jump', to: 1 }] }, { rules: [{ t: 'jump', to: 0 }] }] as GenChain[];
    expect(loaderVerdict(unreachable).ok).toBe(true);
    expect(kernelAccepts(unreachable)).toBe(true);
  });

  it(`allows ${NFT_JUMP_STACK_SIZE - 1} nested jumps below a base chain and refuses ${NFT_JUMP_STACK_SIZE}, as the kernel does`, () => {
    const ok = jumpLine(NFT_JUMP_STACK_SIZE - 1);
    const deep = jumpLine(NFT_JUMP_STACK_SIZE);
    expect([loaderVerdict(ok).ok, kernelAccepts(ok)]).toEqual([true, true]);
    expect([loaderVerdict(deep).ok, kernelAccepts(deep)]).toEqual([false, false]);
    expect((loaderVerdict(deep) as { errors: ConfigError[] }).errors[0]!.reason).toMatch(/rule 1 of chain c0: its jumps nest 16 chains deep/);
  });

  it('checks a regular chain\'s NAT against the base chains that reach it, through verdict maps too', () => {
    const viaMap: GenChain[] = [
      { base: { type: 'nat', hook: 'postrouting', priority: 100 }, rules: [{ t: 'vmap', to: [1] }] },
      { rules: [{ t: 'return' }, { t: 'dnat' }] },
    ];
    const v = loaderVerdict(viaMap);
    expect(v.ok).toBe(false);
    expect((v as { errors: ConfigError[] }).errors[0]!.reason)
      .toMatch(/rule 2 of chain c1: dnat and redirect are only valid in prerouting and output chains \(reached by a jump from nat chain c0, hook postrouting\)/);
    expect((v as { errors: ConfigError[] }).errors[0]!.line).toBe(11);
    expect(kernelAccepts(viaMap)).toBe(false);
  });

  it('a long refused line of jumps does not overflow the stack', () => {
    expect(loaderVerdict(jumpLine(12_000)).ok).toBe(false);
  });

  it('refuses exactly what the kernel refuses, over 300 random tables (seed 20261203)', () => {
    let refused = 0;
    const samples = fc.sample(tableArb(), { numRuns: 300, seed: 20261203 });
    for (const chains of samples) {
      const loader = loaderVerdict(chains);
      const kernel = kernelAccepts(chains);
      if (loader.ok !== kernel) {
        throw new Error(`loader ${loader.ok ? 'accepts' : `refuses (${(loader as { errors: ConfigError[] }).errors[0]!.reason})`}, kernel ${kernel ? 'accepts' : 'refuses'}:\n${nftOf(chains)}`);
      }
      if (!kernel) refused++;
    }
    // Both outcomes must be exercised for the comparison to mean anything.
    expect(refused).toBeGreaterThan(30);
    expect(samples.length - refused).toBeGreaterThan(30);
  }, 300_000);  // 300 nft processes: a minute or two on a loaded machine
});
