/**
 * Drift as nft commands, for `nfkeeper check`: what a repair would delete, add or replace, written
 * from the same diff (table.ts) the planner (plan.ts) turns into a batch.
 */
import type { NftObj, NftSet, Rule, SetElement } from '../netlink/objects.js';
import { SET_F } from '../netlink/objects.js';
import { ruleCount, ruleTextAt, type ChainConfig, type TableConfig } from '../model/desired.js';
import { objectBlock } from '../model/stateful-objects.js';
import { declarationText, elementTexts, typesOf, type SetConfig } from '../model/sets.js';
import { commentOf } from '../rules/index.js';
import type { RuleEdit } from './chain-edit.js';
import type { TableDiff } from './table.js';

/**
 * Drift as nft text, for `nfkeeper check`. Without `texts` every line is there with its sign and
 * place, but the wanted rules' texts and the element lists are left out: they are rendered from
 * expressions and bytes, most of the work in a big plan, and a terminal's summary only counts the
 * lines.
 */
export function renderDrift(want: TableConfig, diff: TableDiff, texts = true): string[] {
  const out: string[] = [];
  // By its place, not c.rules: a chain made late (an install from the compile cache) is not made for its texts where they were kept.
  const textOf: TextOf = texts ? ruleTextAt : () => '';
  const elementsOf = texts ? elementsText : () => '';
  for (const x of diff.drift) {
    out.push(`# ${x.family} ${x.table}: ${x.detail}`);
    if (x.kind === 'table-missing' || x.kind === 'table-unprotected' || x.kind === 'table-changed') {
      if (x.kind === 'table-changed') out.push(`- delete table ${want.family} ${want.name}`);
      const comment = commentOf(want.userdata);
      out.push(`+ add table ${want.family} ${want.name}${comment !== undefined ? ` { comment ${JSON.stringify(comment)}; }` : ''}`);
      for (const o of want.objects ?? []) out.push(objectText(want, o.obj));
      for (const s of want.sets ?? []) out.push(...setText(want, s, elementsOf));
      for (const c of want.chains) out.push(...chainText(want, c, textOf));
    } else if (x.kind === 'set-missing' || x.kind === 'set-changed') {
      const s = want.sets!.find((y) => y.name === x.set)!;
      if (x.kind === 'set-changed') out.push(`- delete ${s.map ? 'map' : 'set'} ${want.family} ${want.name} ${s.name}`);
      out.push(...setText(want, s, elementsOf));
    } else if (x.kind === 'elements-differ') {
      const s = want.sets!.find((y) => y.name === x.set)!;
      const ops = diff.elements.get(s.name);
      if (ops && ops.delete.length) out.push(`- delete element ${want.family} ${want.name} ${s.name} { ${elementsOf(s.set, ops.delete)} }`);
      if (ops && ops.add.length) out.push(`+ add element ${want.family} ${want.name} ${s.name} { ${elementsOf(s.set, ops.add)} }`);
    } else if (x.kind === 'set-extra') {
      out.push(`- delete ${x.detail.startsWith('map ') ? 'map' : 'set'} ${want.family} ${want.name} ${x.set}`);
    } else if (x.kind === 'chain-missing' || x.kind === 'chain-changed') {
      out.push(...chainText(want, want.chains.find((c) => c.name === x.chain)!, textOf));
    } else if (x.kind === 'rules-differ') {
      const c = want.chains.find((ch) => ch.name === x.chain)!;
      const e = diff.chains.get(c.name)?.edit;
      if (e && !e.edit.rewrite) {
        out.push(...editText(want, c, x.actual ?? [], e.rules, e.edit, textOf));
        continue;
      }
      out.push(`+ flush chain ${want.family} ${want.name} ${c.name}`);
      for (const line of x.actual ?? []) out.push(`- ${line}`);
      for (let j = 0, n = ruleCount(c); j < n; j++) out.push(`+ add rule ${want.family} ${want.name} ${c.name} ${textOf(c, j)}`);
    } else if (x.kind === 'chain-extra') {
      out.push(`- delete chain ${want.family} ${want.name} ${x.chain}`);
    } else if (x.kind === 'object-missing' || x.kind === 'object-changed') {
      const o = want.objects!.find((y) => y.type === x.object!.type && y.name === x.object!.name)!;
      if (x.kind === 'object-changed') out.push(`- delete ${o.type} ${want.family} ${want.name} ${o.name}`);
      out.push(objectText(want, o.obj));
    } else if (x.kind === 'object-extra') {
      out.push(`- delete ${typeof x.object!.type === 'string' ? x.object!.type : 'object'} ${want.family} ${want.name} ${x.object!.name}`);
    }
  }
  return out;
}

/** A chain's edit as nft commands; a rule placed after one added just before it says so. */
function editText(t: TableConfig, c: ChainConfig, actual: readonly string[], rules: readonly Rule[], edit: RuleEdit,
  textOf: TextOf): string[] {
  const at = `${t.family} ${t.name} ${c.name}`;
  return edit.steps.map((x) => {
    if (x.op === 'delete') return `- delete rule ${at} handle ${rules[x.have]!.handle}  # ${actual[x.have] ?? ''}`;
    const text = textOf(c, x.want);
    if (x.op === 'replace') return `~ replace rule ${at} handle ${rules[x.have]!.handle} ${text}  # was ${actual[x.have] ?? ''}`;
    if (!x.after) return `+ insert rule ${at} ${text}`;
    if (x.after.kind === 'kept') return `+ add rule ${at} position ${rules[x.after.have]!.handle} ${text}`;
    return `+ add rule ${at} ${text}  # after rule ${x.after.want + 1} of the chain, added above`;
  });
}

/** An object as an `add` command: `add quota ip t q { over 100 mbytes }`. */
function objectText(t: TableConfig, o: NftObj): string {
  const block = objectBlock(o, t.family) ?? `${String(o.type)} ${o.name}`;
  const sp = block.indexOf(` ${o.name} `);
  return `+ add ${block.slice(0, sp)} ${t.family} ${t.name}${block.slice(sp)}`;
}

/** A set's declaration and elements as `add set|map` and `add element` commands. */
function setText(t: TableConfig, s: SetConfig, elementsOf: typeof elementsText): string[] {
  const what = s.map ? 'map' : 'set';
  const out = [`+ add ${what} ${t.family} ${t.name} ${s.name} ${declarationText({ ...s.decl, elements: undefined })}`];
  if (s.elements.length > 0) out.push(`+ add element ${t.family} ${t.name} ${s.name} { ${elementsOf(s.set, s.elements)} }`);
  return out;
}

/** Elements as nft texts; an rbtree piece that is no whole interval is shown as its raw keys. */
function elementsText(set: NftSet, elements: readonly SetElement[]): string {
  const types = typesOf(set);
  const texts = types ? elementTexts(types.key, types.data, (set.flags & SET_F.INTERVAL) !== 0, elements, false, set.family) : undefined;
  if (texts) return texts.join(', ');
  return elements.map((e) => `# key ${e.key}${e.keyEnd ? ` key-end ${e.keyEnd}` : ''}${(e.flags ?? 0) & 1 ? ' (interval end)' : ''}`).join(', ');
}

function chainText(t: TableConfig, c: ChainConfig, textOf: TextOf): string[] {
  const comment = commentOf(c.userdata);
  const spec = c.base || comment !== undefined
    ? ` {${c.base ? ` type ${c.base.type} hook ${c.base.hook} priority ${c.base.priority}; policy ${c.base.policy};` : ''}` +
      `${comment !== undefined ? ` comment ${JSON.stringify(comment)};` : ''} }` : '';
  const out = [`+ add chain ${t.family} ${t.name} ${c.name}${spec}`];
  for (let j = 0, n = ruleCount(c); j < n; j++) out.push(`+ add rule ${t.family} ${t.name} ${c.name} ${textOf(c, j)}`);
  return out;
}

/** Rule `j`'s text of chain `c` (ruleTextAt), or nothing (a summary's lines). */
type TextOf = (c: ChainConfig, j: number) => string;


