/**
 * A daemon's reload reuses what the config before it compiled: a rule whose text and whole
 * compile context are as they were takes the compiled (compacted) rule of the previous load
 * instead of being parsed and compiled again. The loader (config.ts buildConfig) asks `take`
 * before it compiles a rule, and tells `compiled` what each compile noted; nothing else changes:
 * the reused rule is validated as a compiled one is (objects, jumps, the chain's hook), and
 * compacted already (model/compact.ts knownRule leaves it as it is).
 *
 * A rule's compile depends on its text (after ${NAME} and define substitution: a changed variable
 * is a changed text) and on its context (rules/compile.ts CompileContext): the family, table and
 * chain (the lookup is by them), the table's named sets and maps it names (their definitions,
 * elements aside), the batch ids of its anonymous sets and bound chains (setIdBase, chainIdBase:
 * a rule with none depends on neither), and the inputs its compile noted (src/base/compile-inputs.ts:
 * the interface indexes and names it resolved, whether the time zone was UTC, /etc/services). Any
 * of these changed: it is compiled again. The inputs are checked once per load each, against the
 * namespace now, and noted in the load's trace as a compile would note them (the compile cache
 * stores the reload's config with its whole trace).
 *
 * A config from the compile cache (fromCache) has no inputs per rule: each of its rules is taken
 * as depending on every rule input of the entry's trace (its interfaces, time zone, system files),
 * and one with anonymous sets or bound chains (their batch ids not kept) is compiled again.
 */
import { noteInput, SYSTEM_FILES, type CompileInput } from '../base/compile-inputs.js';
import { ruleAt, ruleCount, type ChainConfig } from '../model/desired.js';
import { SET_F, type NftSet } from '../netlink/objects.js';
import type { CompiledRule } from '../rules/index.js';
import type { TableConfig } from '../model/desired.js';
import type { Config, LoadOptions } from './config.js';
import { changedInput } from './compile-cache.js';

type Rule = ChainConfig['rules'][number];

/** What a rule's compile depended on besides its text, family, table, chain and the named sets it names. */
interface RuleDeps {
  inputs?: readonly CompileInput[];
  /** The first batch ids its anonymous sets and bound chains were given: only where it has some. */
  setIdBase?: number;
  chainIdBase?: number;
}

/**
 * Per compiled rule, its dependencies when it has any (most rules have none: no entry). A rule
 * without an entry was compiled with none, or came from the compile cache (FROM_CACHE).
 */
const DEPS = new WeakMap<CompiledRule, RuleDeps>();
/** Configs read from the compile cache: the rule inputs of the entry's trace. */
const FROM_CACHE = new WeakMap<Config, readonly CompileInput[]>();

/** The kinds of input a rule's compile notes (the loader notes files, paths, directories and variables). */
function isRuleInput(i: CompileInput): boolean {
  return i.kind === 'link' || i.kind === 'linkName' || i.kind === 'utc' || (i.kind === 'file' && SYSTEM_FILES.has(i.path));
}

/** A named set as a rule's compile reads it: its definition, without elements, handle or the EVAL flag its rules give it after. */
function setDefinition(s: NftSet): string {
  return JSON.stringify({ ...s, elements: undefined, handle: undefined, flags: s.flags & ~SET_F.EVAL });
}

/**
 * The named sets and maps a rule's expressions name (a lookup's, a dynset's, an object map's), and
 * those its bound chains' rules name (compiled with the same sets: `jump { ip saddr @s … }`).
 */
function namedSetsOf(c: CompiledRule, each: (name: string) => boolean): boolean {
  for (let i = 0; i < c.exprs.length; i++) {
    const set = (c.exprs[i] as { set?: unknown }).set;
    if (typeof set === 'string' && !set.startsWith('__') && !each(set)) return false;
  }
  for (const b of c.bound ?? []) for (const r of b.rules) if (!namedSetsOf(r, each)) return false;
  return true;
}

/**
 * One load's reuse of `previous` (the config the last load gave; none at a start). Counts what it
 * reused and what was compiled (the daemon says both at a reload).
 */
export class RuleReuse {
  reused = 0;
  compiledCount = 0;
  private tables: Map<string, TableConfig> | undefined;
  /** Inputs checked in this load, by their JSON (what and the value noted): unchanged (true) or not. */
  private readonly checked = new Map<string, boolean>();
  /** Input lists checked (and noted) in this load: each once. */
  private readonly held = new WeakMap<readonly CompileInput[], boolean>();

  constructor(private readonly previous?: Config) {}

  /** `config` came from the compile cache whose entry's trace is `inputs`: its rules depend on those of them a rule's compile notes. */
  fromCache(config: Config, inputs: readonly CompileInput[]): void {
    FROM_CACHE.set(config, inputs.filter(isRuleInput));
  }

  /** What `rule`'s compile depended on (`inputs`: what it noted; the batch ids it was given). */
  compiled(rule: CompiledRule, inputs: readonly CompileInput[] | undefined, setIdBase: number, chainIdBase: number): void {
    this.compiledCount++;
    const sets = rule.sets.length > 0;
    const bound = rule.bound !== undefined && rule.bound.length > 0;
    if (!inputs && !sets && !bound) return;
    DEPS.set(rule, { ...(inputs ? { inputs } : {}), ...(sets ? { setIdBase } : {}), ...(bound ? { chainIdBase } : {}) });
  }

  /** The previous load's table `family name`, for its chains' rules with `sets` (the new load's named sets); undefined: none. */
  table(family: string, name: string, sets: ReadonlyMap<string, NftSet>, options: LoadOptions): TableReuse | undefined {
    if (!this.previous) return undefined;
    this.tables ??= new Map(this.previous.tables.map((t) => [`${t.family} ${t.name}`, t]));
    const t = this.tables.get(`${family} ${name}`);
    return t && new TableReuse(this, t, sets, FROM_CACHE.get(this.previous), options);
  }

  /** Whether every input of `inputs` is as noted, checked against the namespace now; those that are, noted in the load's trace. */
  holds(inputs: readonly CompileInput[], options: LoadOptions): boolean {
    let ok = this.held.get(inputs);
    if (ok !== undefined) return ok;
    ok = true;
    for (const i of inputs) {
      const key = JSON.stringify(i);
      let same = this.checked.get(key);
      if (same === undefined) this.checked.set(key, same = changedInput([i], options) === undefined);
      if (!same) {
        ok = false;
        break;
      }
    }
    if (ok) for (const i of inputs) noteInput(() => i);
    this.held.set(inputs, ok);
    return ok;
  }
}

/** The previous load's rules of one table, by chain and text. */
export class TableReuse {
  private readonly chains = new Map<string, TableConfig['chains'][number]>();
  private oldSets: Map<string, NftSet> | undefined;
  /** Named sets compared in this load: defined as before (true) or not. */
  private readonly sameSet = new Map<string, boolean>();

  constructor(private readonly reuse: RuleReuse, private readonly old: TableConfig, private readonly sets: ReadonlyMap<string, NftSet>,
    private readonly fromCache: readonly CompileInput[] | undefined, private readonly options: LoadOptions) {
    for (const c of old.chains) this.chains.set(c.name, c);
  }

  /** The previous rules of chain `name` by their text (undefined: the chain is new). */
  chain(name: string): ChainReuse | undefined {
    const c = this.chains.get(name);
    if (!c) return undefined;
    const byText = new Map<string, Rule>();
    try {
      // (a rule made late, from the compile cache, is made here: the reload's check would read it anyway)
      for (let j = 0, n = ruleCount(c); j < n; j++) {
        const r = ruleAt(c, j)!;
        if (!byText.has(r.text)) byText.set(r.text, r);
      }
    } catch {
      return undefined;  // a cache's rule that cannot be made: compiled instead (the daemon says why once it makes them)
    }
    return new ChainReuse(this, byText);
  }

  /**
   * The rule compiled before from `text` in this chain, if its context is as it was (batch ids
   * `setIdBase`, `chainIdBase` now): the previous config's rule itself, with what the keeper
   * keeps on it (its key: the reload's diff keys only the rules compiled).
   */
  take(byText: Map<string, Rule>, text: string, setIdBase: number, chainIdBase: number): Rule | undefined {
    const r = byText.get(text);
    if (r === undefined) return undefined;
    const c = r.compiled;
    let deps = DEPS.get(c);
    if (deps === undefined && this.fromCache !== undefined) {
      // Its batch ids were not kept with it: compiled again.
      if (c.sets.length > 0 || (c.bound !== undefined && c.bound.length > 0)) return undefined;
      if (this.fromCache.length > 0) deps = { inputs: this.fromCache };
    }
    if (deps !== undefined) {
      if (deps.setIdBase !== undefined && deps.setIdBase !== setIdBase) return undefined;
      if (deps.chainIdBase !== undefined && deps.chainIdBase !== chainIdBase) return undefined;
      if (deps.inputs !== undefined && !this.reuse.holds(deps.inputs, this.options)) return undefined;
    }
    if (!namedSetsOf(c, (name) => this.setAsBefore(name))) return undefined;
    // From the cache's config, it keeps what it depends on from now on.
    if (deps !== undefined && !DEPS.has(c)) DEPS.set(c, deps);
    this.reuse.reused++;
    // Taken once: a config holds each rule object once (a text twice in a chain: the second is compiled).
    byText.delete(text);
    return r;
  }

  private setAsBefore(name: string): boolean {
    let same = this.sameSet.get(name);
    if (same === undefined) {
      this.oldSets ??= new Map((this.old.sets ?? []).map((x) => [x.name, x.set]));
      const before = this.oldSets.get(name);
      const now = this.sets.get(name);
      same = before !== undefined && now !== undefined && setDefinition(before) === setDefinition(now);
      this.sameSet.set(name, same);
    }
    return same;
  }
}

/** The previous load's rules of one chain. */
export class ChainReuse {
  constructor(private readonly table: TableReuse, private readonly byText: Map<string, Rule>) {}

  take(text: string, setIdBase: number, chainIdBase: number): Rule | undefined {
    return this.table.take(this.byText, text, setIdBase, chainIdBase);
  }
}
