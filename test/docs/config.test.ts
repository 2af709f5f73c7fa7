/**
 * docs/config.md and docs/config.schema.json against the loader's schema:
 * the committed JSON Schema is what scripts/config-schema.ts generates now,
 * every key in it is in the reference, and the schema accepts the shipped
 * configs and refuses what the loader refuses for the same reason.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { configJsonSchema, SCHEMA_FILE } from '../../scripts/config-schema.js';

const schema = JSON.parse(readFileSync(SCHEMA_FILE, 'utf8'));
const DOC = readFileSync('docs/config.md', 'utf8');

/** Every property path, lists marked with []. */
function keys(n: any, path: string, out: string[]): string[] {
  if (!n || typeof n !== 'object') return out;
  for (const [k, v] of Object.entries<any>(n.properties ?? {})) {
    const p = path ? `${path}.${k}` : k;
    out.push(p);
    keys(v, p, out);
  }
  if (n.items) keys(n.items, `${path}[]`, out);
  for (const a of n.anyOf ?? []) keys(a, path, out);
  return out;
}

describe('config JSON Schema', () => {
  it('is what the generator makes from the zod schema now (run npx tsx scripts/config-schema.ts)', () => {
    expect(readFileSync(SCHEMA_FILE, 'utf8')).toBe(configJsonSchema());
  });

  it('every key is in docs/config.md with its type, default and meaning', () => {
    const all = keys(schema, '', []);
    expect(all).toContain('tables[].chains[].rules');
    expect(all).toContain('gc.live.nomad.address');
    expect(all.filter((k) => !DOC.includes(`| \`${k}\` |`))).toEqual([]);
    const documented = [...DOC.matchAll(/^\| `([a-z.[\]A-Z]+)` \|/gm)].map((m) => m[1]!);
    expect(documented.filter((k) => !all.includes(k))).toEqual([]);
  });

  it('accepts the shipped configs and refuses unknown keys and wrong types', () => {
    const ajv = new Ajv2020({ allErrors: true, strict: false });
    const validate = ajv.compile(schema);
    const shipped = [
      parse(readFileSync('examples/flannel.yaml', 'utf8')),
      parse(readFileSync('examples/podman-gc.yaml', 'utf8')),
      parse(parse(readFileSync('deploy/kubernetes/configmap.yaml', 'utf8')).data['config.yaml']),
      parse(/data = <<EOT\n([\s\S]*?)EOT/.exec(readFileSync('deploy/nomad/nfkeeper.nomad.hcl', 'utf8'))![1]!),
      parse(/data = <<EOT\n([\s\S]*?)EOT/.exec(readFileSync('deploy/nomad/nfkeeper-gc-legacy.nomad.hcl', 'utf8'))![1]!),
    ];
    for (const c of shipped) expect(validate(c), JSON.stringify(validate.errors)).toBe(true);
    expect(validate({ tables: [{ family: 'ip', name: 't', chains: [{ name: 'c', hok: 'input' }] }] })).toBe(false);
    expect(validate.errors![0]!.keyword).toBe('additionalProperties');
    expect(validate({ tables: [{ family: 'arp', name: 't' }] })).toBe(false);
    expect(validate({ gc: { live: { nomad: { address: 'http://127.0.0.1:4646/v1' } } } })).toBe(false);
    expect(validate({ env: { files: '/run/flannel/subnet.env' } })).toBe(false);
  });

  it('the modeline in the docs names the schema file the package ships', () => {
    expect(DOC).toContain('# yaml-language-server: $schema=/usr/lib/node_modules/nfkeeper/docs/config.schema.json');
  });
});
