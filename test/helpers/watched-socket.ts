/**
 * A socket in a namespace that counts its reads of rules (digests or decoded) and records each
 * commit's options, result and the reads before it; a test may act on a commit's outcome
 * (afterCommit) or give the socket other kernel code (kernel, test/helpers/kernel-code.ts; null: none to name).
 */
import type { CommitOptions, CommitResult, NftConn } from '../../src/netlink/conn.js';
import type { KernelCode } from '../../src/netlink/kernel-code.js';
import { open } from '../../src/netlink/socket.js';
import type { Netns } from './netns.js';

export interface WatchedCommit {
  options: CommitOptions;
  result: void | CommitResult;
  /** Reads of rules before this commit returned. */
  readsBefore: number;
}

export interface WatchOptions {
  receiveBufferLimit?: number;
  afterCommit?: (r: void | CommitResult) => void | CommitResult;
  kernel?: KernelCode | null;
}

export function watchedSocket(ns: Pick<Netns, 'path'>, options: WatchOptions = {}) {
  const real = open({ netns: ns.path, ...(options.receiveBufferLimit ? { receiveBufferLimit: options.receiveBufferLimit } : {}) });
  const commits: WatchedCommit[] = [];
  const seen = {
    ruleReads: 0,
    commits,
    /** Reads of rules before the last commit returned (0 before any). */
    get readsBeforeCommit(): number {
      return commits.at(-1)?.readsBefore ?? 0;
    },
  };
  const { kernel } = options;
  const conn = new Proxy(real, {
    get(target, p, recv) {
      if (p === 'kernelCode' && kernel !== undefined) return kernel === null ? undefined : () => kernel;
      const v = Reflect.get(target, p, recv);
      if (typeof v !== 'function') return v;
      if (p === 'listRules' || p === 'listRuleDigests') {
        return (...args: unknown[]) => {
          seen.ruleReads++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      }
      if (p === 'commit') {
        return async (batch: unknown, commitOptions: CommitOptions = {}) => {
          const result = await (v as (...a: unknown[]) => Promise<void | CommitResult>).call(target, batch, commitOptions);
          commits.push({ options: commitOptions, result, readsBefore: seen.ruleReads });
          return options.afterCommit?.(result) ?? result;
        };
      }
      return v.bind(target);
    },
  }) as NftConn;
  return { conn, seen, close: () => real.close() };
}
