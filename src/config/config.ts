/**
 * The desired state, from YAML. Parsing keeps source positions so every
 * error says file:line:column and why; the schema is checked with zod, and
 * every rule is compiled here, so a config that loads is one the kernel
 * will accept (modulo the kernel's own refusals, which leave it unchanged).
 */
import { NotRegularFileError, fileText, readRegularFile } from '../base/regular-file.js';
import { noteFile, noteInput, recorded } from '../base/compile-inputs.js';
import type { RuleReuse } from './rule-reuse.js';
import { CST, Lexer, LineCounter, parseDocument, isNode, isScalar, visit, type Document, type Scalar } from 'yaml';
import * as z from 'zod';
import { ConfigError, NfkeeperError } from '../base/errors.js';
import type { Family, Hex } from '../netlink/expr.js';
import type { ChainType, Hook } from '../netlink/objects.js';
import { JumpGraph, commentUserdata, compileRule, interfaceTable, RuleSyntaxError, type CompiledRule,
  type InterfaceResolver } from '../rules/index.js';
import { listLinks } from '../netlink/link.js';
import { GC_SCHEMA, type GcConfig } from './gc.js';
import { OWNERS_SCHEMA, type OwnersConfig } from './owners.js';
import { readNftFile } from './nftfile.js';
import { buildSet, SET_FLAG_WORDS, SET_SCHEMA, type RawSet, type SetConfig } from '../model/sets.js';
import { buildObject, OBJ_SCHEMA, type ObjConfig } from '../model/stateful-objects.js';
import { countRules, type ChainConfig, type TableConfig } from '../model/desired.js';
import { objectsUsed } from '../rules/objref.js';
import { NFT_KEYWORDS, NFT_OBJECT_KEYWORDS } from '../rules/keywords.js';
import { SET_F, type NftSet } from '../netlink/objects.js';

import { describeProblem, readEnvFile, substitute } from './env.js';

// nft's unquoted identifiers: letters, digits and _ . - / (owner chains are o/<id>/<name>).
const NAME_PATTERN = /^[A-Za-z0-9_.\-/]+$/;

// nft's standard priority names (ip, ip6, inet).
export const PRIORITY_NAMES: Record<string, number> = {
  raw: -300, mangle: -150, dstnat: -100, filter: 0, security: 50, srcnat: 100,
};

const PRIORITY_PATTERN = /^\s*(raw|mangle|dstnat|filter|security|srcnat)\s*(?:([+-])\s*(\d+))?\s*$/;
/** The kernel's chain types accept only some hooks and, for nat, only priorities after conntrack
 * (nft_chain_nat's hook mask and nf_nat's check; measured here: `type nat hook forward` and
 * `type nat … priority -200` fail with EOPNOTSUPP, `type route` exists only on output). Checked
 * here so `validate` says it with a position instead of the commit failing. */
const CHAIN_TYPE_HOOKS: Record<ChainType, ReadonlySet<string>> = {
  filter: new Set(['prerouting', 'input', 'forward', 'output', 'postrouting']),
  nat: new Set(['prerouting', 'input', 'output', 'postrouting']),
  route: new Set(['output']),
};
const NF_IP_PRI_CONNTRACK = -200;

export function baseChainProblem(type: ChainType, hook: string, priority: number): { at: 'hook' | 'priority'; reason: string } | undefined {
  const hooks = CHAIN_TYPE_HOOKS[type];
  if (!hooks.has(hook)) {
    return { at: 'hook', reason: `a ${type} chain cannot hook ${hook} (the kernel's ${type} type supports ${[...hooks].join(', ')})` };
  }
  if (type === 'nat' && priority <= NF_IP_PRI_CONNTRACK) {
    return { at: 'priority', reason: `a nat chain's priority must be above conntrack's (${NF_IP_PRI_CONNTRACK}); ${priority} is refused by the kernel` };
  }
  return undefined;
}

const FAMILIES = ['ip', 'ip6', 'inet'] as const;
const CHAIN_TYPES = ['filter', 'nat', 'route'] as const;
const HOOKS = ['prerouting', 'input', 'forward', 'output', 'postrouting'] as const;
const POLICIES = ['accept', 'drop'] as const;

// Where ${NAME} values come from besides the process environment (src/config/env.ts).
const ENV = z.lazy(() => z.strictObject({
  files: z.array(z.string().min(1).max(4096)).max(16).default([]),
}));

/**
 * The document's schema. Its parts are made when zod first checks a document: most documents
 * pass plainTables instead, and zod's schemas cost time and memory to make.
 */
export const CONFIG_SCHEMA = z.lazy(() => {
  const NAME = z.string().min(1).max(255).regex(NAME_PATTERN, 'use letters, digits, _ . - and / only');

  const PRIORITY = z.union([
    z.number().int().min(-2147483648).max(2147483647),
    z.string().regex(PRIORITY_PATTERN,
      'a number, or a name (raw, mangle, dstnat, filter, security, srcnat) optionally ± an offset'),
  ]);

  const CHAIN = z.strictObject({
    name: NAME,
    type: z.enum(CHAIN_TYPES).optional(),
    hook: z.enum(HOOKS).optional(),
    priority: PRIORITY.optional(),
    policy: z.enum(POLICIES).optional(),
    // NFTA_CHAIN_USERDATA, as nft writes `comment "…"` (NFTNL_UDATA_CHAIN_COMMENT).
    comment: z.string().max(128).optional(),
    rules: z.array(z.string()).default([]),
  });

  const TABLE = z.strictObject({
    family: z.enum(FAMILIES),
    name: NAME,
    protect: z.boolean().optional(),
    // NFTA_TABLE_FLAGS' dormant (owner and persist are protect's): the table's chains are unhooked.
    flags: z.array(z.literal('dormant')).max(1).optional(),
    // NFTA_TABLE_USERDATA, as nft writes `comment "…"` (NFTNL_UDATA_TABLE_COMMENT).
    comment: z.string().max(128).optional(),
    // Named sets and maps (src/config/sets.ts), in nft's own words.
    sets: z.array(SET_SCHEMA).default([]),
    maps: z.array(SET_SCHEMA).default([]),
    // Named stateful objects (src/config/stateful-objects.ts), their bodies in nft's own words.
    objects: z.array(OBJ_SCHEMA).default([]),
    chains: z.array(CHAIN).default([]),
  });

  return z.strictObject({
    env: ENV.optional(),
    tables: z.array(TABLE).default([]),
    // Garbage collection (src/config/gc.ts).
    gc: GC_SCHEMA.optional(),
    // Owners and their control socket (src/owners/).
    owners: OWNERS_SCHEMA.optional(),
  });
});

type RawTableParsed = z.infer<typeof CONFIG_SCHEMA>['tables'][number];
type RawChain = RawTableParsed['chains'][number];

export interface Config {
  file: string;
  /** The env files read for ${NAME} substitution, and the variables used. */
  env: { files: string[]; used: string[] };
  tables: TableConfig[];
  /** The validated gc section (src/gc/). */
  gc?: GcConfig;
  /** The validated owners section (src/owners/). */
  owners?: OwnersConfig;
  /** The files a .nft config's includes read (the daemon watches them with the config). */
  includes?: string[];
}

export function parsePriority(p: number | string): number {
  if (typeof p === 'number') return p;
  const m = /^\s*([a-z]+)\s*(?:([+-])\s*(\d+))?\s*$/.exec(p);
  if (!m || PRIORITY_NAMES[m[1]!] === undefined) throw new NfkeeperError(`bad priority '${p}'`);
  const base = PRIORITY_NAMES[m[1]!]!;
  return m[2] === '-' ? base - Number(m[3]) : base + Number(m[3] ?? 0);
}

export interface LoadOptions {
  /**
   * Resolves `iif`/`oif` interface names to indexes: the target namespace's
   * interfaces (namespaceInterfaces), since the kernel matches the index.
   * Without it such rules are refused.
   */
  interfaces?: InterfaceResolver;
  /** The variables ${NAME} may use besides the env files (default: process.env). */
  environment?: Readonly<Record<string, string | undefined>>;
  /**
   * Called with each rule as soon as it is compiled. The daemon and `apply` compact it there
   * (model/compact.ts: the compile's expressions then die young, not promoted with the whole
   * file's); `validate` and `check` skip that work.
   */
  compiled?: (rule: CompiledRule) => void;
  /** A .nft config's `include "NAME"` searches these directories before nft's default, /etc (nft's `-I`). */
  includePath?: readonly string[];
  /**
   * The daemon's: the rules the previous load compiled, each taken instead of compiled again where
   * its text and compile context are as they were, and what this load's compiles depended on, for
   * the next (src/config/rule-reuse.ts).
   */
  reuse?: RuleReuse;
}

/** A config file larger than this is refused before it is parsed. */
export const MAX_CONFIG_BYTES = 32 << 20;
/** Rules in one config at most (the bench's largest is 100,000). */
export const MAX_CONFIG_RULES = 250_000;

/**
 * Reads and validates a config file: nft's own syntax if it ends in .nft, else YAML.
 * Throws ConfigError, whose `all` holds every error found.
 */
export function loadConfig(file: string, options: LoadOptions = {}): Config {
  if (options.interfaces) options = { ...options, interfaces: notedInterfaces(options.interfaces) };
  let text: string;
  try {
    // A regular file only (a FIFO would block the daemon's loop in open, /dev/zero never end).
    const bytes = readRegularFile(file, MAX_CONFIG_BYTES);
    noteFile(file, bytes);
    text = fileText(bytes);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    if (e instanceof NotRegularFileError) {
      throw new ConfigError(file, 1, 1, e.size !== undefined ? `the file is ${e.size} bytes, more than the ${MAX_CONFIG_BYTES} a config may have`
        : e.kind === 'a directory' ? 'cannot read: it is a directory, not a config file' : `cannot read: ${e.message}`);
    }
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : (e as Error).message;
    throw new ConfigError(file, 1, 1, `cannot read: ${why}`);
  }
  return file.endsWith('.nft') ? parseNftConfig(text, file, options) : parseConfig(text, file, options);
}

/** `interfaces`, each answer noted as an input of the compile (src/base/compile-inputs.ts). */
function notedInterfaces(interfaces: InterfaceResolver): InterfaceResolver {
  return {
    indexOf: (name) => {
      const index = interfaces.indexOf(name);
      noteInput(() => ({ kind: 'link', name, index: index ?? null }));
      return index;
    },
    nameOf: (index) => {
      const name = interfaces.nameOf(index);
      noteInput(() => ({ kind: 'linkName', index, name: name ?? null }));
      return name;
    },
  };
}

/** The first of `errors`, carrying them all. */
function errorsOf(errors: ConfigError[]): ConfigError {
  const first = errors[0]!;
  first.all = errors;
  return first;
}

function checkSize(text: string, file: string): void {
  if (text.length > MAX_CONFIG_BYTES) throw new ConfigError(file, 1, 1, `the config is longer than ${MAX_CONFIG_BYTES} bytes`);
}

/** Where a node of the raw document was written; `innerColumn` is a column inside a rule's text. */
type PositionOf = (path: (string | number)[], innerColumn?: number) => { line: number; col: number; file?: string };

/**
 * Where the raw document's nodes were written. `pos` is for errors (for YAML it parses the text
 * again the first time); `order` sorts a table's sets and maps in the order they were written, on
 * every load, so it reads no position there.
 */
interface Positions {
  pos: PositionOf;
  order(path: (string | number)[]): number;
}

/** What ${NAME} substitution did to a document (YAML only; an nft file has none). */
interface Substitutions {
  files: string[];
  used: ReadonlySet<string>;
  /** The original text of a value that a substitution changed. */
  originalAt(path: (string | number)[]): string | undefined;
}

const NO_SUBSTITUTIONS: Substitutions = { files: [], used: new Set(), originalAt: () => undefined };

/**
 * Validates YAML config text; `file` names it in errors. Throws ConfigError.
 *
 * The YAML document (and its parse tree) is dropped before the rules are compiled: with a big file
 * both were much of the start-up's peak. Positions
 * and the texts before substitution are needed for an error only: the first error parses the text
 * again (the same parse, the same variables) and reads them there, as exact as before.
 */
export function parseConfig(text: string, file = '<config>', options: LoadOptions = {}): Config {
  checkSize(text, file);
  const environment = options.environment ?? process.env;
  const read = readElided(text, file, environment) ?? readYaml(text, file, environment);
  let full: ReturnType<typeof reparse> | undefined;
  const again = () => (full ??= reparse(text, file, read.vars, read.sources));
  return buildConfig(read.raw, file, {
    pos: (path, inner) => positionOf(again().doc, again().lines, path, inner),
    order: (path) => read.order.get(path.join('\0')) ?? 0,
  }, options, {
    files: read.files, used: read.used, originalAt: (path) => again().substituted.get(again().doc.getIn(path, true) as Scalar),
  });
}

/** What a YAML text's read leaves for buildConfig: the plain tree, and no reference to the document. */
interface YamlRead {
  raw: unknown;
  files: string[];
  used: ReadonlySet<string>;
  /** The variables ${NAME} took their values from (for a parse again on an error: the same values). */
  vars: ReadonlyMap<string, string>;
  sources: string;
  /** Where each table's sets and maps start (an offset; their order, sets and maps mixed, is the file's). */
  order: ReadonlyMap<string, number>;
}

const YAML_OPTIONS = { prettyErrors: false, uniqueKeys: true } as const;

/** Parses `text` (the config or its elided form, elideRuns), substitutes ${NAME}, and gives the plain tree. */
function readYaml(text: string, file: string, environment: Readonly<Record<string, string | undefined>>): YamlRead {
  const lines = new LineCounter();
  const doc = parseDocument(text, { ...YAML_OPTIONS, lineCounter: lines });
  const at = (offset: number) => lines.linePos(offset);
  if (doc.errors.length > 0) {
    throw errorsOf(doc.errors.map((err) => {
      const pos = at(err.pos[0]);
      return new ConfigError(file, pos.line, pos.col, err.message.split('\n')[0]!);
    }));
  }
  const { files, vars, sources } = variablesOf(doc, lines, file, environment);
  const { used } = substituteVariables(doc, text, lines, file, vars, sources, environment);
  let raw: unknown;
  try {
    raw = doc.toJS() ?? {};
  } catch (e) {
    // An alias without its anchor, or too many aliases (a billion laughs):
    // yaml throws a ReferenceError here, found by test/config/property.test.ts.
    const pos = at(firstAliasProblem(doc) ?? 0);
    throw new ConfigError(file, pos.line, pos.col, (e as Error).message.split('\n')[0]!);
  }
  return { raw, files, used, vars, sources, order: setsOrder(doc, raw) };
}

/** The document of `text` again, substituted with the variables of its first read, for an error's position and original text. */
function reparse(text: string, file: string, vars: ReadonlyMap<string, string>, sources: string) {
  const lines = new LineCounter();
  const doc = parseDocument(text, { ...YAML_OPTIONS, lineCounter: lines });
  const { substituted } = substituteVariables(doc, text, lines, file, vars, sources);
  return { doc, lines, substituted };
}

/**
 * The start of each table's sets and maps in the document (positionOf's node, as an offset), keyed
 * by path: buildSets puts them in this order without a position read on the success path.
 */
function setsOrder(doc: Document, raw: unknown): Map<string, number> {
  const order = new Map<string, number>();
  const tables = (raw as { tables?: unknown } | null)?.tables;
  if (!Array.isArray(tables)) return order;
  tables.forEach((t: unknown, ti) => {
    for (const kind of ['sets', 'maps']) {
      const list = (t as Record<string, unknown> | null)?.[kind];
      if (!Array.isArray(list)) continue;
      for (let si = 0; si < list.length; si++) {
        const path = ['tables', ti, kind, si];
        order.set(path.join('\0'), offsetOf(doc, path));
      }
    }
  });
  return order;
}

/**
 * A big file read with its long runs of plain one-line list items (a chain's rules) left out of the
 * YAML parse (elideRuns) and put back into the plain tree; undefined when the file has no such runs
 * or anything in that read fails (then readYaml reads the whole file and says exactly what).
 */
function readElided(text: string, file: string, environment: Readonly<Record<string, string | undefined>>): YamlRead | undefined {
  const elided = elideRuns(text);
  if (!elided) return undefined;
  try {
    const read = readYaml(elided.text, file, environment);
    return restoreRuns(read.raw, elided.runs) ? read : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Validates an nft file (block or command form, src/config/nftfile.ts): each
 * table in it is an owned table. Throws ConfigError.
 */
export function parseNftConfig(text: string, file = '<config>', options: LoadOptions = {}): Config {
  checkSize(text, file);
  const nft = readNftFile(text, file, { includePath: options.includePath, maxBytes: MAX_CONFIG_BYTES });
  const pos: PositionOf = (path, inner) => nft.positionOf(path, inner);
  const order = (path: (string | number)[]) => nft.offsetOf(path);
  const config = buildConfig(nft.raw, file, { pos, order }, options, NO_SUBSTITUTIONS);
  if (nft.files.length > 0) config.includes = nft.files;
  return config;
}

/**
 * The schema, the rules and the cross-references, whichever syntax the document came from.
 * Every table, chain and rule is checked; the errors are thrown together (ConfigError.all).
 */
function buildConfig(raw: unknown, file: string, where: Positions, options: LoadOptions, env: Substitutions): Config {
  const { pos } = where;
  const plain = plainTables(raw);
  const parsed = plain ? { success: true as const, data: plain, error: undefined } : CONFIG_SCHEMA.safeParse(raw);
  if (!parsed.success) {
    throw errorsOf(parsed.error.issues.map((issue) => {
      const p = pos(issue.path as (string | number)[]);
      const where = issue.path.length ? `${issue.path.join('.')}: ` : '';
      return new ConfigError(p.file ?? file, p.line, p.col, `${where}${issue.message}`);
    }));
  }
  const ruleCount = countRules(parsed.data.tables);
  if (ruleCount > MAX_CONFIG_RULES) {
    const p = pos(['tables']);
    throw new ConfigError(p.file ?? file, p.line, p.col, `${ruleCount} rules; a config holds at most ${MAX_CONFIG_RULES}`);
  }

  const errors: ConfigError[] = [];
  const fail = (p: { line: number; col: number; file?: string }, reason: string) => errors.push(new ConfigError(p.file ?? file, p.line, p.col, reason));
  const seenTables = new Set<string>();
  let setId = 1;
  // bound chains' batch ids (`jump { … }`), likewise unique in the config
  let chainId = 1;
  const tables: TableConfig[] = parsed.data.tables.map((t, ti) => {
    const tkey = `${t.family} ${t.name}`;
    // (positions only for an error: a YAML config's are read by parsing it again)
    const tpos = () => pos(['tables', ti, 'name']);
    if (seenTables.has(tkey)) fail(tpos(), `table ${tkey} is listed twice`);
    refuseKeyword(fail, tpos, t.name, 'a table');
    seenTables.add(tkey);
    const chainNames = new Set(t.chains.map((c) => c.name));
    if (chainNames.size !== t.chains.length) fail(tpos(), `table ${tkey} lists a chain twice`);
    const chainName = new Map(t.chains.map((c) => [c.name, c.name]));
    const sets = buildSets(t, ti, where, fail, chainName, options.interfaces);
    const objects = buildObjects(t, ti, where, fail);
    const namedSets = new Map<string, NftSet>(sets.map((x) => [x.name, x.set]));
    const graph = new JumpGraph(t.chains.map((c) => c.name), 'this table', t.family);
    const reuse = options.reuse;
    const before = reuse?.table(t.family, t.name, namedSets, options);
    const chains: ChainConfig[] = t.chains.map((c, ci) => {
      const path = ['tables', ti, 'chains', ci];
      refuseKeyword(fail, () => pos([...path, 'name']), c.name, 'a chain');
      const baseKeys = [c.type, c.hook, c.priority].filter((v) => v !== undefined).length;
      if (baseKeys !== 0 && baseKeys !== 3) {
        fail(pos(path), `chain ${c.name}: a base chain needs type, hook and priority together; a regular chain has none of them`);
      }
      if (baseKeys === 0 && c.policy !== undefined) fail(pos([...path, 'policy']), `chain ${c.name}: only base chains have a policy`);
      const base = baseKeys === 3
        ? { type: c.type!, hook: c.hook!, priority: parsePriority(c.priority!), policy: c.policy ?? 'accept' as const }
        : undefined;
      const hookProblem = base && baseChainProblem(base.type, base.hook, base.priority);
      if (hookProblem) fail(pos([...path, hookProblem.at]), `chain ${c.name}: ${hookProblem.reason}`);
      const rules: ChainConfig['rules'] = [];
      const chainBefore = before?.chain(c.name);
      c.rules.forEach((ruleText, ri) => {
        const kept = chainBefore?.take(ruleText, setId, chainId);
        let compiled: CompiledRule | undefined = kept?.compiled;
        try {
          if (compiled === undefined) {
            const ctx = { family: t.family, table: t.name, chain: c.name, setIdBase: setId, chainIdBase: chainId, interfaces: options.interfaces, sets: namedSets };
            if (reuse) {
              const r = recorded(() => compileRule(ruleText, ctx));
              compiled = r.value;
              reuse.compiled(compiled, r.inputs, ctx.setIdBase, ctx.chainIdBase);
            } else {
              compiled = compileRule(ruleText, ctx);
            }
          }
        } catch (e) {
          if (e instanceof RuleSyntaxError) {
            // After a substitution the column is one in the substituted text: show that text.
            const original = env.originalAt(rulePath(path, ri));
            const p = pos(rulePath(path, ri), original === undefined ? e.column : undefined);
            const after = original === undefined ? '' : ` (after substitution: ${JSON.stringify(ruleText)})`;
            fail(p, `rule ${ri + 1} of chain ${c.name}: ${e.message}${after}`);
            return;
          }
          throw e;
        }
        setId += compiled.sets.length;
        if (compiled.bound) chainId += compiled.bound.length;
        const missing = objectRefProblem(compiled.exprs, objects, t.family, t.name);
        if (missing) fail(pos(rulePath(path, ri)), `rule ${ri + 1} of chain ${c.name}: ${missing}`);
        options.compiled?.(compiled);
        const problem = graph.rule(ci, ri, compiled, base?.hook, base?.type);
        if (problem) fail(pos(rulePath(path, ri)), `rule ${ri + 1} of chain ${c.name}: ${problem}`);
        rules.push(kept ?? { text: ruleText, compiled });
      });
      // (an exact-size copy of the rules: push() leaves room for 17, 150 bytes a chain, 30,000 chains in kube-proxy's file)
      return { name: c.name, base, rules: rules.slice(), ...(c.comment !== undefined ? { userdata: commentUserdata(c.comment) } : {}) };
    });
    for (const problem of graph.check(chains, new Map(sets.map((x) => [x.name, x.elements])))) {
      const ci = problem.chain;
      fail(pos(rulePath(['tables', ti, 'chains', ci], problem.rule)), `rule ${problem.rule + 1} of chain ${chains[ci]!.name}: ${problem.reason}`);
    }
    // A set that a rule adds to (`add/update @s { … }`) is dynamic, as nft 1.0.6's evaluation of the
    // rule flags it. Its size is left unset when the file gives none, as nft sends it: the kernel
    // gives it 65535 when the rule binds it (compared as unsized, setDefinitionKey), and a size sent
    // with the set would have the kernel allocate a hash table for 65535 elements up front.
    for (const ch of chains) {
      // (indexed: an iterator result per expression of every rule otherwise)
      for (let ri = 0; ri < ch.rules.length; ri++) {
        const exprs = ch.rules[ri]!.compiled.exprs;
        for (let ei = 0; ei < exprs.length; ei++) {
          const e = exprs[ei]!;
          if (e.kind !== 'dynset') continue;
          const target = namedSets.get(e.set);
          if (!target) continue;
          target.flags |= SET_F.EVAL;
        }
      }
    }
    return {
      family: t.family, name: t.name, protect: t.protect ?? false, ...(t.flags?.length ? { dormant: true } : {}),
      ...(t.comment !== undefined ? { userdata: commentUserdata(t.comment) } : {}),
      sets, ...(objects.length > 0 ? { objects } : {}), chains,
    };
  });
  const owners = parsed.data.owners;
  if (owners) {
    const table = tables.find((t) => t.family === owners.family && t.name === owners.table);
    if (!table) {
      fail(pos(['owners', 'table']), `owners.table: table ${owners.family} ${owners.table} is not in tables`);
    } else {
      owners.dispatch.forEach((name, i) => {
        const p = () => pos(['owners', 'dispatch', i]);
        if (!table.chains.some((c) => c.name === name)) {
          fail(p(), `owners.dispatch: chain ${name} is not a chain of table ${owners.family} ${owners.table}`);
        } else if (owners.dispatch.indexOf(name) !== i) fail(p(), `owners.dispatch: chain ${name} is listed twice`);
      });
    }
  }
  if (errors.length > 0) throw errorsOf(errors);
  return { file, env: { files: env.files, used: [...env.used].sort() }, tables, gc: parsed.data.gc, owners };
}

// A table's and a chain's fields as the schema has them (a Record: the compiler holds them equal).
const TABLE_FIELDS: Record<keyof RawTableParsed, true> = {
  family: true, name: true, protect: true, flags: true, comment: true, sets: true, maps: true, objects: true, chains: true,
};
const CHAIN_FIELDS: Record<keyof RawChain, true> = {
  name: true, type: true, hook: true, priority: true, policy: true, comment: true, rules: true,
};
const TABLE_KEYS: ReadonlySet<string> = new Set(Object.keys(TABLE_FIELDS));
const CHAIN_KEYS: ReadonlySet<string> = new Set(Object.keys(CHAIN_FIELDS));
const FAMILY_NAMES: ReadonlySet<unknown> = new Set(FAMILIES);
const CHAIN_TYPE_NAMES: ReadonlySet<unknown> = new Set(CHAIN_TYPES);
const HOOK_NAMES: ReadonlySet<unknown> = new Set(HOOKS);
const POLICY_NAMES: ReadonlySet<unknown> = new Set(POLICIES);
const SET_LIST = z.array(SET_SCHEMA);
const OBJ_LIST = z.array(OBJ_SCHEMA);

// A set's fields as SET_SCHEMA has them (a Record: the compiler holds them equal).
const SET_FIELDS: Record<keyof RawSet, true> = {
  name: true, type: true, typeof: true, flags: true, timeout: true, 'gc-interval': true, size: true, policy: true,
  'auto-merge': true, comment: true, statements: true, elements: true,
};
const SET_KEYS: ReadonlySet<string> = new Set(Object.keys(SET_FIELDS));
const SET_FLAG_NAMES: ReadonlySet<unknown> = new Set(SET_FLAG_WORDS);
const isText = (x: unknown, min: number, max: number) => typeof x === 'string' && x.length >= min && x.length <= max;

/**
 * SET_SCHEMA's result for a list of sets (or maps) that pass its checks without zod, as the nft
 * reader's and most YAML sets do: the list itself; undefined for any other (a field absent but
 * written as undefined included), which zod checks. Every check is one of SET_SCHEMA's: a list
 * passes here only if it passes there. zod's schema is made on first use, and it checked each of
 * a map's elements in turn.
 */
function plainSets(list: unknown): RawSet[] | undefined {
  if (!Array.isArray(list)) return undefined;
  for (const s of list as unknown[]) {
    if (!isPlain(s)) return undefined;
    for (const k in s) if (!SET_KEYS.has(k) || s[k] === undefined) return undefined;
    if (!isName(s.name)) return undefined;
    if ((s.type !== undefined && !isText(s.type, 1, 512)) || (s.typeof !== undefined && !isText(s.typeof, 1, 512))) return undefined;
    const f = s.flags;
    if (f !== undefined) {
      if (!Array.isArray(f)) return undefined;
      for (let i = 0; i < f.length; i++) if (!SET_FLAG_NAMES.has(f[i])) return undefined;
    }
    if ((s.timeout !== undefined && !isText(s.timeout, 1, 64)) || (s['gc-interval'] !== undefined && !isText(s['gc-interval'], 1, 64))) return undefined;
    const n = s.size;
    if (n !== undefined && !(typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 0xffffffff)) return undefined;
    if (s.policy !== undefined && s.policy !== 'performance' && s.policy !== 'memory') return undefined;
    if (s['auto-merge'] !== undefined && typeof s['auto-merge'] !== 'boolean') return undefined;
    if ((s.comment !== undefined && !isText(s.comment, 0, 128)) || (s.statements !== undefined && !isText(s.statements, 1, 512))) return undefined;
    const e = s.elements;
    if (e !== undefined) {
      if (!Array.isArray(e)) return undefined;
      for (let i = 0; i < e.length; i++) if (!isText(e[i], 1, 4096)) return undefined;
    }
  }
  return list as RawSet[];
}

const isPlain = (x: unknown): x is Record<string, unknown> =>
  typeof x === 'object' && x !== null && Object.getPrototypeOf(x) === Object.prototype;
// (NAME's and the comments' limits)
const isName = (x: unknown) => typeof x === 'string' && x.length >= 1 && x.length <= 255 && NAME_PATTERN.test(x);
const isComment = (x: unknown) => x === undefined || (typeof x === 'string' && x.length <= 128);

/**
 * CONFIG_SCHEMA's result for a document of tables whose chains and rules pass the same checks
 * without zod, as the nft reader's documents and most YAML files do; undefined for any other
 * document (a gc or owners section, a value the schema may refuse), which zod
 * checks (and words the errors of). zod was a large part of a warm load of kube-proxy's
 * 10,000-service file (31,000 chains, 64,000 rules), more cold: the chains here are the reader's
 * own objects, checked in place. Every check below is one of the schema's (TABLE, CHAIN): a
 * document passes here only if it passes there; sets and objects likewise (plainSets, else zod).
 */
export function plainTables(raw: unknown): z.infer<typeof CONFIG_SCHEMA> | undefined {
  if (!isPlain(raw)) return undefined;
  for (const k in raw) if (k !== 'tables') return undefined;
  if (!Array.isArray(raw.tables)) return undefined;
  const tables: RawTableParsed[] = [];
  for (const t of raw.tables as unknown[]) {
    if (!isPlain(t)) return undefined;
    for (const k in t) if (!TABLE_KEYS.has(k)) return undefined;
    if (!FAMILY_NAMES.has(t.family) || !isName(t.name) || !isComment(t.comment)) return undefined;
    if (t.protect !== undefined && typeof t.protect !== 'boolean') return undefined;
    if (t.flags !== undefined && !(Array.isArray(t.flags) && t.flags.length === 1 && t.flags[0] === 'dormant')) return undefined;
    // an absent list is the schema's default, as a YAML table without sets or maps writes it
    const chains = t.chains === undefined ? [] : t.chains;
    const setList = t.sets === undefined ? [] : t.sets;
    const mapList = t.maps === undefined ? [] : t.maps;
    if (!Array.isArray(chains) || !Array.isArray(setList) || !Array.isArray(mapList)) return undefined;
    for (const c of chains as unknown[]) {
      if (!isPlain(c)) return undefined;
      for (const k in c) if (!CHAIN_KEYS.has(k)) return undefined;
      if (!isName(c.name) || !isComment(c.comment) || !Array.isArray(c.rules)) return undefined;
      if (c.type !== undefined && !CHAIN_TYPE_NAMES.has(c.type)) return undefined;
      if (c.hook !== undefined && !HOOK_NAMES.has(c.hook)) return undefined;
      if (c.policy !== undefined && !POLICY_NAMES.has(c.policy)) return undefined;
      const p = c.priority;
      if (p !== undefined && !(typeof p === 'number' ? Number.isInteger(p) && p >= -2147483648 && p <= 2147483647
        : typeof p === 'string' && PRIORITY_PATTERN.test(p))) return undefined;
      for (const r of c.rules as unknown[]) if (typeof r !== 'string') return undefined;
    }
    const sets = plainSets(setList) ?? SET_LIST.safeParse(setList).data;
    const maps = plainSets(mapList) ?? SET_LIST.safeParse(mapList).data;
    const objectList = t.objects === undefined ? [] : t.objects;
    // (no objects, as most tables: not zod's schema made for an empty list)
    const objects = Array.isArray(objectList) && objectList.length === 0 ? [] : OBJ_LIST.safeParse(objectList).data;
    if (!sets || !maps || !objects) return undefined;
    tables.push({
      family: t.family as RawTableParsed['family'], name: t.name as string, protect: t.protect as boolean | undefined,
      ...(t.flags !== undefined ? { flags: ['dormant' as const] } : {}),
      comment: t.comment as string | undefined, sets, maps, objects, chains: chains as RawChain[],
    });
  }
  return { tables };
}

/** The path of rule `ri` of the chain at `chain` (made for an error only: 60,000 rules compile without one). */
function rulePath(chain: (string | number)[], ri: number): (string | number)[] {
  return [...chain, 'rules', ri];
}


/** A table's stateful objects, built (src/config/stateful-objects.ts), in the order they were written. */
function buildObjects(t: RawTableParsed, ti: number, { pos }: Positions,
  fail: (p: { line: number; col: number }, reason: string) => void): ObjConfig[] {
  const out: ObjConfig[] = [];
  const seen = new Set<string>();
  t.objects.forEach((raw, oi) => {
    const path = ['tables', ti, 'objects', oi];
    // nft's object names are per type: a counter and a quota may share one
    const k = `${raw.type} ${raw.name}`;
    if (seen.has(k)) fail(pos([...path, 'name']), `table ${t.family} ${t.name} declares ${raw.type} ${raw.name} twice`);
    seen.add(k);
    refuseKeyword(fail, () => pos([...path, 'name']), raw.name, `a ${raw.type}`, NFT_OBJECT_KEYWORDS[raw.type]);
    const built = buildObject(raw, { family: t.family, table: t.name }, (where, reason, inner) => fail(pos([...path, ...where], inner), reason));
    if (built) out.push(built);
  });
  return out;
}

/**
 * The kernel takes any name, but nft could not read such a table back (`nft list`, `export`) nor
 * name the object in a rule: its grammar wants a string where its scanner returns the keyword.
 */
function refuseKeyword(fail: (p: { line: number; col: number }, reason: string) => void, at: () => { line: number; col: number },
  name: string, what: string, alsoKeywords?: ReadonlySet<string>): void {
  if (NFT_KEYWORDS.has(name) || alsoKeywords?.has(name)) fail(at(), `'${name}' is a keyword of nft's language, which nft refuses as ${what} name`);
}

/** Why a rule cannot use the objects it names (one the table does not declare), or undefined. */
function objectRefProblem(exprs: CompiledRule['exprs'], objects: readonly ObjConfig[], family: string, table: string): string | undefined {
  const used = objectsUsed(exprs);
  for (let i = 0; i < used.length; i++) {
    const u = used[i]!;
    if (!objects.some((o) => o.type === u.type && o.name === u.name)) {
      return `${u.type} ${u.name} is not an object of table ${family} ${table} (declare it in the table: '${u.type} ${u.name} { … }')`;
    }
  }
  return undefined;
}

/**
 * A table's sets and maps, built (src/config/sets.ts) and put in the order
 * they were written, sets and maps mixed, since nft creates (and lists) them
 * in that order. Errors carry the position of what is wrong.
 */
function buildSets(t: RawTableParsed, ti: number, { pos, order }: Positions,
  fail: (p: { line: number; col: number }, reason: string) => void, chainName: ReadonlyMap<string, string>,
  interfaces: InterfaceResolver | undefined): SetConfig[] {
  const out: { at: number; set: SetConfig }[] = [];
  const seen = new Set<string>();
  for (const kind of ['sets', 'maps'] as const) {
    t[kind].forEach((raw, si) => {
      const path = ['tables', ti, kind, si];
      const at = order(path);
      if (seen.has(raw.name)) fail(pos([...path, 'name']), `table ${t.family} ${t.name} declares set or map ${raw.name} twice`);
      refuseKeyword(fail, () => pos([...path, 'name']), raw.name, 'a set or map');
      seen.add(raw.name);
      const built = buildSet(raw, kind === 'maps', { family: t.family, table: t.name, interfaces },
        (where, reason, inner) => fail(pos([...path, ...where], inner), reason));
      if (!built) return;
      // A verdict map's jumps and gotos need their chain in the table (the kernel would refuse them).
      for (const e of built.elements) {
        const chain = e.chain;
        if (chain === undefined) continue;
        // (the chain's own name string in place of the element's copy: one per chain, not per element)
        const name = chainName.get(chain);
        if (name !== undefined) {
          e.chain = name;
          continue;
        }
        const i = (raw.elements ?? []).findIndex((x) => new RegExp(`\\b(?:jump|goto)\\s+"?${chain.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}"?\\s*$`).test(x));
        fail(pos([...path, 'elements', Math.max(i, 0)]), `map ${raw.name}: an element jumps to chain ${chain}, which is not a chain of table ${t.family} ${t.name}`);
      }
      out.push({ at, set: built });
    });
  }
  out.sort((a, b) => a.at - b.at);
  return out.map((x) => x.set);
}

/**
 * Validates the env section and reads its files: the variables ${NAME} takes values from. Env
 * files win over the process environment: they are re-read on every reload, the environment is
 * fixed at start.
 */
function variablesOf(doc: Document, lines: LineCounter, file: string,
  environment: Readonly<Record<string, string | undefined>>) {
  const envNode = doc.getIn(['env'], true);
  let envRaw: unknown = envNode;
  if (isNode(envNode)) {
    try {
      envRaw = envNode.toJS(doc);
    } catch {
      envRaw = undefined;  // an alias problem: toJS of the whole document reports it
    }
  }
  const parsed = envRaw === undefined ? { success: true as const, data: undefined, error: undefined } : ENV.safeParse(envRaw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const path = ['env', ...issue.path as (string | number)[]];
    const { line, col } = positionOf(doc, lines, path);
    throw new ConfigError(file, line, col, `${path.join('.')}: ${issue.message}`);
  }
  const files = parsed.data?.files ?? [];
  const vars = new Map<string, string>();
  for (const [k, v] of Object.entries(environment)) if (v !== undefined) vars.set(k, v);
  files.forEach((f, i) => {
    for (const [k, v] of readEnvFile(f, { file, ...positionOf(doc, lines, ['env', 'files', i]) })) vars.set(k, v);
  });
  const sources = files.length ? `environment and env files ${files.join(', ')}` : 'environment; env.files lists none';
  return { files, vars, sources };
}

/**
 * Replaces ${NAME} in every string value outside the env section, in place in the document (so
 * later errors keep their positions); `substituted` holds the original text of each value changed.
 */
function substituteVariables(doc: Document, text: string, lines: LineCounter, file: string,
  vars: ReadonlyMap<string, string>, sources: string, environment?: Readonly<Record<string, string | undefined>>) {
  // Each variable taken is an input of the compile (src/base/compile-inputs.ts): the environment's
  // value (an env file's, which wins, is noted with the file).
  const lookup = (name: string) => {
    if (environment) noteInput(() => ({ kind: 'env', name, value: environment[name] ?? null }));
    return vars.get(name);
  };
  const used = new Set<string>();
  const substituted = new Map<Scalar, string>();
  visit(doc, {
    Pair(_key, pair, path) {
      // The env section names the sources; it is not itself substituted.
      if (path.length === 2 && isScalar(pair.key) && pair.key.value === 'env') return visit.SKIP;
      return undefined;
    },
    Scalar(key, node) {
      if (key === 'key' || typeof node.value !== 'string' || !node.value.includes('$')) return;
      const r = substitute(node.value, lookup);
      if ('problem' in r) {
        const p = r.problem;
        const needle = p.kind === 'syntax' ? '${' : `\${${p.name}}`;
        const offset = sourceOffset(text, node, needle);
        const { line, col } = lines.linePos(offset);
        throw new ConfigError(file, line, col, describeProblem(p, sources));
      }
      if (r.names.length === 0 && r.value === node.value) return;
      substituted.set(node, node.value);
      for (const n of r.names) used.add(n);
      node.value = r.value;
    },
  });
  return { used, substituted };
}

/** Where `needle` (not escaped by a preceding $) first occurs in the scalar's source, else the scalar's start. */
function sourceOffset(text: string, node: Scalar, needle: string): number {
  const [start, end] = node.range ?? [0, 0];
  for (let i = text.indexOf(needle, start); i >= 0 && i < end; i = text.indexOf(needle, i + 1)) {
    if (text[i - 1] !== '$') return i;
  }
  return start;
}

/** Where the first alias that does not resolve starts, if one does not. */
function firstAliasProblem(doc: Document): number | undefined {
  let found: number | undefined;
  visit(doc, {
    Alias(_key, node) {
      if (found === undefined && node.resolve(doc) === undefined) found = node.range?.[0];
    },
  });
  return found;
}

/** The start of the deepest node on `path` that exists (0: none). */
function offsetOf(doc: Document, path: (string | number)[]): number {
  return nodeOn(doc, path)?.range[0] ?? 0;
}

function nodeOn(doc: Document, path: (string | number)[]) {
  for (let n = path.length; n >= 0; n--) {
    const node = n === 0 ? doc.contents : doc.getIn(path.slice(0, n), true);
    const range = (node as { range?: [number, number, number] } | null)?.range;
    if (range) return { node, range };
  }
  return undefined;
}

function positionOf(doc: Document, lines: LineCounter, path: (string | number)[], innerColumn?: number) {
  // The deepest node on the path that exists.
  const found = nodeOn(doc, path);
  if (!found) return { line: 1, col: 1 };
  const { node, range } = found;
  let offset = range[0];
  if (innerColumn !== undefined && isScalar(node)) {
    const quoted = node.type === 'QUOTE_DOUBLE' || node.type === 'QUOTE_SINGLE';
    offset += (quoted ? 1 : 0) + innerColumn - 1;
  }
  return lines.linePos(offset);
}

/**
 * Long runs of list items are left out of a big file's YAML parse: the parse tree (yaml's CST) of
 * a big rule list, on top of the document, was the start-up's peak. Only
 * files this long, and runs this long, are elided; everything else is parsed as written.
 */
const ELIDE_MIN_CHARS = 64 << 10;
const ELIDE_MIN_RUN = 64;
/** A placeholder item is this and the run's index; a file that has this text anywhere is not elided. */
const ELIDED = '__nfkeeper_elided_run_';

/** yaml's lexer's markers (yaml/dist/parse/cst.js): tokens that are not characters of the text. */
const DOCUMENT = '\x02';
const FLOW_END = '\x18';
const SCALAR = '\x1f';
/** The plain scalars the core schema reads as null or a boolean (other non-strings do not start with a letter). */
const NOT_STRINGS: ReadonlySet<string> = new Set(['null', 'Null', 'NULL', 'true', 'True', 'TRUE', 'false', 'False', 'FALSE']);

/**
 * The text with each run of ELIDE_MIN_RUN or more consecutive lines `<indent>- <plain scalar>`,
 * at one indentation, replaced by one such line whose scalar is a placeholder; and the runs' values.
 * An elided value is a plain one-line scalar that the parser takes as that same string: it starts
 * with a letter, is not null or a boolean, has no `$` (substitution stays the document's), no `: `
 * or ` #` (a mapping, a comment) and ends at the newline (no trailing space, no `:`). A file with
 * an alias, a tag or a directive is not elided (an alias or a tag could make a list something
 * else; a directive could change the schema).
 *
 * The lines are found by a scan of the text, and then proved with yaml's own lexer on the elided
 * text, which is short: a placeholder read as an item's plain scalar of its own was one in the
 * original too (its lines are read in the same context, each after an item of the same indentation),
 * so a line inside a block scalar, a quoted string or a flow collection is what the parser takes it
 * for. A run whose placeholder is not such an item is put back as written (one whose last line
 * continues on the next, more indented line, without that line), and the text lexed again.
 */
export function elideRuns(text: string): { text: string; runs: string[][] } | undefined {
  if (text.length < ELIDE_MIN_CHARS || text.includes(ELIDED)) return undefined;
  // Candidate runs: [start, end) offsets of their lines, their indentation and values.
  let runs: { start: number; end: number; indent: string; values: string[] }[] = [];
  let run: (typeof runs)[number] | undefined;
  for (let lineStart = 0; lineStart < text.length;) {
    const nl = text.indexOf('\n', lineStart);
    if (nl < 0) break;
    const value = itemValue(text, lineStart, nl);
    if (value === undefined) {
      if (run && run.values.length >= ELIDE_MIN_RUN) runs.push(run);
      run = undefined;
    } else {
      const indent = text.slice(lineStart, value.at - 2);
      if (!run || run.indent !== indent) {
        if (run && run.values.length >= ELIDE_MIN_RUN) runs.push(run);
        run = { start: lineStart, end: nl + 1, indent, values: [] };
      }
      run.values.push(value.text);
      run.end = nl + 1;
    }
    lineStart = nl + 1;
  }
  if (run && run.values.length >= ELIDE_MIN_RUN) runs.push(run);
  for (;;) {
    if (runs.length === 0) return undefined;
    const parts: string[] = [];
    let copied = 0;
    runs.forEach((r, i) => {
      parts.push(text.slice(copied, r.start), `${r.indent}- ${ELIDED}${i}\n`);
      copied = r.end;
    });
    parts.push(text.slice(copied));
    const elided = parts.join('');
    const items = plainItems(elided);
    if (items === undefined) return undefined;
    if (runs.every((_, i) => items.proved.has(`${ELIDED}${i}`))) return { text: elided, runs: runs.map((r) => r.values) };
    const kept: typeof runs = [];
    runs.forEach((r, i) => {
      if (items.proved.has(`${ELIDED}${i}`)) kept.push(r);
      else if (items.continued.has(`${ELIDED}${i}`) && r.values.length > ELIDE_MIN_RUN) {
        // Its last line's scalar goes on: that line stays as written.
        const last = text.lastIndexOf('\n', r.end - 2) + 1;
        kept.push({ ...r, end: last, values: r.values.slice(0, -1) });
      }
    });
    runs = kept;
  }
}

/** The value of a line `<spaces>- <value>` from start to the newline at nl, if it is one that can be elided; `at` is its offset. */
function itemValue(text: string, start: number, nl: number): { text: string; at: number } | undefined {
  let i = start;
  while (text.charCodeAt(i) === 32) i++;
  if (text.charCodeAt(i) !== 45 || text.charCodeAt(i + 1) !== 32) return undefined;
  const at = i + 2;
  const c = text.charCodeAt(at);
  if (!((c >= 65 && c <= 90) || (c >= 97 && c <= 122))) return undefined;
  const last = text.charCodeAt(nl - 1);
  // No trailing space or tab, no `:` at the end, no CR (a CRLF file is parsed as written).
  if (last === 32 || last === 9 || last === 58 || last === 13) return undefined;
  const value = text.slice(at, nl);
  if (/[$\r]|:[ \t]|[ \t]#/.test(value) || NOT_STRINGS.has(value)) return undefined;
  return { text: value, at };
}

/**
 * yaml's lexer over `text`: the plain one-line scalars that are a block sequence item's whole line
 * (`proved`), and those that are an item's but continue on the next line (`continued`); undefined
 * for a text with an alias, a tag or a directive, or one the lexer does not read to its end.
 */
function plainItems(text: string): { proved: Set<string>; continued: Set<string> } | undefined {
  const proved = new Set<string>();
  const continued = new Set<string>();
  let offset = 0;
  let flow = 0;
  // The line so far: 0 at its start, 1 after the indentation, 2 after `-`, 3 after the space,
  // 4 after the scalar marker, 5 after the scalar; -1 for a line that is not an item to elide.
  let state = 0;
  let value = '';
  for (const tok of new Lexer().lex(text)) {
    if (tok === DOCUMENT || tok === FLOW_END) continue;
    if (tok === SCALAR) {
      state = state === 3 && flow === 0 ? 4 : -1;
      continue;
    }
    offset += tok.length;
    const type = CST.tokenType(tok);
    if (type === 'newline' && tok !== '') {
      if (state === 5 && tok === '\n') proved.add(value);
      state = 0;
      continue;
    }
    switch (type) {
      case 'alias': case 'tag': case 'directive-line': return undefined;
      case 'flow-map-start': case 'flow-seq-start': flow++; break;
      case 'flow-map-end': case 'flow-seq-end': flow--; break;
      default: break;
    }
    if (state === 4) {
      const nl = tok.indexOf('\n');
      if (nl >= 0 && tok.startsWith(ELIDED)) continued.add(tok.slice(0, nl));
      state = nl < 0 ? 5 : -1;
      value = tok;
    } else if (type === 'space' && /^ +$/.test(tok) && (state === 0 || state === 2)) {
      state++;
    } else if (type === 'seq-item-ind' && (state === 0 || state === 1)) {
      state = 2;
    } else state = -1;
  }
  return offset === text.length ? { proved, continued } : undefined;
}

/**
 * Puts elided runs back: each placeholder item of the plain tree becomes its run's values, in
 * place (an array reached twice is restored once). False if a placeholder is not where an item
 * is (the read is then not used).
 */
export function restoreRuns(raw: unknown, runs: readonly string[][]): boolean {
  const runOf = (v: string) => (v.startsWith(ELIDED) && /^\d+$/.test(v.slice(ELIDED.length)) ? runs[Number(v.slice(ELIDED.length))] : undefined);
  const done = new Set<unknown>();
  let restored = 0;
  let stray = false;
  const walk = (x: unknown): void => {
    if (typeof x !== 'object' || x === null || done.has(x)) return;
    done.add(x);
    if (Array.isArray(x)) {
      let found = false;
      for (const v of x) {
        if (typeof v !== 'string') walk(v);
        else if (runOf(v) !== undefined) found = true;
        else if (v.includes(ELIDED)) stray = true;
      }
      if (!found) return;
      const items = x.splice(0);
      for (const v of items) {
        const values = typeof v === 'string' ? runOf(v) : undefined;
        if (values === undefined) {
          x.push(v);
          continue;
        }
        for (const r of values) x.push(r);
        restored++;
      }
      return;
    }
    for (const [k, v] of Object.entries(x)) {
      if (k.includes(ELIDED) || (typeof v === 'string' && v.includes(ELIDED))) stray = true;
      walk(v);
    }
  };
  walk(raw);
  return !stray && restored === runs.length;
}

/**
 * The interfaces of the namespace rules go into, for `iif`/`oif` names; read
 * once, when the config is loaded (and again on each reload), as nft resolves
 * them when it loads a rule. Lazy: a config without such rules reads nothing.
 */
export function namespaceInterfaces(netns?: string): InterfaceResolver {
  let table: InterfaceResolver | undefined;
  const get = () => (table ??= interfaceTable(Object.fromEntries(listLinks(netns).map((l) => [l.name, l.index]))));
  return { indexOf: (n) => get().indexOf(n), nameOf: (i) => get().nameOf(i) };
}

/**
 * For checks that reach no namespace (`validate`): every interface name is
 * taken as existing, so `iif`/`oif` rules are checked for syntax only; the
 * commands that write a namespace resolve them there.
 */
export function anyInterface(): InterfaceResolver {
  const byName = new Map<string, number>();
  const byIndex = new Map<number, string>();
  return {
    indexOf(n) {
      let i = byName.get(n);
      if (i === undefined) {
        i = 0x7fff0000 + byName.size;
        byName.set(n, i);
        byIndex.set(i, n);
      }
      return i;
    },
    nameOf: (i) => byIndex.get(i),
  };
}
