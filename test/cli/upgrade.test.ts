/**
 * Adoption across versions: the previous release installs the config's rules
 * and two owners (tagged rules, the state file); this checkout's daemon then
 * starts on the same namespace, config and state and adopts all of it
 * without a write: same generation, same handles, same state file.
 *
 * The previous release is PREVIOUS (there are no tags yet): main as it was
 * before start-up became all or nothing, the version deployed today. It is unpacked with `git
 * archive` into a cached directory and run through tsx with this checkout's
 * node_modules; its addon is this checkout's build/ when native/ and
 * binding.gyp are unchanged since, and is built there once otherwise (the
 * first run then takes a few minutes on a loaded machine; later ones ~12 s).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { open } from '../../src/netlink/socket.js';
import { createNetns } from '../helpers/netns.js';
import { ownersYaml, ownerSpec, tempDir } from '../owners/fixtures.js';
import { nfk, nfkDone, rawCall, waitFor } from './spawn.js';

const PREVIOUS = 'e279fcfd79075b135bdc8b94e7dce3bb89188e4f';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The previous release's tree, unpacked once per machine, with an addon that
 * matches its native/ sources: this checkout's build/ while they are the same,
 * else its own build (once), kept beside it.
 */
function previousTree(): string {
  const dir = join(tmpdir(), `nfkeeper-prev-${PREVIOUS.slice(0, 12)}`);
  if (!existsSync(join(dir, '.unpacked'))) {
    const has = spawnSync('git', ['cat-file', '-e', `${PREVIOUS}^{commit}`], { cwd: ROOT });
    if (has.status !== 0) throw new Error(`the previous release ${PREVIOUS} is not in this clone (a shallow checkout?); fetch it to run this test`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    execFileSync('bash', ['-c', `git -C "${ROOT}" archive ${PREVIOUS} | tar -x -C "${dir}"`]);
    writeFileSync(join(dir, 'entry.mts'), "import { main } from './src/cli.ts';\nprocess.exit(await main(process.argv));\n");
    writeFileSync(join(dir, '.unpacked'), `${PREVIOUS}\n`);
  }
  // The cache outlives the checkout that made it (worktrees and CI clones come
  // and go), so its node_modules link is pointed at this checkout every time.
  rmSync(join(dir, 'node_modules'), { force: true });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  const sameNative = spawnSync('git', ['diff', '--quiet', PREVIOUS, '--', 'native', 'binding.gyp'], { cwd: ROOT }).status === 0;
  const build = join(dir, 'build');
  if (sameNative) {
    rmSync(build, { recursive: true, force: true });
    symlinkSync(join(ROOT, 'build'), build);
  } else if (!existsSync(join(dir, '.built'))) {
    rmSync(build, { recursive: true, force: true });
    execFileSync(process.execPath, ['scripts/build-native.mjs', '--force'], { cwd: dir, stdio: 'ignore' });
    writeFileSync(join(dir, '.built'), `${PREVIOUS}\n`);
  }
  return dir;
}

describe('adoption across versions', () => {
  // The first run on a machine may build the previous addon: minutes on a loaded machine.
  it('rules, owner tags and state written by the previous release are adopted without a write', { timeout: 600_000 }, async () => {
    const t0 = performance.now();
    const prev = previousTree();
    const ns = createNetns('upgrade');
    const d = tempDir('upgrade');
    const config = join(d, 'config.yaml');
    writeFileSync(config, ownersYaml(d));
    const socket = join(d, 'nfkeeper.sock');
    const sock = open({ netns: ns.path });
    const old = spawn(process.execPath, ['--import', 'tsx', 'entry.mts', 'run', '-c', config, '--netns', ns.path, '--no-metrics', '--interval', '1h'],
      { cwd: prev, stdio: ['ignore', 'pipe', 'pipe'] });
    const oldOut: string[] = [];
    old.stdout.on('data', (b: Buffer) => oldOut.push(b.toString()));
    old.stderr.on('data', (b: Buffer) => oldOut.push(b.toString()));
    const oldExit = new Promise<number | null>((r) => old.on('exit', (code) => r(code)));
    let current: ReturnType<typeof nfk> | undefined;
    try {
      let oldCode: number | null | undefined;
      void oldExit.then((c) => { oldCode = c; });
      await waitFor('the previous release running', () => {
        if (oldCode !== undefined) throw new Error(`the previous release exited ${oldCode} before running`);
        return oldOut.join('').includes('"msg":"nfkeeper running"');
      }, 30_000).catch((e: Error) => { throw new Error(`${e.message}\n${oldOut.join('').slice(-4000)}`); });
      for (const id of ['alloc-1', 'alloc-2']) {
        expect((await rawCall(socket, 'PUT', `/v1/owners/${id}`, JSON.stringify(ownerSpec(Number(id.slice(-1)))))).status).toBe(201);
      }
      old.kill('SIGTERM');
      expect(await oldExit).toBe(0);

      const ruleset = ns.exec('nft', ['-a', 'list', 'ruleset']);
      expect(ruleset).toMatch(/comment "nfkeeper-owner=alloc-2"/);
      const state = readFileSync(join(d, 'state', 'owners.json'), 'utf8');
      const gen = sock.generation();

      current = nfk(['run', '-c', config, '--netns', ns.path, '--no-metrics', '--interval', '1h']);
      await waitFor('this version running', () => current!.logs().some((l) => l.msg === 'nfkeeper running'), 30_000);
      const listed = await rawCall(socket, 'GET', '/v1/owners', '');
      expect(listed.body.owners.map((o: { id: string }) => o.id)).toEqual(['alloc-1', 'alloc-2']);
      expect(current.logs().filter((l) => /installed|repaired|owners applied|collected/.test(String(l.msg)))).toEqual([]);
      expect(sock.generation()).toBe(gen);
      expect(ns.exec('nft', ['-a', 'list', 'ruleset'])).toBe(ruleset);
      expect(readFileSync(join(d, 'state', 'owners.json'), 'utf8')).toBe(state);
      current.child.kill('SIGTERM');
      expect((await current.exited).code).toBe(0);

      // And the one-shot check agrees: in sync, nothing to do.
      const check = await nfkDone(['check', '-c', config, '--netns', ns.path]);
      expect(check.out).toEqual(['in sync']);
      expect(check.code).toBe(0);
      expect(sock.generation()).toBe(gen);
      console.log(`previous release ${PREVIOUS.slice(0, 12)} → this checkout: adopted in ${(performance.now() - t0).toFixed(0)} ms in all`);
    } finally {
      old.kill('SIGKILL');
      current?.child.kill('SIGKILL');
      sock.close();
      ns.remove();
    }
  });
});
