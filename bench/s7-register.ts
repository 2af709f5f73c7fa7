/**
 * S7's registration alone (bench/scenarios/s7.ts registerOwners), for profiling the daemon:
 *
 *   npx tsx bench/s7-register.ts [--owners 1000] [--in-flight 1,8] [--root DIR] [--cpu-prof DIR] [--settle S] [--node-flags 'FLAGS']
 *
 * Each level registers the owners into a fresh `nfkeeper run` (this checkout's build, or --root's);
 * with --cpu-prof the daemon writes a V8 CPU profile there when it stops (open it in Chrome's
 * DevTools, or summarise it with bench/lib/cpuprofile.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PROJECT_ROOT } from '../src/netlink/addon.js';
import { registerOwners } from './scenarios/s7.js';
import { parseArgs } from './lib/args.js';

const cli = parseArgs(import.meta.url, { '--owners': 1, '--in-flight': 1, '--root': 1, '--cpu-prof': 1, '--settle': 1, '--node-flags': 1 });
const arg = cli.value;
const owners = Number(arg('--owners') ?? 1000);
const levels = (arg('--in-flight') ?? '1').split(',').map(Number);
const root = arg('--root') ? resolve(arg('--root')!) : PROJECT_ROOT;
const prof = arg('--cpu-prof') ? resolve(arg('--cpu-prof')!) : undefined;
// --settle S: the daemon's RSS S seconds after the last answer (S7 waits 12 s, past the read-back).
const settleMs = Number(arg('--settle') ?? 0) * 1000;
// --node-flags: more Node/V8 flags for the daemon (say --min-semi-space-size=8, to see what collection costs).
const nodeFlags = (arg('--node-flags') ?? '').split(/\s+/).filter(Boolean);
const dir = mkdtempSync(join(tmpdir(), 'nfk-s7r-'));
try {
  for (const inFlight of levels) {
    await registerOwners({ root, dir, port: 19950 + (process.pid % 40), owners, inFlight, log: (m) => console.error(m), cpuProfDir: prof, settleMs, nodeFlags });
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
