#!/usr/bin/env node
// No Node flags on this line: the commands choose their young generation below (V8 takes heap
// sizes only from the command line, but reads the growth factor each time the young generation
// would grow). `run` keeps 1 MiB semi-spaces instead of growing them up to 16 MiB: the daemon
// allocates little between passes, and at start-up the default grew a young generation it kept
// for ever (bench/rss.ts shows it). The one-shot commands (validate, check, apply) keep 1 MiB
// semi-spaces too: what survives a scavenge there is the rules compiled since the last one, each
// promoted after its second, so a bigger young generation saved no copying and only grew the
// process (every page of it faulted in); docs/notes/2026-12-05-apply-speed.md. export keeps V8's
// default.
// No static imports and no top-level await: an old Node must get as far as
// the version check below and say what is wrong in one line.
const [major] = process.versions.node.split('.').map(Number);
if (major < 22) {
  process.stderr.write(`nfkeeper: needs Node.js 22 or newer (the supported lines are 22 and 24), this is v${process.versions.node} (${process.execPath}); ` +
    "Debian 12's nodejs package is 18: install Node from NodeSource or a nodejs.org tarball (see README, Install)\n");
  process.exit(2);
}

(async () => {
  // Node's own modules without import: an import makes each one's ES module facade, which reads
  // every export, lazy ones included (node:fs's streams). process.getBuiltinModule (Node 22.3 and
  // later) does not set up a CommonJS require() either.
  const require = process.getBuiltinModule ?? (await import('node:module')).createRequire(import.meta.url);
  const args = process.argv.slice(2);
  // `nfkeeper version` (and -V, --version) alone needs nothing of the command line's bundle: the
  // version is package.json's, as cli.ts prints it (test/cli/bundle.test.ts holds them equal).
  if (args.length === 1 && ['version', '--version', '-V'].includes(args[0])) {
    const pkg = require('node:fs').readFileSync(new URL('../package.json', import.meta.url), 'utf8');
    process.stdout.write(`${JSON.parse(pkg).version}\n`);
    return;
  }
  const v8 = require('node:v8');
  const command = args.find((a) => !a.startsWith('-'));
  if (command === 'run') {
    v8.setFlagsFromString('--semi-space-growth-factor=1');
    // The old generation grows by 20 % over what a full collection left, not V8's up to 4x: the
    // start-up's garbage (the config's parse and compile, the install batch, the first reads) is
    // collected as it goes instead of piling up to several times the live heap, at no cost in CPU
    // to ready (bench/rss.ts shows both).
    v8.setFlagsFromString('--heap-growing-percent=20');
  } else if (command !== 'export') {
    v8.setFlagsFromString('--semi-space-growth-factor=1');
    // A command that exits within seconds does not live long enough for V8's optimising compiler
    // to pay for itself: it compiled the parser's and the compiler's hot functions on its own
    // threads while the process was nearly done (Maglev's quicker code stays). The daemon keeps
    // it, and so does export, whose rendering grows with the kernel's table, not with a config.
    v8.setFlagsFromString('--no-turbofan');
  }
  const { lstatSync, mkdirSync, statSync } = require('node:fs');
  const { fileURLToPath } = require('node:url');
  // Node's compile cache: V8's code for our modules, kept on disk, so that a command does not
  // parse and compile the bundle again each time it starts. Only in a directory this user alone
  // can write (code read from it runs with our privileges); anywhere else, or where it cannot be
  // made (a read-only /var), the command runs without it. NODE_COMPILE_CACHE chooses another
  // directory, NODE_DISABLE_COMPILE_CACHE=1 turns it off (both Node's own).
  const { enableCompileCache } = require('node:module');
  if (typeof enableCompileCache === 'function' && !process.env.NODE_COMPILE_CACHE && !process.env.NODE_DISABLE_COMPILE_CACHE) {
    const home = process.env.XDG_CACHE_HOME || (process.env.HOME && `${process.env.HOME}/.cache`);
    const dir = process.geteuid() === 0 ? '/var/cache/nfkeeper' : home && home.startsWith('/') ? `${home}/nfkeeper` : undefined;
    try {
      if (dir) mkdirSync(dir, { recursive: true, mode: 0o700 });
      const st = dir && lstatSync(dir);
      if (st && st.isDirectory() && st.uid === process.geteuid() && (st.mode & 0o022) === 0) enableCompileCache(dir);
    } catch {
      // no cache: only slower
    }
  }
  const mtime = (u) => statSync(fileURLToPath(u), { throwIfNoEntry: false })?.mtimeMs;
  const cli = new URL('../dist/cli.js', import.meta.url);
  // The build's one-file bundle of dist/ (scripts/bundle.mjs: a smaller RSS), unless it is
  // missing or older than dist/cli.js (tsc run alone after a change).
  const bundle = new URL('../dist/nfkeeper.mjs', import.meta.url);
  const built = mtime(cli);
  if (built === undefined) {
    console.error("nfkeeper: not built yet; run 'bash scripts/setup.sh' (or 'npm run build')");
    process.exit(2);
  }
  const { main } = await import((mtime(bundle) ?? 0) >= built ? bundle.href : cli.href);
  const code = await main(process.argv);
  // stdout and stderr are asynchronous on pipes and sockets: exit only once what was written has
  // reached the kernel, or a reader behind a pipe gets the first 64 KiB and exit 0.
  await Promise.all([process.stdout, process.stderr].map((s) => new Promise((done) => {
    if (s.destroyed || !s.writable) return done();
    s.once('error', done);
    s.write('', () => done());
  })));
  // Exit with main's code even if a handle were left open: a process that
  // neither runs nor exits is the one outcome a supervisor cannot handle.
  process.exit(code);
})();
