/** The keeper: the reconcile loop and its one pass, the one-shot forms, drift, protection, the fight back-off and the metrics endpoint. */
export {
  Keeper, checkOnce, cleanup, type Cause, type CheckResult, type KeeperOptions, type KeeperStatus, type PassOutcome, type RepairReport,
} from './keeper.js';
export { Reconciler, type Observation, type PassInput, type PassResult } from './reconciler.js';
export { TableOwnedError, diffTable, type Protection, type TableDiff } from './table.js';
export { planTable } from './plan.js';
export { renderDrift } from './render-drift.js';
export type { Drift, DriftKind } from '../model/drift.js';
export { DEFAULT_FIGHT, Fight, type FightOptions } from './fight.js';
export { parseListen, serveMetrics } from './http.js';
