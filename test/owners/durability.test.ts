/**
 * The owners state on disk, damaged every way a crash or a disk can damage it, read by the loader
 * start-up uses (loadOwners): a journal torn at every byte of its header and of its last record, a
 * header with a wrong digest or of NULs, a state file cut or overwritten. Each either loads exactly
 * the acknowledged owners (a torn last record was never synced, so never acknowledged) or stops
 * start-up with one line that holds no raw control byte. (The writer's failures, ENOSPC at every
 * write point, are swept on a real small tmpfs in test/reliability/owners-durability.test.ts.)
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { io } from '../../src/base/atomic-file.js';
import { parseConfig } from '../../src/config/config.js';
import { route } from '../../src/owners/api.js';
import { OwnersStateError, loadOwners, saveOwners } from '../../src/owners/index.js';
import { OwnerRegistry } from '../../src/owners/registry.js';
import { OwnersState, journalPathOf } from '../../src/owners/state-file.js';
import { compileOwner, specKey, type OwnerSpec } from '../../src/owners/spec.js';
import { tempDir } from '../helpers/tmp.js';
import { ownerSpec, ownersYaml, paddedSpec } from './fixtures.js';
import { tearJournalEverywhere } from './journal-sweep.js';

function setup() {
  const dir = tempDir('durable');
  mkdirSync(join(dir, 'state'));
  const c = parseConfig(ownersYaml(dir), join(dir, 'config.yaml'));
  const owner = (i: number, rules = 40) => compileOwner(`o${i}`, ownerSpec(i, rules), c.owners!, c.tables[0]!);
  return { dir, c, file: c.owners!.state, journal: journalPathOf(c.owners!.state), owner };
}

const ids = (c: Parameters<typeof loadOwners>[0]) => loadOwners(c).map((o) => o.id).sort();

/** Throws an OwnersStateError whose message is one printable line. */
function refusedCleanly(f: () => unknown): string {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(OwnersStateError);
  const msg = (err as Error).message;
  // eslint-disable-next-line no-control-regex
  expect(msg).not.toMatch(/[\u0000-\u001f\u007f-\u009f\ufffd]/);
  return msg;
}

describe('a damaged owners state stops start-up; a torn last record was never acknowledged', () => {
  it('a journal the registry wrote, torn at every byte offset: the acknowledged owners up to its last whole line, or refused naming the file and the byte', async () => {
    const { c, file, journal } = setup();
    // A base past the journal's threshold that compiles in a millisecond: a few owners whose rules are
    // padded with blanks (the rule language skips them), so every one of the offsets can load it.
    saveOwners(file, Array.from({ length: 4 }, (_, i) => compileOwner(`p${i}`, paddedSpec(i), c.owners!, c.tables[0]!)));
    const registry = new OwnerRegistry(c, loadOwners(c), async () => {});
    const snapshot = () => new Map(registry.list().map((o) => [o.id, specKey(o.spec)]));
    // Groups of changes as the daemon makes them (requests arriving together are one line):
    // puts, a group of three, a replace, deletes of a base owner and of a journalled one.
    const acked = [snapshot()];  // acked[k]: the owners after k lines
    const groups: (() => Promise<unknown>[])[] = [
      () => [registry.put('a1', ownerSpec(1))],
      () => [registry.put('a2', ownerSpec(2)), registry.put('a3', ownerSpec(3, 5)), registry.remove('p1')],
      () => [registry.put('a1', ownerSpec(11, 4))],
      () => [registry.remove('a2')],
      () => [registry.put('a4', ownerSpec(4)), registry.remove('p0')],
    ];
    for (const g of groups) {
      await Promise.all(g());
      acked.push(snapshot());
    }
    const base = readFileSync(file);
    const full = readFileSync(journal);
    registry.close();  // folds the journal in: put the daemon's file and journal back
    writeFileSync(file, base);
    expect(full.toString('utf8').split('\n')).toHaveLength(groups.length + 2);  // the header, a line a group, nothing after the last newline
    tearJournalEverywhere(c, full, acked);
  });

  it('a header with a wrong digest, of NULs, of 0xff bytes, or of another file stops the load; a folded journal is ignored', async () => {
    const { c, file, journal, owner } = setup();
    const base = Array.from({ length: 60 }, (_, i) => owner(i));
    saveOwners(file, base);
    const state = new OwnersState(file);
    await state.write([['delete', 'o1']], base, []);
    state.close();
    const good = readFileSync(journal, 'utf8');
    const [header, ...rest] = good.split('\n');
    const wrong = header!.replace(/"base":"([0-9a-f])/, (_m, d: string) => `"base":"${d === '0' ? '1' : '0'}`);
    for (const [text, why] of [
      [`${wrong}\n${rest.join('\n')}`, /does not extend the state file beside it/],
      ['\0'.repeat(good.length), /header line is incomplete/],
      [`${'\0'.repeat(80)}\n${rest.join('\n')}`, /line 1 \(byte 0\) is not/],
      [Buffer.alloc(good.length, 0xff), /header line is incomplete/],
      ['', /header line is incomplete \(0 bytes/],
      [`{"base":"${'a'.repeat(64)}"}\n`, /does not extend the state file/],
    ] as const) {
      writeFileSync(journal, text);
      expect(refusedCleanly(() => loadOwners(c))).toMatch(why);
    }
    // A record in the middle cut short (only a damaged disk does that: a failed append is cut back).
    writeFileSync(journal, `${header}\n[["delete","o2"\n[["delete","o4"]]\n`);
    expect(refusedCleanly(() => loadOwners(c))).toMatch(/line 2 \(byte \d+\) is not JSON/);
    // Folded into a new file and left behind by a crash before its removal: stale, ignored.
    writeFileSync(journal, good);
    saveOwners(file, loadOwners(c));
    writeFileSync(journal, good);
    expect(ids(c)).not.toContain('o1');
    expect(ids(c)).toHaveLength(59);
  });

  it('a state file cut at every byte of its first and last 100 and at 200 more, or of NULs and 0xff, stops the load in one printable line', () => {
    const { c, file, owner } = setup();
    saveOwners(file, Array.from({ length: 30 }, (_, i) => owner(i)));
    const full = readFileSync(file);
    const offsets = new Set<number>();
    for (let i = 0; i < 100; i++) {
      offsets.add(i);
      offsets.add(full.length - 1 - i);
    }
    for (let i = 0; i < 200; i++) offsets.add(Math.floor(((i * 7919) % 1000) / 1000 * full.length));
    for (const at of offsets) {
      if (at >= full.length - 1) continue;  // the whole text, or all but its final newline: still the same JSON
      writeFileSync(file, full.subarray(0, at));
      expect(refusedCleanly(() => loadOwners(c))).toMatch(/owners\.json: corrupt: not JSON/);
    }
    for (const bytes of [Buffer.alloc(4096, 0), Buffer.alloc(4096, 0xff), Buffer.from('{"version":1,\0\xff"owners":{}}', 'latin1')]) {
      writeFileSync(file, bytes);
      expect(refusedCleanly(() => loadOwners(c))).toMatch(/corrupt: not JSON/);
    }
    // Node's JSON message quotes the bad token: escaped.
    writeFileSync(file, Buffer.alloc(4096, 0));
    expect(refusedCleanly(() => loadOwners(c))).toMatch(/\\x00/);
  });

  it('a state file or journal that is not a regular file is refused without blocking', () => {
    const { c, file, journal, owner } = setup();
    saveOwners(file, [owner(1, 3)]);
    writeFileSync(journal, '');
    // A directory in the journal's place.
    rmSync(journal);
    mkdirSync(journal);
    expect(refusedCleanly(() => loadOwners(c))).toMatch(/cannot read: it is a directory, not a regular file/);
    rmSync(journal, { recursive: true });
    // A FIFO in the file's place: open() would block for a writer without O_NONBLOCK.
    rmSync(file);
    execFileSync('mkfifo', [file]);
    expect(refusedCleanly(() => loadOwners(c))).toMatch(/cannot read: it is a FIFO, not a regular file/);
  });
});

type Io = typeof io;
/**
 * Makes the `n`th call through the durable-write seam (src/atomic-file.ts `io`: open, write, fsync,
 * fdatasync, ftruncate, rename, unlink, close) fail as a full or failing disk does; with `after`,
 * every later call too (a disk that stays full). Returns the calls made, and undoes itself.
 */
function injectFaults(n: number, after: boolean): { calls: () => number; restore: () => void } {
  const real = { ...io };
  let calls = 0;
  const fails = () => ++calls === n || (after && calls > n);
  const fault = (call: string) => Object.assign(new Error(`${call === 'writeSync' || call === 'openSync' ? 'ENOSPC: no space left on device' : 'EIO: i/o error'}, ${call} (injected at call ${calls})`),
    { code: call === 'writeSync' || call === 'openSync' ? 'ENOSPC' : 'EIO' });
  for (const k of Object.keys(real) as (keyof Io)[]) {
    (io as Record<string, unknown>)[k] = (...args: unknown[]) => {
      if (!fails()) return (real[k] as (...a: unknown[]) => unknown)(...args);
      if (k === 'closeSync') (real.closeSync as (fd: number) => void)(args[0] as number);  // Linux releases it even then
      if (k === 'fdatasync') {
        setImmediate(() => (args[1] as (e: Error) => void)(fault(k)));
        return undefined;
      }
      throw fault(k);
    };
  }
  return { calls: () => calls, restore: () => Object.assign(io, real) };
}

describe('a failing disk at every write point: acknowledged = durable, refused = never', () => {
  // Each scenario is a registry over a state file (whole-file: a few small owners; journalled: a base
  // past the journal's threshold, so the first change starts a journal and the rest append), fed a
  // fixed stream of changes and then stopped (the fold of the journal). The Nth call of the seam
  // fails, for every N up to the calls the stream makes without a fault; then (a disk that stays
  // full) every call from the Nth on.
  const steps: [string, string, unknown][] = [
    ['PUT', 'n1', ownerSpec(1)],
    ['PUT', 'n2', ownerSpec(2, 5)],
    ['DELETE', 'b0', undefined],
    ['PUT', 'n1', ownerSpec(21, 4)],
    ['DELETE', 'n2', undefined],
    ['PUT', 'n3', ownerSpec(3)],
  ];

  async function run(journalled: boolean, n: number, after: boolean) {
    const { c, file } = setup();
    const spec = (i: number) => (journalled ? paddedSpec(i) : ownerSpec(100 + i));
    saveOwners(file, Array.from({ length: 4 }, (_, i) => compileOwner(`b${i}`, spec(i), c.owners!, c.tables[0]!)));
    let kernel: string[] = [];
    const registry = new OwnerRegistry(c, loadOwners(c), async (owners) => { kernel = owners.map((o) => o.id); });
    // The owners a user was told are registered: each 2xx applied, each refusal not.
    const model = new Map(registry.list().map((o) => [o.id, specKey(o.spec)]));
    const fault = injectFaults(n, after);
    let uncertain: [string, string, unknown] | undefined;
    let journalling = false;
    const answers: number[] = [];
    try {
      for (const step of steps) {
        const [method, id, body] = step;
        const r = await route({ registry, status: () => ({}) }, method, `/v1/owners/${id}`, body === undefined ? undefined : JSON.stringify(body));
        answers.push(r.status);
        if (r.status === 404 && method === 'DELETE' && !model.has(id)) {
          // (its PUT was refused: never registered)
        } else if (r.status < 300) {
          expect(uncertain, 'no change is taken once the disk is uncertain').toBeUndefined();
          if (method === 'PUT') model.set(id, specKey(body as OwnerSpec));
          else model.delete(id);
        } else {
          expect(r.status, JSON.stringify(r.body)).toBe(503);
          expect((r.body as { error: string }).error).toMatch(/owners state|uncertain/);
          if (/uncertain/.test((r.body as { error: string }).error)) uncertain ??= step;
        }
        // The kernel holds what the disk holds, at once: a change the disk refused was taken back out.
        expect(kernel, `after ${method} ${id}`).toEqual([...model.keys()].sort());
      }
      journalling ||= existsSync(journalPathOf(file));
      try {
        registry.close();
      } catch { /* the fold failed: the file and journal as they were, or the file whole (checked below) */ }
    } finally {
      fault.restore();
    }
    // What a restart loads: exactly the acknowledged owners; never a refused one. Only a failed write
    // whose undo failed too (StateUncertainError, every call from the Nth on) may leave its change.
    const loaded = new Map(loadOwners(c).map((o) => [o.id, specKey(o.spec)]));
    const cameBack = uncertain !== undefined && JSON.stringify([...loaded].sort()) !== JSON.stringify([...model].sort());
    if (cameBack) {
      const [method, id, body] = uncertain!;
      if (method === 'PUT') model.set(id, specKey(body as OwnerSpec));
      else model.delete(id);
    }
    expect(new Map([...loaded].sort()), `fault at call ${n}${after ? ' and after' : ''}: ${answers.join(' ')}`).toEqual(new Map([...model].sort()));
    return { calls: fault.calls(), answers, uncertain: uncertain !== undefined, cameBack, journalling };
  }

  for (const journalled of [false, true]) {
    it(`${journalled ? 'a journalled state' : 'a whole-file state'}: the Nth write, sync, rename, truncate or close fails, for every N`, async () => {
      const clean = await run(journalled, 0, false);
      expect(clean.answers.every((s) => s < 300)).toBe(true);
      expect(clean.journalling).toBe(journalled);
      let refusals = 0;
      let uncertainRuns = 0;
      let cameBack = 0;
      for (const after of [false, true]) {
        for (let n = 1; n <= clean.calls; n++) {
          const r = await run(journalled, n, after);
          refusals += r.answers.filter((s) => s === 503).length;
          if (r.cameBack) cameBack++;
          if (r.uncertain) {
            uncertainRuns++;
            expect(after, `a single fault at call ${n} left the disk uncertain`).toBe(true);
          }
        }
      }
      expect(refusals).toBeGreaterThan(clean.calls);
      console.log(`${journalled ? 'journalled' : 'whole-file'}: ${clean.calls} calls swept twice, ${refusals} refusals (503), ${uncertainRuns} runs left the disk uncertain, in ${cameBack} of them holding the change refused`);
    }, 120_000);
  }
});
