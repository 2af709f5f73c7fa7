/**
 * The middle-run placement under kernel refusals, past middle-run-refused.test.ts: runs whose rules
 * use anonymous sets (each rule's set ops placed before it), batches that delete rules and replace
 * rules in place besides adding runs, and four kinds of refusal: a jump to a chain that is gone, a
 * lookup in a named set that is gone (both ENOENT at the rule's op), a rule whose own anonymous set
 * is added before it and whose jump target is gone, and a statement the chain's hook refuses (dnat
 * in postrouting: EOPNOTSUPP, found when the kernel validates the table at commit). Table ip t:
 * chain c (nat postrouting) of 10 rules, every one with an anonymous set; chain d (regular) of 10
 * plain rules. For each shape, `apply`'s pass (checkOnce) first puts the table back as nft installs
 * it (handles aside; kept handles kept), with the shape's ops in its batch; then, for each position
 * of each run and each replaced rule, that rule made one the kernel refuses, of each kind: the
 * commit fails with a NetlinkError whose opIndex is that rule's op in the batch sent, whose errno is
 * the kind's, whose description and message name that op; every other refusal is a rule placed by
 * the batch id of a refused rule, or (hook) a later rule or element op the kernel refused when it
 * validated the table again with the refused rule in it; the generation does not move and the
 * table dumps byte for byte (handles included) as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../src/config/config.js';
import { NetlinkError } from '../../src/base/errors.js';
import { checkOnce } from '../../src/keeper/oneshot.js';
import { describeOp, type Op } from '../../src/netlink/ops.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { recordSends, withSocketIn } from '../helpers/sends.js';
import { ruleText } from './plan-fixtures.js';

const N = 10;
const anon = (k: number) => (k % 2 ? `ip saddr { 10.1.${k}.1, 10.1.${k}.2 } accept` : `tcp dport { ${1000 + k}, ${2000 + k} } accept`);
const want = { c: Array.from({ length: N }, (_, k) => anon(k)), d: Array.from({ length: N }, (_, k) => ruleText(100 + k)) };
type Name = keyof typeof want;
const DECL: Record<Name, string> = { c: 'type nat hook postrouting priority srcnat; policy accept;', d: '' };

/** Table ip t with chains c and d holding `rules`, as an nft script (the table created anew). */
const script = (rules: Record<Name, readonly string[]>) => `add table ip t\ndelete table ip t\ntable ip t {\n${(['c', 'd'] as const)
  .map((n) => ` chain ${n} {\n  ${DECL[n]}\n${rules[n].map((r) => `  ${r}\n`).join('')} }\n`).join('')}}\n`;

type Kind = 'jump' | 'set' | 'anon-jump' | 'hook';
const ERRNO: Record<Kind, string> = { jump: 'ENOENT', set: 'ENOENT', 'anon-jump': 'ENOENT', hook: 'EOPNOTSUPP' };
/** The refused rule as written in the config, before what it names is taken out of the parsed config. */
const REFUSED: Record<Kind, string> = {
  jump: 'jump gone',
  set: 'ip saddr @gone accept',
  'anon-jump': 'ip saddr { 10.7.0.1, 10.7.0.2 } jump gone',
  hook: 'dnat to 10.0.0.1',
};

/**
 * The desired config; with `refused`, rule `at` of `chain` one the kernel refuses at its op: written
 * with what it names declared (chain gone, set gone) and parsed, then that taken out of the parsed
 * config, as a kernel that lost them would see it; `hook`: parsed in a nat prerouting chain p, then
 * moved into c (validate refuses dnat in postrouting first).
 */
function config(refused?: { chain: Name; at: number; kind: Kind }): Config {
  const rules = { c: [...want.c], d: [...want.d] };
  if (refused && refused.kind !== 'hook') rules[refused.chain][refused.at] = REFUSED[refused.kind];
  const yaml = `tables:\n  - family: ip\n    name: t\n${refused?.kind === 'set' ? '    sets:\n      - name: gone\n        type: ipv4_addr\n' : ''}    chains:\n${(['c', 'd'] as const).map((n) => `      - name: ${n}\n${n === 'c'
    ? '        type: nat\n        hook: postrouting\n        priority: srcnat\n' : ''}        rules:\n${rules[n].map((r) => `          - ${r}\n`).join('')}`).join('')}`
    + (refused?.kind === 'jump' || refused?.kind === 'anon-jump' ? '      - name: gone\n        rules: []\n' : '')
    + (refused?.kind === 'hook' ? `      - name: p\n        type: nat\n        hook: prerouting\n        priority: dstnat\n        rules:\n          - ${REFUSED.hook}\n` : '');
  const c = parseConfig(yaml);
  const t = c.tables[0]!;
  if (refused?.kind === 'hook') {
    const p = t.chains.find((x) => x.name === 'p')!;
    t.chains.find((x) => x.name === refused.chain)!.rules[refused.at] = p.rules[0]!;
  }
  t.chains = t.chains.filter((x) => x.name !== 'gone' && x.name !== 'p');
  t.sets = (t.sets ?? []).filter((s) => s.name !== 'gone');
  return c;
}

/** A kernel state: per chain, the rules it holds, and which desired indices are the runs put back and the rules replaced. */
interface Shape {
  name: string;
  have: Record<Name, string[]>;
  /** Desired indices the batch adds (runs) or replaces in place, per chain. */
  placed: Partial<Record<Name, number[]>>;
  /** What the positive batch must hold for the shape to be the one under test. */
  expect: (ops: readonly Op[]) => boolean;
}
const without = (l: readonly string[], from: number, to: number) => l.filter((_, k) => k < from || k >= to);
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => from + k);
const isRule = (op: Op, verb: string) => op.object === 'rule' && op.verb === verb;
const EXTRA = (k: number) => `ip saddr 10.9.9.${k} drop`;
const SHAPES: Shape[] = [
  { name: 'anonymous sets, middle of c, 4', have: { c: without(want.c, 3, 7), d: want.d }, placed: { c: range(3, 7) },
    expect: (ops) => ops.some((o) => o.object === 'set') && ops.some((o) => isRule(o, 'add') && (o as { positionId?: number }).positionId !== undefined) },
  { name: 'anonymous sets, head of c, 3', have: { c: without(want.c, 0, 3), d: want.d }, placed: { c: range(0, 3) },
    expect: (ops) => ops.some((o) => o.object === 'set') },
  { name: 'deletes: middle of d, 3, among rules to delete in c and d',
    have: { c: [...want.c.slice(0, 5), EXTRA(1), ...want.c.slice(5)], d: [...want.d.slice(0, 2), EXTRA(2), ...want.d.slice(2, 4), ...want.d.slice(7), EXTRA(3)] },
    placed: { d: range(4, 7) }, expect: (ops) => ops.filter((o) => isRule(o, 'delete')).length === 3 },
  { name: 'replaces: d[2] and d[6] changed, d[3..5) missing',
    have: { c: want.c, d: want.d.map((r, k) => (k === 2 || k === 6 ? EXTRA(k) : r)).filter((_, k) => k < 3 || k >= 5) },
    placed: { d: [2, 3, 4, 6] }, expect: (ops) => ops.some((o) => isRule(o, 'replace')) },
  { name: 'a run after a replaced rule: c[3] changed, c[4..6) missing',
    have: { c: want.c.map((r, k) => (k === 3 ? `udp dport { 9${k}1, 9${k}2 } accept` : r)).filter((_, k) => k < 4 || k >= 6), d: want.d },
    placed: { c: [3, 4, 5] }, expect: (ops) => ops.some((o) => isRule(o, 'replace')) },
];

/**
 * `nft --debug=netlink list table ip t`; with `handles` false, a rule's handle and position taken
 * out, and the anonymous sets' names and element lists (the kernel numbers and lists them in the
 * order they were added).
 */
const dumpOf = (ns: Netns, handles = true) => {
  const text = ns.exec('nft', ['--debug=netlink', 'list', 'table', 'ip', 't']);
  // (their elements, listed set by set in that order, are in the rules' text nft prints after the dump)
  return handles ? text : text.split('\n').filter((l) => !/^\s*(ip t @__set\d+|element )/.test(l))
    .map((l) => l.replace(/^(ip t [cd]) \d+( \d+)?$/, '$1').replace(/__set\d+/g, '__set')).join('\n');
};

describe('the middle-run placement under kernel refusals: anonymous sets, deletes, replaces, four kinds', () => {
  let ns: Netns;
  let reference: string;
  beforeAll(() => {
    ns = createNetns('midrun-kinds');
    ns.nft(script(want));
    reference = dumpOf(ns, false);
  });
  afterAll(() => ns?.remove());

  it('puts each shape back as nft installs it, kept handles kept, with the shape\'s ops in its batch', async () => {
    for (const s of SHAPES) {
      ns.nft(script(s.have));
      const kept = ns.exec('nft', ['-a', 'list', 'table', 'ip', 't']).split('\n')
        .filter((l) => !l.includes('10.9.9.') && !/udp dport \{ 9/.test(l)).join('\n').match(/# handle \d+/g)!;
      await withSocketIn(ns, async (sock) => {
        const sent = recordSends(sock);
        const r = await checkOnce(sock, config(), true);
        expect(r.ops, s.name).toBeGreaterThan(0);
        expect(s.expect(sent.at(-1)!.batch), `${s.name}: ${sent.at(-1)!.batch.map(describeOp).join('; ')}`).toBe(true);
      });
      expect(dumpOf(ns, false), s.name).toBe(reference);
      const now = ns.exec('nft', ['-a', 'list', 'table', 'ip', 't']);
      for (const h of kept) {
        // A rule replaced in place keeps its handle too; deleted rules' handles are gone.
        expect(now, `${s.name}: ${h} kept`).toContain(h);
      }
    }
  });

  const cases = SHAPES.flatMap((s) => (Object.entries(s.placed) as [Name, number[]][]).flatMap(([chain, ats]) => ats.flatMap((at) =>
    (['jump', 'set', 'anon-jump', 'hook'] as Kind[]).filter((kind) => kind !== 'hook' || chain === 'c').map((kind) => ({ s, chain, at, kind })))));

  it(`a rule the kernel refuses at each placed position, of each kind (${cases.length} cases): the error names its op, nothing lands`, async () => {
    const failures: string[] = [];
    const seen = new Map<string, number>();
    for (const { s, chain, at, kind } of cases) {
      const what = `${s.name}: ${kind} refused at ${chain}[${at}]`;
      ns.nft(script(s.have));
      const before = dumpOf(ns);
      const desired = config({ chain, at, kind });
      const refusedExprs = JSON.stringify(desired.tables[0]!.chains.find((x) => x.name === chain)!.rules[at]!.compiled.exprs);
      const refusedOp = (op: Op) => op.object === 'rule' && op.verb !== 'delete' && JSON.stringify((op as { exprs?: unknown }).exprs) === refusedExprs;
      await withSocketIn(ns, async (sock) => {
        const gen = sock.generation();
        const sent = recordSends(sock);
        const e = await checkOnce(sock, desired, true).then(() => undefined, (x: unknown) => x);
        if (!(e instanceof NetlinkError)) {
          failures.push(`${what}: ${e === undefined ? 'the commit went through' : `not a NetlinkError: ${String(e)}`}`);
          return;
        }
        const ops = sent.at(-1)!.batch;
        const i = ops.findIndex(refusedOp);
        const problems: string[] = [];
        if (e.errnoName !== ERRNO[kind]) problems.push(`errno ${e.errnoName}`);
        if (sent.at(-1)!.error !== e) problems.push('not the last send\'s error');
        if (i < 0 || ops.filter(refusedOp).length !== 1) problems.push(`the refused rule is op ${i} (${ops.filter(refusedOp).length} such ops)`);
        if (e.opIndex !== i) problems.push(`opIndex ${e.opIndex} (${e.opIndex >= 0 ? describeOp(ops[e.opIndex]!) : '-'}), the refused rule is op ${i}`);
        if (i >= 0 && e.description !== describeOp(ops[i]!)) problems.push(`description ${e.description}`);
        if (!e.message.includes(`operation ${i}:`)) problems.push(`message ${e.message}`);
        const refusedIds = new Set((e.refusals ?? []).map((x) => (ops[x.opIndex] as { id?: number }).id).filter((x) => x !== undefined));
        for (const x of e.refusals ?? []) {
          if (x.opIndex === i) continue;
          const op = ops[x.opIndex]!;
          // A refusal found when the kernel validates the table (hook): it validates it again at each
          // later op that adds a rule or an element, the refused rule still in its transaction, and
          // refuses those too with the same errno; the first refusal, named, is the cause.
          const revalidated = kind === 'hook' && x.opIndex > i && x.errno === e.errno && (op.object === 'rule' || op.object === 'set' || op.object === 'element');
          const placedById = op.object === 'rule' && (op as { positionId?: number }).positionId !== undefined && refusedIds.has((op as { positionId: number }).positionId);
          if (!placedById && !revalidated) problems.push(`op ${x.opIndex} ${describeOp(op)} refused too (${x.errnoName})`);
        }
        if (sock.generation() !== gen) problems.push('the generation moved');
        if (problems.length) failures.push(`${what}: ${problems.join('; ')}`);
        seen.set(kind, (seen.get(kind) ?? 0) + 1);
      });
      if (dumpOf(ns) !== before) failures.push(`${what}: the table changed`);
    }
    console.log(`middle-run refusals: ${cases.length} cases, by kind ${JSON.stringify(Object.fromEntries(seen))}`);
    expect(failures).toEqual([]);
  });
});
