/** The shapes of the addon's socket and monitor objects; src/native.ts loads the addon. */

export interface NativeSocket {
  readonly portId: number;
  readonly closed: boolean;
  close(): void;
  generation(): number;
  dump(kind: 'table' | 'chain' | 'rule' | 'set' | 'element' | 'obj', family?: string, table?: string,
    name?: string, single?: boolean, objects?: boolean, ruleMode?: 0 | 1 | 2): Promise<unknown[]>;
  /** exprBytes: per op index, that rule's expressions as encodeExprs() gave them, or undefined (encoded now). */
  commit(ops: readonly unknown[], generation?: number, echo?: boolean,
    exprBytes?: readonly (Buffer | undefined)[]): Promise<void | { handles: [number, number][] }>;
  /** commit() of a small batch on this thread, or false (not small, or the socket busy): nothing sent. Absent from an older addon. */
  commitNow?(ops: readonly unknown[], generation?: number, echo?: boolean,
    exprBytes?: readonly (Buffer | undefined)[]): void | { handles: [number, number][] } | false;
}

export interface NativeMonitor {
  close(): void;
  setFilter(tables: [string, string][] | null, ignorePorts: number[]): void;
  progress(): [number, number, number];
  anchor(generation: number, overflowsSeen: number): void;
  /** Absent from an addon built before it. */
  skipOwn?(generation: number): void;
  /** Absent from an addon built before it (Monitor.arm). */
  arm?(socket: NativeSocket, generation: number, ops: readonly unknown[], handles: readonly number[],
    exprBytes?: readonly (Buffer | undefined)[]): boolean;
  disarm?(): void;
  pause?(): void;
  resume?(): boolean;
  ref(): void;
  unref(): void;
}

// Moved to src/native.ts; re-exported so code written against the old place still builds.
export { PROJECT_ROOT, loadAddon } from '../native.js';
