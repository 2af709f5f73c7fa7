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
    const fs = require('node:fs');
    const text = `${JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version}\n`;
    // One write(2) to fd 1 instead of process.stdout, whose first use sets up a stream (for a pipe,
    // node:net and a libuv handle) that Node's own start does not. Whatever that write did not
    // take (a full or closed pipe, a full disk: the version is ASCII, a byte a character) goes
    // through process.stdout as before, with its errors.
    let sent = 0;
    try {
      sent = fs.writeSync(1, text);
    } catch {
      // (below)
    }
    if (sent < text.length) process.stdout.write(text.slice(sent));
    return;
  }
  const command = args.find((a) => !a.startsWith('-'));
  // scripts/code-cache.mjs runs a command as a stand-in for a set of them (below) and has its code
  // cache kept in the package.
  const fill = process.env.NFKEEPER_FILL_CODE_CACHE;
  // The commands that only talk to a running daemon run from a script of their own (below); they
  // set no V8 flag.
  const set = fill ?? (command === 'run' ? 'run' : ['validate', 'check', 'apply', 'cleanup', 'gc', 'demo'].includes(command) ? 'config'
    : ['status', 'events', 'owner', 'reload'].includes(command) ? 'client' : 'plain');
  const flags = [];
  if (set === 'run') {
    flags.push('--semi-space-growth-factor=1');
    // The old generation grows by 20 % over what a full collection left, not V8's up to 4x: the
    // start-up's garbage (the config's parse and compile, the install batch, the first reads) is
    // collected as it goes instead of piling up to several times the live heap, at no cost in CPU
    // to ready (bench/rss.ts shows both).
    flags.push('--heap-growing-percent=20');
  } else if (set === 'config') {
    flags.push('--semi-space-growth-factor=1');
    // A command that exits within seconds does not live long enough for V8's optimising compiler
    // to pay for itself: it compiled the parser's and the compiler's hot functions on its own
    // threads while the process was nearly done (Maglev's quicker code stays). The daemon keeps
    // it, and so does export, whose rendering grows with the kernel's table, not with a config;
    // the commands that compile no config (status, events, owner, reload) have nothing for it to
    // compile, and set no flag (below). validate and check keep both flags: a large config is where
    // they pay, and a small one's run is no slower under them (setting them, node:v8, is paid
    // for the code cache's checksum flag below anyway).
    flags.push('--no-turbofan');
  }
  if (flags.length > 0) {
    // V8 takes the code Node compiled for its own modules only under the flags it was compiled
    // with: a module of Node's first loaded after a flag is set is compiled from source. The ones
    // these commands load anyway are loaded first: os (errno names), module and vm (the bundle's
    // loading), import.meta's set-up. A command with no flag keeps all of them. (Not the stdout
    // stream: the commands write to the descriptor, and make the stream only for a write it did
    // not take whole, src/base/fd-output.ts.)
    require('node:os');
    require('node:module');
    require('node:vm');
    void import.meta.url;
    // (node:v8 is the one public way to set a V8 flag at run time, and it loads Node's stream
    // modules with it.)
    const v8 = require('node:v8');
    for (const f of flags) v8.setFlagsFromString(f);
  }
  const { lstatSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } = require('node:fs');
  const { fileURLToPath } = require('node:url');
  const mtime = (u) => statSync(fileURLToPath(u), { throwIfNoEntry: false })?.mtimeMs;
  const cli = new URL('../dist/cli.js', import.meta.url);
  // The build's one-file bundle of dist/ (scripts/bundle.mjs: a smaller RSS, and one V8 script
  // whose code can be cached after it ran), unless it is missing or older than dist/cli.js (tsc
  // run alone after a change). The client commands' is the same command line without what only
  // the other commands run.
  const bundle = new URL(set === 'client' ? '../dist/nfkeeper.client.script.js' : '../dist/nfkeeper.script.js', import.meta.url);
  const built = mtime(cli);
  if (built === undefined) {
    console.error("nfkeeper: not built yet; run 'bash scripts/setup.sh' (or 'npm run build')");
    process.exit(2);
  }
  let main;
  let drained;
  let stderr;
  let keep = () => {};
  if ((mtime(bundle) ?? 0) >= built) {
    const file = fileURLToPath(bundle);
    const text = readFileSync(file, 'latin1');
    // The code cache: V8's bytecode of the bundle's functions, kept on disk after a command ran,
    // so that a command neither parses the bundle nor compiles again the functions it runs. A
    // command reads its own entry, which its first run in this directory wrote, else its set's in
    // the package (scripts/code-cache.mjs, at build and install time, so that a read-only image
    // has one). An entry is named after the Node, the bundle's build and the command (its V8
    // flags); V8 refuses one made by another V8, under other flags or for a script of another
    // length, and the command then compiles from source, only slower. Code read from a cache runs
    // with our privileges: only a directory no one but its owner can write is used, owned by this
    // user (or, the package's, by the package's owner, who can change the code itself). The
    // user's is /var/cache/nfkeeper as root, else under the user's cache directory;
    // NODE_COMPILE_CACHE chooses another and NODE_DISABLE_COMPILE_CACHE=1 turns caching off
    // (Node's own variables for its compile cache, which this replaces).
    let cachedData;
    let from;  // 'own' or 'package': which entry cachedData is
    let mine;  // the directory this command's entry is written to after it ran
    let prefix;
    let tag;
    try {
      const id = /^\/\/ nfkeeper bundle ([0-9a-f]+)\n/.exec(text)?.[1];
      if (id && !process.env.NODE_DISABLE_COMPILE_CACHE) {
        prefix = `${process.version}-${process.arch}-${id}-`;
        const uid = process.geteuid();
        const owned = (dir, owners) => {
          try {
            const st = lstatSync(dir);
            return st.isDirectory() && owners.includes(st.uid) && (st.mode & 0o022) === 0;
          } catch {
            return false;
          }
        };
        const packaged = fileURLToPath(new URL('../dist/code-cache', import.meta.url));
        if (fill) {
          mkdirSync(mine = packaged, { recursive: true, mode: 0o755 });
          tag = fill;
        } else {
          const home = process.env.XDG_CACHE_HOME || (process.env.HOME && `${process.env.HOME}/.cache`);
          const dir = process.env.NODE_COMPILE_CACHE || (uid === 0 ? '/var/cache/nfkeeper' : home && home.startsWith('/') ? `${home}/nfkeeper` : undefined);
          try {
            if (dir) mkdirSync(dir, { recursive: true, mode: 0o700 });
          } catch {
            // (a read-only /var, a home that does not exist: the package's cache only)
          }
          if (/^[a-z]{1,20}$/.test(command ?? '') && dir && owned(dir, [uid])) [mine, tag] = [dir, command];
          try {
            if (mine) [cachedData, from] = [readFileSync(`${mine}/${prefix}${tag}`), 'own'];
          } catch {
            // none yet
          }
          if (cachedData === undefined && owned(packaged, [uid, statSync(fileURLToPath(new URL('../dist', import.meta.url))).uid])) {
            try {
              [cachedData, from] = [readFileSync(`${packaged}/${prefix}${set}`), 'package'];
            } catch {
              // none for this Node
            }
          }
        }
      }
    } catch {
      // no cache: only slower
    }
    const { createRequire } = require('node:module');
    const { Script } = require('node:vm');
    // V8 checks an entry's checksum only under this flag (release builds skip it), and a byte
    // changed on disk would otherwise run as changed bytecode: the flag is on while an entry is
    // read and while one is made (it is part of the flags an entry is made under), and off
    // between, where Node's own modules are compiled under the command's flags.
    const { setFlagsFromString } = require('node:v8');
    const checked = (make) => {
      setFlagsFromString('--verify-snapshot-checksum');
      try {
        return make();
      } finally {
        setFlagsFromString('--no-verify-snapshot-checksum');
      }
    };
    const script = checked(() => new Script(text, { filename: file, cachedData }));
    ({ main, drained, stderr } = script.runInThisContext()(createRequire(file), file));
    if (process.env.NFKEEPER_DEBUG_CODE_CACHE) {
      stderr.write(`nfkeeper: code cache ${from ?? 'none'}${from && script.cachedDataRejected ? ' rejected' : ''}\n`);
    }
    // After the command, where this command's own entry was not there or not taken: its code now,
    // what it compiled as it ran included. Written whole under a temporary name, then renamed, so
    // that no reader sees part of one.
    keep = () => {
      if (!mine || (from === 'own' && !script.cachedDataRejected)) return;
      const name = `${prefix}${tag}`;
      const tmp = `${mine}/.${name}.${process.pid}`;
      try {
        writeFileSync(tmp, checked(() => script.createCachedData()), { mode: 0o644 });
        renameSync(tmp, `${mine}/${name}`);
        // Another entry for this command, once it is a day old: an earlier build's, or one another
        // Node wrote (an upgraded Node never reads its old one again). Not sooner: two builds or
        // two Nodes in use side by side (two installs, a before/after benchmark) would otherwise
        // remove each other's at every run, and each run would compile and write its own again.
        // Only names this code writes: the directory may be Node's own compile cache too.
        const old = Date.now() - 86_400_000;
        const ours = /^v\d+\.\d+\.\d+-[a-z0-9]+-[0-9a-f]+-([a-z]+)$/;
        for (const e of readdirSync(mine)) {
          if (e !== name && ours.exec(e)?.[1] === tag &&
            (lstatSync(`${mine}/${e}`, { throwIfNoEntry: false })?.mtimeMs ?? Infinity) < old) rmSync(`${mine}/${e}`, { force: true });
        }
      } catch {
        try {
          rmSync(tmp, { force: true });
        } catch {
          // (the command's result stands: it has been printed)
        }
      }
    };
  } else {
    ({ main, drained } = await import(cli.href));
  }
  const code = await main(process.argv);
  // stdout's and stderr's streams, where a write made one (a full pipe), are asynchronous: exit only
  // once what was written has reached the kernel, or a reader behind a pipe gets the first 64 KiB
  // and exit 0. (Only those made: asking for process.stderr would make one.)
  await drained();
  // (after the output: a reader has it while the entry is written; a command's help is not what
  // the command runs)
  if ((code === 0 && !args.some((a) => a === '-h' || a === '--help')) || fill) keep();
  // Exit with main's code even if a handle were left open: a process that
  // neither runs nor exits is the one outcome a supervisor cannot handle.
  process.exit(code);
})();
