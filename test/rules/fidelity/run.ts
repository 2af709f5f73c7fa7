/**
 * The fidelity corpus: rules nfkeeper did not write for the occasion (nft's own
 * tests/py suite, peers' rulesets) compiled by nfkeeper and by nft 1.0.6, with
 * the kernel's dumps compared. Per family, namespace A gets every corpus rule
 * through `nft -f` (rules nft itself refuses are dropped one by one, by the
 * line nft names), namespace B every rule nfkeeper accepts, in one batch; each
 * rule sits in the same regular chain, in order, so dump N is rule N.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Batch, open, type Family, type NftSet, type Rule, type SetElement } from '../../../src/index.js';
import {
  RuleSyntaxError, compileRule, compiledSetResolver, interfaceTable, queueRule, renderRule, ruleKey, type CompiledRule,
  type SetResolver,
} from '../../../src/rules/index.js';
import { createNetns, type Netns } from '../../helpers/netns.js';
import { comparable, setShape } from '../oracle.js';

export const TABLE = 'fid';
const CHAIN = 'c';
export const FIDELITY_INTERFACES = interfaceTable({ lo: 1 });

export interface CorpusEntry { family: Family; source: string; text: string }

export function loadCorpus(file: string): CorpusEntry[] {
  return readFileSync(new URL(file, import.meta.url), 'utf8').split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const [family, source, text] = l.split('\t') as [Family, string, string];
      return { family, source, text };
    });
}

export type Outcome =
  /** nft 1.0.6 itself refuses it here (kernel lacks the feature, or the test suite's version differs). */
  | { k: 'nft-refuses'; why: string }
  /** nfkeeper refuses it at compile time, with a position. */
  | { k: 'refused'; reason: string; message: string }
  /** nfkeeper accepted it and the kernel holds exactly what nft puts there. */
  | { k: 'exact' }
  /** nfkeeper accepted it but compiled it differently from nft: a bug. */
  | { k: 'differs'; detail: string }
  /** nfkeeper threw something other than a RuleSyntaxError: a bug. */
  | { k: 'crash'; message: string };

export interface EntryResult {
  entry: CorpusEntry;
  outcome: Outcome;
  /** Our rendering of the kernel's rule as nft installed it (absent when nft refused it). */
  rendered?: string;
  /** nft's listing of the same rule. */
  listed?: string;
  /** The rendering is not marked <unsupported …> and compiles back to the kernel's rule. */
  renderRoundTrips?: boolean;
  /** The rendering is marked (part of the rule is outside the vocabulary). */
  renderMarked?: boolean;
}

function reasonOf(e: RuleSyntaxError): string {
  const m = /^(.*?) (?:at column \d+|at the end of the rule)/.exec(e.message);
  return m ? m[1]! : e.message.split('\n')[0]!;
}

function jumpTargets(texts: string[]): string[] {
  const out = new Set<string>();
  for (const t of texts) for (const m of t.matchAll(/\b(?:jump|goto)\s+([A-Za-z_][A-Za-z0-9_.-]*)/g)) out.add(m[1]!);
  out.delete(CHAIN);
  return [...out].sort();
}

function nftRun(ns: Netns, script: string): { ok: boolean; err: string } {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { input: script, encoding: 'utf8', maxBuffer: 1 << 28 });
  return { ok: r.status === 0, err: r.stderr ?? '' };
}

/** Adds each text with `nft -f`, dropping the ones nft refuses; returns the refusals by index. */
function nftInstall(ns: Netns, family: Family, texts: string[]): Map<number, string> {
  const refused = new Map<number, string>();
  const head = [`add table ${family} ${TABLE}`, `add chain ${family} ${TABLE} ${CHAIN}`];
  for (const t of jumpTargets(texts)) head.push(`add chain ${family} ${TABLE} ${t}`);
  for (;;) {
    const idx = texts.map((_, i) => i).filter((i) => !refused.has(i));
    const lines = idx.map((i) => `add rule ${family} ${TABLE} ${CHAIN} ${texts[i]}`);
    const r = nftRun(ns, [...head, ...lines].join('\n') + '\n');
    if (r.ok) return refused;
    // nft names each failing command as /dev/stdin:LINE:COL
    const bad = new Set<number>();
    for (const m of r.err.matchAll(/\/dev\/stdin:(\d+):[^\n]*Error: ([^\n]*)/g)) {
      const line = Number(m[1]) - head.length - 1;
      if (line >= 0 && line < idx.length) bad.add(line);
      if (line >= 0 && line < idx.length && !refused.has(idx[line]!)) refused.set(idx[line]!, m[2]!);
    }
    if (bad.size === 0) throw new Error(`nft failed without naming a line:\n${r.err.slice(0, 2000)}`);
    // a failed run leaves nothing behind (nft -f is one transaction); start over
    nftRun(ns, `delete table ${family} ${TABLE}\n`);
  }
}

async function dump(ns: Netns, family: Family): Promise<{ rules: Rule[]; sets: SetResolver }> {
  const sock = open({ netns: ns.path });
  try {
    const rules = (await sock.listRules({ family, table: TABLE })).filter((r) => r.chain === CHAIN);
    const sets = new Map<string, { set: NftSet; elements: SetElement[] }>();
    for (const s of await sock.listSets({ family, table: TABLE })) {
      sets.set(s.name, { set: s, elements: await sock.listElements({ family, table: TABLE, set: s.name }) });
    }
    return { rules, sets: (name) => sets.get(name) };
  } finally {
    sock.close();
  }
}

function listed(ns: Netns, family: Family): string[] {
  const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', 'list', 'chain', family, TABLE, CHAIN], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const out: string[] = [];
  let inChain = false;
  for (const raw of (r.stdout ?? '').split('\n')) {
    const line = raw.trim();
    if (line === `chain ${CHAIN} {`) { inChain = true; continue; }
    if (!inChain || line === '' ) continue;
    if (line === '}') { inChain = false; continue; }
    out.push(line.replace(/counter packets \d+ bytes \d+/g, 'counter'));
  }
  return out;
}

function usedSets(rule: { exprs: Rule['exprs'] }, sets: SetResolver): unknown[] {
  return rule.exprs.filter((e) => e.kind === 'lookup').map((e) => {
    const l = e as Extract<Rule['exprs'][number], { kind: 'lookup' }>;
    const s = sets(l.set, l.setId);
    return s ? setShape(s) : `unresolved ${l.set}`;
  });
}

function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'undefined';
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  const o = v as Record<string, unknown>;
  return '{' + Object.keys(o).filter((k) => o[k] !== undefined).sort()
    .map((k) => JSON.stringify(k) + ':' + canonical(o[k])).join(',') + '}';
}

/** What compare.ts normalises as well: an exthdr store's flags, which the kernel dumps as 0 but refuses to take. */
function norm(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(norm);
  if (v && typeof v === 'object' && (v as { kind?: string }).kind === 'exthdr') {
    const x = v as { flags?: number; offset?: number; len?: number; dreg?: number; sreg?: number };
    const { flags: _f, offset: _o, len: _l, ...rest } = x;
    // a strip (`reset tcp option`) cannot carry offset and len, which the kernel dumps as 0
    const strip = x.dreg === undefined && x.sreg === undefined;
    return { ...rest, ...(x.flags ? { flags: x.flags } : {}), ...(strip && !x.offset ? {} : { offset: x.offset }),
      ...(strip && !x.len ? {} : { len: x.len }) };
  }
  return v;
}

function differ(a0: unknown, b0: unknown): string | undefined {
  const a = norm(a0), b = norm(b0);
  const x = canonical(a), y = canonical(b);
  return x === y ? undefined : `nfkeeper ${x}\n    nft     ${y}`;
}

/** Runs one family's entries through both sides. */
export async function runFamily(family: Family, entries: CorpusEntry[]): Promise<EntryResult[]> {
  const results: EntryResult[] = entries.map((entry) => ({ entry, outcome: { k: 'exact' } }));
  const compiled: (CompiledRule | undefined)[] = [];
  let setId = 1;
  entries.forEach((e, i) => {
    try {
      const c = compileRule(e.text, { family, table: TABLE, chain: CHAIN, setIdBase: setId, interfaces: FIDELITY_INTERFACES });
      setId += c.sets.length;
      compiled[i] = c;
    } catch (err) {
      results[i]!.outcome = err instanceof RuleSyntaxError
        ? { k: 'refused', reason: reasonOf(err), message: err.message }
        : { k: 'crash', message: String((err as Error)?.stack ?? err) };
    }
  });
  const a = createNetns(`fid-nft-${family}`);
  let b: Netns | undefined;
  try {
    b = createNetns(`fid-nfk-${family}`);
    const nftRefused = nftInstall(a, family, entries.map((e) => e.text));
    for (const [i, why] of nftRefused) results[i]!.outcome = { k: 'nft-refuses', why };
    const da = await dump(a, family);
    const la = listed(a, family);
    // B: every rule nfkeeper compiled (and nft accepts), in one batch
    const ours = entries.map((_, i) => i).filter((i) => compiled[i] && !nftRefused.has(i));
    const batch = new Batch();
    batch.add('table', { family, name: TABLE });
    batch.add('chain', { family, table: TABLE, name: CHAIN });
    for (const t of jumpTargets(ours.map((i) => entries[i]!.text))) batch.add('chain', { family, table: TABLE, name: t });
    for (const i of ours) queueRule(batch, compiled[i]!, { family, table: TABLE, chain: CHAIN });
    const sock = open({ netns: b.path });
    let db: { rules: Rule[]; sets: SetResolver } | undefined;
    let commitError: string | undefined;
    try {
      await sock.commit(batch);
    } catch (err) {
      commitError = String((err as Error).message);
    } finally {
      sock.close();
    }
    if (commitError === undefined) db = await dump(b, family);
    // nft's rules in order: the n-th installed entry is dump rule n
    const installed = entries.map((_, i) => i).filter((i) => !nftRefused.has(i));
    installed.forEach((i, n) => {
      const r = results[i]!;
      const kr = da.rules[n];
      if (!kr) { r.outcome = { k: 'crash', message: 'rule missing from nft side dump' }; return; }
      r.listed = la[n];
      try {
        r.rendered = renderRule(kr, family, da.sets, { interfaces: FIDELITY_INTERFACES });
      } catch (err) {
        r.outcome = { k: 'crash', message: `render: ${String((err as Error)?.stack ?? err)}` };
        return;
      }
      r.renderMarked = r.rendered.includes('<unsupported');
      if (!r.renderMarked) {
        try {
          const back = compileRule(r.rendered, { family, table: TABLE, chain: CHAIN, interfaces: FIDELITY_INTERFACES });
          r.renderRoundTrips = differ(comparable(back.exprs, compiledSetResolver(back)), comparable(kr.exprs, da.sets)) === undefined
            && back.userdata === kr.userdata
            && differ(usedSets(back, compiledSetResolver(back)), usedSets(kr, da.sets)) === undefined;
        } catch {
          r.renderRoundTrips = false;
        }
      }
      const c = compiled[i];
      if (!c) return;
      const d1 = differ(comparable(c.exprs, compiledSetResolver(c)), comparable(kr.exprs, da.sets))
        ?? differ(c.userdata, kr.userdata)
        ?? differ(usedSets(c, compiledSetResolver(c)), usedSets(kr, da.sets));
      if (d1) { r.outcome = { k: 'differs', detail: `compiled vs nft's kernel rule:\n    ${d1}` }; return; }
      if (!db) { r.outcome = { k: 'differs', detail: `the kernel refused nfkeeper's batch: ${commitError}` }; return; }
      const m = ours.indexOf(i);
      const ob = db.rules[m];
      const d2 = ob ? differ(comparable(ob.exprs, db.sets), comparable(kr.exprs, da.sets))
        ?? differ(usedSets(ob, db.sets), usedSets(kr, da.sets)) : 'missing from nfkeeper side dump';
      if (d2) { r.outcome = { k: 'differs', detail: `nfkeeper's kernel rule vs nft's:\n    ${d2}` }; return; }
      // the reconciler's equality must hold too, or the keeper would see drift forever
      if (ruleKey(c) !== ruleKey(kr, da.sets) || ruleKey(ob!, db.sets) !== ruleKey(kr, da.sets)) {
        r.outcome = { k: 'differs', detail: `rule keys differ:\n    ${ruleKey(c)}\n    ${ruleKey(kr, da.sets)}` };
      }
    });
  } finally {
    a.remove();
    b?.remove();
  }
  return results;
}

export interface Summary {
  tried: number;
  nftRefuses: number;
  exact: number;
  refused: number;
  differs: number;
  crash: number;
  refusedBy: Record<string, number>;
  renderMarked: number;
  renderRoundTrips: number;
  renderLies: number;
  renderAsNft: number;
}

export function summarize(results: EntryResult[]): Summary {
  const s: Summary = {
    tried: results.length, nftRefuses: 0, exact: 0, refused: 0, differs: 0, crash: 0, refusedBy: {},
    renderMarked: 0, renderRoundTrips: 0, renderLies: 0, renderAsNft: 0,
  };
  for (const r of results) {
    switch (r.outcome.k) {
      case 'nft-refuses': s.nftRefuses++; break;
      case 'exact': s.exact++; break;
      case 'refused': s.refused++; s.refusedBy[r.outcome.reason] = (s.refusedBy[r.outcome.reason] ?? 0) + 1; break;
      case 'differs': s.differs++; break;
      case 'crash': s.crash++; break;
    }
    if (r.rendered !== undefined) {
      if (r.renderMarked) s.renderMarked++;
      else if (r.renderRoundTrips) s.renderRoundTrips++;
      else s.renderLies++;
      if (r.rendered === r.listed) s.renderAsNft++;
    }
  }
  return s;
}
