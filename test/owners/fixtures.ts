/**
 * A config with an owners section in a temp dir (ownersYaml, writeConfig), an in-process daemon
 * (keeper + registry + control socket: startDaemon, or withDaemon for a namespace, a temp dir and
 * a daemon removed afterwards), owner specs, a raw API call, and listTable for before/after
 * comparisons. Temp dirs come from test/helpers/tmp.ts (tempDir), the CLI from test/helpers/cli.ts.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseConfig, type Config } from '../../src/config/config.js';
import type { Keeper } from '../../src/keeper/keeper.js';
import { open, type NftSocket } from '../../src/netlink/socket.js';
import { OwnerRegistry, call, loadOwners, serveControl, type ControlServer } from '../../src/owners/index.js';
import { startKeeper } from '../helpers/keeper.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';

export const BASE_RULE = 'ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return';

/** @deprecated import { tempDir } from test/helpers/tmp.js; kept while other branches still import it from here. */
export { tempDir } from '../helpers/tmp.js';

export function ownersYaml(dir: string): string {
  return `
tables:
  - family: ip
    name: nfkeeper
    chains:
      - name: postrouting
        type: nat
        hook: postrouting
        priority: srcnat
        rules:
          - ${BASE_RULE}
      - name: prerouting
        type: nat
        hook: prerouting
        priority: dstnat
owners:
  family: ip
  table: nfkeeper
  dispatch: [postrouting, prerouting]
  socket: ${join(dir, 'nfkeeper.sock')}
  state: ${join(dir, 'state', 'owners.json')}
`;
}

/**
 * ownersYaml(dir) with an input-hooked table `ip big` of `rules` rules before its owners section
 * (`owners: false`: the section left out), and `extraTables` (YAML list items) after it.
 */
export function ownersYamlWithBigChain(dir: string, rules: number, o: { owners?: boolean; extraTables?: string } = {}): string {
  const big = Array.from({ length: rules }, (_, i) => `          - ip saddr 10.${(i >> 8) & 255}.${i & 255}.1 tcp dport 22 accept`).join('\n');
  const base = ownersYaml(dir);
  const at = base.indexOf('owners:');
  return `${base.slice(0, at)}  - family: ip
    name: big
    chains:
      - name: input
        type: filter
        hook: input
        priority: filter
        rules:
${big}
${o.extraTables ?? ''}${o.owners === false ? '' : base.slice(at)}`;
}

export function writeConfig(dir: string): string {
  const f = join(dir, 'config.yaml');
  writeFileSync(f, ownersYaml(dir));
  return f;
}

/** A typical owner: one chain of `n - 1` rules and one jump into it from postrouting (n rules in all). */
export function ownerSpec(i: number, n = 3): { chains: { name: string; rules: string[] }[]; jumps: Record<string, string[]> } {
  const net = `10.${100 + ((i >> 16) & 127)}.${(i >> 8) & 255}.${i & 255}`;
  const rules = Array.from({ length: n - 1 }, (_, k) => (k === n - 2
    ? 'ip daddr != 224.0.0.0/4 masquerade'
    : `ip daddr 172.16.${k & 255}.0/24 tcp dport ${1000 + k} return`));
  return { chains: [{ name: 'masq', rules }], jumps: { postrouting: [`ip saddr ${net}/32 jump masq`] } };
}

export interface DaemonOptions {
  mode?: number;
  follow?: boolean;
  /** The config, instead of ownersYaml(dir). */
  yaml?: string;
}

export interface Daemon {
  config: Config;
  keeper: Keeper;
  registry: OwnerRegistry;
  control: ControlServer;
  socket: string;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
}

/**
 * What `nfkeeper run` does for owners, in this process: load the state, start the keeper with it,
 * serve the socket. `dir` (the socket's and the state's) is made 0755, so that a dropped-privilege
 * child can reach the socket and be refused by the socket's own mode or credentials check.
 */
export async function startDaemon(ns: Netns, dir: string, o: DaemonOptions = {}): Promise<Daemon> {
  chmodSync(dir, 0o755);
  const config = parseConfig(o.yaml ?? ownersYaml(dir), join(dir, 'config.yaml'));
  const owners = loadOwners(config);
  const keeper = await startKeeper(ns, { config, owners, ...(o.follow !== undefined ? { follow: o.follow } : {}) });
  const registry = new OwnerRegistry(config, owners, (next) => keeper.setOwners(next));
  const socket = config.owners!.socket;
  const control = await serveControl({ path: socket, registry, mode: o.mode, status: () => ({ ...keeper.status(), owners: registry.size }) });
  return {
    config, keeper, registry, control, socket,
    api: (method, path, body) => call(socket, method, path, body) as Promise<{ status: number; body: any }>,
    stop: async () => {
      await control.close();
      await keeper.stop();
    },
  };
}

export { rawCall } from '../helpers/http.js';

/** @deprecated import { cli } from test/helpers/cli.js; kept while other branches still import it from here. */
export { cli } from '../helpers/cli.js';

/** `nft list table` without handles and counters, for before/after comparisons. */
export function listTable(ns: Netns): string {
  return ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper']).replace(/counter packets \d+ bytes \d+/g, 'counter');
}

/** @deprecated import { sleep } from test/helpers/wait.js; kept while other branches still import it from here. */
export { sleep } from '../helpers/wait.js';

export interface DaemonFixture {
  ns: Netns;
  /** The daemon's temp dir: config, socket, state. */
  dir: string;
  d: Daemon;
  /** A socket of the test's own in `ns`. */
  sock: NftSocket;
}

/**
 * startDaemon() in a fresh namespace and temp dir; afterwards, also on failure, the socket is
 * closed, the daemon stopped and the namespace removed (the dir goes with the test).
 */
export function withDaemon<T>(tag: string, fn: (f: DaemonFixture) => Promise<T> | T, o: DaemonOptions | ((dir: string) => DaemonOptions) = {}): Promise<T> {
  return withNetns(async (ns) => {
    const dir = tempDir(tag);
    const d = await startDaemon(ns, dir, typeof o === 'function' ? o(dir) : o);
    try {
      const sock = open({ netns: ns.path });
      try {
        return await fn({ ns, dir, d, sock });
      } finally {
        sock.close();
      }
    } finally {
      await d.stop();
    }
  }, tag);
}

/** An owner of about 20 KiB whose rules are padded with blanks (the rule language skips them): big on disk, quick to compile. */
export function paddedSpec(i: number): { chains: { name: string; rules: string[] }[]; jumps: Record<string, string[]> } {
  return { chains: [{ name: 'masq', rules: Array.from({ length: 5 }, (_, k) => `ip daddr 10.${i}.${k}.0/24${' '.repeat(4000)}return`) }],
    jumps: { postrouting: [`ip saddr 10.100.0.${i} jump masq`] } };
}
