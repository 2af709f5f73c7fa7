/** The two large configs test/reliability/crash.test.ts swaps between. */
// Two tables, one protected (owner|persist), so both repair and protect mode crash.
export const TABLES = [{ name: 'crash_a', protect: false }, { name: 'crash_b', protect: true }] as const;

export interface Ruleset {
  tag: string;
  /** table -> chain -> the rule comments in order. */
  tables: Record<string, Record<string, string[]>>;
  yaml: string;
}

/** A config of `perChain` rules in each of two chains of each table; every rule's comment is `<tag>-<table>-<chain>-<i>`. */
export function ruleset(tag: string, perChain: number, salt: number): Ruleset {
  const tables: Ruleset['tables'] = {};
  let yaml = 'tables:\n';
  for (const t of TABLES) {
    tables[t.name] = {};
    yaml += `  - family: ip\n    name: ${t.name}\n    protect: ${t.protect}\n    chains:\n`;
    for (const chain of ['postrouting', 'helper']) {
      const comments: string[] = [];
      yaml += chain === 'postrouting'
        ? `      - name: postrouting\n        type: nat\n        hook: postrouting\n        priority: srcnat\n        rules:\n`
        : `      - name: helper\n        rules:\n`;
      if (chain === 'postrouting') {
        const c = `${tag}-${t.name}-jump`;
        comments.push(c);
        yaml += `          - ip saddr 10.0.0.0/8 jump helper comment "${c}"\n`;
      }
      for (let i = 0; i < perChain; i++) {
        const c = `${tag}-${t.name}-${chain}-${i}`;
        comments.push(c);
        const a = (i * 7 + salt) % 250, b = Math.floor(i / 250) % 250;
        const stmt = chain === 'postrouting' ? `ip daddr != 224.0.0.0/4 counter masquerade` : `counter return`;
        yaml += `          - ip saddr 10.${b}.${a}.0/24 ${stmt} comment "${c}"\n`;
      }
      tables[t.name]![chain] = comments;
    }
  }
  return { tag, tables, yaml };
}

// 2 tables × ~1500 rules: one batch of about 3,000 rules.
export const OLD = ruleset('A', 750, 1);
export const NEW = ruleset('B', 700, 3);

