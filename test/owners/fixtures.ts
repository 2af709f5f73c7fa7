/** A config with an owners section in a temp dir, an in-process daemon (keeper + registry + control socket), helpers. */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '../../src/cli.js';
import { parseConfig, type Config } from '../../src/config/config.js';
import { Keeper } from '../../src/keeper/keeper.js';
import { OwnerRegistry, call, loadOwners, serveControl, type ControlServer } from '../../src/owners/index.js';
import type { Netns } from '../helpers/netns.js';

export const BASE_RULE = 'ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return';

/** A fresh directory for the socket and the state file (0755, so a dropped-privilege child can reach the socket). */
export function tempDir(tag = 'owners'): string {
  const d = mkdtempSync(join(tmpdir(), `nfk-${tag}-`));
  chmodSync(d, 0o755);
  made.push(d);
  return d;
}
const made: string[] = [];
process.on('exit', () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

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

export interface Daemon {
  config: Config;
  keeper: Keeper;
  registry: OwnerRegistry;
  control: ControlServer;
  socket: string;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
}

/** What `nfkeeper run` does for owners, in this process: load the state, start the keeper with it, serve the socket. */
export async function startDaemon(ns: Netns, dir: string, o: { mode?: number } = {}): Promise<Daemon> {
  const config = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
  const owners = loadOwners(config);
  const keeper = new Keeper({ config, netns: ns.path, intervalMs: 3_600_000, owners });
  keeper.on('error', () => undefined);
  await keeper.start();
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

/** Sends a raw request body (not JSON-encoded by the client). */
export function rawCall(socket: string, method: string, path: string, body: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    import('node:http').then(({ request }) => {
      const req = request({ socketPath: socket, method, path, headers: { 'content-length': Buffer.byteLength(body) } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          let parsed: unknown = text;
          try { parsed = JSON.parse(text); } catch { /* keep text */ }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      });
      req.on('error', reject);
      req.end(body);
    }, reject);
  });
}

export async function cli(...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'nfkeeper', ...args], { out: (s) => out.push(s), err: (s) => err.push(s) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** `nft list table` without handles and counters, for before/after comparisons. */
export function listTable(ns: Netns): string {
  return ns.exec('nft', ['list', 'table', 'ip', 'nfkeeper']).replace(/counter packets \d+ bytes \d+/g, 'counter');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
