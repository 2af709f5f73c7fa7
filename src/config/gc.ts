/**
 * The `gc` section of the config: which foreign tables to collect garbage
 * in, how a rule's tag names its owner and id, where the live set comes
 * from, and how long an id must be missing before its rules go. Validated
 * with zod inside config.ts's schema, so errors carry file:line:column.
 */
import * as z from 'zod';
import { parseDuration } from '../base/duration.js';
import { ID_PATTERN } from '../rules/index.js';

export { DEFAULT_TAG, tagMatcher, type TagMatcher } from '../rules/index.js';

/** Owner ids (Nomad alloc ids, pod uids, ...): no quotes, spaces or anything that could pass for other text. */
export const ID_RE = new RegExp(`^${ID_PATTERN}$`);
export const ID_RULE = 'an id is 1-128 characters: letters, digits, _ . : - (starting with a letter or digit)';

/**
 * The section's schema, built when a document with a `gc` section is first checked (zod's
 * schemas cost time and memory to make, and most configs have none).
 */
export const GC_SCHEMA = z.lazy(() => {
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

  /** libcni's result cache (src/gc/live.ts): a container with a record whose network namespace still exists is live. */
  const CNI = z.strictObject({
    cacheDir: z.string().regex(/^\//, 'an absolute path, like /var/lib/cni').default('/var/lib/cni'),
  });

  const LIVE = z.union([
    z.strictObject({ file: z.string().min(1) }),
    z.strictObject({ command: z.array(z.string().min(1)).min(1) }),
    z.strictObject({ nomad: NOMAD }),
    z.strictObject({ cni: CNI }),
  ], { error: 'live is { file: PATH }, { command: [argv...] }, { nomad: { address: URL } } or { cni: { cacheDir: PATH } }' });

  return z.strictObject({
    /** The daemon only reports foreign garbage unless this is true. */
    enabled: z.boolean().default(false),
    foreign: z.array(FOREIGN).default([]),
    live: LIVE.optional(),
    grace: DURATION.default(5 * 60_000),
    /** How often the daemon looks for foreign garbage. */
    interval: DURATION.refine((ms) => ms >= 1000, 'at least 1s').default(30_000),
    /**
     * Where the foreign tables live: nftables (netlink), or iptables-legacy (x_tables, read and
     * changed with iptables-legacy-save/-restore; src/gc/legacy.ts). `nfkeeper gc --backend` overrides it.
     */
    backend: z.enum(['nftables', 'iptables-legacy']).default('nftables'),
    /** Where the one-shot `nfkeeper gc` keeps when it first saw each id missing (JSON). */
    state: z.string().min(1).optional(),
  });
});

export type GcConfig = z.output<typeof GC_SCHEMA>;
export type ForeignTable = GcConfig['foreign'][number];
