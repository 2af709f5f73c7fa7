/**
 * `nfkeeper export`: a table as the kernel holds it, in either config form,
 * for a user migrating from a hand-kept ruleset. The nft form is what
 * `nft list table` prints (rules in nfkeeper's canonical text, which reads
 * back to the same kernel state); the YAML form is the config's own shape.
 * What the rule language cannot express yet is printed marked, never
 * dropped, and reported, so an export is never silently partial.
 */
import { stringify } from 'yaml';
import type { Family } from '../netlink/expr.js';
import type { NftSet, SetElement } from '../netlink/objects.js';
import { SET_F, TABLE_F, indexByChain, type Chain, type Rule, type Table } from '../netlink/objects.js';
import type { NftSocket } from '../netlink/socket.js';
import { commentOf, renderRule, setResolver, type InterfaceResolver } from '../rules/index.js';
import { kernelSetDecl, type RawSet } from '../model/sets.js';
import { rawObjectOf, type RawObj } from '../model/stateful-objects.js';

export type ExportFormat = 'nft' | 'yaml';

export interface ExportedChain {
  name: string;
  /** NFTA_CHAIN_USERDATA's comment. */
  comment?: string;
  base?: { type: string; hook: string; priority: number; policy: 'accept' | 'drop' };
  rules: string[];
  /** Where the nft form writes a rule otherwise than `rules` (a chain binding over lines, as nft lists it): by index. */
  listed?: (string | undefined)[];
}

export interface ExportedTable {
  family: Family;
  name: string;
  /** NFTA_TABLE_USERDATA's comment. */
  comment?: string;
  /** `dormant` when the table is (owner and persist are protect mode's, not written). */
  flags?: string[];
  /** Named sets and maps, in the kernel's order. */
  sets: { decl: RawSet; map: boolean; wrap?: boolean }[];
  /** Named stateful objects, in the kernel's order, without their state. */
  objects?: RawObj[];
  chains: ExportedChain[];
  /** What the config cannot hold (named sets, rules it cannot render), in words. */
  unsupported: string[];
}

type Reader = Pick<NftSocket, 'getTable' | 'listChains' | 'listRules' | 'listSets' | 'listElements'> & Partial<Pick<NftSocket, 'listObjs'>>;

/** Reads one table; undefined when it does not exist. */
export async function readTable(sock: Reader, family: Family, name: string,
  options: { interfaces?: InterfaceResolver; counters?: boolean } = {}): Promise<ExportedTable | undefined> {
  const table = await sock.getTable(family, name);
  if (!table) return undefined;
  const [chains, rules, sets, objs] = await Promise.all([
    sock.listChains({ family, table: name }), sock.listRules({ family, table: name }), sock.listSets({ family, table: name }),
    sock.listObjs?.({ family, table: name }) ?? [],
  ]);
  const withElements: { set: NftSet; elements: SetElement[] }[] = await Promise.all(sets.map(async (set) => ({
    set, elements: await sock.listElements({ family, table: name, set: set.name }),
  })));
  const resolve = setResolver(withElements);
  const unsupported: string[] = [];
  const out: ExportedTable = { family, name, sets: [], chains: [], unsupported };
  if (table.flags & TABLE_F.DORMANT) out.flags = ['dormant'];
  unsupported.push(...unreadTableParts(table, chains.length, sets.filter((x) => !(x.flags & SET_F.ANONYMOUS)).length, objs.length));
  const tableComment = commentOf(table.userdata);
  if (tableComment !== undefined) out.comment = tableComment;
  else if (table.userdata) unsupported.push(`table userdata other than a comment: ${table.userdata}`);
  for (const o of objs) {
    const raw = rawObjectOf(o, family);
    if (raw) (out.objects ??= []).push(raw);
    else unsupported.push(`${typeof o.type === 'string' ? o.type : `object of type ${o.type}`} ${o.name}: nfkeeper cannot write it`);
  }
  for (const { set, elements } of withElements) {
    if (set.flags & SET_F.ANONYMOUS) continue;
    const d = kernelSetDecl(set, elements);
    if ('unsupported' in d) unsupported.push(d.unsupported);
    // nft lists one element a line when the key is longer than 32 bits (addresses, names, concatenations).
    else out.sets.push({ ...d, wrap: set.keyLen > 4 });
  }
  // (bound chains, `jump { … }`, go with the rules that jump to them: written inline, as nft lists them)
  const view = { chains: new Map<string, Chain>(), rules: new Map<string, Rule[]>() };
  indexByChain(chains, rules, view);
  const byChain = new Map<string, string[]>();
  const listedBy = new Map<string, (string | undefined)[]>();
  for (const [chain, list] of view.rules) {
    byChain.set(chain, list.map((r, i) => {
      const text = renderRule(r, family, resolve, options);
      if (text.includes('<unsupported')) unsupported.push(`chain ${r.chain}, rule handle ${r.handle}: ${text}`);
      if (r.bound) {
        let l = listedBy.get(chain);
        if (!l) listedBy.set(chain, l = []);
        l[i] = renderRule(r, family, resolve, { ...options, bindingIndent: '\t\t' });
      }
      return text;
    }));
  }
  for (const c of view.chains.values()) {
    if (c.hook !== undefined && !['prerouting', 'input', 'forward', 'output', 'postrouting'].includes(c.hook)) {
      unsupported.push(`chain ${c.name}: hook ${c.hook} is not supported`);
    }
    const comment = commentOf(c.userdata);
    if (c.userdata && comment === undefined) unsupported.push(`chain ${c.name}: userdata other than a comment: ${c.userdata}`);
    out.chains.push({
      name: c.name,
      ...(comment !== undefined ? { comment } : {}),
      base: c.hook !== undefined
        ? { type: c.type ?? 'filter', hook: c.hook, priority: c.priority ?? 0, policy: c.policy ?? 'accept' } : undefined,
      rules: byChain.get(c.name) ?? [],
      ...(listedBy.has(c.name) ? { listed: listedBy.get(c.name)! } : {}),
    });
  }
  return out;
}

/**
 * What the export does not read of a table, so that it is named rather than dropped: flags it
 * does not know (dormant is written; owner and persist are protect mode's), and what the table's
 * use count holds beyond its chains, named sets (the kernel does not count an anonymous set
 * bound to its rule there) and the stateful objects read: flowtables, which are not read.
 */
export function unreadTableParts(table: Pick<Table, 'flags' | 'use'>, chains: number, namedSets: number, objects: number): string[] {
  const out: string[] = [];
  const other = table.flags & ~(TABLE_F.DORMANT | TABLE_F.OWNER | TABLE_F.PERSIST);
  if (other) out.push(`table flags 0x${other.toString(16)}`);
  const unread = (table.use ?? 0) - chains - namedSets - objects;
  if (unread > 0) out.push(`${unread} flowtable${unread === 1 ? '' : 's'} or other object${unread === 1 ? '' : 's'} nfkeeper does not read (nft list table shows them)`);
  return out;
}

// nft 1.0.6 names a standard priority (± up to 10) where that name applies to the hook.
const STD_PRIORITIES: [string, number, string[] | undefined][] = [
  ['raw', -300, undefined], ['mangle', -150, undefined], ['dstnat', -100, ['prerouting']],
  ['filter', 0, undefined], ['security', 50, undefined], ['srcnat', 100, ['postrouting']],
];

/** A base chain's priority as `nft list` prints it: `srcnat`, `filter + 10`, `-90`. */
export function priorityText(hook: string, priority: number): string {
  for (const [name, value, hooks] of STD_PRIORITIES) {
    if (hooks && !hooks.includes(hook)) continue;
    const d = priority - value;
    if (Math.abs(d) <= 10) return d === 0 ? name : `${name} ${d > 0 ? '+' : '-'} ${Math.abs(d)}`;
  }
  return String(priority);
}

/** The nft block form, as `nft list table` prints it. */
export function tableToNft(t: ExportedTable): string {
  const lines = [`table ${t.family} ${t.name} {`];
  if (t.flags?.length) lines.push(`\tflags ${t.flags.join(',')}`);
  if (t.comment !== undefined) lines.push(`\tcomment "${t.comment}"`);
  (t.objects ?? []).forEach((o, i) => {
    if (i > 0) lines.push('');
    lines.push(...objectLines(o));
  });
  const hasObjects = (t.objects?.length ?? 0) > 0;
  t.sets.forEach((s, i) => {
    if (i > 0 || hasObjects) lines.push('');
    lines.push(...setLines(s.decl, s.map, s.wrap));
  });
  t.chains.forEach((c: ExportedChain, i) => {
    if (i > 0 || t.sets.length > 0 || hasObjects) lines.push('');
    lines.push(`\tchain ${c.name} {`);
    if (c.comment !== undefined) lines.push(`\t\tcomment "${c.comment}"`);
    if (c.base) {
      lines.push(`\t\ttype ${c.base.type} hook ${c.base.hook} priority ${priorityText(c.base.hook, c.base.priority)}; policy ${c.base.policy};`);
    }
    c.rules.forEach((r, i) => lines.push(`\t\t${r.includes('<unsupported') ? `# ${r}` : c.listed?.[i] ?? r}`));
    lines.push('\t}');
  });
  lines.push('}');
  return lines.join('\n') + '\n';
}

/** An object's block as `nft list` prints it (one statement a line), without its state. */
export function objectLines(o: RawObj): string[] {
  const out = [`\t${o.type} ${o.name} {`];
  if (o.comment !== undefined) out.push(`\t\tcomment ${JSON.stringify(o.comment)}`);
  for (const part of (o.spec ?? '').split(';').map((x) => x.trim()).filter(Boolean)) out.push(`\t\t${part}`);
  out.push('\t}');
  return out;
}

/** A set's block as `nft list` prints it. */
export function setLines(d: RawSet, map: boolean, wrap = false): string[] {
  const out = [`\t${map ? 'map' : 'set'} ${d.name} {`];
  const p = (x: string) => out.push(`\t\t${x}`);
  if (d.type !== undefined) p(`type ${d.type}`);
  if (d.typeof !== undefined) p(`typeof ${d.typeof}`);
  if (d.policy !== undefined) p(`policy ${d.policy}`);
  if (d.size !== undefined) p(`size ${d.size}`);
  if (d.flags?.length) p(`flags ${d.flags.join(',')}`);
  if (d.statements !== undefined) p(d.statements);
  if (d.timeout !== undefined) p(`timeout ${d.timeout}`);
  if (d['gc-interval'] !== undefined) p(`gc-interval ${d['gc-interval']}`);
  if (d['auto-merge']) p('auto-merge');
  if (d.comment !== undefined) p(`comment "${d.comment}"`);
  if (d.elements?.length) p(`elements = { ${d.elements.join(wrap ? ',\n\t\t\t     ' : ', ')} }`);
  out.push('\t}');
  return out;
}

/** The YAML config form (a document with one table). */
export function tablesToYaml(tables: ExportedTable[]): string {
  return stringify({
    tables: tables.map((t) => ({
      family: t.family,
      name: t.name,
      ...(t.flags?.length ? { flags: t.flags } : {}),
      ...(t.comment !== undefined ? { comment: t.comment } : {}),
      ...(t.sets.some((x) => !x.map) ? { sets: t.sets.filter((x) => !x.map).map((x) => x.decl) } : {}),
      ...(t.sets.some((x) => x.map) ? { maps: t.sets.filter((x) => x.map).map((x) => x.decl) } : {}),
      ...(t.objects?.length ? { objects: t.objects } : {}),
      chains: t.chains.map((c) => {
        const p = c.base && priorityText(c.base.hook, c.base.priority);
        return {
          name: c.name,
          ...(c.base ? { type: c.base.type, hook: c.base.hook, priority: /^-?\d+$/.test(p!) ? Number(p) : p, policy: c.base.policy } : {}),
          ...(c.comment !== undefined ? { comment: c.comment } : {}),
          rules: c.rules.filter((r) => !r.includes('<unsupported')),
        };
      }),
    })),
  }, { lineWidth: 0 });
}
