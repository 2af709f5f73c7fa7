/**
 * linux-arm64: the npm package's cross-built addon (scripts/prebuild.mjs --arch arm64), run by
 * the npm registry's arm64 Node 24 under qemu-aarch64 (user mode, with the cross compiler's arm64
 * root for the loader, libc and libstdc++; libnftnl and libmnl come from beside the addon).
 * qemu-user refuses NETLINK_NETFILTER sockets (EPROTONOSUPPORT: it translates NETLINK_ROUTE,
 * AUDIT and KOBJECT_UEVENT only), so apply and check cannot reach nf_tables from under it; what
 * proves the addon's netlink there is RTM_GETLINK, and apply/check are asserted to fail with
 * exactly that error, and to run in full if a qemu ever lets the socket through.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, type Netns } from './helpers/netns.js';
import { FLANNEL_RULES, FLANNEL_YAML } from './keeper/helpers.js';

const VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;
const hasQemu = spawnSync('qemu-aarch64', ['--version']).status === 0;
const QEMU_ROOT = '/usr/aarch64-linux-gnu';
const QEMU_REFUSES = 'socket(NETLINK_NETFILTER): Protocol not supported';

describe.skipIf(!hasQemu)(`linux-arm64 under qemu-user${hasQemu ? '' : ' (SKIPPED: qemu-aarch64 is not installed; bash scripts/setup.sh installs qemu-user)'}`, () => {
  let dir: string;
  let pkg: string;
  let node: string;
  let ns: Netns;
  /** The package's bin/nfkeeper.js (or a script) on the arm64 Node under qemu. */
  const arm64 = (args: string[]) => spawnSync('qemu-aarch64', ['-L', QEMU_ROOT, node, ...args],
    { encoding: 'utf8', timeout: 120_000, env: { PATH: process.env.PATH } });
  const nfkeeper = (...args: string[]) => arm64([join(pkg, 'bin', 'nfkeeper.js'), ...args]);

  beforeAll(() => {
    const packed = spawnSync(process.execPath, ['scripts/pack.mjs'], { encoding: 'utf8', timeout: 900_000 });
    expect(packed.status, packed.stderr).toBe(0);
    dir = mkdtempSync(join(tmpdir(), 'nfk-arm64-'));
    // The package as npm unpacks it: its bundle needs no node_modules, its addon no compiler.
    expect(spawnSync('tar', ['-xzf', packed.stdout.trim(), '-C', dir]).status).toBe(0);
    pkg = join(dir, 'package');
    const fetched = spawnSync('bash', ['scripts/node.sh', '24', 'arm64'], { encoding: 'utf8', timeout: 300_000 });
    expect(fetched.status, fetched.stderr).toBe(0);
    node = join(fetched.stdout.trim(), 'bin', 'node');
    writeFileSync(join(dir, 'config.yaml'), FLANNEL_YAML);
    ns = createNetns('arm64');
  }, 1_200_000);

  afterAll(() => {
    ns?.remove();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the package ships an aarch64 addon that finds libnftnl and libmnl beside it', () => {
    const addon = join(pkg, 'prebuilds', 'linux-arm64', 'nfkeeper.glibc.node');
    expect(spawnSync('readelf', ['-h', addon], { encoding: 'utf8' }).stdout).toMatch(/Machine:\s+AArch64/);
    const dynamic = spawnSync('readelf', ['-d', addon], { encoding: 'utf8' }).stdout;
    expect(dynamic).toContain('Library runpath: [$ORIGIN/glibc]');
    for (const lib of ['libnftnl.so.11', 'libmnl.so.0']) {
      expect(dynamic).toContain(`Shared library: [${lib}]`);
      expect(spawnSync('readelf', ['-h', join(pkg, 'prebuilds', 'linux-arm64', 'glibc', lib)], { encoding: 'utf8' }).stdout)
        .toMatch(/Machine:\s+AArch64/);
    }
  });

  it('the arm64 Node runs the package: version and validate', () => {
    const arch = arm64(['-p', '`${process.arch} ${process.versions.node}`']);
    expect(arch.stdout.trim()).toMatch(/^arm64 24\./);
    const v = nfkeeper('version');
    expect([v.status, v.stdout.trim(), v.stderr]).toEqual([0, VERSION, '']);
    const ok = nfkeeper('validate', '--config', join(dir, 'config.yaml'));
    expect([ok.status, ok.stderr]).toEqual([0, '']);
    expect(ok.stdout).toMatch(/config\.yaml: ok \(1 tables\)/);
  });

  it('the addon loads and speaks netlink in the namespace (RTM_GETLINK through qemu)', () => {
    ns.exec('ip', ['link', 'add', 'nfk-arm0', 'type', 'veth', 'peer', 'name', 'nfk-arm1']);
    const r = arm64(['-e', `
      const m = { exports: {} };
      process.dlopen(m, ${JSON.stringify(join(pkg, 'prebuilds', 'linux-arm64', 'nfkeeper.glibc.node'))});
      m.exports.init(class extends Error {});
      console.log(JSON.stringify(m.exports.links(${JSON.stringify(ns.path)})));`]);
    expect(r.status, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { name: string }[]).map((l) => l.name).sort()).toEqual(['lo', 'nfk-arm0', 'nfk-arm1']);
  });

  it('apply, then check: the rules in the namespace as nft lists them, or qemu-user\'s refusal of NETLINK_NETFILTER', (ctx) => {
    const apply = nfkeeper('apply', '--config', join(dir, 'config.yaml'), '--netns', ns.path);
    if (apply.status === 2 && apply.stderr.trim() === `nfkeeper: ${QEMU_REFUSES}`) {
      // Nothing reached the kernel, and check fails the same way, in one line.
      expect(ns.exec('nft', ['list', 'ruleset'])).toBe('');
      const check = nfkeeper('check', '--config', join(dir, 'config.yaml'), '--netns', ns.path);
      expect([check.status, check.stderr.trim()]).toEqual([2, `nfkeeper: ${QEMU_REFUSES}`]);
      ctx.skip(`qemu-user refuses NETLINK_NETFILTER sockets (${QEMU_REFUSES}): apply/check need an arm64 kernel or VM`);
    }
    expect(apply.status, apply.stderr).toBe(0);
    const listed = ns.exec('nft', ['list', 'chain', 'ip', 'nfkeeper', 'postrouting']);
    expect(listed.split('\n').filter((l) => /(return|masquerade)/.test(l))).toHaveLength(FLANNEL_RULES.length);
    const check = nfkeeper('check', '--config', join(dir, 'config.yaml'), '--netns', ns.path);
    expect([check.status, check.stderr]).toEqual([0, '']);
  });
});
