/** The long chain tests and benches install: table ip big, chain c, one address per rule so that every rule differs. */

/** Address `i`: 10.x.y.z, distinct up to 2^24. */
export const ip = (i: number): string => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

/**
 * A YAML config of table ip big with one chain c of `n` rules, `rule(i)` each (`ip saddr ADDR accept`
 * by default): a base chain on forward (policy accept), or a regular chain with `base: false`.
 */
export function chainYaml(n: number, { rule = (i: number) => `ip saddr ${ip(i)} accept`, base = true } = {}): string {
  const out = ['tables:', '  - family: ip', '    name: big', '    chains:', '      - name: c'];
  if (base) out.push('        type: filter', '        hook: forward', '        priority: filter', '        policy: accept');
  out.push('        rules:');
  for (let i = 0; i < n; i++) out.push(`          - ${rule(i)}`);
  return `${out.join('\n')}\n`;
}
