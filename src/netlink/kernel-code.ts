/**
 * The identity of the kernel code that translates a batch into held rules (NftConn.kernelCode):
 * what an echo's proof that a batch was held as sent holds for (src/keeper/held-proof.ts).
 *
 * Named by build-ids, not by the boot: vmlinux's GNU build-id note (/sys/kernel/notes) and each
 * loaded netfilter module's (/sys/module/NAME/notes/.note.gnu.build-id), with `uname -r`. The same
 * code is found again in the next boot, so the first apply after a boot uses a proof of the boot
 * before. A module recorded and loaded now must have the recorded build-id; one recorded and not
 * loaded now is loaded from disk by the commit, and matches() is asked again after the commit
 * (HeldProof.confirmed), when every module the commit's rules use is loaded and pinned by them.
 * Where vmlinux has no build-id to read (or a loaded netfilter module has none), the key is the
 * boot's: `uname -r`, `uname -v` and the boot id.
 */
import { existsSync, readFileSync } from 'node:fs';
import { release, version } from 'node:os';

/** What a proof records. */
export type KernelKey =
  | { release: string; vmlinux: string; modules: Record<string, string> }
  | { release: string; version: string; boot: string };

export interface KernelCode {
  /** The key of the code now, for a proof made now (after the commit that proved it); undefined: none to name. */
  key(): KernelKey | undefined;
  /** `recorded` (a proof file's, unchecked) names the code that translates a batch now, as far as can be seen now. */
  matches(recorded: unknown): boolean;
}

export interface KernelPaths {
  /** vmlinux's ELF notes. */
  notes: string;
  /** The directory of modules (NAME/notes/.note.gnu.build-id, NAME/initstate). */
  sysModule: string;
  /** The list of loaded modules; absent where the kernel has no loadable modules. */
  procModules: string;
  bootId: string;
}

export const SYSTEM_PATHS: KernelPaths = {
  notes: '/sys/kernel/notes',
  sysModule: '/sys/module',
  procModules: '/proc/modules',
  bootId: '/proc/sys/kernel/random/boot_id',
};

/**
 * The modules whose code takes part in a rule's translation: nf_tables and its expression, object
 * and chain-type modules (nft_*), what they build on (nf_conntrack, nf_nat, nf_reject_*, nf_socket_*,
 * nf_tproxy_*, nf_log_*, nf_dup_*, nf_flow_table*: nf_*), the netlink transport (nfnetlink,
 * nfnetlink_osf, ...) and, for the compat expressions (match, target), x_tables and xt_*.
 */
const NETFILTER_MODULE = /^(nf_|nft_|nfnetlink|xt_|x_tables$)/;
const MODULE_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const NT_GNU_BUILD_ID = 3;
/** The notes are in the machine's byte order. */
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * The GNU build-id of a buffer of ELF notes (4-byte aligned, this machine's byte order), as hex;
 * undefined unless the whole buffer parses as notes and exactly one of them is a build-id: a
 * truncated, padded or garbled buffer names nothing.
 */
export function buildIdOf(notes: Uint8Array): string | undefined {
  // DataView and a loop, not Buffer's readUInt32/toString: this runs once a process, where their
  // first calls cost a few hundred µs.
  const view = new DataView(notes.buffer, notes.byteOffset, notes.byteLength);
  const u32 = (at: number) => view.getUint32(at, LITTLE_ENDIAN);
  let at = 0;
  let id: string | undefined;
  let ids = 0;
  while (at < notes.length) {
    if (notes.length - at < 12) return undefined;
    const namesz = u32(at), descsz = u32(at + 4), type = u32(at + 8);
    if (namesz > notes.length || descsz > notes.length) return undefined;
    const name = at + 12;
    const desc = name + align4(namesz);
    const end = desc + align4(descsz);
    if (end > notes.length) return undefined;
    if (type === NT_GNU_BUILD_ID && namesz === 4 && notes[name] === 0x47 && notes[name + 1] === 0x4e && notes[name + 2] === 0x55 && notes[name + 3] === 0) {
      if (descsz < 8 || descsz > 64) return undefined;
      id = '';
      for (let i = desc; i < desc + descsz; i++) id += (notes[i]! < 16 ? '0' : '') + notes[i]!.toString(16);
      ids++;
    }
    at = end;
  }
  return ids === 1 ? id : undefined;
}

const align4 = (n: number) => (n + 3) & ~3;

/** The kernel code on this machine, read from `paths` (a test's: another boot, other notes). */
export function kernelCode(paths: KernelPaths = SYSTEM_PATHS, uname = { release: release(), version: version() }): KernelCode {
  // vmlinux and the boot do not change under a process: read once, when first asked.
  let vmlinux: string | undefined | null = null;
  let boot: string | undefined | null = null;
  const vmlinuxId = () => (vmlinux !== null ? vmlinux : (vmlinux = readBuildId(paths.notes)));
  const bootId = () => {
    if (boot !== null) return boot;
    try {
      const b = readFileSync(paths.bootId, 'latin1').trim();
      boot = /^[0-9a-f-]{16,64}$/.test(b) ? b : undefined;
    } catch {
      boot = undefined;
    }
    return boot;
  };
  const bootKey = (): KernelKey | undefined => {
    const b = bootId();
    return b === undefined ? undefined : { release: uname.release, version: uname.version, boot: b };
  };
  /** A module's build-id; 'absent': not loaded; undefined: loaded, with none to read. */
  const moduleId = (name: string): string | 'absent' | undefined =>
    // A loaded module has an initstate; a built-in's directory (its parameters) has none. (Asked
    // first: a boot's first apply finds the recorded modules not loaded, and a failed read throws.)
    existsSync(`${paths.sysModule}/${name}/initstate`) ? readBuildId(`${paths.sysModule}/${name}/notes/.note.gnu.build-id`) : 'absent';
  /** The loaded netfilter modules' build-ids; undefined when one has none to read, or the list cannot be read. */
  const loadedModules = (): Record<string, string> | undefined => {
    // No list: a kernel without loadable modules (everything is vmlinux's).
    if (!existsSync(paths.procModules)) return {};
    let list: string;
    try {
      list = readFileSync(paths.procModules, 'latin1');
    } catch {
      return undefined;
    }
    const modules: Record<string, string> = {};
    for (const line of list.split('\n')) {
      const name = line.slice(0, line.indexOf(' '));
      if (!NETFILTER_MODULE.test(name) || !MODULE_NAME.test(name)) continue;
      const id = moduleId(name);
      if (id === undefined || id === 'absent') return undefined;
      modules[name] = id;
    }
    return modules;
  };
  return {
    key() {
      const vm = vmlinuxId();
      const modules = vm === undefined ? undefined : loadedModules();
      return vm !== undefined && modules !== undefined ? { release: uname.release, vmlinux: vm, modules } : bootKey();
    },
    matches(recorded) {
      if (typeof recorded !== 'object' || recorded === null) return false;
      const r = recorded as Record<string, unknown>;
      if (r.release !== uname.release) return false;
      if (typeof r.vmlinux === 'string') {
        if (r.vmlinux !== vmlinuxId() || typeof r.modules !== 'object' || r.modules === null) return false;
        for (const [name, id] of Object.entries(r.modules as Record<string, unknown>)) {
          if (typeof id !== 'string' || !MODULE_NAME.test(name)) return false;
          const now = moduleId(name);
          if (now !== 'absent' && now !== id) return false;
        }
        return true;
      }
      const b = bootKey();
      return b !== undefined && 'boot' in b && r.boot === b.boot && r.version === b.version;
    },
  };
}

function readBuildId(path: string): string | undefined {
  try {
    return buildIdOf(readFileSync(path));
  } catch {
    return undefined;
  }
}
