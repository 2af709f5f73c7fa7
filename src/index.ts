/** The library: each folder's public API (its index.ts), plus errors, metrics and durations. */
export * from './base/errors.js';
export * from './netlink/index.js';
export { compileRule, renderRule, ruleKey, rulesEqual, commentOf, commentUserdata, decodeXtComment, xtComments,
  type CompiledRule, type CompileContext, type SetResolver } from './rules/index.js';
export { loadConfig, parseConfig, parseNftConfig, MAX_CONFIG_BYTES, MAX_CONFIG_RULES, type Config, type TableConfig, type ChainConfig } from './config/index.js';
export {
  Keeper, cleanup, checkOnce, Reconciler, TableOwnedError, type CheckResult, type KeeperOptions, type Observation, type PassInput,
  type PassOutcome, type PassResult, type RepairReport, type KeeperStatus,
} from './keeper/index.js';
export { KeeperMetrics } from './base/metrics.js';
export * from './owners/index.js';
export * from './gc/index.js';
export { parseDuration, DurationError } from './base/duration.js';
