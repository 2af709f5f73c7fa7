/**
 * What a one-shot apply's full echo proved, kept beside the compile cache entry it installed: that
 * this kernel code held every rule of the entry as sent (CommitResult.held against the digests of
 * what was sent, heldAsSent). The kernel translates the same bytes into the same held rules, so a
 * later apply of the same entry on the same code (vmlinux's and the netfilter modules' build-ids,
 * or where those cannot be read the boot: src/netlink/kernel-code.ts) sends rules whose echo can
 * only say the same, and asks only the echoes its handles are derived from (the daemon's
 * echoForHandles); its commit is still guarded, followed from those handles, and read back where
 * they do not derive, or where a module the commit loaded is not the proof's (confirmed). Another
 * entry (a store writes a new token), other kernel code, no code to name (an in-memory kernel), or
 * no proof file: the full echo, as without it.
 *
 * The file is one JSON line: the entry's token and the kernel's key. A proof that cannot be
 * written or read costs the next apply the full echo, never an error.
 */
import { readFileSync } from 'node:fs';
import { removeStaleTemps, writeFileAtomic } from '../base/atomic-file.js';
import type { KernelCode, KernelKey } from '../netlink/kernel-code.js';

/**
 * An entry installed by an apply: its proof file (heldProofPathOf) and the token its store wrote;
 * no token: the entry is stored after the commit (a cold apply), and what its echo proves is kept
 * when the store gives it one (HeldProof.keep).
 */
export interface ProofEntry {
  path: string;
  token?: string;
}

interface Proof {
  entry: string;
  kernel: KernelKey;
}

export interface HeldProof {
  /** Before the commit: the entry's proof names the kernel code as far as it can be seen now. */
  held: boolean;
  /** After a commit taken as held: the proof still names the code, the modules the commit loaded with it. */
  confirmed: () => boolean;
  /** The commit's rules were taken as held by the proof (held, and confirmed after the commit). */
  wasUsed: () => boolean;
  /** The commit's full echo proved every rule: kept now, or (no token yet) by keep. */
  proved: () => void;
  /** A proof was written under the name (what apply's --progress says), not only found; no token yet: one is pending for keep. */
  wasProved: () => boolean;
  /** The token the store gave the entry after the commit: what proved() could not write yet is kept for it. True: kept. */
  keep: (token: string) => boolean;
}

/**
 * The proof for `entry` on `code` (PassInput.heldProof), or undefined where none can be kept (no
 * kernel code to name: the in-memory kernel).
 */
export function heldProofFor(entry: ProofEntry, code: KernelCode | undefined): HeldProof | undefined {
  if (code === undefined) return undefined;
  let proved = false;
  let used = false;
  let pending: KernelKey | undefined;
  const found = entry.token === undefined ? undefined : readProof(entry.path);
  /** True: the proof is under the name. */
  const write = (token: string, kernel: KernelKey) => {
    const proof: Proof = { entry: token, kernel };
    try {
      // A command killed in this write left its temp file: taken away here (the prune's hour is a backstop).
      removeStaleTemps(entry.path);
      writeFileAtomic(entry.path, `${JSON.stringify(proof)}\n`);
      return true;
    } catch (e) {
      // Not kept (the next apply of the entry echoes in full), unless only the directory's fsync failed.
      return (e as { replaced?: boolean }).replaced === true;
    }
  };
  return {
    held: found !== undefined && found.entry === entry.token && code.matches(found.kernel),
    confirmed: () => (used = found !== undefined && found.entry === entry.token && code.matches(found.kernel)),
    wasUsed: () => used,
    proved: () => {
      // After the commit: the modules it loaded are loaded, and named.
      const kernel = code.key();
      if (kernel === undefined) return;
      if (entry.token !== undefined) proved = write(entry.token, kernel);
      else {
        proved = true;
        pending = kernel;
      }
    },
    wasProved: () => proved,
    keep: (token) => pending !== undefined && write(token, pending),
  };
}

function readProof(path: string): Partial<Proof> | undefined {
  try {
    const p = JSON.parse(readFileSync(path, 'utf8')) as unknown;
    return typeof p === 'object' && p !== null ? p as Partial<Proof> : undefined;
  } catch {
    return undefined;
  }
}
