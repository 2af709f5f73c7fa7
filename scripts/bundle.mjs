#!/usr/bin/env node
// Bundles the command line (dist/cli.js, from tsc) and the packages it imports into one file,
// dist/nfkeeper.mjs, which bin/nfkeeper.js runs. Why (docs/latency-and-memory.md, Memory): Node
// keeps the source text of every module it loaded for the process's life, and the ESM loader's
// per-module work touches node's own code. As some 300 files (many of them zod's, its locales
// among them) an idle daemon's heap and file pages held them all; one file with comments and
// whitespace gone, and what nothing imports left out, is smaller in both. dist/ keeps the modules
// (the library entry, dist/index.js, and the fallback when the bundle is missing or older than
// dist/cli.js).
//
// Identifiers are not minified, so stack traces still name functions. The dependencies stay
// declared in package.json (the library uses them); their licences are in their packages.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

await build({
  entryPoints: [join(root, 'dist', 'cli.js')],
  outfile: join(root, 'dist', 'nfkeeper.mjs'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'none',
  // The addon is loaded at run time from build/ or prebuilds/ (src/netlink/addon.ts).
  external: ['*.node'],
  // The CommonJS packages (commander, yaml, pino, prom-client) call require() for Node's own
  // modules; an ES module has no require of its own.
  banner: { js: "import { createRequire as __nfkRequire } from 'node:module'; const require = __nfkRequire(import.meta.url);" },
  logLevel: 'warning',
});
