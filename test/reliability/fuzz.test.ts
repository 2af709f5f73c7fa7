/**
 * Every committed fuzz input replayed once (the seeds and each crash found so
 * far), then a few seconds of the libFuzzer harness (native/fuzz/fuzz_decode.cc) over the
 * committed seed corpus: the addon's decoders and the monitor's event filter
 * on mutated kernel messages, under AddressSanitizer, UBSan and LeakSanitizer. A message
 * libnftnl would exit() on that the addon's checks let through aborts the run (abi_exit.c); the
 * corpus's abi-* inputs each make libnftnl exit at one of the places the checks look.
 * `npm run fuzz` runs it for a minute; docs/reliability.md has the figures.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

// scripts/setup.sh --test installs clang-14; without it scripts/fuzz.sh exits 2 saying so.
describe('libFuzzer smoke', () => {
  it('replays every committed input (seeds and regression crashes) without a crash, leak or undefined behaviour', () => {
    const r = spawnSync('bash', ['scripts/fuzz.sh', 'replay'], { encoding: 'utf8' });
    console.log(`[fuzz] ${r.stdout.trim()}`);
    expect(r.status, r.stderr).toBe(0);
    const m = /fuzz replay: (\d+) of (\d+) committed inputs, 0 crashes/.exec(r.stdout);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBe(Number(m![2]));
    expect(Number(m![2])).toBeGreaterThan(30);
    expect(Number(/refused by the libnftnl ABI checks: (\d+)/.exec(r.stdout)?.[1] ?? 0)).toBeGreaterThanOrEqual(12);
  }, 300_000);

  it('decodes mutated kernel messages for 5 s without a crash, leak or undefined behaviour', () => {
    const r = spawnSync('bash', ['scripts/fuzz.sh', '5'], { encoding: 'utf8' });
    const line = r.stdout.trim();
    console.log(`[fuzz] ${line}`);
    expect(r.status, r.stderr).toBe(0);
    const m = /fuzz: (\d+) executions, (\d+) crashes/.exec(line);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBeGreaterThan(100);
    expect(Number(m![2])).toBe(0);
  }, 180_000);
});
