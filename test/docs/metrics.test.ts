/**
 * docs/metrics.md against the code: every metric KeeperMetrics registers is
 * documented, counters are exported at 0 before the first event, build_info
 * says the version, and the example alert rules are well-formed and use
 * only metrics that exist (promtool checks them too where it is installed), and a live daemon's
 * /metrics passes `promtool check metrics`, its event-loop lag read without the sampling period.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { KeeperMetrics } from '../../src/base/metrics.js';
import { parseConfig } from '../../src/config/config.js';
import { Keeper } from '../../src/keeper/keeper.js';
import { createNetns } from '../helpers/netns.js';
import { FLANNEL_YAML } from '../keeper/helpers.js';
import { tempDir } from '../owners/fixtures.js';
import { nfk, waitFor } from '../cli/spawn.js';

const DOC = readFileSync('docs/metrics.md', 'utf8');
const ALERTS = 'deploy/prometheus/alerts.yaml';

async function exported() {
  const m = new KeeperMetrics(true, { version: '9.8.7' });
  // The keeper names its causes and drift kinds to the metrics when it is made (before start).
  new Keeper({ config: parseConfig('tables: [{ family: ip, name: t, chains: [] }]\n'), metrics: m });
  return { json: await m.registry.getMetricsAsJSON(), text: await m.registry.metrics() };
}

describe('metrics reference', () => {
  it('documents every metric the daemon registers', async () => {
    const { json } = await exported();
    const own = json.filter((m) => !/^nfkeeper_(process|nodejs)_/.test(m.name)).map((m) => m.name);
    expect(own.length).toBeGreaterThan(15);
    const undocumented = own.filter((name) => !DOC.includes(`| \`${name}\` | ${json.find((m) => m.name === name)!.type} |`));
    expect(undocumented).toEqual([]);
    // The process metrics are documented as their groups.
    expect(json.some((m) => m.name.startsWith('nfkeeper_process_'))).toBe(true);
    expect(DOC).toContain('`nfkeeper_process_*`');
    expect(DOC).toContain('`nfkeeper_nodejs_*`');
    // And nothing documented is gone from the code.
    const documented = [...DOC.matchAll(/^\| `(nfkeeper_[a-z_]+)` \|/gm)].map((m) => m[1]!);
    expect(documented.filter((n) => !own.includes(n))).toEqual([]);
  });

  it('exports every counter at 0 before the first event, with each label value, and build_info 1', async () => {
    const { json, text } = await exported();
    for (const m of json.filter((x) => String(x.type) === 'counter' && !/^nfkeeper_(process|nodejs)_/.test(x.name))) {
      expect(text, m.name).toMatch(new RegExp(`^${m.name}(\\{[^}]*\\})? 0$`, 'm'));
    }
    for (const cause of ['startup', 'event', 'tick', 'overflow', 'reload', 'owners', 'manual']) {
      expect(text).toContain(`nfkeeper_repairs_total{cause="${cause}"} 0\n`);
      expect(DOC).toContain(`\`${cause}\``);
    }
    for (const kind of [...text.matchAll(/^nfkeeper_drift_total\{kind="([a-z-]+)"\} 0$/gm)].map((m) => m[1]!)) {
      expect(DOC).toContain(`\`${kind}\``);
    }
    expect(text).toContain(`nfkeeper_build_info{version="9.8.7",node="${process.version}"} 1\n`);
  });
});

describe('example alert rules', () => {
  const rules = parse(readFileSync(ALERTS, 'utf8')).groups.flatMap((g: { rules: unknown[] }) => g.rules) as
    { alert: string; expr: string; for?: string; labels: { severity: string }; annotations: { summary: string } }[];

  it('each has an expression over existing metrics, a severity and a summary, and is in the doc', async () => {
    const names = new Set((await exported()).json.map((m) => m.name));
    expect(rules.length).toBeGreaterThanOrEqual(8);
    for (const r of rules) {
      expect(r.alert).toMatch(/^Nfkeeper[A-Z][A-Za-z]+$/);
      expect(['info', 'warning', 'critical']).toContain(r.labels.severity);
      expect(r.annotations.summary.length).toBeGreaterThan(10);
      if (r.for !== undefined) expect(r.for).toMatch(/^\d+[smh]$/);
      for (const [name] of r.expr.matchAll(/nfkeeper_[a-z_]+/g)) expect(names, `${r.alert}: ${name}`).toContain(name);
      expect(DOC).toContain(`\`${r.alert}\``);
    }
  });

  const promtool = spawnSync('promtool', ['--version']).status === 0;
  it.skipIf(!promtool)('pass promtool check rules', () => {
    const r = spawnSync('promtool', ['check', 'rules', ALERTS], { encoding: 'utf8' });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`SUCCESS: ${rules.length} rules found`));
  });
});

const hasPromtool = spawnSync('promtool', ['--version']).status === 0;

describe.skipIf(!hasPromtool)(`a live daemon's /metrics${hasPromtool ? '' : ' (SKIPPED: no promtool; bash scripts/setup.sh --test unpacks it)'}`, () => {
  it('passes promtool check metrics, and an idle daemon reads its event-loop lag below the sampling period', { timeout: 120_000 }, async () => {
    const ns = createNetns('promtool');
    const dir = tempDir('promtool');
    const config = join(dir, 'flannel.yaml');
    writeFileSync(config, FLANNEL_YAML);
    const free = createServer();
    await new Promise<void>((r) => free.listen(0, '127.0.0.1', () => r()));
    const port = (free.address() as AddressInfo).port;
    await new Promise((r) => free.close(r));
    const d = nfk(['run', '--config', config, '--netns', ns.path, '--metrics', `127.0.0.1:${port}`, '--log-level', 'warn']);
    try {
      const get = async (path: string) => {
        try {
          const r = await fetch(`http://127.0.0.1:${port}${path}`);
          return { status: r.status, text: await r.text() };
        } catch {
          return { status: 0, text: '' };
        }
      };
      await waitFor('the daemon ready', async () => (await get('/readyz')).status === 200, 90_000);
      // The lag sampler fires once a second: a few samples, then a scrape.
      await new Promise((r) => setTimeout(r, 3500));
      const body = (await get('/metrics')).text;
      const r = spawnSync('promtool', ['check', 'metrics'], { input: body, encoding: 'utf8' });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(r.stdout + r.stderr).toBe('');
      for (const name of ['nfkeeper_ready 1', 'nfkeeper_nodejs_eventloop_lag_p99_seconds', 'nfkeeper_process_resident_memory_bytes']) {
        expect(body).toContain(name);
      }
      expect(body).not.toMatch(/^nfkeeper_nodejs_active_\w+_total/m);
      // Node's histogram holds the time between the sampler's firings (1 s and the lag): the period
      // is subtracted, so only a loop blocked for a whole second could read 1 s or more here.
      const p99 = Number(/^nfkeeper_nodejs_eventloop_lag_p99_seconds (\S+)$/m.exec(body)![1]);
      expect(p99).toBeGreaterThanOrEqual(0);
      expect(p99).toBeLessThan(1);
    } finally {
      d.child.kill('SIGTERM');
      await d.exited;
      ns.remove();
    }
  });
});
