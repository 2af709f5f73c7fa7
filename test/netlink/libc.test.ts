/**
 * The C library the prebuilt addon is chosen by (src/netlink/addon.ts libc): read from the files
 * mapped into the process, the diagnostic report only where /proc says nothing.
 */
import { describe, expect, it } from 'vitest';
import { libc, libcOfMaps } from '../../src/netlink/addon.js';

const line = (path: string) => `7f3adf164000-7f3adf2ba000 r-xp 00026000 fe:00 339380                     ${path}`;

describe('libc', () => {
  it("names glibc and musl from a process's maps", () => {
    const node = line('/usr/local/bin/node');
    expect(libcOfMaps([node, line('/usr/lib/x86_64-linux-gnu/libc.so.6'), line('/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2')].join('\n'))).toBe('glibc');
    expect(libcOfMaps([line('/lib64/libc.so.6 (deleted)'), node].join('\n'))).toBe('glibc');
    // Alpine: musl's loader is its libc; with gcompat a libc.so.6 name may be mapped too
    expect(libcOfMaps([node, line('/lib/ld-musl-x86_64.so.1'), line('/usr/lib/libstdc++.so.6.0.33')].join('\n'))).toBe('musl');
    expect(libcOfMaps([line('/lib/libc.so.6'), line('/lib/ld-musl-aarch64.so.1')].join('\n'))).toBe('musl');
    expect(libcOfMaps([node, line('/usr/lib/libc.musl-x86_64.so.1')].join('\n'))).toBe('musl');
    // names that only contain the words
    expect(libcOfMaps([node, line('/opt/ld-musl-x86_64.so.1.d/x.so'), line('/usr/lib/libc.so.6.bak'), line('[heap]')].join('\n'))).toBeUndefined();
    expect(libcOfMaps('')).toBeUndefined();
  });

  it('agrees with the diagnostic report on this machine', () => {
    const report = process.report.getReport() as { header: { glibcVersionRuntime?: string } };
    expect(libc()).toBe(report.header.glibcVersionRuntime ? 'glibc' : 'musl');
  });
});
