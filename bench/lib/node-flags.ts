/**
 * The Node flags bin/nfkeeper.js's first line gives (`#!/usr/bin/env -S node FLAGS`): what the
 * daemon runs with when started as installed. A benchmark that starts it as
 * `node bin/nfkeeper.js` passes them itself, to measure the daemon as deployed. (None today:
 * the bin sets `run`'s small young generation itself, --semi-space-growth-factor=1, so that
 * validate, check and apply keep V8's default.)
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export function daemonNodeFlags(root: string): string[] {
  const first = readFileSync(join(root, 'bin', 'nfkeeper.js'), 'utf8').split('\n', 1)[0]!;
  const m = /^#!\/usr\/bin\/env -S node(?:\s+(.*))?$/.exec(first);
  return m?.[1] ? m[1].trim().split(/\s+/) : [];
}
