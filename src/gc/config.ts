/**
 * The `gc` section of the config: which foreign tables to collect garbage
 * in, how a rule's tag names its owner and id, where the live set comes
 * from, and how long an id must be missing before its rules go. Validated
 * with zod inside config.ts's schema, so errors carry file:line:column.
 */
import { z } from 'zod';
import { parseDuration } from '../duration.js';

/** Owner ids (Nomad alloc ids, pod uids, ...): no quotes, spaces or anything that could pass for other text. */
export const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
export const ID_RULE = 'an id is 1-128 characters: letters, digits, _ . : - (starting with a letter or digit)';
const ID_CAPTURE = '([A-Za-z0-9][A-Za-z0-9_.:-]{0,127})';

/** The tag pattern when none is given: what Nomad writes with `-m comment`. */
export const DEFAULT_TAG = 'name: "<name>" id: "<id>"';

const NAME = z.string().min(1).max(255).regex(/^[A-Za-z0-9_.\-]+$/, 'use letters, digits, _ . and - only');
const OWNER = z.string().min(1).max(64).regex(/^[A-Za-z0-9_.\-]+$/, 'an owner name uses letters, digits, _ . and - only');

const DURATION = z.string().refine((s) => {
  try {
    parseDuration(s);
    return true;
  } catch {
    return false;
  }
}, 'a duration like 0s, 30s, 5m, 1h').transform((s) => parseDuration(s));

const FOREIGN = z.strictObject({
  family: z.enum(['ip', 'ip6', 'inet']),
  table: NAME,
  owner: OWNER.optional(),
  tag: z.string().min(1).max(255).optional()
    .refine((t) => t === undefined || t.split('<id>').length === 2, 'a tag pattern holds <id> exactly once'),
}).refine((f) => f.owner !== undefined || f.tag !== undefined, 'give an owner (matched as name: "<owner>" id: "<id>") or a tag pattern')
  .refine((f) => f.tag === undefined || !f.tag.includes('<name>') || f.owner !== undefined, 'a tag pattern with <name> needs an owner');

/** A Nomad agent's HTTP API (src/gc/live.ts): the allocations it lists that are not terminal are live. */
const NOMAD = z.strictObject({
  address: z.string().regex(/^https?:\/\/[^\s/]+\/?$/, 'an http:// or https:// address with no path, like http://127.0.0.1:4646').default('http://127.0.0.1:4646'),
  /** A file holding an ACL token (needs read-job in the namespaces listed); NOMAD_TOKEN otherwise. */
  tokenFile: z.string().min(1).optional(),
  namespace: z.string().min(1).max(128).regex(/^[A-Za-z0-9_*-]+$/, 'a Nomad namespace, or * for all').default('*'),
});

const LIVE = z.union([
  z.strictObject({ file: z.string().min(1) }),
  z.strictObject({ command: z.array(z.string().min(1)).min(1) }),
  z.strictObject({ nomad: NOMAD }),
], { error: 'live is { file: PATH }, { command: [argv...] } or { nomad: { address: URL } }' });

export const GC_SCHEMA = z.strictObject({
  /** The daemon only reports foreign garbage unless this is true. */
  enabled: z.boolean().default(false),
  foreign: z.array(FOREIGN).default([]),
  live: LIVE.optional(),
  grace: DURATION.default(5 * 60_000),
  /** How often the daemon looks for foreign garbage. */
  interval: DURATION.refine((ms) => ms >= 1000, 'at least 1s').default(30_000),
  /** Where the one-shot `nfkeeper gc` keeps when it first saw each id missing (JSON). */
  state: z.string().min(1).optional(),
});

export type GcConfig = z.output<typeof GC_SCHEMA>;
export type ForeignTable = GcConfig['foreign'][number];

export interface TagMatcher {
  /** The id this comment tags, or undefined when it is not this owner's tag. */
  match(comment: string): string | undefined;
  pattern: string;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A matcher for a foreign table's tag pattern (default `name: "<owner>" id: "<id>"`). */
export function tagMatcher(f: ForeignTable): TagMatcher {
  const pattern = f.tag ?? DEFAULT_TAG;
  const [before, after] = pattern.split('<id>') as [string, string];
  const part = (s: string) => s.split('<name>').map(escapeRe).join(escapeRe(f.owner ?? ''));
  const re = new RegExp(`^${part(before)}${ID_CAPTURE}${part(after)}$`);
  return { pattern, match: (c) => re.exec(c)?.[1] };
}
