/**
 * A ruleset with every kind of thing a compiled config holds: sets and maps (a verdict map), an
 * object, comments, anonymous sets, interfaces, a service name; for the compile cache's tests,
 * which store and load it whole.
 */

/**
 * Table `table` (inet) with the named things, a regular chain and a base chain `input` whose rules
 * are, in order: `iif "IIF" accept`, `oif "OIF" drop` (if given), a set look-up, a verdict map,
 * anonymous sets, then `rules`. Tab-indented, as nft lists it.
 */
export function everyKindNft(table: string, interfaces: { iif: string; oif?: string }, rules: readonly string[]): string {
  const ifRules = [`iif "${interfaces.iif}" accept`, ...(interfaces.oif === undefined ? [] : [`oif "${interfaces.oif}" drop`])];
  const input = [
    ...ifRules,
    'ip saddr @allowed tcp dport ssh accept',
    'tcp dport vmap @svc',
    'ip daddr { 192.0.2.1, 192.0.2.2 } udp dport { 53, 5353 } counter accept',
    ...rules,
  ];
  return `table inet ${table} {
\tcomment "kept"
\tcounter hits { }
\tset allowed {
\t\ttype ipv4_addr
\t\tflags interval
\t\telements = { 10.0.0.0/8, 192.0.2.7 }
\t}
\tmap svc {
\t\ttype inet_service : verdict
\t\telements = { 80 : jump web }
\t}
\tchain web {
\t\tcounter name hits accept comment "web"
\t}
\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\tcomment "in"
${input.map((r) => `\t\t${r}\n`).join('')}\t}
}
`;
}
