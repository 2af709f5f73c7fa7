#!/usr/bin/env node
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  console.error("nfkeeper: not built yet; run 'bash scripts/setup.sh' (or 'npm run build')");
  process.exit(2);
}
const { main } = await import(cli.href);
process.exitCode = await main(process.argv);
