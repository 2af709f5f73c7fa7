/**
 * The Nomad job: its structure as Nomad reads it, and its GC wiring for
 * real: the job's own config, with gc.live.nomad pointed at a fake Nomad
 * agent API on 127.0.0.1, collects the seed's dead allocation in a
 * namespace and keeps the running one.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/config.js';
import { readLiveSet } from '../../src/gc/live.js';
import { createNetns, type Netns } from '../helpers/netns.js';
import { DEAD, DEAD_CHAIN, LIVE, LIVE_CHAIN, NOMAD_RESTORE, file, save } from '../gc/fixtures.js';
import { cli } from '../helpers/cli.js';
import { startupPeakMiB } from '../helpers/benchmarks.js';

const JOB = readFileSync('deploy/nomad/nfkeeper.nomad.hcl', 'utf8');
const template = () => /data = <<EOT\n([\s\S]*?)EOT/.exec(JOB)![1]!;

describe('the Nomad job file', () => {
  it('is a Linux-only system job that reloads on SIGHUP and keeps the owners socket and state on the node', () => {
    expect(JOB).toMatch(/type\s*=\s*"system"/);
    expect(JOB).toMatch(/constraint \{\s*attribute\s*=\s*"\$\{attr\.kernel\.name\}"\s*value\s*=\s*"linux"\s*\}/);
    expect(JOB).toMatch(/constraint \{\s*attribute\s*=\s*"\$\{attr\.cpu\.arch\}"\s*value\s*=\s*"amd64"\s*\}/);
    expect(JOB).toMatch(/change_signal\s*=\s*"SIGHUP"/);
    expect(JOB).toMatch(/cap_drop\s*=\s*\["all"\]/);
    expect(JOB).toMatch(/cap_add\s*=\s*\["net_admin"\]/);
    // The task writes into these host directories (root's): it runs as root, not the image's user.
    expect(JOB).toMatch(/task "nfkeeper" \{\s*driver\s*=\s*"docker"\s*(?:#[^\n]*\n\s*)*user\s*=\s*"0"/);
    for (const dir of ['/run/nfkeeper', '/var/lib/nfkeeper', '/var/cache/nfkeeper']) {
      expect(JOB).toMatch(new RegExp(`source\\s*=\\s*"${dir}"\\s*\\n\\s*target\\s*=\\s*"${dir}"`));
    }
    // What the docker driver must allow for the above, said where an operator reads the job.
    expect(JOB).toMatch(/allow_caps = \[[^\]]*"net_admin"\]/);
    expect(JOB).toMatch(/volumes \{ enabled = true \}/);
    // Memory as the systemd unit and the DaemonSet size it: the reservation above the largest
    // measured start-up peak (BENCHMARKS.md), the ceiling their limit.
    const unitMax = Number(/MemoryMax=(\d+)M/.exec(readFileSync('deploy/systemd/nfkeeper.service', 'utf8'))![1]);
    const podMax = Number(/limits: \{ memory: (\d+)Mi \}/.exec(readFileSync('deploy/kubernetes/daemonset.yaml', 'utf8'))![1]);
    expect(Number(/\bmemory\s*=\s*(\d+)/.exec(JOB)![1])).toBeGreaterThan(startupPeakMiB());
    expect(Number(/memory_max\s*=\s*(\d+)/.exec(JOB)![1])).toBe(unitMax);
    expect(podMax).toBe(unitMax);
    // The workload identity's token reaches the task as NOMAD_TOKEN, which gc.live.nomad sends.
    expect(JOB).toMatch(/identity \{\s*env\s*=\s*true\s*\}/);
  });

  it('its template is a config that collects Nomad\'s tags with live ids from the agent API', () => {
    // HCL would interpolate ${...} in the heredoc: the template must not hold one unescaped.
    expect(template()).not.toMatch(/(^|[^$])\$\{/);
    const c = parseConfig(template(), 'nomad template', { environment: {} });
    expect(c.tables).toHaveLength(1);
    expect(c.gc).toMatchObject({
      enabled: true,
      foreign: [{ family: 'ip', table: 'nat', owner: 'nomad' }, { family: 'ip', table: 'filter', owner: 'nomad' }],
      live: { nomad: { address: 'http://127.0.0.1:4646', namespace: '*' } },
    });
  });
});

describe('the iptables-legacy GC job', () => {
  const job = readFileSync('deploy/nomad/nfkeeper-gc-legacy.nomad.hcl', 'utf8');
  it('runs nfkeeper gc --backend iptables-legacy periodically on Linux legacy clients, with the host\'s xtables lock', () => {
    expect(job).toMatch(/type\s*=\s*"sysbatch"/);
    expect(job).toMatch(/periodic \{\s*crons\s*=\s*\["[^"]+"\]\s*prohibit_overlap\s*=\s*true\s*\}/);
    expect(job).toMatch(/constraint \{\s*attribute\s*=\s*"\$\{attr\.kernel\.name\}"\s*value\s*=\s*"linux"\s*\}/);
    expect(job).toMatch(/constraint \{\s*attribute\s*=\s*"\$\{attr\.cpu\.arch\}"\s*value\s*=\s*"amd64"\s*\}/);
    expect(job).toMatch(/args\s*=\s*\["gc", "--backend", "iptables-legacy", "--config", "\/local\/gc\.yaml"\]/);
    expect(job).toMatch(/cap_add\s*=\s*\["net_admin", "net_raw"\]/);
    expect(job).toMatch(/source\s*=\s*"\/run\/xtables\.lock"\s*\n\s*target\s*=\s*"\/run\/xtables\.lock"/);
    const c = parseConfig(/data = <<EOT\n([\s\S]*?)EOT/.exec(job)![1]!, 'legacy template', { environment: {} });
    // A one-shot keeps its grace clocks only in gc.state: without it, a 5m grace would never pass.
    expect(c.gc).toMatchObject({ grace: 300_000, state: '/var/lib/nfkeeper/gc-legacy-state.json', live: { nomad: { address: 'http://127.0.0.1:4646' } } });
    expect(c.gc!.foreign.every((f) => f.family === 'ip' || f.family === 'ip6')).toBe(true);
  });
});

describe('gc.live.nomad against a fake Nomad agent', () => {
  let server: Server;
  let port = 0;
  let reply: { status: number; body: string } = { status: 200, body: '[]' };
  let requests: IncomingMessage[] = [];
  let ns: Netns;

  beforeAll(async () => {
    server = createServer((req, res) => {
      requests.push(req);
      res.writeHead(reply.status, { 'content-type': 'application/json' }).end(reply.body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    requests = [];
    ns = createNetns('nomad');
    ns.exec('iptables-nft-restore', [], NOMAD_RESTORE);
  });
  afterEach(() => ns.remove());

  /** The job's template, pointed at the fake agent, with the grace at 0s to collect in one run. */
  const jobConfig = () => file(template().replace('http://127.0.0.1:4646', `http://127.0.0.1:${port}`).replace('grace: 5m', 'grace: 0s'), 'yaml');
  const allocs = (list: [string, string][]) => JSON.stringify(list.map(([ID, ClientStatus]) => ({
    ID, NodeID: 'a0b1c2d3-0000-0000-0000-000000000001', Namespace: 'default', JobID: 'countdash', ClientStatus, DesiredStatus: ClientStatus === 'running' ? 'run' : 'stop',
  })));

  it('collects the allocation the agent reports complete and keeps the running one, in one batch', async () => {
    reply = { status: 200, body: allocs([[LIVE, 'running'], [DEAD, 'complete'], ['11111111-2222-3333-4444-555555555555', 'pending']]) };
    const before = save(ns);
    process.env.NOMAD_TOKEN = 'secret-id-from-workload-identity';
    let r;
    try {
      r = await cli('gc', '--config', jobConfig(), '--netns', ns.path, '--json');
    } finally {
      delete process.env.NOMAD_TOKEN;
    }
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.collected).toBe(true);
    expect(j.garbage.map((g: { id: string }) => g.id)).toEqual([DEAD]);
    expect(requests).toHaveLength(1);
    const url = new URL(requests[0]!.url!, 'http://x');
    expect(url.pathname).toBe('/v1/allocations');
    expect(url.searchParams.get('namespace')).toBe('*');
    expect(requests[0]!.headers['x-nomad-token']).toBe('secret-id-from-workload-identity');
    const after = save(ns);
    expect(after).not.toContain(DEAD_CHAIN);
    expect(after).toContain(LIVE_CHAIN);
    expect(after).toBe(before.split('\n').filter((l) => !l.includes(DEAD_CHAIN) && !l.includes(DEAD)).join('\n'));
  });

  it('an agent that fails or answers nonsense stops gc before the kernel is touched', async () => {
    const before = save(ns);
    for (const [status, body, message] of [
      [500, 'rpc error: no leader', /HTTP 500: rpc error: no leader/],
      [403, 'Permission denied', /HTTP 403.*read-job/],
      [200, '{"ID":"x"}', /must be a JSON array/],
      [200, '[{"ClientStatus":"running"}]', /allocation 0 has no valid ID/],
      [200, 'not json', /not JSON/],
    ] as const) {
      reply = { status, body };
      const r = await cli('gc', '--config', jobConfig(), '--netns', ns.path);
      expect(r.code, r.err).toBe(2);
      expect(r.err).toMatch(message);
    }
    expect(save(ns)).toBe(before);
  });

  it('a reply with no allocations makes every tag dead; an unreachable agent is an error, not an empty set', async () => {
    reply = { status: 200, body: '[]' };
    expect(await readLiveSet({ nomad: { address: `http://127.0.0.1:${port}`, namespace: 'default' } })).toEqual(new Set());
    expect(new URL(requests[0]!.url!, 'http://x').searchParams.get('namespace')).toBe('default');
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const dead = (closed.address() as { port: number }).port;
    await new Promise<void>((r) => closed.close(() => r()));
    await expect(readLiveSet({ nomad: { address: `http://127.0.0.1:${dead}`, namespace: '*' } })).rejects.toThrow(/GET \/v1\/allocations failed.*ECONNREFUSED/);
  });
});
