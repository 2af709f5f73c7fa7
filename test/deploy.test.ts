import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

describe('deployment files', () => {
  it('the Dockerfile installs the packed package (no compiler) on a maintained Node base, as a non-root user', () => {
    const df = readFileSync('deploy/container/Dockerfile', 'utf8');
    const base = /^ARG BASE=(\S+)$/m.exec(df)![1]!;
    // Node 16, 18 and 20 are end-of-life (20 since April 2026); bookworm is in Debian LTS.
    expect(base).toMatch(/^docker\.io\/library\/node:(2[2-9]|[3-9]\d)-(bookworm|trixie)-slim$/);
    expect(df).not.toMatch(/g\+\+|libnftnl-dev|build-essential/);
    expect(df).toMatch(/^USER 65534:65534$/m);
    expect(df).toMatch(/^ENTRYPOINT \["nfkeeper"\]$/m);
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
