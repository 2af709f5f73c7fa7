/**
 * The seed's Nomad `iptables -t nat -L` state, as iptables-nft-restore input (NOMAD_RESTORE, loaded
 * by restoreNomad), and helpers: save() lists every table for byte comparisons, file() writes a
 * file into this test file's temp dir, gcYaml() a gc-only config.
 *   const ns = netnsPerTest('gc', restoreNomad);  // from test/helpers/netns-hooks.js
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';

export const DEAD = '3e803d29-4f9d-ad8b-adb6-31456a39db69';
export const LIVE = 'ee25f5d7-dcb9-b336-fe3e-27e365aa5cd0';
export const DEAD_CHAIN = 'CNI-6fcd2f53d5f720ec4eb5f04d';
export const LIVE_CHAIN = 'CNI-06d73cb6cdf7130196e2018a';

export const tag = (id: string) => `"name: \\"nomad\\" id: \\"${id}\\""`;

export const NOMAD_RESTORE = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:${LIVE_CHAIN} - [0:0]
:${DEAD_CHAIN} - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-HOSTPORT-MASQ - [0:0]
:CNI-HOSTPORT-SETMARK - [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A POSTROUTING -s 172.26.64.102/32 -m comment --comment ${tag(DEAD)} -j ${DEAD_CHAIN}
-A POSTROUTING -s 172.26.64.101/32 -m comment --comment ${tag(LIVE)} -j ${LIVE_CHAIN}
-A ${LIVE_CHAIN} -d 172.26.64.0/20 -m comment --comment ${tag(LIVE)} -j ACCEPT
-A ${LIVE_CHAIN} ! -d 224.0.0.0/4 -m comment --comment ${tag(LIVE)} -j MASQUERADE
-A ${DEAD_CHAIN} -d 172.26.64.0/20 -m comment --comment ${tag(DEAD)} -j ACCEPT
-A ${DEAD_CHAIN} ! -d 224.0.0.0/4 -m comment --comment ${tag(DEAD)} -j MASQUERADE
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --or-mark 0x2000
-A DOCKER -i docker0 -j RETURN
COMMIT
`;

export function allocId(i: number): string {
  const h = i.toString(16).padStart(8, '0');
  return `${h}-0000-4000-8000-${h.padStart(12, '0')}`;
}

/** iptables-nft-restore input of `n` dead Nomad allocations (a tagged jump, a CNI chain, two tagged rules each) and one live one, LIVE, last. */
export function manyAllocs(n: number): string {
  const lines = ['*nat', ':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]'];
  const chain = (i: number) => `CNI-${i.toString(16).padStart(24, '0')}`;
  for (let i = 0; i <= n; i++) lines.push(`:${chain(i)} - [0:0]`);
  lines.push('-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE');
  for (let i = 0; i <= n; i++) {
    const id = i === n ? LIVE : allocId(i);
    const ip = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
    lines.push(`-A POSTROUTING -s ${ip}/32 -m comment --comment ${tag(id)} -j ${chain(i)}`);
    lines.push(`-A ${chain(i)} -d 172.26.64.0/20 -m comment --comment ${tag(id)} -j ACCEPT`);
    lines.push(`-A ${chain(i)} ! -d 224.0.0.0/4 -m comment --comment ${tag(id)} -j MASQUERADE`);
  }
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** Loads the Nomad seed into `ns` (a setup for netnsPerTest/netnsPerSuite). */
export function restoreNomad(ns: Netns): void {
  ns.exec('iptables-nft-restore', [], NOMAD_RESTORE);
}

/** iptables-nft-save of every table, without the timestamped comment lines and with counters zeroed. */
export function save(ns: Netns): string {
  return ns.exec('iptables-nft-save', []).split('\n').filter((l) => !l.startsWith('#'))
    .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
}

export const dir = tempDir('gc');
let n = 0;
export function file(text: string, ext = 'json'): string {
  const p = join(dir, `f${++n}.${ext}`);
  writeFileSync(p, text);
  return p;
}

export function gcYaml(extra = '', live?: string): string {
  return `tables: []
gc:
  foreign:
    - family: ip
      table: nat
      owner: nomad
${live ? `  live:\n    file: ${live}\n` : ''}${extra}`;
}

/** @deprecated import { cli } from test/helpers/cli.js; kept while other branches still import it from here. */
export { cli } from '../helpers/cli.js';
