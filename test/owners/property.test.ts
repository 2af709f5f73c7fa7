/**
 * Random and mutated API requests against a real daemon: each answer is a 4xx that changed
 * nothing (generation, state file), or a 2xx after which the kernel holds exactly what the
 * registered owners say. Never a 5xx, never a crash.
 */
import { existsSync, readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseOwnerChain } from '../../src/owners/index.js';
import { rawCall, withDaemon } from './fixtures.js';

const RULES = [
  'ip saddr 10.0.0.0/8 masquerade', 'tcp dport 80 return', 'counter', 'jump c', 'goto d', 'ip daddr 1.2.3.4 dnat to 10.0.0.1',
  'ip saddr { 10.1.0.0/16, 10.2.0.0/16 } return', 'meta l4proto udp accept', 'ip daddr != 224.0.0.0/4 masquerade fully-random',
];

/** A rule text, often valid, sometimes with a character inserted, removed or replaced. */
const rule = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...RULES.filter((r) => !/jump|goto|dnat/.test(r))) },
  { weight: 2, arbitrary: fc.constantFrom(...RULES) },
  fc.tuple(fc.constantFrom(...RULES), fc.nat(60), fc.constantFrom('', '"', ' ', '{', '/', 'x', '\\', '\n', '\u00e9', ';')).map(([r, i, c]) => r.slice(0, i % (r.length + 1)) + c + r.slice((i % (r.length + 1)) + (c === '' ? 1 : 0))),
  fc.string({ maxLength: 40 }),
);
const chainName = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('c', 'd', 'masq') }, fc.string({ maxLength: 10 }));
const spec = fc.record({
  chains: fc.array(fc.record({ name: chainName, rules: fc.array(rule, { maxLength: 3 }) }), { maxLength: 2 }),
  jumps: fc.dictionary(fc.constantFrom('postrouting', 'postrouting', 'prerouting', 'output', 'PostRouting'), fc.array(rule, { maxLength: 2 }), { maxKeys: 2 }),
}, { requiredKeys: [] });
const body = fc.oneof(
  { weight: 6, arbitrary: spec.map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }) },
);
const id = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('a', 'b', 'alloc-1', 'x.y:z') },
  { weight: 2, arbitrary: fc.string({ maxLength: 70 }).map((s) => encodeURIComponent(s)) },
  { weight: 1, arbitrary: fc.constantFrom('%', '..', 'a%2Fb', 'a%22b', 'x'.repeat(65), '%00') },
);
const request = fc.record({
  method: fc.constantFrom('PUT', 'PUT', 'PUT', 'DELETE', 'GET', 'POST'),
  path: fc.oneof({ weight: 8, arbitrary: id.map((i) => `/v1/owners/${i}`) }, { weight: 1, arbitrary: fc.constantFrom('/v1/owners', '/v1/status', '/v1', '/v2/owners/a', '/') }),
  body,
});

describe('control API properties', () => {
  it('every request gets a 4xx that changes nothing or a 2xx the kernel then reflects', async () => {
    await withDaemon('own-prop', async ({ dir, d, sock }) => {
      const stateFile = `${dir}/state/owners.json`;
      const state = () => (existsSync(stateFile) ? readFileSync(stateFile, 'utf8') : '');
      let ok = 0;
      let refused = 0;
      await fc.assert(fc.asyncProperty(request, async (r) => {
        const gen = sock.generation();
        const before = state();
        const res = await rawCall(d.socket, r.method, r.path, r.method === 'GET' || r.method === 'DELETE' ? '' : r.body);
        expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
        if (res.status >= 400) {
          refused++;
          expect(typeof res.body.error).toBe('string');
          expect(sock.generation()).toBe(gen);
          expect(state()).toBe(before);
          return;
        }
        ok++;
        // The kernel holds exactly the registered owners' chains, and the keeper has verified it.
        const want = d.registry.list().flatMap((o) => o.chains.map((c) => c.name)).sort();
        const have = (await sock.listChains({ family: 'ip', table: 'nfkeeper' })).map((c) => c.name).filter((n) => parseOwnerChain(n)).sort();
        expect(have).toEqual(want);
        expect(d.keeper.status().tables[0]!.state).toBe('verified');
      }), { numRuns: 150, seed: Number(process.env.NFK_SEED ?? Date.now() % 1e9) });
      console.log(`API property: ${ok} accepted, ${refused} refused`);
      expect(ok).toBeGreaterThan(5);
      expect(refused).toBeGreaterThan(5);
    });
  }, 240_000);
});
