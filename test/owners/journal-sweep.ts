/**
 * A journal torn at every byte offset, loaded as start-up loads it (for tests only: it asserts with
 * vitest, which the benches that import fixtures.ts must not load).
 */
import { writeFileSync } from 'node:fs';
import { expect } from 'vitest';
import type { Config } from '../../src/config/config.js';
import { OwnersStateError, loadOwners } from '../../src/owners/index.js';
import { specKey } from '../../src/owners/spec.js';
import { journalPathOf } from '../../src/owners/state-file.js';

/**
 * The owners journal `full` (beside the state file of `c`, which it extends) cut at every byte offset
 * and loaded as start-up does: cut inside its header (written whole, so damage), the load is refused
 * in one printable line naming the journal and the bytes; past it, the owners loaded are exactly
 * `acked[k]` (id -> specKey) for the k lines whole in the cut: a torn line was never synced, so
 * never acknowledged, and no part of it is ever loaded. Leaves the whole journal in place.
 */
export function tearJournalEverywhere(c: Config, full: Buffer, acked: readonly Map<string, string>[]): void {
  const journal = journalPathOf(c.owners!.state);
  const headerEnd = full.indexOf(0x0a) + 1;
  expect(headerEnd).toBeGreaterThan(0);
  let newlines = 0;
  for (let at = 0; at <= full.length; at++) {
    if (at > 0 && full[at - 1] === 0x0a) newlines++;
    writeFileSync(journal, full.subarray(0, at));
    if (at < headerEnd) {
      let msg = '';
      try {
        loadOwners(c);
      } catch (e) {
        expect(e).toBeInstanceOf(OwnersStateError);
        msg = (e as Error).message;
      }
      expect(msg, `cut at byte ${at}`).toMatch(new RegExp(`owners\\.json\\.journal: corrupt: (its header line is incomplete \\(${at} bytes|line 1 \\(byte 0\\) is not)`));
      // eslint-disable-next-line no-control-regex
      expect(msg).not.toMatch(/[\u0000-\u001f\u007f-\u009f\ufffd]/);
      continue;
    }
    const got = new Map(loadOwners(c).map((o) => [o.id, specKey(o.spec)]));
    expect(got, `cut at byte ${at} of ${full.length}`).toEqual(acked[newlines - 1]);
  }
  writeFileSync(journal, full);
}
