export * from './errors.js';
export * from './netlink/expr.js';
export * from './netlink/objects.js';
export { Batch, describeOp, validateOp, type Op } from './netlink/batch.js';
export { NftSocket, open, type OpenOptions, type CommitOptions } from './netlink/socket.js';
export { Monitor, type MonitorBatch, type MonitorEvent, type MonitorOptions } from './netlink/monitor.js';
