/**
 * Tag patterns: how an owner id is written into a rule's comment, such as
 * Nomad's `name: "<name>" id: "<id>"` in an iptables `-m comment`. Foreign GC
 * reads the ids of other tools' rules with them, owners tag their own rules.
 */

/** What an id may be: 1-128 characters, letters, digits, _ . : - (starting with a letter or digit). */
export const ID_PATTERN = '[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}';

/**
 * The tag pattern when none is given: what the CNI plugins write with `-m comment` for a
 * network (Nomad's `nomad`, podman's `podman`) and a container id: bridge's masquerade rules.
 */
export const DEFAULT_TAG = 'name: "<name>" id: "<id>"';
/** portmap's form of the same tag, on its CNI-HOSTPORT-DNAT jumps; read by default too. */
export const DEFAULT_DNAT_TAG = `dnat ${DEFAULT_TAG}`;

export interface TagMatcher {
  /** The id this comment tags, or undefined when it is not this owner's tag. */
  match(comment: string): string | undefined;
  pattern: string;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * A matcher for a tag pattern (<name> stands for the owner). Without one it reads both CNI
 * forms, DEFAULT_TAG and DEFAULT_DNAT_TAG.
 */
export function tagMatcher(f: { tag?: string; owner?: string }): TagMatcher {
  const patterns = f.tag !== undefined ? [f.tag] : [DEFAULT_TAG, DEFAULT_DNAT_TAG];
  const part = (s: string) => s.split('<name>').map(escapeRe).join(escapeRe(f.owner ?? ''));
  const re = new RegExp(`^(?:${patterns.map((p) => {
    const [before, after] = p.split('<id>') as [string, string];
    return `${part(before)}(${ID_PATTERN})${part(after)}`;
  }).join('|')})$`);
  return { pattern: patterns.join(' | '), match: (c) => { const m = re.exec(c); return m?.slice(1).find((x) => x !== undefined); } };
}
