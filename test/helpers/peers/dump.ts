/**
 * What two installs of the same table are compared by: `nft list table` and
 * `nft --debug=netlink list table` in a namespace.
 */
import type { Netns } from '../netns.js';

/**
 * `nft --debug=netlink list table`: the expressions and set elements as the
 * kernel dumps them. Elements of a hashed set come in hash order, which
 * depends on a per-set random seed, so each set's element lines are sorted.
 * Rule handles, and the order of the sets, are left out unless `handles` is set.
 */
export function netlinkDump(ns: Netns, family: string, table: string, o: { handles?: boolean } = {}): string {
  // Set blocks (`ip t @name` and its element lines) come in the kernel's order of the sets, which
  // is the order they were created in: two writers may create a table's sets in different orders
  // (nft in file order, anonymous ones between; nfkeeper its named sets first). Sorted by name.
  const sets: string[][] = [];
  const rest: string[] = [];
  let cur: string[] | undefined;
  for (let line of ns.exec('nft', ['--debug=netlink', 'list', 'table', family, table]).split('\n')) {
    // A rule's header names its handle and the previous rule's: numbers the kernel hands out in
    // the order objects arrive, which differs between two writers of the same table.
    if (!o.handles) line = line.replace(/^((?:ip|ip6|inet) \S+ \S+)(?: \d+)+$/, '$1');
    if (/^(?:ip|ip6|inet) \S+ @\S+$/.test(line)) {
      cur = [line];
      sets.push(cur);
      continue;
    }
    if (cur && line.startsWith('\telement ')) { cur.push(line); continue; }
    cur = undefined;
    rest.push(line);
  }
  const blocks = sets.map(([head, ...elements]) => [head!, ...elements.sort()]);
  if (!o.handles) blocks.sort((a, b) => (a[0]! < b[0]! ? -1 : a[0]! > b[0]! ? 1 : 0));
  return [...blocks.flat(), ...rest].join('\n');
}

/**
 * A listing or netlink dump with its chain (and set) blocks in name order:
 * nft prints them in handle order, and a chain deleted from outside and
 * created again by a repair comes back with a new, last handle. Within a
 * chain the order is kept.
 */
export function byChain(text: string): string {
  const lines = text.split('\n');
  const blocks: { key: string; lines: string[] }[] = [];
  const head: string[] = [];
  const tail: string[] = [];
  let cur: { key: string; lines: string[] } | undefined;
  for (const line of lines) {
    // blank separators and the table's own lines belong to no chain
    if (line === '') continue;
    if (line === '}' || line.startsWith('table ')) {
      tail.push(line);
      cur = undefined;
      continue;
    }
    // listing: "\tchain NAME {" / "\tset NAME {" / "\tmap NAME {" / "\tct helper NAME {" (and the other
    // stateful objects, which come back last too); dump: "ip TABLE CHAIN" rule headers
    const obj = /^\t(?:chain|set|map|counter|quota|limit|synproxy|secmark|ct helper|ct timeout|ct expectation) (\S+) \{$/.exec(line)
      ?? /^(?:ip|ip6|inet) \S+ (\S+)$/.exec(line);
    if (obj) {
      cur = { key: `${line.startsWith('\t') ? 'L' : 'D'} ${obj[1]}`, lines: [] };
      blocks.push(cur);
    }
    (cur ? cur.lines : head).push(line);
  }
  // stable: the rules of one chain in a dump stay in order
  const sorted = blocks.map((b, i) => ({ b, i })).sort((x, y) => (x.b.key < y.b.key ? -1 : x.b.key > y.b.key ? 1 : x.i - y.i));
  return [...head, ...sorted.flatMap((x) => x.b.lines), ...tail].join('\n');
}
