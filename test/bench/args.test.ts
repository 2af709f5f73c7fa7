/** bench/lib/args.ts: what a bench script's arguments are refused for, and what it reads of them. */
import { describe, expect, it } from 'vitest';
import { readArgs, refusal } from '../../bench/lib/args.js';

const FLAGS = { '--n': 1, '--nft': 0, '--root': 1 } as const;

describe('bench/lib/args', () => {
  it('refuses what the script does not take, --help included, naming what it takes', () => {
    expect(refusal(['--help'], FLAGS)).toBe('unknown argument "--help"; it takes --n, --nft, --root');
    expect(refusal(['--n', '5', '--nfs'], FLAGS)).toMatch(/^unknown argument "--nfs"/);
    expect(refusal(['stray'], FLAGS)).toMatch(/^unknown argument "stray"/);
    expect(refusal(['--constructor'], FLAGS)).toMatch(/^unknown argument "--constructor"/);
    expect(refusal([], {})).toBeUndefined();
    expect(refusal(['--x'], {})).toBe('unknown argument "--x"; it takes no flags');
  });

  it('refuses a flag that takes a value given none (at the end, or another flag after it)', () => {
    expect(refusal(['--n'], FLAGS)).toBe('--n takes a value');
    expect(refusal(['--root', '--nft'], FLAGS)).toBe('--root takes a value');
  });

  it('takes what it declares; a value is not read as a flag, and bare words up to `positional`', () => {
    expect(refusal(['--n', '5', '--nft', '--root', '/x'], FLAGS)).toBeUndefined();
    expect(refusal(['--root', '-5'], FLAGS)).toBeUndefined();
    expect(refusal(['a.node', 'b.node', '--n', '3'], FLAGS, 2)).toBeUndefined();
    expect(refusal(['a.node', 'b.node', 'c.node'], FLAGS, 2)).toMatch(/^unknown argument "c\.node"/);
  });

  it('reads values, defaults, flags and bare words', () => {
    const a = readArgs(['x.cpuprofile', '--root', '--nft', '--n', '7'], FLAGS);
    expect(a.value('--n')).toBe('7');
    expect(a.value('--n', '1')).toBe('7');
    expect(a.value('--root')).toBe('--nft');  // the word after a flag that takes a value is its value
    expect(a.has('--nft')).toBe(false);
    expect(a.positional).toEqual(['x.cpuprofile']);
    // A bare word named like an object's own property is a word, not a flag.
    const p = readArgs(['__proto__', 'constructor', '--n', '3'], FLAGS);
    expect(p.positional).toEqual(['__proto__', 'constructor']);
    expect(p.value('--n')).toBe('3');
    const b = readArgs(['--nft'], FLAGS);
    expect(b.value('--n', '100000')).toBe('100000');
    expect(b.value('--root')).toBeUndefined();
    expect(b.has('--nft')).toBe(true);
    expect(b.has('--n')).toBe(false);
  });

  it('a flag the script reads but did not declare is its own bug: thrown', () => {
    const a = readArgs([], FLAGS);
    expect(() => a.value('--rounds')).toThrow(/--rounds is not declared/);
    expect(() => a.value('--nft')).toThrow(/not declared as taking a value/);
    expect(() => a.has('--x')).toThrow(/not declared/);
  });
});
