/**
 * An owner: an id and the chains and rules it registered over the control
 * API. This file validates ids and request bodies and compiles them into the
 * keeper's desired state, tagged so that the kernel alone says who owns
 * what: every chain is named `o/<id>/<name>` and every rule carries the
 * comment `nfkeeper-owner=<id>` (without quotes, so `nft list ruleset` output
 * loads again with `nft -f`; foreign GC can read it as a tag pattern).
 * Nothing here touches the kernel; every refusal says where and why.
 */
import * as z from 'zod';
import type { ChainConfig, TableConfig } from '../model/desired.js';
import { NfkeeperError, RuleSyntaxError } from '../base/errors.js';
import type { ChainType, Hook } from '../netlink/objects.js';
import { checkRulePlacement, commentOf, tagMatcher, commentUserdata, compileRule, compiledRule, type CompiledRule } from '../rules/index.js';
import { forEachJump, renameJumps } from '../rules/placement.js';
import { compactChains } from '../model/compact.js';
import type { OwnersConfig } from '../config/owners.js';

/**
 * Owner ids: 1-64 characters of letters, digits, `_ . : -`, starting with a letter or digit. A
 * subset of foreign GC's ids (so an owner can be a live id), short enough for chain names, and
 * free of quotes, spaces, `/` and anything else that could smuggle text into the tag comment or
 * end the chain name's id part early.
 */
export const OWNER_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
export const OWNER_ID_RULE = 'an owner id is 1-64 characters: letters, digits, _ . : - (starting with a letter or digit)';
/** An owner's own chain names (the part after the id). */
const LOCAL_CHAIN_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/** Every owner rule's comment, as a foreign-GC tag pattern. */
export const OWNER_TAG = 'nfkeeper-owner=<id>';
const TAG = tagMatcher({ tag: OWNER_TAG });

/** Limits that keep one request from growing the ruleset without bound. */
export const LIMITS = { chains: 256, rulesPerChain: 1000, ruleText: 4096 } as const;

export function ownerTag(id: string): string {
  return OWNER_TAG.replace('<id>', id);
}

/** The kernel name of an owner's chain. Config chain names cannot hold '/', so the two never collide. */
export function ownerChainName(id: string, local: string): string {
  return `o/${id}/${local}`;
}

const CHAIN_NAME_RE = /^o\/([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})\/([A-Za-z0-9][A-Za-z0-9_.-]{0,63})$/;

/** The owner id and local name of a kernel chain name, or undefined when it is not an owner chain. */
export function parseOwnerChain(name: string): { id: string; local: string } | undefined {
  const m = CHAIN_NAME_RE.exec(name);
  return m ? { id: m[1]!, local: m[2]! } : undefined;
}

/** The owner id a rule is tagged with (its userdata comment), or undefined. */
export function ownerOfRule(rule: { userdata?: string }): string | undefined {
  const u = rule.userdata;
  if (u === undefined) return undefined;
  // Owned GC reads the tag of every rule in a chain that differs (the dispatch chain holds one
  // rule per owner); an owner's rules share one userdata string, so parse each string once.
  let id = ownerTags.get(u);
  if (id === undefined && !ownerTags.has(u)) {
    const c = commentOf(u);
    id = c === undefined ? undefined : TAG.match(c);
    if (ownerTags.size >= 65_536) ownerTags.clear();
    ownerTags.set(u, id);
  }
  return id;
}
const ownerTags = new Map<string, string | undefined>();

/** A refused owner request or state entry: `path` says where in the body ("chains[0].rules[1]"). */
export class OwnerSpecError extends NfkeeperError {
  override name = 'OwnerSpecError';
  constructor(readonly path: string, readonly reason: string) {
    super(path ? `${path}: ${reason}` : reason);
  }
}

const RULE = z.string().min(1, 'a rule cannot be empty').max(LIMITS.ruleText, `a rule is at most ${LIMITS.ruleText} characters`);
const RULES = z.array(RULE).max(LIMITS.rulesPerChain, `at most ${LIMITS.rulesPerChain} rules per chain`);

export const OWNER_SPEC = z.strictObject({
  /** The owner's regular chains, in the config's chain shape (no type, hook or priority). */
  chains: z.array(z.strictObject({
    name: z.string().regex(LOCAL_CHAIN_RE, 'a chain name is 1-64 characters: letters, digits, _ . - (starting with a letter or digit)'),
    rules: RULES.default([]),
  })).max(LIMITS.chains, `at most ${LIMITS.chains} chains`).default([]),
  /** Rules added to dispatch chains (after the config's rules), usually jumps into the owner's chains. */
  jumps: z.record(z.string(), RULES).default({}),
});

export type OwnerSpec = z.output<typeof OWNER_SPEC>;

const isPlain = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === Object.prototype;
function isRules(v: unknown): v is string[] {
  if (!Array.isArray(v) || v.length > LIMITS.rulesPerChain) return false;
  // Indexed, not every(): that skips the holes of a sparse array, which zod refuses.
  for (let i = 0; i < v.length; i++) {
    const r: unknown = v[i];
    if (typeof r !== 'string' || r.length < 1 || r.length > LIMITS.ruleText) return false;
  }
  return true;
}

/**
 * OWNER_SPEC's output for a body it accepts, checked with plain code (zod's parse was a fifth of
 * compiling an owner); undefined for anything else, which OWNER_SPEC then parses, so every refusal
 * keeps zod's message and path. test/owners/spec-parse.test.ts holds the two to the same answers.
 */
export function plainOwnerSpec(body: unknown): OwnerSpec | undefined {
  if (!isPlain(body)) return undefined;
  for (const k in body) if (k !== 'chains' && k !== 'jumps') return undefined;
  const { chains: cs, jumps: js } = body;
  const chains: OwnerSpec['chains'] = [];
  if (cs !== undefined) {
    if (!Array.isArray(cs) || cs.length > LIMITS.chains) return undefined;
    for (const c of cs) {
      if (!isPlain(c)) return undefined;
      for (const k in c) if (k !== 'name' && k !== 'rules') return undefined;
      const { name, rules } = c;
      if (typeof name !== 'string' || !LOCAL_CHAIN_RE.test(name)) return undefined;
      if (rules !== undefined && !isRules(rules)) return undefined;
      chains.push({ name, rules: rules === undefined ? [] : [...rules] });
    }
  }
  const jumps: OwnerSpec['jumps'] = {};
  if (js !== undefined) {
    if (!isPlain(js)) return undefined;
    for (const k in js) {
      const rules = js[k];
      // (zod assigns '__proto__' as the prototype: left to it, to answer alike)
      if (k === '__proto__' || !isRules(rules)) return undefined;
      jumps[k] = [...rules];
    }
  }
  return { chains, jumps };
}

export interface Owner {
  id: string;
  /** The request as validated; what the state file keeps and GET returns. */
  spec: OwnerSpec;
  /** Kernel chain names, compiled rules carrying the tag. */
  chains: ChainConfig[];
  /** Rules for each dispatch chain, in order. */
  jumps: Map<string, ChainConfig['rules']>;
  /** Rules in all, jumps included. */
  rules: number;
  /** The size of the request as the state file keeps it (UTF-8 bytes of specKey): what owners.limits.bytes counts. */
  bytes: number;
}

/** Set ids of owners' anonymous sets start above any the config uses, so one batch can carry both. */
let nextSetId = 1 << 20;

export function validateOwnerId(id: unknown): string {
  if (typeof id !== 'string' || !OWNER_ID_RE.test(id)) {
    const shown = typeof id === 'string' ? JSON.stringify(id.slice(0, 80)) : String(id);
    throw new OwnerSpecError('id', `${shown} is not a valid owner id (${OWNER_ID_RULE})`);
  }
  return id;
}

/** Canonical JSON of a validated spec: equal specs, equal text (idempotent PUT). */
export function specKey(spec: OwnerSpec): string {
  return JSON.stringify({
    chains: spec.chains.map((c) => ({ name: c.name, rules: c.rules })),
    jumps: Object.keys(spec.jumps).sort().map((k) => [k, spec.jumps[k]]),
  });
}

/**
 * Validates and compiles one owner against the owners section and its table.
 * Throws OwnerSpecError, naming the place in the body.
 */
export function compileOwner(idIn: unknown, body: unknown, owners: OwnersConfig, table: TableConfig): Owner {
  const id = validateOwnerId(idIn);
  let spec = plainOwnerSpec(body);
  if (spec === undefined) {
    const parsed = OWNER_SPEC.safeParse(body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new OwnerSpecError(pathText(issue.path as (string | number)[]), issue.message);
    }
    spec = parsed.data;
  }
  const local = new Set<string>();
  spec.chains.forEach((c, i) => {
    if (local.has(c.name)) throw new OwnerSpecError(`chains[${i}].name`, `chain ${c.name} is listed twice`);
    local.add(c.name);
  });
  const dispatch = new Map<string, ChainConfig>();
  for (const name of owners.dispatch) dispatch.set(name, table.chains.find((c) => c.name === name)!);
  for (const name of Object.keys(spec.jumps)) {
    if (!dispatch.has(name)) {
      throw new OwnerSpecError(`jumps.${name}`, `${JSON.stringify(name.slice(0, 80))} is not a dispatch chain (${owners.dispatch.join(', ')})`);
    }
  }
  const tag = commentUserdata(ownerTag(id));
  const compile = (text: string, kernelChain: string, path: string) => {
    let c: CompiledRule;
    try {
      c = compileRule(text, { family: owners.family, table: owners.table, chain: kernelChain, setIdBase: nextSetId });
    } catch (e) {
      if (e instanceof RuleSyntaxError) throw new OwnerSpecError(path, e.message);
      throw e;
    }
    nextSetId += c.sets.length;
    // (their jumps are renamed to the owner's kernel chains, and an owner's chains are its own)
    if (c.bound) throw new OwnerSpecError(path, 'owner rules cannot hold a chain binding (jump { … }); give the owner a chain and jump to it');
    if (c.userdata !== undefined) {
      throw new OwnerSpecError(path, `owner rules cannot carry a comment: nfkeeper tags each with ${ownerTag(id)}`);
    }
    return c;
  };
  // Which hooks reach each of the owner's chains, through the dispatch chains and its own jumps.
  const reach = new Map<string, Map<string, { hook?: Hook; type?: ChainType }>>();
  for (const name of local) reach.set(name, new Map());
  const edges: [string | undefined, string, string][] = [];  // from (undefined: a dispatch chain), to, via dispatch
  const compiledJumps = new Map<string, CompiledRule[]>();
  for (const [d, texts] of Object.entries(spec.jumps)) {
    const base = dispatch.get(d)!.base;
    compiledJumps.set(d, texts.map((text, i) => {
      const path = `jumps.${d}[${i}]`;
      const c = compile(text, d, path);
      placement(c, base?.hook, base?.type, local, path, owners.family);
      for (const t of targets(c, path)) reach.get(t)!.set(`${base?.hook}/${base?.type}`, { hook: base?.hook, type: base?.type });
      return c;
    }));
  }
  const compiledChains = spec.chains.map((ch, ci) => ch.rules.map((text, ri) => {
    const c = compile(text, ownerChainName(id, ch.name), `chains[${ci}].rules[${ri}]`);
    placement(c, undefined, undefined, local, `chains[${ci}].rules[${ri}]`, owners.family);
    for (const t of targets(c, `chains[${ci}].rules[${ri}]`)) edges.push([ch.name, t, '']);
    return c;
  }));
  checkLoops(spec, edges);
  for (let changed = true; changed;) {
    changed = false;
    for (const [from, to] of edges) {
      for (const [k, v] of reach.get(from!)!) {
        if (!reach.get(to)!.has(k)) {
          reach.get(to)!.set(k, v);
          changed = true;
        }
      }
    }
  }
  // NAT statements the kernel would refuse in the hooks that reach them, said before anything is sent.
  spec.chains.forEach((ch, ci) => compiledChains[ci]!.forEach((c, ri) => {
    for (const { hook, type } of reach.get(ch.name)!.values()) {
      if (hook !== undefined) placement(c, hook, type, local, `chains[${ci}].rules[${ri}]`, owners.family, ` (chain ${ch.name} is reached from the ${hook} hook)`);
    }
  }));

  // The canonical text (tag and kernel chain names in it) is rendered when first read, as a config
  // rule's is: a registration reads few (a drift's description), and rendering each rule twice was
  // a quarter of compiling an owner. The entry's `text` is the rule as the owner wrote it.
  // Every jump and goto (plain or in a verdict map) names one of the owner's chains (placement
  // refused anything else): each becomes the chain's kernel name.
  const finish = (c: CompiledRule, text: string): ChainConfig['rules'][number] => {
    const r = renameJumps(c, (chain) => (local.has(chain) ? ownerChainName(id, chain) : undefined));
    return { text, compiled: compiledRule(r.exprs, r.sets, owners.family, tag) };
  };
  const chains: ChainConfig[] = spec.chains.map((ch, ci) => ({ name: ownerChainName(id, ch.name),
    rules: compiledChains[ci]!.map((c, ri) => finish(c, ch.rules[ri]!)) }));
  const jumps = new Map<string, ChainConfig['rules']>();
  for (const d of owners.dispatch) {
    const list = compiledJumps.get(d);
    if (list && list.length > 0) jumps.set(d, list.map((c, i) => finish(c, spec.jumps[d]![i]!)));
  }
  // In the form the keeper keeps desired rules (frozen, expressions shared), once here rather than
  // by a walk of every owner's rules at each registration.
  compactChains([...chains, ...[...jumps.values()].map((r) => ({ rules: r }))]);
  const rules = chains.reduce((n, c) => n + c.rules.length, 0) + [...jumps.values()].reduce((n, l) => n + l.length, 0);
  return { id, spec, chains, jumps, rules, bytes: Buffer.byteLength(specKey(spec)) };
}

/** The chains a rule jumps or goes to, verdict maps included; a named verdict map is not the owner's to use. */
function targets(c: CompiledRule, path: string): string[] {
  const out: string[] = [];
  forEachJump(c, (_, chain) => out.push(chain), (set) => {
    throw new OwnerSpecError(path, `verdict map @${set} is not the owner's: an owner jumps only to its own chains`);
  });
  return out;
}

function placement(c: CompiledRule, hook: Hook | undefined, type: ChainType | undefined, local: ReadonlySet<string>,
  path: string, family: OwnersConfig['family'], why = ''): void {
  const problem = checkRulePlacement(c, hook, type, local, 'this owner', family);
  if (problem) throw new OwnerSpecError(path, problem + why);
}

/** The kernel refuses jump loops (ELOOP); say which chain closes one instead. */
function checkLoops(spec: OwnerSpec, edges: [string | undefined, string, string][]): void {
  const next = new Map<string, string[]>();
  for (const [from, to] of edges) next.set(from!, [...(next.get(from!) ?? []), to]);
  const state = new Map<string, 1 | 2>();
  const visit = (n: string): void => {
    state.set(n, 1);
    for (const t of next.get(n) ?? []) {
      if (state.get(t) === 1) {
        const ci = spec.chains.findIndex((c) => c.name === n);
        throw new OwnerSpecError(`chains[${ci}]`, `chain ${n} jumps to ${t}, which leads back to it: the kernel refuses loops`);
      }
      if (!state.has(t)) visit(t);
    }
    state.set(n, 2);
  };
  for (const c of spec.chains) if (!state.has(c.name)) visit(c.name);
}

function pathText(path: (string | number)[]): string {
  let s = '';
  for (const p of path) s += typeof p === 'number' ? `[${p}]` : s ? `.${p}` : p;
  return s || 'body';
}
