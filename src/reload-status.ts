/**
 * The result of the daemon's last config reload, in a small file, so that
 * `systemctl reload` can report it. systemd 252 (Debian 12) has no
 * Type=notify-reload, and a SIGHUP cannot answer: `nfkeeper reload` reads the
 * file's sequence number, signals the daemon, and waits for a newer one.
 */
import { readFileSync } from 'node:fs';
import { writeFileAtomic } from './base/atomic-file.js';
import { NfkeeperError } from './base/errors.js';

export interface ReloadStatus {
  /** Moves by one on every reload the daemon finishes, accepted or rejected. */
  seq: number;
  ok: boolean;
  /** Why it was rejected. */
  error?: string;
  /** What started it: SIGHUP, file changed. */
  why: string;
  at: string;
}

export function readReloadStatus(file: string): ReloadStatus | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new NfkeeperError(`${file}: cannot read: ${(e as Error).message}`);
  }
  try {
    const v = JSON.parse(text) as ReloadStatus;
    if (typeof v.seq !== 'number' || typeof v.ok !== 'boolean') throw new Error('not a reload status');
    return v;
  } catch (e) {
    throw new NfkeeperError(`${file}: not a reload status file (${(e as Error).message})`);
  }
}

/** The daemon's side: each finished reload writes the next sequence number. */
export class ReloadStatusWriter {
  private seq: number;
  constructor(private readonly file: string) {
    // A restarted daemon continues the count, so a waiting `nfkeeper reload` never sees a stale match.
    let prev = 0;
    try {
      prev = readReloadStatus(file)?.seq ?? 0;
    } catch {
      prev = 0;
    }
    this.seq = prev;
  }

  report(ok: boolean, why: string, error?: string): void {
    this.seq += 1;
    const s: ReloadStatus = { seq: this.seq, ok, ...(error !== undefined ? { error } : {}), why, at: new Date().toISOString() };
    writeFileAtomic(this.file, JSON.stringify(s) + '\n', 0o644);
  }
}

/**
 * `nfkeeper reload`: signals the daemon and waits for its verdict. Resolves
 * with the status, or throws when the daemon does not answer in time.
 */
export async function requestReload(pid: number, file: string, timeoutMs: number): Promise<ReloadStatus> {
  const before = readReloadStatus(file)?.seq ?? 0;
  try {
    process.kill(pid, 'SIGHUP');
  } catch (e) {
    throw new NfkeeperError(`cannot signal the daemon (pid ${pid}): ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = readReloadStatus(file);
    if (now && now.seq > before) return now;
    if (Date.now() > deadline) {
      throw new NfkeeperError(`the daemon (pid ${pid}) did not report a reload in ${file} within ${timeoutMs} ms; ` +
        'is it running with --reload-status pointing there?');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
