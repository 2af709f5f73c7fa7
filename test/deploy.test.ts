import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../src/config/config.js';

describe('deployment files', () => {
  it('the DaemonSet runs on the host network with NET_ADMIN only, probes and sized resources', () => {
    const ds = parse(readFileSync('deploy/kubernetes/daemonset.yaml', 'utf8'));
    expect(ds).toMatchObject({ apiVersion: 'apps/v1', kind: 'DaemonSet' });
    const pod = ds.spec.template.spec;
    expect(pod.hostNetwork).toBe(true);
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);
    const c = pod.containers[0];
    expect(c.securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['NET_ADMIN'] });
    expect(c.securityContext.privileged).toBe(false);
    expect(c.livenessProbe.httpGet.path).toBe('/healthz');
    expect(c.readinessProbe.httpGet.path).toBe('/readyz');
    expect(c.args.slice(0, 3)).toEqual(['run', '--config', '/etc/nfkeeper/config.yaml']);
    expect(c.resources.requests).toHaveProperty('memory');
    expect(pod.volumes.find((v: { name: string }) => v.name === 'config').configMap.name).toBe('nfkeeper-config');
    // The owners socket and state file (docs/owners.md defaults) are on the node, not in the pod.
    const mounts = Object.fromEntries(c.volumeMounts.map((m: { name: string; mountPath: string }) => [m.mountPath, m.name]));
    const hostPath = (name: string) => pod.volumes.find((v: { name: string }) => v.name === name)?.hostPath?.path;
    expect(hostPath(mounts['/run/nfkeeper'])).toBe('/run/nfkeeper');
    expect(hostPath(mounts['/var/lib/nfkeeper'])).toBe('/var/lib/nfkeeper');
  });

  it('the ConfigMap holds a config nfkeeper accepts: flannel masquerade rules', () => {
    const cm = parse(readFileSync('deploy/kubernetes/configmap.yaml', 'utf8'));
    expect(cm.kind).toBe('ConfigMap');
    const config = parseConfig(cm.data['config.yaml'], 'configmap');
    expect(config.tables[0]!.chains[0]!.rules.map((r) => r.text)).toContain(
      'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random');
  });

  it('the Nomad job is a system job whose template is a valid config', () => {
    const job = readFileSync('deploy/nomad/nfkeeper.nomad.hcl', 'utf8');
    expect(job).toMatch(/type\s*=\s*"system"/);
    expect(job).toMatch(/change_signal\s*=\s*"SIGHUP"/);
    for (const dir of ['/run/nfkeeper', '/var/lib/nfkeeper']) {
      expect(job).toMatch(new RegExp(`source\\s*=\\s*"${dir}"\\s*\\n\\s*target\\s*=\\s*"${dir}"`));
    }
    const template = /data = <<EOT\n([\s\S]*?)EOT/.exec(job)![1]!;
    expect(parseConfig(template, 'nomad template').tables).toHaveLength(1);
  });

  it('the Dockerfile is multi-stage on Debian slim and builds the addon', () => {
    const df = readFileSync('deploy/container/Dockerfile', 'utf8');
    expect(df.match(/^FROM /gm)).toHaveLength(2);
    expect(df).toMatch(/bookworm-slim/);
    expect(df).toMatch(/libnftnl-dev/);
    expect(df).toMatch(/npm ci/);
  });
});

describe('packaging', () => {
  it('npm pack ships the addon sources, the build script and dist, and no tests or benchmarks', () => {
    const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    const files: string[] = JSON.parse(r.stdout)[0].files.map((f: { path: string }) => f.path);
    expect(files).toContain('binding.gyp');
    expect(files).toContain('native/socket.cc');
    expect(files).toContain('scripts/build-native.mjs');
    expect(files).toContain('bin/nfkeeper.js');
    expect(files).toContain('dist/cli.js');
    expect(files).toContain('LICENSE');
    expect(files.filter((f) => /^(test|bench|build|node_modules|\.ci)\//.test(f))).toEqual([]);
  });

  it('a missing libnftnl or libmnl stops the build with the packages to install', () => {
    const r = spawnSync(process.execPath, ['scripts/build-native.mjs', '--force'], {
      encoding: 'utf8', env: { ...process.env, PKG_CONFIG_LIBDIR: '/nonexistent', PKG_CONFIG_PATH: '' },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/libnftnl-dev libmnl-dev/);
    expect(r.stderr).toMatch(/libnftnl-devel libmnl-devel/);
  });
});
