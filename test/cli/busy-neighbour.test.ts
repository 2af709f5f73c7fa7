/**
 * A one-shot read under a busy neighbour: `nfkeeper export` of a 20,000-rule table while another
 * process adds and deletes a table of its own as fast as it can (~35,000 commits a second here).
 * Its rule dump is interrupted (the ruleset's generation moves between its datagrams) by commits that
 * name another table only, and is taken (native/dump.cc: the watch); before the watch every attempt
 * was interrupted and the export failed (exit 2, "interrupted ... on all 32 attempts"), and before
 * the watch's receive buffer (NftSocket::WatchBuffer) it failed so at 10,000 commits a second under
 * load: the neighbour's notifications overflowed the default buffer in any stall of the reader.
 * The text is the quiet export's.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ip } from '../helpers/big-chain.js';
import { cli, type CliResult } from '../helpers/cli.js';
import { startNeighbour } from '../helpers/neighbour.js';
import { withNetns } from '../helpers/netns.js';

const N = 20_000;
const BIN = fileURLToPath(new URL('../../bin/nfkeeper.js', import.meta.url));

/** `nfkeeper export` (the built bundle) stopped for `stopMs` every `everyMs` (SIGSTOP, SIGCONT) until it exits: a reader stalled by the scheduler, made to happen. */
function stalledExport(args: string[], stopMs: number, everyMs: number): Promise<{ code: number | null; out: string; err: string; stops: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '', stops = 0, exited = false;
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setInterval(() => {
      if (exited) return;
      child.kill('SIGSTOP');
      stops++;
      setTimeout(() => { if (!exited) child.kill('SIGCONT'); }, stopMs);
    }, everyMs);
    child.on('error', reject);
    child.on('close', (code) => {
      exited = true;
      clearInterval(timer);
      resolve({ code, out, err, stops });
    });
  });
}
const RATE = 'max';

/**
 * A 20,000-rule table, its quiet export, and the export `busy` makes of it while the neighbour
 * commits as fast as it can; the neighbour's commits meanwhile.
 */
async function underNeighbour<T extends { code: number | null; out: string; err: string }>(tag: string, busy: (args: string[]) => Promise<T>):
  Promise<{ quiet: CliResult; busy: T; commits: number }> {
  return withNetns(async (ns) => {
    const rules = Array.from({ length: N }, (_, i) => `add rule ip big c ip saddr ${ip(i)} accept`);
    ns.nft(`add table ip big\nadd chain ip big c\n${rules.join('\n')}\n`);
    const args = ['export', '--table', 'ip', 'big', '--netns', ns.path, '--no-progress'];
    const quiet = await cli(...args);
    expect(quiet.code, quiet.err).toBe(0);
    const neighbour = await startNeighbour(ns.path, RATE);
    let got: T;
    let commits = 0;
    try {
      got = await busy(args);
    } finally {
      ({ commits } = await neighbour.stop());
    }
    return { quiet, busy: got, commits };
  }, tag);
}

describe('a one-shot read under a busy neighbour', () => {
  it(`export of a 20,000-rule table succeeds while another table is committed to as fast as another process can, and prints the quiet export`, async () => {
    const { quiet, busy, commits } = await underNeighbour('busy-export', (args) => cli(...args));
    expect(commits, 'the neighbour committed while the export read').toBeGreaterThan(10);
    expect(busy.code, busy.err).toBe(0);
    expect(busy.out).toBe(quiet.out);
  }, 120_000);

  it('export under the neighbour succeeds though the reader is stopped 40 ms in every 150: the notifications of the stall wait in the watch\'s buffer', async () => {
    const { quiet, busy } = await underNeighbour('busy-export-stall', (args) => stalledExport(args, 40, 150));
    expect(busy.stops, 'the reader was stopped').toBeGreaterThan(0);
    expect(busy.code, busy.err).toBe(0);
    expect(busy.out.trimEnd()).toBe(quiet.out.trimEnd());
  }, 120_000);
});
