/**
 * The bytes the addon sends pad every attribute with zeros, as nft's do: the encoder builds each
 * message in a scratch buffer that the message before it wrote, and libmnl 1.0.4 does not clear an
 * attribute's padding. Checked on encodeExprs, which builds in the same scratch buffer as a batch.
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { addonPath, loadAddon } from '../../src/netlink/addon.js';
import { compileRule } from '../../src/rules/index.js';

const at = { family: 'ip' as const, table: 't', chain: 'c' };

/** Every padding byte after every attribute, recursively (all nests of a rule's expressions). */
function paddingBytes(b: Uint8Array, from = 0, to = b.length, out: number[] = []): number[] {
  let off = from;
  while (off + 4 <= to) {
    const len = b[off]! | (b[off + 1]! << 8);
    const type = b[off + 2]! | (b[off + 3]! << 8);
    if (len < 4 || off + len > to) throw new Error(`bad attribute at ${off}`);
    const next = Math.min(to, off + ((len + 3) & ~3));
    for (let i = off + len; i < next; i++) out.push(b[i]!);
    // Nests: the list element, the expression's data and anything inside (NLA_F_NESTED is set on ours).
    if (type & 0x8000) paddingBytes(b, off + 4, off + len, out);
    off = next;
  }
  return out;
}

describe('encoded messages', () => {
  it('pad with zeros even where the message before wrote other bytes', () => {
    const addon = loadAddon();
    // "immediate\0" fills the bytes where "meta\0" then leaves three bytes of padding.
    addon.encodeExprs(compileRule('ip daddr 192.0.2.1 counter accept', at).exprs);
    const b = new Uint8Array(addon.encodeExprs(compileRule('meta mark 0x1 iifname "eth0" accept', at).exprs));
    const pad = paddingBytes(b);
    expect(pad.length).toBeGreaterThan(0);
    expect(pad.filter((x) => x !== 0)).toEqual([]);
  });

  // (not under the sanitizers: AddressSanitizer's allocator and shadow memory write pages the C
  // library's calloc leaves untouched)
  it.skipIf(process.env.NFK_SANITIZE === '1')('leave the scratch buffer untouched past what they wrote: a small message adds no 4 MiB to the RSS', () => {
    // In a process of its own: the scratch buffer is per thread and made at the first message.
    const exprs = JSON.stringify(compileRule('ip daddr 192.0.2.1 counter accept', at).exprs);
    const script = `const anon = () => Number(/RssAnon:\\s+(\\d+)/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]);
      const addon = require(${JSON.stringify(addonPath())});
      const exprs = JSON.parse(${JSON.stringify(exprs)});
      const before = anon();
      addon.encodeExprs(exprs);
      process.stdout.write(String(anon() - before));`;
    const grewKiB = Number(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }));
    expect(grewKiB).toBeLessThan(1024);
  });
});
