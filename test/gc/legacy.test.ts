/**
 * The iptables-legacy GC driver on the seed's Nomad state loaded into
 * x_tables (iptables-legacy-restore) inside a namespace: the dead alloc's
 * jump and chain go in one iptables-legacy-restore, untagged and live rules
 * stay, a dry run changes nothing, and a live rule added to the dead chain
 * between the save and the restore makes that restore fail and keeps it.
 */
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseSave, splitSaveLine } from '../../src/gc/legacy.js';
import { cli } from '../helpers/cli.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { DEAD, DEAD_CHAIN, LIVE, LIVE_CHAIN, NOMAD_RESTORE, file, gcYaml, tag } from './fixtures.js';

/** iptables-legacy-save without the timestamp comments, counters zeroed. */
const legacySave = (ns: Netns) => ns.exec('iptables-legacy-save', []).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');

// A PATH entry in front of the real iptables-legacy-restore that logs each run (and can meddle once).
const shims = tempDir('legacy');
const log = join(shims, 'restore.log');
const meddle = join(shims, 'meddle');
writeFileSync(join(shims, 'iptables-legacy-restore'), `#!/bin/sh
echo "$*" >> ${log}
if [ -e ${meddle} ]; then sh ${meddle}; rm -f ${meddle}; fi
exec /usr/sbin/iptables-legacy-restore "$@"
`);
chmodSync(join(shims, 'iptables-legacy-restore'), 0o755);

describe('foreign GC on iptables-legacy, the Nomad seed', () => {
  let ns: Netns;
  const path = process.env.PATH;
  beforeEach(() => {
    ns = createNetns('legacy');
    ns.exec('iptables-legacy-restore', [], NOMAD_RESTORE);
    rmSync(log, { force: true });
    process.env.PATH = `${shims}:${path}`;
  });
  afterEach(() => {
    process.env.PATH = path;
    ns.remove();
  });

  it('removes the dead alloc\'s jump and chain in one restore; untagged and live rules stay byte-identical', async () => {
    const before = legacySave(ns);
    expect(before).toContain(`:${DEAD_CHAIN} - [0:0]`);
    expect(before.split('\n').filter((l) => l.startsWith('-A'))).toHaveLength(15);
    const r = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', ns.path,
      '--live-file', file(JSON.stringify([LIVE])), '--grace', '0s', '--json');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.collected).toBe(true);
    expect(j.garbage.map((g: { id: string }) => g.id)).toEqual([DEAD]);
    // The jump, the chain's two rules by spec, the chain: one script, one restore run.
    expect(j.ops).toBe(4);
    expect(j.scripts).toHaveLength(1);
    expect(j.scripts[0].script).toBe([
      '*nat',
      `-D POSTROUTING -s 172.26.64.102/32 -m comment --comment ${tag(DEAD)} -j ${DEAD_CHAIN}`,
      `-D ${DEAD_CHAIN} -d 172.26.64.0/20 -m comment --comment ${tag(DEAD)} -j ACCEPT`,
      `-D ${DEAD_CHAIN} ! -d 224.0.0.0/4 -m comment --comment ${tag(DEAD)} -j MASQUERADE`,
      `-X ${DEAD_CHAIN}`,
      'COMMIT', '',
    ].join('\n'));
    expect(readFileSync(log, 'utf8')).toBe('--noflush --wait\n');
    const after = legacySave(ns);
    expect(after).toBe(before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n'));
    expect(after).toContain(LIVE_CHAIN);
    expect(after).toContain('-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE');
    // Nothing went through nf_tables: the namespace's nftables ruleset is still empty.
    expect(ns.exec('nft', ['list', 'ruleset']).trim()).toBe('');
    const again = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', ns.path,
      '--live-file', file(JSON.stringify([LIVE])), '--grace', '0s');
    expect(again.out).toBe('no garbage');
  });

  it('--dry-run prints the restore lines by id, exits 1 and runs no restore; the grace keeps a fresh id', async () => {
    const before = legacySave(ns);
    const live = file(JSON.stringify([LIVE]));
    const r = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', ns.path, '--live-file', live, '--grace', '0s', '--dry-run');
    expect(r.code).toBe(1);
    expect(r.out.split('\n').slice(0, 4)).toEqual([
      `# id ${DEAD} (owner nomad)`, '# iptables-legacy-restore --noflush: *nat',
      `# tag ${JSON.stringify(`name: "nomad" id: "${DEAD}"`)}: ${DEAD} is not live`,
      `-D POSTROUTING -s 172.26.64.102/32 -m comment --comment ${tag(DEAD)} -j ${DEAD_CHAIN}`,
    ]);
    expect(existsSync(log)).toBe(false);
    const graced = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', ns.path, '--live-file', live);
    expect(graced.code).toBe(0);
    expect(graced.out).toMatch(new RegExp(`# id ${DEAD}: not live, kept for its grace period`));
    expect(legacySave(ns)).toBe(before);
  });

  it('takes the backend from gc.backend when no --backend is given, and --backend overrides it', async () => {
    const live = file(JSON.stringify([LIVE]));
    const legacy = file(gcYaml('  backend: iptables-legacy\n'));
    const r = await cli('gc', '--config', legacy, '--netns', ns.path, '--live-file', live, '--grace', '0s', '--dry-run', '--json');
    expect(r.code).toBe(1);
    expect(JSON.parse(r.out).garbage.map((g: { id: string }) => g.id)).toEqual([DEAD]);
    // The flag wins over the config: nf_tables is empty here, so nothing is found.
    const over = await cli('gc', '--backend', 'nftables', '--config', legacy, '--netns', ns.path, '--live-file', live, '--grace', '0s', '--dry-run', '--json');
    expect(over.code).toBe(0);
    expect(JSON.parse(over.out).garbage).toEqual([]);
  });

  it('a live rule added to the dead chain after the save fails that restore; the retry keeps the chain and that rule', async () => {
    // Runs inside the namespace (the shim runs under nsenter), just before the first restore.
    writeFileSync(meddle, `iptables-legacy -t nat -A ${DEAD_CHAIN} -d 10.9.9.9/32 -m comment --comment 'name: "nomad" id: "${LIVE}"' -j ACCEPT\n`);
    const r = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', ns.path,
      '--live-file', file(JSON.stringify([LIVE])), '--grace', '0s', '--json');
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(readFileSync(log, 'utf8').split('\n').filter(Boolean)).toHaveLength(2);
    const after = legacySave(ns);
    expect(after).toContain(`:${DEAD_CHAIN} - [0:0]`);
    expect(after).toContain(`-A ${DEAD_CHAIN} -d 10.9.9.9/32 -m comment --comment ${tag(LIVE)} -j ACCEPT`);
    // The dead-tagged rules went, the jump into the chain too.
    expect(after.split('\n').filter((l) => l.includes(DEAD))).toEqual([]);
  });

  it('refuses the inet family and a failing save, before anything changes', async () => {
    const inet = file('tables: []\ngc:\n  foreign:\n    - { family: inet, table: nat, owner: nomad }\n', 'yaml');
    const r = await cli('gc', '--backend', 'iptables-legacy', '--config', inet, '--netns', ns.path, '--live-file', file('[]'), '--grace', '0s');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/iptables-legacy has no inet family/);
    // A path that is there but is no namespace: the command line takes it, the save cannot enter it.
    const gone = await cli('gc', '--backend', 'iptables-legacy', '--config', file(gcYaml()), '--netns', file('not a namespace'), '--live-file', file('[]'), '--grace', '0s');
    expect(gone.code).toBe(2);
    expect(gone.err).toMatch(/iptables-legacy-save.*failed/);
  });
});

describe('iptables-save parsing', () => {
  it('splits quoted words as iptables-save quotes them', () => {
    expect(splitSaveLine('-s 1.2.3.4/32 -m comment --comment "name: \\"nomad\\" id: \\"a\\"" -j X')).toEqual(
      ['-s', '1.2.3.4/32', '-m', 'comment', '--comment', 'name: "nomad" id: "a"', '-j', 'X']);
    expect(() => splitSaveLine('--comment "open')).toThrow(/unterminated/);
  });

  it('reads tables, chains (built-in or not), tags and targets; refuses lines it does not know', () => {
    const [t] = parseSave(NOMAD_RESTORE, 'seed');
    expect(t!.table).toBe('nat');
    expect(t!.chains.get('POSTROUTING')).toEqual({ base: true });
    expect(t!.chains.get(DEAD_CHAIN)).toEqual({ base: false });
    const jump = t!.rules.find((r) => r.chain === 'POSTROUTING' && r.targets.includes(DEAD_CHAIN))!;
    expect(jump.comments).toEqual([`name: "nomad" id: "${DEAD}"`]);
    expect(() => parseSave('*nat\n-I POSTROUTING -j X\nCOMMIT\n', 'x')).toThrow(/x line 2: not an -A rule line/);
    expect(() => parseSave('-A X -j Y\n', 'x')).toThrow(/outside a table/);
  });
});
