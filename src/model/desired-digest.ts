/**
 * The digest of a desired state the restart record is compared with (src/keeper/record.ts): made
 * per desired state from the digests of its chains, each made once per chain object, or carried
 * with a compiled config's chains by the compile cache.
 */
import { sha256Hash } from '../base/sha256.js';
import { runNow, type Sliced } from '../base/sliced.js';
import { appendedOf, ruleCount, type ChainConfig, type TableConfig } from './desired.js';

/**
 * A digest of desired tables: what the kernel would hold for them, every byte a commit would send
 * depending only on what goes in (the compiled expressions, userdata, sets, objects, chain and
 * table definitions), not on the rules' source text. It is composed of each table's definition and
 * each chain's definition and rule digest (chainDigestSteps), so that a desired list made of known
 * chains (the owners merged into the config's tables: a new list and a new owners table, holding
 * the config's chain objects) walks only the chains that are new, and none of the rules of a chain
 * the compile cache gave back with its digest.
 */
export function desiredDigest(tables: readonly TableConfig[]): string {
  return runNow(desiredDigestSteps(tables));
}

/** desiredDigest made a slice of rules at a time (src/base/sliced.ts). */
function* desiredDigestSteps(tables: readonly TableConfig[]): Sliced<string> {
  const h = sha256Hash();
  const walked = { rules: 0 };
  let out = '';
  for (const t of tables) {
    out += `T${JSON.stringify([t.family, t.name, t.protect, t.dormant ?? false, t.userdata ?? null, t.sets ?? [], t.objects ?? []])}\n`;
    for (const c of t.chains) {
      const d = known.get(c) ?? (yield* chainDigestSteps(c, walked));
      out += `C${JSON.stringify([c.name, c.base ?? null, c.userdata ?? null, ruleCount(c)])}${d}\n`;
      if (out.length > 1 << 16) {
        h.update(out);
        out = '';
      }
    }
  }
  h.update(out);
  return h.digest('hex');
}

/**
 * Known chain digests, by chain object: a chain is not changed once loaded (a reload, a merge of
 * owners that adds jumps to it, make new ones), and its rules made late are the rules it was
 * digested or stored with.
 */
const known = new WeakMap<ChainConfig, string>();

/** The digest of each chain of `tables` (per table, per chain), as desiredDigest composes them; walked where not known. */
export function* chainDigestsSteps(tables: readonly TableConfig[]): Sliced<string[][]> {
  const walked = { rules: 0 };
  const out: string[][] = [];
  for (const t of tables) {
    const ds: string[] = [];
    for (const c of t.chains) ds.push(known.get(c) ?? (yield* chainDigestSteps(c, walked)));
    out.push(ds);
  }
  return out;
}

/**
 * The digest of chain `c`'s rules where it is known already (made for a restart record's digest or
 * a store, or given by the compile cache), else undefined: never walks the rules.
 */
export function knownChainDigest(c: ChainConfig): string | undefined {
  return known.get(c);
}

/**
 * `digests` are chainDigestsSteps(tables)'s, found without walking them: the compile cache's,
 * stored with the config they were made of (sealed with it, and given back object for object).
 */
export function knownChainDigests(tables: readonly TableConfig[], digests: readonly (readonly string[])[]): void {
  tables.forEach((t, i) => t.chains.forEach((c, j) => known.set(c, digests[i]![j]!)));
}

/**
 * The digest of chain `c`'s rules, then known. An expression that is the very object the previous
 * rule has at the same place (src/model/compact.ts shares them) is written as '=': equal output
 * still means equal expressions, and most of a big chain's are not written out again.
 */
function* chainDigestSteps(c: ChainConfig, walked: { rules: number }): Sliced<string> {
  const parts = appendedOf(c);
  if (parts) {
    // A dispatch chain with the owners' jumps: composed of its config chain's digest (known from the
    // compile cache, its rules not made) and the jumps'. The same chain digests the same way every time.
    const base = known.get(parts.base) ?? (yield* chainDigestSteps(parts.base, walked));
    const extra = yield* rulesDigestSteps(parts.extra, walked);
    const digest = sha256Hash().update(`A${base}+${extra}`).digest('hex');
    known.set(c, digest);
    return digest;
  }
  const digest = yield* rulesDigestSteps(c.rules, walked);
  known.set(c, digest);
  return digest;
}

/** The digest of `rules`, in order (chainDigestSteps). */
function* rulesDigestSteps(rules: ChainConfig['rules'], walked: { rules: number }): Sliced<string> {
  const h = sha256Hash();
  let out = '';
  let prev: readonly object[] = [];
  for (const r of rules) {
    const x = r.compiled;
    const exprs = x.exprs;
    out += 'R';
    for (let i = 0; i < exprs.length; i++) out += exprs[i] === prev[i] ? '=' : JSON.stringify(exprs[i]);
    prev = exprs;
    out += `;${x.userdata ?? ''}`;
    out += x.sets.length > 0 || x.bound ? `;${JSON.stringify([x.sets, x.bound ?? null])}\n` : '\n';
    if (out.length > 1 << 16) {
      h.update(out);
      out = '';
    }
    if (++walked.rules % DIGEST_SLICE === 0) yield;
  }
  h.update(out);
  return h.digest('hex');
}

/** The digest's slice, in rules: well under runByTurns's turn, which gathers slices by time. */
const DIGEST_SLICE = 1024;
