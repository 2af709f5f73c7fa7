/**
 * Tag patterns: how an owner id is written into a rule's comment, such as
 * Nomad's `name: "<name>" id: "<id>"` in an iptables `-m comment`. Foreign GC
 * reads the ids of other tools' rules with them, owners tag their own rules.
 */

/** What an id may be: 1-128 characters, letters, digits, _ . : - (starting with a letter or digit). */
export const ID_PATTERN = '[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}';

/** The tag pattern when none is given: what Nomad writes with `-m comment`. */
export const DEFAULT_TAG = 'name: "<name>" id: "<id>"';

export interface TagMatcher {
  /** The id this comment tags, or undefined when it is not this owner's tag. */
  match(comment: string): string | undefined;
  pattern: string;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A matcher for a tag pattern (default `name: "<owner>" id: "<id>"`; <name> stands for the owner). */
export function tagMatcher(f: { tag?: string; owner?: string }): TagMatcher {
  const pattern = f.tag ?? DEFAULT_TAG;
  const [before, after] = pattern.split('<id>') as [string, string];
  const part = (s: string) => s.split('<name>').map(escapeRe).join(escapeRe(f.owner ?? ''));
  const re = new RegExp(`^${part(before)}(${ID_PATTERN})${part(after)}$`);
  return { pattern, match: (c) => re.exec(c)?.[1] };
}
