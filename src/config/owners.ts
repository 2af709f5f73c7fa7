/**
 * The `owners` section of the config: which owned table owners' chains go
 * into, the dispatch chains their jump rules hang off, where the control
 * socket listens and where the registered owners are kept. Checked inside
 * config.ts's schema (so errors carry file:line:column); config.ts also
 * checks that the table and the dispatch chains are in `tables`.
 */
import * as z from 'zod';

export const DEFAULT_SOCKET = '/run/nfkeeper/nfkeeper.sock';
export const DEFAULT_STATE = '/var/lib/nfkeeper/owners.json';

const NAME = z.string().min(1).max(255).regex(/^[A-Za-z0-9_.\-]+$/, 'use letters, digits, _ . and - only');

export const OWNERS_SCHEMA = z.strictObject({
  family: z.enum(['ip', 'ip6', 'inet']),
  table: NAME,
  /** Chains of that table that owners may add (jump) rules to, after the config's own rules. */
  dispatch: z.array(NAME).min(1, 'name at least one dispatch chain'),
  socket: z.string().min(1).default(DEFAULT_SOCKET),
  /** The registered owners, as JSON (written atomically). */
  state: z.string().min(1).default(DEFAULT_STATE),
});

export type OwnersConfig = z.output<typeof OWNERS_SCHEMA>;
