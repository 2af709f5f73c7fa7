export * from './errors.js';
export * from './netlink/expr.js';
export * from './netlink/objects.js';
export { Batch, describeOp, type Op } from './netlink/batch.js';
export { validateOp } from './netlink/validate.js';
export { NftSocket, open, type OpenOptions, type CommitOptions } from './netlink/socket.js';
export { Monitor, type MonitorBatch, type MonitorEvent, type MonitorOptions } from './netlink/monitor.js';
export { compileRule, renderRule, ruleKey, rulesEqual, commentOf, commentUserdata, decodeXtComment, xtComments,
  type CompiledRule, type CompileContext, type SetResolver } from './rules/index.js';
export { loadConfig, parseConfig, type Config, type TableConfig, type ChainConfig } from './config/config.js';
export { Keeper, cleanup, checkOnce, type KeeperOptions, type RepairReport, type KeeperStatus } from './keeper/keeper.js';
export { TableOwnedError } from './keeper/reconcile.js';
