#!/usr/bin/env node
// Bundles the command line (dist/cli.js, from tsc) and the packages it imports into one script,
// dist/nfkeeper.script.js, which bin/nfkeeper.js compiles as one V8 script with the code cache that
// scripts/code-cache.mjs made (or a command's own first run wrote). Why a bundle
// (docs/latency-and-memory.md, Memory, and One-shot commands): Node keeps the source text of every
// module it loaded for the process's life, and the ESM loader's per-module work touches node's own
// code. As some 300 files (many of them zod's, its locales among them) an idle daemon's heap and
// file pages held them all; one file with comments and whitespace gone, and what nothing imports
// left out, is smaller in both. Why one script and not ES module chunks: V8's code cache of a
// script can be made after the script ran, so it holds the functions a command compiled lazily
// as well; Node's compile cache of an ES module is written when the module is compiled, before any
// function of it ran, and each process compiled every function it ran again. A dynamic import in
// src/ stays lazy: esbuild makes it a call of the imported module's initialiser, so a command
// evaluates only the modules it uses. dist/ keeps the modules (the library entry, dist/index.js,
// and the fallback when the bundle is missing or older than dist/cli.js).
//
// Identifiers are not minified, so stack traces still name functions. The dependencies stay
// declared in package.json (the library uses them); their licences are in their packages.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

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

// The bundle sits beside the modules in dist/, as they do: src/native.ts finds the package one
// level up from itself, and cli.ts its package.json. The last build's bundle, its code cache and
// the ES module chunks of earlier builds go.
const dist = join(root, 'dist');
for (const f of readdirSync(dist)) if (/^nfkeeper\..*(js)$/.test(f)) rmSync(join(dist, f));
for (const d of ['code-cache', 'compile-cache']) rmSync(join(dist, d), { recursive: true, force: true });
// The commands that only talk to a running daemon (status, events, owner, reload: bin/nfkeeper.js
// lists them) run from a second script made from the same entry, dist/cli.js, with every command
// defined as in the first (the same help, the same errors), but without what the other commands
// import when they run: the config's parser and compiler, the kernel's modules, the daemon. Such a
// command read and deserialised the whole bundle to run a few per cent of it.
const clientImports = new Set(['./owners/client.js', './keeper/attribution.js', './keeper/http.js', './reload-status.js', './base/regular-file.js', 'yaml']);
const clientOnly = {
  name: 'client-only',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (a) => a.kind === 'dynamic-import' && a.importer === join(dist, 'cli.js') && !clientImports.has(a.path)
      ? { path: a.path, namespace: 'not-in-client' } : undefined);
    // (reached only if one of these commands imported it: test/cli/bundle.test.ts runs each of them)
    b.onLoad({ filter: /.*/, namespace: 'not-in-client' }, (a) => ({
      contents: `throw new Error(${JSON.stringify(`${a.path} is not in the client commands' bundle (scripts/bundle.mjs)`)});`, loader: 'js',
    }));
  },
};

const bundle = async (outfile, plugins) => {
  const { outputFiles } = await build({
    entryPoints: [join(dist, 'cli.js')],
    outfile: join(dist, outfile),
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node22',
    // ASCII only: read as latin1, the source is one byte a character, as V8 keeps it.
    charset: 'ascii',
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none',
    // The modules are ES modules, strict throughout; the script is too (below). import.meta.url is
    // the bundle's own URL, as it was each module's in the bundle's directory.
    define: { 'import.meta.url': '__nfkeeper_url' },
    // The addon is loaded at run time from build/ or prebuilds/ (src/netlink/addon.ts).
    external: ['*.node'],
    plugins: [lazyBuiltins, ...plugins],
    logLevel: 'warning',
    write: false,
  });
  if (outputFiles.length !== 1) throw new Error(`bundle: ${outputFiles.length} output files, not one`);
  // esbuild escapes every character beyond ASCII but those in a regular expression's literal
  // (duration.ts's µs), where \uXXXX means the same character.
  const ascii = outputFiles[0].text.replace(/[^\x00-\x7f]/g, (c) => {
    if (c.charCodeAt(0) >= 0xd800 && c.charCodeAt(0) < 0xe000) throw new Error('bundle: a character beyond the BMP in a regular expression');
    return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
  // A function of what a CommonJS module has from its wrapper, which returns the exports: the file is
  // the script as V8 compiles it (no copy of it made to wrap it), and its lines are its own.
  const body = '(function (require, __filename) {"use strict";var module={exports:{}},exports=module.exports;' +
    `var __nfkeeper_url=require("node:url").pathToFileURL(__filename).href;\n${ascii}return module.exports;})\n`;
  // The first line names this build (a digest of the rest): a code cache is kept under it, since V8
  // checks only a cached script's length, not its text.
  const id = createHash('sha256').update(body).digest('hex').slice(0, 16);
  writeFileSync(outputFiles[0].path, `// nfkeeper bundle ${id}\n${body}`);
};
await bundle('nfkeeper.script.js', []);
await bundle('nfkeeper.client.script.js', [clientOnly]);
