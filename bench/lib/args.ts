/**
 * The bench scripts' one argument parser. Each script names the flags it takes (1: followed by a
 * value, 0: alone); anything else, a typo or `--help` included, is refused with the list, exit 2,
 * before anything runs or a result is written (a bench that ran on with its defaults took an hour
 * and rewrote the committed results, bench/run.ts's 450c72c).
 */
export type Flags = Readonly<Record<string, 0 | 1>>;

export interface Args {
  /** The value after `name` (its first use), or `dflt`. */
  value(name: string): string | undefined;
  value(name: string, dflt: string): string;
  /** `name` is given (alone, or with its value). */
  has(name: string): boolean;
  /** The arguments that are not flags, in order (only where the script takes some). */
  positional: readonly string[];
}

/** Why `argv` is refused, or undefined. `positional`: how many bare arguments the script takes at most. */
export function refusal(argv: readonly string[], flags: Flags, positional = 0): string | undefined {
  let bare = 0;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const takes = Object.hasOwn(flags, a) ? flags[a] : undefined;
    if (takes === undefined) {
      if (!a.startsWith('-') && bare++ < positional) continue;
      return `unknown argument "${a}"; it takes ${Object.keys(flags).join(', ') || 'no flags'}`;
    }
    if (takes === 1 && (i + 1 >= argv.length || Object.hasOwn(flags, argv[i + 1]!))) return `${a} takes a value`;
    i += takes;
  }
  return undefined;
}

/** The flags in `argv` (the words after a flag that takes one are its value, not flags). */
export function readArgs(argv: readonly string[], flags: Flags): Args {
  const known = (name: string, takes: 0 | 1 | undefined) => {
    // A script asking for a flag it does not declare would refuse it from its users: its own bug.
    if (!Object.hasOwn(flags, name) || (takes !== undefined && flags[name] !== takes)) throw new Error(`${name} is not declared as ${takes === 1 ? 'taking a value' : 'a flag'}`);
  };
  const takes = (word: string): 0 | 1 | undefined => (Object.hasOwn(flags, word) ? flags[word] : undefined);
  const at = (name: string): number => {
    for (let i = 0; i < argv.length; i++) {
      if (argv[i] === name) return i;
      i += takes(argv[i]!) ?? 0;
    }
    return -1;
  };
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const t = takes(argv[i]!);
    if (t === undefined) positional.push(argv[i]!);
    else i += t;
  }
  function value(name: string): string | undefined;
  function value(name: string, dflt: string): string;
  function value(name: string, dflt?: string): string | undefined {
    known(name, 1);
    const i = at(name);
    return i >= 0 ? argv[i + 1]! : dflt;
  }
  return { value, has: (name) => (known(name, undefined), at(name) >= 0), positional };
}

/** This process's arguments for the script `script` (import.meta.url): refused (exit 2) if they do not fit `flags`. */
export function parseArgs(script: string, flags: Flags, o: { positional?: number; usage?: string } = {}): Args {
  const argv = process.argv.slice(2);
  const why = refusal(argv, flags, o.positional ?? 0);
  if (why !== undefined) {
    const path = new URL(script).pathname;
    process.stderr.write(`${path.slice(path.lastIndexOf('/bench/') + 1)}: ${why} (bench/README.md)\n${o.usage ? `usage: ${o.usage}\n` : ''}`);
    process.exit(2);
  }
  return readArgs(argv, flags);
}
