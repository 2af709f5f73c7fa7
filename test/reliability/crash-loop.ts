/**
 * What the crash-loop sweeps share (adoption-kill, record-window, after-ready, resend-kill): a config
 * of the owners fixture with a big chain and three owners registered in an earlier life of the daemon,
 * the daemon killed at a point of test/reliability/kill-at-point.mjs, the points a census run said,
 * and what a run left in the namespace's record directory and kernel.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfig } from '../../src/config/config.js';
import { readRecord, type RestartRecord } from '../../src/keeper/record.js';
import { compileOwner, saveOwners } from '../../src/owners/index.js';
import type { Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { ownerSpec, ownersYamlWithBigChain } from '../owners/fixtures.js';
import { daemon, type Child } from './owners-child.js';

export const OWNERS = ['alloc-1', 'alloc-2', 'alloc-3'];

/**
 * config.yaml in a new temp directory: the owners fixture with a chain of `rules` rules in table big
 * (`owners: false`, no owners section); with the section, OWNERS registered in its state file.
 * `sock`: the daemon's control socket.
 */
export function ownersSetUp(tag: string, rules: number, o: { owners?: boolean; extraTables?: string } = {}): { dir: string; config: string; sock: string } {
  const dir = tempDir(tag);
  const config = join(dir, 'config.yaml');
  writeFileSync(config, ownersYamlWithBigChain(dir, rules, o));
  if (o.owners !== false) {
    const c = parseConfig(readFileSync(config, 'utf8'), config);
    mkdirSync(join(dir, 'state'), { recursive: true });
    saveOwners(c.owners!.state, OWNERS.map((id, i) => compileOwner(id, ownerSpec(i + 1), c.owners!, c.tables[0]!)));
  }
  return { dir, config, sock: join(dir, 'nfkeeper.sock') };
}

const HOOK = fileURLToPath(new URL('./kill-at-point.mjs', import.meta.url));

/**
 * A daemon of the sweep (`args` after run's own), with kill-at-point.mjs loaded where `at` is given:
 * killed at that point ("fs:12", "turn:3"), or at none and each point said ("census"); `armPath`:
 * counted from the first file call on a path it matches.
 */
export const sweepDaemon = (config: string, ns: Netns, args: string[]) => (at?: string, armPath?: string): Child =>
  daemon(config, ns, { args, ...(at !== undefined ? { env: { NODE_OPTIONS: `--import=${HOOK}`, KILL_AT_POINT: at, ...(armPath ? { KILL_ARM_PATH: armPath } : {}) } } : {}) });

export interface Point { kind: 'fs' | 'turn'; n: number; what: string }

/** The points a census run said, in order. */
export const pointsOf = (d: Child): Point[] => d.logs.join('').split('\n').flatMap((l) => {
  const m = /^point (fs|turn) (\d+) (.*)$/.exec(l);
  return m ? [{ kind: m[1] as Point['kind'], n: Number(m[2]), what: m[3]! }] : [];
});

/** The kernel's ruleset byte for byte, as nft sends it (handles included). */
export const dump = (ns: Netns): string => ns.exec('nft', ['--debug=netlink', 'list', 'ruleset']);

/** The restart records in the namespace's record directory. */
export const records = (ns: Netns): string[] => existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.startsWith('restart-')) : [];

/** A killed write's temp files left in the record directory. */
export const temps = (ns: Netns): string[] => existsSync(ns.record) ? readdirSync(ns.record).filter((f) => f.includes('.tmp-')) : [];

/** The one restart record on disk (throws if there are more, or it is not whole), or undefined. */
export function recordOnDisk(ns: Netns): { file: string; record: RestartRecord } | undefined {
  const [f, ...more] = records(ns);
  if (more.length > 0) throw new Error(`more than one restart record: ${[f, ...more].join(', ')}`);
  if (!f) return undefined;
  const r = readRecord(join(ns.record, f), ns.record);
  if ('why' in r) throw new Error(`the record is not whole: ${r.why}`);
  return { file: join(ns.record, f), record: r.record };
}
