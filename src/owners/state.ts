/**
 * The owners state file: every registered owner's spec, as JSON
 * `{ "version": 1, "owners": { "<id>": { chains, jumps } } }`, replaced
 * atomically on every change (src/atomic-file.ts). A missing file is an
 * empty set. Anything else that is not a valid state (unreadable, not JSON,
 * a wrong shape, an owner the current config refuses) is an OwnersStateError:
 * start-up stops before the kernel is touched, because starting with fewer
 * owners than were registered would collect their rules.
 */
import { readFileSync } from 'node:fs';
import { writeFileAtomic } from '../atomic-file.js';
import type { Config, TableConfig } from '../config/config.js';
import { NfkeeperError } from '../errors.js';
import type { OwnersConfig } from './config.js';
import { OwnerSpecError, compileOwner, type Owner } from './spec.js';

export const STATE_VERSION = 1;

export class OwnersStateError extends NfkeeperError {
  override name = 'OwnersStateError';
  constructor(readonly file: string, reason: string) {
    super(`owners state ${file}: ${reason}; nfkeeper will not start with it (nothing was changed in the kernel). ` +
      'Restore the file, or fix what it names; deleting it unregisters every owner and collects their rules');
  }
}

/** The owners section and its table, resolved from a config that has one. */
export function ownersTable(config: Config): { oc: OwnersConfig; table: TableConfig } {
  const oc = config.owners;
  if (!oc) throw new NfkeeperError(`${config.file}: no owners section is configured`);
  const table = config.tables.find((t) => t.family === oc.family && t.name === oc.table)!;
  return { oc, table };
}

/** Reads and compiles the registered owners. */
export function loadOwners(config: Config, file = ownersTable(config).oc.state): Owner[] {
  const { oc, table } = ownersTable(config);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new OwnersStateError(file, `cannot read: ${(e as Error).message}`);
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new OwnersStateError(file, `corrupt: not JSON (${(e as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new OwnersStateError(file, 'corrupt: not a JSON object');
  const { version, owners } = v as { version?: unknown; owners?: unknown };
  if (version !== STATE_VERSION) throw new OwnersStateError(file, `unknown version ${JSON.stringify(version)} (this nfkeeper reads ${STATE_VERSION})`);
  if (typeof owners !== 'object' || owners === null || Array.isArray(owners)) throw new OwnersStateError(file, 'corrupt: "owners" is not an object');
  const out: Owner[] = [];
  for (const [id, spec] of Object.entries(owners)) {
    try {
      out.push(compileOwner(id, spec, oc, table));
    } catch (e) {
      if (e instanceof OwnerSpecError) throw new OwnersStateError(file, `owner ${JSON.stringify(id.slice(0, 80))}: ${e.message}`);
      throw e;
    }
  }
  return out;
}

export function saveOwners(file: string, owners: Iterable<Owner>): void {
  const sorted = [...owners].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const body: Record<string, unknown> = {};
  for (const o of sorted) body[o.id] = o.spec;
  writeFileAtomic(file, JSON.stringify({ version: STATE_VERSION, owners: body }) + '\n');
}
