/**
 * The statements a set, a set element or a dynset carries for each element (`counter`, `limit rate
 * 10/second`, `quota over 10 mbytes`, `ct count 5`; at most two, as the kernel takes): compiled as
 * a rule's statements are (compile.ts compileStatements), rendered back as nft lists them (render.ts
 * renderStatements), and compared without their state (here: below both, so keyed.ts can use it).
 */
import { STATEFUL_KINDS, type Expr, type StatefulExpr } from '../netlink/expr.js';

const KINDS = new Set<string>(STATEFUL_KINDS);

export function isStateful(e: Expr): e is StatefulExpr {
  return KINDS.has(e.kind);
}

/** An expression without its state: a counter's packets and bytes, a quota's bytes used. */
export function withoutState(e: StatefulExpr): StatefulExpr {
  if (e.kind === 'counter') return { kind: 'counter' };
  if (e.kind === 'quota') return { kind: 'quota', bytes: e.bytes, flags: e.flags ?? 0 };
  if (e.kind === 'connlimit') return { kind: 'connlimit', count: e.count, flags: e.flags ?? 0 };
  return e;
}

/** What the comparison sees of a list of them: kinds and settings, no state. */
export function statefulKey(exprs: readonly StatefulExpr[] | undefined): string {
  return exprs?.length ? JSON.stringify(exprs.map((e) => {
    const x = withoutState(e) as Record<string, unknown>;
    return Object.keys(x).sort().map((k) => [k, x[k]]);
  })) : '';
}
