#!/usr/bin/env node
// No Node flags on this line: the commands choose their young generation below (V8 takes heap
// sizes only from the command line, but reads the growth factor each time the young generation
// would grow). `run` keeps 1 MiB semi-spaces instead of growing them up to 16 MiB: the daemon
// allocates little between passes, and at start-up the default grew a young generation it kept
// for ever (bench/rss.ts shows it). The one-shot commands (validate, check, apply) keep V8's
// default: with 1 MiB a big file's compile scavenged every few hundred rules, copying what it had
// compiled so far.
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
  const command = args.find((a) => !a.startsWith('-'));
  const flags = [];
  if (command === 'run') {
    flags.push('--semi-space-growth-factor=1');
    // The old generation grows by 20 % over what a full collection left, not V8's up to 4x: the
    // start-up's garbage (the config's parse and compile, the install batch, the first reads) is
    // collected as it goes instead of piling up to several times the live heap, at no cost in CPU
    // to ready (bench/rss.ts shows both).
    flags.push('--heap-growing-percent=20');
  } else if (['validate', 'check', 'apply', 'cleanup', 'gc', 'demo'].includes(command)) {
    // A command that exits within seconds does not live long enough for V8's optimising compiler
    // to pay for itself: it compiled the parser's and the compiler's hot functions on its own
    // threads while the process was nearly done (Maglev's quicker code stays). The daemon keeps
    // it, and so does export, whose rendering grows with the kernel's table, not with a config;
    // the commands that compile no config (status, events, owner, reload) have nothing for it to
    // compile, and set no flag (below).
    flags.push('--no-turbofan');
  }
  if (flags.length > 0) {
    // V8 takes the code Node compiled for its own modules only under the flags it was compiled
    // with: a module of Node's first loaded after a flag is set is compiled from source. The ones
    // these commands load anyway are loaded first: the stdout stream, os (errno names), module
    // (the bundle's require), import.meta's set-up. A command with no flag keeps all of them.
    require('node:os');
    require('node:module');
    void process.stdout;
    void import.meta.url;
    const v8 = require('node:v8');
    for (const f of flags) v8.setFlagsFromString(f);
  }
  const { lstatSync, mkdirSync, readdirSync, statSync } = require('node:fs');
  const { fileURLToPath } = require('node:url');
  // Node's compile cache: V8's code for our modules, kept on disk, so that a command does not
  // parse and compile the bundle again each time it starts. First the package's own,
  // dist/compile-cache (scripts/compile-cache.mjs fills it at build and install time, so a
  // read-only image has one), when it holds an entry for this Node and this user; else, as root,
  // /var/cache/nfkeeper, otherwise the user's cache directory. Code read from it runs with our
  // privileges: only a directory no one but its owner can write is used, owned by this user (or,
  // the package's, by the package's owner, who can change the code itself); where none fits or
  // none can be made (a read-only /var), the command runs without it. NODE_COMPILE_CACHE
  // chooses another directory, NODE_DISABLE_COMPILE_CACHE=1 turns it off (both Node's own).
  const { enableCompileCache } = require('node:module');
  const fill = process.env.NFKEEPER_FILL_COMPILE_CACHE === '1';
  if (typeof enableCompileCache === 'function' && !process.env.NODE_COMPILE_CACHE && !process.env.NODE_DISABLE_COMPILE_CACHE) {
    const uid = process.geteuid();
    const owned = (dir, owners) => {
      const st = lstatSync(dir, { throwIfNoEntry: false });
      return st !== undefined && st.isDirectory() && owners.includes(st.uid) && (st.mode & 0o022) === 0;
    };
    try {
      const packaged = fileURLToPath(new URL('../dist/compile-cache', import.meta.url));
      // Node's subdirectory per Node version, architecture, V8 flags and user: v24.1.0-x64-HASH-UID
      const ours = (e) => e.startsWith(`${process.version}-${process.arch}-`) && e.endsWith(`-${uid}`);
      let dir;
      if (fill) mkdirSync(dir = packaged, { recursive: true, mode: 0o755 });
      else if (owned(packaged, [uid, statSync(fileURLToPath(new URL('../dist', import.meta.url))).uid]) && readdirSync(packaged).some(ours)) dir = packaged;
      else {
        const home = process.env.XDG_CACHE_HOME || (process.env.HOME && `${process.env.HOME}/.cache`);
        const mine = uid === 0 ? '/var/cache/nfkeeper' : home && home.startsWith('/') ? `${home}/nfkeeper` : undefined;
        if (mine) mkdirSync(mine, { recursive: true, mode: 0o700 });
        if (mine && owned(mine, [uid])) dir = mine;
      }
      // Keyed by the modules' paths relative to the cache (Node 24.12 and later), so that the
      // package's cache still fits once the package is copied elsewhere (an image's COPY);
      // an older Node takes only a directory, and keys by absolute path.
      if (dir) {
        try {
          enableCompileCache({ directory: dir, portable: true });
        } catch {
          enableCompileCache(dir);
        }
      }
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
  if (fill) {
    // scripts/compile-cache.mjs: compile every chunk of the bundle into the package's cache
    // (evaluating them loads nothing native), with this command's V8 flags, and stop.
    const dist = new URL('../dist/', import.meta.url);
    for (const f of readdirSync(dist).filter((n) => /^nfkeeper\.(.*\.)?mjs$/.test(n))) await import(new URL(f, dist).href);
    require('node:module').flushCompileCache?.();
    return;
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
