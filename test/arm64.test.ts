/**
 * linux-arm64: the npm package's cross-built addon (scripts/prebuild.mjs --arch arm64), run by
 * the npm registry's arm64 Node 24 under qemu-aarch64 (user mode, with the cross compiler's arm64
 * root for the loader, libc and libstdc++; libnftnl and libmnl come from beside the addon).
 * qemu-user refuses NETLINK_NETFILTER sockets (EPROTONOSUPPORT: it translates NETLINK_ROUTE,
 * AUDIT and KOBJECT_UEVENT only), so apply and check cannot reach nf_tables from under it; what
 * proves the addon's netlink there is RTM_GETLINK, and apply/check are asserted to fail with
 * exactly that error, and to run in full if a qemu ever lets the socket through.
 * On Debian's arm64 kernel under qemu-system-aarch64 (scripts/arm64-vm.sh: emulated, no KVM), the
 * same package applies, checks, exports and, as `nfkeeper run`, repairs a deleted rule; its export
 * is compared with what the x64 build exports for the same config here. The linux/arm64 image
 * (scripts/image.sh --arch arm64) is built, and its root tree, exported, runs there too (chroot
 * into it: its own Node, C library and npm-installed package).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, withNetns, type Netns } from './helpers/netns.js';
import { FLANNEL_RULES, FLANNEL_YAML } from './keeper/helpers.js';

const VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;
const hasQemu = spawnSync('qemu-aarch64', ['--version']).status === 0;
const hasQemuSystem = spawnSync('qemu-system-aarch64', ['--version']).status === 0 && spawnSync('cpio', ['--version']).status === 0;
const hasPodman = spawnSync('podman', ['--version']).status === 0;
const CACHE = process.env.NFKEEPER_CACHE ?? '/var/cache/nfkeeper-test';
// See scripts/image.sh: crun and podman's default ulimits fail on machines like this one.
const podman = (args: string[]) => spawnSync('podman', ['--runtime', 'runc', '--cgroup-manager=cgroupfs', ...args],
  { encoding: 'utf8', timeout: 300_000, maxBuffer: 64 << 20, env: { ...process.env, CONTAINERS_CONF: join(CACHE, 'containers.conf') } });
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
  it.skipIf(!hasQemuSystem)(`on an arm64 kernel (qemu-system-aarch64): apply, check, export as the x64 build exports, and a repair by \`nfkeeper run\`${hasQemuSystem ? '' : ' (SKIPPED: bash scripts/setup.sh --test installs qemu-system-arm and cpio)'}`, async () => {
    const work = join(dir, 'vm');
    mkdirSync(work);
    writeFileSync(join(work, 'config.yaml'), FLANNEL_YAML);
    writeFileSync(join(work, 'delete.mjs'), VM_DELETE_FIRST_RULE);
    writeFileSync(join(work, 'run.sh'), VM_RUN);
    const { console, at } = bootVm(pkg, work);
    expect(at('version')).toEqual({ out: VERSION, rc: 0 });
    expect(at('apply').rc, at('apply').out).toBe(0);
    expect(at('check')).toMatchObject({ rc: 0, out: expect.stringMatching(/in sync$/) });
    // The x64 build's export of the same config, here.
    const x64 = await withNetns(async (ref) => {
      expect(spawnSync(process.execPath, [join(pkg, 'bin', 'nfkeeper.js'), 'apply', '--config', join(work, 'config.yaml'), '--netns', ref.path]).status).toBe(0);
      const e = spawnSync(process.execPath, [join(pkg, 'bin', 'nfkeeper.js'), 'export', '--table', 'ip', 'nfkeeper', '--netns', ref.path], { encoding: 'utf8' });
      expect(e.status, e.stderr).toBe(0);
      return e.stdout.trim();
    }, 'arm64-ref');
    expect(at('export')).toEqual({ out: x64, rc: 0 });
    // The daemon followed the delete from its events and put the rule back.
    expect(at('delete')).toMatchObject({ rc: 0, out: expect.stringMatching(/^deleted handle \d+$/) });
    expect(at('repaired').rc, console).toBe(0);
    expect(at('check after the repair')).toMatchObject({ rc: 0, out: expect.stringMatching(/in sync$/) });
    expect(at('stop').rc).toBe(0);
    expect(console).toMatch(/^=== exit 0$/m);
  }, 1_800_000);
  it.skipIf(!hasQemuSystem || !hasPodman)(`the linux/arm64 image: built without an arm64 CPU, its tree applies and checks on the arm64 kernel${hasQemuSystem && hasPodman ? '' : ' (SKIPPED: needs podman, qemu-system-arm and cpio: bash scripts/setup.sh --test)'}`, () => {
    const built = spawnSync('bash', ['scripts/image.sh', '--arch', 'arm64'], { encoding: 'utf8', timeout: 900_000 });
    expect(built.status, built.stderr).toBe(0);
    const image = built.stdout.trim().split('\n').at(-1)!;
    expect(image).toBe(`localhost/nfkeeper:${VERSION}-arm64`);
    const inspect = podman(['image', 'inspect', '--format', '{{.Architecture}} {{.Os}} {{json .Config.Entrypoint}} {{.Config.User}}', image]);
    expect(inspect.stdout.trim()).toBe('arm64 linux ["nfkeeper"] 65534:65534');
    // Its root tree, as a runtime would see it.
    const work = join(dir, 'vm-image');
    mkdirSync(join(work, 'image'), { recursive: true });
    const created = podman(['create', '--arch', 'arm64', image]);
    expect(created.status, created.stderr).toBe(0);
    const id = created.stdout.trim();
    try {
      const exported = spawnSync('sh', ['-c', `podman --runtime runc --cgroup-manager=cgroupfs export ${id} | tar -C '${join(work, 'image')}' -xf -`],
        { encoding: 'utf8', env: { ...process.env, CONTAINERS_CONF: join(CACHE, 'containers.conf') } });
      expect(exported.status, exported.stderr).toBe(0);
    } finally {
      podman(['rm', id]);
    }
    expect(spawnSync('readelf', ['-h', join(work, 'image', 'usr', 'local', 'bin', 'node')], { encoding: 'utf8' }).stdout).toMatch(/Machine:\s+AArch64/);
    writeFileSync(join(work, 'config.yaml'), FLANNEL_YAML);
    writeFileSync(join(work, 'run.sh'), VM_RUN_IMAGE);
    const { console, at } = bootVm(pkg, work);
    expect(at('node')).toMatchObject({ rc: 0, out: expect.stringMatching(/^arm64 v24\./) });
    expect(at('version')).toEqual({ out: VERSION, rc: 0 });
    expect(at('apply').rc, at('apply').out).toBe(0);
    expect(at('check')).toMatchObject({ rc: 0, out: expect.stringMatching(/in sync$/) });
    expect(console).toMatch(/^=== exit 0$/m);
  }, 1_800_000);
});

/**
 * scripts/arm64-vm.sh on `pkg` and `work` (its run.sh): the console, having booted the arm64 kernel
 * and Node 24 and exited 0, and `at(name)`, the step of that name (which must be there).
 */
function bootVm(pkg: string, work: string): { console: string; at(name: string): { out: string; rc: number } } {
  const vm = spawnSync('bash', ['scripts/arm64-vm.sh', pkg, work], { encoding: 'utf8', timeout: 1_500_000, maxBuffer: 64 << 20 });
  const console = vm.stdout.replace(/\r/g, '');
  expect(vm.status, `${vm.stderr}\n${console}`).toBe(0);
  expect(console).toMatch(/^=== arch aarch64 \S+ node arm64 v24\./m);
  const steps = vmSteps(console);
  return {
    console,
    at(name) {
      const step = steps.get(name);
      expect(step, `step ${name} in:\n${console}`).toBeDefined();
      return step!;
    },
  };
}

/** "=== NAME" ... "=== rc=N" sections of the VM's console: each step's output (stdout and stderr, trimmed) and status. */
function vmSteps(console: string): Map<string, { out: string; rc: number }> {
  const steps = new Map<string, { out: string; rc: number }>();
  for (const m of console.matchAll(/^=== (?!rc=|arch |exit )(.+)\n([\s\S]*?)^=== rc=(\d+)$/gm)) {
    steps.set(m[1]!, { out: m[2]!.trim(), rc: Number(m[3]) });
  }
  return steps;
}

/**
 * The test's own change in the VM: the first rule of the owned chain deleted, through the package's
 * arm64 addon as it is (its library entry needs the npm dependencies, which the VM does not have).
 */
const VM_DELETE_FIRST_RULE = `const m = { exports: {} };
process.dlopen(m, '/opt/package/prebuilds/linux-arm64/nfkeeper.glibc.node');
m.exports.init(class extends Error {});
const s = new m.exports.NftSocket();
const [r] = (await s.dump('rule', 'ip', 'nfkeeper')).filter((x) => x.chain === 'postrouting');
await s.commit([{ verb: 'delete', object: 'rule', family: 'ip', table: 'nfkeeper', chain: 'postrouting', handle: r.handle }]);
console.log('deleted handle ' + r.handle);
s.close();
`;

/** Each step of a VM script: "=== NAME", its output, "=== rc=N". */
const VM_STEP = `step() { name=$1; shift; echo "=== $name"; "$@" 2>&1; echo "=== rc=$?"; }
`;

/** What runs in the VM (busybox sh, as root, in /opt/work): each step between "=== name" and "=== rc=N". */
const VM_RUN = `${VM_STEP}nfk() { node /opt/package/bin/nfkeeper.js "$@"; }
# Waits up to 300 s (emulated: slow) for a line matching $1 in daemon.log.
logged() { i=0; until grep -q "$1" daemon.log 2>/dev/null; do i=$((i + 1)); [ $i -gt 1500 ] && return 1; sleep 0.2; done; }
step version nfk version
step apply nfk apply --config config.yaml
step check nfk check --config config.yaml
step export nfk export --table ip nfkeeper --no-progress
# node itself in the background (a function would be a subshell, and the kill would hit that).
node /opt/package/bin/nfkeeper.js run --config config.yaml --no-metrics --interval 1s > daemon.log 2>&1 &
daemon=$!
logged '"nfkeeper running"' || { echo "daemon not running:"; cat daemon.log; }
step delete node delete.mjs
# Planned from the events, whichever woke the daemon first: under emulation the 1 s tick may see the
# generation move before the monitor's batch is read, and the pass then names the tick as its cause.
step repaired logged 'repair from events'
step 'check after the repair' nfk check --config config.yaml
kill $daemon
step stop wait $daemon
echo "=== daemon log"
cat daemon.log
`;

/** The image's root tree in the VM: entered with chroot, run with its own Node and libraries, as root. */
const VM_RUN_IMAGE = `${VM_STEP}for d in proc dev tmp run; do mkdir -p image/$d; done
mount -t proc proc image/proc
mount -o bind /dev image/dev
mount -t tmpfs tmp image/tmp
mount -t tmpfs run image/run
cp config.yaml image/tmp/config.yaml
img() { chroot image /usr/bin/env PATH=/opt/nfkeeper/bin:/usr/local/bin:/usr/bin:/bin HOME=/tmp "$@"; }
step node img node -p 'process.arch + " " + process.version'
step version img nfkeeper version
step apply img nfkeeper apply --config /tmp/config.yaml --no-progress
step check img nfkeeper check --config /tmp/config.yaml --no-progress
`;
