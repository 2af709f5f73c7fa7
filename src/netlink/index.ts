/** Netfilter netlink: the expression IR, kernel objects, batches and their validation, the socket, the monitor, the guarded commit. */
export * from './expr.js';
export * from './objects.js';
export { Batch } from './batch.js';
export { describeOp, type Op, type Verb, type TableOp, type ChainOp, type RuleOp, type SetOp, type ElementOp } from './ops.js';
export { validateOp } from './validate.js';
export { NftSocket, open, type OpenOptions, type CommitOptions } from './socket.js';
export { Monitor } from './monitor.js';
export type { MonitorBatch, MonitorEvent, MonitorOptions } from './events.js';
export type { NftConn, NftHost, NftWatch } from './conn.js';
export { kernelHost } from './host.js';
export { commitGuarded, type GuardOptions, type GuardedOutcome, type GuardedStep } from './guard.js';
