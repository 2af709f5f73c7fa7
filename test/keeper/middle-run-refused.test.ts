/**
 * The middle-run placement (src/keeper/plan.ts placeEdit: a run of rules missing inside a chain is
 * placed by its first rule, the rest after that rule by its batch id, last to second) swept on the
 * real kernel. For runs at a chain's head, middle and tail, of 1 to 4 rules, and runs in two chains
 * of one batch, `apply`'s pass (checkOnce) puts back:
 *   - the desired chains as they are: the table then dumps (`nft --debug=netlink`, handles aside)
 *     exactly as nft installs the desired table, every kept rule keeps its handle;
 *   - with one rule of a run one the kernel refuses (a jump to a chain that does not exist), at each
 *     position of each run: the commit fails with a NetlinkError whose opIndex is that rule's op in
 *     the batch sent and whose description is that op's; every other refusal of the batch is a rule
 *     placed after it by its batch id (a run's rest after a refused first); the generation does not
 *     move and the table dumps byte for byte (handles included) as before: nothing of the batch landed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { NetlinkError } from '../../src/base/errors.js';
import { checkOnce } from '../../src/keeper/oneshot.js';
import type { Expr } from '../../src/netlink/expr.js';
import { describeOp, type Op } from '../../src/netlink/ops.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { recordSends, withSocketIn } from '../helpers/sends.js';
import { ruleText } from './plan-fixtures.js';

const N = 10;
/** The desired rules of chain c (nat postrouting) and d (regular): rule k of d is ruleText(100 + k). */
const want = { c: Array.from({ length: N }, (_, k) => ruleText(k)), d: Array.from({ length: N }, (_, k) => ruleText(100 + k)) };
type Name = keyof typeof want;
const DECL: Record<Name, string> = { c: 'type nat hook postrouting priority srcnat; policy accept;', d: '' };

/** Table ip t with chains c and d holding `rules`, as an nft script (the table created anew). */
const script = (rules: Record<Name, readonly string[]>) => `add table ip t\ndelete table ip t\ntable ip t {\n${(['c', 'd'] as const)
  .map((n) => ` chain ${n} {\n  ${DECL[n]}\n${rules[n].map((r) => `  ${r}\n`).join('')} }\n`).join('')}}\n`;

function config(refused?: { chain: Name; at: number }): Config {
  const yaml = `tables:\n  - family: ip\n    name: t\n    chains:\n${(['c', 'd'] as const).map((n) => `      - name: ${n}\n${n === 'c'
    ? '        type: nat\n        hook: postrouting\n        priority: srcnat\n' : ''}        rules:\n${want[n].map((r) => `          - ${r}\n`).join('')}`).join('')}`;
  const c = parseConfig(yaml);
  if (refused) {
    // A rule the kernel refuses at its op (nft_verdict_init: ENOENT), which validate would have
    // refused first: put in after the parse, as a rule the kernel alone refuses would be.
    const chain = c.tables[0]!.chains.find((x) => x.name === refused.chain)!;
    const exprs: Expr[] = [{ kind: 'immediate', dreg: 0, verdict: 'jump', chain: REFUSED } as Expr];
    chain.rules[refused.at] = { text: `jump ${REFUSED}`, compiled: { exprs, sets: [], text: `jump ${REFUSED}` } };
  }
  return c;
}
const REFUSED = 'no-such-chain';

/** A case: per chain, the desired indices [from, to) missing from the kernel. */
interface Shape { name: string; missing: Partial<Record<Name, [number, number]>> }
const SHAPES: Shape[] = [
  { name: 'head of c, 4', missing: { c: [0, 4] } },
  { name: 'middle of c, 4', missing: { c: [3, 7] } },
  { name: 'tail of c, 4', missing: { c: [6, 10] } },
  { name: 'middle of c, 1', missing: { c: [5, 6] } },
  { name: 'middle of c, 2', missing: { c: [5, 7] } },
  { name: 'head of c, 2', missing: { c: [0, 2] } },
  { name: 'middle of c and head of d, 4 each', missing: { c: [3, 7], d: [0, 4] } },
  { name: 'head of c and middle of d, 3 each', missing: { c: [0, 3], d: [4, 7] } },
];

const haveOf = (s: Shape): Record<Name, string[]> => ({
  c: want.c.filter((_, k) => !(s.missing.c && k >= s.missing.c[0] && k < s.missing.c[1])),
  d: want.d.filter((_, k) => !(s.missing.d && k >= s.missing.d[0] && k < s.missing.d[1])),
});

/** `nft --debug=netlink list table ip t`; with `handles` false, a rule's handle and position taken out. */
const dumpOf = (ns: Netns, handles = true) => {
  const text = ns.exec('nft', ['--debug=netlink', 'list', 'table', 'ip', 't']);
  return handles ? text : text.split('\n').map((l) => l.replace(/^(ip t [cd]) \d+( \d+)?$/, '$1')).join('\n');
};
const refusedOp = (op: Op) => op.object === 'rule' && op.verb !== 'delete'
  && (op.exprs as readonly Expr[] | undefined)?.some((e) => e.kind === 'immediate' && (e as { chain?: string }).chain === REFUSED);

describe('the middle-run placement on the real kernel', () => {
  let ns: Netns;
  let reference: string;
  beforeAll(() => {
    ns = createNetns('midrun-ref');
    ns.nft(script(want));
    reference = dumpOf(ns, false);
  });
  afterAll(() => ns?.remove());

  it('puts back runs at the head, middle and tail, in one chain and in two: the table as nft installs it, kept handles kept', async () => {
    for (const s of SHAPES) {
      ns.nft(script(haveOf(s)));
      const kept = ns.exec('nft', ['-a', 'list', 'table', 'ip', 't']).match(/# handle \d+/g)!;
      await withSocketIn(ns, async (sock) => {
        const sent = recordSends(sock);
        const r = await checkOnce(sock, config(), true);
        expect(r.ops, s.name).toBeGreaterThan(0);
        // The shape under test: a run of 3 or more has rules placed after its first by batch id.
        const longest = Math.max(...Object.values(s.missing).map(([a, b]) => b - a));
        if (longest >= 3 && Object.values(s.missing).some(([a, b]) => a > 0 && b < N)) {
          expect(sent.at(-1)!.batch.some((op) => op.object === 'rule' && op.positionId !== undefined), s.name).toBe(true);
        }
      });
      expect(dumpOf(ns, false), s.name).toBe(reference);
      const now = ns.exec('nft', ['-a', 'list', 'table', 'ip', 't']);
      for (const h of kept) expect(now, `${s.name}: ${h} kept`).toContain(h);
    }
  });

  const cases = SHAPES.flatMap((s) => (Object.entries(s.missing) as [Name, [number, number]][])
    .flatMap(([chain, [from, to]]) => Array.from({ length: to - from }, (_, p) => ({ s, chain, at: from + p, p }))));

  it(`a rule the kernel refuses at each position of each run (${cases.length} cases): the error names its op, nothing lands`, async () => {
    for (const { s, chain, at, p } of cases) {
      const what = `${s.name}: refused ${chain}[${at}] (position ${p} of its run)`;
      ns.nft(script(haveOf(s)));
      const before = dumpOf(ns);
      await withSocketIn(ns, async (sock) => {
        const gen = sock.generation();
        const sent = recordSends(sock);
        const e = await checkOnce(sock, config({ chain, at }), true).then(() => undefined, (x: unknown) => x);
        expect(e, what).toBeInstanceOf(NetlinkError);
        const err = e as NetlinkError;
        expect(err.errnoName, what).toBe('ENOENT');
        const ops = sent.at(-1)!.batch;
        expect(sent.at(-1)!.error, what).toBe(e);
        const i = ops.findIndex(refusedOp);
        expect(i, what).toBeGreaterThanOrEqual(0);
        expect(ops.filter(refusedOp), what).toHaveLength(1);
        expect(err.opIndex, what).toBe(i);
        expect(err.description, what).toBe(describeOp(ops[i]!));
        expect(err.message, what).toContain(`operation ${i}:`);
        // The rest of the batch's refusals: only rules placed by the batch id of a refused rule (a
        // run's rest after a refused first), nothing the refused rule does not explain.
        const refusedIds = new Set((err.refusals ?? []).map((x) => (ops[x.opIndex] as { id?: number }).id).filter((x) => x !== undefined));
        expect((err.refusals ?? []).map((x) => x.opIndex), what).toContain(i);
        for (const x of err.refusals ?? []) {
          if (x.opIndex === i) continue;
          const op = ops[x.opIndex]!;
          expect(op.object === 'rule' && op.positionId !== undefined && refusedIds.has(op.positionId), `${what}: op ${x.opIndex} ${describeOp(op)} refused too`).toBe(true);
        }
        expect(sock.generation(), what).toBe(gen);
      });
      expect(dumpOf(ns), what).toBe(before);
    }
  });
});
