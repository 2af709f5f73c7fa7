/**
 * The container image, built here from Debian's packages and the npm package
 * (scripts/image.sh, rebuilt only when the package changed) and run with
 * podman in a network namespace of the test's own: it keeps the rules there,
 * repairs a deletion, runs as nobody with CAP_NET_ADMIN only, and a missing
 * libnftnl is one line naming the package.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNetns, type Netns } from './helpers/netns.js';
import { FLANNEL_RULES, FLANNEL_YAML, sleep } from './keeper/helpers.js';

const CACHE = process.env.NFKEEPER_CACHE ?? '/var/cache/nfkeeper-test';
const hasPodman = spawnSync('podman', ['--version']).status === 0;
// The Node 24 release scripts/node.sh pins, which the image carries whatever node built it.
const NODE_24 = /\[24\]=([\d.]+)/.exec(readFileSync('scripts/node.sh', 'utf8'))![1];

// See scripts/image.sh: crun and podman's default ulimits fail on machines like this one.
const podman = (args: string[], timeout = 120_000) => spawnSync('podman',
  ['--runtime', 'runc', '--cgroup-manager=cgroupfs', ...args],
  { encoding: 'utf8', timeout, env: { ...process.env, CONTAINERS_CONF: join(CACHE, 'containers.conf') } });

describe.skipIf(!hasPodman)(`container image${hasPodman ? '' : ' (SKIPPED: podman is not installed; bash scripts/setup.sh installs it)'}`, () => {
  let image: string;
  let ns: Netns;
  let dir: string;
  const name = `nfk-test-${process.pid}`;

  beforeAll(() => {
    const built = spawnSync('bash', ['scripts/image.sh'], { encoding: 'utf8', timeout: 900_000 });
    expect(built.status, built.stderr).toBe(0);
    image = built.stdout.trim().split('\n').at(-1)!;
    ns = createNetns('img');
    dir = mkdtempSync(join(tmpdir(), 'nfk-image-'));
    writeFileSync(join(dir, 'config.yaml'), FLANNEL_YAML);
    chmodSync(join(dir, 'config.yaml'), 0o644);  // read by the image's non-root user
  }, 900_000);

  afterAll(() => {
    podman(['rm', '-f', '-t', '2', name]);
    ns?.remove();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('is small and its entrypoint is nfkeeper, as a non-root user', () => {
    const inspect = podman(['image', 'inspect', '--format', '{{json .Config.Entrypoint}} {{.Config.User}} {{.Size}}', image]);
    const [entrypoint, user, size] = inspect.stdout.trim().split(' ');
    expect(entrypoint).toBe('["nfkeeper"]');
    expect(user).toBe('65534:65534');
    expect(Number(size)).toBeLessThan(250e6);
    // No compiler and no -dev files: the package's prebuilt addon is all it runs.
    const tools = podman(['run', '--rm', '--network', 'none', '--entrypoint', 'sh', image, '-c',
      'for t in cc gcc g++ make pkg-config; do command -v $t; done; ls /usr/include/libnftnl /usr/lib/x86_64-linux-gnu/libnftnl.so.11 2>/dev/null; true']);
    expect(tools.status).toBe(0);
    expect(tools.stdout).toBe('');
    const node = podman(['run', '--rm', '--network', 'none', '--entrypoint', 'node', image, '--version']);
    expect([node.status, node.stdout.trim()]).toEqual([0, `v${NODE_24}`]);
  });

  it('podman run --network ns:X --cap-add NET_ADMIN keeps the rules in X and repairs a deletion', async () => {
    const r = podman(['run', '-d', '--rm', '--name', name, '--network', `ns:${ns.path}`, '--cap-add', 'NET_ADMIN',
      '-v', `${join(dir, 'config.yaml')}:/etc/nfkeeper/config.yaml:ro`, image, 'run', '--config', '/etc/nfkeeper/config.yaml']);
    expect(r.status, r.stderr).toBe(0);
    const chain = () => spawnSync('ip', ['netns', 'exec', ns.name, 'nft', 'list', 'chain', 'ip', 'nfkeeper', 'postrouting'], { encoding: 'utf8' });
    const logs = () => {
      const l = podman(['logs', name]);
      return `${l.stdout}${l.stderr}`;
    };
    const rules = (s: string) => s.split('\n').filter((l) => /(return|masquerade)/.test(l)).length;
    const until = async (ok: () => boolean, what: string) => {
      for (let i = 0; i < 300; i++) {
        if (ok()) return;
        await sleep(100);
      }
      throw new Error(`${what}; container log:\n${logs()}`);
    };
    await until(() => rules(chain().stdout) === FLANNEL_RULES.length, 'the rules never appeared in the namespace');
    ns.nft('delete table ip nfkeeper');
    await until(() => rules(chain().stdout) === FLANNEL_RULES.length, 'the deleted table was not repaired');
    // Least privilege: not root, and CAP_NET_ADMIN (bit 12) is the only effective capability.
    const st = podman(['exec', name, 'sh', '-c', 'id -u; grep CapEff /proc/1/status']);
    expect(st.stdout).toMatch(/^65534\nCapEff:\s+0000000000001000$/m);
    expect(logs()).toMatch(/"msg":"repaired/);
  });

  it('without libnftnl the addon says which library and which package, in one line; version and validate still work', () => {
    const lib = '/opt/nfkeeper/lib/node_modules/nfkeeper/prebuilds/linux-x64/glibc/libnftnl.so.11';
    const r = podman(['run', '--rm', '--network', 'none', '--user', '0', '--entrypoint', 'sh',
      '-v', `${join(dir, 'config.yaml')}:/etc/nfkeeper/config.yaml:ro`, image, '-c',
      `rm ${lib} && nfkeeper version && nfkeeper validate --config /etc/nfkeeper/config.yaml && nfkeeper check --config /etc/nfkeeper/config.yaml; echo "exit $?"`]);
    expect(r.stdout).toMatch(/^\d+\.\d+\.\d+\n\/etc\/nfkeeper\/config\.yaml: ok \(1 tables\)\nexit 2\n$/);
    expect(r.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^nfkeeper: libnftnl\.so\.11 not found: apt-get install libnftnl11 \(Fedora: dnf install libnftnl; Alpine: apk add libnftnl\) \(needed by \/opt\/nfkeeper\/\S+nfkeeper\.glibc\.node\)$/),
    ]);
  });
});
