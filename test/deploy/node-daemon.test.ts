/**
 * The Kubernetes ConfigMap's config under the real daemon, as on a node:
 * `nfkeeper run` in a namespace reads flannel's subnet.env through
 * ${NAME}, installs that node's rules, exports build_info and its counters
 * at 0 before the first event, and a reload (SIGHUP) picks up a changed
 * subnet.env.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createNetns, type Netns } from '../helpers/netns.js';
import { tempDir } from '../helpers/tmp.js';
import { sleep } from '../helpers/wait.js';
import { chainLines } from '../keeper/helpers.js';

const VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;

async function until<T>(f: () => Promise<T> | T, ok: (v: T) => boolean, what: string): Promise<T> {
  let v: T | undefined;
  for (let i = 0; i < 150; i++) {
    try {
      v = await f();
      if (ok(v)) return v;
    } catch { /* not yet */ }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(v)})`);
}

describe('the ConfigMap config under nfkeeper run', () => {
  let ns: Netns;
  let dir: string;
  beforeEach(() => {
    ns = createNetns('node');
    dir = tempDir('node');
  });
  afterEach(() => {
    ns.remove();
  });

  it('installs this node\'s rules from subnet.env, counters at 0 before any event, and a reload reads subnet.env again', async () => {
    const env = join(dir, 'subnet.env');
    const config = join(dir, 'config.yaml');
    writeFileSync(env, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n');
    const cm = parse(readFileSync('deploy/kubernetes/configmap.yaml', 'utf8'));
    writeFileSync(config, (cm.data['config.yaml'] as string).replace('/run/flannel/subnet.env', env));
    const port = 20000 + ((process.pid + 7919) % 20000);
    const child = spawn(process.execPath, ['bin/nfkeeper.js', 'run', '--config', config, '--netns', ns.path, '--record-dir', ns.record,
      '--metrics', `127.0.0.1:${port}`, '--interval', '1h'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await until(() => fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status), (s) => s === 200, `/readyz (${stderr})`);
      // flannel v0.21+'s FLANNEL-POSTRTG, kube-proxy's mark first (docs/operations.md).
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')).toEqual([
        'meta mark & 0x00004000 == 0x00004000 return',
        'ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return',
        'ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
        'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
        'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
        'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
      ]);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).toContain(`nfkeeper_build_info{version="${VERSION}",node="${process.version}"} 1\n`);
      // Nothing has happened since start-up: the event-caused series exist, at 0.
      for (const line of ['nfkeeper_repairs_total{cause="event"} 0', 'nfkeeper_repairs_total{cause="tick"} 0',
        'nfkeeper_drift_total{kind="rules-differ"} 0', 'nfkeeper_event_overflows_total 0', 'nfkeeper_errors_total 0',
        'nfkeeper_owned_gc_collected_total{kind="chain"} 0', 'nfkeeper_foreign_gc_collected_total 0']) {
        expect(metrics).toContain(`${line}\n`);
      }
      // flannel's lease changes (a new node subnet after a restart); a reload reads the file again.
      writeFileSync(env, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\n');
      child.kill('SIGHUP');
      await until(() => chainLines(ns, 'ip', 'nfkeeper', 'postrouting')[3], (l) => l === 'ip saddr != 10.244.0.0/16 ip daddr 10.244.7.0/24 return', 'the reloaded rule');
      // A lease file that loses a variable is a rejected reload: the rules stay, the metric says so.
      writeFileSync(env, 'FLANNEL_NETWORK=10.244.0.0/16\n');
      child.kill('SIGHUP');
      await until(() => fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text()), (t) => t.includes('nfkeeper_last_reload_failed 1\n'), 'the rejected reload');
      expect(chainLines(ns, 'ip', 'nfkeeper', 'postrouting')[3]).toBe('ip saddr != 10.244.0.0/16 ip daddr 10.244.7.0/24 return');
    } finally {
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });
});
