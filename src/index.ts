export * from './errors.js';
export * from './netlink/expr.js';
export * from './netlink/objects.js';
export { Batch, describeOp, type Op } from './netlink/batch.js';
export { validateOp } from './netlink/validate.js';
export { NftSocket, open, type OpenOptions, type CommitOptions } from './netlink/socket.js';
export { Monitor, type MonitorBatch, type MonitorEvent, type MonitorOptions } from './netlink/monitor.js';
export type { NftConn, NftHost, NftWatch } from './netlink/conn.js';
export { kernelHost } from './netlink/host.js';
export { commitGuarded, type GuardOptions, type GuardedOutcome, type GuardedStep } from './netlink/guard.js';
export { compileRule, renderRule, ruleKey, rulesEqual, commentOf, commentUserdata, decodeXtComment, xtComments,
  type CompiledRule, type CompileContext, type SetResolver } from './rules/index.js';
export { loadConfig, parseConfig, type Config, type TableConfig, type ChainConfig } from './config/config.js';
export { Keeper, cleanup, checkOnce, type CheckResult, type KeeperOptions, type PassOutcome, type RepairReport, type KeeperStatus } from './keeper/keeper.js';
export { Reconciler, type Look, type PassInput, type PassResult } from './keeper/reconciler.js';
export { KeeperMetrics } from './metrics.js';
export { TableOwnedError } from './keeper/reconcile.js';
