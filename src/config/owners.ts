/**
 * The `owners` section of the config: which owned table owners' chains go
 * into, the dispatch chains their jump rules hang off, where the control
 * socket listens and where the registered owners are kept. Checked inside
 * config.ts's schema (so errors carry file:line:column); config.ts also
 * checks that the table and the dispatch chains are in `tables`.
 */
import * as z from 'zod';
import { DEFAULT_SOCKET, DEFAULT_STATE } from './paths.js';

export { DEFAULT_SOCKET, DEFAULT_STATE };

/**
 * What all owners together may hold, by default: rules (chain rules and jumps) and bytes (each
 * owner's request as the state file keeps it). Far below the config's own rule limit, so that a
 * full ruleset of owners is still a few batches' work to install or repair.
 */
export const DEFAULT_LIMITS = { rules: 50_000, bytes: 8 << 20 } as const;

/** The section's schema, built when a document with an `owners` section is first checked (as GC_SCHEMA). */
export const OWNERS_SCHEMA = z.lazy(() => {
  const NAME = z.string().min(1).max(255).regex(/^[A-Za-z0-9_.\-]+$/, 'use letters, digits, _ . and - only');

  return z.strictObject({
    family: z.enum(['ip', 'ip6', 'inet']),
    table: NAME,
    /** Chains of that table that owners may add (jump) rules to, after the config's own rules. */
    dispatch: z.array(NAME).min(1, 'name at least one dispatch chain'),
    socket: z.string().min(1).default(DEFAULT_SOCKET),
    /** The registered owners, as JSON (written atomically). */
    state: z.string().min(1).default(DEFAULT_STATE),
    /** Totals across all owners; a registration that would pass one is refused (507). */
    limits: z.strictObject({
      rules: z.number().int().min(1).default(DEFAULT_LIMITS.rules),
      bytes: z.number().int().min(1).default(DEFAULT_LIMITS.bytes),
    }).default({ ...DEFAULT_LIMITS }),
  });
});

export type OwnersConfig = z.output<typeof OWNERS_SCHEMA>;
