/**
 * What GC must never touch: untagged rules, live ids, other owners' tags,
 * chains still reached from a rule that stays (a jump or a verdict map),
 * and what it must follow: chains reached only from garbage, transitively.
 */
import { describe, expect, it } from 'vitest';
import { GraceTracker, collect, scan } from '../../src/gc/index.js';
import { parseConfig } from '../../src/config/config.js';
import { socketPerTest } from '../helpers/netns-hooks.js';
import { DEAD, DEAD_CHAIN, LIVE, NOMAD_RESTORE, save, tag } from './fixtures.js';

const foreign = parseConfig('tables: []\ngc:\n  foreign:\n    - { family: ip, table: nat, owner: nomad }\n').gc!.foreign;
const OTHER = '11111111-2222-3333-4444-555555555555';

describe('foreign GC safety', () => {
  const { ns, sock } = socketPerTest('gcsafe');
  const ipt = (...args: string[]) => ns.exec('iptables-nft', ['-t', 'nat', ...args]);

  it('keeps untagged rules, live ids, other owners, and a chain a surviving rule still jumps to', async () => {
    ns.exec('iptables-nft-restore', [], NOMAD_RESTORE);
    // An untagged rule that also jumps to the dead alloc's chain: the chain must stay.
    ipt('-A', 'POSTROUTING', '-s', '10.9.9.9/32', '-j', DEAD_CHAIN);
    // Another owner's tag with the same id shape, and an untagged rule in the same chain.
    ipt('-A', 'POSTROUTING', '-s', '10.1.1.1/32', '-m', 'comment', '--comment', `name: "consul" id: "${OTHER}"`, '-j', 'ACCEPT');
    ipt('-A', 'POSTROUTING', '-s', '10.1.1.2/32', '-j', 'ACCEPT');
    const before = save(ns);
    const r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs: 0, tracker: new GraceTracker() });
    expect(r.collected).toBe(true);
    expect(r.garbage).toHaveLength(1);
    // The chain object stays, because the untagged rule still jumps to it; the rules tagged with the
    // dead id go (the jump, and the two inside the chain), each by handle.
    expect(r.garbage[0]!.chains).toEqual([]);
    expect(r.garbage[0]!.rules.map((x) => x.chain)).toEqual(['POSTROUTING', DEAD_CHAIN, DEAD_CHAIN]);
    expect(r.garbage[0]!.rules[0]!.text).toContain(`jump ${DEAD_CHAIN}`);
    const after = save(ns);
    expect(after).toBe(before.split('\n').filter((l) => !l.includes(DEAD)).join('\n'));
    expect(after).toContain(`:${DEAD_CHAIN} - [0:0]`);
    expect(after).toContain(`-A POSTROUTING -s 10.9.9.9/32 -j ${DEAD_CHAIN}`);
    expect(after).toContain('consul');
    expect(after).toContain('-A POSTROUTING -s 10.1.1.2/32 -j ACCEPT');
  });

  it('an empty live set still leaves untagged rules and other owners alone', async () => {
    ns.exec('iptables-nft-restore', [], NOMAD_RESTORE);
    ipt('-A', 'POSTROUTING', '-m', 'comment', '--comment', `name: "consul" id: "${OTHER}"`, '-j', 'ACCEPT');
    await collect(sock, { foreign, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    const after = save(ns);
    expect(after).not.toContain('nomad');
    expect(after).not.toMatch(/CNI-[0-9a-f]{24}/);
    for (const keep of ['CNI-HOSTPORT-MASQ', 'CNI-HOSTPORT-SETMARK', 'CNI-HOSTPORT-DNAT', '-A DOCKER -i docker0 -j RETURN',
      '-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE', 'consul']) expect(after).toContain(keep);
  });

  it('follows chains reached only from garbage transitively, and stops at a chain holding a live tag', async () => {
    ipt('-N', 'CNI-DN-dead');
    ipt('-N', 'CNI-DN-dead2');
    ipt('-N', 'CNI-mixed');
    ipt('-A', 'PREROUTING', '-m', 'comment', '--comment', `name: "nomad" id: "${DEAD}"`, '-j', 'CNI-DN-dead');
    ipt('-A', 'CNI-DN-dead', '-p', 'tcp', '--dport', '8080', '-j', 'CNI-DN-dead2');   // untagged, inside garbage
    ipt('-A', 'CNI-DN-dead2', '-p', 'tcp', '-j', 'DNAT', '--to-destination', '172.26.64.102:8080');
    ipt('-A', 'PREROUTING', '-m', 'comment', '--comment', `name: "nomad" id: "${DEAD}"`, '-j', 'CNI-mixed');
    ipt('-A', 'CNI-mixed', '-m', 'comment', '--comment', `name: "nomad" id: "${LIVE}"`, '-j', 'RETURN');
    const r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs: 0, tracker: new GraceTracker() });
    expect(r.garbage[0]!.chains.map((c) => c.name).sort()).toEqual(['CNI-DN-dead', 'CNI-DN-dead2']);
    expect(r.garbage[0]!.rules).toHaveLength(2);
    const after = save(ns);
    expect(after).not.toContain('CNI-DN-dead');
    expect(after).toContain(':CNI-mixed - [0:0]');
    expect(after).toContain(`-A CNI-mixed -m comment --comment "name: \\"nomad\\" id: \\"${LIVE}\\"" -j RETURN`);
    expect(after).not.toContain(DEAD);
  });

  it('one table listed for two owners: a rule tagged by the other, live owner keeps its chain', async () => {
    ipt('-N', 'CNI-shared');
    ipt('-A', 'POSTROUTING', '-m', 'comment', '--comment', `name: "nomad" id: "${DEAD}"`, '-j', 'CNI-shared');
    ipt('-A', 'CNI-shared', '-m', 'comment', '--comment', `name: "consul" id: "${OTHER}"`, '-j', 'ACCEPT');
    const two = parseConfig(`tables: []
gc:
  foreign:
    - { family: ip, table: nat, owner: nomad }
    - { family: ip, table: nat, owner: consul }
`).gc!.foreign;
    const r = await collect(sock, { foreign: two, live: new Set([OTHER]), graceMs: 0, tracker: new GraceTracker() });
    expect(r.garbage).toHaveLength(1);
    expect(r.garbage[0]).toMatchObject({ id: DEAD, owner: 'nomad', chains: [] });
    expect(r.garbage[0]!.rules.map((x) => x.chain)).toEqual(['POSTROUTING']);
    const after = save(ns);
    expect(after).toContain(':CNI-shared - [0:0]');
    expect(after).toContain(`-A CNI-shared -m comment --comment "name: \\"consul\\" id: \\"${OTHER}\\"" -j ACCEPT`);
  });

  it('keeps a chain a verdict map still points at (the kernel reference count says so)', async () => {
    ns.nft(`add table ip nat
add chain ip nat POSTROUTING { type nat hook postrouting priority srcnat; }
add chain ip nat CNI-vm
add rule ip nat CNI-vm accept comment "nomad:${DEAD}"
add rule ip nat POSTROUTING ip saddr 172.26.64.102 jump CNI-vm comment "nomad:${DEAD}"
add rule ip nat POSTROUTING ip saddr vmap { 10.9.9.9 : jump CNI-vm }
add chain ip nat CNI-plain
add rule ip nat CNI-plain accept comment "nomad:${DEAD}"
add rule ip nat POSTROUTING ip saddr 172.26.64.103 jump CNI-plain comment "nomad:${DEAD}"
`);
    // nft's own comment (rule userdata), matched with a tag pattern.
    const f = parseConfig('tables: []\ngc:\n  foreign:\n    - { family: ip, table: nat, tag: "nomad:<id>" }\n').gc!.foreign;
    const s = await scan(sock, { foreign: f, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    expect(s.garbage).toHaveLength(1);
    expect(s.garbage[0]!.chains.map((c) => c.name)).toEqual(['CNI-plain']);
    // Both tagged jumps go, the vmap rule (untagged) stays, and the tagged rule inside CNI-vm: it is a dead tag.
    expect(s.garbage[0]!.rules.map((x) => `${x.chain} ${x.text}`).sort()).toEqual([
      `CNI-vm accept comment "nomad:${DEAD}"`,
      `POSTROUTING ip saddr 172.26.64.102 jump CNI-vm comment "nomad:${DEAD}"`,
      `POSTROUTING ip saddr 172.26.64.103 jump CNI-plain comment "nomad:${DEAD}"`,
    ].sort());
    await collect(sock, { foreign: f, live: new Set(), graceMs: 0, tracker: new GraceTracker() });
    const text = ns.exec('nft', ['list', 'table', 'ip', 'nat']);
    expect(text).toContain('chain CNI-vm {');
    expect(text).toContain('vmap { 10.9.9.9 : jump CNI-vm }');
    expect(text).not.toContain('CNI-plain');
    expect(text).not.toContain('nomad:');
  });

  it('grace: an id missing for less than the grace period is kept; it goes once the period has passed', async () => {
    ns.exec('iptables-nft-restore', [], NOMAD_RESTORE);
    const before = save(ns);
    const tracker = new GraceTracker();
    const graceMs = 5 * 60_000;
    const t0 = 1_000_000;
    let r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs, tracker, now: t0 });
    expect(r.collected).toBe(false);
    expect(r.pending).toEqual([{ id: DEAD, missingForMs: 0 }]);
    r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs, tracker, now: t0 + graceMs - 1 });
    expect(r.collected).toBe(false);
    expect(save(ns)).toBe(before);
    // Back in the live set: its clock is forgotten.
    r = await collect(sock, { foreign, live: new Set([LIVE, DEAD]), graceMs, tracker, now: t0 + graceMs + 1 });
    expect(r.pending).toEqual([]);
    expect(tracker.firstMissing.size).toBe(0);
    const t1 = t0 + 2 * graceMs;
    r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs, tracker, now: t1 });
    expect(r.collected).toBe(false);
    r = await collect(sock, { foreign, live: new Set([LIVE]), graceMs, tracker, now: t1 + graceMs });
    expect(r.collected).toBe(true);
    expect(r.garbage.map((g) => g.id)).toEqual([DEAD]);
    expect(save(ns)).not.toContain(DEAD_CHAIN);
  });
});
