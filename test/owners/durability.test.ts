/**
 * The owners state on disk, damaged every way a crash or a disk can damage it, read by the loader
 * start-up uses (loadOwners): a journal torn at every byte of its header and of its last record, a
 * header with a wrong digest or of NULs, a state file cut or overwritten. Each either loads exactly
 * the acknowledged owners (a torn last record was never synced, so never acknowledged) or stops
 * start-up with one line that holds no raw control byte. (The writer's failures, ENOSPC at every
 * write point, are swept on a real small tmpfs in test/reliability/owners-durability.test.ts.)
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { OwnersStateError, loadOwners, saveOwners } from '../../src/owners/index.js';
import { OwnersState, journalPathOf } from '../../src/owners/state.js';
import { compileOwner } from '../../src/owners/spec.js';
import { tempDir } from '../helpers/tmp.js';
import { ownerSpec, ownersYaml } from './fixtures.js';

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
  it('a journal torn at every byte offset of its header, and of its last record (boundaries whole, every 8th byte between)', async () => {
    const { c, journal, owner } = setup();
    const base = Array.from({ length: 60 }, (_, i) => owner(i));
    saveOwners(c.owners!.state, base);
    const state = new OwnersState(c.owners!.state);
    // Three acknowledged groups: o100 added, o3 removed, then o101 added (the last record).
    const a = owner(100, 3);
    await state.write([['put', a.id, a.spec]], base, []);
    await state.write([['delete', 'o3']], [], []);
    const b = owner(101, 3);
    await state.write([['put', b.id, b.spec]], [], []);
    state.close();
    const full = readFileSync(journal);
    const lines = full.toString('utf8').split('\n');
    const headerEnd = Buffer.byteLength(lines[0]!) + 1;
    const lastStart = full.length - Buffer.byteLength(lines[3]!) - 1;
    const all = ids(c);
    expect(all).toContain('o101');
    expect(all).not.toContain('o3');
    const withoutLast = all.filter((x) => x !== 'o101');
    let refused = 0;
    // Every offset of the header: short of its newline, the journal is damaged (it is written whole,
    // atomically, so no crash leaves it cut); at its newline, no record was synced.
    for (let at = 0; at <= headerEnd; at++) {
      writeFileSync(journal, full.subarray(0, at));
      if (at < headerEnd) {
        expect(refusedCleanly(() => loadOwners(c))).toMatch(/owners\.json\.journal: (corrupt: its header line is incomplete|corrupt: line 1 is not)/);
        refused++;
      } else {
        expect(ids(c)).toEqual(base.map((o) => o.id).sort());
      }
    }
    // Offsets of the last record: a record without its newline was torn before its sync. Every byte
    // of its first and last 16 (the record boundaries: the previous newline, its own), every 8th
    // between (each successful load compiles 60 owners: all ~300 took half a minute).
    const cuts = [];
    for (let at = lastStart; at <= full.length; at++) if (at - lastStart <= 16 || full.length - at <= 16 || (at - lastStart) % 8 === 0) cuts.push(at);
    for (const at of cuts) {
      writeFileSync(journal, full.subarray(0, at));
      expect(ids(c)).toEqual(at === full.length ? all : withoutLast);
    }
    expect(refused).toBe(headerEnd);
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
      [`${'\0'.repeat(80)}\n${rest.join('\n')}`, /line 1 is not/],
      [Buffer.alloc(good.length, 0xff), /header line is incomplete/],
      ['', /header line is incomplete \(0 bytes/],
      [`{"base":"${'a'.repeat(64)}"}\n`, /does not extend the state file/],
    ] as const) {
      writeFileSync(journal, text);
      expect(refusedCleanly(() => loadOwners(c))).toMatch(why);
    }
    // A record in the middle cut short (only a damaged disk does that: a failed append is cut back).
    writeFileSync(journal, `${header}\n[["delete","o2"\n[["delete","o4"]]\n`);
    expect(refusedCleanly(() => loadOwners(c))).toMatch(/line 2 is not JSON/);
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
