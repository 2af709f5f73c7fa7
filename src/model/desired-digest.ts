/**
 * The digest of a desired state the restart record is compared with (src/keeper/record.ts): made
 * once per desired state, or carried with a compiled config by the compile cache.
 */
import { sha256Hash } from '../base/sha256.js';
import { runNow, type Sliced } from '../base/sliced.js';
import type { TableConfig } from './desired.js';

/**
 * A digest of desired tables: what the kernel would hold for them, every byte a commit would send
 * depending only on what goes in (the compiled expressions, userdata, sets, objects, chain and
 * table definitions), not on the rules' source text. An expression that is the very object the
 * previous rule has at the same place (src/model/compact.ts shares them) is written as '=': equal
 * output still means equal expressions, and most of a big chain's are not written out again.
 * Tables whose digest is known (knownDesiredDigest: made by desiredDigestSteps, or stored with them
 * in the compile cache) are not walked again.
 */
export function desiredDigest(tables: readonly TableConfig[]): string {
  return knownDigest(tables) ?? runNow(desiredDigestSteps(tables));
}

/**
 * Known digests, by the first of their tables (a desired list holds the config's table objects, in a
 * new array when owners are merged in): tables are not changed once loaded, a reload makes new ones.
 */
const known = new WeakMap<TableConfig, { tables: readonly TableConfig[]; digest: string }>();

function knownDigest(tables: readonly TableConfig[]): string | undefined {
  const k = tables.length > 0 ? known.get(tables[0]!) : undefined;
  return k && k.tables.length === tables.length && k.tables.every((t, i) => t === tables[i]) ? k.digest : undefined;
}

/**
 * `digest` is desiredDigest(tables), found without walking them: the compile cache's, stored with
 * the config it was made of (sealed with it, and given back object for object).
 */
export function knownDesiredDigest(tables: readonly TableConfig[], digest: string): void {
  if (tables.length > 0) known.set(tables[0]!, { tables: [...tables], digest });
}

/** desiredDigest made a slice of rules at a time (src/base/sliced.ts), and then known. */
export function* desiredDigestSteps(tables: readonly TableConfig[]): Sliced<string> {
  const h = sha256Hash();
  let out = '';
  let n = 0;
  for (const t of tables) {
    out += `T${JSON.stringify([t.family, t.name, t.protect, t.dormant ?? false, t.userdata ?? null, t.sets ?? [], t.objects ?? []])}\n`;
    for (const c of t.chains) {
      out += `C${JSON.stringify([c.name, c.base ?? null, c.userdata ?? null, c.rules.length])}\n`;
      let prev: readonly object[] = [];
      for (const r of c.rules) {
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
        if (++n % DIGEST_SLICE === 0) yield;
      }
    }
  }
  h.update(out);
  const digest = h.digest('hex');
  knownDesiredDigest(tables, digest);
  return digest;
}

/** desiredDigestSteps's slice, in rules. */
const DIGEST_SLICE = 8192;
