import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

describe('deployment files', () => {
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
