#!/usr/bin/env node
// Bundles the command line (dist/cli.js, from tsc) and the packages it imports into
// dist/nfkeeper.mjs, which bin/nfkeeper.js runs, split at the dynamic imports into chunks beside it
// (dist/nfkeeper.*.mjs) so that a command loads only what it uses. Why a bundle
// (docs/latency-and-memory.md, Memory, and One-shot commands): Node keeps the source text of every
// module it loaded for the process's life, and the ESM loader's per-module work touches node's own
// code. As some 300 files (many of them zod's, its locales among them) an idle daemon's heap and
// file pages held them all; a few dozen files with comments and whitespace gone, and what nothing
// imports left out, are smaller in both. dist/ keeps the modules (the library entry,
// dist/index.js, and the fallback when the bundle is missing or older than dist/cli.js).
//
// Identifiers are not minified, so stack traces still name functions. The dependencies stay
// declared in package.json (the library uses them); their licences are in their packages.
import { build } from 'esbuild';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// Node's own modules are required, not imported: an import of one makes its ES module facade,
// which reads every export, lazy ones included (node:http's loads undici, node:fs's its streams),
// where require() leaves them for the code that uses them.
const builtins = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));
const requireBuiltins = {
  name: 'require-builtins',
  setup(b) {
    b.onResolve({ filter: /^[a-z_:/]+$/ }, (a) => (a.kind === 'import-statement' || a.kind === 'dynamic-import') && builtins.has(a.path)
      ? { path: a.path, namespace: 'builtin' } : undefined);
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, (a) => ({ contents: `module.exports = require(${JSON.stringify(a.path)});`, loader: 'js' }));
  },
};

// commander requires node:child_process at its top, for executable subcommands (nfkeeper has none):
// a stand-in loads it at its first use, so that a command does not load child_process, net's
// dgram and their bindings for nothing.
const lazyBuiltins = {
  name: 'lazy-builtins',
  setup(b) {
    b.onResolve({ filter: /^(node:)?child_process$/ }, (a) => a.kind === 'require-call' && /[/\\]commander[/\\]/.test(a.importer)
      ? { path: 'node:child_process', namespace: 'lazy-builtin' } : undefined);
    b.onLoad({ filter: /.*/, namespace: 'lazy-builtin' }, (a) => ({
      contents: `let m; module.exports = new Proxy({}, { get: (_, k) => (m ??= require(${JSON.stringify(a.path)}))[k] });`, loader: 'js',
    }));
  },
};

// The chunks sit beside the entry in dist/, as the modules do: src/native.ts finds the package
// one level up from itself, and cli.ts its package.json. A build leaves no chunk of the last one.
for (const f of readdirSync(join(root, 'dist'))) if (/^nfkeeper\..*\.mjs$/.test(f)) rmSync(join(root, 'dist', f));
const { outputFiles } = await build({
  entryPoints: [join(root, 'dist', 'cli.js')],
  outdir: join(root, 'dist'),
  entryNames: 'nfkeeper',
  chunkNames: 'nfkeeper.[name]-[hash]',
  outExtension: { '.js': '.mjs' },
  splitting: true,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'none',
  // The addon is loaded at run time from build/ or prebuilds/ (src/netlink/addon.ts).
  external: ['*.node'],
  plugins: [requireBuiltins, lazyBuiltins],
  logLevel: 'warning',
  write: false,
});
// The CommonJS packages (commander, yaml, pino, prom-client) and the builtins above are loaded by
// esbuild's __require, which calls the module's own require(); an ES module has none. It is
// defined once, in the chunk that holds __require (a banner would make one in every chunk).
const REQUIRE = "import { createRequire as __nfkRequire } from 'node:module'; const require = __nfkRequire(import.meta.url);\n";
const holders = outputFiles.filter((f) => f.text.includes('var __require='));
if (holders.length !== 1) throw new Error(`bundle: __require is defined in ${holders.length} chunks, not one`);
for (const f of outputFiles) writeFileSync(f.path, holders.includes(f) ? REQUIRE + f.text : f.contents);
