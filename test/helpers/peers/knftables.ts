/**
 * The command form knftables writes (sigs.k8s.io/knftables, objects.go):
 * one `add table|chain|set|map|element|rule` line per object, in
 * transaction order, with knftables' own spacing (`{ type … ; comment "…" ; }`)
 * and named base-chain priorities turned into numbers, as it does. The peer
 * generators (kube-proxy, CNI portmap, flannel, Calico) all go through
 * knftables, so their files are written by this one writer.
 *
 * `transaction: true` also writes the `flush chain|set|map` and the
 * first-sync `add chain` + `delete chain` lines those programs send around
 * the adds; the default is the desired state alone (what nft lists back).
 */

export type Family = 'ip' | 'ip6' | 'inet';

/** knftables ParsePriority: a named priority with an optional ±offset, as a number. */
const NAMED_PRIORITY: Record<string, number> = {
  raw: -300, mangle: -150, dstnat: -100, filter: 0, security: 50, srcnat: 100,
};
export function priorityNumber(p: string | number): number {
  if (typeof p === 'number') return p;
  const m = /^([a-z]+)([+-]\d+)?$/.exec(p);
  if (!m || NAMED_PRIORITY[m[1]!] === undefined) return Number(p);
  return NAMED_PRIORITY[m[1]!]! + Number(m[2] ?? 0);
}

/** Go's %q for the ASCII comments these programs write. */
const q = (s: string) => JSON.stringify(s);

export interface ChainSpec {
  name: string;
  type?: 'filter' | 'nat' | 'route';
  hook?: string;
  priority?: string | number;
  policy?: 'accept' | 'drop';
  comment?: string;
}

export interface SetSpec {
  name: string;
  type: string;
  flags?: string[];
  timeout?: number; // seconds
  size?: number;
  policy?: string;
  autoMerge?: boolean;
  comment?: string;
}

export class Transaction {
  readonly lines: string[] = [];
  /** Rules and elements written (what "about 50,000 rules and elements" counts). */
  rules = 0;
  elements = 0;
  chains = 0;
  sets = 0;

  constructor(readonly family: Family, readonly table: string, readonly transaction = false) {}

  private get ft(): string {
    return `${this.family} ${this.table}`;
  }

  addTable(o: { comment?: string; flags?: string[] } = {}): void {
    let s = `add table ${this.ft}`;
    if (o.comment !== undefined || o.flags?.length) {
      s += ' {';
      if (o.comment !== undefined) s += ` comment ${q(o.comment)} ;`;
      if (o.flags?.length) s += ` flags ${o.flags.join(',')} ;`;
      s += ' }';
    }
    this.lines.push(s);
  }

  addChain(c: ChainSpec): void {
    let s = `add chain ${this.ft} ${c.name}`;
    if (c.type !== undefined || c.comment !== undefined) {
      s += ' {';
      if (c.type !== undefined) {
        s += ` type ${c.type} hook ${c.hook} priority ${priorityNumber(c.priority!)} ;`;
        if (c.policy) s += ` policy ${c.policy} ;`;
      }
      if (c.comment !== undefined) s += ` comment ${q(c.comment)} ;`;
      s += ' }';
    }
    this.lines.push(s);
    this.chains++;
  }

  flushChain(name: string): void {
    if (this.transaction) this.lines.push(`flush chain ${this.ft} ${name}`);
  }

  deleteChain(name: string): void {
    if (this.transaction) this.lines.push(`delete chain ${this.ft} ${name}`);
  }

  private setOrMap(kind: 'set' | 'map', o: SetSpec): void {
    let s = `add ${kind} ${this.ft} ${o.name} { type ${o.type} ;`;
    if (o.flags?.length) s += ` flags ${o.flags.join(',')} ;`;
    if (o.timeout !== undefined) s += ` timeout ${o.timeout}s ;`;
    if (o.size !== undefined) s += ` size ${o.size} ;`;
    if (o.policy !== undefined) s += ` policy ${o.policy} ;`;
    if (kind === 'set' && o.autoMerge) s += ' auto-merge ;';
    if (o.comment !== undefined) s += ` comment ${q(o.comment)} ;`;
    this.lines.push(`${s} }`);
    this.sets++;
  }

  addSet(o: SetSpec): void {
    this.setOrMap('set', o);
  }

  addMap(o: SetSpec): void {
    this.setOrMap('map', o);
  }

  flushSet(kind: 'set' | 'map', name: string): void {
    if (this.transaction) this.lines.push(`flush ${kind} ${this.ft} ${name}`);
  }

  addElement(o: { set: string; key: string[]; value?: string[]; comment?: string }): void {
    let s = `add element ${this.ft} ${o.set} { ${o.key.join(' . ')}`;
    if (o.comment !== undefined) s += ` comment ${q(o.comment)}`;
    if (o.value?.length) s += ` : ${o.value.join(' . ')}`;
    this.lines.push(`${s} }`);
    this.elements++;
  }

  addRule(chain: string, rule: string, comment?: string): void {
    this.lines.push(`add rule ${this.ft} ${chain} ${rule}${comment === undefined ? '' : ` comment ${q(comment)}`}`);
    this.rules++;
  }

  text(): string {
    return this.lines.join('\n') + '\n';
  }
}

/** knftables.Concat: the words joined by single spaces, empty ones dropped. */
export function concat(...parts: (string | number | undefined | (string | number)[])[]): string {
  return parts.flat().filter((p) => p !== undefined && p !== '').join(' ');
}
