#!/usr/bin/env node
// No static imports and no top-level await: an old Node must get as far as
// the version check below and say what is wrong in one line.
const [major] = process.versions.node.split('.').map(Number);
if (major < 20) {
  process.stderr.write(`nfkeeper: needs Node.js 20 or newer, this is v${process.versions.node} (${process.execPath}); ` +
    "Debian 12's nodejs package is 18: install Node from NodeSource or a nodejs.org tarball (see README, Install)\n");
  process.exit(2);
}

(async () => {
  const { existsSync } = await import('node:fs');
  const { fileURLToPath } = await import('node:url');
  const cli = new URL('../dist/cli.js', import.meta.url);
  if (!existsSync(fileURLToPath(cli))) {
    console.error("nfkeeper: not built yet; run 'bash scripts/setup.sh' (or 'npm run build')");
    process.exit(2);
  }
  const { main } = await import(cli.href);
  // Exit with main's code even if a handle were left open: a process that
  // neither runs nor exits is the one outcome a supervisor cannot handle.
  process.exit(await main(process.argv));
})();
