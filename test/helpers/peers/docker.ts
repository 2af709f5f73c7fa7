/**
 * Docker's NAT rules as iptables-nft writes them (`iptables-save -t nat` of
 * a node with the default bridge, a user network and published ports),
 * translated to nft's command form by iptables-restore-translate itself.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Netns } from '../netns.js';

export const DOCKER_SAVE = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A POSTROUTING -s 172.18.0.0/16 ! -o br-5c1e2d3f4a5b -j MASQUERADE
-A POSTROUTING -s 172.17.0.2/32 -d 172.17.0.2/32 -p tcp -m tcp --dport 80 -j MASQUERADE
-A POSTROUTING -s 172.18.0.3/32 -d 172.18.0.3/32 -p udp -m udp --dport 53 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
-A DOCKER -i br-5c1e2d3f4a5b -j RETURN
-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80
-A DOCKER ! -i br-5c1e2d3f4a5b -p udp -m udp --dport 5353 -j DNAT --to-destination 172.18.0.3:53
COMMIT
`;

/**
 * The same layout with `containers` containers on the default bridge, each
 * publishing one port (Docker adds the hairpin MASQUERADE and the DNAT per
 * published port).
 */
export function dockerSave(containers: number): string {
  if (containers <= 0) return DOCKER_SAVE;
  const lines = DOCKER_SAVE.trimEnd().split('\n');
  const commit = lines.pop()!;
  for (let c = 0; c < containers; c++) {
    const ip = `172.17.${(c + 3) >> 8}.${(c + 3) & 255}`;
    const proto = c % 4 === 3 ? 'udp' : 'tcp';
    lines.push(`-A POSTROUTING -s ${ip}/32 -d ${ip}/32 -p ${proto} -m ${proto} --dport 80 -j MASQUERADE`);
    lines.push(`-A DOCKER ! -i docker0 -p ${proto} -m ${proto} --dport ${9000 + c} -j DNAT --to-destination ${ip}:80`);
  }
  return [...lines, commit, ''].join('\n');
}

/** iptables-restore-translate's command form, with the table renamed to one nfkeeper may own. */
export function dockerFile(ns: Netns, dir: string, save = DOCKER_SAVE, table = 'docker_nat'): string {
  const saved = join(dir, `docker-${table}.iptables`);
  writeFileSync(saved, save);
  return ns.exec('iptables-restore-translate', ['-f', saved])
    // The translation is for a fresh nft; nfkeeper owns its own table, so rename it.
    .replace(/ ip nat /g, ` ip ${table} `).replace(/add table ip nat/, `add table ip ${table}`);
}
