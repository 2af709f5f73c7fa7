/**
 * scripts/setup.sh: the demo's set-up installs only what building and running nfkeeper needs; the
 * test command's (`--test`, run by scripts/test.sh) adds what only the tests need. Run with fakes
 * in front of PATH for the package tools (every package missing, apt-get recording what it was
 * asked for), so the real script decides what it installs without installing anything.
 * Also: package.json names no placeholder host.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../owners/fixtures.js';

const TEST_ONLY = ['clang-14', 'libclang-rt-14-dev', 'podman', 'runc', 'debootstrap', 'systemd-container',
  'containernetworking-plugins', 'qemu-user', 'qemu-system-arm', 'cpio', 'iptables', 'zsh', 'fish', 'g++-aarch64-linux-gnu'];
const BASE = ['libnftnl-dev', 'libmnl-dev', 'pkg-config', 'nftables', 'iproute2', 'make', 'g++', 'python3'];

function installs(args: string[]): { code: number | null; packages: string[]; out: string } {
  const dir = tempDir('setup');
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  const log = join(dir, 'apt.log');
  const fake = (name: string, body: string) => {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  fake('id', 'echo 0');
  fake('dpkg-query', 'exit 1');
  fake('apt-get', `echo "$@" >> ${log}`);
  fake('dpkg-deb', 'exit 1');
  // The build steps after the packages: nothing to do here.
  for (const t of ['npm', 'node', 'npx']) fake(t, 'exit 0');
  // No /usr/local/bin: promtool is "missing" too.
  const r = spawnSync('bash', ['scripts/setup.sh', ...args], { encoding: 'utf8', env: { ...process.env, PATH: `${bin}:/usr/bin:/bin` } });
  let lines: string[] = [];
  try {
    lines = readFileSync(log, 'utf8').split('\n');
  } catch { /* apt-get never ran */ }
  const install = lines.find((l) => / install /.test(` ${l} `)) ?? '';
  return { code: r.status, packages: install.split(' ').filter((w) => w && !w.startsWith('-') && w !== 'install'), out: r.stdout + r.stderr };
}

describe('set-up', () => {
  it("the demo's set-up installs what nfkeeper needs and none of the test tools", () => {
    const r = installs([]);
    expect(r.code, r.out).toBe(0);
    expect(r.packages.sort()).toEqual([...BASE].sort());
    expect(r.out).not.toMatch(/promtool/);
  });

  it('--test adds the test tools and promtool', () => {
    const r = installs(['--test']);
    expect(r.code, r.out).toBe(0);
    expect(r.packages.sort()).toEqual([...BASE, ...TEST_ONLY].sort());
    expect(r.out).toMatch(/unpacking promtool/);
  });

  it('an unknown option is refused by name', () => {
    const r = installs(['--tests']);
    expect(r.code).toBe(2);
    expect(r.out).toMatch(/unknown option '--tests'/);
    expect(r.packages).toEqual([]);
  });

  it('scripts/test.sh runs the set-up with --test, scripts/demo.sh without', () => {
    expect(readFileSync('scripts/test.sh', 'utf8')).toMatch(/^bash scripts\/setup\.sh --test$/m);
    expect(readFileSync('scripts/demo.sh', 'utf8')).toMatch(/^bash scripts\/setup\.sh$/m);
  });

  it('package.json points at no placeholder host', () => {
    const text = readFileSync('package.json', 'utf8');
    expect(text).not.toMatch(/example\.(org|com|net)/);
  });
});
