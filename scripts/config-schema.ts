/**
 * Writes docs/config.schema.json, the JSON Schema of the config file, from
 * the zod schema the loader validates with (z.toJSONSchema, input side: what
 * a user writes, defaults included). Editors use it through the
 * yaml-language-server modeline (docs/config.md). `--check` exits 1 when the
 * committed file is stale; test/docs/config.test.ts runs that check.
 *   npx tsx scripts/config-schema.ts [--check]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { z } from 'zod';
import { CONFIG_SCHEMA } from '../src/config/config.js';

export const SCHEMA_FILE = 'docs/config.schema.json';

export function configJsonSchema(): string {
  const schema = z.toJSONSchema(CONFIG_SCHEMA, { io: 'input', unrepresentable: 'any', target: 'draft-2020-12' });
  const out = {
    ...schema,
    title: 'nfkeeper config',
    description: 'The nfkeeper config file (docs/config.md). Generated from src/config by scripts/config-schema.ts: do not edit. '
      + 'Rule texts, ${NAME} variables and cross-references (jumps, owners.table) are checked by `nfkeeper validate`, not here.',
  };
  return JSON.stringify(out, null, 2) + '\n';
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const text = configJsonSchema();
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(SCHEMA_FILE, 'utf8');
    } catch { /* missing is stale */ }
    if (current !== text) {
      console.error(`${SCHEMA_FILE} is stale: run npx tsx scripts/config-schema.ts`);
      process.exit(1);
    }
  } else writeFileSync(SCHEMA_FILE, text);
}
