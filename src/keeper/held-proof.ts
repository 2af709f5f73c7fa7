/**
 * What a one-shot apply's full echo proved, kept beside the compile cache entry it installed: that
 * this kernel build held every rule of the entry as sent (CommitResult.held against the digests of
 * what was sent, heldAsSent). The kernel translates the same bytes into the same held rules, so a
 * later apply of the same entry on the same build (and boot: kernelBuild) sends rules whose echo
 * can only say the same, and asks only the echoes its handles are derived from (the daemon's
 * echoForHandles); its commit is still guarded, followed from those handles, and read back where
 * they do not derive. Another entry (a store writes a new token), another kernel build or boot, no
 * build to name (an in-memory kernel), or no proof file: the full echo, as without it.
 *
 * The file is one JSON line: the entry's token and the kernel build. A proof that cannot be
 * written or read costs the next apply the full echo, never an error.
 */
import { readFileSync } from 'node:fs';
import { removeStaleTemps, writeFileAtomic } from '../base/atomic-file.js';

/** An entry installed by an apply: its proof file (heldProofPathOf) and the token its store wrote. */
export interface ProofEntry {
  path: string;
  token: string;
}

interface Proof {
  entry: string;
  kernel: string;
}

/**
 * The proof for `entry` on `kernel` (PassInput.heldProof), or undefined where none can be kept (no
 * kernel build: the in-memory kernel). wasProved: a proof was written under the name (what apply's
 * --progress says), not only found.
 */
export function heldProofFor(entry: ProofEntry, kernel: string | undefined): { held: boolean; proved: () => void; wasProved: () => boolean } | undefined {
  if (kernel === undefined) return undefined;
  let proved = false;
  const found = readProof(entry.path);
  return {
    held: found?.entry === entry.token && found.kernel === kernel,
    proved: () => {
      const proof: Proof = { entry: entry.token, kernel };
      try {
        // A command killed in this write left its temp file: taken away here (the prune's hour is a backstop).
        removeStaleTemps(entry.path);
        writeFileAtomic(entry.path, `${JSON.stringify(proof)}\n`);
        proved = true;
      } catch (e) {
        // Not kept (the next apply of the entry echoes in full), unless only the directory's fsync failed.
        proved = (e as { replaced?: boolean }).replaced === true;
      }
    },
    wasProved: () => proved,
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
