/**
 * The one-shot `nfkeeper gc`. A one-shot run cannot know how long an id
 * has been missing unless it remembers: with `gc.state` configured it keeps
 * the first-seen-missing times in that file (written atomically) and acts
 * once the grace has passed over successive runs; without one, an id whose
 * grace is > 0 is reported as pending and never collected. `--grace 0s`
 * collects every non-live id at once.
 */
import type { Config } from '../config/config.js';
import { NfkeeperError } from '../base/errors.js';
import { parseDuration } from '../base/duration.js';
import { NftSocket } from '../netlink/socket.js';
import type { OpenProof } from '../netlink/guard.js';
import { GraceTracker, collect, renderGarbage, type CollectResult } from './collect.js';
import { readLiveSet, type LiveSource } from './live.js';
import { loadOwners } from '../owners/index.js';
import { KeeperLockedError, lockOwnersState } from '../owners/state-lock.js';
import { closeSync } from 'node:fs';
import { collectLegacy, renderLegacyGarbage } from './legacy.js';

export interface GcOnceOptions {
  netns?: string;
  liveFile?: string;
  grace?: string;
  dryRun?: boolean;
  /** nftables, or iptables-legacy: x_tables through iptables-legacy-save/-restore (src/gc/legacy.ts); default gc.backend. */
  backend?: 'nftables' | 'iptables-legacy';
  /** nftables: the resend proof, opened at the first refusal (collect's `proof`). */
  proof?: OpenProof;
}

/**
 * A one-shot gc that counts the registered owners as live, refused beside the daemon that registers
 * them (it holds the owners state's lock): an owner that daemon acknowledged after gc's last read of
 * the state file and before gc's commit would have its id's rules collected. The daemon's own pass
 * asks its registry and has no such gap.
 */
export class GcBesideDaemonError extends NfkeeperError {
  override name = 'GcBesideDaemonError';
  constructor(readonly stateFile: string, readonly pid: number | undefined) {
    super(`the owners state ${stateFile} is kept by a running nfkeeper (${pid !== undefined && pid > 0 ? `pid ${pid}` : 'pid unknown'}), `
      + 'whose registrations are live ids this one-shot gc would not see between its last read of that file and its commit; '
      + 'nothing was changed. Let that daemon collect (gc.enabled: true in its config: its pass asks its registry), '
      + 'or see what would go with --dry-run');
  }
}

export interface GcOnceResult {
  garbage: { id: string }[];
  pending: CollectResult['pending'];
  collected: boolean;
  ops: number;
  lines: string[];
  json: unknown;
}

export async function gcOnce(config: Config, o: GcOnceOptions): Promise<GcOnceResult> {
  const gc = config.gc;
  if (!gc || gc.foreign.length === 0) throw new NfkeeperError(`${config.file}: no gc.foreign tables are configured`);
  let graceMs = gc.grace;
  if (o.grace !== undefined) {
    try {
      graceMs = parseDuration(o.grace);
    } catch (e) {
      throw new NfkeeperError(`--grace: ${(e as Error).message}`);
    }
  }
  const source: LiveSource | undefined = o.liveFile !== undefined ? { file: o.liveFile } : gc.live;
  if (!source && !config.owners) throw new NfkeeperError(`${config.file}: gc.live is not configured; give --live-file FILE`);
  // Everything that can fail on input fails before the kernel is touched.
  const live = source ? await readLiveSet(source) : new Set<string>();
  // Collecting with the registered owners as live ids: they must stand still until the commit. No
  // daemon may register one meanwhile (one acknowledged without a commit of its own, an owner of no
  // rules, or written to the state file after gc's last read of it, would lose its id's rules), so
  // gc holds the state's lock, as apply does; a dry run changes nothing and needs none.
  let held: number | undefined;
  if (config.owners && !o.dryRun) {
    try {
      held = lockOwnersState(config.owners.state);
    } catch (e) {
      if (e instanceof KeeperLockedError) throw new GcBesideDaemonError(config.owners.state, e.pid);
      throw e;
    }
  }
  try {
    return await gcHeld(config, o, live, graceMs, source);
  } finally {
    if (held !== undefined) closeSync(held);
  }
}

async function gcHeld(config: Config, o: GcOnceOptions, live: Set<string>, graceMs: number, source: LiveSource | undefined): Promise<GcOnceResult> {
  const gc = config.gc!;
  // Registered owners are live ids too (a corrupt owners state file is an error here as well).
  if (config.owners) for (const owner of loadOwners(config)) live.add(owner.id);
  // And asked again where collect asks (after each scan's reads, before a resend): collecting, the
  // lock keeps the file as read; a dry run holds none, and reports what a daemon registered meanwhile.
  const liveIds = config.owners ? () => loadOwners(config).map((owner) => owner.id) : undefined;
  const stateFile = graceMs > 0 ? gc.state : undefined;
  const tracker = stateFile ? GraceTracker.load(stateFile) : new GraceTracker();
  // Without remembered state a one-shot has just seen the id missing for the first time: 0 ms < grace.
  const scan = { foreign: gc.foreign, live, graceMs, tracker, dryRun: o.dryRun ?? false };
  let r: Pick<GcOnceResult, 'garbage' | 'pending' | 'collected' | 'ops'>;
  let rendered: string[];
  let json: Record<string, unknown>;
  const backend = o.backend ?? gc.backend;
  if (backend === 'iptables-legacy') {
    const l = await collectLegacy({ ...scan, ...(liveIds ? { liveIds } : {}), netns: o.netns });
    r = l;
    rendered = renderLegacyGarbage(l.garbage);
    json = { backend: 'iptables-legacy', scripts: l.scripts };
  } else {
    const sock = new NftSocket({ netns: o.netns });
    let n: CollectResult;
    try {
      n = await collect(sock, { ...scan, ...(liveIds ? { liveIds } : {}), ...(o.proof ? { proof: o.proof } : {}) });
    } finally {
      sock.close();
    }
    r = n;
    rendered = renderGarbage(n.garbage);
    json = { generation: n.generation };
  }
  // A dry run does not start grace clocks either: it changes nothing.
  if (stateFile && !o.dryRun) {
    // Collected ids are gone from the kernel; forget them.
    if (r.collected) for (const g of r.garbage) tracker.firstMissing.delete(g.id);
    tracker.save(stateFile);
  }
  const lines = rendered;
  for (const p of r.pending) {
    lines.push(`# id ${p.id}: not live, kept for its grace period (${stateFile ? `missing for ${Math.round(p.missingForMs / 1000)}s` : 'no gc.state file to remember since when; use --grace 0s to collect now'})`);
  }
  if (r.garbage.length === 0) lines.push('no garbage');
  else if (r.collected) lines.push(`collected ${r.garbage.length} ids in one ${backend === 'iptables-legacy' ? 'iptables-legacy-restore' : 'batch'} (${r.ops} operations)`);
  json = {
    dryRun: o.dryRun ?? false, collected: r.collected, ops: r.ops, ...json,
    garbage: r.garbage, pending: r.pending,
  };
  return { ...r, lines, json };
}
