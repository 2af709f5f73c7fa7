/**
 * The daemon's foreign GC pass on iptables-legacy (GcLoop, backend iptables-legacy) with registered
 * owners as live ids (the real OwnerRegistry; run.ts gives the loop its liveIds and its exclusive
 * turn), swept against the pass's steps: the Nomad seed in x_tables, and the dead allocation's id
 * registered as an owner before the pass, or when the pass's iptables-legacy-save is about to run,
 * or its iptables-legacy-restore (each held by a PATH shim until the registration has been made),
 * in two states: queued (put() called) and answered (put() resolved; waited for at most 500 ms,
 * since a pass in the registry's turn holds it until the pass is done).
 *
 * Checked: an owner answered before the restore ran, or queued while the pass waited for its save,
 * never has its id's rules collected (one queued at the restore is answered after it); x_tables
 * is the seed or the seed less the dead allocation, nothing else; every registration is answered in
 * the end and listed. x_tables has no generation: a registration (a commit to nf_tables) cannot
 * refuse the restore, so only the order of the two keeps it.
 */
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { GcLoop } from '../../src/gc/index.js';
import { OwnerRegistry } from '../../src/owners/index.js';
import { withNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { ownerSpec, ownersYaml } from '../owners/fixtures.js';
import { DEAD, DEAD_CHAIN, LIVE, NOMAD_RESTORE, file } from './fixtures.js';

const legacySave = (ns: Netns) => ns.exec('iptables-legacy-save', []).split('\n').filter((l) => !l.startsWith('#'))
  .map((l) => l.replace(/\[\d+:\d+\]/g, '[0:0]')).join('\n');
const collected = (before: string) => before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n');

type Step = 'before' | 'save' | 'restore';
type State = 'queued' | 'answered';

// Shims in front of the real programs: with hold-<tool> present, each says at-<tool> and waits for go-<tool>.
const shims = tempDir('legacy-owners');
for (const tool of ['iptables-legacy-save', 'iptables-legacy-restore']) {
  writeFileSync(join(shims, tool), `#!/bin/sh
if [ -e ${shims}/hold-${tool} ]; then
  rm -f ${shims}/hold-${tool}
  touch ${shims}/at-${tool}
  while [ ! -e ${shims}/go-${tool} ]; do sleep 0.01; done
  rm -f ${shims}/go-${tool} ${shims}/at-${tool}
fi
exec /usr/sbin/${tool} "$@"
`);
  chmodSync(join(shims, tool), 0o755);
}

describe('the daemon\'s iptables-legacy gc pass and owners registered during it', () => {
  it('an owner answered before the restore ran never has its id\'s rules collected', { timeout: 120_000 }, async () => {
    await withNetns(async (ns) => {
      const path = process.env.PATH;
      process.env.PATH = `${shims}:${path}`;
      const seen: string[] = [];
      const failures: string[] = [];
      try {
        const cases: { step?: Step; state?: State }[] = [{}];
        for (const step of ['before', 'save', 'restore'] as Step[]) for (const state of ['queued', 'answered'] as State[]) cases.push({ step, state });
        for (const c of cases) {
          const what = c.step ? `at ${c.step}, ${c.state}` : 'no registration';
          ns.exec('iptables-legacy-restore', [], NOMAD_RESTORE);
          const before = legacySave(ns);
          const dir = tempDir('legacy-owners-case');
          mkdirSync(join(dir, 'state'), { recursive: true });
          const config = parseConfig(ownersYaml(dir));
          // The kernel step of a registration does not matter here (x_tables is gc's): a turn of the loop.
          const registry = new OwnerRegistry(config, [], () => new Promise<void>((r) => setImmediate(r)));
          const gc = parseConfig(`tables: []\ngc:\n  enabled: true\n  grace: 0s\n  backend: iptables-legacy\n  foreign:\n    - family: ip\n      table: nat\n      owner: nomad\n  live:\n    file: ${file(JSON.stringify([LIVE]))}\n`).gc!;
          const loop = new GcLoop({ gc, netns: ns.path, logger: pino({ level: 'silent' }),
            liveIds: () => registry.liveIds(), exclusive: (fn) => registry.exclusive(fn) });
          let put: Promise<unknown> | undefined;
          let answered: 'before-restore' | 'after' | undefined;
          let restoreRan = false;
          const register = async () => {
            put = registry.put(DEAD, ownerSpec(1)).then(() => { answered ??= restoreRan ? 'after' : 'before-restore'; });
            if (c.state === 'answered') await Promise.race([put, sleep(500)]);
          };
          try {
            if (c.step === 'before') await register();
            const tool = c.step === 'save' ? 'iptables-legacy-save' : c.step === 'restore' ? 'iptables-legacy-restore' : undefined;
            if (tool) writeFileSync(join(shims, `hold-${tool}`), '');
            const pass = loop.runOnce();
            if (tool) {
              // The restore runs only when there is garbage: a pass that found none never reaches it.
              const reached = await Promise.race([
                (async () => { while (!existsSync(join(shims, `at-${tool}`))) await sleep(5); return true; })(),
                pass.then(() => false),
              ]);
              if (reached) {
                await register();
                restoreRan = tool === 'iptables-legacy-restore';
                writeFileSync(join(shims, `go-${tool}`), '');
              } else if (c.step === 'save') failures.push(`${what}: the save was not reached`);
            }
            const r = await pass;
            restoreRan = true;
            await put;
            const after = legacySave(ns);
            const kept = after === before;
            seen.push(`${what}: ${kept ? 'kept' : 'collected'}${answered ? `, answered ${answered}` : ''}`);
            if (!r) failures.push(`${what}: the pass failed`);
            if (!kept && after !== collected(before)) failures.push(`${what}: neither the seed nor the seed less the dead allocation:\n${after}`);
            if (answered === 'before-restore' && !kept) failures.push(`${what}: LOST: the owner was answered before the restore, and its id's rules were collected`);
            // Queued while the pass waited for its save: live for its plan, as the netlink scan sees one queued while it reads.
            if (c.step === 'save' && !kept) failures.push(`${what}: queued while the pass waited for its save, and collected`);
            if (!c.step && kept) failures.push(`${what}: the control collected nothing`);
            if (c.step && !registry.list().some((o) => o.id === DEAD)) failures.push(`${what}: not registered in the end`);
          } finally {
            rmSync(join(shims, 'hold-iptables-legacy-save'), { force: true });
            rmSync(join(shims, 'hold-iptables-legacy-restore'), { force: true });
            await loop.stop();
            registry.close();
          }
        }
      } finally {
        process.env.PATH = path;
      }
      console.log(`legacy gc pass and owners (${seen.length} cases): ${seen.join('; ')}`);
      expect(failures).toEqual([]);
    }, 'gc-legacy-own');
  });
});
