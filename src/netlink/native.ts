/** Loads the addon once and hands it the error class it builds failures from. */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { NetlinkError } from '../errors.js';

export interface NativeSocket {
  readonly portId: number;
  readonly closed: boolean;
  close(): void;
  generation(): number;
  dump(kind: 'table' | 'chain' | 'rule' | 'set' | 'element', family?: string, table?: string,
    name?: string, single?: boolean, objects?: boolean): Promise<unknown[]>;
  commit(ops: readonly unknown[], generation?: number): Promise<void>;
}

export interface NativeMonitor {
  close(): void;
  setFilter(tables: [string, string][] | null, ignorePorts: number[]): void;
  ref(): void;
  unref(): void;
}

interface Addon {
  NftSocket: new (netns?: string, options?: { receiveBufferLimit?: number }) => NativeSocket;
  NftMonitor: new (netns: string | undefined, onBatch: (batch: unknown) => void,
    tables: [string, string][] | null, ignorePorts: number[]) => NativeMonitor;
  init(errorClass: typeof NetlinkError): void;
  sdNotify(socketPath: string, message: string): number;
  /** SO_PEERCRED of a connected Unix socket; a number is the errno. */
  peerCred(fd: number): { pid: number; uid: number; gid: number } | number;
  /** The namespace's network interfaces (RTM_GETLINK); a number is the errno. */
  links(netns?: string): { index: number; name: string }[] | number;
}

let addon: Addon | undefined;

/** The project root: this file sits in src/netlink/ or dist/netlink/. */
export const PROJECT_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export function loadAddon(): Addon {
  if (addon) return addon;
  // NFKEEPER_ADDON: another build of the addon, such as scripts/sanitize.sh's
  // AddressSanitizer build, used without replacing build/Release.
  const path = process.env.NFKEEPER_ADDON || join(PROJECT_ROOT, 'build', 'Release', 'nfkeeper.node');
  if (!existsSync(path)) {
    throw new Error(`the native addon is not built (${path}); run 'npm run build:native' ` +
      '(it needs libnftnl-dev, libmnl-dev, pkg-config and g++)');
  }
  const require = createRequire(import.meta.url);
  addon = require(path) as Addon;
  addon.init(NetlinkError);
  return addon;
}
