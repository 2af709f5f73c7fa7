/**
 * The statements a set, a set element or a dynset carries for each element (`counter`, `limit rate
 * 10/second`, `quota over 10 mbytes`, `ct count 5`; at most two, as the kernel takes): compiled as
 * a rule's statements are, rendered back as nft lists them, and compared without their state.
 */
import { RuleSyntaxError } from '../base/errors.js';
import { MAX_STATEFUL_EXPRS, STATEFUL_KINDS, type Expr, type Family, type StatefulExpr } from '../netlink/expr.js';
import { compileRule } from './compile.js';
import { renderRule } from './render.js';

const KINDS = new Set<string>(STATEFUL_KINDS);

export function isStateful(e: Expr): e is StatefulExpr {
  return KINDS.has(e.kind);
}

/** `counter quota 100 mbytes` into its expressions; a RuleSyntaxError (with the column in `text`) if it is not such statements. */
export function statefulExprs(text: string, family: Family): StatefulExpr[] {
  const exprs = compileRule(text, { family, table: 'set', chain: 'set' }).exprs;
  const bad = exprs.find((e) => !isStateful(e));
  if (bad || exprs.length === 0) {
    throw new RuleSyntaxError(text, 1, text.split(/\s/)[0] ?? '', 'counter, limit, quota or ct count',
      'a set holds only stateful statements');
  }
  if (exprs.length > MAX_STATEFUL_EXPRS) {
    throw new RuleSyntaxError(text, 1, text, `at most ${MAX_STATEFUL_EXPRS} statements`, `${exprs.length} statements (the kernel keeps at most ${MAX_STATEFUL_EXPRS} per element)`);
  }
  return exprs as StatefulExpr[];
}

/** An expression without its state: a counter's packets and bytes, a quota's bytes used. */
export function withoutState(e: StatefulExpr): StatefulExpr {
  if (e.kind === 'counter') return { kind: 'counter' };
  if (e.kind === 'quota') return { kind: 'quota', bytes: e.bytes, flags: e.flags ?? 0 };
  if (e.kind === 'connlimit') return { kind: 'connlimit', count: e.count, flags: e.flags ?? 0 };
  return e;
}

/** The statements as nft lists them on a set (`counter quota 100 mbytes`), their state left out. */
export function statefulText(exprs: readonly StatefulExpr[], family: Family): string {
  return renderRule({ exprs: exprs.map(withoutState) }, family);
}

/** What the comparison sees of a list of them: kinds and settings, no state. */
export function statefulKey(exprs: readonly StatefulExpr[] | undefined): string {
  return exprs?.length ? JSON.stringify(exprs.map((e) => {
    const x = withoutState(e) as Record<string, unknown>;
    return Object.keys(x).sort().map((k) => [k, x[k]]);
  })) : '';
}
